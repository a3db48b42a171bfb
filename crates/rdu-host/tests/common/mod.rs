//! Test kit: a tiny 2-layer decode bundle built by hand, its checkpoints, and the same math in plain loops.
//!
//! The model: vocab 16, width 32, context 4. The embedding looks a token up; each layer
//! normalises, projects, rotates (RoPE), appends to its cache `K{l}` and attends over it with
//! the cache as keys and values, then adds the result to its input; the head normalises and
//! projects to the vocabulary. Layer 1's projection is rows 32..64 of a larger checkpoint tensor.

pub mod bundle;
pub mod reference;

use std::collections::BTreeMap;
use std::path::Path;

pub use bundle::{write_bundle, Variant};
pub use reference::reference;

pub const VOCAB: usize = 16;
pub const D: usize = 32;
pub const CTX: usize = 4;

/// Every manifest tensor: (manifest name, checkpoint name, shape as the manifest sees it).
pub const TENSORS: [(&str, &str, [usize; 2]); 7] = [
    ("E", "model.embed_tokens.weight", [VOCAB, D]),
    ("an0", "model.layers.0.norm.weight", [1, D]),
    ("an1", "model.layers.1.norm.weight", [1, D]),
    ("W0", "model.layers.0.proj.weight", [D, D]),
    ("W1", "model.layers.1.proj_big.weight", [D, D]),
    ("nf", "model.norm.weight", [1, D]),
    ("Wout", "lm_head.weight", [VOCAB, D]),
];

/// The manifest shape of a tensor of [`TENSORS`] (1-D norms are `[D]`).
pub fn shape_of(name: &str) -> Vec<usize> {
    let (_, _, s) = TENSORS.iter().find(|(n, _, _)| *n == name).expect("a tensor of the test model");
    if s[0] == 1 {
        vec![s[1]]
    } else {
        s.to_vec()
    }
}

/// Weight values by manifest name, as plain vectors.
pub type Values = BTreeMap<String, Vec<f32>>;

/// Deterministic test values: smooth, signed, different for every tensor.
pub fn values() -> Values {
    let mut out = Values::new();
    for (k, (name, _, _)) in TENSORS.iter().enumerate() {
        let shape = shape_of(name);
        let n: usize = shape.iter().product();
        let v = (0..n)
            .map(|i| {
                let t = (i as f32 * 0.37 + k as f32 * 1.3).sin();
                if shape.len() == 1 {
                    1.0 + 0.1 * t
                } else {
                    0.3 * t
                }
            })
            .collect();
        out.insert(name.to_string(), v);
    }
    out
}

/// The seeded weights the host draws, by manifest name.
pub fn seeded_values(seed: u64) -> Values {
    TENSORS
        .iter()
        .map(|(name, _, _)| (name.to_string(), rdu_spatial::seeded_weight(seed, name, &shape_of(name), false)))
        .collect()
}

/// The checkpoint tensors of `values` (layer 1's projection inside a [64, 32] tensor), by checkpoint name.
pub fn checkpoint_tensors(values: &Values) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut out = Vec::new();
    for (name, ckpt, _) in TENSORS {
        let shape = shape_of(name);
        let v = values[name].clone();
        if name == "W1" {
            // Rows 0..32 are filler the slice must skip; rows 32..64 are W1.
            let mut big: Vec<f32> = (0..D * D).map(|i| 5.0 + i as f32).collect();
            big.extend(v);
            out.push((ckpt.to_string(), vec![2 * D, D], big));
        } else {
            out.push((ckpt.to_string(), shape, v));
        }
    }
    out
}

/// Writes `tensors` (name, shape, values) as an f32 `model.safetensors` in `dir`.
pub fn write_safetensors(dir: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, s, v)| (n.clone(), s.clone(), v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
        .iter()
        .map(|(n, s, b)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap())
        })
        .collect();
    let data = safetensors::serialize(views, None).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("model.safetensors"), data).unwrap();
}

/// Values with every Q8_0-stored projection quantised and dequantised as a Q8_0 deployment holds it.
pub fn q8_values(values: &Values) -> Values {
    let mut out = values.clone();
    for name in ["W0", "W1", "Wout"] {
        let q = rdu_checkpoint::quantize_q8_0(&values[name], &shape_of(name)).unwrap();
        out.insert(name.to_string(), q.dequantize());
    }
    out
}
