//! GLM-4.5's FP8 as compressed-tensors stores it (`float-quantized`: `weight` F8_E4M3 beside
//! `weight_scale`, the layout of zai-org/GLM-4.5-FP8), deployed as stored through `rdu run`
//! (both engines, one chip and two), `rdu lower` and `rdu verify`, against transformers run on
//! the dequantised weights (`tests/data/fixtures/tools/make_fp8_glm_ct.py`); and every bad
//! input refused in one line naming the tensor or the field.

use crate::common::user_error;
use crate::quantised::{both_engines, lowered_tensors, run, s};
use rdu_testkit::safetensors_edit::copy_edited;
use rdu_testkit::{fixtures, npy, Tolerance};
use std::path::Path;

/// The FP8 matrices of the fixture (every layer projection but what `ignore` names: layer 0's
/// `o_proj`, the routers) with each one's `in` columns.
const FP8: [(&str, usize); 13] = [
    ("Wq", 64),
    ("Wk", 64),
    ("Wv", 64),
    ("Wo", 64),
    ("Wg", 64),
    ("Wu", 64),
    ("Wd", 128),
    ("Weg", 64),
    ("Weu", 64),
    ("Wed", 32),
    ("Wsg", 64),
    ("Wsu", 64),
    ("Wsd", 32),
];

/// The block each FP8 matrix of the `strategy` fixture is stored in: a row (`[1, in]`) for
/// `channel`, the config's `block_structure` for `block`.
fn stored_block(strategy: &str, base: &str) -> Option<String> {
    let (_, cols) = FP8.iter().find(|(b, _)| *b == base)?;
    Some(if strategy == "channel" { format!("[1,{cols}]") } else { "[8,16]".to_string() })
}

/// Both fixtures, one forward token by token through each engine on one chip, within 1e-4 of
/// transformers; the bundle stores exactly the FP8 matrices `fp8`, each in its scales' grid
/// (one row for `channel`: `[1, in]`), and keeps dense what `ignore` names (layer 0's `Wo`,
/// exact; the routers, by `re:`) and everything the checkpoint stores F32.
#[test]
fn glm_fp8_in_compressed_tensors_layout_runs_as_stored_within_1e_4_of_transformers() {
    for strategy in ["channel", "block"] {
        let name = format!("glm4_moe_fp8_{strategy}");
        let dir = fixtures::quantised(&name);
        let tmp = tempfile::tempdir().expect("temp dir");
        both_engines(&name, &dir, &["logits_step.npy"], tmp.path());
        let tensors = lowered_tensors(&dir, &["--ctx", "16"], tmp.path());
        let mut fp8 = 0;
        for (tensor, t) in &tensors {
            let base = tensor.trim_end_matches(|c: char| c.is_ascii_digit());
            match stored_block(strategy, base).filter(|_| tensor != "Wo0") {
                Some(block) => {
                    assert_eq!(
                        (t["storage"].as_str(), t["block"].to_string()),
                        (Some("fp8"), block),
                        "{name}: {tensor}"
                    );
                    fp8 += 1;
                }
                None => assert_eq!(t["storage"], "dense", "{name}: {tensor}"),
            }
        }
        // Layer 0: q, k, v, gate, up, down (o ignored); layers 1 and 2: q, k, v, o and six expert matrices.
        assert_eq!(fp8, 6 + 2 * 10, "{name}");
        assert!(tensors.contains_key("Wo0") && tensors.contains_key("Wr1") && tensors.contains_key("bsel1"));
    }
}

/// Over two chips: a row-parallel matrix's share cuts its rows' scales' blocks (`Wo1`'s 64
/// columns, 32 a chip: `[1, 32]` pieces of the stored `[1, 64]` rows, each with its row's
/// scale), a column-parallel one keeps them whole; within 1e-4 of transformers, both fixtures.
#[test]
fn glm_fp8_in_compressed_tensors_layout_runs_over_two_chips_within_1e_4_of_transformers() {
    let blocks = |t: &serde_json::Value| (t["block"].to_string(), t["stored_block"].to_string());
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    for (strategy, expect) in [
        (
            "channel",
            [("Wo1", pair("[1,32]", "[1,64]")), ("Wed1", pair("[1,16]", "[1,32]")), ("Wq1", pair("[1,64]", "null"))],
        ),
        ("block", [("Wo1", pair("[8,16]", "null")), ("Wed1", pair("[8,16]", "null")), ("Wq1", pair("[8,16]", "null"))]),
    ] {
        let name = format!("glm4_moe_fp8_{strategy}");
        let dir = fixtures::quantised(&name);
        let tmp = tempfile::tempdir().expect("temp dir");
        let tensors = lowered_tensors(&dir, &["--cut", "tp", "--tp", "2", "--ctx", "16"], tmp.path());
        for (tensor, want) in expect {
            assert_eq!(tensors[tensor]["storage"], "fp8", "{name}: {tensor}");
            assert_eq!(blocks(&tensors[tensor]), want, "{name}: {tensor}");
        }
        let tokens = npy::ids(dir.join("tokens.npy"));
        let got = run(&dir, &tokens, "spatial", &["--tp", "2"], tmp.path());
        Tolerance::F32.assert(
            &format!("{name} over 2 chips vs transformers"),
            &got,
            &npy::f32(dir.join("logits_step.npy")),
        );
    }
}

