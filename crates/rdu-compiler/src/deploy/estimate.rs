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
//! does not need. Every certificate of such a model says `ESTIMATE_ONLY`, and
//! `StreamedModel::bundle` refuses it.

use super::admit;
use super::part::Check;
use super::programs::Driver;
use crate::deploy::model::{LowerOptions, ProgramPart, Progress, StreamedModel, StreamedReject};
use crate::model::kinds::{kinds_of_sources, Storage};
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
        cut.unsplit()
    }

    /// The embedding and head `cut` runs, lowered and checked for structure and resources.
    pub fn spine(&self, cut: Cut, progress: &mut dyn FnMut(Progress<'_>)) -> Result<Spine, StreamedReject> {
        cut.validate()?;
        let at = Self::spine_cut(cut);
        let driver = self.driver(at);
        progress(Progress::Program { index: 0, total: 2, name: "embed" });
        let embed = driver.embed(progress)?;
        progress(Progress::Program { index: 1, total: 2, name: "head" });
        let head = driver.head(progress)?;
        Ok(Spine { cut: at, embed, head })
    }

    /// The driver of `cut` that checks structure and resources only.
    fn driver(&self, cut: Cut) -> Driver<'_> {
        Driver {
            spec: &self.spec,
            cut,
            chip: &self.chip,
            storage: &self.storage,
            seed: self.seed,
            check: Check::Structure,
        }
    }

    /// `cut` lowered for its estimate, with `spine` (from [`Estimator::spine`] of a cut with the
    /// same [`Estimator::spine_cut`]) as its embedding and head.
    pub fn estimate(
        &self,
        cut: Cut,
        spine: &Spine,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<StreamedModel, StreamedReject> {
        cut.validate()?;
        if spine.cut != Self::spine_cut(cut) {
            return Err(StreamedReject::Invalid(format!(
                "the embedding and head of {} are not those of {}",
                spine.cut.describe(),
                cut.describe()
            )));
        }
        admit(&self.spec, cut, &self.storage)?;
        let started = std::time::Instant::now();
        let driver = self.driver(cut);
        let layer_sources = driver.layer_sources();
        let groups = kinds_of_sources(&self.spec, &layer_sources);
        let (kinds, layers) = driver.kinds(&layer_sources, &groups, (0, groups.len()), progress)?;
        // A tensor-parallel cut's head is vocabulary-parallel, its own for each width.
        let head = match driver.split() {
            Some(_) => driver.head(progress)?,
            None => spine.head.clone(),
        };
        Ok(StreamedModel {
            spec: self.spec.clone(),
            cut,
            chip: self.chip.clone(),
            storage: self.storage.clone(),
            embed: spine.embed.clone(),
            kinds,
            head,
            layers,
            layer_sources,
            lowering_seconds: started.elapsed().as_secs_f64(),
        })
    }
}
