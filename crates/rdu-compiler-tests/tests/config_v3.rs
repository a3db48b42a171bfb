//! The DeepSeek-V3 router families' configs (`deepseek_v3`, `kimi_k2`, `glm4_moe`,
//! `minimax_m2`): the presets (verbatim copies of the real configs) import to the architecture
//! the model cards and transformers 5.24 describe, group into their kinds, name their
//! multi-token-prediction layers, and a field rdu does not implement is one line naming it.

use rdu_compiler::deploy::{layer_kinds, Storage};
use rdu_compiler::model::config::from_config_json;
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::{
    Act, Family, Ffn, GroupScore, Mixer, ModelSpec, RopeStyle, Router, Scoring, SharedExpert,
};
use rdu_compiler::Error;
use serde_json::{json, Value};

fn preset(name: &str) -> ModelSpec {
    presets::resolve(name).unwrap_or_else(|e| panic!("preset {name}: {e}"))
}

/// The field and message of importing preset `name` after `edit`.
fn refusal(name: &str, edit: impl FnOnce(&mut Value)) -> (String, String) {
    let mut value: Value = serde_json::from_str(presets::config_text(name).expect("preset")).expect("JSON");
    edit(&mut value);
    match from_config_json(&value.to_string(), name) {
        Err(Error::Config { field, message, .. }) => (field, message),
        Err(other) => panic!("{name}: expected a config error, got {other}"),
        Ok(_) => panic!("{name}: imported"),
    }
}

fn moe(spec: &ModelSpec, layer: usize) -> (usize, usize, usize, Option<SharedExpert>, Router) {
    match &spec.layers[layer].ffn {
        Ffn::Moe { experts, top_k, expert_hidden, act: Act::Silu, shared, router, bias: false } => {
            (*experts, *top_k, *expert_hidden, shared.clone(), router.clone())
        }
        other => panic!("{}: layer {layer} is {other:?}", spec.name),
    }
}

/// `rdu kinds` on the real configs: two kinds (dense first layers, MoE layers) for DeepSeek-V3,
/// Kimi K2 and GLM-4.5, one for MiniMax-M2; the MTP layers counted apart from the decoder's.
#[test]
fn the_real_configs_group_into_their_kinds() {
    for (name, family, kinds, dense, mtp) in [
        ("deepseek-v3", Family::DeepseekV3, 2, 3, 1),
        ("kimi-k2", Family::DeepseekV3, 2, 1, 0),
        ("glm-4.5", Family::Glm4Moe, 2, 3, 1),
        ("glm-4.5-air", Family::Glm4Moe, 2, 1, 1),
        ("minimax-m2", Family::MinimaxM2, 1, 0, 3),
    ] {
        let spec = preset(name);
        assert_eq!(spec.family, family, "{name}");
        let got = layer_kinds(&spec, &Storage::AllQ8);
        assert_eq!(got.len(), kinds, "{name}: {:?}", got.iter().map(|k| &k.name).collect::<Vec<_>>());
        let dense_layers = spec.layers.iter().filter(|l| matches!(l.ffn, Ffn::Dense { .. })).count();
        assert_eq!((dense_layers, spec.mtp_layers), (dense, mtp), "{name}");
        // The MTP layers are not decoder layers: the counts are the configs' num_hidden_layers.
        let n =
            serde_json::from_str::<Value>(presets::config_text(name).unwrap()).unwrap()["num_hidden_layers"].clone();
        assert_eq!(json!(spec.n_layers()), n, "{name}");
    }
}

#[test]
fn deepseek_v3_routes_by_biased_sigmoid_scores_within_four_of_eight_groups() {
    let spec = preset("deepseek-v3");
    let Mixer::Mla { heads, q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_dim, .. } = spec.layers[0].mixer else {
        panic!("MLA")
    };
    assert_eq!((heads, q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_dim), (128, Some(1536), 512, 128, 64, 128));
    assert!(matches!(spec.layers[2].ffn, Ffn::Dense { hidden: 18432, .. }));
    let (experts, top_k, hidden, shared, router) = moe(&spec, 3);
    assert_eq!((experts, top_k, hidden), (256, 8, 2048));
    assert_eq!(shared, Some(SharedExpert { hidden: 2048, gated: false }));
    // Renormalised AND scaled (transformers' DeepseekV3TopkRouter), unlike V2's remote code.
    assert_eq!(router, Router::noaux_tc(true, 2.5, 8, 4));
    assert_eq!((router.scoring, router.bias, router.group_score), (Scoring::Sigmoid, true, GroupScore::Top2));
    assert_eq!(spec.rotations[0].style, RopeStyle::Interleaved);
    let kimi = preset("kimi-k2");
    let (experts, _, _, _, router) = moe(&kimi, 1);
    assert_eq!((experts, router), (384, Router::noaux_tc(true, 2.827, 1, 1)));
    assert_eq!((kimi.vocab, kimi.rotations[0].base), (163840, 50000.0));
}

