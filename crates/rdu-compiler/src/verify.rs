//! `verify`: re-certify a bundle from its own files, independently of the lowering that wrote
//! it (`rdu verify`).
//!
//! For every program the stored `.rdu` is parsed and lifted, the stored `.spatial` parsed, the
//! source's `shape_digest` (with the storage set and slices the manifest gives its names) checked
//! against the manifest's `digest`, and the certificate's checks run again with its seed:
//! structure (every kernel the source's statement exactly), resources against the bundle's
//! chip, and numbers — the simulator on the stored `.spatial` against the reference
//! interpreter on the stored `.rdu`, at the program's real shapes. Where the certificate says
//! its numbers ran on a smaller program (`certified_against` role `reduced`: fewer vocabulary
//! rows, fewer rows of a prefill chunk), that stored source is lowered and checked instead, and
//! the stored program's structure and resources at full size; a tensor-parallel kind is run on
//! all its chips against its stored unsplit program (`certify_tp`). The manifest's bindings
//! and slices are checked as `Bundle::validate` checks them, and each program's declared
//! names, storage set and slices against the manifest's. With a model, every layer's authored
//! program must be its kind's under the manifest's binding.

use crate::certify::{certify, certify_tp, check_structure, check_tp_structure, Certificate};
use crate::front::lift;
use crate::graph::Graph;
use crate::lang::{shape_digest, Slices, Source};
use crate::lower::{lower, lower_split, Split, PASSES};
use crate::model::spec::{Cut, ModelSpec};
use rdu_spatial::bundle::Bundle;
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::{Attached, AttachedRole, CertificateEntry, CutMode, Manifest};
use rdu_spatial::program::{Role, SpatialProgram, Storage};
use std::collections::{BTreeMap, BTreeSet};

/// What `verify` found for one program.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramReport {
    pub name: String,
    /// The checks that passed again.
    pub checks: Vec<String>,
    /// The worst difference between simulator and reference this run found.
    pub max_abs_err: f64,
}

/// A program that did not verify: which, which check, why (one line).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("program `{program}`: {check}: {message}")]
pub struct VerifyFault {
    pub program: String,
    pub check: String,
    pub message: String,
}

fn fault(program: &str, check: &str, message: impl Into<String>) -> VerifyFault {
    VerifyFault { program: program.to_string(), check: check.to_string(), message: message.into() }
}

/// One program entry of the manifest, embed / kind / head alike.
struct Entry<'m> {
    name: &'m str,
    file_source: &'m str,
    file_spatial: &'m str,
    digest: &'m str,
    declared: &'m [String],
    certificate: &'m CertificateEntry,
    attached: &'m [Attached],
    /// Program name → bundle name (a kind: its first layer's binding; the head: its `bind`).
    bind: BTreeMap<String, String>,
    is_kind: bool,
}

fn entries(m: &Manifest) -> Vec<Entry<'_>> {
    let p = &m.programs;
    fn part(e: &rdu_spatial::manifest::ProgramEntry) -> Entry<'_> {
        Entry {
            name: &e.name,
            file_source: &e.file_source,
            file_spatial: &e.file_spatial,
            digest: &e.digest,
            declared: &e.declared,
            certificate: &e.certificate,
            attached: &e.certified_against,
            bind: e.bind.clone(),
            is_kind: false,
        }
    }
    let kinds = p.kinds.iter().map(|k| {
        let first = k.layers.first().and_then(|&l| m.layers.get(l));
        Entry {
            name: &k.name,
            file_source: &k.file_source,
            file_spatial: &k.file_spatial,
            digest: &k.digest,
            declared: &k.declared,
            certificate: &k.certificate,
            attached: &k.certified_against,
            bind: first.map(|l| l.bind.clone()).unwrap_or_default(),
            is_kind: true,
        }
    });
    std::iter::once(part(&p.embed)).chain(kinds).chain(std::iter::once(part(&p.head))).collect()
}

