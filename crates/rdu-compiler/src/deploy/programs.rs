//! The programs of a deployment — the embedding, each layer kind and the head — as one
//! [`Driver`] lowers them for a cut: which source each is, what it is certified against
//! (`part::Against`), and how every layer of a kind is bound to the kind's program.

use super::part::{lower_part, Against, Check, Part};
use super::CERTIFY_VOCAB_ROWS;
use crate::certify::CertifyFault;
use crate::deploy::model::{LayerBinding, LayerKind, ProgramPart, Progress, StreamedReject};
use crate::deploy::schedule::kind_chip;
use crate::front::{lift, Refusal};
use crate::lang::Source;
use crate::lower::lower;
use crate::model::author::{embed_source, head_source, hidden_name_for, source_of};
use crate::model::kinds::{rebind_via, KindGroup, Storage, SINGLE, STACKED};
use crate::model::spec::{Cut, ModelSpec};
use rdu_spatial::chip::Chip;

/// Every layer's own authored program at `cut`, in order.
pub(super) fn layer_sources(spec: &ModelSpec, cut: Cut, storage: &Storage) -> Vec<Source> {
    (0..spec.n_layers()).map(|l| source_of(spec, l, cut, storage)).collect()
}

/// The head program's name for its input, the last layer's output.
pub const HEAD_INPUT: &str = "xl";

/// Lowers the programs of one model at one cut, each checked as `check` says.
pub(super) struct Driver<'a> {
    pub spec: &'a ModelSpec,
    pub cut: Cut,
    pub chip: &'a Chip,
    pub storage: &'a Storage,
    pub seed: u64,
    pub check: Check,
}

