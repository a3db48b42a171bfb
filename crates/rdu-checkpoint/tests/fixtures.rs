//! The repository's real checkpoints: tiny llama.cpp GGUFs (f32 and q8_0) and HF safetensors.

use rdu_checkpoint::{quantize_q8_0, Dtype, GgmlType, Gguf, SafeTensors};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fixtures")
}

fn gguf_pair(arch: &str) -> (Gguf, Gguf) {
    let dir = fixtures().join("gguf").join(arch);
    let f32_file = Gguf::open(dir.join(format!("tiny-{arch}-f32.gguf"))).unwrap();
    let q8_file = Gguf::open(dir.join(format!("tiny-{arch}-q8_0.gguf"))).unwrap();
    (f32_file, q8_file)
}

/// Every tensor of the q8_0 file dequantises to within Q8_0 error of the f32 file's tensor,
/// and re-quantising the f32 tensor with `quantize_q8_0` gives the file's blocks.
fn check_q8_against_f32(arch: &str) {
    let (dense, q8) = gguf_pair(arch);
    assert_eq!(q8.get_str("general.architecture").unwrap(), Some(arch));
    assert_eq!(dense.tensors().len(), q8.tensors().len());
    let mut n_q8 = 0;
    for tensor in q8.tensors() {
        let name = tensor.name.as_str();
        let reference = dense.tensor(name).unwrap();
        assert_eq!(reference.ggml_type, GgmlType::F32, "{name}");
        assert_eq!(tensor.shape, reference.shape, "{name}");
        let x = dense.read_f32(name).unwrap();
        let y = q8.read_f32(name).unwrap();
        assert_eq!(x.len(), y.len(), "{name}");
        if tensor.ggml_type != GgmlType::Q8_0 {
            assert_eq!(x, y, "{name} is stored as {} in both", tensor.ggml_type);
            continue;
        }
        n_q8 += 1;
        let blocks = q8.read_q8_0(name).unwrap();
        assert_eq!(blocks.shape, tensor.shape);
        assert_eq!(blocks.dequantize(), y, "{name}");
        for (b, (xs, ys)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
            let amax = xs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d32 = amax / 127.0;
            let bound = 0.5 * d32 + 127.0 * (d32 - blocks.blocks[b].d).abs() + 1e-7;
            for (i, (a, c)) in xs.iter().zip(ys).enumerate() {
                let at = b * 32 + i;
                assert!((a - c).abs() <= bound, "{name}[{at}]: f32 {a}, q8_0 {c}");
            }
        }
        let requantised = quantize_q8_0(&x, &tensor.shape).unwrap();
        assert_eq!(requantised, blocks, "{name}: quantize_q8_0 differs from the converter");
    }
    assert!(n_q8 > 0, "{arch}: no Q8_0 tensors");
}

#[test]
fn llama_q8_0_matches_f32() {
    check_q8_against_f32("llama");
}

#[test]
fn gemma3_q8_0_matches_f32() {
    check_q8_against_f32("gemma3");
}

#[test]
fn gguf_metadata_reads() {
    let (dense, _) = gguf_pair("llama");
    assert_eq!(dense.version(), 3);
    assert_eq!(dense.get_u32("llama.block_count").unwrap(), Some(2));
    assert!(dense.get_f32("llama.rope.freq_base").unwrap().is_some());
    let tokens = dense.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert!(tokens.is_some_and(|t| !t.is_empty()));
    let embd = dense.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.shape.len(), 2);
}

#[test]
fn hf_safetensors_open_and_read() {
    let dir = fixtures().join("hf");
    let mut n_models = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let model_dir = entry.unwrap().path();
        if !model_dir.join("model.safetensors").is_file() {
            continue;
        }
        let st = SafeTensors::open(&model_dir).unwrap();
        assert!(!st.is_empty(), "{}", model_dir.display());
        let names: Vec<&str> = st.names().collect();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "names are sorted");
        for name in names {
            let values = st.read_f32(name).unwrap();
            let n: usize = st.shape(name).unwrap().iter().product();
            assert_eq!(values.len(), n, "{name}");
        }
        n_models += 1;
    }
    assert!(n_models >= 4, "found {n_models} fixture models");

    let llama = SafeTensors::open(dir.join("llama/model.safetensors")).unwrap();
    assert_eq!(llama.shape("lm_head.weight"), Some([256, 64].as_slice()));
    assert_eq!(llama.dtype("lm_head.weight"), Some(Dtype::F32));
    assert!(llama.contains("model.norm.weight"));
    assert!(!llama.contains("model.missing"));
}
