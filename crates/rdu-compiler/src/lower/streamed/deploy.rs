//! `lower_forward_streamed` and `lower_decode_streamed`: author, lift, lower and certify each
//! layer kind ONCE (plus the embedding and the head), and bind every layer to its kind.

use super::kinds::{kinds_of_sources, Storage};
use crate::certify::{certify, Certificate, CertifyFault};
use crate::front::{lift, Refusal};
use crate::lang::{parse, shape_digest, Source};
use crate::lower::{cost::program_cost, lower};
use crate::model::author::{embed_source, head_source, source_of};
use crate::model::spec::{Cut, ModelSpec};
use rdu_spatial::chip::Chip;
use rdu_spatial::cost::StepCost;
use rdu_spatial::manifest::AttachedRole;
use rdu_spatial::program::{Role, SpatialProgram};
use std::collections::BTreeMap;

/// The embedding and head programs are certified numerically on at most this many vocabulary
/// rows (their products are tiled along the vocabulary, and every tile runs the same code).
pub const CERTIFY_VOCAB_ROWS: usize = 8192;

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
    /// Every layer's own source (its weights, states and Q8_0 set feed the manifest).
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

/// Lower `spec` as one program per layer kind plus the embedding and head, for one forward
/// step over `seq` tokens, and bind every layer to its kind.
pub fn lower_forward_streamed(
    spec: &ModelSpec,
    seq: usize,
    opts: LowerOptions<'_>,
) -> Result<StreamedModel, StreamedReject> {
    if seq == 0 {
        return Err(StreamedReject::Invalid("the sequence length must be at least 1".into()));
    }
    lower_streamed(spec, Cut::Forward { seq }, opts)
}

/// Lower `spec` as an SN50 DECODE deployment: the embedding lookup, one program per layer
/// kind in which every attention layer appends to and attends over its KV cache of `ctx`
/// positions, and a head. `tok` and `pos` are runtime inputs, so the bundle serves every step.
pub fn lower_decode_streamed(
    spec: &ModelSpec,
    ctx: usize,
    opts: LowerOptions<'_>,
) -> Result<StreamedModel, StreamedReject> {
    if ctx == 0 {
        return Err(StreamedReject::Invalid("the context must hold at least 1 position".into()));
    }
    lower_streamed(spec, Cut::Decode { ctx }, opts)
}

/// Lower `spec` as an SN50 BATCHED decode deployment: `batch` sequences per step, each with
/// its own token, position and carried state (`_s{b}`), every weight read once for all of
/// them. The same three kinds of program as [`lower_decode_streamed`] — the embedding
/// lookups, one program per layer kind, the head — over the stacked `batch × d` hidden
/// states (`X`, `bxo{l}`); the token ids `toks` and each sequence's `pos_s{b}` are runtime inputs.
pub fn lower_batched_decode_streamed(
    spec: &ModelSpec,
    batch: usize,
    ctx: usize,
    opts: LowerOptions<'_>,
) -> Result<StreamedModel, StreamedReject> {
    if batch == 0 {
        return Err(StreamedReject::Invalid("a batch holds at least 1 sequence".into()));
    }
    if ctx == 0 {
        return Err(StreamedReject::Invalid("the context must hold at least 1 position".into()));
    }
    lower_streamed(spec, Cut::Batched { batch, ctx }, opts)
}

