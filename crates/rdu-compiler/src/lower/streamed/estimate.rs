//! [`estimate_streamed`]: a model lowered exactly as its bundle would be, for its estimate
//! only — every program's structure and resources checked, its numbers not — and
//! [`Estimator`], which lowers several cuts of one model sharing what they share (the
//! embedding, which a tensor-parallel cut replicates from its one-chip counterpart, and the
//! one-chip head; a tensor-parallel head is vocabulary-parallel, its own at each width), for
//! `rdu plan`.
//!
//! The programs, kinds, placements and costs are the ones `lower_*_streamed` produce for the
//! same cut (`tests/estimate.rs` holds the two to exactly the same step estimate), so an
//! estimate is the lowering's estimate; what it omits is numeric certification — the simulator
//! against the reference interpreter at real shapes, minutes per model — which a cost estimate
//! does not need. Every certificate of such a model says [`ESTIMATE_ONLY`], and
//! `StreamedModel::bundle` refuses it.

use super::deploy::{
    bind_layers, canonical, embed_part, head_part, lower_part, lower_resident, Check, LayerKind, LowerOptions,
    ProgramPart, Progress, StreamedModel, StreamedReject, ESTIMATE_ONLY,
};
use super::kinds::{kinds_of_sources, Storage};
use crate::fit::admits_tp;
use crate::lang::Source;
use crate::model::author::source_of;
use crate::model::spec::{Cut, ModelSpec};
use rdu_spatial::chip::Chip;

/// Lowers `spec` at `cut` as `lower_*_streamed` of that cut does — the same programs, kinds,
/// bindings and costs — checking each program's structure and resources but not its numbers.
/// For planning and comparing deployments (`StreamedModel::step_estimate`); never a bundle.
pub fn estimate_streamed(spec: &ModelSpec, cut: Cut, opts: LowerOptions<'_>) -> Result<StreamedModel, StreamedReject> {
    let LowerOptions { chip, storage, seed, progress } = opts;
    let estimator = Estimator::new(spec, chip, storage, seed);
    let spine = estimator.spine(cut, progress)?;
    estimator.estimate(cut, &spine, progress)
}

/// Lowers cuts of one model for their estimates ([`estimate_streamed`]); the embedding and the
/// one-chip head, which depend on the one-chip counterpart of a cut only
/// ([`Estimator::spine_cut`]), are lowered once by [`Estimator::spine`] and shared by every cut
/// that runs them (a tensor-parallel cut lowers its own split head).
pub struct Estimator {
    spec: ModelSpec,
    chip: Chip,
    storage: Storage,
    seed: u64,
}

/// The embedding and head programs of a cut's one-chip counterpart.
#[derive(Clone, Debug)]
pub struct Spine {
    pub cut: Cut,
    pub embed: ProgramPart,
    pub head: ProgramPart,
}

impl Estimator {
    pub fn new(spec: &ModelSpec, chip: Chip, storage: Storage, seed: u64) -> Estimator {
        Estimator { spec: spec.clone(), chip, storage, seed }
    }

    /// The cut whose embedding and head `cut` runs: `cut` itself on one chip; a
    /// tensor-parallel cut's replicated embedding is its decode (or batched) counterpart's, as
    /// `lower_tp_decode_streamed` lowers it (its head is split over the chips instead).
    pub fn spine_cut(cut: Cut) -> Cut {
        super::tp::unsplit_cut(cut)
    }

