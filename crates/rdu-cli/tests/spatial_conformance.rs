//! The spatial engine against transformers: every fixture model lowered (each kind once,
//! certified), written as a bundle, read back by the host with the HF checkpoint, and run
//! through the simulator — forward logits, token-by-token decode logits and 8 greedy tokens
//! within 1e-4 of `tests/data/fixtures/hf/*`.

use crate::common;
use rdu_compiler::deploy::{lower_decode_streamed, lower_forward_streamed, LowerOptions, Storage};
use rdu_compiler::model::config::from_config_path;
use rdu_host::{Host, WeightsSource};
use rdu_spatial::chip::Chip;
use rdu_testkit::{argmax, fixtures, npy, Tolerance};

use common::f32_states;

fn check(arch: &str) {
    let dir = fixtures::hf(arch);
    let spec = f32_states(from_config_path(&dir.join("config.json")).expect("config"));
    let tokens = npy::ids(dir.join("tokens.npy"));
    let vocab = spec.vocab;
    let chip = || Chip::builtin("sn50").expect("chip");
    let tmp = tempfile::tempdir().expect("temp dir");

    // Forward: one step over the whole prompt.
    let opts = LowerOptions { chip: chip(), storage: Storage::Dense, seed: 0, progress: &mut |_| {} };
    let model = lower_forward_streamed(&spec, tokens.len(), opts).unwrap_or_else(|e| panic!("{arch}: {e}"));
    let bundle_dir = tmp.path().join("forward");
    model.bundle().expect("bundle").write(&bundle_dir, false).expect("write");
    let mut host = Host::load(&bundle_dir, &WeightsSource::Hf(dir.clone()), &mut |_, _, _| {}).expect("load");
    let logits = host.step(&tokens, 0).unwrap_or_else(|e| panic!("{arch}: {e}")).logits;
    Tolerance::F32.assert(
        &format!("{arch} forward"),
        logits.as_f32().expect("f32"),
        &npy::f32(dir.join("logits_full.npy")),
    );

    // Decode: token by token through a written and re-read bundle, then 8 greedy tokens.
    let gen_ids = npy::ids(dir.join("gen_ids.npy"));
    let ctx = tokens.len() + gen_ids.len();
    let opts = LowerOptions { chip: chip(), storage: Storage::Dense, seed: 0, progress: &mut |_| {} };
    let model = lower_decode_streamed(&spec, ctx, opts).unwrap_or_else(|e| panic!("{arch}: {e}"));
    let bundle_dir = tmp.path().join("decode");
    model.bundle().expect("bundle").write(&bundle_dir, false).expect("write");
    let mut host = Host::load(&bundle_dir, &WeightsSource::Hf(dir.clone()), &mut |_, _, _| {}).expect("load");
    let want_step = npy::f32(dir.join("logits_step.npy"));
    let want_gen = npy::f32(dir.join("gen_logits.npy"));
    let mut last = Vec::new();
    for (pos, &tok) in tokens.iter().enumerate() {
        last = host.step(&[tok], pos).expect("step").logits.as_f32().expect("f32").to_vec();
        Tolerance::F32.assert(&format!("{arch} decode at {pos}"), &last, &want_step[pos * vocab..(pos + 1) * vocab]);
    }
    let mut generated = Vec::new();
    for k in 0..gen_ids.len() {
        Tolerance::F32.assert(&format!("{arch} generation {k}"), &last, &want_gen[k * vocab..(k + 1) * vocab]);
        let next = argmax(&last);
        generated.push(next);
        if k + 1 < gen_ids.len() {
            last = host.step(&[next], tokens.len() + k).expect("step").logits.as_f32().expect("f32").to_vec();
        }
    }
    assert_eq!(generated, gen_ids, "{arch}: greedy tokens differ from transformers");
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
