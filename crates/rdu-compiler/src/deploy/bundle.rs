//! The bundle a vendor ingests (DESIGN §9): every program's source and spatial text, and a
//! manifest saying which kind runs at each layer, how its names bind, and where every
//! checkpoint tensor, state, shared table and activation comes from.

use super::model::{ProgramPart, StreamedModel};
use crate::lang::ast::{DType, DeclKind};
use crate::model::naming::{checkpoint_source, TensorSource};
use crate::model::spec::Cut;
use rdu_spatial::bundle::Bundle;
use rdu_spatial::manifest::{
    file_blake3, ActivationEntry, Attached, AttachedRole, CertificateEntry, Checkpoint, CheckpointKind, CostEntry,
    Cut as CutEntry, CutMode, InputEntry, KindEntry, LayerEntry, Manifest, Pad, ProgramEntry, Programs, SharedEntry,
    SharedRope, Slice, StateDtype, StateEntry, TensorEntry, TensorStorage, FORMAT, VERSION,
};
use rdu_spatial::names::{parse_rope_table, runtime_input};
use std::collections::BTreeMap;

impl StreamedModel {
    /// The bundle of this model: deterministic (same model, same bytes).
    /// A model lowered for an estimate only (`estimate_streamed`) is refused: a bundle holds
    /// certified programs only.
    pub fn bundle(&self) -> Result<Bundle, String> {
        let parts = std::iter::once(&self.embed).chain(self.kinds.iter().map(|k| &k.program)).chain([&self.head]);
        if let Some(p) = parts.into_iter().find(|p| p.estimate_only()) {
            return Err(format!(
                "program `{}` was lowered for an estimate only (numbers not certified); a bundle needs certified programs",
                p.name
            ));
        }
        let mut files = BTreeMap::new();
        let embed = program_entry(&self.embed, &mut files);
        let head = program_entry(&self.head, &mut files);
        let kinds = self.kinds.iter().map(|k| kind_entry(program_entry(&k.program, &mut files), &k.layers)).collect();
        let layers = self
            .layers
            .iter()
            .map(|b| LayerEntry { layer: b.layer, kind: b.kind.clone(), bind: b.bind.clone() })
            .collect();
        let mut tables = Tables::default();
        let none = BTreeMap::new();
        let sources = std::iter::once((&self.embed.source, &none))
            .chain(self.layer_sources.iter().map(|s| (s, &none)))
            .chain(std::iter::once((&self.head.source, &self.head.bind)));
        for (source, bind) in sources {
            tables.add(self, source, bind)?;
        }
        let manifest = Manifest {
            format: FORMAT.to_string(),
            version: VERSION,
            model: self.spec.name.clone(),
            cut: cut_entry(self.cut),
            chip: self.chip.name.clone(),
            storage: self.storage.label().to_string(),
            programs: Programs { embed, head, kinds },
            layers,
            schedule: self.schedule(),
            tensors: tables.tensors,
            inputs: tables.inputs.into_values().collect(),
            states: tables.states.into_values().collect(),
            shared: tables.shared.into_values().collect(),
            activations: tables.activations.into_values().collect(),
        };
        Ok(Bundle { manifest, files })
    }
}

/// The manifest entry of one program, its source and spatial text (and the sources it was
/// certified against) added to `files`.
fn program_entry(part: &ProgramPart, files: &mut BTreeMap<String, String>) -> ProgramEntry {
    let (src, spatial) = (format!("programs/{}.rdu", part.name), format!("programs/{}.spatial", part.name));
    let (src_text, spatial_text) = (part.source.text().to_string(), rdu_spatial::text::print(&part.spatial));
    let (source_blake3, spatial_blake3) = (file_blake3(src_text.as_bytes()), file_blake3(spatial_text.as_bytes()));
    files.insert(src.clone(), src_text);
    files.insert(spatial.clone(), spatial_text);
    let certified_against = part
        .certified_against
        .iter()
        .map(|(role, source)| {
            let word = match role {
                AttachedRole::Unsplit => "unsplit",
                AttachedRole::Reduced => "reduced",
                AttachedRole::ReducedUnsplit => "reduced_unsplit",
            };
            let file = format!("programs/{}.{word}.rdu", part.name);
            let blake3 = file_blake3(source.text().as_bytes());
            files.insert(file.clone(), source.text().to_string());
            Attached { role: *role, file, blake3 }
        })
        .collect();
    ProgramEntry {
        name: part.name.clone(),
        file_source: src,
        file_spatial: spatial,
        source_blake3,
        spatial_blake3,
        certified_against,
        digest: part.digest.clone(),
        declared: part.declared.clone(),
        bind: part.bind.clone(),
        certificate: CertificateEntry {
            checks: part.certificate.checks.clone(),
            seed: part.certificate.seed,
            tolerance: part.certificate.tolerance,
            max_abs_err: part.certificate.max_abs_err,
        },
        cost: CostEntry::from(&part.cost),
    }
}

