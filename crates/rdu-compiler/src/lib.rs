//! The `rdu` compiler: a model spec becomes one authored program per layer, the layers are
//! grouped into kinds (programs equal up to the names they bind), and each kind is lifted,
//! lowered to a spatial program for the SN50 and certified once.
//!
//! Modules in the order data flows through them: [`model`] (spec, config import, presets,
//! authored programs), [`lang`] (program text, digest, renaming), [`front`] (lift to a typed
//! graph), [`graph`] (dataflow IR and the reference interpreter), [`lower`] (the passes),
//! [`certify`], [`fit`], [`deploy`] (a model as the RDU runs it — `StreamedModel`, its bundle,
//! schedule and roofline — and the driver that lowers and certifies one), [`verify`].

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

pub use deploy::{
    lower_batched_decode_streamed, lower_batched_tp_decode_streamed, lower_decode_streamed, lower_forward_streamed,
    lower_prefill_streamed, lower_prefill_tp_streamed, lower_tp_decode_streamed, LayerBinding, LayerKind,
    StreamedModel, StreamedReject,
};
pub use error::Error;
pub use model::kinds::{layer_kinds, rebind, rebind_via, renaming};
pub use model::storage::Storage;
