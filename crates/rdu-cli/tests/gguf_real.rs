//! GGUF files written by llama.cpp's OWN converter (`convert_hf_to_gguf.py` of the
//! llama-cpp-python 0.3.36 sdist, hash check patched for the synthetic tokenizer;
//! `tests/data/fixtures/tools/convert_real.py`) from the tiny transformers fixtures, in
//! `tests/data/fixtures/gguf_real/<fixture>/`: every file runs through `rdu run` (both engines)
//! and `rdu lower`. F32 files: the logits of every prompt position within 1e-4 of
//! transformers, and of llama.cpp on the same file (K/V cache in f32). Q8_0 files: within 1e-4
//! of llama.cpp run on an F32 file of the dequantised Q8_0 weights, or of transformers with
//! those weights where llama.cpp is not exact or cannot run the file (`NOT_LLAMACPP` says where
//! and why). Every file:
//! the two engines within 1e-4 of each other.

use crate::common;

use common::ok;
use rdu_testkit::{fixtures, npy, Tolerance};
use std::path::{Path, PathBuf};

/// The converted fixtures, each with its HF source (`hf/` or `hf_extra/`).
fn converted() -> Vec<(String, PathBuf, PathBuf)> {
    let root = fixtures::repo().join("tests/data/fixtures/gguf_real");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&root).expect("gguf_real") {
        let dir = entry.expect("dir entry").path();
        if !dir.is_dir() {
            continue;
        }
        let name = dir.file_name().and_then(|n| n.to_str()).expect("utf-8").to_string();
        let hf = ["hf", "hf_extra"]
            .iter()
            .map(|r| fixtures::repo().join("tests/data/fixtures").join(r).join(&name))
            .find(|p| p.is_dir())
            .unwrap_or_else(|| panic!("no HF fixture for {name}"));
        out.push((name, dir, hf));
    }
    out.sort();
    out
}

/// `rdu run FILE --tokens … --engine ENGINE --logits`: the logits rows of every prompt position.
fn run(file: &Path, tokens: &[u32], engine: &str, tmp: &Path) -> Vec<f32> {
    let prompt: Vec<String> = tokens.iter().map(u32::to_string).collect();
    let logits = tmp.join(format!("{engine}.npy"));
    let args = ["run", file.to_str().expect("utf-8"), "--tokens", &prompt.join(","), "--engine", engine, "--json"];
    ok(&[&args[..], &["--logits", logits.to_str().expect("utf-8")]].concat());
    npy::f32(&logits)
}

/// The fixtures llama.cpp (0.3.36) is not a 1e-4 reference for, and why (`meta.json` records
/// each failed llama.cpp run).
const NOT_LLAMACPP: &[(&str, &str)] = &[
    ("gemma3_text", GELU_F16),
    ("gemma3_every6", GELU_F16),
    (
        "deepseek_v2_noqlora",
        "llama.cpp loads a DeepSeek-V2 without q-LoRA only at 26 or 27 layers (how it recognises \
         V2-Lite); the tiny model has 2, so it asks for `q_lora_rank` and refuses the file",
    ),
    ("qwen3_5", MROPE_ASSERT),
    ("qwen3_5_moe", MROPE_ASSERT),
];
const GELU_F16: &str = "ggml computes GELU through an f16 table (GGML_GELU_FP16): ~1e-3 from the \
                        function itself (its recorded logits are 1.0e-3 to 1.6e-3 from rdu's)";
const MROPE_ASSERT: &str = "llama.cpp aborts on the tiny model: GGML_ASSERT(sect_dims <= ne0), its \
                            M-RoPE sections are wider than the tiny rotary width of 4";

/// The files whose meaning transformers' logits are not, each held to llama.cpp on the file:
/// - gemma3_text: llama.cpp's converter writes no per-layer attention types, so a Gemma 3 file
///   says "every 6th layer global", and the gemma3_text fixture's layer 2 of 4 is global.
///   (llama.cpp on that f32 file is as far from transformers, 0.95, as rdu.) gemma3_every6, in
///   Gemma 3's own pattern, is held to transformers instead.
/// - mistral: the converter writes Mistral as `llama` without its sliding window, and llama.cpp
///   attends to every position (3.0 from transformers, whose window is 4).
/// - gpt_oss: llama.cpp clamps gpt-oss's SwiGLU at a fixed 7 (the file has no `swiglu_limit`;
///   the fixture's is 0.8) and rounds YaRN's correction range (the fixture's config says
///   `truncate: false`): 1.55 from transformers. rdu reads the file as llama.cpp runs it.
const NOT_TRANSFORMERS: &[&str] = &["gemma3_text", "mistral", "gpt_oss"];

