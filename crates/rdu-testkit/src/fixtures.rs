//! Where the repository's fixtures are: `tests/data/fixtures/{hf,gguf}/` (see its README for
//! how each was made and by which third-party implementation).

use std::path::{Path, PathBuf};

/// Every tiny transformers model in `tests/data/fixtures/hf` with its reference logits.
pub const HF: [&str; 8] = [
    "llama",
    "qwen3",
    "qwen3_next",
    "qwen3_next_T80",
    "gemma3_text",
    "gemma3_text_T80",
    "deepseek_v2",
    "deepseek_v2_noqlora",
];

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tests/data/fixtures/hf/<arch>`: a transformers checkpoint, its config and its logits.
pub fn hf(arch: &str) -> PathBuf {
    repo().join("tests/data/fixtures/hf").join(arch)
}

/// `tests/data/fixtures/gguf/<arch>`: llama.cpp-made GGUF files of a fixture and their references.
pub fn gguf_dir(arch: &str) -> PathBuf {
    repo().join("tests/data/fixtures/gguf").join(arch)
}

/// `tests/data/fixtures/gguf/<arch>/tiny-<arch>-<quant>.gguf`.
pub fn gguf_file(arch: &str, quant: &str) -> PathBuf {
    gguf_dir(arch).join(format!("tiny-{arch}-{quant}.gguf"))
}

/// The bytes of a file, or a panic naming it.
pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
