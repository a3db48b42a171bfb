//! `rdu` with `--tp T` as a user runs it: a refused width is one line naming the dimension;
//! a Q8_0 GGUF checkpoint sliced per chip (whole blocks) gives transformers' logits; a tp
//! bundle written by `rdu lower` runs with `rdu run --bundle` and generates what one chip does.

use crate::common;

use common::{ok, user_error};
use rdu_testkit::{fixtures, npy, Tolerance};
use serde_json::Value;

#[test]
fn a_refused_width_is_one_line_naming_the_dimension() {
    let line = user_error(&["lower", "llama-3.1-8b", "--cut", "tp", "--tp", "3"]);
    assert_eq!(line, "error: --tp 3 does not divide the 32 attention heads of llama-3.1-8b (layer 0)");
    let line = user_error(&["run", "tiny-qwen3-next", "--tokens", "1,2", "--tp", "4"]);
    assert!(line.contains("--tp 4") && line.contains("2 DeltaNet key heads"), "{line}");
    let line = user_error(&["fit", "qwen3-next-80b-a3b", "--tp", "32"]);
    assert!(line.contains("--tp 32 does not divide"), "{line}");
    let line = user_error(&["source", "llama-3.1-8b", "--layer", "0", "--cut", "tp", "--tp", "5"]);
    assert!(line.contains("32 attention heads"), "{line}");
}

#[test]
fn fit_reports_memory_per_chip_and_the_admitted_widths() {
    let one: Value = serde_json::from_str(&ok(&["fit", "llama-3.1-8b", "--storage", "q8", "--json"])).unwrap();
    let eight: Value =
        serde_json::from_str(&ok(&["fit", "llama-3.1-8b", "--storage", "q8", "--tp", "8", "--json"])).unwrap();
    assert_eq!(eight["chips"], 8);
    assert_eq!(one["tp_admitted"], serde_json::json!([1, 2, 4, 8, 16, 32]));
    let (w1, w8) = (one["weight_bytes"].as_u64().unwrap(), eight["weight_bytes"].as_u64().unwrap());
    // Each chip holds an eighth of the layers and of the (vocabulary-parallel) head plus the
    // replicated embedding, norms and RoPE tables (those last two a few MB).
    let spine = one["parts"][0]["weight_bytes"].as_u64().unwrap();
    let share = spine + (w1 - spine) / 8;
    assert!(w8 >= share && w8 < share + 4_000_000, "{w8} per chip vs {share}");
}

/// A Q8_0 GGUF file decoded at `--tp 1` and `--tp 2`: both within 1e-4 of transformers'
/// logits on the dequantised weights, and of each other.
fn gguf_at_tp_2(arch: &str) {
    let dir = fixtures::gguf_dir(arch);
    let gguf = fixtures::gguf_file(arch, "q8_0");
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    let tokens: Vec<String> = meta["tokens"].as_array().unwrap().iter().map(|t| t.to_string()).collect();
    let tokens = tokens.join(",");
    let tmp = tempfile::tempdir().unwrap();
    let want = npy::f32(dir.join("logits_hf_q8deq.npy"));
    let mut runs = Vec::new();
    for tp in ["1", "2"] {
        let out = tmp.path().join(format!("tp{tp}.npy"));
        let args = [
            "run",
            gguf.to_str().unwrap(),
            "--tokens",
            &tokens,
            "--tp",
            tp,
            "--state",
            "f32",
            "--logits",
            out.to_str().unwrap(),
        ];
        ok(&args);
        let got = npy::f32(&out);
        let d = Tolerance::F32.worst(&got, &want).diff;
        assert!(d <= 1e-4, "{arch} tp {tp}: max |diff| {d:e} against transformers (Q8_0 dequantised)");
        runs.push(got);
    }
    Tolerance::F32.assert(arch, &runs[0], &runs[1]);
    // Four chips would split the output projection's 64 input columns into 16: not whole blocks.
    let line = user_error(&["run", gguf.to_str().unwrap(), "--tokens", &tokens, "--tp", "4"]);
    assert!(line.contains("Q8_0 blocks of Wo0"), "{arch}: {line}");
}

#[test]
fn a_q8_0_llama_gguf_sliced_per_chip_matches_transformers() {
    gguf_at_tp_2("llama");
}

#[test]
fn a_q8_0_gemma3_gguf_with_one_kv_head_replicated_matches_transformers() {
    gguf_at_tp_2("gemma3");
}

#[test]
fn a_tp_bundle_runs_from_disk_and_generates_what_one_chip_does() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("tp2");
    let summary: Value = serde_json::from_str(&ok(&[
        "lower",
        "tiny-qwen3.5",
        "--cut",
        "tp",
        "--tp",
        "2",
        "--ctx",
        "16",
        "--json",
        "-o",
        bundle.to_str().unwrap(),
    ]))
    .unwrap();
    assert_eq!(summary["cut"]["mode"], "tensor-parallel decode");
    let kinds: Value = serde_json::from_str(&ok(&["kinds", "tiny-qwen3.5", "--json"])).unwrap();
    let layers = |v: &Value| -> Vec<Value> { v.as_array().unwrap().iter().map(|k| k["layers"].clone()).collect() };
    assert_eq!(layers(&summary["kinds"]), layers(&kinds["kinds"]), "the tp kinds are the decode kinds");
    let run = |extra: &[&str]| -> Value {
        let mut args = vec!["run", "tiny-qwen3.5", "--tokens", "3,1,4,1,5", "-n", "6", "--ctx", "16", "--json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&args)).unwrap()
    };
    let one = run(&[]);
    assert_eq!(run(&["--bundle", bundle.to_str().unwrap()])["generated"], one["generated"]);
    assert_eq!(run(&["--tp", "2"])["generated"], one["generated"]);
}

#[test]
fn a_prompt_prefilled_over_two_chips_continues_into_a_tp_decode_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let lower = |extra: &[&str], out: &str| {
        let mut args = vec!["lower", "tiny-llama", "--ctx", "32", "-o", out];
        args.extend_from_slice(extra);
        ok(&args);
    };
    lower(&["--cut", "prefill-tp", "--tp", "2", "--chunk", "4"], &dir("ptp"));
    lower(&["--cut", "tp", "--tp", "2"], &dir("tp"));
    lower(&["--cut", "decode"], &dir("one"));
    let run = |extra: &[&str]| -> Value {
        let mut args = vec!["run", "tiny-llama", "--tokens", "3,1,4,1,5,9,2,6,5,3,5", "-n", "6", "--json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&args)).unwrap()
    };
    // Token by token over two chips, and two chunks of 4 over two chips then token by token.
    let tp = run(&["--bundle", &dir("tp")]);
    let chunked = run(&["--bundle", &dir("ptp"), "--decode-bundle", &dir("tp")]);
    assert_eq!(chunked["generated"], tp["generated"]);
    // Lowered here: --tp with --chunk prefills over the chips too.
    assert_eq!(run(&["--tp", "2", "--chunk", "4"])["generated"], tp["generated"]);
    assert_eq!(tp["generated"], run(&["--bundle", &dir("one")])["generated"], "what one chip generates");
    // A one-chip decode bundle cannot take the chips' states.
    let line = user_error(&[
        "run",
        "tiny-llama",
        "--tokens",
        "3,1,4,1,5",
        "--bundle",
        &dir("ptp"),
        "--decode-bundle",
        &dir("one"),
    ]);
    assert!(line.contains("must be a tp decode bundle over 2 chips"), "{line}");
}
