//! Batched decode (issue 6): every kind of every real preset certified at its real shapes for
//! a batch of 8 sequences (ctx 4096, Q8_0, SN50), the kinds exactly the decode cut's, and the
//! batched programs' structure: per-sequence states and positions, one weight read for all.

use rdu_compiler::deploy::{layer_kinds, lower_batched_decode_streamed, LowerOptions, Storage};
use rdu_compiler::model::author::source_of;
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::Cut;
use rdu_spatial::chip::Chip;

const BATCH: usize = 8;

fn lower_batched(name: &str) {
    crate::share_references();
    let spec = presets::resolve(name).expect("preset");
    let storage = Storage::AllQ8;
    let expected: Vec<Vec<usize>> = layer_kinds(&spec, &storage).into_iter().map(|k| k.layers).collect();
    let opts = LowerOptions { chip: Chip::builtin("sn50").expect("chip"), storage, seed: 3, progress: &mut |_| {} };
    let model = lower_batched_decode_streamed(&spec, BATCH, 4096, opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    let layers: Vec<Vec<usize>> = model.kinds.iter().map(|k| k.layers.clone()).collect();
    assert_eq!(layers, expected, "{name}: batched kinds differ from the decode cut's");
    for k in &model.kinds {
        let c = &k.program.certificate;
        assert!(c.checks.iter().any(|c| c.starts_with("numbers")), "{name} {}: no numeric check", k.program.name);
        // Every state is a sequence's own: `_s0` .. `_s7`, one per sequence and base name.
        let states: Vec<&str> = k
            .program
            .spatial
            .tensors
            .iter()
            .filter(|t| t.role == rdu_spatial::program::Role::State)
            .map(|t| t.name.as_str())
            .collect();
        assert!(!states.is_empty(), "{name} {}: a decode layer carries state", k.program.name);
        for b in 0..BATCH {
            let own = states.iter().filter(|s| s.ends_with(&format!("_s{b}"))).count();
            assert_eq!(own * BATCH, states.len(), "{name} {}: sequence {b} has {own} states", k.program.name);
        }
    }
    let step = model.step_estimate();
    assert!(step.roofline_fraction > 0.0 && step.roofline_fraction <= 1.0, "{name}: {step:?}");
    let manifest = model.bundle().expect("bundle").manifest;
    assert_eq!(manifest.cut.batch, Some(BATCH));
    let inputs: Vec<&str> = manifest.inputs.iter().map(|i| i.name.as_str()).collect();
    assert!(inputs.contains(&"toks"), "{name}: {inputs:?}");
    for b in 0..BATCH {
        assert!(inputs.contains(&format!("pos_s{b}").as_str()), "{name}: {inputs:?}");
    }
}

#[test]
fn qwen3_next_80b_a3b_batched() {
    lower_batched("qwen3-next-80b-a3b");
}

#[test]
fn qwen3_5_27b_batched() {
    lower_batched("qwen3.5-27b");
}

#[test]
fn qwen3_6_35b_a3b_batched() {
    lower_batched("qwen3.6-35b-a3b");
}

#[test]
fn gemma_3_27b_it_batched() {
    lower_batched("gemma-3-27b-it");
}

#[test]
fn gemma_3_270m_batched() {
    lower_batched("gemma-3-270m");
}

#[test]
fn deepseek_v2_batched() {
    lower_batched("deepseek-v2");
}

#[test]
fn deepseek_v3_batched() {
    lower_batched("deepseek-v3");
}

#[test]
fn kimi_k2_batched() {
    lower_batched("kimi-k2");
}

#[test]
fn glm_4_5_batched() {
    lower_batched("glm-4.5");
}

#[test]
fn glm_4_5_air_batched() {
    lower_batched("glm-4.5-air");
}

#[test]
fn minimax_m2_batched() {
    lower_batched("minimax-m2");
}

#[test]
fn deepseek_v2_lite_batched() {
    lower_batched("deepseek-v2-lite");
}

#[test]
fn llama_3_1_8b_batched() {
    lower_batched("llama-3.1-8b");
}

#[test]
fn qwen3_8b_batched() {
    lower_batched("qwen3-8b");
}

#[test]
fn gpt_oss_120b_batched() {
    lower_batched("gpt-oss-120b");
}

#[test]
fn gpt_oss_20b_batched() {
    lower_batched("gpt-oss-20b");
}

#[test]
fn mixtral_8x7b_batched() {
    lower_batched("mixtral-8x7b");
}

#[test]
fn mistral_7b_batched() {
    lower_batched("mistral-7b");
}

/// A batched layer reads each weight once for all its sequences: the batched program of a
/// layer declares exactly the decode program's weights.
#[test]
fn a_batched_layer_reads_the_decode_layers_weights() {
    for name in presets::names() {
        let spec = presets::resolve(name).expect("preset");
        for l in 0..spec.n_layers().min(4) {
            let weights = |cut| {
                let src = source_of(&spec, l, cut, &Storage::AllQ8);
                let mut w: Vec<String> =
                    src.text().lines().filter(|s| s.starts_with("weight ")).map(String::from).collect();
                w.sort();
                (w, src.stored)
            };
            assert_eq!(
                weights(Cut::Batched { batch: 3, ctx: 64 }),
                weights(Cut::Decode { ctx: 64 }),
                "{name} layer {l}"
            );
        }
    }
}

use crate::support_tp;

/// The serving shape: every kind of `name` certified for a batch of 8 sequences over 8 chips
/// at its real shapes (ctx 4096, SN50), against the unsplit batched program — Q8_0 where 8
/// chips keep whole blocks, else dense; a model that admits no 8-chip split is refused by name.
fn lower_batched_tp8(name: &str) {
    crate::share_references();
    use rdu_compiler::deploy::lower_batched_tp_decode_streamed;
    use rdu_compiler::fit::admits_tp;
    let spec = presets::resolve(name).expect("preset");
    let storage = if admits_tp(&spec, 8, &Storage::AllQ8).is_ok() { Storage::AllQ8 } else { Storage::Dense };
    let opts = LowerOptions {
        chip: Chip::builtin("sn50").expect("chip"),
        storage: storage.clone(),
        // `lower_batched`'s seed: the unsplit program is the batched cut's, so its reference
        // result is computed once for both (`crate::share_references`).
        seed: 3,
        progress: &mut |_| {},
    };
    if let Err(refusal) = admits_tp(&spec, 8, &storage) {
        let err = lower_batched_tp_decode_streamed(&spec, BATCH, 8, 4096, opts).expect_err("refused").to_string();
        assert_eq!(err, refusal.to_string());
        return;
    }
    let expected: Vec<Vec<usize>> = layer_kinds(&spec, &storage).into_iter().map(|k| k.layers).collect();
    let model = lower_batched_tp_decode_streamed(&spec, BATCH, 8, 4096, opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    let layers: Vec<Vec<usize>> = model.kinds.iter().map(|k| k.layers.clone()).collect();
    assert_eq!(layers, expected, "{name}: batched-tp kinds differ from the decode cut's");
    for k in &model.kinds {
        let checks = &k.program.certificate.checks;
        assert!(checks.iter().any(|c| c.starts_with("numbers over 8 chips")), "{name} {}: {checks:?}", k.program.name);
        let tp = k.program.spatial.tp.as_ref().expect("a tp program");
        assert_eq!(
            (tp.chips, tp.all_reduce.len()),
            (8, support_tp::all_reduces(&spec, 8)),
            "{name} {}",
            k.program.name
        );
    }
    let manifest = model.bundle().expect("bundle").manifest;
    assert_eq!((manifest.cut.batch, manifest.cut.tp), (Some(BATCH), Some(8)));
}

#[test]
fn llama_3_1_8b_batched_tp() {
    lower_batched_tp8("llama-3.1-8b");
}

#[test]
fn qwen3_next_80b_a3b_batched_tp() {
    lower_batched_tp8("qwen3-next-80b-a3b");
}

#[test]
fn qwen3_5_27b_batched_tp() {
    lower_batched_tp8("qwen3.5-27b");
}

#[test]
fn qwen3_6_35b_a3b_batched_tp() {
    lower_batched_tp8("qwen3.6-35b-a3b");
}

#[test]
fn gemma_3_27b_it_batched_tp() {
    lower_batched_tp8("gemma-3-27b-it");
}

#[test]
fn gemma_3_270m_batched_tp() {
    lower_batched_tp8("gemma-3-270m");
}

#[test]
fn deepseek_v2_batched_tp() {
    lower_batched_tp8("deepseek-v2");
}

#[test]
fn deepseek_v3_batched_tp() {
    lower_batched_tp8("deepseek-v3");
}

#[test]
fn kimi_k2_batched_tp() {
    lower_batched_tp8("kimi-k2");
}

#[test]
fn glm_4_5_batched_tp() {
    lower_batched_tp8("glm-4.5");
}

#[test]
fn glm_4_5_air_batched_tp() {
    lower_batched_tp8("glm-4.5-air");
}

#[test]
fn minimax_m2_batched_tp() {
    lower_batched_tp8("minimax-m2");
}

#[test]
fn deepseek_v2_lite_batched_tp() {
    lower_batched_tp8("deepseek-v2-lite");
}

#[test]
fn qwen3_8b_batched_tp() {
    lower_batched_tp8("qwen3-8b");
}

#[test]
fn gpt_oss_120b_batched_tp() {
    lower_batched_tp8("gpt-oss-120b");
}

#[test]
fn gpt_oss_20b_batched_tp() {
    lower_batched_tp8("gpt-oss-20b");
}

#[test]
fn mixtral_8x7b_batched_tp() {
    lower_batched_tp8("mixtral-8x7b");
}

#[test]
fn mistral_7b_batched_tp() {
    lower_batched_tp8("mistral-7b");
}
