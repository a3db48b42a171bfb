//! Weights deployed as the checkpoint stores them — FP8 block-scaled (DeepSeek's layout) and
//! MXFP4 (gpt-oss's HF layout; llama.cpp's GGUF type) — through `rdu run` (both engines),
//! `rdu lower` and `rdu verify`, against the references `tests/data/fixtures/tools/
//! make_quantised.py` recorded from transformers and llama.cpp on the dequantised weights;
//! and every bad input refused in one line naming what is wrong.

use crate::common;

use common::{ok, user_error};
use rdu_testkit::safetensors_edit::copy_edited;
use rdu_testkit::{fixtures, npy, Tolerance};
use std::path::Path;

pub(crate) fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

/// `rdu run MODEL --tokens … --engine ENGINE --logits` (token by token, f32 states): every row.
pub(crate) fn run(model: &Path, tokens: &[u32], engine: &str, extra: &[&str], tmp: &Path) -> Vec<f32> {
    let prompt: Vec<String> = tokens.iter().map(u32::to_string).collect();
    let logits = tmp.join(format!("{engine}.npy"));
    let args = ["run", s(model), "--tokens", &prompt.join(","), "--engine", engine, "--json", "--logits", s(&logits)];
    ok(&[&args[..], extra].concat());
    npy::f32(&logits)
}

/// `rdu lower MODEL … -o DIR` then `rdu verify DIR`: the manifest's tensors, by name, as
/// (storage, block).
fn lower_and_verify(model: &Path, args: &[&str], tmp: &Path) -> std::collections::BTreeMap<String, (String, String)> {
    let tensors = lowered_tensors(model, args, tmp);
    tensors.iter().map(|(n, t)| (n.clone(), (t["storage"].to_string(), t["block"].to_string()))).collect()
}

/// `rdu lower MODEL … -o DIR` then `rdu verify DIR`: the manifest's tensor entries, by name.
pub(crate) fn lowered_tensors(model: &Path, args: &[&str], tmp: &Path) -> serde_json::Map<String, serde_json::Value> {
    let bundle = tmp.join("bundle");
    ok(&[&["lower", s(model), "-o", s(&bundle)][..], args].concat());
    let out = ok(&["verify", s(&bundle)]);
    assert!(out.contains("programs re-certified from the bundle's files"), "{out}");
    let text = std::fs::read_to_string(bundle.join("manifest.json")).expect("manifest");
    let m: serde_json::Value = serde_json::from_str(&text).expect("json");
    m["tensors"].as_object().expect("tensors").clone()
}

/// Both engines on the fixture `name`'s checkpoint `model` (its directory, or a file in it),
/// the fixture's tokens token by token, within 1e-4 of each of `references` (files in it).
pub(crate) fn both_engines(name: &str, model: &Path, references: &[&str], tmp: &Path) {
    let dir = fixtures::quantised(name);
    let tokens = npy::ids(dir.join("tokens.npy"));
    for engine in ["spatial", "reference"] {
        let got = run(model, &tokens, engine, &[], tmp);
        for r in references {
            Tolerance::F32.assert(&format!("{name} {engine} engine vs {r}"), &got, &npy::f32(dir.join(r)));
        }
    }
}

#[test]
fn fp8_in_deepseeks_layout_runs_as_stored_within_1e_4_of_transformers() {
    let dir = fixtures::quantised("llama_fp8");
    let tmp = tempfile::tempdir().expect("temp dir");
    both_engines("llama_fp8", &dir, &["logits_step.npy"], tmp.path());
    let tensors = lower_and_verify(&dir, &["--ctx", "16"], tmp.path());
    for l in 0..2 {
        for w in ["Wq", "Wk", "Wv", "Wo", "Wg", "Wu", "Wd"] {
            assert_eq!(tensors[&format!("{w}{l}")], ("\"fp8\"".into(), "[24,40]".into()), "{w}{l}");
        }
    }
    for dense in ["E", "Wout", "an0", "nf"] {
        assert_eq!(tensors[dense].0, "\"dense\"", "{dense}: stored F32 in the checkpoint");
    }
}

