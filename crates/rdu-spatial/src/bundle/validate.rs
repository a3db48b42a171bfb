//! Every check a bundle must pass before it is written or run; it reports problems and never repairs them.

use std::collections::{BTreeMap, BTreeSet};

use super::{Bundle, BundleError};
use crate::manifest::{Attached, Run, Slice, FORMAT, VERSION};
use crate::manifest::{CertificateEntry, CheckpointKind, CostEntry, CutMode, Manifest, TensorEntry, TensorStorage};
use crate::program::TpSplit;
use crate::tensor_parallel::{check_cover, check_split};

/// Every problem of `bundle`, in manifest order.
pub fn problems(bundle: &Bundle) -> Vec<BundleError> {
    let mut ctx = Ctx { bundle, m: &bundle.manifest, out: Vec::new() };
    ctx.header();
    ctx.paths();
    ctx.cut();
    let names = ctx.names();
    ctx.programs(&names);
    ctx.layers(&names);
    ctx.schedule();
    ctx.tensors();
    ctx.out.extend(bundle.hash_problems());
    ctx.out
}

struct Ctx<'a> {
    bundle: &'a Bundle,
    m: &'a Manifest,
    out: Vec<BundleError>,
}

impl Ctx<'_> {
    fn invalid(&mut self, field: impl Into<String>, problem: impl Into<String>) {
        self.out.push(BundleError::Invalid { field: field.into(), problem: problem.into() });
    }

    fn header(&mut self) {
        if self.m.format != FORMAT {
            self.invalid("format", format!("is {:?}, expected \"{FORMAT}\"", self.m.format));
        }
        if self.m.version != VERSION {
            self.invalid("version", format!("is {}, this build writes version {VERSION}", self.m.version));
        }
    }

    /// File paths are relative, `/`-separated, inside the bundle, and no file sits where another needs a directory.
    fn paths(&mut self) {
        let mut previous: Option<&str> = None;
        for path in self.bundle.files.keys() {
            let bad = |problem: &str| BundleError::BadPath { path: path.clone(), problem: problem.into() };
            let parts: Vec<&str> = path.split('/').collect();
            if path == "manifest.json" {
                self.out.push(bad("is written from the manifest; it cannot also be a file"));
            } else if path.contains('\\') || parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
                self.out.push(bad("must be a relative path of plain `/`-separated names"));
            } else if previous.is_some_and(|p| path.starts_with(&format!("{p}/"))) {
                self.out.push(bad("lies under another file of the bundle"));
            }
            previous = Some(path);
        }
    }

    fn cut(&mut self) {
        let cut = &self.m.cut;
        let needs: &[(&str, Option<usize>)] = match cut.mode {
            CutMode::Forward => &[("seq", cut.seq)],
            CutMode::Decode => &[("ctx", cut.ctx)],
            CutMode::Batched => &[("ctx", cut.ctx), ("batch", cut.batch)],
            CutMode::Tp => &[("ctx", cut.ctx), ("tp", cut.tp)],
            CutMode::BatchedTp => &[("ctx", cut.ctx), ("batch", cut.batch), ("tp", cut.tp)],
            CutMode::Prefill => &[("ctx", cut.ctx), ("chunk", cut.chunk)],
            CutMode::PrefillTp => &[("ctx", cut.ctx), ("chunk", cut.chunk), ("tp", cut.tp)],
            CutMode::Verify => &[("ctx", cut.ctx), ("draft", cut.draft)],
        };
        let mode = serde_json::to_value(cut.mode).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        for (key, value) in needs {
            if value.is_none() {
                self.invalid(format!("cut.{key}"), format!("is required by mode {mode}"));
            }
        }
        let all = [
            ("ctx", cut.ctx),
            ("seq", cut.seq),
            ("batch", cut.batch),
            ("tp", cut.tp),
            ("chunk", cut.chunk),
            ("draft", cut.draft),
        ];
        for (key, value) in all {
            if value == Some(0) {
                self.invalid(format!("cut.{key}"), "must be at least 1");
            }
        }
    }

    /// The names a program may read: tensors, inputs, states, shared and activations, each defined once.
    fn names(&mut self) -> BTreeSet<String> {
        let m = self.m;
        let lists = [
            ("tensors", m.tensors.keys().collect::<Vec<_>>()),
            ("inputs", m.inputs.iter().map(|e| &e.name).collect()),
            ("states", m.states.iter().map(|e| &e.name).collect()),
            ("shared", m.shared.iter().map(|e| &e.name).collect()),
            ("activations", m.activations.iter().map(|e| &e.name).collect()),
        ];
        let mut seen: BTreeMap<&String, &str> = BTreeMap::new();
        for (list, names) in lists {
            for name in names {
                if let Some(first) = seen.insert(name, list) {
                    self.invalid(list, format!("`{name}` is already defined in {first}; a name is defined once"));
                }
            }
        }
        seen.into_keys().cloned().collect()
    }

    fn programs(&mut self, names: &BTreeSet<String>) {
        let p = &self.m.programs;
        let entries = [("embed", &p.embed.name), ("head", &p.head.name)].map(|(f, n)| (format!("programs.{f}"), n));
        let kinds = p.kinds.iter().map(|k| (format!("programs.kinds[{}]", k.name), &k.name));
        let mut seen = BTreeSet::new();
        for (field, name) in entries.into_iter().chain(kinds) {
            if name.is_empty() || !seen.insert(name) {
                self.invalid(field, format!("program name `{name}` is empty or not unique"));
            }
        }
        for (field, program) in [("programs.embed", &p.embed), ("programs.head", &p.head)] {
            self.files(field, &program.file_source, &program.file_spatial, &program.certified_against);
            self.records(field, &program.certificate, &program.cost);
            self.declared(field, &program.declared);
            let bound = |n: &String| program.bind.get(n).cloned().unwrap_or_else(|| n.clone());
            for name in program.declared.iter().map(bound).filter(|n| !names.contains(n)) {
                self.out.push(BundleError::Unresolved { field: format!("{field}.declared"), tensor: name });
            }
            for name in program.bind.keys().filter(|k| !program.declared.contains(k)) {
                self.invalid(format!("{field}.bind"), format!("binds `{name}`, which the program does not declare"));
            }
        }
        for kind in &p.kinds {
            let field = format!("programs.kinds[{}]", kind.name);
            self.files(&field, &kind.file_source, &kind.file_spatial, &kind.certified_against);
            self.records(&field, &kind.certificate, &kind.cost);
            self.declared(&field, &kind.declared);
            let runs: Vec<usize> = self.m.layers.iter().filter(|l| l.kind == kind.name).map(|l| l.layer).collect();
            if kind.layers.is_empty() || kind.layers != runs {
                let problem = format!("lists {:?} but the layers running it are {runs:?}", kind.layers);
                self.invalid(format!("{field}.layers"), problem);
            }
        }
    }

    fn files(&mut self, field: &str, source: &str, spatial: &str, attached: &[Attached]) {
        let attached = attached.iter().enumerate().map(|(i, a)| (format!("certified_against[{i}].file"), &a.file));
        let own = [("file_source".to_string(), source), ("file_spatial".to_string(), spatial)];
        for (key, path) in own.into_iter().chain(attached.map(|(k, p)| (k, p.as_str()))) {
            if !self.bundle.files.contains_key(path) {
                self.out.push(BundleError::MissingFile { field: format!("{field}.{key}"), path: path.into() });
            }
        }
    }

    fn records(&mut self, field: &str, certificate: &CertificateEntry, cost: &CostEntry) {
        let (tolerance, err) = (certificate.tolerance, certificate.max_abs_err);
        if !(tolerance.is_finite() && err.is_finite() && tolerance >= 0.0 && err >= 0.0) {
            self.invalid(format!("{field}.certificate"), "tolerance and max_abs_err must be finite and non-negative");
        } else if err > tolerance {
            self.invalid(
                format!("{field}.certificate"),
                format!("max_abs_err {err} exceeds its tolerance {tolerance}"),
            );
        }
        if certificate.checks.is_empty() {
            self.invalid(
                format!("{field}.certificate.checks"),
                "is empty; a bundle references certified programs only",
            );
        }
        if !(cost.seconds.is_finite() && cost.seconds >= 0.0) {
            self.invalid(
                format!("{field}.cost.seconds"),
                format!("must be finite and non-negative, found {}", cost.seconds),
            );
        }
    }

    fn declared(&mut self, field: &str, declared: &[String]) {
        let mut seen = BTreeSet::new();
        for name in declared.iter().filter(|n| !seen.insert(*n)) {
            self.invalid(format!("{field}.declared"), format!("lists `{name}` twice"));
        }
    }

    fn layers(&mut self, names: &BTreeSet<String>) {
        let n_layers = self.m.layers.len();
        let present: BTreeSet<usize> = self.m.layers.iter().map(|l| l.layer).collect();
        for layer in (0..n_layers).filter(|l| !present.contains(l)) {
            self.out.push(BundleError::LayerMissing { layer, n_layers });
        }
        for (idx, entry) in self.m.layers.iter().enumerate() {
            if entry.layer != idx {
                self.out.push(BundleError::LayerOrder { idx, layer: entry.layer, n_layers });
            }
            let Some(kind) = self.m.programs.kinds.iter().find(|k| k.name == entry.kind) else {
                self.out.push(BundleError::UnknownKind { idx, kind: entry.kind.clone() });
                continue;
            };
            let declared: BTreeSet<&String> = kind.declared.iter().collect();
            for tensor in declared.iter().filter(|t| !entry.bind.contains_key(**t)) {
                self.out.push(BundleError::BindMissing { idx, kind: kind.name.clone(), tensor: (*tensor).clone() });
            }
            let mut targets: BTreeMap<&String, &String> = BTreeMap::new();
            for (from, to) in &entry.bind {
                if !declared.contains(from) {
                    self.out.push(BundleError::BindExtra { idx, kind: kind.name.clone(), tensor: from.clone() });
                }
                if let Some(first) = targets.insert(to, from) {
                    let (first, second, target) = (first.clone(), from.clone(), to.clone());
                    self.out.push(BundleError::BindDuplicate { idx, first, second, target });
                }
                if !names.contains(to) {
                    self.out.push(BundleError::Unresolved {
                        field: format!("layers[{idx}].bind.{from}"),
                        tensor: to.clone(),
                    });
                }
            }
        }
    }

    /// The schedule runs the embedding, then every layer exactly once, in order, in loops over
    /// whole blocks of the layers' own kinds, then the head; every program is resident in
    /// exactly one set, and a loop's kinds in one set.
    fn schedule(&mut self) {
        let s = &self.m.schedule;
        let n = s.invocations.len();
        let mut next = 0usize;
        let mut covered = n >= 3;
        for (i, inv) in s.invocations.iter().enumerate() {
            let field = format!("schedule.invocations[{i}]");
            let want = if i == 0 {
                Some(Run::Embed)
            } else if i + 1 == n {
                Some(Run::Head)
            } else {
                None
            };
            let run = match inv.run {
                Run::Embed => "embed",
                Run::Loop => "loop",
                Run::Head => "head",
            };
            if want.is_some_and(|w| w != inv.run) || (want.is_none() && inv.run != Run::Loop) || n < 3 {
                self.invalid(&field, format!("runs {run}; a schedule is embed, then loops over the layers, then head"));
                continue;
            }
            if inv.run != Run::Loop {
                if !inv.block.is_empty() || !inv.layers.is_empty() {
                    self.invalid(&field, format!("the {run} invocation has no block or layers"));
                }
                continue;
            }
            if inv.block.is_empty() || inv.layers.is_empty() || !inv.layers.len().is_multiple_of(inv.block.len()) {
                let problem = format!(
                    "loops {} layers over a block of {} kinds; a loop runs a whole number (at least one) of non-empty blocks",
                    inv.layers.len(),
                    inv.block.len()
                );
                self.invalid(&field, problem);
                covered = false;
                break;
            }
            for (j, &layer) in inv.layers.iter().enumerate() {
                if layer != next {
                    let problem = format!(
                        "runs layer {layer} where layer {next} comes next; the loops run every layer once, in order"
                    );
                    self.invalid(format!("{field}.layers"), problem);
                    return;
                }
                next += 1;
                let kind = &inv.block[j % inv.block.len()];
                match self.m.layers.get(layer) {
                    Some(entry) if entry.kind == *kind => {}
                    Some(entry) => {
                        let problem =
                            format!("runs layer {layer} as kind `{kind}`, but layer {layer} is kind `{}`", entry.kind);
                        self.invalid(format!("{field}.block"), problem);
                    }
                    None => {
                        let problem = format!("runs layer {layer}, but the bundle has {} layers", self.m.layers.len());
                        self.invalid(format!("{field}.layers"), problem);
                        return;
                    }
                }
            }
        }
        if covered && next != self.m.layers.len() {
            let problem = format!("the loops run layers 0..{next}, but the bundle has {} layers", self.m.layers.len());
            self.invalid("schedule.invocations", problem);
        }
        let p = &self.m.programs;
        let programs: Vec<&String> =
            [&p.embed.name, &p.head.name].into_iter().chain(p.kinds.iter().map(|k| &k.name)).collect();
        let mut set_of: BTreeMap<&String, usize> = BTreeMap::new();
        for (i, set) in s.resident.iter().enumerate() {
            for name in set {
                if !programs.contains(&name) {
                    self.invalid(format!("schedule.resident[{i}]"), format!("names `{name}`, which is not a program"));
                } else if set_of.insert(name, i).is_some() {
                    self.invalid(format!("schedule.resident[{i}]"), format!("`{name}` is in more than one set"));
                }
            }
        }
        for name in programs.iter().filter(|n| !set_of.contains_key(*n)) {
            self.invalid("schedule.resident", format!("program `{name}` is in no set"));
        }
        for (i, inv) in s.invocations.iter().enumerate() {
            let sets: BTreeSet<Option<&usize>> = inv.block.iter().map(|k| set_of.get(k)).collect();
            if sets.len() > 1 {
                let problem = format!("loops over kinds {:?}, which are not resident together", inv.block);
                self.invalid(format!("schedule.invocations[{i}].block"), problem);
            }
        }
    }

    fn tensors(&mut self) {
        let chips = self.m.cut.tp.unwrap_or(1);
        for (name, entry) in &self.m.tensors {
            if let Some(problem) = tensor_problem(entry, chips) {
                self.invalid(format!("tensors.{name}"), problem);
            }
        }
        for state in &self.m.states {
            if let Some(problem) = slices_problem(&state.slices, &state.shape, chips, Split::Partition) {
                self.invalid(format!("states.{}", state.name), problem);
            }
        }
        for activation in &self.m.activations {
            if let Some(problem) = slices_problem(&activation.slices, &activation.shape, chips, Split::Cover) {
                self.invalid(format!("activations.{}", activation.name), problem);
            }
        }
        for shared in &self.m.shared {
            let Some(rope) = &shared.rope else { continue };
            if shared.shape.len() != 2 || shared.shape[1].checked_mul(2) != Some(rope.spec.dim) {
                let problem = format!(
                    "shape {:?} is not [rows, {}] for rotary dim {}",
                    shared.shape,
                    rope.spec.dim / 2,
                    rope.spec.dim
                );
                self.invalid(format!("shared.{}", shared.name), problem);
            }
        }
    }
}

