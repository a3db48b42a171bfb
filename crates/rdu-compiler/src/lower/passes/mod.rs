//! The lowering passes, one file each, in the order `lower::lower` runs them.

pub mod fuse;
pub mod place;
pub mod section;
pub mod select;
pub mod tensor_parallel;
pub mod tile;

mod stored;
pub use stored::from_stored;
