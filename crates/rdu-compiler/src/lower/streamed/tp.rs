//! `lower_tp_decode_streamed`: a decode deployment over `tp` chips (DESIGN §8). The embedding
//! and the head are the decode programs, on the replicated spine; each layer kind is ONE
//! program that every chip runs on its own slices (its heads, its FFN and expert columns),
//! with an all-reduce after the mixer and after the FFN. A kind is certified by running it on
//! all its chips against the reference interpreter of the unsplit decode program
//! (`certify::certify_tp`).

use super::deploy::{
    bind_layers, canonical, lower_embed, lower_head, LayerKind, LowerOptions, ProgramPart, Progress, StreamedModel,
    StreamedReject,
};
use super::kinds::kinds_of_sources;
use crate::certify::certify_tp;
use crate::fit::admits_tp;
use crate::front::{lift, Refusal};
use crate::lang::{parse, shape_digest, Source};
use crate::lower::{cost::program_cost, lower, lower_split, Split};
use crate::model::author::source_of;
use crate::model::spec::{Cut, ModelSpec};
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::AttachedRole;
use rdu_spatial::program::Role;
use std::collections::BTreeMap;

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
    let decode = match cut.batch() {
        Some(batch) => Cut::Batched { batch, ctx },
        None => Cut::Decode { ctx },
    };
    let layer_sources: Vec<Source> = (0..spec.n_layers()).map(|l| source_of(spec, l, cut, &storage)).collect();
    let groups = kinds_of_sources(spec, &layer_sources);
    let total = groups.len() + 2;

    progress(Progress::Program { index: 0, total, name: "embed" });
    let embed = lower_embed(spec, decode, &storage, &chip, seed, progress)?;
    let mut kinds = Vec::new();
    let mut layers = vec![None; spec.n_layers()];
    for (i, group) in groups.iter().enumerate() {
        progress(Progress::Program { index: i + 1, total, name: &group.name });
        let rep = group.representative();
        let canon = canonical(&layer_sources[rep], rep, &group.name, cut)?;
        let whole = canonical(&source_of(spec, rep, decode, &storage), rep, &group.name, decode)?;
        // Kinds share the chip so that they stay resident together (`schedule::kind_chip`); a
        // kind that does not fit its share in one section takes the whole chip.
        let share = super::schedule::kind_chip(&chip, cut, groups.len());
        let first = lower_tp_part(&group.name, &canon, &whole, tp, &share, seed, progress);
        let part = if super::deploy::needs_whole_chip(&first, &share, &chip) {
            lower_tp_part(&group.name, &canon, &whole, tp, &chip, seed, progress)?
        } else {
            first?
        };
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

/// Parse, lift, lower over `tp` chips and certify one kind program (`source`, one chip's share)
/// against `whole`, the unsplit decode program of the same layer under the same names.
fn lower_tp_part(
    name: &str,
    source: &Source,
    whole: &Source,
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
    let (program, graph) = front(source)?;
    let split = Split { chips: tp, slices: &source.slices };
    let mut spatial = lower_split(name, &program, &graph, &source.q8, split, chip, &mut |pass, p| {
        progress(Progress::Pass { program: name, pass, spatial: p })
    });
    // A kind runs looped: its weight-streaming stages prefetch the next layer's weights.
    super::schedule::mark_prefetch(&mut spatial);
    let (whole_program, whole_graph) = front(whole)?;
    let unsplit = lower(name, &whole_program, &whole_graph, &whole.q8, chip, &mut |_, _| {});
    let certificate = certify_tp(&spatial, &graph, &unsplit, &whole_graph, chip, seed)
        .map_err(|fault| StreamedReject::Certification { program: name.to_string(), fault })?;
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
        certified_against: vec![(AttachedRole::Unsplit, whole.clone())],
    })
}