/// A kind's manifest entry: its program's, with the layers it runs.
fn kind_entry(e: ProgramEntry, layers: &[usize]) -> KindEntry {
    KindEntry {
        name: e.name,
        file_source: e.file_source,
        file_spatial: e.file_spatial,
        source_blake3: e.source_blake3,
        spatial_blake3: e.spatial_blake3,
        certified_against: e.certified_against,
        digest: e.digest,
        layers: layers.to_vec(),
        declared: e.declared,
        certificate: e.certificate,
        cost: e.cost,
    }
}

/// The manifest's record of `cut`.
fn cut_entry(cut: Cut) -> CutEntry {
    let (mode, seq) = match cut {
        Cut::Forward { seq } => (CutMode::Forward, Some(seq)),
        Cut::Decode { .. } => (CutMode::Decode, None),
        Cut::Batched { .. } => (CutMode::Batched, None),
        Cut::Tp { .. } => (CutMode::Tp, None),
        Cut::BatchedTp { .. } => (CutMode::BatchedTp, None),
        Cut::Prefill { .. } => (CutMode::Prefill, None),
        Cut::PrefillTp { .. } => (CutMode::PrefillTp, None),
        Cut::Verify { .. } => (CutMode::Verify, None),
    };
    let tp = (cut.tp() > 1 || cut.is_split()).then(|| cut.tp());
    CutEntry { mode, ctx: cut.ctx(), seq, batch: cut.batch(), tp, chunk: cut.chunk(), draft: cut.draft() }
}

/// The whole shape of a tensor a chip declares as `local` (as the checkpoint stores it: a
/// zero-padded one's `stored` extent), and every chip's manifest ranges (of the padded axis).
fn whole(local: &[usize], s: &crate::lang::Slices) -> (Vec<usize>, Vec<Vec<Slice>>) {
    let mut shape = local.to_vec();
    if let Some(extent) = shape.get_mut(s.axis) {
        *extent = s.stored.unwrap_or_else(|| s.parts.iter().flatten().map(|&(_, end)| end).max().unwrap_or(*extent));
    }
    let slices = s
        .parts
        .iter()
        .map(|chip| chip.iter().map(|&(a, b)| Slice { axis: s.axis, start: a, len: b - a }).collect())
        .collect();
    (shape, slices)
}

/// The manifest's tensor tables, gathered from every program's declarations.
#[derive(Default)]
struct Tables {
    tensors: BTreeMap<String, TensorEntry>,
    inputs: BTreeMap<String, InputEntry>,
    states: BTreeMap<String, StateEntry>,
    shared: BTreeMap<String, SharedEntry>,
    activations: BTreeMap<String, ActivationEntry>,
}

