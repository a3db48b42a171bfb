//! A small valid bundle: a 3-layer tensor-parallel decode model with two kinds, every manifest section filled.

use std::collections::BTreeMap;

use crate::bundle::Bundle;
use crate::manifest::*;
use crate::rope::{RopeScaling, RopeSpec};

pub fn sample() -> Bundle {
    let programs = Programs {
        embed: program("embed", &["tok", "tok_embd", "x"]),
        head: program("head", &["xo2", "onorm", "Wout", "logits"]),
        kinds: vec![
            kind("attn", &[0, 2], &["x", "an0", "Wq0", "Wo0", "We0", "Kc0", "cos0", "pos", "xo0"]),
            kind("window", &[1], &["xo0", "an1", "Wq1", "Wo1", "Kc1", "cos0", "pos", "xo1"]),
        ],
    };
    let layers = vec![
        layer(0, "attn", &[("x", "x"), ("xo0", "xo0")], 0),
        layer(1, "window", &[("xo0", "xo0"), ("xo1", "xo1")], 1),
        layer(2, "attn", &[("x", "xo1"), ("xo0", "xo2")], 0),
    ];
    let mut tensors = BTreeMap::new();
    tensors.insert("tok_embd".into(), tensor(&[100, 64], TensorStorage::Dense, "token_embd.weight", vec![]));
    tensors.insert("onorm".into(), tensor(&[64], TensorStorage::Dense, "output_norm.weight", vec![]));
    let mut wout = tensor(&[100, 64], TensorStorage::Q8_0, "token_embd.weight", vec![]);
    wout.checkpoint =
        Checkpoint { kind: CheckpointKind::Slice, axis: Some(0), start: Some(0), len: Some(100), ..wout.checkpoint };
    tensors.insert("Wout".into(), wout);
    for l in 0..3 {
        tensors.insert(
            format!("an{l}"),
            tensor(&[64], TensorStorage::Dense, &format!("blk.{l}.attn_norm.weight"), vec![]),
        );
        let halves = |axis| (0..2).map(|c| vec![Slice { axis, start: 32 * c, len: 32 }]).collect();
        let wq = tensor(&[64, 64], TensorStorage::Q8_0, &format!("blk.{l}.attn_q.weight"), halves(0));
        tensors.insert(format!("Wq{l}"), wq);
        tensors.insert(
            format!("Wo{l}"),
            tensor(&[64, 64], TensorStorage::Q8_0, &format!("blk.{l}.attn_output.weight"), halves(1)),
        );
    }
    for l in [0, 2] {
        let mut we = tensor(&[4, 64, 64], TensorStorage::Q8_0, "", vec![]);
        let names = (0..4).map(|e| format!("blk.{l}.ffn_gate.{e}.weight")).collect();
        we.checkpoint = Checkpoint { kind: CheckpointKind::Stack, names, axis: Some(0), ..we.checkpoint };
        tensors.insert(format!("We{l}"), we);
    }
    let rope = RopeSpec { base: 10000.0, dim: 16, scaling: RopeScaling::Linear { factor: 2.0 } };
    let manifest = Manifest {
        format: FORMAT.into(),
        version: VERSION,
        model: "tiny-llama".into(),
        cut: Cut { mode: CutMode::Tp, ctx: Some(16), seq: None, batch: None, tp: Some(2), chunk: None, draft: None },
        chip: "sn50".into(),
        storage: "q8".into(),
        schedule: Schedule::by_runs("embed", "head", &layers),
        programs,
        layers,
        tensors,
        inputs: vec![
            InputEntry {
                name: "tok".into(),
                dtype: "i32".into(),
                shape: vec![1],
                role: InputRole::Tokens,
                sequence: None,
            },
            InputEntry {
                name: "pos".into(),
                dtype: "i32".into(),
                shape: vec![],
                role: InputRole::Position,
                sequence: None,
            },
        ],
        states: (0..3)
            .map(|l| StateEntry {
                name: format!("Kc{l}"),
                dtype: StateDtype::Bf16,
                shape: vec![16, 2, 16],
                slices: (0..2).map(|c| vec![Slice { axis: 1, start: c, len: 1 }]).collect(),
            })
            .collect(),
        shared: vec![SharedEntry {
            name: "cos0".into(),
            shape: vec![16, 8],
            rope: Some(SharedRope { table: RopeTable::Cos, spec: rope }),
        }],
        activations: ["x", "xo0", "xo1", "xo2", "logits"]
            .iter()
            .map(|n| ActivationEntry {
                name: n.to_string(),
                shape: vec![1, if *n == "logits" { 100 } else { 64 }],
                slices: Vec::new(),
            })
            .collect(),
    };
    let mut files = BTreeMap::new();
    for name in ["embed", "head", "attn", "window"] {
        files.insert(format!("programs/{name}.rdu"), format!("# {name}: authored source\noutput {name}\n"));
        files.insert(format!("programs/{name}.spatial"), format!("spatial {name}\nsection 0\n"));
    }
    let mut bundle = Bundle { manifest, files };
    bundle.rehash();
    bundle
}

