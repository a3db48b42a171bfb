//! One test per failure the fuzz campaigns found, each the failing input cut down to what
//! matters and checked for the one-line refusal that replaced the panic or the allocation.

use rdu_checkpoint::Gguf;
use rdu_fuzz::targets::corpus_root;
use rdu_spatial::bundle::Bundle;
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(corpus_root().join("../../..").join(path)).unwrap()
}

/// A seed bundle of the manifest corpus: its manifest as JSON and its other files.
fn seed_bundle(name: &str) -> (Value, BTreeMap<String, String>) {
    let dir = corpus_root().join("manifest").join(name);
    let manifest = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir.join("programs")).unwrap() {
        let path = entry.unwrap().path();
        let name = format!("programs/{}", path.file_name().unwrap().to_string_lossy());
        files.insert(name, std::fs::read_to_string(&path).unwrap());
    }
    (manifest, files)
}

/// `rdu-fuzz gguf`: a `block_count` of 4294967295 made the GGUF import allocate a per-layer
/// table of ~96 GB (`vec![..; n_layers]`) before any check; it is now refused like config.json's.
#[test]
fn gguf_block_count_beyond_the_layer_bound_is_refused_before_allocating() {
    let mut bytes = fixture("tests/data/fixtures/gguf/llama/tiny-llama-q8_0.gguf");
    let key = b"llama.block_count";
    let at = bytes.windows(key.len()).position(|w| w == key).expect("the key") + key.len();
    assert_eq!(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()), 4, "stored as a u32");
    bytes[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let gguf = Gguf::from_bytes("big.gguf", bytes).unwrap();
    let err = rdu_compiler::model::gguf::from_gguf(&gguf, "big").unwrap_err().to_string();
    assert!(err.contains("llama.block_count") && err.contains("4294967295 is more than 100000 layers"), "{err}");
}

/// `rdu-fuzz manifest`: a string longer than the manifest writer's inline width (72) reached an
/// `unreachable!` in the pretty printer, so a manifest holding one could not be written.
#[test]
fn a_manifest_with_a_long_string_writes_and_reads_back() {
    let (mut manifest, files) = seed_bundle("tiny-llama-decode");
    manifest["model"] = Value::String("m".repeat(200));
    let bundle = Bundle::from_manifest_text(&manifest.to_string(), "manifest.json", files).unwrap();
    let text = bundle.manifest.to_json();
    assert!(text.contains(&"m".repeat(200)));
    assert_eq!(serde_json::from_str::<rdu_spatial::manifest::Manifest>(&text).unwrap(), bundle.manifest);
}

/// `rdu-fuzz manifest`: a shared RoPE table whose row width doubled past `usize::MAX` overflowed
/// the width check (a panic with overflow checks, a wrapped — possibly passing — check without).
#[test]
fn a_rope_table_width_that_overflows_is_a_problem_not_a_panic() {
    let (mut manifest, files) = seed_bundle("tiny-qwen3.5-prefill");
    let shared = manifest["shared"].as_array_mut().unwrap();
    let rope = shared.iter_mut().find(|s| s.get("rope").is_some()).expect("a rope table");
    let dim = rope["rope"]["dim"].as_u64().unwrap();
    // Doubled with wrapping, this is exactly the rotary dim: the overflow used to pass.
    let width = (1u64 << 63) + dim / 2;
    rope["shape"][1] = json!(width);
    let bundle = Bundle::from_manifest_text(&manifest.to_string(), "manifest.json", files).unwrap();
    let problems: Vec<String> = bundle.problems().iter().map(|p| p.to_string()).collect();
    assert!(
        problems.iter().any(|p| p.contains(&format!("is not [rows, {}] for rotary dim {dim}", dim / 2))),
        "{problems:?}"
    );
}