#[test]
fn mxfp4_in_the_hf_layout_runs_as_stored_within_1e_4_of_transformers() {
    let dir = fixtures::quantised("qwen3_moe_mxfp4");
    let tmp = tempfile::tempdir().expect("temp dir");
    both_engines("qwen3_moe_mxfp4", &dir, &["logits_step.npy"], tmp.path());
    let tensors = lower_and_verify(&dir, &["--ctx", "16"], tmp.path());
    for (name, (storage, _)) in &tensors {
        let expert = name.starts_with("We");
        assert_eq!(storage, if expert { "\"mxfp4\"" } else { "\"dense\"" }, "{name}");
    }
}

#[test]
fn mxfp4_from_llama_cpps_quantiser_runs_within_1e_4_of_transformers_and_llama_cpp() {
    let file = fixtures::quantised("qwen3_moe_mxfp4_gguf").join("tiny-mxfp4.gguf");
    let tmp = tempfile::tempdir().expect("temp dir");
    let references = ["logits_deq_transformers.npy", "logits_deq_llamacpp.npy"];
    both_engines("qwen3_moe_mxfp4_gguf", &file, &references, tmp.path());
    // llama.cpp's MXFP4_MOE: experts MXFP4, the other matrices Q8_0, norms and router F32.
    let tensors = lower_and_verify(&file, &["--ctx", "16"], tmp.path());
    for (name, (storage, _)) in &tensors {
        let want = match name.trim_end_matches(|c: char| c.is_ascii_digit()) {
            "Weg" | "Weu" | "Wed" => "\"mxfp4\"",
            "Wq" | "Wk" | "Wv" | "Wo" | "E" | "Wout" => "\"q8_0\"",
            _ => "\"dense\"",
        };
        assert_eq!(storage, want, "{name}");
    }
}

/// gpt-oss's experts as the hub's checkpoints store them: MXFP4 blocks out-major (`[E, 2I, D/32,
/// 16]`, gate and up every 2nd row of `gate_up_proj_blocks`; `[E, D, I/32, 16]`), which
/// transformers transposes as it dequantises. Both engines within 1e-4 of transformers loading
/// the checkpoint itself; `--storage auto` keeps the experts MXFP4 and the bundle reads them
/// as stored: rows taken, nothing transposed.
#[test]
fn gpt_oss_experts_in_the_hubs_mxfp4_layout_run_as_stored_within_1e_4_of_transformers() {
    let dir = fixtures::quantised("gpt_oss_mxfp4");
    let tmp = tempfile::tempdir().expect("temp dir");
    both_engines("gpt_oss_mxfp4", &dir, &["logits_step.npy"], tmp.path());
    let tensors = lowered_tensors(&dir, &["--ctx", "16", "--storage", "auto"], tmp.path());
    for (name, t) in &tensors {
        let expert = ["Weg", "Weu", "Wed"].contains(&name.trim_end_matches(|c: char| c.is_ascii_digit()));
        assert_eq!(t["storage"], if expert { "mxfp4" } else { "dense" }, "{name}");
    }
    for l in 0..2 {
        let experts = format!("model.layers.{l}.mlp.experts");
        for (w, start) in [("Weg", 0), ("Weu", 1)] {
            let want = serde_json::json!({"kind": "slice", "names": [format!("{experts}.gate_up_proj")],
                "axis": 1, "start": start, "len": 96, "step": 2});
            assert_eq!(tensors[&format!("{w}{l}")]["checkpoint"], want, "{w}{l}: every 2nd row of the blocks");
        }
        let want = serde_json::json!({"kind": "tensor", "names": [format!("{experts}.down_proj")]});
        assert_eq!(tensors[&format!("Wed{l}")]["checkpoint"], want, "Wed{l}: the blocks as they are");
    }
    let programs = std::fs::read_dir(tmp.path().join("bundle/programs")).expect("programs");
    let folded = programs.flatten().filter(|p| {
        std::fs::read_to_string(p.path()).is_ok_and(|t| t.contains("experts(") && t.contains("fold=mxfp4"))
    });
    assert_eq!(folded.count(), 2, "both layer kinds fold the experts' MXFP4 blocks");
}

