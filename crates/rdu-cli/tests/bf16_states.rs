//! The spatial engine with states stored in bf16 (the default of `rdu lower`) against
//! transformers with a bf16 cache: every fixture model lowered for decode (each kind once,
//! certified: the simulator and the reference interpreter round at the same writes), written
//! as a bundle whose manifest says `"dtype": "bf16"` for every state, read back by the host
//! and decoded token by token, then 8 greedy tokens — within 1e-4 of
//! `logits_step_bf16state.npy` / `gen_logits_bf16state.npy`
//! (`tests/data/fixtures/tools/make_bf16_cache.py`). After every step each state the host
//! holds is bf16-representable.

use rdu_compiler::deploy::{lower_decode_streamed, LowerOptions, Storage};
use rdu_compiler::model::config::from_config_path;
use rdu_compiler::model::spec::StateDtype;
use rdu_host::{Host, WeightsSource};
use rdu_spatial::bf16::round_bf16;
use rdu_spatial::chip::Chip;
use rdu_testkit::{argmax, fixtures, npy, Tolerance};

fn check(arch: &str) {
    let dir = fixtures::hf(arch);
    let mut spec = from_config_path(&dir.join("config.json")).expect("config");
    assert_eq!(spec.state, StateDtype::F32, "f32 is the default state storage");
    spec.state = StateDtype::Bf16;
    let tokens = npy::ids(dir.join("tokens.npy"));
    let gen_ids = npy::ids(dir.join("gen_ids_bf16state.npy"));
    let vocab = spec.vocab;
    let tmp = tempfile::tempdir().expect("temp dir");
    let opts = LowerOptions {
        chip: Chip::builtin("sn50").expect("chip"),
        storage: Storage::Dense,
        seed: 0,
        progress: &mut |_| {},
    };
    let model =
        lower_decode_streamed(&spec, tokens.len() + gen_ids.len(), opts).unwrap_or_else(|e| panic!("{arch}: {e}"));
    let bundle = model.bundle().expect("bundle");
    assert!(!bundle.manifest.states.is_empty());
    assert!(bundle.manifest.states.iter().all(|s| s.dtype == StateDtype::Bf16), "{arch}: every state is stored bf16");
    let bundle_dir = tmp.path().join("decode");
    bundle.write(&bundle_dir, false).expect("write");
    let mut host = Host::load(&bundle_dir, &WeightsSource::Hf(dir.clone()), &mut |_, _, _| {}).expect("load");
    let names: Vec<String> = bundle.manifest.states.iter().map(|s| s.name.clone()).collect();
    let representable = |host: &Host, when: &str| {
        for name in &names {
            let values = host.state(name).and_then(|t| t.as_f32()).unwrap_or_else(|| panic!("{arch}: state {name}"));
            assert!(
                values.iter().all(|&v| round_bf16(v) == v),
                "{arch}: state {name} holds a value bf16 cannot after {when}"
            );
        }
    };

    let want_step = npy::f32(dir.join("logits_step_bf16state.npy"));
    let f32_step = npy::f32(dir.join("logits_step.npy"));
    let want_gen = npy::f32(dir.join("gen_logits_bf16state.npy"));
    let (mut worst, mut worst_f32) = (0f32, 0f32);
    let mut last = Vec::new();
    for (pos, &tok) in tokens.iter().enumerate() {
        last = host.step(&[tok], pos).expect("step").logits.as_f32().expect("f32").to_vec();
        let row = pos * vocab..(pos + 1) * vocab;
        worst = worst.max(Tolerance::F32.assert(&format!("{arch} decode at {pos}"), &last, &want_step[row.clone()]));
        worst_f32 = worst_f32.max(Tolerance::F32.worst(&last, &f32_step[row]).diff);
        representable(&host, &format!("step {pos}"));
    }
    let mut generated = Vec::new();
    for k in 0..gen_ids.len() {
        worst = worst.max(Tolerance::F32.assert(
            &format!("{arch} generation {k}"),
            &last,
            &want_gen[k * vocab..(k + 1) * vocab],
        ));
        let next = argmax(&last);
        generated.push(next);
        if k + 1 < gen_ids.len() {
            last = host.step(&[next], tokens.len() + k).expect("step").logits.as_f32().expect("f32").to_vec();
        }
    }
    assert_eq!(generated, gen_ids, "{arch}: greedy tokens differ from transformers with a bf16 cache");
    assert!(worst <= Tolerance::F32.abs);
    println!("{arch}: spatial, bf16 states: worst |diff| {worst:.2e} from transformers' bf16 cache, {worst_f32:.2e} from its f32 cache");
}

rdu_testkit::per_fixture!(
    check:
    llama, gemma3_text, deepseek_v2, deepseek_v2_noqlora, deepseek_v3, glm4_moe, minimax_m2,
    gpt_oss, mistral,
);

// Not held here: qwen3 (the simulator, f32 accumulation: at step 11 a K value lies 1.5e-5 of a
// bf16 ulp from a rounding tie in transformers' run and rounds the other way, 3.9e-4 in the
// logits; the reference interpreter, f64, rounds it as transformers does and is held), and
// qwen3_next, qwen3_next_T80 and gemma3_text_T80, as in the reference engine's test. Their runs
// write values that lie within ~3e-5 of a bf16 ulp of a rounding tie (qwen3_next: the DeltaNet recurrent state at
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