fn bpe(merges: Value, prefix: Option<&str>) -> String {
    json!({
        "version": "1.0",
        "model": {
            "type": "BPE",
            "vocab": {"a": 0, "b": 1, "##b": 2, "é": 3},
            "merges": merges,
            "continuing_subword_prefix": prefix,
        },
    })
    .to_string()
}

/// `rdu-fuzz tokenizer`: the tokenizers crate (0.23.2) builds a BPE merge in a buffer as long as
/// the longest vocabulary entry before checking the result is in the vocabulary, and strips the
/// continuing-subword prefix off the second token unchecked: both panicked it (and a prefix
/// cutting a character broke its UTF-8 invariant). rdu now checks the merges first.
#[test]
fn tokenizer_merges_the_tokenizers_crate_would_panic_on_are_refused() {
    for (merges, prefix, problem) in [
        (json!(["a b"]), None, "`a` + `b` makes `ab`, which model.vocab lacks"),
        (json!([["a", "b"]]), None, "`a` + `b` makes `ab`, which model.vocab lacks"),
        (json!(["a b"]), Some("##"), "`b` does not start with the continuing_subword_prefix `##`"),
        (json!(["a é"]), Some("\u{c3}"), "`é` does not start with the continuing_subword_prefix"),
        (json!(["a ##b"]), Some("##"), "`a` + `##b` makes `ab`, which model.vocab lacks"),
    ] {
        let text = bpe(merges, prefix);
        let err = rdu_host::Tokenizer::from_tokenizer_json_text(&text, "t.json").err().expect("refused").to_string();
        assert!(err.contains("t.json") && err.contains(problem), "{err}");
    }
    let fine = bpe(json!([]), Some("##"));
    let tok = rdu_host::Tokenizer::from_tokenizer_json_text(&fine, "t.json").unwrap();
    assert_eq!(tok.vocab_size(), 4);
}

fn lift_errors(text: &str) -> String {
    let program = rdu_compiler::lang::parse(text).expect("parses");
    let refusal = rdu_compiler::front::lift(&program).expect_err("refused");
    refusal.to_string()
}

/// `rdu-fuzz rdu`: `reshape(x, [9223372036854775807, 16, 128])` multiplied the target shape out
/// unchecked (a panic with overflow checks, a wrapped count without); a declaration that large
/// did the same wherever its count was taken. Both are refusals now.
#[test]
fn program_shapes_whose_element_count_overflows_are_refused() {
    let reshape = "input x : f32[2, 8]\noutput y\ny = reshape(x, [9223372036854775807, 16, 128])\n";
    assert!(lift_errors(reshape).contains("more than fit in memory elements"), "{}", lift_errors(reshape));
    let decl = "input x : f32[4294967296, 4294967296, 16]\noutput y\ny = silu(x)\n";
    assert!(lift_errors(decl).contains("more than a 64-bit count holds"), "{}", lift_errors(decl));
}

/// `rdu-fuzz spatial`: a `-inf` literal (the text form reads `inf`, `-inf`, `nan`) became `null`
/// in the program's JSON form, which then did not read back.
#[test]
fn non_finite_spatial_literals_round_trip_through_json() {
    use rdu_spatial::text::{from_json, parse, print, to_json};
    let seed = std::fs::read_to_string(corpus_root().join("../../golden/llama-3.1-8b/programs/head.spatial")).unwrap();
    let program = parse(&seed).unwrap();
    let mut json: Value = serde_json::from_str(&to_json(&program)).unwrap();
    let args = json["sections"][0]["stages"][0]["ops"][0]["args"].as_array_mut().unwrap();
    args.push(json!({"lit": {"float": "-inf"}}));
    args.push(json!({"lit": {"float": "nan"}}));
    let with_inf = from_json(&json.to_string()).unwrap();
    let text = print(&with_inf);
    assert!(text.contains("-inf") && text.contains("nan"), "{text}");
    let back = from_json(&to_json(&parse(&text).unwrap())).unwrap();
    assert_eq!(print(&back), text);
}