/// The cut the manifest records, as the compiler names it.
pub fn manifest_cut(m: &Manifest) -> Option<Cut> {
    let c = &m.cut;
    Some(match c.mode {
        CutMode::Forward => Cut::Forward { seq: c.seq? },
        CutMode::Decode => Cut::Decode { ctx: c.ctx? },
        CutMode::Batched => Cut::Batched { batch: c.batch?, ctx: c.ctx? },
        CutMode::Tp => Cut::Tp { tp: c.tp?, ctx: c.ctx? },
        CutMode::BatchedTp => Cut::BatchedTp { batch: c.batch?, tp: c.tp?, ctx: c.ctx? },
        CutMode::Prefill => Cut::Prefill { chunk: c.chunk?, ctx: c.ctx? },
        CutMode::PrefillTp => Cut::PrefillTp { chunk: c.chunk?, tp: c.tp?, ctx: c.ctx? },
        CutMode::Verify => Cut::Verify { draft: c.draft?, batch: c.batch, tp: c.tp.unwrap_or(1), ctx: c.ctx? },
    })
}

/// Re-certifies every program of `bundle` (read and validated: hashes, bindings, slices) on
/// `chip`, which must be the bundle's. Stops at the first program that fails; `report` is
/// called with each program that passes, in manifest order (embed, kinds, head).
pub fn verify_bundle(
    bundle: &Bundle,
    chip: &Chip,
    report: &mut dyn FnMut(&ProgramReport),
) -> Result<Vec<ProgramReport>, VerifyFault> {
    let m = &bundle.manifest;
    bundle.validate().map_err(|e| fault("manifest", "bindings", e.to_string()))?;
    if chip.name != m.chip {
        return Err(fault(
            "manifest",
            "resources",
            format!("the bundle is for chip `{}`, not `{}`; pass its chip description", m.chip, chip.name),
        ));
    }
    let tp = m.cut.is_split();
    let chips = m.cut.tp.unwrap_or(1);
    let mut out = Vec::new();
    for e in entries(m) {
        let r = verify_program(bundle, &e, chip, tp && split_over_chips(m, &e), chips)?;
        report(&r);
        out.push(r);
    }
    Ok(out)
}

/// Re-certifies the one program `name` of `bundle` (after validating the whole manifest).
pub fn verify_one(bundle: &Bundle, name: &str, chip: &Chip) -> Result<ProgramReport, VerifyFault> {
    let m = &bundle.manifest;
    bundle.validate().map_err(|e| fault("manifest", "bindings", e.to_string()))?;
    let tp = m.cut.is_split();
    let entries = entries(m);
    let e = entries.iter().find(|e| e.name == name).ok_or_else(|| fault(name, "files", "no such program"))?;
    verify_program(bundle, e, chip, tp && split_over_chips(m, e), m.cut.tp.unwrap_or(1))
}

/// Whether a program of a tensor-parallel bundle runs split over the chips: every kind, and the
/// vocabulary-parallel head (the embedding is on the replicated spine).
fn split_over_chips(m: &Manifest, e: &Entry<'_>) -> bool {
    e.is_kind || e.name == m.programs.head.name
}

fn verify_program(
    bundle: &Bundle,
    e: &Entry<'_>,
    chip: &Chip,
    split: bool,
    chips: usize,
) -> Result<ProgramReport, VerifyFault> {
    let m = &bundle.manifest;
    let name = e.name;
    let bundle_name = |n: &str| e.bind.get(n).cloned().unwrap_or_else(|| n.to_string());
    // The source, with the storage set and slices the manifest gives its names.
    let text = stored_file(bundle, name, e.file_source)?;
    let source = Source::new(text.clone(), BTreeMap::new());
    let (program, graph) = front(name, e.file_source, &source)?;
    let (stored_set, slices) = storage_of(m, program, &bundle_name).map_err(|p| fault(name, "bindings", p))?;
    // A program on the replicated spine reads every tensor whole (the embedding of a tied
    // table that the vocabulary-parallel head reads sliced).
    let slices = if split { slices } else { BTreeMap::new() };
    let source = source.with_storage(stored_set.clone(), slices.clone());
    let digest = shape_digest(&source).hex();
    if digest != e.digest {
        return Err(fault(
            name,
            "digest",
            format!("the shape_digest of `{}` is {digest}, the manifest says {}", e.file_source, e.digest),
        ));
    }
    let spatial = rdu_spatial::text::parse(stored_file(bundle, name, e.file_spatial)?)
        .map_err(|err| fault(name, "parse", format!("{}: {err}", e.file_spatial)))?;
    check_bindings(m, e, &spatial, &graph, &stored_set, &slices, &bundle_name, chip)?;
    let mut checks = vec!["digest".to_string(), "bindings".to_string()];
    let stored = Stored { bundle, e, stored: &stored_set, chip };
    let seed = e.certificate.seed;
    let certificate = if split {
        stored.certify_split(&spatial, &graph, &slices, chips)?
    } else {
        stored.certify_whole(&spatial, &graph)?
    };
    if certificate.seed != seed {
        return Err(fault(name, "numbers", "ran with another seed than the certificate's"));
    }
    checks.extend(check_names(&certificate.checks));
    checks.dedup();
    Ok(ProgramReport { name: name.to_string(), checks, max_abs_err: certificate.max_abs_err })
}