/// The same checkpoint through llama.cpp's own converter (ggml MXFP4 experts, the rest F32):
/// both engines within 1e-4 of llama.cpp on the file's dequantised weights, and of
/// transformers run as llama.cpp runs the file (SwiGLU limit 7, YaRN's range rounded).
#[test]
fn gpt_oss_mxfp4_from_llama_cpps_converter_runs_within_1e_4_of_llama_cpp_and_transformers() {
    let file = fixtures::quantised("gpt_oss_mxfp4_gguf").join("tiny-mxfp4.gguf");
    let tmp = tempfile::tempdir().expect("temp dir");
    let references = ["logits_deq_llamacpp.npy", "logits_deq_transformers.npy"];
    both_engines("gpt_oss_mxfp4_gguf", &file, &references, tmp.path());
    let tensors = lower_and_verify(&file, &["--ctx", "16", "--storage", "auto"], tmp.path());
    for (name, (storage, _)) in &tensors {
        let expert = ["Weg", "Weu", "Wed"].contains(&name.trim_end_matches(|c: char| c.is_ascii_digit()));
        assert_eq!(storage, if expert { "\"mxfp4\"" } else { "\"dense\"" }, "{name}");
    }
}

/// A bare config declaring FP8 (blocks 16 × 32, whole on each of two chips): `--storage auto`
/// follows it, the tensor-parallel bundle stores every layer projection `fp8` and verifies, and
/// both engines run it over two chips on the same seeded weights.
#[test]
fn a_config_declaring_fp8_lowers_over_two_chips_and_verifies() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let config = fp8_config(tmp.path(), "[16, 32]");
    let tensors = lower_and_verify(&config, &["--cut", "tp", "--tp", "2", "--ctx", "16"], tmp.path());
    assert_eq!(tensors["Wq0"], ("\"fp8\"".into(), "[16,32]".into()));
    assert_eq!(tensors["Wd1"], ("\"fp8\"".into(), "[16,32]".into()));
    assert_eq!(tensors["Wout"].0, "\"dense\"", "the head is not a layer projection");
    let tokens = [1, 17, 42, 99, 3];
    let spatial = run(&config, &tokens, "spatial", &["--tp", "2"], tmp.path());
    let reference = run(&config, &tokens, "reference", &[], tmp.path());
    Tolerance::F32.assert("fp8 config over two chips vs the reference engine", &spatial, &reference);
}

/// The tiny llama's config with an FP8 `quantization_config` of `block`, alone in a directory.
fn fp8_config(tmp: &Path, block: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(fixtures::hf("llama").join("config.json")).expect("config");
    let quant = format!(
        "\"quantization_config\": {{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"weight_block_size\": {block}}},\n  \"vocab_size\""
    );
    let dir = tmp.join("fp8-config");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("config.json"), text.replace("\"vocab_size\"", &quant)).expect("written");
    dir
}

