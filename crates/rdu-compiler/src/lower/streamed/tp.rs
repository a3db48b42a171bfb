//! `lower_tp_decode_streamed`: a decode deployment over `tp` chips (DESIGN §8). The embedding
//! is the decode program, on the replicated spine; each layer kind is ONE program that every
//! chip runs on its own slices (its heads, its FFN and expert columns), with an all-reduce
//! after the mixer and after the FFN; the head is VOCABULARY-PARALLEL — each chip its run of
//! the output projection's rows, computing its run of the logits, which the host joins in chip
//! order. A kind and the head are certified by running them on all their chips against the
//! reference interpreter of the unsplit decode program (`certify::certify_tp`), gathered
//! results against the unsplit program's.

use super::deploy::{
    bind_layers, canonical, certify_source, context_too_large, embed_part, estimate_certificate, finish,
    lower_resident, rename_source, Check, LayerKind, LowerOptions, ProgramPart, Progress, StreamedModel,
    StreamedReject, CERTIFY_VOCAB_ROWS, HEAD_INPUT,
};
use super::kinds::{kinds_of_sources, KindGroup, Storage};
use crate::certify::{certify_tp, check_tp_structure};
use crate::fit::admits_tp;
use crate::front::{lift, Refusal};
use crate::lang::{parse, Source};
use crate::lower::{lower, lower_split, Split};
use crate::model::author::{covers, head_source, hidden_name_for, source_of};
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
    if !covers(spec.vocab, tp) {
        return Err(StreamedReject::Invalid(format!(
            "a vocabulary of {} is too small to split the head over {tp} chips",
            spec.vocab
        )));
    }
    let started = std::time::Instant::now();
    let LowerOptions { chip, storage, seed, progress } = opts;
    let decode = unsplit_cut(cut);
    let layer_sources: Vec<Source> = (0..spec.n_layers()).map(|l| source_of(spec, l, cut, &storage)).collect();
    let groups = kinds_of_sources(spec, &layer_sources);
    let total = groups.len() + 2;

    progress(Progress::Program { index: 0, total, name: "embed" });
    let embed = embed_part(spec, decode, &storage, &chip, seed, Check::Numbers, progress)?;
    let mut kinds = Vec::new();
    let mut layers = vec![None; spec.n_layers()];
    for (i, group) in groups.iter().enumerate() {
        progress(Progress::Program { index: i + 1, total, name: &group.name });
        let canon = canonical(&layer_sources[group.representative()], group.representative(), &group.name, cut)?;
        let part = tp_kind(spec, cut, &storage, group, &canon, groups.len(), &chip, seed, Check::Numbers, progress)
            .map_err(|e| context_too_large(e, spec, group.representative(), cut, &storage, &chip))?;
        bind_layers(&part, &canon, &group.name, &group.layers, &layer_sources, &mut layers)?;
        kinds.push(LayerKind { program: part, layers: group.layers.clone() });
    }
    progress(Progress::Program { index: total - 1, total, name: "head" });
    let head = tp_head(spec, cut, &storage, &chip, seed, Check::Numbers, progress)?;
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
    let against = whole.as_ref().map(|w| Against { whole: w, reduced: None });
    lower_resident(chip, cut, n_kinds, |on| {
        lower_tp_part(&group.name, canon, against, true, cut.tp(), on, seed, progress)
    })
}