/// A check's name is the first word of its note (`slices: ...`, `partial sums: ...`); the
/// full-size check after numbers on reduced rows is named as such, not "structure" again.
fn check_names(notes: &[String]) -> impl Iterator<Item = String> + '_ {
    notes.iter().map(|c| match c.split([' ', ':']).next().unwrap_or(c) {
        _ if c.ends_with("at full size") => "full-size structure".to_string(),
        "partial" => "partial sums".to_string(),
        word => word.to_string(),
    })
}

/// The file `path` of `bundle`, or the fault of program `name` that it is missing.
fn stored_file<'b>(bundle: &'b Bundle, name: &str, path: &str) -> Result<&'b String, VerifyFault> {
    bundle.files.get(path).ok_or_else(|| fault(name, "files", format!("`{path}` is not in the bundle")))
}

/// A certification fault as the fault of program `name` in the check it names.
fn certified(name: &str, c: Result<Certificate, crate::certify::CertifyFault>) -> Result<Certificate, VerifyFault> {
    c.map_err(|f| fault(name, f.check(), f.message()))
}

/// One stored program being re-certified: its bundle, manifest entry and storage set, on `chip`.
struct Stored<'a> {
    bundle: &'a Bundle,
    e: &'a Entry<'a>,
    stored: &'a BTreeMap<String, Storage>,
    chip: &'a Chip,
}

impl Stored<'_> {
    /// The source the certificate says it ran against in `role`, lifted, if the manifest gives one.
    fn attached(&self, role: AttachedRole) -> Result<Option<(Source, Graph)>, VerifyFault> {
        let Some(a) = self.e.attached.iter().find(|a| a.role == role) else { return Ok(None) };
        let text = stored_file(self.bundle, self.e.name, &a.file)?;
        let source = Source::new(text.clone(), self.stored.clone());
        let (_, graph) = front(self.e.name, &a.file, &source)?;
        Ok(Some((source, graph)))
    }

    /// A one-chip program certified again: itself, or its numbers on the stored reduced
    /// program and its own structure and resources at full size.
    fn certify_whole(&self, spatial: &SpatialProgram, graph: &Graph) -> Result<Certificate, VerifyFault> {
        let (name, chip, seed) = (self.e.name, self.chip, self.e.certificate.seed);
        if spatial.tp.is_some() {
            return Err(fault(name, "slices", "a one-chip program carries a tensor-parallel layout"));
        }
        let Some((small, small_graph)) = self.attached(AttachedRole::Reduced)? else {
            return certified(name, certify(spatial, graph, chip, seed));
        };
        let lowered = lower_source(name, &small, &small_graph, chip)?;
        // Fewer rows of a prefill chunk keep every kernel, argument and tile; fewer
        // vocabulary rows (the embedding and head) change the tiles.
        if self.e.is_kind && kernels(&lowered) != kernels(spatial) {
            return Err(fault(
                name,
                "numbers",
                "the reduced program's kernels, arguments or tiles are not the stored program's",
            ));
        }
        let mut c = certified(name, certify(&lowered, &small_graph, chip, seed))?;
        certified(name, check_structure(spatial, graph, chip).map(|()| c.clone()))?;
        c.checks.push("structure and resources at full size".into());
        Ok(c)
    }

    /// A split program certified again over its `chips` against its stored unsplit program, or
    /// its numbers on the stored reduced split and unsplit programs and its own structure,
    /// resources and slices at full size.
    fn certify_split(
        &self,
        spatial: &SpatialProgram,
        graph: &Graph,
        slices: &BTreeMap<String, Slices>,
        chips: usize,
    ) -> Result<Certificate, VerifyFault> {
        let (name, chip, seed) = (self.e.name, self.chip, self.e.certificate.seed);
        if spatial.tp.as_ref().map(|t| t.chips as usize) != Some(chips) {
            return Err(fault(
                name,
                "slices",
                format!("a program of this {chips}-chip bundle is not split over {chips} chips"),
            ));
        }
        let (whole, whole_graph) = self.attached(AttachedRole::Unsplit)?.ok_or_else(|| {
            fault(name, "numbers", "the manifest gives no unsplit program to certify the chips against")
        })?;
        let unsplit = lower_source(name, &whole, &whole_graph, chip)?;
        match (self.attached(AttachedRole::Reduced)?, self.attached(AttachedRole::ReducedUnsplit)?) {
            (None, None) => certified(name, certify_tp(spatial, graph, &unsplit, &whole_graph, chip, seed)),
            (Some((small, small_graph)), Some((small_whole, small_whole_graph))) => {
                // The numbers ran on the reduced split program against its unsplit counterpart;
                // the reduced program's runs are the compiler's cover of its smaller axis.
                let small_unsplit = lower_source(name, &small_whole, &small_whole_graph, chip)?;
                let small_slices = reduced_slices(slices, &small_unsplit, chips);
                let (small_program, _) = front(name, "attached source", &small)?;
                let split = Split { chips, slices: &small_slices };
                let small_spatial =
                    lower_split(name, small_program, &small_graph, &small.stored, split, chip, &mut |_, _| {});
                let mut c = certified(
                    name,
                    certify_tp(&small_spatial, &small_graph, &small_unsplit, &small_whole_graph, chip, seed),
                )?;
                certified(name, check_tp_structure(spatial, graph, &unsplit, chip).map(|_| c.clone()))?;
                c.checks.push("structure, resources and slices at full size".into());
                Ok(c)
            }
            _ => Err(fault(
                name,
                "numbers",
                "the manifest gives a reduced split program without its reduced unsplit counterpart, or the other way round",
            )),
        }
    }
}

