//! The spatial engine on `deepseek2`, `qwen3next` and `qwen35moe` GGUF files made from the
//! transformers fixtures by the test-side converter (`rdu_testkit::hf_to_gguf`,
//! llama.cpp's transforms): imported, lowered with storage as stored, written as a bundle,
//! read back by the host from the GGUF file and run through the simulator. F32 files: forward
//! and token-by-token decode within 1e-4 of transformers. Q8_0 files (weights kept as blocks,
//! folded by `from_stored`): within 1e-4 of the reference runner on the F32 file of their
//! dequantised values. F32 `deepseek2` files prefilled in chunks, within 1e-4 of transformers. Plus `rdu run FILE.gguf` on a converted file.

use crate::common;

use common::f32_states;
use rdu_checkpoint::{GgufValue, GgufValueType};
use rdu_compiler::deploy::{
    lower_decode_streamed, lower_forward_streamed, lower_prefill_streamed, LowerOptions, Storage,
};
use rdu_compiler::model::gguf::from_gguf_path;
use rdu_compiler::reference::{GgufWeights, Reference};
use rdu_host::{Host, Session, WeightsSource};
use rdu_spatial::chip::Chip;
use rdu_testkit::hf_to_gguf::{convert, convert_edited, convert_with, Kvs, Quant, Target};
use rdu_testkit::{fixtures, npy, Tolerance};
use std::path::{Path, PathBuf};
use std::process::Command;

fn gguf(dir: &Path, arch: &str, target: Target, quant: Quant) -> PathBuf {
    let out = dir.join(format!("{arch}-{target:?}-{quant:?}.gguf").to_lowercase());
    convert(&fixtures::hf(arch), target, quant, &out);
    out
}

/// The spatial engine's forward logits and token-by-token decode rows of `tokens`.
fn spatial(path: &Path, tokens: &[u32], tmp: &Path) -> (Vec<f32>, Vec<Vec<f32>>) {
    let spec = f32_states(from_gguf_path(path).expect("import"));
    let storage = GgufWeights::open(&spec, path).expect("open").storage();
    let source = WeightsSource::Gguf(path.to_path_buf());
    let chip = || Chip::builtin("sn50").expect("chip");
    let opts = LowerOptions { chip: chip(), storage: storage.clone(), seed: 0, progress: &mut |_| {} };
    let model = lower_forward_streamed(&spec, tokens.len(), opts).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    let dir = tmp.join(format!("{}-forward", spec.name));
    model.bundle().expect("bundle").write(&dir, false).expect("write");
    let mut host = Host::load(&dir, &source, &mut |_, _, _| {}).expect("load");
    let forward = host.step(tokens, 0).expect("step").logits.as_f32().expect("f32").to_vec();

    let opts = LowerOptions { chip: chip(), storage, seed: 0, progress: &mut |_| {} };
    let model = lower_decode_streamed(&spec, tokens.len(), opts).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    let dir = tmp.join(format!("{}-decode", spec.name));
    model.bundle().expect("bundle").write(&dir, false).expect("write");
    let mut host = Host::load(&dir, &source, &mut |_, _, _| {}).expect("load");
    let decode = tokens
        .iter()
        .enumerate()
        .map(|(pos, &tok)| host.step(&[tok], pos).expect("step").logits.as_f32().expect("f32").to_vec())
        .collect();
    (forward, decode)
}

/// F32 file: forward and decode against transformers.
fn check_f32(arch: &str, target: Target) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = gguf(tmp.path(), arch, target, Quant::F32);
    let tokens = npy::ids(fixtures::hf(arch).join("tokens.npy"));
    let (forward, decode) = spatial(&path, &tokens, tmp.path());
    let fw = Tolerance::F32.assert(
        &format!("{arch} as {target:?} forward"),
        &forward,
        &npy::f32(fixtures::hf(arch).join("logits_full.npy")),
    );
    let want = npy::f32(fixtures::hf(arch).join("logits_step.npy"));
    let vocab = want.len() / tokens.len();
    let mut dw = 0f32;
    for (pos, row) in decode.iter().enumerate() {
        let w = &want[pos * vocab..(pos + 1) * vocab];
        dw = dw.max(Tolerance::F32.assert(&format!("{arch} as {target:?} decode at {pos}"), row, w));
    }
    eprintln!("{arch} as {target:?} (spatial): forward max |diff| {fw:e}, decode {dw:e}");
}

