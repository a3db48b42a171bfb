//! `rdu lower --cut batched` and `rdu run --batch-prompts` as a user runs them.

use crate::common;

use common::{ok, user_error};
use rdu_testkit::{fixtures, npy, Tolerance};
use serde_json::Value;

fn json(out: &str) -> Value {
    serde_json::from_str(out.trim()).expect("one JSON object")
}

#[test]
fn lower_batched_reports_the_cut_and_the_decode_kinds() {
    let out = json(&ok(&["lower", "tiny-qwen3-next", "--cut", "batched", "--batch", "4", "--ctx", "32", "--json"]));
    assert_eq!(out["cut"]["mode"], "batched decode");
    assert_eq!(out["cut"]["batch"], 4);
    let decode = json(&ok(&["kinds", "tiny-qwen3-next", "--json"]));
    let layers = |v: &Value| -> Vec<Value> {
        v["kinds"].as_array().expect("kinds").iter().map(|k| k["layers"].clone()).collect()
    };
    assert_eq!(layers(&out), layers(&decode));
}

#[test]
fn batch_prompts_give_each_sequence_what_it_gets_alone() {
    let dir = fixtures::hf("qwen3_next");
    let model = dir.to_str().expect("utf-8 path");
    let tmp = tempfile::tempdir().expect("temp");
    let prompts = tmp.path().join("prompts.txt");
    std::fs::write(&prompts, "1,2,3,4,5\n\n7,8\n9, 10, 11\n").expect("write");
    let logits = tmp.path().join("l{b}.npy");
    let out = json(&ok(&[
        "run",
        model,
        "--batch-prompts",
        prompts.to_str().expect("utf-8"),
        "-n",
        "4",
        "--json",
        "--logits",
        logits.to_str().expect("utf-8"),
    ]));
    let seqs = out["sequences"].as_array().expect("sequences");
    assert_eq!(seqs.len(), 3);
    for (b, tokens) in ["1,2,3,4,5", "7,8", "9,10,11"].into_iter().enumerate() {
        let alone_logits = tmp.path().join(format!("alone{b}.npy"));
        let alone = json(&ok(&[
            "run",
            model,
            "--tokens",
            tokens,
            "-n",
            "4",
            "--json",
            "--logits",
            alone_logits.to_str().expect("utf-8"),
        ]));
        assert_eq!(seqs[b]["prompt"], alone["prompt"], "sequence {b}");
        assert_eq!(seqs[b]["generated"], alone["generated"], "sequence {b}");
        assert_eq!(seqs[b]["positions"], alone["positions"], "sequence {b}");
        let got = npy::f32(tmp.path().join(format!("l{b}.npy")));
        Tolerance::F32.assert(&format!("sequence {b} logits"), &got, &npy::f32(&alone_logits));
    }
}

#[test]
fn bad_batch_prompts_are_one_line_errors() {
    let tmp = tempfile::tempdir().expect("temp");
    let bad = tmp.path().join("bad.txt");
    std::fs::write(&bad, "1,2\n3,x\n").expect("write");
    let err = user_error(&["run", "tiny-llama", "--batch-prompts", bad.to_str().expect("utf-8")]);
    assert!(err.contains(":2:") && err.contains("`x` is not a token id"), "{err}");
    let empty = tmp.path().join("empty.txt");
    std::fs::write(&empty, "\n\n").expect("write");
    let err = user_error(&["run", "tiny-llama", "--batch-prompts", empty.to_str().expect("utf-8")]);
    assert!(err.contains("holds no prompts"), "{err}");
    let two = tmp.path().join("two.txt");
    std::fs::write(&two, "1,2\n3\n").expect("write");
    let err =
        user_error(&["run", "tiny-llama", "--batch-prompts", two.to_str().expect("utf-8"), "--logits", "one.npy"]);
    assert!(err.contains("{b}"), "{err}");
    let err = user_error(&["lower", "tiny-llama", "--cut", "batched", "--batch", "0"]);
    assert!(err.contains("--batch must be at least 1"), "{err}");
}

#[test]
fn batch_prompts_over_two_chips_match_one_chip_and_a_refused_width_is_one_line() {
    let model = fixtures::hf("llama");
    let model = model.to_str().expect("utf-8 path");
    let tmp = tempfile::tempdir().expect("temp");
    let prompts = tmp.path().join("prompts.txt");
    std::fs::write(&prompts, "1,2,3\n4,5,6,7,8\n").expect("write");
    let file = prompts.to_str().expect("utf-8");
    let one = json(&ok(&["run", model, "--batch-prompts", file, "-n", "5", "--json"]));
    let two = json(&ok(&["run", model, "--batch-prompts", file, "-n", "5", "--json", "--tp", "2"]));
    assert_eq!(one, two);
    let lowered =
        json(&ok(&["lower", model, "--cut", "batched-tp", "--batch", "2", "--tp", "2", "--ctx", "16", "--json"]));
    assert_eq!((lowered["cut"]["batch"].clone(), lowered["cut"]["tp"].clone()), (Value::from(2), Value::from(2)));
    let err = user_error(&["lower", model, "--cut", "batched-tp", "--batch", "2", "--tp", "3", "--ctx", "16"]);
    assert!(err.contains("--tp 3 does not divide") && err.contains("heads"), "{err}");
}