fn front<'s>(
    name: &str,
    path: &str,
    source: &'s Source,
) -> Result<(&'s crate::lang::ast::Program, Graph), VerifyFault> {
    let program = source.program().map_err(|d| {
        let first = d.first().map(ToString::to_string).unwrap_or_default();
        fault(name, "parse", format!("{path}: {first}"))
    })?;
    let graph = lift(program).map_err(|r| {
        let first = r.diagnostics.first().map(ToString::to_string).unwrap_or_default();
        fault(name, "lift", format!("{path}: {first}"))
    })?;
    Ok((program, graph))
}

/// `source` lowered by this build (for a reduced or unsplit program the bundle does not store
/// lowered: only its reference and its declarations are used).
fn lower_source(name: &str, source: &Source, graph: &Graph, chip: &Chip) -> Result<SpatialProgram, VerifyFault> {
    let (program, _) = front(name, "attached source", source)?;
    debug_assert_eq!(PASSES.len(), 7);
    Ok(lower(name, program, graph, &source.stored, chip, &mut |_, _| {}))
}

/// The slices of the reduced form of a split program whose full slices are `full`: a tensor
/// whose extent along its split axis the reduction left alone keeps its slices, one it made
/// smaller (the vocabulary of a vocabulary-parallel head) is covered as the compiler covers it
/// (`model::author::cover`).
fn reduced_slices(full: &BTreeMap<String, Slices>, small: &SpatialProgram, chips: usize) -> BTreeMap<String, Slices> {
    full.iter()
        .map(|(name, s)| {
            // A zero-padded tensor's whole is its stored extent; its ranges run past it.
            let whole_extent = s.stored.unwrap_or_else(|| s.end());
            let extent = small.decl(name).and_then(|d| d.shape.get(s.axis).copied()).unwrap_or(whole_extent);
            if extent == whole_extent {
                return (name.clone(), s.clone());
            }
            (name.clone(), Slices::new(s.axis, crate::model::author::cover(extent, chips)))
        })
        .collect()
}

/// A program's weights stored in a block format, each with its format (`Source::stored`).
type StorageSet = BTreeMap<String, Storage>;

