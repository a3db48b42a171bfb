//! Deployment: a model as the RDU runs it — one lowered, certified program per LAYER KIND, and
//! a manifest binding every layer to its kind (see `shared/seed/streamed-module.txt`). It sits
//! above lowering (`crate::lower`) and certification (`crate::certify`), which know nothing of it.
//!
//! What such a model is (`model.rs`: `StreamedModel`), how its step is scheduled and costed
//! (`schedule.rs`, `roofline.rs`: the model's floor, computed there only) and written
//! (`bundle.rs`). How layers group into kinds is the model's (`crate::model::kinds`), re-exported
//! here.
//!
//! The driver: [`deploy`] is the one entry — the embedding, one program per layer kind and the
//! head, each lowered and certified once, every layer bound to its kind; `Cut::validate` holds
//! the size checks, `part::lower_part` how a program is certified (whole, on reduced rows, or
//! against the unsplit program over its chips), `programs::Driver` which program each part is
//! and the loop over the kinds. `lower_*_streamed` (`cuts.rs`) name the cuts for callers;
//! [`estimate_streamed`] and [`Estimator`] run the same driver without numbers.
//!
//! ★ A weight moves as it is stored: a product over a weight stored in a block format (Q8_0,
//! FP8, MXFP4) folds its blocks on the chip (`passes::from_stored`) only where `Storage` says
//! so; any other weight is read dense.

mod bundle;
mod cuts;
mod estimate;
mod memory;
pub(crate) mod model;
mod part;
mod programs;
mod roofline;
pub(crate) mod schedule;
pub mod speculative;

pub use crate::model::kinds::{
    layer_kinds, layer_kinds_for, rebind, rebind_via, renaming, HiddenNames, KindGroup, Storage, KINDS_CTX, SINGLE,
    STACKED,
};
pub use cuts::{
    lower_batched_decode_streamed, lower_batched_tp_decode_streamed, lower_decode_streamed, lower_forward_streamed,
    lower_prefill_streamed, lower_prefill_tp_streamed, lower_tp_decode_streamed, lower_verify_streamed,
};
pub use estimate::{estimate_streamed, Estimator, Spine};
pub use memory::free_memory;
pub use model::{
    LayerBinding, LayerKind, LowerOptions, ProgramPart, Progress, StepEstimate, StreamedModel, StreamedReject,
    ESTIMATE_ONLY,
};
pub use programs::HEAD_INPUT;
pub use roofline::{bundle_floor, ModelFloor, DENSE_BYTES_PER_ELEMENT, Q8_BYTES_PER_ELEMENT};
pub use schedule::{schedule_cost, ScheduleCost, Scheduled};

use crate::fit::admits_tp;
use crate::model::author::covers;
use crate::model::kinds::kinds_of_sources;
use crate::model::spec::{Cut, ModelSpec};
use part::Check;
use programs::Driver;

/// The embedding and head programs are certified numerically on at most this many vocabulary
/// rows (their products are tiled along the vocabulary, and every tile runs the same code).
pub const CERTIFY_VOCAB_ROWS: usize = 8192;