/// Q8_0 file, storage as stored: against the reference runner on its dequantised values.
fn check_q8(arch: &str, target: Target) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = gguf(tmp.path(), arch, target, Quant::Q8_0);
    let deq = gguf(tmp.path(), arch, target, Quant::Q8_0Dequantized);
    let spec = f32_states(from_gguf_path(&path).expect("import"));
    let Storage::Exactly(set) = GgufWeights::open(&spec, &path).expect("open").storage() else { panic!("as stored") };
    assert!(set.len() > 10, "the file's matrices are Q8_0: {set:?}");
    let tokens = npy::ids(fixtures::hf(arch).join("tokens.npy"));
    let (forward, decode) = spatial(&path, &tokens, tmp.path());
    let deq_spec = f32_states(from_gguf_path(&deq).expect("import"));
    let deq_weights = GgufWeights::open(&deq_spec, &deq).expect("open");
    let mut reference = Reference::new(&deq_spec, Storage::Dense, &deq_weights);
    let want = reference.forward(&tokens).expect("forward").logits.into_f32();
    let fw = Tolerance::F32.assert(&format!("{arch} as {target:?} Q8_0 forward"), &forward, &want);
    let vocab = spec.vocab;
    let mut dw = 0f32;
    for (pos, row) in decode.iter().enumerate() {
        let w = &want[pos * vocab..(pos + 1) * vocab];
        dw = dw.max(Tolerance::F32.assert(&format!("{arch} as {target:?} Q8_0 decode at {pos}"), row, w));
    }
    eprintln!("{arch} as {target:?} Q8_0 (spatial, from_q8) vs dequantised reference: forward {fw:e}, decode {dw:e}");
}

/// F32 file, chunked prefill: the prompt's whole chunks through a prefill bundle (llama.cpp's
/// per-head `attn_k_b`/`attn_v_b`, attended through the up-projections), then token by token
/// through the decode bundle over the same latent cache; every row against transformers.
fn check_prefill_f32(arch: &str, chunk: usize) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = gguf(tmp.path(), arch, Target::Deepseek2, Quant::F32);
    let tokens = npy::ids(fixtures::hf(arch).join("tokens.npy"));
    let full = npy::f32(fixtures::hf(arch).join("logits_full.npy"));
    let spec = f32_states(from_gguf_path(&path).expect("import"));
    let storage = GgufWeights::open(&spec, &path).expect("open").storage();
    let source = WeightsSource::Gguf(path.clone());
    let (vocab, t) = (spec.vocab, tokens.len());
    let lower = |prefill: bool| {
        let opts = LowerOptions {
            chip: Chip::builtin("sn50").expect("chip"),
            storage: storage.clone(),
            seed: 0,
            progress: &mut |_| {},
        };
        let model =
            if prefill { lower_prefill_streamed(&spec, chunk, t, opts) } else { lower_decode_streamed(&spec, t, opts) };
        let dir = tmp.path().join(if prefill { "prefill" } else { "decode" });
        model.unwrap_or_else(|e| panic!("{arch}: {e}")).bundle().expect("bundle").write(&dir, false).expect("write");
        dir
    };
    let (prefill_dir, decode_dir) = (lower(true), lower(false));
    let prefill = Host::load(&prefill_dir, &source, &mut |_, _, _| {}).expect("load");
    let decode = Host::load_sharing(&decode_dir, &prefill, &source, &mut |_, _, _| {}).expect("load");
    let mut session = Session::new(prefill, decode).expect("session");
    let (mut pos, mut worst) = (0, 0f32);
    while pos < t {
        let (row, at) = if pos + chunk <= t {
            (session.prefill(&tokens[pos..pos + chunk], pos).expect("prefill").logits, pos + chunk - 1)
        } else {
            (session.decode(tokens[pos], pos).expect("decode").logits, pos)
        };
        let what = format!("{arch} as deepseek2, chunks of {chunk}: row {at}");
        worst =
            worst.max(Tolerance::F32.assert(&what, row.as_f32().expect("f32"), &full[at * vocab..(at + 1) * vocab]));
        pos = at + 1;
    }
    eprintln!("{arch} as deepseek2, chunks of {chunk} then decoding: max |diff| against transformers {worst:e}");
}

