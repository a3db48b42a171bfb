//! `lower_tp_decode_streamed`: a decode deployment over `tp` chips (DESIGN §8). The embedding
//! and the head are the decode programs, on the replicated spine; each layer kind is ONE
//! program that every chip runs on its own slices (its heads, its FFN and expert columns),
//! with an all-reduce after the mixer and after the FFN. A kind is certified by running it on
//! all its chips against the reference interpreter of the unsplit decode program
//! (`certify::certify_tp`).

use super::deploy::{
    bind_layers, canonical, estimate_certificate, finish, lower_embed, lower_head, needs_whole_chip, Check, LayerKind,
    LowerOptions, ProgramPart, Progress, StreamedModel, StreamedReject,
};
use super::kinds::{kinds_of_sources, KindGroup, Storage};
use crate::certify::certify_tp;
use crate::fit::admits_tp;
use crate::front::{lift, Refusal};
use crate::lang::{parse, Source};
use crate::lower::{lower, lower_split, Split};
use crate::model::author::source_of;
use crate::model::spec::{Cut, ModelSpec};
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::AttachedRole;

/// Lower `spec` as a TENSOR-PARALLEL decode deployment over `tp` chips against a cache of
/// `ctx` positions. `tp` must be a width the model admits with its storage
/// (`fit::admits_tp`); otherwise the refusal, one line naming the dimension, is
/// `StreamedReject::Invalid`. Each kind program carries its chips' slices (`Source::slices`,
/// the spatial program's `tp`), so the manifest says which rows or columns of which checkpoint
/// tensor each chip loads.
pub fn lower_tp_decode_streamed(
    spec: &ModelSpec,
    tp: usize,
    ctx: usize,
    opts: LowerOptions<'_>,
) -> Result<StreamedModel, StreamedReject> {
    lower_tp_streamed(spec, Cut::Tp { tp, ctx }, opts)
}

/// Lower `spec` as a BATCHED, TENSOR-PARALLEL decode deployment — `batch` sequences per step
/// over `tp` chips, the serving shape: [`super::lower_batched_decode_streamed`]'s stacked
/// programs (`X`/`bxo{l}`, `toks`, `pos_s{b}`, states `_s{b}`) with every layer kind
/// [`lower_tp_decode_streamed`]'s program over the chips, certified over the chips against the
/// unsplit batched program.
pub fn lower_batched_tp_decode_streamed(
    spec: &ModelSpec,
    batch: usize,
    tp: usize,
    ctx: usize,
    opts: LowerOptions<'_>,
) -> Result<StreamedModel, StreamedReject> {
    if batch == 0 {
        return Err(StreamedReject::Invalid("a batch holds at least 1 sequence".into()));
    }
    lower_tp_streamed(spec, Cut::BatchedTp { batch, tp, ctx }, opts)
}