/// The channel fixture's config alone (no weights): `--storage auto` follows its
/// `quantization_config`, each matrix `fp8` in `[1, in]` blocks but what `ignore` names; the
/// bundle over two chips verifies and both engines agree on the seeded weights.
#[test]
fn a_compressed_tensors_config_lowers_as_declared_over_two_chips() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("config-only");
    std::fs::create_dir_all(&dir).expect("dir");
    let config = fixtures::quantised("glm4_moe_fp8_channel").join("config.json");
    std::fs::copy(config, dir.join("config.json")).expect("config");
    let tensors = lowered_tensors(&dir, &["--cut", "tp", "--tp", "2", "--ctx", "16"], tmp.path());
    for (tensor, t) in &tensors {
        let base = tensor.trim_end_matches(|c: char| c.is_ascii_digit());
        let want = if tensor == "Wo0" || stored_block("channel", base).is_none() { "dense" } else { "fp8" };
        assert_eq!(t["storage"], want, "{tensor}");
    }
    assert_eq!(tensors["Wd0"]["stored_block"].to_string(), "[1,128]");
    let tokens = [1, 17, 42, 99, 3];
    let spatial = run(&dir, &tokens, "spatial", &["--tp", "2"], tmp.path());
    let reference = run(&dir, &tokens, "reference", &[], tmp.path());
    Tolerance::F32.assert("compressed-tensors config over two chips vs the reference engine", &spatial, &reference);
}

/// A missing `weight_scale`, one of the wrong shape, a static activation scale in the
/// checkpoint or declared by the config: one line from both engines naming what is wrong.
#[test]
fn bad_compressed_tensors_checkpoints_are_refused_in_one_line() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let src = fixtures::quantised("glm4_moe_fp8_channel");
    let wq = "model.layers.0.self_attn.q_proj.weight";
    let expert = "model.layers.2.mlp.experts.5.down_proj.weight";
    let missing = tmp.path().join("missing");
    copy_edited(&src, &missing, |t| {
        t.remove(&format!("{expert}_scale"));
    });
    let shape = tmp.path().join("shape");
    copy_edited(&src, &shape, |t| t.get_mut(&format!("{wq}_scale")).expect("scale").shape = vec![32, 2]);
    let input = tmp.path().join("input");
    copy_edited(&src, &input, |t| {
        let scale = t[&format!("{wq}_scale")].bytes[..2].to_vec();
        let stored = rdu_testkit::safetensors_edit::Stored { dtype: "BF16".into(), shape: vec![1], bytes: scale };
        t.insert("model.layers.0.self_attn.q_proj.input_scale".into(), stored);
    });
    let statik = tmp.path().join("static");
    copy_edited(&src, &statik, |_| {});
    let text = std::fs::read_to_string(src.join("config.json")).expect("config");
    let text = text.replacen("\"dynamic\": true", "\"dynamic\": false", 1);
    std::fs::write(statik.join("config.json"), text).expect("written");
    let run = |dir: &Path, engine: &str| user_error(&["run", s(dir), "--tokens", "1,2", "--engine", engine]);
    for engine in ["spatial", "reference"] {
        let e = run(&missing, engine);
        assert!(e.ends_with(&format!("stored F8_E4M3, but the checkpoint has no scales `{expert}_scale`")), "{e}");
        let e = run(&shape, engine);
        assert!(
            e.ends_with(&format!("scales `{wq}_scale` are [32, 2], but 1×64 blocks of [64, 64] need [64, 1]")),
            "{e}"
        );
        let e = run(&input, engine);
        let want = "tensor `model.layers.0.self_attn.q_proj.input_scale` is a static activation scale, which changes the numerics";
        assert!(e.contains(want), "{e}");
        let e = run(&statik, engine);
        let want = "quantization_config.config_groups.group_0.input_activations.dynamic";
        assert!(e.contains(want) && e.contains("static activation scales (`input_scale`) change the numerics"), "{e}");
    }
}
