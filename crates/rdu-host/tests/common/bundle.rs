//! The test model's bundle, built by hand: three spatial programs in their text form and a manifest binding both layers to one kind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rdu_spatial::bundle::Bundle;
use rdu_spatial::manifest::*;
use rdu_spatial::rope::{RopeScaling, RopeSpec};

use super::{shape_of, CTX, D, TENSORS, VOCAB};

/// How the projections are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Dense,
    /// `W0`, `W1` and `Wout` stored Q8_0, folded by their products.
    Q8,
}

const Q8_NAMES: [&str; 3] = ["W0", "W1", "Wout"];

/// How many rows a step takes, and whether `pos` is a scalar or one position per row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub n: usize,
    pub per_row_pos: bool,
}

/// One token per step: a decode bundle.
pub const DECODE: Rows = Rows { n: 1, per_row_pos: false };

pub fn embed_text(rows: Rows) -> String {
    let n = rows.n;
    format!(
        "program embed chip=sn50
tensor tok : i32[{n}] role=input home=host
tensor E : f32[{VOCAB}, {D}] role=weight home=hbm
tensor x : f32[{n}, {D}] role=output home=sram
section 0
stage s0 pcus=1 pmus=1
  x = embed(tok, E)
output x
"
    )
}

/// The kind program, in layer 0's names.
pub fn kind_text(variant: Variant, rows: Rows) -> String {
    let (storage, fold) = match variant {
        Variant::Dense => ("", ""),
        Variant::Q8 => (" storage=q8_0", " fold=q8"),
    };
    let half = D / 2;
    let n = rows.n;
    let pos = if rows.per_row_pos { format!("{n}") } else { String::new() };
    format!(
        "program blk chip=sn50
tensor x : f32[{n}, {D}] role=input home=sram
tensor pos : i32[{pos}] role=input home=host
tensor an0 : f32[{D}] role=weight home=hbm
tensor W0 : f32[{D}, {D}]{storage} role=weight home=hbm
tensor cos0 : f32[{CTX}, {half}] role=shared home=hbm
tensor sin0 : f32[{CTX}, {half}] role=shared home=hbm
tensor K0 : f32[{CTX}, 1, {D}] role=state home=hbm
tensor h0 : f32[{n}, {D}] role=temp home=sram
tensor xo0 : f32[{n}, {D}] role=output home=sram
section 0
stage s0 pcus=4 pmus=2
  h0 = rms_norm(x, an0, eps=1e-5)
  y0 = linear(h0, W0){fold} tile(axis=1, [0..{half}, {half}..{D}])
  yh0 = reshape(y0, [{n}, 1, {D}])
  r0 = rope(yh0, cos0, sin0, pos, dim={D})
stage s1 pcus=4 pmus=4
  K0 <- cache_put(K0, r0, pos)
  a0 = attend(r0, K0, K0, pos, scale=0.25)
  af0 = reshape(a0, [{n}, {D}])
  xo0 = add(x, af0)
output xo0
"
    )
}

pub fn head_text(variant: Variant, rows: Rows) -> String {
    let (storage, fold) = match variant {
        Variant::Dense => ("", ""),
        Variant::Q8 => (" storage=q8_0", " fold=q8"),
    };
    let n = rows.n;
    format!(
        "program head chip=sn50
tensor xo1 : f32[{n}, {D}] role=input home=sram
tensor nf : f32[{D}] role=weight home=hbm
tensor Wout : f32[{VOCAB}, {D}]{storage} role=weight home=hbm
tensor logits : f32[{n}, {VOCAB}] role=output home=sram
section 0
stage s0 pcus=2 pmus=2
  hn = rms_norm(xo1, nf, eps=1e-5)
  logits = linear(hn, Wout){fold}
output logits
"
    )
}

/// The decode bundle in memory, ready to be changed by a test before it is written.
pub fn bundle(variant: Variant) -> Bundle {
    bundle_rows(variant, DECODE)
}

/// The manifest's tensor entries: `W1` a slice of the checkpoint's stacked weight, Q8_0 where
/// the variant stores it so.
fn tensor_entries(variant: Variant) -> BTreeMap<String, TensorEntry> {
    let mut tensors = BTreeMap::new();
    for (name, ckpt, _) in TENSORS {
        let q8 = variant == Variant::Q8 && Q8_NAMES.contains(&name);
        let mut checkpoint = Checkpoint {
            kind: CheckpointKind::Tensor,
            names: vec![ckpt.into()],
            axis: None,
            start: None,
            len: None,
            step: None,
            transposed: false,
        };
        if name == "W1" {
            checkpoint =
                Checkpoint { kind: CheckpointKind::Slice, axis: Some(0), start: Some(D), len: Some(D), ..checkpoint };
        }
        let storage = if q8 { TensorStorage::Q8_0 } else { TensorStorage::Dense };
        let entry = TensorEntry {
            shape: shape_of(name),
            dtype: "f32".into(),
            storage,
            block: None,
            stored_block: None,
            checkpoint,
            slices: vec![],
            pad: None,
        };
        tensors.insert(name.to_string(), entry);
    }
    tensors
}