/// Lowers and certifies `spec` at `cut`: the embedding, one program per layer kind and the
/// head, every layer bound to its kind. Refused in one line (`StreamedReject::Invalid`) when
/// the cut's sizes cannot make a step (`Cut::validate`), the model does not admit its
/// tensor-parallel width, or its weights and states do not fit the chip's memory or its
/// certification this machine's (`memory`).
pub fn deploy(spec: &ModelSpec, cut: &Cut, opts: LowerOptions<'_>) -> Result<StreamedModel, StreamedReject> {
    let cut = *cut;
    cut.validate()?;
    admit(spec, cut, &opts.storage)?;
    let started = std::time::Instant::now();
    let LowerOptions { chip, storage, seed, progress } = opts;
    let driver = Driver { spec, cut, chip: &chip, storage: &storage, seed, check: Check::Numbers };
    let layer_sources = driver.layer_sources();
    memory::check_chip(spec, cut, &storage, &chip, &layer_sources)?;
    memory::check_host(spec, cut, &storage, &layer_sources, free_memory())?;
    let groups = kinds_of_sources(spec, &layer_sources);
    let total = groups.len() + 2;
    progress(Progress::Program { index: 0, total, name: "embed" });
    let embed = driver.embed(progress)?;
    let (kinds, layers) = driver.kinds(&layer_sources, &groups, (1, total), progress)?;
    progress(Progress::Program { index: total - 1, total, name: "head" });
    let head = driver.head(progress)?;
    Ok(StreamedModel {
        spec: spec.clone(),
        cut,
        chip,
        storage,
        embed,
        kinds,
        head,
        layers,
        layer_sources,
        lowering_seconds: started.elapsed().as_secs_f64(),
    })
}

/// Whether `spec` admits a tensor-parallel `cut`'s width with its storage (`fit::admits_tp`)
/// and has a vocabulary to split its head over; the refusal is one line naming the dimension.
fn admit(spec: &ModelSpec, cut: Cut, storage: &Storage) -> Result<(), StreamedReject> {
    if !cut.is_split() {
        return Ok(());
    }
    let tp = cut.tp();
    admits_tp(spec, tp, storage).map_err(|r| StreamedReject::Invalid(r.to_string()))?;
    if !covers(spec.vocab, tp) {
        return Err(StreamedReject::Invalid(format!(
            "a vocabulary of {} is too small to split the head over {tp} chips",
            spec.vocab
        )));
    }
    Ok(())
}

impl Cut {
    /// The one-line refusal of a cut whose sizes cannot make a step: no tokens, sequences,
    /// chunk rows, drafted tokens or context positions, or a prefill chunk or verify step
    /// longer than its context.
    pub fn validate(self) -> Result<(), StreamedReject> {
        let invalid = |m: &str| Err(StreamedReject::Invalid(m.to_string()));
        if matches!(self, Cut::Forward { seq: 0 }) {
            return invalid("the sequence length must be at least 1");
        }
        if self.batch() == Some(0) {
            return invalid("a batch holds at least 1 sequence");
        }
        if self.chunk() == Some(0) {
            return invalid("the chunk must hold at least 1 token");
        }
        if self.ctx() == Some(0) {
            return invalid("the context must hold at least 1 position");
        }
        if self.draft() == Some(0) {
            return invalid("a verify step checks at least 1 drafted token");
        }
        if let (Some(draft), Some(ctx)) = (self.draft(), self.ctx()) {
            if draft >= ctx {
                return Err(StreamedReject::Invalid(format!(
                    "a verify step of {} rows does not fit a context of {ctx} positions; use --draft-tokens {} or less",
                    draft + 1,
                    ctx - 1
                )));
            }
        }
        if let (Some(chunk), Some(ctx)) = (self.chunk(), self.ctx()) {
            if chunk > ctx {
                return Err(StreamedReject::Invalid(format!(
                    "a chunk of {chunk} tokens does not fit a context of {ctx} positions; use --chunk {ctx} or less"
                )));
            }
        }
        Ok(())
    }

    /// The one-chip counterpart of a tensor-parallel cut (`Decode`, `Batched`, `Prefill` or a
    /// one-chip `Verify`): its replicated embedding, and the unsplit programs its kinds and
    /// head are certified against. Any other cut is its own.
    pub fn unsplit(self) -> Cut {
        match self {
            Cut::Tp { ctx, .. } => Cut::Decode { ctx },
            Cut::BatchedTp { batch, ctx, .. } => Cut::Batched { batch, ctx },
            Cut::PrefillTp { chunk, ctx, .. } => Cut::Prefill { chunk, ctx },
            Cut::Verify { draft, batch, ctx, .. } => Cut::Verify { draft, batch, tp: 1, ctx },
            other => other,
        }
    }
}