#[test]
fn bad_fp8_checkpoints_are_refused_in_one_line() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let src = fixtures::quantised("llama_fp8");
    let wq = "model.layers.0.self_attn.q_proj.weight";
    let run = |dir: &Path, engine: &str| user_error(&["run", s(dir), "--tokens", "1,2", "--engine", engine]);
    // FP8 tensors where the config declares none.
    let plain = tmp.path().join("plain");
    copy_edited(&src, &plain, |_| {});
    std::fs::copy(fixtures::hf("llama").join("config.json"), plain.join("config.json")).expect("config");
    for engine in ["spatial", "reference"] {
        let e = run(&plain, engine);
        assert!(e.contains("is stored F8_E4M3, but config.json declares no fp8 quantization_config"), "{e}");
    }
    // A missing scale.
    let missing = tmp.path().join("missing");
    copy_edited(&src, &missing, |t| {
        t.remove(&format!("{wq}_scale_inv"));
    });
    for engine in ["spatial", "reference"] {
        let e = run(&missing, engine);
        assert!(
            e.ends_with(&format!("stored F8_E4M3, but the checkpoint has no block scales `{wq}_scale_inv`")),
            "{e}"
        );
    }
    // The config's blocks are not the checkpoint's grid.
    let grid = reblocked(&src, &tmp.path().join("grid"), "24,\n      40", "32,\n      32");
    // (the host reads the manifest's tensors in order: `Wd0`, layer 0's down projection, first)
    let wd = "model.layers.0.mlp.down_proj.weight";
    let e = run(&grid, "spatial");
    assert!(
        e.ends_with(&format!("block scales `{wd}_scale_inv` are [3, 4], but 32×32 blocks of [64, 128] need [2, 4]")),
        "{e}"
    );
    // FP8 values read as another storage (their blocks are the config's, which only an fp8
    // tensor of the bundle carries): refused by both engines alike.
    for engine in ["spatial", "reference"] {
        let e = user_error(&["run", s(&src), "--tokens", "1,2", "--engine", engine, "--storage", "q8"]);
        assert!(e.contains("stored F8_E4M3 with block scales, which a q8_0") && e.contains("--storage auto"), "{e}");
    }
    // A quantization method rdu does not read.
    let gptq = tmp.path().join("gptq");
    std::fs::create_dir_all(&gptq).expect("dir");
    let text = std::fs::read_to_string(fixtures::hf("llama").join("config.json")).expect("config");
    let text =
        text.replace("\"vocab_size\"", "\"quantization_config\": {\"quant_method\": \"gptq\"},\n  \"vocab_size\"");
    std::fs::write(gptq.join("config.json"), text).expect("written");
    let e = user_error(&["lower", s(&gptq), "--ctx", "16"]);
    assert!(e.contains("quantization_config.quant_method") && e.contains("`gptq` is not read"), "{e}");
}

/// MXFP4 experts over chips that would split their blocks, zero-padded (a chip's share of the
/// intermediate columns rounded up to whole blocks, as vLLM pads gpt-oss's MXFP4 experts): the
/// bundle stores the experts as the checkpoint does with a `pad`, verifies, and runs within
/// 1e-4 of transformers — gpt-oss's 96 columns (3 blocks) over 2 chips (48 each: padded to
/// 128, 64 a chip) and over 4 (24 each: padded to 128, 32 a chip), Qwen3-MoE's 32 (one block)
/// over 2, and llama.cpp's conversion of gpt-oss (ggml MXFP4 experts) over 2, against llama.cpp.
#[test]
fn mxfp4_experts_split_mid_block_are_zero_padded_and_run_within_1e_4_of_transformers() {
    for (fixture, file, tp, reference) in [
        ("gpt_oss_mxfp4", "", "2", "logits_step.npy"),
        ("gpt_oss_mxfp4", "", "4", "logits_step.npy"),
        ("qwen3_moe_mxfp4", "", "2", "logits_step.npy"),
        ("gpt_oss_mxfp4_gguf", "tiny-mxfp4.gguf", "2", "logits_deq_llamacpp.npy"),
    ] {
        let dir = fixtures::quantised(fixture);
        let model = dir.join(file);
        let tmp = tempfile::tempdir().expect("temp dir");
        let tensors = lowered_tensors(&model, &["--cut", "tp", "--tp", tp, "--ctx", "16"], tmp.path());
        let hidden: usize = if fixture.starts_with("qwen3") { 32 } else { 96 };
        for (w, axis) in [("Weg0", 1), ("Weu0", 1), ("Wed0", 2)] {
            let t = &tensors[w];
            let what = format!("{fixture} tp {tp}: {w}");
            assert_eq!((&t["storage"], &t["shape"][axis]), (&"mxfp4".into(), &hidden.into()), "{what}: as stored");
            let to = hidden.next_multiple_of(32 * tp.parse::<usize>().unwrap());
            assert_eq!(t["pad"], serde_json::json!({"axis": axis, "to": to}), "{what}");
        }
        assert!(tensors["Wq0"].get("pad").is_none(), "{fixture}: only the experts are padded");
        let tokens = npy::ids(dir.join("tokens.npy"));
        let got = run(&model, &tokens, "spatial", &["--tp", tp], tmp.path());
        let what = format!("{fixture} over {tp} chips, experts zero-padded, vs {reference}");
        Tolerance::F32.assert(&what, &got, &npy::f32(dir.join(reference)));
    }
}