/// The bundle stepping `rows.n` tokens at a time: decode for one, prefill of a chunk for more.
pub fn bundle_rows(variant: Variant, rows: Rows) -> Bundle {
    let strings = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let kind_declared = ["x", "pos", "an0", "W0", "cos0", "sin0", "K0", "xo0"];
    let programs = Programs {
        embed: program("embed", strings(&["tok", "E", "x"])),
        head: program("head", strings(&["xo1", "nf", "Wout", "logits"])),
        kinds: vec![kind("blk", vec![0, 1], strings(&kind_declared))],
    };
    let layer = |l: usize| {
        let mut bind: BTreeMap<String, String> = kind_declared.iter().map(|n| (n.to_string(), n.to_string())).collect();
        if l == 1 {
            for (from, to) in [("x", "xo0"), ("an0", "an1"), ("W0", "W1"), ("K0", "K1"), ("xo0", "xo1")] {
                bind.insert(from.into(), to.into());
            }
        }
        LayerEntry { layer: l, kind: "blk".into(), bind }
    };
    let tensors = tensor_entries(variant);
    let rope = RopeSpec { base: 10000.0, dim: D, scaling: RopeScaling::None };
    let shared = |name: &str, table| SharedEntry {
        name: name.into(),
        shape: vec![CTX, D / 2],
        rope: Some(SharedRope { table, spec: rope.clone() }),
    };
    let activation =
        |name: &str, width| ActivationEntry { name: name.into(), shape: vec![rows.n, width], slices: Vec::new() };
    let (mode, chunk) = if rows.n == 1 { (CutMode::Decode, None) } else { (CutMode::Prefill, Some(rows.n)) };
    let pos_shape = if rows.per_row_pos { vec![rows.n] } else { vec![] };
    let manifest = Manifest {
        format: FORMAT.into(),
        version: VERSION,
        model: "tiny-test".into(),
        cut: Cut { mode, ctx: Some(CTX), seq: None, batch: None, tp: None, chunk, draft: None },
        chip: "sn50".into(),
        storage: if variant == Variant::Q8 { "q8".into() } else { "dense".into() },
        programs,
        schedule: Schedule::by_runs("embed", "head", &[layer(0), layer(1)]),
        layers: vec![layer(0), layer(1)],
        tensors,
        inputs: vec![
            InputEntry {
                name: "tok".into(),
                dtype: "i32".into(),
                shape: vec![rows.n],
                role: InputRole::Tokens,
                sequence: None,
            },
            InputEntry {
                name: "pos".into(),
                dtype: "i32".into(),
                shape: pos_shape,
                role: InputRole::Position,
                sequence: None,
            },
        ],
        states: ["K0", "K1"]
            .iter()
            .map(|n| StateEntry {
                name: n.to_string(),
                dtype: StateDtype::F32,
                shape: vec![CTX, 1, D],
                slices: Vec::new(),
            })
            .collect(),
        shared: vec![shared("cos0", RopeTable::Cos), shared("sin0", RopeTable::Sin)],
        activations: vec![activation("x", D), activation("xo0", D), activation("xo1", D), activation("logits", VOCAB)],
    };
    let mut files = BTreeMap::new();
    let texts = [("embed", embed_text(rows)), ("blk", kind_text(variant, rows)), ("head", head_text(variant, rows))];
    for (name, text) in texts {
        files.insert(format!("programs/{name}.rdu"), format!("# authored source of {name}, not read by the host\n"));
        files.insert(format!("programs/{name}.spatial"), text);
    }
    let mut bundle = Bundle { manifest, files };
    bundle.rehash();
    bundle
}

/// Writes `bundle` to `parent/name` and returns its path.
pub fn write(bundle: &Bundle, parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    bundle.write(&dir, false).expect("the test bundle is valid");
    dir
}

/// Writes the test bundle of `variant` to `parent/bundle`.
pub fn write_bundle(parent: &Path, variant: Variant) -> PathBuf {
    write(&bundle(variant), parent, "bundle")
}

fn program(name: &str, declared: Vec<String>) -> ProgramEntry {
    ProgramEntry {
        bind: Default::default(),
        name: name.into(),
        file_source: format!("programs/{name}.rdu"),
        file_spatial: format!("programs/{name}.spatial"),
        source_blake3: String::new(),
        spatial_blake3: String::new(),
        certified_against: Vec::new(),
        digest: format!("test:{name}"),
        declared,
        certificate: CertificateEntry { checks: vec!["structure".into()], seed: 1, tolerance: 1e-4, max_abs_err: 0.0 },
        cost: CostEntry { seconds: 1e-6, hbm_bytes: 0, flops: 0, pcus: 1, pmus: 1, sections: 1 },
    }
}

fn kind(name: &str, layers: Vec<usize>, declared: Vec<String>) -> KindEntry {
    let p = program(name, declared);
    KindEntry {
        name: p.name,
        file_source: p.file_source,
        file_spatial: p.file_spatial,
        source_blake3: p.source_blake3,
        spatial_blake3: p.spatial_blake3,
        certified_against: p.certified_against,
        digest: p.digest,
        layers,
        declared: p.declared,
        certificate: p.certificate,
        cost: p.cost,
    }
}
