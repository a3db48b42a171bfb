//! Where the repository's fixtures are: `tests/data/fixtures/{hf,gguf}/` (see its README for
//! how each was made and by which third-party implementation).

use std::path::{Path, PathBuf};

/// Every tiny transformers model in `tests/data/fixtures/hf` with its reference logits.
pub const HF: [&str; 14] = [
    "llama",
    "qwen3",
    "qwen3_next",
    "qwen3_next_T80",
    "gemma3_text",
    "gemma3_text_T80",
    "deepseek_v2",
    "deepseek_v2_noqlora",
    "deepseek_v3",
    "glm4_moe",
    "minimax_m2",
    "gpt_oss",
    "mistral",
    "mixtral",
];

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tests/data/fixtures/hf/<arch>`: a transformers checkpoint, its config and its logits.
pub fn hf(arch: &str) -> PathBuf {
    repo().join("tests/data/fixtures/hf").join(arch)
}

/// `tests/data/fixtures/quantised/<name>`: checkpoints stored FP8 or MXFP4 and their
/// references (`tools/make_quantised.py`), or one of its decoder tables.
pub fn quantised(name: &str) -> PathBuf {
    repo().join("tests/data/fixtures/quantised").join(name)
}

/// `tests/data/fixtures/gguf/<arch>`: llama.cpp-made GGUF files of a fixture and their references.
pub fn gguf_dir(arch: &str) -> PathBuf {
    repo().join("tests/data/fixtures/gguf").join(arch)
}

/// `tests/data/fixtures/gguf/<arch>/tiny-<arch>-<quant>.gguf`.
pub fn gguf_file(arch: &str, quant: &str) -> PathBuf {
    gguf_dir(arch).join(format!("tiny-{arch}-{quant}.gguf"))
}

/// What a llama.cpp-made GGUF fixture (`tests/data/fixtures/gguf/<arch>`) is held to.
pub struct GgufReferences {
    /// The prompt.
    pub tokens: Vec<u32>,
    /// transformers' logits on the weights the file holds: the original ones for `f32`
    /// (`logits_hf_f32.npy`), the Q8_0-dequantised ones otherwise (`logits_hf_q8deq.npy`).
    pub transformers: Vec<f32>,
    /// llama.cpp's logits on the file (`logits_llamacpp_<quant>.npy`).
    pub llamacpp: Vec<f32>,
}

/// The references of `tiny-<arch>-<quant>.gguf`.
pub fn gguf_references(arch: &str, quant: &str) -> GgufReferences {
    let dir = gguf_dir(arch);
    let transformers = if quant == "f32" { "logits_hf_f32.npy" } else { "logits_hf_q8deq.npy" };
    GgufReferences {
        tokens: crate::npy::ids(dir.join("tokens.npy")),
        transformers: crate::npy::f32(dir.join(transformers)),
        llamacpp: crate::npy::f32(dir.join(format!("logits_llamacpp_{quant}.npy"))),
    }
}