/// Where padding cannot help, one line naming why: a width that does not divide the heads, and
/// experts stored Q8_0 (rdu's `--storage q8`), which are never padded.
#[test]
fn widths_padding_cannot_help_are_refused_in_one_line() {
    let src = fixtures::quantised("gpt_oss_mxfp4");
    let e = user_error(&["lower", s(&src), "--cut", "tp", "--tp", "8", "--ctx", "16"]);
    assert!(e.contains("--tp 8 does not divide the 4 attention heads of"), "{e}");
    let e = user_error(&["run", s(&src), "--tokens", "1,2", "--tp", "3"]);
    assert!(e.contains("--tp 3 does not divide the 4 attention heads of"), "{e}");
    let dense = fixtures::hf("gpt_oss");
    let e = user_error(&["lower", s(&dense), "--cut", "tp", "--tp", "2", "--ctx", "16", "--storage", "q8"]);
    assert!(e.contains("--tp 2 splits the Q8_0 blocks of Wed0: its 96 input columns over 2 chips are 48 each"), "{e}");
}

/// gpt-oss's experts stored dense (in-major, as transformers holds them dequantised) beside a
/// config declaring them MXFP4 (out-major blocks): read either way, values would land in the
/// wrong places; refused naming the tensor.
#[test]
fn gpt_oss_experts_not_stored_as_declared_are_refused_in_one_line() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dense = tmp.path().join("dense");
    copy_edited(&fixtures::hf("gpt_oss"), &dense, |_| {});
    let config = fixtures::quantised("gpt_oss_mxfp4").join("config.json");
    std::fs::copy(config, dense.join("config.json")).expect("config");
    let t = "model.layers.0.mlp.experts.down_proj";
    for engine in ["spatial", "reference"] {
        let e = user_error(&["run", s(&dense), "--tokens", "1,2", "--engine", engine]);
        assert!(e.contains(&format!("tensor `{t}` is stored dense, but config.json's quantization_config (mxfp4) stores it as `{t}_blocks` and `{t}_scales`")), "{e}");
    }
}

/// The fixture `fixture` (an HF MXFP4 checkpoint) twice edited: `{blocks}_blocks` cut to the
/// shape `short` (its block count no longer its scales'), and byte `at` of `{scales}_scales`
/// set to `byte` (out of e8m0's range): both engines refuse each in one line naming the tensor
/// and what is wrong (`count`, `range`).
fn bad_mxfp4_refused(
    fixture: &str,
    blocks: &str,
    short: &[usize],
    scales: (&str, usize, u8),
    [count, range]: [&str; 2],
) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let src = fixtures::quantised(fixture);
    let short_dir = tmp.path().join("count");
    copy_edited(&src, &short_dir, |t| {
        let b = t.get_mut(&format!("{blocks}_blocks")).expect("blocks");
        b.shape = short.to_vec();
        b.bytes.truncate(short.iter().product());
    });
    let (name, at, byte) = scales;
    let range_dir = tmp.path().join("range");
    copy_edited(&src, &range_dir, |t| t.get_mut(&format!("{name}_scales")).expect("scales").bytes[at] = byte);
    for engine in ["spatial", "reference"] {
        let e = user_error(&["run", s(&short_dir), "--tokens", "1,2", "--engine", engine]);
        assert!(e.contains(blocks) && e.contains(count), "{fixture} {engine}: {e}");
        let e = user_error(&["run", s(&range_dir), "--tokens", "1,2", "--engine", engine]);
        assert!(e.contains(name) && e.contains(range), "{fixture} {engine}: {e}");
    }
}

