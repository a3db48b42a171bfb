//! Conformance with Hugging Face transformers: every fixture model in
//! `tests/data/fixtures/hf/` (tiny seeded models saved by transformers 5.24 with their
//! logits) run through the reference runner — forward, token-by-token decode, per-layer
//! hidden states and greedy generation — within 1e-4 max absolute difference.

use rdu_compiler::deploy::Storage;
use rdu_compiler::model::config::from_config_path;
use rdu_compiler::model::spec::ModelSpec;
use rdu_compiler::reference::{HfWeights, Reference, WeightSource};
use rdu_testkit::{argmax, fixtures, npy, Tolerance};

/// `rms_norm(x) · (w + offset)` row by row: the final norm that transformers' last hidden state includes.
fn final_norm(spec: &ModelSpec, weights: &dyn WeightSource, rows: &[f32]) -> Vec<f32> {
    let d = spec.d_model;
    let w = weights.weight("nf", &[d]).expect("final norm weight").into_f32();
    let offset = if spec.head.norm_unit_offset { 1.0 } else { 0.0 };
    let mut out = Vec::with_capacity(rows.len());
    for row in rows.chunks(d) {
        let ms = row.iter().map(|v| (*v as f64) * (*v as f64)).sum::<f64>() / d as f64;
        let inv = 1.0 / (ms + spec.head.norm_eps).sqrt();
        out.extend(row.iter().zip(&w).map(|(v, w)| ((*v as f64) * inv) as f32 * (w + offset)));
    }
    out
}

fn check_model(arch: &str) {
    let dir = fixtures::hf(arch);
    let tokens = npy::ids(dir.join("tokens.npy"));
    let t = tokens.len();
    for config in ["config.json", "config.hub_style.json"] {
        let spec = f32_states(from_config_path(&dir.join(config)).unwrap_or_else(|e| panic!("{arch}/{config}: {e}")));
        let weights = HfWeights::open(&spec, &dir).unwrap_or_else(|e| panic!("{arch}: {e}"));
        let mut reference = Reference::new(&spec, Storage::Dense, &weights);

        // Forward: all positions at once.
        let out = reference.forward(&tokens).unwrap_or_else(|e| panic!("{arch}: {e}"));
        let (shape, want) = npy::with_shape(dir.join("logits_full.npy"));
        assert_eq!(out.logits.shape, shape);
        Tolerance::F32.assert(
            &format!("{arch}/{config} forward logits"),
            out.logits.as_f32().expect("f32 logits"),
            &want,
        );
        if config == "config.hub_style.json" {
            continue;
        }

        // Hidden states: the embedding output, each layer's output, and the final norm.
        let (hshape, hidden) = npy::with_shape(dir.join("hidden_states.npy"));
        let (l, per) = (spec.n_layers(), t * spec.d_model);
        assert_eq!(hshape, vec![l + 1, t, spec.d_model]);
        for (i, h) in out.hidden.iter().take(l).enumerate() {
            Tolerance::F32.assert(
                &format!("{arch} hidden state {i}"),
                h.as_f32().expect("f32"),
                &hidden[i * per..(i + 1) * per],
            );
        }
        let normed = final_norm(&spec, &weights, out.hidden[l].as_f32().expect("f32"));
        Tolerance::F32.assert(&format!("{arch} final hidden state"), &normed, &hidden[l * per..]);

        // Decode: token by token with the cache, then 8 greedy tokens.
        let (_, want_step) = npy::with_shape(dir.join("logits_step.npy"));
        let (_, want_gen) = npy::with_shape(dir.join("gen_logits.npy"));
        let gen_ids = npy::ids(dir.join("gen_ids.npy"));
        let vocab = spec.vocab;
        let mut decoder = reference.decoder(spec.max_ctx).unwrap();
        let mut last = Vec::new();
        for (pos, &tok) in tokens.iter().enumerate() {
            last = decoder.step(tok, pos).unwrap().logits.into_f32();
            Tolerance::F32.assert(
                &format!("{arch} decode logits at {pos}"),
                &last,
                &want_step[pos * vocab..(pos + 1) * vocab],
            );
        }
        let mut generated = Vec::new();
        for k in 0..gen_ids.len() {
            Tolerance::F32.assert(
                &format!("{arch} generation logits {k}"),
                &last,
                &want_gen[k * vocab..(k + 1) * vocab],
            );
            let next = argmax(&last);
            generated.push(next);
            if k + 1 < gen_ids.len() {
                last = decoder.step(next, t + k).unwrap().logits.into_f32();
            }
        }
        assert_eq!(generated, gen_ids, "{arch}: greedy generation differs from transformers");
    }
}

#[test]
fn llama_matches_transformers() {
    check_model("llama");
}

#[test]
fn qwen3_matches_transformers() {
    check_model("qwen3");
}

#[test]
fn qwen3_next_matches_transformers() {
    check_model("qwen3_next");
}

#[test]
fn qwen3_next_t80_matches_transformers() {
    check_model("qwen3_next_T80");
}

#[test]
fn gemma3_text_matches_transformers() {
    check_model("gemma3_text");
}

#[test]
fn gemma3_text_t80_matches_transformers() {
    check_model("gemma3_text_T80");
}

#[test]
fn deepseek_v2_matches_transformers() {
    check_model("deepseek_v2");
}

#[test]
fn deepseek_v2_without_q_lora_matches_transformers() {
    check_model("deepseek_v2_noqlora");
}

#[test]
fn deepseek_v3_matches_transformers() {
    check_model("deepseek_v3");
}

#[test]
fn glm4_moe_matches_transformers() {
    check_model("glm4_moe");
}

#[test]
fn minimax_m2_matches_transformers() {
    check_model("minimax_m2");
}

#[test]
fn gpt_oss_matches_transformers() {
    check_model("gpt_oss");
}

#[test]
fn mistral_matches_transformers() {
    check_model("mistral");
}

#[test]
fn mixtral_matches_transformers() {
    check_model("mixtral");
}

#[test]
fn a_checkpoint_missing_a_tensor_is_a_one_line_error_naming_it() {
    let dir = fixtures::hf("llama");
    let tmp = tempfile::tempdir().expect("temp dir");
    let bytes = std::fs::read(dir.join("model.safetensors")).expect("fixture");
    // The same checkpoint under a config that asks for a third layer it does not have.
    let config = std::fs::read_to_string(dir.join("config.json"))
        .expect("config")
        .replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
    std::fs::write(tmp.path().join("config.json"), config).unwrap();
    std::fs::write(tmp.path().join("model.safetensors"), bytes).unwrap();
    let spec = f32_states(from_config_path(tmp.path()).expect("config"));
    let weights = HfWeights::open(&spec, tmp.path()).expect("opens");
    let err = Reference::new(&spec, Storage::Dense, &weights).forward(&[1, 2]).err().expect("missing layer 2");
    assert!(err.contains("model.layers.2.") && err.contains(&tmp.path().display().to_string()), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

/// `spec` with its states stored f32, as transformers' float32 cache holds them (the fixtures'
/// f32 files are the reference within 1e-4).
fn f32_states(mut spec: rdu_compiler::model::spec::ModelSpec) -> rdu_compiler::model::spec::ModelSpec {
    spec.state = rdu_compiler::model::spec::StateDtype::F32;
    spec
}