/// What is wrong with one checkpoint tensor entry, if anything.
fn tensor_problem(entry: &TensorEntry, chips: usize) -> Option<String> {
    let c = &entry.checkpoint;
    let rank = entry.shape.len();
    let shape_ok = match c.kind {
        CheckpointKind::Tensor => {
            c.names.len() == 1 && c.axis.is_none() && c.start.is_none() && c.len.is_none() && c.step.is_none()
        }
        CheckpointKind::Stack => {
            let plain = c.start.is_none() && c.len.is_none() && c.step.is_none() && !c.transposed;
            !c.names.is_empty() && c.axis.is_some_and(|a| a < rank) && plain
        }
        CheckpointKind::Slice => {
            let located = c.axis.is_some_and(|a| a < rank) && c.start.is_some() && c.len.is_some();
            c.names.len() == 1 && located && c.step != Some(0)
        }
    };
    if !shape_ok {
        return Some(format!("checkpoint of kind {:?} needs {}", c.kind, checkpoint_needs(c.kind)));
    }
    if c.kind == CheckpointKind::Stack && c.axis.is_some_and(|a| entry.shape[a] != c.names.len()) {
        return Some(format!("stacks {} tensors along an axis of length {}", c.names.len(), entry.shape[c.axis?]));
    }
    let storage = match (entry.storage, entry.block) {
        (TensorStorage::Fp8, Some(b)) if b.contains(&0) => return Some(format!("block {b:?} is empty")),
        (TensorStorage::Fp8, None) => return Some("storage fp8 needs its `block` [rows, cols]".into()),
        (TensorStorage::Fp8, _) => entry.program_storage()?,
        (other, Some(_)) => return Some(format!("storage {} takes no `block` (only fp8 does)", other.word())),
        (_, None) => entry.program_storage()?,
    };
    if let Some(problem) = stored_block_problem(entry) {
        return Some(problem);
    }
    if let Some(problem) = storage.misfit(&entry.shape) {
        return Some(problem);
    }
    if let Some(problem) = blocks_read_as_stored(entry, storage) {
        return Some(problem);
    }
    if let Some(problem) = pad_problem(entry, storage) {
        return Some(problem);
    }
    let shape = entry.padded_shape();
    if let Some(problem) = slices_problem(&entry.slices, &shape, chips, Split::PartitionOrCover) {
        return Some(problem);
    }
    let splits_blocks = entry.slices.iter().flatten().any(|s| {
        let unit = storage.split_unit(rank, s.axis);
        !s.start.is_multiple_of(unit) || !(s.len.is_multiple_of(unit) || s.start + s.len == shape[s.axis])
    });
    if splits_blocks && storage == crate::program::Storage::Q8_0 {
        return Some("slices split its Q8_0 blocks: ranges of the last axis must be multiples of 32".into());
    }
    if splits_blocks {
        return Some(format!(
            "slices split its {} blocks: a range must start on a block and end on one or at the axis' end",
            entry.storage.word()
        ));
    }
    None
}

