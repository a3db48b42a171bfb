//! The spatial engine on llama.cpp GGUF files: the fixture files in
//! `tests/data/fixtures/gguf/` imported, lowered with storage as stored (Q8_0 weights kept as
//! blocks and folded by `from_stored`), written as a bundle, read back by the host from the GGUF
//! file, and run through the simulator — forward and token-by-token decode logits within 1e-4
//! of transformers (original weights for F32 files, Q8_0-dequantised weights for Q8_0 files),
//! with llama.cpp's argmax at every position. Plus `rdu run FILE.gguf` with both engines.

use crate::common;

use common::f32_states;
use rdu_compiler::deploy::{lower_decode_streamed, lower_forward_streamed, LowerOptions};
use rdu_compiler::model::gguf::from_gguf_path;
use rdu_compiler::reference::GgufWeights;
use rdu_host::{Host, WeightsSource};
use rdu_spatial::chip::Chip;
use rdu_testkit::{argmax, fixtures, npy, Tolerance};
use std::process::Command;

fn check(arch: &str, quant: &str) {
    let path = fixtures::gguf_file(arch, quant);
    let spec = f32_states(from_gguf_path(&path).expect("import"));
    let storage = GgufWeights::open(&spec, &path).expect("open").storage();
    let fixtures::GgufReferences { tokens, transformers: want, llamacpp } = fixtures::gguf_references(arch, quant);
    let vocab = spec.vocab;
    let source = WeightsSource::Gguf(path.clone());
    let chip = || Chip::builtin("sn50").expect("chip");
    let tmp = tempfile::tempdir().expect("temp dir");

    // Forward: one step over the whole prompt.
    let opts = LowerOptions { chip: chip(), storage: storage.clone(), seed: 0, progress: &mut |_| {} };
    let model = lower_forward_streamed(&spec, tokens.len(), opts).unwrap_or_else(|e| panic!("{arch}/{quant}: {e}"));
    let bundle_dir = tmp.path().join("forward");
    model.bundle().expect("bundle").write(&bundle_dir, false).expect("write");
    let mut host = Host::load(&bundle_dir, &source, &mut |_, _, _| {}).expect("load");
    let logits = host.step(&tokens, 0).unwrap_or_else(|e| panic!("{arch}/{quant}: {e}")).logits;
    let logits = logits.as_f32().expect("f32");
    let forward = Tolerance::F32.assert(&format!("{arch}/{quant} forward"), logits, &want);
    for (pos, row) in logits.chunks(vocab).enumerate() {
        let ll = &llamacpp[pos * vocab..(pos + 1) * vocab];
        assert_eq!(argmax(row), argmax(ll), "{arch}/{quant}: argmax differs from llama.cpp at {pos}");
    }

    // Decode: token by token.
    let opts = LowerOptions { chip: chip(), storage, seed: 0, progress: &mut |_| {} };
    let model = lower_decode_streamed(&spec, tokens.len(), opts).unwrap_or_else(|e| panic!("{arch}/{quant}: {e}"));
    let bundle_dir = tmp.path().join("decode");
    model.bundle().expect("bundle").write(&bundle_dir, false).expect("write");
    let mut host = Host::load(&bundle_dir, &source, &mut |_, _, _| {}).expect("load");
    let mut decode = 0f32;
    for (pos, &tok) in tokens.iter().enumerate() {
        let row = host.step(&[tok], pos).expect("step").logits.as_f32().expect("f32").to_vec();
        let d = Tolerance::F32.assert(
            &format!("{arch}/{quant} decode at {pos}"),
            &row,
            &want[pos * vocab..(pos + 1) * vocab],
        );
        decode = decode.max(d);
        assert_eq!(argmax(&row), argmax(&llamacpp[pos * vocab..(pos + 1) * vocab]), "{arch}/{quant} decode argmax");
    }
    eprintln!("{arch}/{quant} spatial: forward max |diff| {forward:e}, decode {decode:e}");
}

#[test]
fn llama_f32() {
    check("llama", "f32");
}

#[test]
fn llama_q8_0() {
    check("llama", "q8_0");
}

#[test]
fn gemma3_f32() {
    check("gemma3", "f32");
}

#[test]
fn gemma3_q8_0() {
    check("gemma3", "q8_0");
}

/// `rdu run FILE.gguf --tokens … --logits` with both engines and both cuts: the rows match
/// the fixture's transformers logits.
#[test]
fn rdu_run_reads_gguf() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for (arch, quant, reference) in [("gemma3", "q8_0", "logits_hf_q8deq.npy"), ("llama", "f32", "logits_hf_f32.npy")] {
        let want = npy::f32(fixtures::gguf_dir(arch).join(reference));
        let tokens = npy::ids(fixtures::gguf_dir(arch).join("tokens.npy"));
        let prompt: Vec<String> = tokens[..4].iter().map(u32::to_string).collect();
        for engine in ["spatial", "reference"] {
            for cut in ["decode", "forward"] {
                let out = tmp.path().join(format!("{arch}-{engine}-{cut}.npy"));
                let status = Command::new(env!("CARGO_BIN_EXE_rdu"))
                    .arg("run")
                    .arg(fixtures::gguf_file(arch, quant))
                    .args([
                        "--tokens",
                        &prompt.join(","),
                        "--engine",
                        engine,
                        "--cut",
                        cut,
                        "--state",
                        "f32",
                        "--json",
                        "--logits",
                    ])
                    .arg(&out)
                    .output()
                    .expect("run rdu");
                assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
                let got = npy::f32(&out);
                Tolerance::F32.assert(&format!("rdu run {arch}/{quant} {engine} {cut}"), &got, &want[..got.len()]);
                assert_eq!(got.len(), 4 * 256);
            }
        }
    }
}
