//! A model as the RDU would run it: one lowered, certified program per LAYER KIND, and a
//! manifest binding every layer to its kind (see `shared/seed/streamed-module.txt`).
//!
//! What such a model is (`model.rs`), how layers group into kinds (`kinds.rs`), how its step
//! is scheduled and costed (`schedule.rs`, `roofline.rs`) and written (`bundle.rs`). The
//! driver that lowers and certifies one is `crate::deploy`; its entry points are re-exported
//! here under their names.
//!
//! ★ A weight moves as it is stored: a product over a weight stored Q8_0 folds its blocks on
//! the chip (`passes::from_q8`) only where `Storage` says so; any other weight is read dense.

mod bundle;
pub(crate) mod kinds;
pub(crate) mod model;
mod roofline;
pub(crate) mod schedule;

pub use crate::deploy::{
    estimate_streamed, lower_batched_decode_streamed, lower_batched_tp_decode_streamed, lower_decode_streamed,
    lower_forward_streamed, lower_prefill_streamed, lower_prefill_tp_streamed, lower_tp_decode_streamed,
    lower_verify_streamed, Estimator, Spine,
};
pub use kinds::{
    layer_kinds, layer_kinds_for, rebind, rebind_via, renaming, HiddenNames, KindGroup, Storage, KINDS_CTX, SINGLE,
    STACKED,
};
pub use model::{
    LayerBinding, LayerKind, LowerOptions, ProgramPart, Progress, StepEstimate, StreamedModel, StreamedReject,
    ESTIMATE_ONLY,
};
pub use roofline::{ModelFloor, DENSE_BYTES_PER_ELEMENT, Q8_BYTES_PER_ELEMENT};
pub use schedule::{schedule_cost, ScheduleCost, Scheduled};