/// The program's storage set and slices as the manifest records them under its bundle names
/// (an `fp8` entry without a usable block is the one-line refusal).
fn storage_of(
    m: &Manifest,
    program: &crate::lang::ast::Program,
    bundle_name: &dyn Fn(&str) -> String,
) -> Result<(StorageSet, BTreeMap<String, Slices>), String> {
    let (mut stored, mut slices) = (BTreeMap::new(), BTreeMap::new());
    for d in program.decls() {
        let own = d.name.text.clone();
        let theirs = bundle_name(&own);
        let (split, pad) = match m.tensors.get(&theirs) {
            Some(t) => {
                let storage = t.program_storage().ok_or_else(|| format!("tensor `{theirs}`: fp8 without its block"))?;
                if storage.is_blocks() {
                    stored.insert(own.clone(), storage);
                }
                // A zero-padded tensor: the checkpoint's extent of the padded axis.
                (&t.slices, t.pad.and_then(|p| t.shape.get(p.axis).copied()))
            }
            None => match m.states.iter().find(|s| s.name == theirs) {
                Some(s) => (&s.slices, None),
                // A gathered result (a vocabulary-parallel head's logits).
                None => match m.activations.iter().find(|a| a.name == theirs) {
                    Some(a) => (&a.slices, None),
                    None => continue,
                },
            },
        };
        if let Some(axis) = split.first().and_then(|c| c.first()).map(|s| s.axis) {
            let parts = split.iter().map(|c| c.iter().map(|s| (s.start, s.start + s.len)).collect()).collect();
            slices.insert(own, Slices { axis, parts, stored: pad });
        }
    }
    // A gathered result (a vocabulary-parallel head's logits) is an output, not a declaration.
    for out in program.outputs() {
        let theirs = bundle_name(&out.text);
        let Some(a) = m.activations.iter().find(|a| a.name == theirs) else { continue };
        if let Some(axis) = a.slices.first().and_then(|c| c.first()).map(|s| s.axis) {
            let parts = a.slices.iter().map(|c| c.iter().map(|s| (s.start, s.start + s.len)).collect()).collect();
            slices.insert(out.text.clone(), Slices::new(axis, parts));
        }
    }
    Ok((stored, slices))
}

/// The stored program against the manifest: its chip, declared names, storage set and
/// tensor-parallel slices are the manifest's, and its declarations the source's.
#[allow(clippy::too_many_arguments)]
fn check_bindings(
    m: &Manifest,
    e: &Entry<'_>,
    spatial: &SpatialProgram,
    graph: &Graph,
    stored_set: &BTreeMap<String, Storage>,
    slices: &BTreeMap<String, Slices>,
    bundle_name: &dyn Fn(&str) -> String,
    chip: &Chip,
) -> Result<(), VerifyFault> {
    let name = e.name;
    let bad = |message: String| fault(name, "bindings", message);
    if spatial.chip != chip.name || spatial.name != name {
        return Err(bad(format!(
            "`{}` is program `{}` for chip `{}`, the manifest's `{name}` for `{}`",
            e.file_spatial, spatial.name, spatial.chip, m.chip
        )));
    }
    let declared: BTreeSet<&str> =
        spatial.tensors.iter().filter(|t| t.role != Role::Temp).map(|t| t.name.as_str()).collect();
    let listed: BTreeSet<&str> = e.declared.iter().map(String::as_str).collect();
    if declared != listed {
        return Err(bad(format!("the program declares {declared:?}, the manifest lists {listed:?}")));
    }
    let mut from_source: BTreeSet<&str> = graph.declared().map(|(_, v, _)| v.name.as_str()).collect();
    from_source.extend(graph.outputs.iter().map(|o| o.name.as_str()));
    if declared != from_source {
        return Err(bad(format!("the program declares {declared:?}, its source {from_source:?}")));
    }
    let q8 = |set: &BTreeMap<String, Storage>| -> BTreeSet<String> {
        set.iter().filter(|(_, s)| **s == Storage::Q8_0).map(|(n, _)| n.clone()).collect()
    };
    let stored: BTreeMap<String, Storage> =
        spatial.tensors.iter().filter(|t| t.storage.is_blocks()).map(|t| (t.name.clone(), t.storage)).collect();
    if q8(&stored) != q8(stored_set) {
        return Err(bad(format!("the program stores {:?} as Q8_0, the manifest {:?}", q8(&stored), q8(stored_set))));
    }
    if &stored != stored_set {
        let words = |set: &BTreeMap<String, Storage>| -> BTreeMap<String, String> {
            set.iter().map(|(n, s)| (n.clone(), s.word())).collect()
        };
        return Err(bad(format!("the program stores {:?}, the manifest {:?}", words(&stored), words(stored_set))));
    }
    let program_slices: BTreeMap<String, Slices> = spatial
        .tp
        .iter()
        .flat_map(|t| &t.splits)
        .map(|s| (s.tensor.clone(), Slices { axis: s.axis, parts: s.parts.clone(), stored: s.stored }))
        .collect();
    if &program_slices != slices {
        let differs = program_slices
            .keys()
            .chain(slices.keys())
            .find(|k| program_slices.get(*k) != slices.get(*k))
            .cloned()
            .unwrap_or_default();
        return Err(fault(
            name,
            "slices",
            format!(
                "the program's slices of `{differs}` are not the manifest's for `{}` (the chips would load other rows than were certified)",
                bundle_name(&differs)
            ),
        ));
    }
    Ok(())
}