    /// The embedding and head `cut` runs, lowered and checked for structure and resources.
    pub fn spine(&self, cut: Cut, progress: &mut dyn FnMut(Progress<'_>)) -> Result<Spine, StreamedReject> {
        validate(cut)?;
        let at = Self::spine_cut(cut);
        let (spec, storage, chip, seed) = (&self.spec, &self.storage, &self.chip, self.seed);
        progress(Progress::Program { index: 0, total: 2, name: "embed" });
        let embed = embed_part(spec, at, storage, chip, seed, Check::Structure, progress)?;
        progress(Progress::Program { index: 1, total: 2, name: "head" });
        let head = head_part(spec, at, storage, chip, seed, Check::Structure, progress)?;
        Ok(Spine { cut: at, embed, head })
    }

    /// `cut` lowered for its estimate, with `spine` (from [`Estimator::spine`] of a cut with the
    /// same [`Estimator::spine_cut`]) as its embedding and head.
    pub fn estimate(
        &self,
        cut: Cut,
        spine: &Spine,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<StreamedModel, StreamedReject> {
        validate(cut)?;
        if spine.cut != Self::spine_cut(cut) {
            return Err(StreamedReject::Invalid(format!(
                "the embedding and head of {} are not those of {}",
                spine.cut.describe(),
                cut.describe()
            )));
        }
        let tp = matches!(cut, Cut::Tp { .. } | Cut::BatchedTp { .. });
        let (spec, storage, chip, seed) = (&self.spec, &self.storage, &self.chip, self.seed);
        if tp {
            admits_tp(spec, cut.tp(), storage).map_err(|r| StreamedReject::Invalid(r.to_string()))?;
        }
        let started = std::time::Instant::now();
        let layer_sources: Vec<Source> = (0..spec.n_layers()).map(|l| source_of(spec, l, cut, storage)).collect();
        let groups = kinds_of_sources(spec, &layer_sources);
        let mut kinds = Vec::new();
        let mut layers = vec![None; spec.n_layers()];
        for (i, group) in groups.iter().enumerate() {
            progress(Progress::Program { index: i, total: groups.len(), name: &group.name });
            let canon = canonical(&layer_sources[group.representative()], group.representative(), &group.name, cut)?;
            let part = if tp {
                // The lowering's own code, its numbers unchecked.
                super::tp::tp_kind(
                    spec,
                    cut,
                    storage,
                    group,
                    &canon,
                    groups.len(),
                    chip,
                    seed,
                    Check::Structure,
                    progress,
                )?
            } else {
                // As the lowering does: the kinds share the chip so that they stay resident
                // together; a kind that does not fit its share in one section takes the whole chip.
                lower_resident(chip, cut, groups.len(), |on| {
                    lower_part(&group.name, &canon, None, true, on, seed, Check::Structure, progress)
                })?
            };
            bind_layers(&part, &canon, &group.name, &group.layers, &layer_sources, &mut layers)?;
            kinds.push(LayerKind { program: part, layers: group.layers.clone() });
        }
        let layers = layers.into_iter().map(|b| b.expect("every layer belongs to a kind")).collect();
        // A tensor-parallel cut's head is vocabulary-parallel, its own for each width.
        let head = if tp {
            super::tp::tp_head(spec, cut, storage, chip, seed, Check::Structure, progress)?
        } else {
            spine.head.clone()
        };
        Ok(StreamedModel {
            spec: spec.clone(),
            cut,
            chip: chip.clone(),
            storage: storage.clone(),
            embed: spine.embed.clone(),
            kinds,
            head,
            layers,
            layer_sources,
            lowering_seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// The one-line refusal of a cut whose sizes cannot make a step (as the lowering refuses it).
fn validate(cut: Cut) -> Result<(), StreamedReject> {
    let invalid = |m: &str| Err(StreamedReject::Invalid(m.to_string()));
    if matches!(cut, Cut::Forward { seq: 0 }) {
        return invalid("the sequence length must be at least 1");
    }
    if cut.batch() == Some(0) {
        return invalid("a batch holds at least 1 sequence");
    }
    if cut.chunk() == Some(0) {
        return invalid("the chunk must hold at least 1 token");
    }
    if cut.ctx() == Some(0) {
        return invalid("the context must hold at least 1 position");
    }
    if let (Some(chunk), Some(ctx)) = (cut.chunk(), cut.ctx()) {
        if chunk > ctx {
            return Err(StreamedReject::Invalid(format!(
                "a chunk of {chunk} tokens does not fit a context of {ctx} positions; use --chunk {ctx} or less"
            )));
        }
    }
    Ok(())
}

/// Whether `part` was lowered for an estimate only (its numbers not certified).
pub(super) fn estimate_only(part: &ProgramPart) -> bool {
    part.certificate.checks.iter().any(|c| c == ESTIMATE_ONLY)
}