/// DeepSeek-V3 in its own FP8 layout (`make_fp8_v3.py`): every matrix of a layer — MLA's q_a,
/// q_b, kv_a (with the rope key) and kv_b, the output, the dense MLP, each routed expert and the
/// shared expert — `F8_E4M3` beside 8 × 16 block scales; the router, its selection bias, the
/// norms, the embedding and the head F32. Both engines are within 1e-4 of transformers loading
/// that checkpoint itself, and the bundle stores exactly those matrices `fp8`.
#[test]
fn deepseek_v3_fp8_runs_as_stored_within_1e_4_of_transformers() {
    let dir = fixtures::quantised("deepseek_v3_fp8");
    let tmp = tempfile::tempdir().expect("temp dir");
    both_engines("deepseek_v3_fp8", &dir, &["logits_step.npy"], tmp.path());
    let tensors = lower_and_verify(&dir, &["--ctx", "16"], tmp.path());
    const FP8: [&str; 14] =
        ["Wqa", "Wqb", "Wkva", "Wkvb", "Wo", "Wg", "Wu", "Wd", "Weg", "Weu", "Wed", "Wsg", "Wsu", "Wsd"];
    for (name, (storage, block)) in &tensors {
        if FP8.contains(&name.trim_end_matches(|c: char| c.is_ascii_digit())) {
            assert_eq!((storage.as_str(), block.as_str()), ("\"fp8\"", "[8,16]"), "{name}");
        } else {
            assert_eq!(storage, "\"dense\"", "{name}: stored F32 in the checkpoint");
        }
    }
    // Layer 0 dense (q_a, q_b, kv_a, kv_b, o, gate, up, down), layers 1 and 2 MoE (5 + 6 each).
    assert_eq!(tensors.values().filter(|(s, _)| s == "\"fp8\"").count(), 8 + 2 * 11);
    for dense in ["Wr1", "bsel1", "qan0", "kvn0", "E", "Wout"] {
        assert!(tensors.contains_key(dense), "{dense}");
    }
}

/// A chip's share that cuts the checkpoint's FP8 blocks holds finer blocks sharing the scale
/// of the block each lies in: the bundle's `block` is the chip's, its `stored_block` the
/// checkpoint's, and the split deployment is within 1e-4 of transformers. llama_fp8's 24 × 40
/// blocks over 2 chips (a chip's 64 of `Wd`'s 128 columns, 32 of `Wq`'s 64 rows: 24 × 8 and
/// 8 × 40 blocks); DeepSeek-V3's 8 × 16 over 4 chips (8 of an expert's and the shared
/// expert's 32 columns: 8 × 8) and over 2 (16 columns, no whole Q8_0 block: still FP8).
#[test]
fn fp8_blocks_cut_by_a_chip_share_run_within_1e_4_of_transformers() {
    let block = |t: &serde_json::Value| (t["block"].to_string(), t["stored_block"].to_string());
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    for (fixture, tp, expect) in [
        ("llama_fp8", "2", vec![("Wd0", pair("[24,8]", "[24,40]")), ("Wq0", pair("[8,40]", "[24,40]"))]),
        ("deepseek_v3_fp8", "4", vec![("Wed1", pair("[8,8]", "[8,16]")), ("Wsd2", pair("[8,8]", "[8,16]"))]),
        ("deepseek_v3_fp8", "2", vec![("Wed1", pair("[8,16]", "null")), ("Wsd2", pair("[8,16]", "null"))]),
    ] {
        let dir = fixtures::quantised(fixture);
        let tmp = tempfile::tempdir().expect("temp dir");
        let tensors = lowered_tensors(&dir, &["--cut", "tp", "--tp", tp, "--ctx", "16"], tmp.path());
        for (name, want) in expect {
            assert_eq!(tensors[name]["storage"], "fp8", "{fixture} tp {tp}: {name}");
            assert_eq!(block(&tensors[name]), want, "{fixture} tp {tp}: {name}");
        }
        let tokens = npy::ids(dir.join("tokens.npy"));
        let got = run(&dir, &tokens, "spatial", &["--tp", tp], tmp.path());
        let what = format!("{fixture} over {tp} chips vs transformers");
        Tolerance::F32.assert(&what, &got, &npy::f32(dir.join("logits_step.npy")));
    }
}

