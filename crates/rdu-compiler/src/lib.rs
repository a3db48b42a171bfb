//! The `rdu` compiler: a model spec becomes one authored program per layer, the layers are
//! grouped into kinds (programs equal up to the names they bind), and each kind is lifted,
//! lowered to a spatial program for the SN50 and certified once.
//!
//! Modules in the order data flows through them: [`model`] (spec, config import, presets,
//! authored programs), [`lang`] (program text, digest, renaming), [`front`] (lift to a typed
//! graph), [`graph`] (dataflow IR and the reference interpreter), [`lower`] (passes and the
//! streamed model), [`certify`], [`deploy`] (the driver: a model at a cut lowered and certified),
//! [`fit`].

pub mod certify;
pub mod deploy;
pub mod error;
pub mod fit;
pub mod front;
pub mod graph;
pub mod lang;
pub mod lower;
pub mod model;
pub mod reference;
pub mod verify;

pub use error::Error;
