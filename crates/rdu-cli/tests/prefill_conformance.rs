//! Chunked prefill against transformers: every fixture model lowered as a prefill bundle
//! (chunks of 3, 4 and 5 rows) and a decode bundle over the same states, written and read back,
//! and run by one `rdu_host::Session`: the prompt's whole chunks through the prefill bundle (the
//! last row of each must be the forward logits at that position), the rest of the prompt and 8
//! greedy tokens through the decode bundle (`gen_logits.npy`, `gen_ids.npy`), within 1e-4.

use crate::common;

use common::f32_states;
use rdu_compiler::deploy::{lower_decode_streamed, lower_prefill_streamed, LowerOptions, Storage};
use rdu_compiler::model::config::from_config_path;
use rdu_host::{Host, Session, WeightsSource};
use rdu_spatial::chip::Chip;
use rdu_testkit::{argmax, fixtures, npy, Tolerance};
use std::path::Path;
use std::process::Command;

fn load(dir: &Path, weights: &WeightsSource, share: Option<&Host>) -> Host {
    match share {
        Some(other) => Host::load_sharing(dir, other, weights, &mut |_, _, _| {}),
        None => Host::load(dir, weights, &mut |_, _, _| {}),
    }
    .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn check(arch: &str) {
    let dir = fixtures::hf(arch);
    let spec = f32_states(from_config_path(&dir.join("config.json")).expect("config"));
    let tokens = npy::ids(dir.join("tokens.npy"));
    let gen_ids = npy::ids(dir.join("gen_ids.npy"));
    let (full, want_gen) = (npy::f32(dir.join("logits_full.npy")), npy::f32(dir.join("gen_logits.npy")));
    let (vocab, t) = (spec.vocab, tokens.len());
    let ctx = t + gen_ids.len();
    let chip = || Chip::builtin("sn50").expect("chip");
    let weights = WeightsSource::Hf(dir.clone());
    let tmp = tempfile::tempdir().expect("temp dir");

    let decode_dir = tmp.path().join("decode");
    let opts = LowerOptions { chip: chip(), storage: Storage::Dense, seed: 0, progress: &mut |_| {} };
    let decode = lower_decode_streamed(&spec, ctx, opts).unwrap_or_else(|e| panic!("{arch}: {e}"));
    decode.bundle().expect("bundle").write(&decode_dir, false).expect("write");

    let mut worst = 0f32;
    for chunk in [3, 4, 5] {
        let what = |s: String| format!("{arch} --chunk {chunk}: {s}");
        let prefill_dir = tmp.path().join(format!("prefill-{chunk}"));
        let opts = LowerOptions { chip: chip(), storage: Storage::Dense, seed: 0, progress: &mut |_| {} };
        let model = lower_prefill_streamed(&spec, chunk, ctx, opts).unwrap_or_else(|e| panic!("{arch}: {e}"));
        model.bundle().expect("bundle").write(&prefill_dir, false).expect("write");
        let prefill = load(&prefill_dir, &weights, None);
        let decode = load(&decode_dir, &weights, Some(&prefill));
        let mut session = Session::new(prefill, decode).unwrap_or_else(|e| panic!("{arch}: {e}"));

        // The prompt: whole chunks, then the partial last chunk token by token.
        let mut pos = 0;
        let mut last = Vec::new();
        while pos + chunk <= t {
            let out = session.prefill(&tokens[pos..pos + chunk], pos).expect("prefill").logits;
            assert_eq!(out.shape, [1, vocab], "{}", what("a chunk's logits are its last row".into()));
            last = out.as_f32().expect("f32").to_vec();
            pos += chunk;
            let at = pos - 1;
            let d = Tolerance::F32.assert(
                &what(format!("chunk ending at {at}")),
                &last,
                &full[at * vocab..(at + 1) * vocab],
            );
            worst = worst.max(d);
        }
        while pos < t {
            last = session.decode(tokens[pos], pos).expect("decode").logits.as_f32().expect("f32").to_vec();
            let want = &full[pos * vocab..(pos + 1) * vocab];
            worst = worst.max(Tolerance::F32.assert(&what(format!("decoded prompt position {pos}")), &last, want));
            pos += 1;
        }
        // Then 8 greedy tokens, each step's logits those transformers chose by.
        let mut generated = Vec::new();
        for k in 0..gen_ids.len() {
            let want = &want_gen[k * vocab..(k + 1) * vocab];
            worst = worst.max(Tolerance::F32.assert(&what(format!("generation {k}")), &last, want));
            generated.push(argmax(&last));
            if k + 1 < gen_ids.len() {
                last = session.decode(generated[k], t + k).expect("decode").logits.as_f32().expect("f32").to_vec();
            }
        }
        assert_eq!(generated, gen_ids, "{}", what("greedy tokens differ from transformers".into()));
    }
    eprintln!("{arch}: chunks of 3, 4, 5 then decoding: max |diff| against transformers {worst:e}");
}

rdu_testkit::per_fixture!(
    check:
    llama, qwen3, qwen3_next, gemma3_text, deepseek_v2, deepseek_v2_noqlora, deepseek_v3, glm4_moe,
    minimax_m2, gpt_oss, mistral, mixtral,
);

#[test]
fn qwen3_next_t80() {
    check("qwen3_next_T80");
}

#[test]
fn gemma3_text_t80() {
    check("gemma3_text_T80");
}

/// `rdu run --chunk`: the logits rows are the last row of each whole chunk, then every decoded
/// position, and `--json` lists exactly those positions.
#[test]
fn run_with_chunks_writes_the_rows_it_computed() {
    let dir = fixtures::hf("gemma3_text");
    let tokens = npy::ids(dir.join("tokens.npy"));
    let gen_ids = npy::ids(dir.join("gen_ids.npy"));
    let (full, want_gen) = (npy::f32(dir.join("logits_full.npy")), npy::f32(dir.join("gen_logits.npy")));
    let vocab = 256;
    let tmp = tempfile::tempdir().expect("temp dir");
    let npy = tmp.path().join("logits.npy");
    let list: Vec<String> = tokens.iter().map(u32::to_string).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_rdu"))
        .args(["run", dir.to_str().expect("utf-8"), "--tokens", &list.join(","), "-n", "8", "--chunk", "5", "--json"])
        .args(["--state", "f32"])
        .args(["--logits", npy.to_str().expect("utf-8")])
        .output()
        .expect("rdu runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let generated: Vec<u32> = serde_json::from_value(json["generated"].clone()).expect("generated");
    assert_eq!(generated, gen_ids);
    // 12 prompt tokens in chunks of 5: rows at 4 and 9, then 10, 11 decoded, then 7 generated.
    let positions: Vec<usize> = serde_json::from_value(json["positions"].clone()).expect("positions");
    let t = tokens.len();
    let want_positions: Vec<usize> = [4, 9].into_iter().chain(10..t + gen_ids.len() - 1).collect();
    assert_eq!(positions, want_positions);
    let rows = npy::f32(&npy);
    assert_eq!(rows.len(), positions.len() * vocab);
    for (i, &p) in positions.iter().enumerate() {
        let got = &rows[i * vocab..(i + 1) * vocab];
        let want =
            if p + 1 < t { &full[p * vocab..(p + 1) * vocab] } else { &want_gen[(p + 1 - t) * vocab..][..vocab] };
        Tolerance::F32.assert(&format!("rdu run --chunk 5, row at position {p}"), got, want);
    }
}

/// A chunk larger than the context, or a decode bundle over other states, is a one-line error.
#[test]
fn mismatched_bundles_and_chunks_are_refused() {
    let dir = fixtures::hf("llama");
    let out = Command::new(env!("CARGO_BIN_EXE_rdu"))
        .args(["run", dir.to_str().expect("utf-8"), "--tokens", "1,2,3", "-n", "1", "--chunk", "5"])
        .output()
        .expect("rdu runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a chunk of 5 tokens does not fit a context of 4 positions"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let spec = f32_states(from_config_path(&dir.join("config.json")).expect("config"));
    let weights = WeightsSource::Hf(dir.clone());
    let tmp = tempfile::tempdir().expect("temp dir");
    let chip = || Chip::builtin("sn50").expect("chip");
    let opts = LowerOptions { chip: chip(), storage: Storage::Dense, seed: 0, progress: &mut |_| {} };
    let prefill = lower_prefill_streamed(&spec, 2, 8, opts).expect("prefill");
    prefill.bundle().expect("bundle").write(&tmp.path().join("p"), false).expect("write");
    let opts = LowerOptions { chip: chip(), storage: Storage::Dense, seed: 0, progress: &mut |_| {} };
    let decode = lower_decode_streamed(&spec, 16, opts).expect("decode");
    decode.bundle().expect("bundle").write(&tmp.path().join("d"), false).expect("write");
    let prefill = load(&tmp.path().join("p"), &weights, None);
    let decode = load(&tmp.path().join("d"), &weights, Some(&prefill));
    let err = Session::new(prefill, decode).err().expect("refused").to_string();
    assert!(
        err.starts_with("the states cannot move between these bundles: state `Kc0` has the shape [8, 2, 16]"),
        "{err}"
    );
}

/// `rdu lower --cut prefill --chunk C`: a certified bundle whose manifest says `prefill` with its
/// chunk, whose runtime inputs are one token and one position per row, and whose `--json` kinds
/// are the decode cut's kinds (names and layers).
#[test]
fn lower_writes_a_prefill_bundle_with_the_decode_kinds() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let kinds = |cut: &[&str], out: Option<&Path>| -> Vec<(String, Vec<usize>)> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdu"));
        cmd.args(["lower", "tiny-gemma3", "--ctx", "40", "--json"]).args(cut);
        if let Some(dir) = out {
            cmd.args(["-o", dir.to_str().expect("utf-8")]);
        }
        let out = cmd.output().expect("rdu runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let kinds = json["kinds"].as_array().expect("kinds");
        kinds
            .iter()
            .map(|k| {
                (
                    k["name"].as_str().expect("name").to_string(),
                    serde_json::from_value(k["layers"].clone()).expect("layers"),
                )
            })
            .collect()
    };
    let dir = tmp.path().join("prefill");
    let prefill = kinds(&["--cut", "prefill", "--chunk", "20"], Some(&dir));
    assert_eq!(prefill, kinds(&["--cut", "decode"], None));
    assert!(prefill.len() >= 2, "{prefill:?}");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest")).expect("json");
    assert_eq!(manifest["cut"], serde_json::json!({"mode": "prefill", "ctx": 40, "chunk": 20}));
    let inputs: Vec<(String, Vec<usize>)> = manifest["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .map(|i| {
            (i["name"].as_str().expect("name").to_string(), serde_json::from_value(i["shape"].clone()).expect("shape"))
        })
        .collect();
    assert_eq!(inputs, [("pos".to_string(), vec![20]), ("tok".to_string(), vec![20])]);
    let logits =
        manifest["activations"].as_array().expect("activations").iter().find(|a| a["name"] == "logits").cloned();
    assert_eq!(logits.expect("logits")["shape"], serde_json::json!([1, 256]));
}