/// `cut` is `Tp` or `BatchedTp`; its one-chip counterpart (`Decode` or `Batched`) gives the
/// replicated embedding and head and the unsplit programs the kinds are certified against.
fn lower_tp_streamed(spec: &ModelSpec, cut: Cut, opts: LowerOptions<'_>) -> Result<StreamedModel, StreamedReject> {
    let (tp, ctx) = (cut.tp(), cut.ctx().unwrap_or(0));
    if ctx == 0 {
        return Err(StreamedReject::Invalid("the context must hold at least 1 position".into()));
    }
    admits_tp(spec, tp, &opts.storage).map_err(|r| StreamedReject::Invalid(r.to_string()))?;
    let started = std::time::Instant::now();
    let LowerOptions { chip, storage, seed, progress } = opts;
    let decode = unsplit_cut(cut);
    let layer_sources: Vec<Source> = (0..spec.n_layers()).map(|l| source_of(spec, l, cut, &storage)).collect();
    let groups = kinds_of_sources(spec, &layer_sources);
    let total = groups.len() + 2;

    progress(Progress::Program { index: 0, total, name: "embed" });
    let embed = lower_embed(spec, decode, &storage, &chip, seed, progress)?;
    let mut kinds = Vec::new();
    let mut layers = vec![None; spec.n_layers()];
    for (i, group) in groups.iter().enumerate() {
        progress(Progress::Program { index: i + 1, total, name: &group.name });
        let canon = canonical(&layer_sources[group.representative()], group.representative(), &group.name, cut)?;
        let part = tp_kind(spec, cut, &storage, group, &canon, groups.len(), &chip, seed, Check::Numbers, progress)?;
        bind_layers(&part, &canon, &group.name, &group.layers, &layer_sources, &mut layers)?;
        kinds.push(LayerKind { program: part, layers: group.layers.clone() });
    }
    progress(Progress::Program { index: total - 1, total, name: "head" });
    // The one-chip head, on the replicated spine (its hidden names are this cut's).
    let head = lower_head(spec, decode, &storage, &chip, seed, progress)?;
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

/// The one-chip counterpart of a tensor-parallel `cut` (`Decode` or `Batched`): its embedding
/// and head, and the unsplit programs its kinds are certified against.
pub(super) fn unsplit_cut(cut: Cut) -> Cut {
    match cut {
        Cut::Tp { ctx, .. } => Cut::Decode { ctx },
        Cut::BatchedTp { batch, ctx, .. } => Cut::Batched { batch, ctx },
        other => other,
    }
}

/// The kind `group` of a tensor-parallel `cut` (`canon`, its representative under layer-0
/// names) lowered over the cut's chips and checked as `check` says — certified against the
/// unsplit program of the same layer ([`Check::Numbers`]), or its structure and resources only
/// ([`Check::Structure`], `super::estimate_streamed`). Kinds share the chip so that they stay
/// resident together (`schedule::kind_chip`, `n_kinds` of them); a kind that does not fit its
/// share in one section takes the whole chip.
#[allow(clippy::too_many_arguments)]
pub(super) fn tp_kind(
    spec: &ModelSpec,
    cut: Cut,
    storage: &Storage,
    group: &KindGroup,
    canon: &Source,
    n_kinds: usize,
    chip: &Chip,
    seed: u64,
    check: Check,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<ProgramPart, StreamedReject> {
    let rep = group.representative();
    let whole = match check {
        Check::Numbers => {
            let decode = unsplit_cut(cut);
            Some(canonical(&source_of(spec, rep, decode, storage), rep, &group.name, decode)?)
        }
        Check::Structure => None,
    };
    let share = super::schedule::kind_chip(chip, cut, n_kinds);
    let mut lower_on = |on: &Chip| lower_tp_part(&group.name, canon, whole.as_ref(), cut.tp(), on, seed, progress);
    let first = lower_on(&share);
    if needs_whole_chip(&first, &share, chip) {
        lower_on(chip)
    } else {
        first
    }
}

/// Parse, lift and lower over `tp` chips one kind program (`source`, one chip's share), its
/// weight-streaming stages marked for kernel looping. With `whole`, the unsplit decode program
/// of the same layer under the same names, it is certified against it over the chips
/// (`certify_tp`); without, only its structure and resources are checked (the slices and
/// partial sums need the unsplit program; the split is the author's, as in the lowering).
fn lower_tp_part(
    name: &str,
    source: &Source,
    whole: Option<&Source>,
    tp: usize,
    chip: &Chip,
    seed: u64,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<ProgramPart, StreamedReject> {
    let front = |src: &Source| -> Result<_, StreamedReject> {
        let program = parse(&src.text)
            .map_err(|d| StreamedReject::Front { program: name.to_string(), refusal: Refusal { diagnostics: d } })?;
        let graph = lift(&program).map_err(|refusal| StreamedReject::Front { program: name.to_string(), refusal })?;
        Ok((program, graph))
    };
    let fault = |fault| StreamedReject::Certification { program: name.to_string(), fault };
    let (program, graph) = front(source)?;
    let split = Split { chips: tp, slices: &source.slices };
    let mut spatial = lower_split(name, &program, &graph, &source.q8, split, chip, &mut |pass, p| {
        progress(Progress::Pass { program: name, pass, spatial: p })
    });
    // A kind runs looped: its weight-streaming stages prefetch the next layer's weights.
    super::schedule::mark_prefetch(&mut spatial);
    let Some(whole) = whole else {
        crate::certify::check_structure(&spatial, &graph, chip).map_err(fault)?;
        let certificate = estimate_certificate(vec!["structure".into(), "resources".into()], seed);
        return finish(name, source, spatial, certificate, Vec::new(), chip);
    };
    let (whole_program, whole_graph) = front(whole)?;
    let unsplit = lower(name, &whole_program, &whole_graph, &whole.q8, chip, &mut |_, _| {});
    let certificate = certify_tp(&spatial, &graph, &unsplit, &whole_graph, chip, seed).map_err(fault)?;
    finish(name, source, spatial, certificate, vec![(AttachedRole::Unsplit, whole.clone())], chip)
}