/// Every kernel op of `program` in order without its literal arguments (a reshape's shape
/// holds the row count): what a prefill chunk and its reduced form share.
fn kernels(program: &SpatialProgram) -> Vec<rdu_spatial::program::KernelOp> {
    use rdu_spatial::program::Arg;
    program
        .ops()
        .map(|(_, op)| {
            let mut op = op.clone();
            op.args.retain(|a| matches!(a, Arg::Tensor(_)));
            op
        })
        .collect()
}

/// With the model the bundle was lowered from: every layer's authored program is its kind's
/// stored program under the manifest's binding (the renaming from the kind's source to the
/// layer's exists and agrees with `layers[i].bind` on every declared name), and the embedding
/// and head are the model's.
pub fn verify_model(bundle: &Bundle, spec: &ModelSpec) -> Result<(), VerifyFault> {
    use crate::lang::renaming;
    use crate::model::author::{embed_source, head_source, source_of};
    use crate::model::storage::Storage as ModelStorage;
    let m = &bundle.manifest;
    // Re-authored with the states stored as the bundle stores them (a deployment's choice, like
    // Q8_0 storage below).
    let mut spec = spec.clone();
    if let Some(dtype) = m.state_dtype().map_err(|problem| fault("manifest", "states", problem))? {
        spec.state = dtype;
    }
    let spec = &spec;
    let cut = manifest_cut(m).ok_or_else(|| fault("manifest", "cut", "the cut lacks a size its mode needs"))?;
    if spec.n_layers() != m.layers.len() {
        return Err(fault(
            "manifest",
            "model",
            format!("the model has {} layers, the bundle {}", spec.n_layers(), m.layers.len()),
        ));
    }
    let stored =
        m.tensors.iter().filter_map(|(n, t)| Some((n.clone(), t.checkpoint_storage().filter(|s| s.is_blocks())?)));
    let storage = ModelStorage::Exactly(stored.collect());
    let entries = entries(m);
    for layer in &m.layers {
        let kind = entries.iter().find(|e| e.is_kind && e.name == layer.kind);
        let kind = kind.ok_or_else(|| fault(&layer.kind, "model", "no such kind"))?;
        let text = bundle.files.get(kind.file_source).cloned().unwrap_or_default();
        let authored = source_of(spec, layer.layer, cut, &storage);
        let kind_source = Source::new(text, BTreeMap::new());
        let layer_source = Source::new(authored.text().to_string(), BTreeMap::new());
        let map = renaming(&kind_source, &layer_source).ok_or_else(|| {
            fault(
                kind.name,
                "model",
                format!("layer {}'s authored program is not this kind's up to names", layer.layer),
            )
        })?;
        for n in kind.declared {
            let want = map.get(n).cloned().unwrap_or_else(|| n.clone());
            if layer.bind.get(n) != Some(&want) {
                return Err(fault(
                    kind.name,
                    "model",
                    format!(
                        "layer {} binds `{n}` to {:?}, but the layer's program names it `{want}`",
                        layer.layer,
                        layer.bind.get(n)
                    ),
                ));
            }
        }
    }
    let one_chip = cut.unsplit();
    for (e, authored) in [
        (&entries[0], embed_source(spec, one_chip, &storage)),
        // The head of a tensor-parallel cut is its own (vocabulary-parallel).
        (&entries[entries.len() - 1], head_source(spec, cut, &storage)),
    ] {
        let text = bundle.files.get(e.file_source).cloned().unwrap_or_default();
        let back: BTreeMap<&str, &str> = e.bind.iter().map(|(a, b)| (b.as_str(), a.as_str())).collect();
        let mut program =
            authored.program().map_err(|_| fault(e.name, "model", "the model's program does not parse"))?.clone();
        program.rename(&|n| back.get(n).map_or_else(|| n.to_string(), |s| s.to_string()));
        let ours = Source::new(crate::lang::print(&program), BTreeMap::new());
        if shape_digest(&ours) != shape_digest(&Source::new(text, BTreeMap::new())) {
            return Err(fault(e.name, "model", "the stored program is not the model's"));
        }
    }
    Ok(())
}