#[test]
fn deepseek2_prefill_f32() {
    check_prefill_f32("deepseek_v2", 3);
    check_prefill_f32("deepseek_v2_noqlora", 4);
}

#[test]
fn deepseek2_f32() {
    check_f32("deepseek_v2", Target::Deepseek2);
}

#[test]
fn deepseek2_without_q_lora_f32() {
    check_f32("deepseek_v2_noqlora", Target::Deepseek2);
}

#[test]
fn qwen3next_f32() {
    check_f32("qwen3_next", Target::Qwen3Next);
}

#[test]
fn qwen3next_t80_f32() {
    check_f32("qwen3_next_T80", Target::Qwen3Next);
}

#[test]
fn qwen35moe_tiled_f32() {
    check_f32("qwen3_next", Target::Qwen35Moe);
}

/// An older converter's file, unit axes squeezed (the shared-expert gate [1, H] as [H]): the
/// host reads it into the declared shape.
#[test]
fn qwen3next_squeezed_f32() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = tmp.path().join("squeezed.gguf");
    convert_with(&fixtures::hf("qwen3_next"), Target::Qwen3Next, Quant::F32, &path, &|_| {}, true);
    let tokens = npy::ids(fixtures::hf("qwen3_next").join("tokens.npy"));
    let (forward, _) = spatial(&path, &tokens, tmp.path());
    Tolerance::F32.assert(
        "squeezed qwen3next forward",
        &forward,
        &npy::f32(fixtures::hf("qwen3_next").join("logits_full.npy")),
    );
}

#[test]
fn deepseek2_q8_0() {
    check_q8("deepseek_v2", Target::Deepseek2);
}

#[test]
fn qwen3next_q8_0() {
    check_q8("qwen3_next", Target::Qwen3Next);
}

#[test]
fn qwen35moe_q8_0() {
    check_q8("qwen3_next", Target::Qwen35Moe);
}

/// `rdu run FILE.gguf --tokens … --json --logits` on a converted file, both engines: the rows
/// match transformers, and nothing but the JSON line reaches stdout (no progress bar).
#[test]
fn rdu_run_reads_converted_gguf() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for (arch, target) in [("deepseek_v2", Target::Deepseek2), ("qwen3_next", Target::Qwen35Moe)] {
        let path = gguf(tmp.path(), arch, target, Quant::F32);
        let want = npy::f32(fixtures::hf(arch).join("logits_full.npy"));
        let tokens = npy::ids(fixtures::hf(arch).join("tokens.npy"));
        let prompt: Vec<String> = tokens[..5].iter().map(u32::to_string).collect();
        for engine in ["spatial", "reference"] {
            let out = tmp.path().join(format!("{arch}-{engine}.npy"));
            let run = Command::new(env!("CARGO_BIN_EXE_rdu"))
                .arg("run")
                .arg(&path)
                .args(["--tokens", &prompt.join(","), "--engine", engine, "--state", "f32", "--json", "--logits"])
                .arg(&out)
                .output()
                .expect("run rdu");
            assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
            let stdout = String::from_utf8_lossy(&run.stdout);
            assert_eq!(stdout.lines().count(), 1, "one JSON line: {stdout}");
            serde_json::from_str::<serde_json::Value>(stdout.trim()).expect("JSON");
            assert!(!String::from_utf8_lossy(&run.stderr).contains("loading weights"), "no bar with --json");
            let got = npy::f32(&out);
            Tolerance::F32.assert(&format!("rdu run {arch} as {target:?} {engine}"), &got, &want[..got.len()]);
        }
    }
}