pub(super) fn lower_streamed(
    spec: &ModelSpec,
    cut: Cut,
    opts: LowerOptions<'_>,
) -> Result<StreamedModel, StreamedReject> {
    let started = std::time::Instant::now();
    let LowerOptions { chip, storage, seed, progress } = opts;
    let layer_sources: Vec<Source> = (0..spec.n_layers()).map(|l| source_of(spec, l, cut, &storage)).collect();
    let groups = kinds_of_sources(spec, &layer_sources);
    let total = groups.len() + 2;

    progress(Progress::Program { index: 0, total, name: "embed" });
    let embed = embed_part(spec, cut, &storage, &chip, seed, Check::Numbers, progress)?;
    let mut kinds = Vec::new();
    let mut layers = vec![None; spec.n_layers()];
    for (i, group) in groups.iter().enumerate() {
        progress(Progress::Program { index: i + 1, total, name: &group.name });
        let canon = canonical(&layer_sources[group.representative()], group.representative(), &group.name, cut)?;
        let rep = &canon;
        let part = lower_resident(&chip, cut, groups.len(), |on| {
            lower_part(&group.name, rep, None, true, on, seed, Check::Numbers, progress)
        })
        .map_err(|e| context_too_large(e, spec, group.representative(), cut, &storage, &chip))?;
        bind_layers(&part, rep, &group.name, &group.layers, &layer_sources, &mut layers)?;
        kinds.push(LayerKind { program: part, layers: group.layers.clone() });
    }
    progress(Progress::Program { index: total - 1, total, name: "head" });
    let head = head_part(spec, cut, &storage, &chip, seed, Check::Numbers, progress)?;
    let layers = layers.into_iter().map(|b| b.expect("every layer belongs to a kind")).collect();
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

/// The embedding program of `cut`, lowered and certified (numbers on the first
/// `CERTIFY_VOCAB_ROWS` rows of a larger table), or only checked, as `check` says.
pub(super) fn embed_part(
    spec: &ModelSpec,
    cut: Cut,
    storage: &Storage,
    chip: &Chip,
    seed: u64,
    check: Check,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<ProgramPart, StreamedReject> {
    let source = embed_source(spec, cut, storage);
    let checked = vocab_reduced(&source, certify_source(spec, cut, storage, true));
    lower_part("embed", &source, checked.as_ref(), false, chip, seed, check, progress)
}

/// The head program of `cut`, lowered and certified (or only checked, as `check` says). It
/// reads the last layer's output under a name that does not depend on depth (`HEAD_INPUT`),
/// bound to it by the manifest.
pub(super) fn head_part(
    spec: &ModelSpec,
    cut: Cut,
    storage: &Storage,
    chip: &Chip,
    seed: u64,
    check: Check,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<ProgramPart, StreamedReject> {
    let last = crate::model::author::hidden_name_for(cut, spec.n_layers());
    let head_input = |src: Source| rename_source(&src, &last, HEAD_INPUT);
    let source = head_input(head_source(spec, cut, storage))?;
    let checked = vocab_reduced(&source, head_input(certify_source(spec, cut, storage, false))?);
    let mut head = lower_part("head", &source, checked.as_ref(), false, chip, seed, check, progress)?;
    head.bind.insert(HEAD_INPUT.to_string(), last);
    Ok(head)
}

/// A kind refused for its resources because its caches do not fit the chip's on-chip memory at
/// the cut's context: the refusal says so in a user's words — the ctx, the chip, and the
/// largest ctx at which the kind fits (found by lowering the kind again, without numbers, at
/// smaller contexts). Any other refusal is returned as it is.
pub(super) fn context_too_large(
    e: StreamedReject,
    spec: &ModelSpec,
    layer: usize,
    cut: Cut,
    storage: &Storage,
    chip: &Chip,
) -> StreamedReject {
    let (StreamedReject::Certification { program, fault: CertifyFault::Resources(_) }, Some(ctx)) = (&e, cut.ctx())
    else {
        return e;
    };
    let fits = |c: usize| -> bool {
        let Some(at) = cut.with_ctx(c) else { return false };
        let source = source_of(spec, layer, at, storage);
        let Ok(parsed) = parse(&source.text) else { return false };
        let Ok(graph) = lift(&parsed) else { return false };
        let spatial = lower(program, &parsed, &graph, &source.q8, chip, &mut |_, _| {});
        crate::certify::check_structure(&spatial, &graph, chip).is_ok()
    };
    let smallest = cut.chunk().unwrap_or(1);
    if !fits(smallest) {
        // Too large at any context: not the context's doing.
        return e;
    }
    // The largest context that fits: resources grow with the caches, so bisect.
    let (mut lo, mut hi) = (smallest, ctx);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    StreamedReject::Invalid(format!(
        "ctx {ctx} is too large for the {}: the caches of layer kind `{program}` over {ctx} positions do not fit its on-chip memory ({} PMUs of {} KiB); pass --ctx {lo} or less",
        chip.name,
        chip.pmus,
        chip.pmu_sram_bytes / 1024
    ))
}

/// Binds every layer of a kind to `part`, the kind's program (`canon`, its representative under
/// layer-0 names): each declared name mapped to the layer's own through their renaming.
pub(super) fn bind_layers(
    part: &ProgramPart,
    canon: &Source,
    kind: &str,
    kind_layers: &[usize],
    layer_sources: &[Source],
    layers: &mut [Option<LayerBinding>],
) -> Result<(), StreamedReject> {
    let renamer = crate::lang::digest::Renamer::new(canon);
    for &l in kind_layers {
        let map = renamer
            .as_ref()
            .and_then(|r| r.to(&layer_sources[l]))
            .ok_or_else(|| StreamedReject::Binding { layer: l, kind: kind.to_string() })?;
        let bind =
            part.declared.iter().map(|n| (n.clone(), map.get(n).cloned().unwrap_or_else(|| n.clone()))).collect();
        layers[l] = Some(LayerBinding { layer: l, kind: kind.to_string(), bind });
    }
    Ok(())
}

/// Whether a kind lowered on its share of the chip must take the whole chip instead: it needs
/// more than one section there, or more units than its share has.
/// A kind lowered by `lower` on its share of the chip — kinds share it so that they stay
/// resident together (`schedule::kind_chip`, `n_kinds` of them) — or on the whole chip when it
/// does not fit its share in one section.
pub(super) fn lower_resident(
    chip: &Chip,
    cut: Cut,
    n_kinds: usize,
    mut lower: impl FnMut(&Chip) -> Result<ProgramPart, StreamedReject>,
) -> Result<ProgramPart, StreamedReject> {
    let share = super::schedule::kind_chip(chip, cut, n_kinds);
    let first = lower(&share);
    if needs_whole_chip(&first, &share, chip) {
        lower(chip)
    } else {
        first
    }
}

fn needs_whole_chip(first: &Result<ProgramPart, StreamedReject>, share: &Chip, chip: &Chip) -> bool {
    share.pcus != chip.pcus
        && match first {
            Ok(p) => p.cost.sections.len() > 1,
            Err(StreamedReject::Certification { fault: CertifyFault::Resources(_), .. }) => true,
            Err(_) => false,
        }
}

/// The head program's name for its input, the last layer's output.
pub const HEAD_INPUT: &str = "xl";

/// `source` with the name `from` renamed `to` (comments kept).
pub(super) fn rename_source(source: &Source, from: &str, to: &str) -> Result<Source, StreamedReject> {
    let mut program = parse(&source.text)
        .map_err(|d| StreamedReject::Front { program: "head".to_string(), refusal: Refusal { diagnostics: d } })?;
    program.rename(&|n| if n == from { to.to_string() } else { n.to_string() });
    let comment: String = source.text.lines().take_while(|l| l.starts_with('#')).map(|l| format!("{l}\n")).collect();
    Ok(Source {
        text: format!("{comment}{}", crate::lang::print(&program)),
        q8: source.q8.clone(),
        slices: source.slices.clone(),
    })
}

/// A kind's program as the bundle carries it: its representative's program with every
/// per-layer name rebound to layer 0 (`rebind(name, rep, 0)`), so that the program does not
/// depend on which layer happens to come first — a model and the same model with more layers
/// of a kind carry byte-identical kind programs.
pub(super) fn canonical(rep: &Source, layer: usize, kind: &str, cut: Cut) -> Result<Source, StreamedReject> {
    use super::kinds::{rebind_via, SINGLE, STACKED};
    let hidden = if cut.batch().is_some() { STACKED } else { SINGLE };
    let rebind = |n: &str| rebind_via(n, layer, 0, hidden);
    let mut program = parse(&rep.text)
        .map_err(|d| StreamedReject::Front { program: kind.to_string(), refusal: Refusal { diagnostics: d } })?;
    program.rename(&|n| rebind(n));
    let text =
        format!("# layer kind {kind}, {}; names as in layer 0\n{}", cut.describe(), crate::lang::print(&program));
    Ok(Source {
        text,
        q8: rep.q8.iter().map(|n| rebind(n)).collect(),
        slices: rep.slices.iter().map(|(n, s)| (rebind(n), s.clone())).collect(),
    })
}

/// The embedding or head source certification runs: the real one, or — for a vocabulary
/// larger than `CERTIFY_VOCAB_ROWS` — the same program over the first rows of the table.
pub(super) fn certify_source(spec: &ModelSpec, cut: Cut, storage: &Storage, embed: bool) -> Source {
    let mut small = spec.clone();
    small.vocab = spec.vocab.min(CERTIFY_VOCAB_ROWS);
    if embed {
        embed_source(&small, cut, storage)
    } else {
        head_source(&small, cut, storage)
    }
}

/// A smaller program that certification runs numerically in place of the real one, and what
/// it stands for.
pub(super) struct Reduced {
    source: Source,
    /// The certificate's note saying what the numbers covered.
    note: String,
}

/// `checked` as the reduction of `source` to the first vocabulary rows, unless it is `source`.
fn vocab_reduced(source: &Source, checked: Source) -> Option<Reduced> {
    (checked != *source).then(|| Reduced {
        source: checked,
        note: format!("numbers checked on the first {CERTIFY_VOCAB_ROWS} vocabulary rows"),
    })
}

/// Parse, lift, lower and certify one program; a `looped` one (a layer kind) has its
/// weight-streaming stages marked `prefetch` (`schedule::mark_prefetch`). Certification runs the program itself, or its
/// `reduced` form (the embedding and head of a large vocabulary on fewer vocabulary rows),
/// then checks the structure and resources at full size. With [`Check::Structure`] only the
/// structure and resources of the program itself are checked ([`ESTIMATE_ONLY`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn lower_part(
    name: &str,
    source: &Source,
    reduced: Option<&Reduced>,
    looped: bool,
    chip: &Chip,
    seed: u64,
    check: Check,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<ProgramPart, StreamedReject> {
    let front = |src: &Source| -> Result<_, StreamedReject> {
        let program = parse(&src.text)
            .map_err(|d| StreamedReject::Front { program: name.to_string(), refusal: Refusal { diagnostics: d } })?;
        let graph = lift(&program).map_err(|refusal| StreamedReject::Front { program: name.to_string(), refusal })?;
        Ok((program, graph))
    };
    let (program, graph) = front(source)?;
    let mark = |mut p: SpatialProgram| {
        if looped {
            super::schedule::mark_prefetch(&mut p);
        }
        p
    };
    let spatial = mark(lower(name, &program, &graph, &source.q8, chip, &mut |pass, p| {
        progress(Progress::Pass { program: name, pass, spatial: p })
    }));
    if check == Check::Structure {
        crate::certify::check_structure(&spatial, &graph, chip)
            .map_err(|fault| StreamedReject::Certification { program: name.to_string(), fault })?;
        let certificate = estimate_certificate(vec!["structure".into(), "resources".into()], seed);
        return finish(name, source, spatial, certificate, Vec::new(), chip);
    }
    let reduced = match reduced {
        Some(r) => {
            let (program, graph) = front(&r.source)?;
            let lowered = mark(lower(name, &program, &graph, &r.source.q8, chip, &mut |_, _| {}));
            Some((r, lowered, graph))
        }
        None => None,
    };
    let mut certificate = match &reduced {
        None => certify(&spatial, &graph, chip, seed),
        Some((r, lowered, graph)) => certify(lowered, graph, chip, seed).map(|mut c| {
            c.checks.push(r.note.clone());
            c
        }),
    }
    .map_err(|fault| StreamedReject::Certification { program: name.to_string(), fault })?;
    if reduced.is_some() {
        // Structure and resources of the full-size program itself.
        crate::certify::check_structure(&spatial, &graph, chip)
            .map_err(|fault| StreamedReject::Certification { program: name.to_string(), fault })?;
        certificate.checks.push("structure and resources at full size".into());
    }
    let certified_against = reduced.iter().map(|(r, _, _)| (AttachedRole::Reduced, r.source.clone())).collect();
    finish(name, source, spatial, certificate, certified_against, chip)
}

/// How much of certification a lowering runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Check {
    /// Structure, resources and numbers (the simulator against the reference interpreter).
    Numbers,
    /// Structure and resources only: a model lowered for its estimate, never for a bundle
    /// (`super::estimate_streamed`).
    Structure,
}

/// The check a certificate carries when its numbers were not checked
/// (`super::estimate_streamed`); `StreamedModel::bundle` refuses such a model.
pub const ESTIMATE_ONLY: &str = "numbers not checked: lowered for an estimate only";

/// A certificate of `checks` without numbers ([`ESTIMATE_ONLY`] added; no tolerance, no error).
pub(super) fn estimate_certificate(mut checks: Vec<String>, seed: u64) -> Certificate {
    checks.push(ESTIMATE_ONLY.to_string());
    Certificate { checks, seed, tolerance: 0.0, max_abs_err: 0.0 }
}

/// A lowered program with its certificate, cost and declared names.
pub(super) fn finish(
    name: &str,
    source: &Source,
    spatial: SpatialProgram,
    certificate: Certificate,
    certified_against: Vec<(AttachedRole, Source)>,
    chip: &Chip,
) -> Result<ProgramPart, StreamedReject> {
    let cost = program_cost(&spatial, chip)
        .map_err(|e| StreamedReject::Cost { program: name.to_string(), message: e.to_string() })?;
    let declared = spatial.tensors.iter().filter(|t| t.role != Role::Temp).map(|t| t.name.clone()).collect();
    Ok(ProgramPart {
        name: name.to_string(),
        source: source.clone(),
        digest: shape_digest(source).hex(),
        spatial,
        certificate,
        cost,
        declared,
        bind: BTreeMap::new(),
        certified_against,
    })
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
}