#[test]
fn glm_4_5_has_partial_neox_rope_qkv_biases_and_deepseek_v3_routing() {
    for (name, qk_norm, experts, scaling) in [("glm-4.5", true, 160, 2.5), ("glm-4.5-air", false, 128, 1.0)] {
        let spec = preset(name);
        let Mixer::Attention { heads, kv_heads, head_dim, qk_norm: norm, qk_norm_whole, qkv_bias, rotary_dim, .. } =
            spec.layers[0].mixer
        else {
            panic!("{name}: attention")
        };
        assert_eq!((heads, kv_heads, head_dim, rotary_dim), (96, 8, 128, 64), "{name}");
        assert_eq!((norm, qk_norm_whole, qkv_bias), (qk_norm, false, true), "{name}");
        assert_eq!((spec.rotations[0].style, spec.rotations[0].base), (RopeStyle::Neox, 1e6), "{name}");
        let last = spec.n_layers() - 1;
        let (got, top_k, _, shared, router) = moe(&spec, last);
        assert_eq!((got, top_k, shared.map(|s| s.hidden)), (experts, 8, Some(spec_expert_hidden(&spec))), "{name}");
        assert_eq!(router, Router::noaux_tc(true, scaling, 1, 1), "{name}");
    }
}

fn spec_expert_hidden(spec: &ModelSpec) -> usize {
    match spec.layers.last().map(|l| &l.ffn) {
        Some(Ffn::Moe { expert_hidden, .. }) => *expert_hidden,
        _ => 0,
    }
}

#[test]
fn minimax_m2_norms_q_and_k_over_every_head_and_routes_without_groups() {
    let spec = preset("minimax-m2");
    let Mixer::Attention { heads, kv_heads, head_dim, qk_norm, qk_norm_whole, qkv_bias, rotary_dim, .. } =
        spec.layers[0].mixer
    else {
        panic!("attention")
    };
    assert_eq!((heads, kv_heads, head_dim, rotary_dim), (48, 8, 128, 64));
    assert_eq!((qk_norm, qk_norm_whole, qkv_bias), (true, true, false));
    assert_eq!((spec.rotations[0].style, spec.rotations[0].base), (RopeStyle::Neox, 5e6));
    let (experts, top_k, hidden, shared, router) = moe(&spec, 0);
    assert_eq!((experts, top_k, hidden, shared), (256, 8, 1536, None));
    assert_eq!(router, Router::noaux_tc(true, 1.0, 1, 1));
    assert!(spec.layers.iter().all(|l| matches!(l.ffn, Ffn::Moe { .. })));
}

/// An edit of a preset's JSON.
type Edit = Box<dyn FnOnce(&mut Value)>;