fn check(name: &str, quant: &str) {
    let (_, dir, hf) = converted().into_iter().find(|(n, _, _)| n == name).expect("converted fixture");
    let file = dir.join(format!("tiny-{quant}.gguf"));
    assert!(file.is_file(), "{}", file.display());
    let tmp = tempfile::tempdir().expect("temp dir");
    let tokens = npy::ids(hf.join("tokens.npy"));
    let spatial = run(&file, &tokens, "spatial", tmp.path());
    let reference = run(&file, &tokens, "reference", tmp.path());
    Tolerance::F32.assert(&format!("{name} {quant} spatial vs reference engine"), &spatial, &reference);
    if quant == "f32" && !NOT_TRANSFORMERS.contains(&name) {
        let want = npy::f32(hf.join("logits_full.npy"));
        Tolerance::F32.assert(&format!("{name} {quant} spatial vs transformers"), &spatial, &want);
        Tolerance::F32.assert(&format!("{name} {quant} reference vs transformers"), &reference, &want);
    }
    let deq = dir.join("logits_q8_0_deq_transformers.npy");
    if quant == "q8_0" && deq.is_file() {
        let want = npy::f32(&deq);
        Tolerance::F32.assert(&format!("{name} {quant} vs transformers on the dequantised weights"), &spatial, &want);
    }
    if !NOT_LLAMACPP.iter().any(|(n, _)| *n == name) {
        let (path, what) = match quant {
            "f32" => ("logits_f32_llamacpp.npy", "llama.cpp on the file"),
            _ => ("logits_q8_0_deq_llamacpp.npy", "llama.cpp on the dequantised weights"),
        };
        let want = npy::f32(dir.join(path));
        Tolerance::F32.assert(&format!("{name} {quant} vs {what}"), &spatial, &want);
    }
    let bundle = tmp.path().join("bundle");
    ok(&["lower", file.to_str().expect("utf-8"), "--ctx", "16", "-o", bundle.to_str().expect("utf-8")]);
    assert!(bundle.join("manifest.json").is_file());
}

/// Every Q8_0 file has a third-party reference: llama.cpp on its dequantised weights, or
/// transformers on them (where llama.cpp is not exact or cannot run the file: `NOT_LLAMACPP`);
/// only gemma3_text, whose file means another model than its transformers fixture
/// (`NOT_TRANSFORMERS`) and whose llama.cpp GELU is not exact, is left to the two engines'
/// agreement and its f32 file.
#[test]
fn every_q8_0_file_has_a_third_party_reference() {
    for (name, dir, _) in converted() {
        let llamacpp =
            dir.join("logits_q8_0_deq_llamacpp.npy").is_file() && !NOT_LLAMACPP.iter().any(|(n, _)| *n == name);
        let transformers = dir.join("logits_q8_0_deq_transformers.npy").is_file();
        assert!(
            llamacpp || transformers || NOT_TRANSFORMERS.contains(&name.as_str()),
            "{name}: its Q8_0 file has no third-party reference"
        );
    }
    for (name, why) in NOT_LLAMACPP {
        assert!(!why.is_empty(), "{name}: say why llama.cpp is not the reference");
    }
}

#[test]
fn every_converted_fixture_is_tested() {
    let names: Vec<String> = converted().into_iter().map(|(n, _, _)| n).collect();
    let tested = [
        "deepseek_v2",
        "deepseek_v2_noqlora",
        "deepseek_v2_yarn",
        "deepseek_v3",
        "gemma3_every6",
        "gemma3_text",
        "glm4_moe",
        "gpt_oss",
        "llama",
        "minimax_m2",
        "mistral",
        "mixtral",
        "qwen3",
        "qwen3_5",
        "qwen3_5_moe",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_tied",
    ];
    for n in &names {
        assert!(tested.contains(&n.as_str()), "{n} has no test here");
    }
}

macro_rules! real {
    ($($test:ident: $name:literal $quant:literal,)*) => {$(
        #[test]
        fn $test() {
            check($name, $quant);
        }
    )*};
}

real! {
    llama_f32: "llama" "f32",
    llama_q8_0: "llama" "q8_0",
    qwen3_f32: "qwen3" "f32",
    qwen3_q8_0: "qwen3" "q8_0",
    qwen3_tied_f32: "qwen3_tied" "f32",
    qwen3_tied_q8_0: "qwen3_tied" "q8_0",
    qwen3_moe_f32: "qwen3_moe" "f32",
    qwen3_moe_q8_0: "qwen3_moe" "q8_0",
    qwen3_next_f32: "qwen3_next" "f32",
    qwen3_next_q8_0: "qwen3_next" "q8_0",
    gemma3_f32: "gemma3_text" "f32",
    gemma3_q8_0: "gemma3_text" "q8_0",
    gemma3_every6_f32: "gemma3_every6" "f32",
    gemma3_every6_q8_0: "gemma3_every6" "q8_0",
    deepseek2_f32: "deepseek_v2" "f32",
    deepseek2_q8_0: "deepseek_v2" "q8_0",
    deepseek2_without_q_lora_f32: "deepseek_v2_noqlora" "f32",
    deepseek2_without_q_lora_q8_0: "deepseek_v2_noqlora" "q8_0",
    deepseek2_yarn_f32: "deepseek_v2_yarn" "f32",
    deepseek2_yarn_q8_0: "deepseek_v2_yarn" "q8_0",
    qwen35_f32: "qwen3_5" "f32",
    qwen35_q8_0: "qwen3_5" "q8_0",
    qwen35moe_f32: "qwen3_5_moe" "f32",
    qwen35moe_q8_0: "qwen3_5_moe" "q8_0",
    deepseek2_v3_f32: "deepseek_v3" "f32",
    deepseek2_v3_q8_0: "deepseek_v3" "q8_0",
    glm4moe_f32: "glm4_moe" "f32",
    glm4moe_q8_0: "glm4_moe" "q8_0",
    minimax_m2_f32: "minimax_m2" "f32",
    minimax_m2_q8_0: "minimax_m2" "q8_0",
    gpt_oss_f32: "gpt_oss" "f32",
    gpt_oss_q8_0: "gpt_oss" "q8_0",
    mistral_f32: "mistral" "f32",
    mistral_q8_0: "mistral" "q8_0",
    mixtral_f32: "mixtral" "f32",
    mixtral_q8_0: "mixtral" "q8_0",
}
