//! States stored in bf16 (`ModelSpec::state`, `rdu lower --state bf16`, the default), held to
//! transformers: every fixture model decoded token by token through the reference runner, its
//! KV caches, MLA latent caches and DeltaNet conv and recurrent states rounded to bf16 where
//! each step writes them, against a transformers run whose cache stores exactly those tensors
//! rounded to bf16 (`tests/data/fixtures/tools/make_bf16_cache.py`: `logits_step_bf16state.npy`,
//! `gen_ids_bf16state.npy`, `gen_logits_bf16state.npy`) — within 1e-4. The worst differences
//! from the bf16-cache run and from the f32-cache run (`logits_step.npy`) are printed.

use rdu_compiler::deploy::Storage;
use rdu_compiler::model::config::from_config_path;
use rdu_compiler::model::spec::StateDtype;
use rdu_compiler::reference::{HfWeights, Reference};
use rdu_testkit::{argmax, fixtures, npy, Tolerance};

fn check(arch: &str) {
    let dir = fixtures::hf(arch);
    let mut spec = from_config_path(&dir.join("config.json")).expect("config");
    assert_eq!(spec.state, StateDtype::F32, "states are stored f32 unless the deployment says bf16");
    spec.state = StateDtype::Bf16;
    let tokens = npy::ids(dir.join("tokens.npy"));
    let want_step = npy::f32(dir.join("logits_step_bf16state.npy"));
    let f32_step = npy::f32(dir.join("logits_step.npy"));
    let want_gen = npy::f32(dir.join("gen_logits_bf16state.npy"));
    let gen_ids = npy::ids(dir.join("gen_ids_bf16state.npy"));
    let weights = HfWeights::open(&spec, &dir).unwrap_or_else(|e| panic!("{arch}: {e}"));
    let mut reference = Reference::new(&spec, Storage::Dense, &weights);
    let mut decoder = reference.decoder(tokens.len() + gen_ids.len()).expect("decoder");
    let vocab = spec.vocab;
    let (mut worst, mut worst_f32) = (0f32, 0f32);
    let mut last = Vec::new();
    for (pos, &tok) in tokens.iter().enumerate() {
        last = decoder.step(tok, pos).expect("step").logits.into_f32();
        let row = pos * vocab..(pos + 1) * vocab;
        let d = Tolerance::F32.assert(
            &format!("{arch} decode at {pos}, from the bf16-cache run"),
            &last,
            &want_step[row.clone()],
        );
        worst = worst.max(d);
        worst_f32 = worst_f32.max(Tolerance::F32.worst(&last, &f32_step[row]).diff);
    }
    let mut generated = Vec::new();
    for k in 0..gen_ids.len() {
        let want = &want_gen[k * vocab..(k + 1) * vocab];
        let d = Tolerance::F32.assert(&format!("{arch} generation {k}, from the bf16-cache run"), &last, want);
        worst = worst.max(d);
        let next = argmax(&last);
        generated.push(next);
        if k + 1 < gen_ids.len() {
            last = decoder.step(next, tokens.len() + k).expect("step").logits.into_f32();
        }
    }
    assert_eq!(generated, gen_ids, "{arch}: greedy tokens differ from the bf16-cache run");
    println!("{arch}: reference, bf16 states: worst |diff| {worst:.2e} from transformers' bf16 cache, {worst_f32:.2e} from its f32 cache");
}

rdu_testkit::per_fixture!(
    check:
    llama, qwen3, gemma3_text, deepseek_v2, deepseek_v2_noqlora, deepseek_v3, glm4_moe, minimax_m2,
    gpt_oss, mistral,
);

// Not held here: qwen3_next, qwen3_next_T80 and gemma3_text_T80. Their runs write values that
// lie within ~3e-5 of a bf16 ulp of a rounding tie (qwen3_next: the DeltaNet recurrent state at
// steps 5-6, measured with transformers), i.e. ~2e-7 relative — the size of the f32 differences
// between any two implementations — so the two sides round such a value to neighbouring bf16
// values and the 1-ulp difference (2^-8 relative) carries to the logits (1.4e-4 at step 6;
// gemma3_text_T80 3.1e-4 at step 18, qwen3_next_T80 3.5e-4 at step 33). The tolerance does not
// move; the shorter fixtures of the same families (gemma3_text) and every other family are held.
//
// Nor mixtral: at step 6 transformers writes a layer-0 key of 0.42480463, 1.4e-7 relative from
// a bf16 rounding tie (measured with transformers' run through make_bf16_cache.py's cache), so
// both engines round it to the other neighbour, 5.1e-4 in the logits at that step; the same
// engines hold mixtral with f32 states, and mistral and gpt_oss with bf16 states.
