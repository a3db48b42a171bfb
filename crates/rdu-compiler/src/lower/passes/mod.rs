//! The lowering passes, one file each, in the order `lower::lower` runs them.

pub mod fuse;
pub mod place;
pub mod section;
pub mod select;
pub mod tensor_parallel;
pub mod tile;

mod q8;
pub use q8::from_q8;
