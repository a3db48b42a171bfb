//! A model as its deployment holds it: one lowered, certified program per layer kind plus the
//! embedding and the head ([`ProgramPart`]), every layer bound to its kind ([`LayerBinding`]),
//! and what a lowering is told ([`LowerOptions`]) and may refuse ([`StreamedReject`]). The
//! driver that builds a [`StreamedModel`] is the `deploy` module.

use crate::certify::{Certificate, CertifyFault};
use crate::front::Refusal;
use crate::lang::Source;
use crate::model::spec::{Cut, ModelSpec};
use crate::model::storage::Storage;
use rdu_spatial::chip::Chip;
use rdu_spatial::cost::StepCost;
use rdu_spatial::manifest::AttachedRole;
use rdu_spatial::program::SpatialProgram;
use std::collections::BTreeMap;

/// How to lower.
pub struct LowerOptions<'a> {
    pub chip: Chip,
    pub storage: Storage,
    /// Seed of the certification inputs.
    pub seed: u64,
    /// Called once per program as it starts (`--dump-after` and progress bars hook in here).
    pub progress: &'a mut dyn FnMut(Progress<'_>),
}

/// What the lowering is doing, for progress reports and `--dump-after`.
pub enum Progress<'p> {
    /// Starting program `index` of `total` (`name`).
    Program { index: usize, total: usize, name: &'p str },
    /// A pass finished on the program being lowered.
    Pass { program: &'p str, pass: &'p str, spatial: &'p SpatialProgram },
}

/// One lowered, certified program: a layer kind, the embedding or the head.
#[derive(Clone, Debug)]
pub struct ProgramPart {
    pub name: String,
    pub source: Source,
    pub digest: String,
    pub spatial: SpatialProgram,
    pub certificate: Certificate,
    pub cost: StepCost,
    /// Every tensor the program reads or produces by name (all but its temporaries).
    pub declared: Vec<String>,
    /// Names that differ from the bundle's (the head's depth-independent input); empty otherwise.
    pub bind: BTreeMap<String, String>,
    /// The sources certification ran against besides `source`: the unsplit program of a
    /// tensor-parallel kind, the reduced program whose numbers were checked.
    pub certified_against: Vec<(AttachedRole, Source)>,
}

impl ProgramPart {
    /// Whether this program was lowered for an estimate only (its numbers not certified).
    pub fn estimate_only(&self) -> bool {
        self.certificate.checks.iter().any(|c| c == ESTIMATE_ONLY)
    }
}

/// The check a certificate carries when its numbers were not checked
/// (`estimate_streamed`); `StreamedModel::bundle` refuses such a model.
pub const ESTIMATE_ONLY: &str = "numbers not checked: lowered for an estimate only";

/// One lowered, certified layer program, standing for every layer of its kind.
#[derive(Clone, Debug)]
pub struct LayerKind {
    pub program: ProgramPart,
    pub layers: Vec<usize>,
}

/// How one layer runs: which kind, and how the kind program's tensor names map onto this
/// layer's tensors. Every tensor the kind program declares appears exactly once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerBinding {
    pub layer: usize,
    pub kind: String,
    pub bind: BTreeMap<String, String>,
}

/// A model lowered as the RDU runs it.
#[derive(Clone, Debug)]
pub struct StreamedModel {
    pub spec: ModelSpec,
    pub cut: Cut,
    pub chip: Chip,
    pub storage: Storage,
    pub embed: ProgramPart,
    pub kinds: Vec<LayerKind>,
    pub head: ProgramPart,
    pub layers: Vec<LayerBinding>,
    /// Every layer's own source (its weights, states and storage set feed the manifest).
    pub layer_sources: Vec<Source>,
    pub lowering_seconds: f64,
}

/// A program of the bundle that did not lower: which one, and why.
#[derive(Debug, thiserror::Error)]
pub enum StreamedReject {
    /// The whole-program front end refused it: every statement it could not lift.
    #[error("program `{program}` does not lift:\n{refusal}")]
    Front { program: String, refusal: Refusal },
    /// Lowered, but not certified.
    #[error("program `{program}` is not certified: {fault}")]
    Certification { program: String, fault: CertifyFault },
    /// The cost model refused it.
    #[error("program `{program}`: cost model: {message}")]
    Cost { program: String, message: String },
    /// A layer's program is not its kind's program up to names.
    #[error("layer {layer} cannot be bound to kind `{kind}`")]
    Binding { layer: usize, kind: String },
    #[error("{0}")]
    Invalid(String),
}

/// The estimated cost of one whole step as the bundle's schedule runs it
/// ([`StreamedModel::step_estimate`], `schedule.rs`): the embedding, the layers loop by loop
/// (each iteration's weight stream overlapping the previous one's tail), the head, and a
/// reconfiguration between consecutive programs that are not resident together.
#[derive(Clone, Debug, PartialEq)]
pub struct StepEstimate {
    pub seconds: f64,
    pub roofline_seconds: f64,
    pub roofline_fraction: f64,
    pub tokens_per_second: f64,
    pub hbm_bytes: u64,
    pub flops: u64,
    pub reconfigurations: usize,
    /// Looped invocations of the step (kernel looping: one per run of a kind or repeating block).
    pub loops: usize,
    /// The model's floor bytes of one step over all chips (`StreamedModel::model_floor`).
    pub floor_bytes: u64,
    /// `floor_bytes / (chips × HBM bandwidth)`: the model's roofline.
    pub model_roofline_seconds: f64,
    /// `model_roofline_seconds / seconds`: the fraction of the model's roofline reached.
    pub model_roofline_fraction: f64,
    /// The model's FLOPs of one step over all chips (`StreamedModel::model_flops`).
    pub model_flops: f64,
    /// `model_flops / seconds / (chips × peak bf16 FLOP/s)`: model FLOP utilisation.
    pub model_flop_utilisation: f64,
}