impl Driver<'_> {
    /// The chips a tensor-parallel cut's kinds and head are split over; `None` on one chip.
    pub fn split(&self) -> Option<usize> {
        self.cut.is_split().then(|| self.cut.tp())
    }

    /// Every layer's own authored program, in order.
    pub fn layer_sources(&self) -> Vec<Source> {
        layer_sources(self.spec, self.cut, self.storage)
    }

    /// What a program is certified against, as `check` says: the unsplit `whole` of a split
    /// program, or the program itself; numbers on `reduced` (and, split, its unsplit
    /// counterpart `reduced_whole`) when given.
    fn against<'s>(
        &self,
        whole: Option<&'s Source>,
        reduced: Option<&'s Source>,
        reduced_whole: Option<&'s Source>,
    ) -> Against<'s> {
        match (self.check, whole) {
            (Check::Structure, _) => Against::Structure,
            (Check::Numbers, None) => Against::Itself { reduced },
            (Check::Numbers, Some(whole)) => Against::Unsplit { whole, reduced: reduced.zip(reduced_whole) },
        }
    }

    /// Whether numbers are checked on the first `CERTIFY_VOCAB_ROWS` rows of the vocabulary.
    fn vocab_reduced(&self) -> bool {
        self.check == Check::Numbers && self.spec.vocab > CERTIFY_VOCAB_ROWS
    }

    /// The embedding program, on the replicated spine (the one-chip counterpart of the cut),
    /// certified with numbers on the first `CERTIFY_VOCAB_ROWS` rows of a larger table.
    pub fn embed(&self, progress: &mut dyn FnMut(Progress<'_>)) -> Result<ProgramPart, StreamedReject> {
        let at = self.cut.unsplit();
        let source = embed_source(self.spec, at, self.storage);
        let reduced = self.vocab_reduced().then(|| certify_source(self.spec, at, self.storage, true));
        let part = Part { name: "embed", source: &source, looped: false, split: None };
        lower_part(&part, self.against(None, reduced.as_ref(), None), self.chip, self.seed, progress)
    }

    /// The head program. It reads the last layer's output under a name that does not depend on
    /// depth (`HEAD_INPUT`), bound to it by the manifest. On one chip it is certified like the
    /// embedding; a tensor-parallel cut's head is VOCABULARY-PARALLEL — each chip its run of the
    /// output rows (`split::cover`), the logits gathered — certified against the one-chip head
    /// of the unsplit cut (numbers on the first `CERTIFY_VOCAB_ROWS` rows of a larger table,
    /// both split alike; structure, resources and slices at full size).
    pub fn head(&self, progress: &mut dyn FnMut(Progress<'_>)) -> Result<ProgramPart, StreamedReject> {
        let (spec, storage) = (self.spec, self.storage);
        let input = |src: Source, at: Cut| rename_source(&src, &hidden_name_for(at, spec.n_layers()), HEAD_INPUT);
        let source = input(head_source(spec, self.cut, storage), self.cut)?;
        let reduced = match self.vocab_reduced() {
            true => Some(input(certify_source(spec, self.cut, storage, false), self.cut)?),
            false => None,
        };
        let unsplit = self.cut.unsplit();
        let (whole, reduced_whole) = match (self.check, self.split()) {
            (Check::Numbers, Some(_)) => {
                let whole = input(head_source(spec, unsplit, storage), unsplit)?;
                let small = match self.vocab_reduced() {
                    true => Some(input(certify_source(spec, unsplit, storage, false), unsplit)?),
                    false => None,
                };
                (Some(whole), small)
            }
            _ => (None, None),
        };
        let against = self.against(whole.as_ref(), reduced.as_ref(), reduced_whole.as_ref());
        let part = Part { name: "head", source: &source, looped: false, split: self.split() };
        let mut head = lower_part(&part, against, self.chip, self.seed, progress)?;
        head.bind.insert(HEAD_INPUT.to_string(), hidden_name_for(self.cut, spec.n_layers()));
        Ok(head)
    }

    /// Every kind of `groups` lowered and checked, and every layer bound to its kind; progress
    /// counts the kinds as programs `first..` of `total`.
    pub fn kinds(
        &self,
        layer_sources: &[Source],
        groups: &[KindGroup],
        (first, total): (usize, usize),
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<(Vec<LayerKind>, Vec<LayerBinding>), StreamedReject> {
        let mut kinds = Vec::new();
        let mut layers = vec![None; self.spec.n_layers()];
        for (i, group) in groups.iter().enumerate() {
            progress(Progress::Program { index: first + i, total, name: &group.name });
            let rep = group.representative();
            let canon = canonical(&layer_sources[rep], rep, &group.name, self.cut)?;
            let part = self.kind(group, &canon, groups.len(), progress)?;
            bind_layers(&part, &canon, &group.name, &group.layers, layer_sources, &mut layers)?;
            kinds.push(LayerKind { program: part, layers: group.layers.clone() });
        }
        let layers = layers.into_iter().map(|b| b.expect("every layer belongs to a kind")).collect();
        Ok((kinds, layers))
    }

    /// The kind `group` (`canon`, its representative under layer-0 names), lowered on its share
    /// of the chip (or the whole chip, `lower_resident`) and checked — a split kind against the
    /// unsplit program of the same layer. A kind refused for its caches says so in a user's
    /// words (`context_too_large`).
    fn kind(
        &self,
        group: &KindGroup,
        canon: &Source,
        n_kinds: usize,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<ProgramPart, StreamedReject> {
        let (spec, cut, storage) = (self.spec, self.cut, self.storage);
        let rep = group.representative();
        let whole = match (self.check, self.split()) {
            (Check::Numbers, Some(_)) => {
                let at = cut.unsplit();
                Some(canonical(&source_of(spec, rep, at, storage), rep, &group.name, at)?)
            }
            _ => None,
        };
        let against = self.against(whole.as_ref(), None, None);
        let part = Part { name: &group.name, source: canon, looped: true, split: self.split() };
        let lowered = lower_resident(self.chip, cut, n_kinds, |on| lower_part(&part, against, on, self.seed, progress));
        match self.check {
            Check::Numbers => lowered.map_err(|e| context_too_large(e, spec, rep, cut, storage, self.chip)),
            Check::Structure => lowered,
        }
    }
}

/// A kind refused for its resources because its caches do not fit the chip's on-chip memory at
/// the cut's context: the refusal says so in a user's words — the ctx, the chip, and the
/// largest ctx at which the kind fits (found by lowering the kind again, without numbers, at
/// smaller contexts). Any other refusal is returned as it is.
fn context_too_large(
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
        let Ok(parsed) = source.program() else { return false };
        let Ok(graph) = lift(parsed) else { return false };
        let spatial = lower(program, parsed, &graph, &source.stored, chip, &mut |_, _| {});
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
fn bind_layers(
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

/// A kind lowered by `lower` on its share of the chip — kinds share it so that they stay
/// resident together (`schedule::kind_chip`, `n_kinds` of them) — or on the whole chip when it
/// does not fit its share in one section.
fn lower_resident(
    chip: &Chip,
    cut: Cut,
    n_kinds: usize,
    mut lower: impl FnMut(&Chip) -> Result<ProgramPart, StreamedReject>,
) -> Result<ProgramPart, StreamedReject> {
    let share = kind_chip(chip, cut, n_kinds);
    let first = lower(&share);
    if needs_whole_chip(&first, &share, chip) {
        lower(chip)
    } else {
        first
    }
}

/// Whether a kind lowered on its share of the chip must take the whole chip instead: it needs
/// more than one section there, or more units than its share has.
fn needs_whole_chip(first: &Result<ProgramPart, StreamedReject>, share: &Chip, chip: &Chip) -> bool {
    share.pcus != chip.pcus
        && match first {
            Ok(p) => p.cost.sections.len() > 1,
            Err(StreamedReject::Certification { fault: CertifyFault::Resources(_), .. }) => true,
            Err(_) => false,
        }
}

/// `source` with the name `from` renamed `to` (comments kept).
fn rename_source(source: &Source, from: &str, to: &str) -> Result<Source, StreamedReject> {
    let mut program = source
        .program()
        .map_err(|d| StreamedReject::Front {
            program: "head".to_string(),
            refusal: Refusal { diagnostics: d.to_vec() },
        })?
        .clone();
    program.rename(&|n| if n == from { to.to_string() } else { n.to_string() });
    let comment: String = source.text().lines().take_while(|l| l.starts_with('#')).map(|l| format!("{l}\n")).collect();
    Ok(Source::split(
        format!("{comment}{}", crate::lang::print(&program)),
        source.stored.clone(),
        source.slices.clone(),
    ))
}

/// A kind's program as the bundle carries it: its representative's program with every
/// per-layer name rebound to layer 0 (`rebind(name, rep, 0)`), so that the program does not
/// depend on which layer happens to come first — a model and the same model with more layers
/// of a kind carry byte-identical kind programs.
fn canonical(rep: &Source, layer: usize, kind: &str, cut: Cut) -> Result<Source, StreamedReject> {
    let hidden = if cut.batch().is_some() { STACKED } else { SINGLE };
    let rebind = |n: &str| rebind_via(n, layer, 0, hidden);
    let mut program = rep
        .program()
        .map_err(|d| StreamedReject::Front { program: kind.to_string(), refusal: Refusal { diagnostics: d.to_vec() } })?
        .clone();
    program.rename(&|n| rebind(n));
    let text =
        format!("# layer kind {kind}, {}; names as in layer 0\n{}", cut.describe(), crate::lang::print(&program));
    let stored = rep.stored.iter().map(|(n, s)| (rebind(n), *s)).collect();
    Ok(Source::split(text, stored, rep.slices.iter().map(|(n, s)| (rebind(n), s.clone())).collect()))
}

/// The embedding or head source certification runs in place of the real one for a vocabulary
/// larger than `CERTIFY_VOCAB_ROWS`: the same program over the first rows of the table.
fn certify_source(spec: &ModelSpec, cut: Cut, storage: &Storage, embed: bool) -> Source {
    let mut small = spec.clone();
    small.vocab = spec.vocab.min(CERTIFY_VOCAB_ROWS);
    if embed {
        embed_source(&small, cut, storage)
    } else {
        head_source(&small, cut, storage)
    }
}