/// The FP8 DeepSeek-V3 checkpoint with a stacked expert's scales missing, blocks unlike the
/// config's, or a config declaring no FP8: one line naming the tensor, from both engines.
#[test]
fn bad_fp8_deepseek_v3_checkpoints_are_refused_in_one_line() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let src = fixtures::quantised("deepseek_v3_fp8");
    let run = |dir: &Path, engine: &str| user_error(&["run", s(dir), "--tokens", "1,2", "--engine", engine]);
    let expert = "model.layers.2.mlp.experts.5.up_proj.weight";
    let missing = tmp.path().join("missing");
    copy_edited(&src, &missing, |t| {
        t.remove(&format!("{expert}_scale_inv"));
    });
    let plain = tmp.path().join("plain");
    copy_edited(&src, &plain, |_| {});
    std::fs::copy(fixtures::hf("deepseek_v3").join("config.json"), plain.join("config.json")).expect("config");
    let grid = reblocked(&src, &tmp.path().join("grid"), "8,\n      16", "16,\n      16");
    for engine in ["spatial", "reference"] {
        let e = run(&missing, engine);
        let want = format!("stored F8_E4M3, but the checkpoint has no block scales `{expert}_scale_inv`");
        assert!(!e.contains('\n') && e.ends_with(&want), "{e}");
        let e = run(&plain, engine);
        assert!(
            !e.contains('\n') && e.contains("is stored F8_E4M3, but config.json declares no fp8 quantization_config"),
            "{e}"
        );
        let e = run(&grid, engine);
        assert!(!e.contains('\n') && e.contains("_scale_inv` are [") && e.contains("but 16×16 blocks of ["), "{e}");
    }
}

/// A copy of the checkpoint `src` in `dst` whose config's `weight_block_size` `from` (as the
/// config's text spells it) says `to`: blocks unlike the checkpoint's grid.
fn reblocked(src: &Path, dst: &Path, from: &str, to: &str) -> std::path::PathBuf {
    copy_edited(src, dst, |_| {});
    let config = std::fs::read_to_string(src.join("config.json")).expect("config");
    assert!(config.contains(from), "the config spells its blocks {from:?}");
    std::fs::write(dst.join("config.json"), config.replace(from, to)).expect("written");
    dst.to_path_buf()
}

#[test]
fn bad_mxfp4_checkpoints_are_refused_in_one_line() {
    let down = "model.layers.0.mlp.experts.3.down_proj.weight";
    let up = "model.layers.1.mlp.experts.0.up_proj.weight";
    let why = [
        "do not match blocks of shape [63, 1, 16]",
        "MXFP4 block 5 has scale byte 253 (2^126); scales are at most 252",
    ];
    bad_mxfp4_refused("qwen3_moe_mxfp4", down, &[63, 1, 16], (up, 5, 253), why);
}

/// The same bad blocks in gpt-oss's hub layout, where gate and up are every 2nd row of one
/// tensor (`[8, 192, 2, 16]`): a `gate_up_proj_blocks` one row short of its scales, and a
/// `down_proj` scale out of range.
#[test]
fn bad_gpt_oss_mxfp4_experts_are_refused_in_one_line() {
    let gate_up = "model.layers.0.mlp.experts.gate_up_proj";
    let down = "model.layers.1.mlp.experts.down_proj";
    let why = ["do not match blocks of shape [8, 191, 2, 16]", "MXFP4 block 7 has scale byte 255"];
    bad_mxfp4_refused("gpt_oss_mxfp4", gate_up, &[8, 191, 2, 16], (down, 7, 255), why);
}