/// A `scoring_func` / `topk_method` (or MiniMax option) rdu does not implement: one line
/// naming the field.
#[test]
fn unimplemented_routing_is_refused_naming_the_field() {
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("deepseek-v3", Box::new(|v| v["scoring_func"] = json!("softmax")), "scoring_func"),
        ("deepseek-v3", Box::new(|v| v["topk_method"] = json!("group_limited_greedy")), "topk_method"),
        ("kimi-k2", Box::new(|v| v["scoring_func"] = json!("sqrtsoftplus")), "scoring_func"),
        ("glm-4.5", Box::new(|v| v["scoring_func"] = json!("softmax")), "scoring_func"),
        ("deepseek-v2", Box::new(|v| v["topk_method"] = json!("noaux_tc")), "topk_method"),
        ("deepseek-v3", Box::new(|v| v["n_group"] = json!(7)), "n_group"),
        (
            "deepseek-v3",
            Box::new(|v| {
                v["n_group"] = json!(256);
                v["topk_group"] = json!(8);
            }),
            "n_group",
        ),
        ("minimax-m2", Box::new(|v| v["scoring_func"] = json!("softmax")), "scoring_func"),
        ("minimax-m2", Box::new(|v| v["attn_type_list"][3] = json!(0)), "attn_type_list"),
        ("minimax-m2", Box::new(|v| v["use_qk_norm"] = json!(false)), "use_qk_norm"),
        ("minimax-m2", Box::new(|v| v["qk_norm_type"] = json!("per_head")), "qk_norm_type"),
        ("minimax-m2", Box::new(|v| v["shared_intermediate_size"] = json!(512)), "shared_intermediate_size"),
    ];
    for (name, edit, field) in cases {
        let (got, message) = refusal(name, edit);
        assert_eq!(got, field, "{name}: {message}");
        assert!(!message.contains('\n'), "{name} {field}: {message}");
    }
}

/// The three tiny fixtures' configs say what their transformers models compute.
#[test]
fn the_tiny_fixtures_import_their_families() {
    let dir = rdu_testkit::fixtures::hf("deepseek_v3");
    let spec = rdu_compiler::model::config::from_config_path(&dir).expect("deepseek_v3");
    assert_eq!((spec.mtp_layers, moe(&spec, 1).4), (1, Router::noaux_tc(true, 2.5, 4, 2)));
    let glm = rdu_compiler::model::config::from_config_path(&rdu_testkit::fixtures::hf("glm4_moe")).expect("glm");
    assert!(matches!(glm.layers[0].mixer, Mixer::Attention { qk_norm: true, qkv_bias: true, rotary_dim: 8, .. }));
    let mm = rdu_testkit::fixtures::hf("minimax_m2");
    for config in ["config.json", "config.hub_style.json"] {
        let spec = rdu_compiler::model::config::from_config_path(&mm.join(config)).expect("minimax_m2");
        assert!(
            matches!(spec.layers[0].mixer, Mixer::Attention { qk_norm_whole: true, rotary_dim: 8, .. }),
            "{config}"
        );
    }
}

/// `--storage auto` on the DeepSeek-V3 and Kimi K2 presets follows their `quantization_config`
/// (fp8, e4m3, 128 × 128 blocks): every matrix of every layer — MLA's q_a, q_b, kv_a, kv_b and
/// output, the dense MLP, the routed and the shared experts — and nothing else: not the router
/// (DeepSeek-V3 keeps `mlp.gate` in bf16), its selection bias, the norms, the embedding or the
/// head. GLM-4.5's published config declares no quantization.
#[test]
fn deepseek_v3_and_kimi_k2_declare_every_layer_matrix_fp8_but_the_router() {
    use rdu_compiler::model::quantization::declared_storage;
    use rdu_compiler::model::storage::Format;
    const FP8: [&str; 14] =
        ["Wqa", "Wqb", "Wkva", "Wkvb", "Wo", "Wg", "Wu", "Wd", "Weg", "Weu", "Wed", "Wsg", "Wsu", "Wsd"];
    for name in ["deepseek-v3", "kimi-k2"] {
        let spec = preset(name);
        let Some(Storage::Exactly(stored)) = declared_storage(&spec) else { panic!("{name}: no declared storage") };
        let dense_layers = spec.layers.iter().filter(|l| matches!(l.ffn, Ffn::Dense { .. })).count();
        let moe_layers = spec.n_layers() - dense_layers;
        assert_eq!(stored.len(), 8 * dense_layers + 11 * moe_layers, "{name}");
        for (weight, format) in &stored {
            let base = weight.trim_end_matches(|c: char| c.is_ascii_digit());
            assert!(FP8.contains(&base), "{name}: {weight} is declared fp8");
            assert_eq!(*format, Format::Fp8 { rows: 128, cols: 128 }, "{name}: {weight}");
        }
        assert!(!stored.keys().any(|w| w.starts_with("Wr") || w.starts_with("bsel") || w == "E" || w == "Wout"));
    }
    assert!(declared_storage(&preset("glm-4.5")).is_none());
}