/// A byte-level `gpt2` vocabulary (the 256 byte characters, token id = byte) with pre-tokeniser
/// `pre`, added to a converted file's metadata.
fn with_byte_vocab(pre: &'static str) -> impl Fn(&mut Kvs) {
    move |kvs: &mut Kvs| {
        let tokens = rdu_host::tokenizer::byte_to_char().iter().map(|c| GgufValue::String(c.to_string())).collect();
        kvs.push(("tokenizer.ggml.model".into(), GgufValue::String("gpt2".into())));
        kvs.push(("tokenizer.ggml.pre".into(), GgufValue::String(pre.into())));
        kvs.push(("tokenizer.ggml.tokens".into(), GgufValue::Array(GgufValueType::String, tokens)));
        kvs.push(("tokenizer.ggml.merges".into(), GgufValue::Array(GgufValueType::String, Vec::new())));
    }
}

/// A file whose tokenizer rdu cannot build (an unknown `tokenizer.ggml.pre`) still runs on ids:
/// `--tokens` gives the same rows as transformers and says in one line on stderr that text
/// output is unavailable; `--prompt` is refused in one line naming the pre-tokeniser. With a
/// known pre-tokeniser (`qwen35`), `--prompt` tokenises and `--tokens` says nothing.
#[test]
fn rdu_run_on_ids_when_the_tokenizer_is_unsupported() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let tokens = npy::ids(fixtures::hf("qwen3_next").join("tokens.npy"));
    let prompt: Vec<String> = tokens[..4].iter().map(u32::to_string).collect();
    let want = npy::f32(fixtures::hf("qwen3_next").join("logits_full.npy"));
    let rdu = |path: &Path, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_rdu")).arg("run").arg(path).args(args).output().expect("run rdu")
    };
    let unknown = tmp.path().join("unknown-pre.gguf");
    let edit = with_byte_vocab("made-up-pre");
    convert_edited(&fixtures::hf("qwen3_next"), Target::Qwen35Moe, Quant::F32, &unknown, &edit);
    let logits = tmp.path().join("rows.npy");
    let logits_arg = logits.to_str().expect("utf-8 path");
    let run = rdu(&unknown, &["--tokens", &prompt.join(","), "--engine", "reference", "--logits", logits_arg]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("made-up-pre") && stderr.contains("text output is unavailable"), "{stderr}");
    let got = npy::f32(&logits);
    Tolerance::F32.assert("rdu run --tokens on an unsupported tokenizer", &got, &want[..got.len()]);
    assert!(String::from_utf8_lossy(&run.stdout).contains("generated:"));

    let run = rdu(&unknown, &["--prompt", "hi", "--engine", "reference"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("`tokenizer.ggml.pre` `made-up-pre` is not supported"), "{stderr}");

    let known = tmp.path().join("qwen35-pre.gguf");
    let edit = with_byte_vocab("qwen35");
    convert_edited(&fixtures::hf("qwen3_next"), Target::Qwen35Moe, Quant::F32, &known, &edit);
    let run = rdu(&known, &["--prompt", "hi", "--engine", "reference", "--json"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let json: serde_json::Value = serde_json::from_slice(&run.stdout).expect("JSON");
    assert_eq!(json["prompt"], serde_json::json!([104, 105]), "the bytes of \"hi\"");
    let run = rdu(&known, &["--tokens", "1,2", "--engine", "reference"]);
    assert!(run.status.success() && run.stderr.is_empty(), "{}", String::from_utf8_lossy(&run.stderr));
}
