//! A model as the RDU would run it: one lowered, certified program per LAYER KIND, and a
//! manifest binding every layer to its kind (see `shared/seed/streamed-module.txt`).
//!
//! ★ A weight moves as it is stored: a product over a weight stored Q8_0 folds its blocks on
//! the chip (`passes::from_q8`) only where `Storage` says so; any other weight is read dense.

mod bundle;
mod deploy;
mod estimate;
mod kinds;
mod prefill;
mod roofline;
mod schedule;
mod tp;

pub use deploy::{
    lower_batched_decode_streamed, lower_decode_streamed, lower_forward_streamed, LayerBinding, LayerKind,
    LowerOptions, ProgramPart, Progress, StepEstimate, StreamedModel, StreamedReject, ESTIMATE_ONLY,
};
pub use estimate::{estimate_streamed, Estimator, Spine};
pub use kinds::{
    layer_kinds, layer_kinds_for, rebind, rebind_via, renaming, HiddenNames, KindGroup, Storage, KINDS_CTX, SINGLE,
    STACKED,
};
pub use prefill::lower_prefill_streamed;
pub use roofline::{ModelFloor, DENSE_BYTES_PER_ELEMENT, Q8_BYTES_PER_ELEMENT};
pub use schedule::{schedule_cost, ScheduleCost, Scheduled};
pub use tp::{lower_batched_tp_decode_streamed, lower_tp_decode_streamed};