/// The manifest's entry of a checkpoint source.
fn checkpoint_entry(source: TensorSource) -> Checkpoint {
    let one = |kind, name: String| Checkpoint {
        kind,
        names: vec![name],
        axis: None,
        start: None,
        len: None,
        step: None,
        transposed: false,
    };
    match source {
        TensorSource::Tensor(t) => one(CheckpointKind::Tensor, t),
        TensorSource::Transposed(t) => Checkpoint { transposed: true, ..one(CheckpointKind::Tensor, t) },
        TensorSource::Stack(names) => Checkpoint { names, axis: Some(0), ..one(CheckpointKind::Stack, String::new()) },
        TensorSource::Slice { name, axis, start, len } => {
            Checkpoint { axis: Some(axis), start: Some(start), len: Some(len), ..one(CheckpointKind::Slice, name) }
        }
        TensorSource::Strided { name, transposed, axis, start, step, len } => Checkpoint {
            axis: Some(axis),
            start: Some(start),
            len: Some(len),
            step: Some(step),
            transposed,
            ..one(CheckpointKind::Slice, name)
        },
    }
}

impl Tables {
    /// Records the declarations of `source`, each under the bundle name `bind` gives it.
    fn add(
        &mut self,
        model: &StreamedModel,
        source: &crate::lang::Source,
        bind: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let program = source.program().map_err(|d| d[0].to_string())?;
        let spec = &model.spec;
        for d in program.decls() {
            let name = bind.get(&d.name.text).cloned().unwrap_or_else(|| d.name.text.clone());
            // A split tensor is entered whole (as the checkpoint holds it) with every chip's ranges.
            let (shape, slices) = match source.slices.get(&d.name.text) {
                Some(s) => whole(&d.ty.shape, s),
                None => (d.ty.shape.clone(), Vec::new()),
            };
            // Zero-padded by the host as it binds the tensor (`Slices::stored`).
            let pad = source
                .slices
                .get(&d.name.text)
                .filter(|s| s.stored.is_some())
                .map(|s| Pad { axis: s.axis, to: s.end() });
            match d.kind {
                DeclKind::Weight => {
                    let Some(found) = checkpoint_source(spec, &name) else {
                        return Err(format!("no checkpoint tensor is known for `{name}` of {}", spec.name));
                    };
                    let checkpoint = checkpoint_entry(found);
                    let (storage, block) =
                        source.stored.get(&name).map_or((TensorStorage::Dense, None), |s| TensorStorage::of(*s));
                    // A chip's share that cuts the checkpoint's FP8 blocks holds finer ones.
                    let stored_block = model.storage.format_of(&name).and_then(|f| TensorStorage::of(f).1);
                    let stored_block = stored_block.filter(|b| block.is_some_and(|chip| chip != *b));
                    let dtype = "f32".into();
                    let entry = TensorEntry { shape, dtype, storage, block, stored_block, checkpoint, slices, pad };
                    self.tensors.insert(name, entry);
                }
                DeclKind::Input => match runtime_input(&name) {
                    Some((role, sequence)) => {
                        let dtype = d.ty.dtype.keyword().into();
                        self.inputs.insert(name.clone(), InputEntry { name, dtype, shape, role, sequence });
                    }
                    None => {
                        self.activations.insert(name.clone(), ActivationEntry { name, shape, slices: Vec::new() });
                    }
                },
                DeclKind::State => {
                    let dtype = if d.ty.dtype == DType::Bf16 { StateDtype::Bf16 } else { StateDtype::F32 };
                    self.states.insert(name.clone(), StateEntry { name, dtype, shape, slices });
                }
                DeclKind::Shared => {
                    let rope = parse_rope_table(&name).and_then(|(table, r)| {
                        spec.rotations.get(r).map(|rot| SharedRope { table, spec: rot.rope_spec() })
                    });
                    self.shared.insert(name.clone(), SharedEntry { name, shape, rope });
                }
            }
        }
        let rows = model.cut.rows();
        for out in program.outputs() {
            let width = if out.text == "logits" { spec.vocab } else { spec.d_model };
            // A prefill head computes the logits of the chunk's last row only.
            let rows = if out.text == "logits" && model.cut.chunk().is_some() { 1 } else { rows };
            // A gathered result (a vocabulary-parallel head's logits): every chip's ranges.
            let (shape, slices) = match source.slices.get(&out.text) {
                Some(s) => whole(&[rows, width], s),
                None => (vec![rows, width], Vec::new()),
            };
            self.activations.insert(out.text.clone(), ActivationEntry { name: out.text.clone(), shape, slices });
        }
        Ok(())
    }
}