/// The vocabulary-parallel head of a tensor-parallel `cut` over its chips, checked as `check`
/// says: certified against the one-chip head of its unsplit cut (numbers on the first
/// `CERTIFY_VOCAB_ROWS` vocabulary rows of a larger table, both split alike — the reduced split
/// program's runs are `split::cover` of its vocabulary; structure, resources and slices at
/// full size). It reads the last layer's output under `HEAD_INPUT`, bound to it by the manifest.
pub(super) fn tp_head(
    spec: &ModelSpec,
    cut: Cut,
    storage: &Storage,
    chip: &Chip,
    seed: u64,
    check: Check,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<ProgramPart, StreamedReject> {
    let decode = unsplit_cut(cut);
    let input = |src: Source, at: Cut| rename_source(&src, &hidden_name_for(at, spec.n_layers()), HEAD_INPUT);
    let source = input(head_source(spec, cut, storage), cut)?;
    let mut head = match check {
        Check::Structure => lower_tp_part("head", &source, None, false, cut.tp(), chip, seed, progress)?,
        Check::Numbers => {
            let whole = input(head_source(spec, decode, storage), decode)?;
            let reduced = if spec.vocab > CERTIFY_VOCAB_ROWS {
                let split = input(certify_source(spec, cut, storage, false), cut)?;
                let unsplit = input(certify_source(spec, decode, storage, false), decode)?;
                Some((split, unsplit))
            } else {
                None
            };
            let reduced = reduced.as_ref().map(|(s, u)| (s, u));
            let against = Against { whole: &whole, reduced };
            lower_tp_part("head", &source, Some(against), false, cut.tp(), chip, seed, progress)?
        }
    };
    head.bind.insert(HEAD_INPUT.to_string(), hidden_name_for(cut, spec.n_layers()));
    Ok(head)
}

/// What a split program is certified against: `whole`, the unsplit program of the same names,
/// and with `reduced` a smaller split program and its unsplit counterpart whose numbers are
/// checked instead (the head of a large vocabulary on its first rows).
#[derive(Clone, Copy)]
struct Against<'a> {
    whole: &'a Source,
    reduced: Option<(&'a Source, &'a Source)>,
}

/// Parse, lift and lower over `tp` chips one program (`source`, one chip's share); a `looped`
/// one (a layer kind) has its weight-streaming stages marked for kernel looping. With
/// `against`, it is certified against the unsplit program over the chips (`certify_tp`; on the
/// reduced programs when given, then its structure, resources and slices at full size);
/// without, only its structure and resources are checked (the slices and partial sums need the
/// unsplit program; the split is the author's, as in the lowering).
#[allow(clippy::too_many_arguments)]
fn lower_tp_part(
    name: &str,
    source: &Source,
    against: Option<Against<'_>>,
    looped: bool,
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
    let split_lower = |src: &Source, progress: &mut dyn FnMut(Progress<'_>)| -> Result<_, StreamedReject> {
        let (program, graph) = front(src)?;
        let split = Split { chips: tp, slices: &src.slices };
        let mut spatial = lower_split(name, &program, &graph, &src.q8, split, chip, &mut |pass, p| {
            progress(Progress::Pass { program: name, pass, spatial: p })
        });
        if looped {
            // A kind runs looped: its weight-streaming stages prefetch the next layer's weights.
            super::schedule::mark_prefetch(&mut spatial);
        }
        Ok((spatial, graph))
    };
    let unsplit_lower = |src: &Source| -> Result<_, StreamedReject> {
        let (program, graph) = front(src)?;
        Ok((lower(name, &program, &graph, &src.q8, chip, &mut |_, _| {}), graph))
    };
    let (spatial, graph) = split_lower(source, progress)?;
    let Some(Against { whole, reduced }) = against else {
        crate::certify::check_structure(&spatial, &graph, chip).map_err(fault)?;
        let certificate = estimate_certificate(vec!["structure".into(), "resources".into()], seed);
        return finish(name, source, spatial, certificate, Vec::new(), chip);
    };
    let (unsplit, whole_graph) = unsplit_lower(whole)?;
    let mut attached = vec![(AttachedRole::Unsplit, whole.clone())];
    let certificate = match reduced {
        None => certify_tp(&spatial, &graph, &unsplit, &whole_graph, chip, seed).map_err(fault)?,
        Some((small, small_whole)) => {
            let (small_spatial, small_graph) = split_lower(small, &mut |_| {})?;
            let (small_unsplit, small_whole_graph) = unsplit_lower(small_whole)?;
            let mut c = certify_tp(&small_spatial, &small_graph, &small_unsplit, &small_whole_graph, chip, seed)
                .map_err(fault)?;
            c.checks.push(format!("numbers checked on the first {CERTIFY_VOCAB_ROWS} vocabulary rows, split alike"));
            check_tp_structure(&spatial, &graph, &unsplit, chip).map_err(fault)?;
            c.checks.push("structure, resources and slices at full size".into());
            attached.push((AttachedRole::Reduced, small.clone()));
            attached.push((AttachedRole::ReducedUnsplit, small_whole.clone()));
            c
        }
    };
    finish(name, source, spatial, certificate, attached, chip)
}