/// What is wrong with a tensor's `pad`, if anything: it grows the axis its slices cut, of a
/// dense or MXFP4 tensor (whole blocks along the blocked last axis).
fn pad_problem(entry: &TensorEntry, storage: crate::program::Storage) -> Option<String> {
    let pad = entry.pad?;
    let Some(&extent) = entry.shape.get(pad.axis) else {
        return Some(format!("pad axis {} is outside shape {:?}", pad.axis, entry.shape));
    };
    if pad.to <= extent {
        return Some(format!("pad grows axis {} from {extent} to {}, not beyond it", pad.axis, pad.to));
    }
    if entry.slices.is_empty() || entry.slices.iter().flatten().any(|s| s.axis != pad.axis) {
        return Some(format!("pad grows axis {}, which its slices do not cut", pad.axis));
    }
    match storage {
        crate::program::Storage::Dense => None,
        crate::program::Storage::Mxfp4 if pad.axis + 1 < entry.shape.len() || pad.to.is_multiple_of(32) => None,
        crate::program::Storage::Mxfp4 => Some(format!("pad to {} splits its MXFP4 blocks of 32", pad.to)),
        _ => Some(format!("storage {} is never padded (only dense and mxfp4 tensors are)", entry.storage.word())),
    }
}

/// Why a tensor stored FP8 or MXFP4 cannot be read from its checkpoint entry as stored, if it
/// cannot: its blocks lie along the checkpoint tensor's last axis, so the entry neither swaps
/// the last two axes nor takes every `step`-th entry of the last one.
fn blocks_read_as_stored(entry: &TensorEntry, storage: crate::program::Storage) -> Option<String> {
    let c = &entry.checkpoint;
    if !storage.is_blocks() || storage == crate::program::Storage::Q8_0 {
        return None;
    }
    let word = entry.storage.word();
    if c.transposed {
        return Some(format!(
            "is stored {word}, read as the checkpoint stores it: its checkpoint cannot be transposed"
        ));
    }
    let last = entry.shape.len().checked_sub(1);
    if c.step.is_some_and(|s| s > 1) && c.axis == last {
        return Some(format!(
            "is stored {word}: a slice of step {} along its blocked last axis splits blocks",
            c.step?
        ));
    }
    None
}