fn program(name: &str, declared: &[&str]) -> ProgramEntry {
    ProgramEntry {
        bind: Default::default(),
        name: name.into(),
        file_source: format!("programs/{name}.rdu"),
        file_spatial: format!("programs/{name}.spatial"),
        source_blake3: String::new(),
        spatial_blake3: String::new(),
        certified_against: Vec::new(),
        digest: format!("blake3:{name}"),
        declared: declared.iter().map(|s| s.to_string()).collect(),
        certificate: certificate(),
        cost: cost(),
    }
}

fn kind(name: &str, layers: &[usize], declared: &[&str]) -> KindEntry {
    let p = program(name, declared);
    KindEntry {
        name: p.name,
        file_source: p.file_source,
        file_spatial: p.file_spatial,
        source_blake3: p.source_blake3,
        spatial_blake3: p.spatial_blake3,
        certified_against: p.certified_against,
        digest: p.digest,
        layers: layers.to_vec(),
        declared: p.declared,
        certificate: p.certificate,
        cost: p.cost,
    }
}

/// Layer `l` of a kind whose representative is layer `rep`: per-layer names renamed, the rest as given.
fn layer(l: usize, kind: &str, io: &[(&str, &str)], rep: usize) -> LayerEntry {
    let mut bind: BTreeMap<String, String> = io.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    for base in ["an", "Wq", "Wo", "Kc"] {
        bind.insert(format!("{base}{rep}"), format!("{base}{l}"));
    }
    if kind == "attn" {
        bind.insert(format!("We{rep}"), format!("We{l}"));
    }
    for shared in ["cos0", "pos"] {
        bind.insert(shared.into(), shared.into());
    }
    LayerEntry { layer: l, kind: kind.into(), bind }
}

fn tensor(shape: &[usize], storage: TensorStorage, name: &str, slices: Vec<Vec<Slice>>) -> TensorEntry {
    TensorEntry {
        shape: shape.to_vec(),
        dtype: "f32".into(),
        storage,
        block: None,
        stored_block: None,
        checkpoint: Checkpoint {
            kind: CheckpointKind::Tensor,
            names: vec![name.into()],
            axis: None,
            start: None,
            len: None,
            step: None,
            transposed: false,
        },
        slices,
        pad: None,
    }
}

fn certificate() -> CertificateEntry {
    CertificateEntry {
        checks: vec!["structure".into(), "resources".into(), "numbers".into()],
        seed: 7,
        tolerance: 1e-4,
        max_abs_err: 3.0517578125e-5,
    }
}

fn cost() -> CostEntry {
    CostEntry { seconds: 1.25e-5, hbm_bytes: 17_408, flops: 16_384, pcus: 12, pmus: 10, sections: 1 }
}