/// What per-chip slices may be.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Split {
    /// A partition of the axis (or an exact replication of one, as replicated kv heads are).
    Partition,
    /// Every chip one run, the runs covering the axis in chip order
    /// (`tensor_parallel::check_cover`): a gathered result.
    Cover,
    /// Either: a weight (a vocabulary-parallel head's rows cover the vocabulary).
    PartitionOrCover,
}

/// What is wrong with the per-chip slices of a tensor, state or activation of `shape`, if
/// anything: one list per chip, in bounds, along one axis, the same extent on every chip, and
/// together what `kind` allows.
pub(super) fn slices_problem(slices: &[Vec<Slice>], shape: &[usize], chips: usize, kind: Split) -> Option<String> {
    if slices.is_empty() {
        return None;
    }
    if slices.len() != chips {
        return Some(format!("has {} slices for {chips} chips; give one per chip or none", slices.len()));
    }
    let outside = slices.iter().position(|chip| {
        chip.is_empty()
            || chip.iter().any(|s| s.axis >= shape.len() || s.len == 0 || s.start.saturating_add(s.len) > shape[s.axis])
    });
    if let Some(chip) = outside {
        return Some(format!("slices[{chip}] lies outside shape {shape:?}"));
    }
    let axis = slices[0][0].axis;
    if slices.iter().flatten().any(|s| s.axis != axis) {
        return Some("slices cut more than one axis; give every range along one axis".into());
    }
    let split = TpSplit {
        stored: None,
        tensor: "the tensor".into(),
        axis,
        parts: slices.iter().map(|c| c.iter().map(|s| (s.start, s.start + s.len)).collect()).collect(),
    };
    let local = split.parts[0].iter().map(|(a, b)| b - a).sum();
    let partition = || check_split(&split, shape, Some(local), chips);
    let cover = || check_cover(&split, shape, local, chips);
    match kind {
        Split::Partition => partition().err(),
        Split::Cover => cover().err(),
        Split::PartitionOrCover => partition().err().filter(|_| cover().is_err()),
    }
}

fn checkpoint_needs(kind: CheckpointKind) -> &'static str {
    match kind {
        CheckpointKind::Tensor => "exactly one name and no axis, start, len or step",
        CheckpointKind::Stack => "at least one name and an axis within the shape, no start, len, step or transposed",
        CheckpointKind::Slice => "exactly one name and an axis within the shape, start and len, a step of at least 1",
    }
}

/// A `stored_block` is an fp8 tensor's, and cuts into whole `block`s.
fn stored_block_problem(entry: &TensorEntry) -> Option<String> {
    let stored = entry.stored_block?;
    match entry.block {
        Some(block) if entry.storage == TensorStorage::Fp8 => {
            let divides = block.iter().zip(stored).all(|(&b, s)| b > 0 && s.is_multiple_of(b));
            (!divides).then(|| format!("stored_block {stored:?} is not cut into whole blocks of {block:?}"))
        }
        _ => Some("only an fp8 tensor with a `block` takes a `stored_block`".into()),
    }
}
