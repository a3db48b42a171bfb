//! Config import and presets: every preset and fixture imports, the two config layouts
//! agree, real presets match the reference numbers, irregular patterns, and errors that
//! name their field.

use std::path::{Path, PathBuf};

use rdu_compiler::model::config::{self, from_config_json, from_config_path};
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::{
    Act, Dialect, Family, Ffn, GdnLayout, Mixer, ModelSpec, RopeScaling, RopeStyle, Router, SharedExpert,
};
use rdu_compiler::Error;
use serde_json::{json, Value};

fn preset(name: &str) -> ModelSpec {
    match presets::resolve(name) {
        Ok(spec) => spec,
        Err(e) => panic!("preset {name}: {e}"),
    }
}

/// Imports preset `name` after `edit` changed its JSON.
fn edited(name: &str, edit: impl FnOnce(&mut Value)) -> rdu_compiler::error::Result<ModelSpec> {
    let text = presets::config_text(name).expect("preset exists");
    let mut value: Value = serde_json::from_str(text).expect("preset is JSON");
    edit(&mut value);
    from_config_json(&value.to_string(), name)
}

/// The field an import failed on, and the message.
fn config_error(result: rdu_compiler::error::Result<ModelSpec>) -> (String, String) {
    match result {
        Err(Error::Config { field, message, .. }) => (field, message),
        Err(other) => panic!("expected a config error, got {other}"),
        Ok(spec) => panic!("expected a config error, imported {}", spec.name),
    }
}

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fixtures/hf");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("fixtures directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("config.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn attention(spec: &ModelSpec, layer_idx: usize) -> (usize, usize, usize, bool, bool, bool, f64, usize) {
    match spec.layers[layer_idx].mixer {
        Mixer::Attention { heads, kv_heads, head_dim, qk_norm, output_gate, qkv_bias, scale, rotary_dim, .. } => {
            (heads, kv_heads, head_dim, qk_norm, output_gate, qkv_bias, scale, rotary_dim)
        }
        ref other => panic!("{} layer {layer_idx}: expected attention, found {other:?}", spec.name),
    }
}

fn prefix(spec: &ModelSpec) -> &str {
    match &spec.dialect {
        Dialect::Hf { prefix } => prefix,
        Dialect::Gguf => panic!("config import gives the HF dialect"),
    }
}

fn distinct_layers(spec: &ModelSpec) -> usize {
    let mut distinct: Vec<&rdu_compiler::model::spec::Layer> = Vec::new();
    for layer in &spec.layers {
        if !distinct.contains(&layer) {
            distinct.push(layer);
        }
    }
    distinct.len()
}

#[test]
fn every_preset_imports_under_its_name() {
    let names = presets::names();
    assert!(names.len() >= 20, "{names:?}");
    for name in names {
        let spec = presets::get(name).unwrap_or_else(|| panic!("preset {name} does not import"));
        assert_eq!(spec.name, name);
        assert!(spec.n_layers() > 0);
        for layer in &spec.layers {
            assert!(layer.rotation.is_none_or(|r| r < spec.rotations.len()), "{name}");
        }
    }
    assert!(presets::get("no-such-model").is_none());
}

#[test]
fn preset_names_are_the_files_in_presets() {
    let dir = rdu_testkit::fixtures::repo().join("crates/rdu-compiler/presets");
    let mut files = Vec::new();
    for sub in [dir.clone(), dir.join("tiny")] {
        for entry in std::fs::read_dir(&sub).expect("presets dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "json") {
                let stem = path.file_stem().and_then(|s| s.to_str()).expect("utf-8 name");
                files.push(stem.to_string());
            }
        }
    }
    files.sort();
    let names: Vec<String> = presets::names().into_iter().map(str::to_string).collect();
    assert_eq!(names, files, "every preset file is registered, sorted by name");
}

#[test]
fn tiny_presets_are_small_and_quantisable() {
    let tiny: Vec<_> = presets::names().into_iter().filter(|n| n.starts_with("tiny-")).collect();
    assert_eq!(tiny.len(), 16);
    for name in tiny {
        let spec = preset(name);
        assert_eq!((spec.d_model, spec.vocab, spec.max_ctx), (64, 256, 4096), "{name}");
        assert!((4..=6).contains(&spec.n_layers()), "{name}");
        let mut inputs = vec![spec.d_model];
        for layer in &spec.layers {
            match layer.mixer {
                Mixer::Attention { heads, head_dim, .. } => inputs.push(heads * head_dim),
                Mixer::Mla { heads, q_lora_rank, kv_lora_rank, v_dim, .. } => {
                    inputs.extend([heads * v_dim, kv_lora_rank]);
                    inputs.extend(q_lora_rank);
                }
                Mixer::GatedDeltaNet { v_heads, v_dim, .. } => inputs.push(v_heads * v_dim),
            }
            match &layer.ffn {
                Ffn::Dense { hidden, .. } => inputs.push(*hidden),
                Ffn::Moe { expert_hidden, shared, .. } => {
                    inputs.push(*expert_hidden);
                    inputs.extend(shared.as_ref().map(|s| s.hidden));
                }
            }
        }
        assert!(inputs.iter().all(|dim| dim % 32 == 0), "{name}: projection inputs {inputs:?}");
        // Llama, Mistral, Mixtral and MiniMax-M2 layers are uniform by construction (no
        // per-layer setting; MiniMax-M2 MoE attention in every layer).
        let uniform = ["tiny-llama", "tiny-mistral", "tiny-mixtral", "tiny-minimax-m2"].contains(&name);
        let expected = if uniform { 1 } else { 2 };
        assert!(distinct_layers(&spec) >= expected, "{name}: {} distinct layers", distinct_layers(&spec));
    }
}

#[test]
fn fixture_layouts_give_equal_specs() {
    let dirs = fixtures();
    assert!(dirs.len() >= 8, "{dirs:?}");
    for dir in dirs {
        let from_dir = from_config_path(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let dir_name = dir.file_name().and_then(|n| n.to_str()).expect("utf-8 name");
        assert_eq!(from_dir.name, dir_name);
        let v5 = from_config_path(&dir.join("config.json")).expect("config.json imports");
        assert_eq!(v5.name, dir_name, "a config.json is named after its directory");
        let mut hub = from_config_path(&dir.join("config.hub_style.json")).expect("hub layout imports");
        assert_eq!(hub.name, "config.hub_style");
        hub.name = v5.name.clone();
        assert_eq!(v5, hub, "{dir_name}: the two layouts differ");
        assert_eq!(v5, from_dir);
    }
}

#[test]
fn fixture_specs_match_their_configs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fixtures/hf");
    let next = from_config_path(&root.join("qwen3_next")).expect("qwen3_next");
    assert!(matches!(
        next.layers[0].mixer,
        Mixer::GatedDeltaNet { k_heads: 2, v_heads: 4, layout: GdnLayout::Grouped, .. }
    ));
    assert_eq!(attention(&next, 3), (4, 2, 16, true, true, false, 0.25, 4));
    assert_eq!((next.layers[0].rotation, next.layers[3].rotation), (None, Some(0)));
    let gemma = from_config_path(&root.join("gemma3_text")).expect("gemma3_text");
    let windows: Vec<_> = gemma.layers.iter().map(|l| l.window).collect();
    assert_eq!(windows, [Some(4), Some(4), None, Some(4)]);
    let bases: Vec<_> = gemma.rotations.iter().map(|r| r.base).collect();
    assert_eq!(bases, [1e4, 1e6], "rotations in order of first appearance");
    assert_eq!(gemma.embed.scale, Some(8.0));
    let ds = from_config_path(&root.join("deepseek_v2")).expect("deepseek_v2");
    assert!(matches!(ds.layers[0].ffn, Ffn::Dense { hidden: 128, act: Act::Silu }));
    assert!(matches!(ds.layers[2].ffn, Ffn::Moe { experts: 8, top_k: 2, expert_hidden: 32, .. }));
    assert!(matches!(ds.layers[0].mixer, Mixer::Mla { q_lora_rank: Some(32), qk_rope: 8, .. }));
    let lite = from_config_path(&root.join("deepseek_v2_noqlora")).expect("deepseek_v2_noqlora");
    assert!(matches!(lite.layers[0].mixer, Mixer::Mla { q_lora_rank: None, .. }));
}

#[test]
fn qwen3_next_80b_matches_the_reference() {
    let spec = preset("qwen3-next-80b-a3b");
    assert_eq!((spec.family, spec.n_layers(), spec.vocab, spec.max_ctx), (Family::Qwen3Next, 48, 151936, 262144));
    let full: Vec<_> = (0..48).filter(|&i| matches!(spec.layers[i].mixer, Mixer::Attention { .. })).collect();
    assert_eq!(full, (0..12).map(|k| 4 * k + 3).collect::<Vec<_>>());
    assert_eq!(attention(&spec, 3), (16, 2, 256, true, true, false, 1.0 / 16.0, 64));
    let gdn = Mixer::GatedDeltaNet {
        k_heads: 16,
        v_heads: 32,
        k_dim: 128,
        v_dim: 128,
        conv_kernel: 4,
        layout: GdnLayout::Grouped,
    };
    assert_eq!(spec.layers[0].mixer, gdn);
    assert_eq!((spec.layers[0].rotation, spec.layers[0].window), (None, None));
    let moe = Ffn::Moe {
        experts: 512,
        top_k: 10,
        expert_hidden: 512,
        act: Act::Silu,
        shared: Some(SharedExpert { hidden: 512, gated: true }),
        router: Router::softmax(true, 1.0, 1, 1),
        bias: false,
    };
    assert!(spec.layers.iter().all(|l| l.ffn == moe && l.norms.unit_offset && !l.norms.post_attn));
    assert_eq!(spec.rotations.len(), 1);
    assert_eq!((spec.rotations[0].base, spec.rotations[0].dim), (1e7, 64));
    assert_eq!((spec.rotations[0].style, &spec.rotations[0].scaling), (RopeStyle::Neox, &RopeScaling::None));
    assert!(!spec.head.tied && spec.head.norm_unit_offset);
    assert_eq!(prefix(&spec), "model.");
}

#[test]
fn gemma_3_27b_matches_the_reference() {
    let spec = preset("gemma-3-27b-it");
    assert_eq!((spec.family, spec.n_layers(), spec.vocab, spec.max_ctx), (Family::Gemma3, 62, 262208, 131072));
    let global: Vec<_> = (0..62).filter(|&i| spec.layers[i].window.is_none()).collect();
    assert_eq!(global, [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]);
    assert!(spec.layers.iter().all(|l| l.window.is_none() || l.window == Some(1024)));
    let (heads, kv_heads, head_dim, qk_norm, _, _, scale, rotary_dim) = attention(&spec, 0);
    assert_eq!((heads, kv_heads, head_dim, qk_norm, rotary_dim), (32, 16, 128, true, 128));
    assert_eq!(scale, 168f64.powf(-0.5));
    let local = &spec.rotations[spec.layers[0].rotation.expect("rope")];
    let global = &spec.rotations[spec.layers[5].rotation.expect("rope")];
    assert_eq!((local.base, &local.scaling), (1e4, &RopeScaling::None));
    assert_eq!((global.base, &global.scaling), (1e6, &RopeScaling::Linear { factor: 8.0 }));
    assert_eq!(spec.rotations.len(), 2);
    assert!(matches!(spec.layers[0].ffn, Ffn::Dense { hidden: 21504, act: Act::GeluTanh }));
    let norms = &spec.layers[0].norms;
    assert!(norms.unit_offset && norms.pre_attn && norms.post_attn && norms.pre_ffn && norms.post_ffn);
    assert_eq!(norms.eps, 1e-6);
    assert_eq!(spec.embed.scale, Some(f64::from(5376f32.sqrt())));
    assert!(spec.head.tied);
    assert_eq!((spec.bos, spec.eos.as_slice()), (Some(2), &[1, 106][..]));
    assert_eq!(prefix(&spec), "language_model.model.");
}

#[test]
fn gemma_3_270m_matches_the_reference() {
    let spec = preset("gemma-3-270m");
    let global: Vec<_> = (0..18).filter(|&i| spec.layers[i].window.is_none()).collect();
    assert_eq!(global, [5, 11, 17]);
    assert_eq!(spec.layers[0].window, Some(512));
    assert_eq!(attention(&spec, 0).6, 1.0 / 16.0);
    assert_eq!((spec.vocab, prefix(&spec)), (262144, "model."));
}

#[test]
fn deepseek_v2_matches_the_reference() {
    let spec = preset("deepseek-v2");
    let Mixer::Mla { heads, q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_dim, scale } = spec.layers[0].mixer else {
        panic!("deepseek-v2 uses MLA");
    };
    assert_eq!((heads, q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_dim), (128, Some(1536), 512, 128, 64, 128));
    assert!((scale - 0.1147214).abs() < 1e-6, "scale {scale}");
    assert!(matches!(spec.layers[0].ffn, Ffn::Dense { hidden: 12288, .. }));
    let moe = Ffn::Moe {
        experts: 160,
        top_k: 6,
        expert_hidden: 1536,
        act: Act::Silu,
        shared: Some(SharedExpert { hidden: 3072, gated: false }),
        router: Router::softmax(false, 16.0, 8, 3),
        bias: false,
    };
    assert!(spec.layers[1..].iter().all(|l| l.ffn == moe));
    let rotation = &spec.rotations[0];
    assert_eq!((rotation.dim, rotation.style, rotation.base), (64, RopeStyle::Interleaved, 1e4));
    let yarn = RopeScaling::Yarn {
        factor: 40.0,
        original_max: 4096,
        beta_fast: 32.0,
        beta_slow: 1.0,
        mscale: 0.707,
        mscale_all_dim: 0.707,
        truncate: true,
    };
    assert_eq!(rotation.scaling, yarn);
    assert_eq!(
        (spec.vocab, spec.max_ctx, spec.bos, spec.eos.as_slice()),
        (102400, 163840, Some(100000), &[100001][..])
    );
}

#[test]
fn deepseek_v2_lite_has_no_q_lora() {
    let spec = preset("deepseek-v2-lite");
    assert!(matches!(spec.layers[0].mixer, Mixer::Mla { q_lora_rank: None, heads: 16, .. }));
    let Ffn::Moe { router, shared, experts, .. } = &spec.layers[1].ffn else { panic!("layer 1 is MoE") };
    assert_eq!((*experts, shared.as_ref().map(|s| s.hidden)), (64, Some(2816)));
    assert_eq!(router, &Router::softmax(false, 1.0, 1, 1));
}

#[test]
fn llama_3_1_uses_llama3_scaling() {
    let spec = preset("llama-3.1-8b");
    assert_eq!(attention(&spec, 0), (32, 8, 128, false, false, false, 1.0 / 128f64.sqrt(), 128));
    let scaling = RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max: 8192 };
    assert_eq!((spec.rotations[0].base, &spec.rotations[0].scaling), (500000.0, &scaling));
    assert_eq!((spec.layers[0].norms.eps, spec.head.tied), (1e-5, false));
    assert_eq!(spec.eos, [128001, 128008, 128009]);
    assert_eq!(distinct_layers(&spec), 1);
}

#[test]
fn qwen3_5_27b_matches_the_reference() {
    let spec = preset("qwen3.5-27b");
    assert_eq!((spec.family, spec.n_layers(), spec.vocab), (Family::Qwen35, 64, 248320));
    let gdn = Mixer::GatedDeltaNet {
        k_heads: 16,
        v_heads: 48,
        k_dim: 128,
        v_dim: 128,
        conv_kernel: 4,
        layout: GdnLayout::Split,
    };
    assert_eq!(spec.layers[0].mixer, gdn);
    assert_eq!(attention(&spec, 63), (24, 4, 256, true, true, false, 1.0 / 16.0, 64));
    assert!(spec.layers.iter().all(|l| l.ffn == Ffn::Dense { hidden: 17408, act: Act::Silu }));
    assert_eq!(prefix(&spec), "model.language_model.");
    assert_eq!((spec.bos, spec.eos.as_slice()), (None, &[248044][..]));
    assert_eq!(preset("qwen3.6-27b").layers, spec.layers, "Qwen3.6-27B shares the architecture");
}

#[test]
fn qwen3_6_35b_is_moe_in_every_layer() {
    let spec = preset("qwen3.6-35b-a3b");
    assert_eq!(spec.n_layers(), 40);
    let moe = Ffn::Moe {
        experts: 256,
        top_k: 8,
        expert_hidden: 512,
        act: Act::Silu,
        shared: Some(SharedExpert { hidden: 512, gated: true }),
        router: Router::softmax(true, 1.0, 1, 1),
        bias: false,
    };
    assert!(spec.layers.iter().all(|l| l.ffn == moe));
}

#[test]
fn qwen3_8b_has_plain_qk_norm_and_no_window() {
    let spec = preset("qwen3-8b");
    assert_eq!(attention(&spec, 0), (32, 8, 128, true, false, false, 1.0 / 128f64.sqrt(), 128));
    assert!(spec.layers.iter().all(|l| l.window.is_none() && !l.norms.unit_offset));
}

/// gpt-oss-120b as its config says: 36 layers alternating sliding (128) and full attention, both
/// with sinks and biases on q, k, v and o; YaRN factor 32 over 4096 positions, β 32 / 1, its
/// correction range not rounded (`truncate: false`), RoPE magnitude 0.1·ln 32 + 1; every layer
/// a MoE of 128 experts of 2880 columns, top 4, biased router and experts, SwiGLU clamped at 7.
#[test]
fn gpt_oss_120b_matches_its_config() {
    let spec = preset("gpt-oss-120b");
    assert_eq!((spec.n_layers(), spec.d_model, spec.vocab, spec.max_ctx), (36, 2880, 201088, 131072));
    assert_eq!(spec.family, Family::GptOss);
    for (i, layer) in spec.layers.iter().enumerate() {
        assert_eq!(layer.window, (i % 2 == 0).then_some(128), "layer {i}");
        let Mixer::Attention { heads, kv_heads, head_dim, qkv_bias, o_bias, sinks, scale, rotary_dim, .. } =
            layer.mixer
        else {
            panic!("layer {i} is attention")
        };
        assert_eq!((heads, kv_heads, head_dim, rotary_dim), (64, 8, 64, 64));
        assert!(qkv_bias && o_bias && sinks && (scale - 0.125).abs() < 1e-15);
        let moe = Ffn::Moe {
            experts: 128,
            top_k: 4,
            expert_hidden: 2880,
            act: Act::SwigluOai { limit: 7.0 },
            shared: None,
            router: Router::softmax(true, 1.0, 1, 1),
            bias: true,
        };
        assert_eq!(layer.ffn, moe, "layer {i}");
        assert_eq!(layer.norms.eps, 1e-5);
    }
    let yarn = RopeScaling::Yarn {
        factor: 32.0,
        original_max: 4096,
        beta_fast: 32.0,
        beta_slow: 1.0,
        mscale: 1.0,
        mscale_all_dim: 0.0,
        truncate: false,
    };
    assert_eq!(spec.rotations.len(), 1);
    assert_eq!(
        (spec.rotations[0].base, spec.rotations[0].style, &spec.rotations[0].scaling),
        (150000.0, RopeStyle::Neox, &yarn)
    );
    assert_eq!((spec.bos, spec.eos.as_slice(), spec.head.tied), (None, &[200002][..], false));
    // The 20b: 24 layers of 32 experts, otherwise the same.
    let small = preset("gpt-oss-20b");
    assert_eq!(small.n_layers(), 24);
    assert!(matches!(small.layers[0].ffn, Ffn::Moe { experts: 32, top_k: 4, expert_hidden: 2880, bias: true, .. }));
}

/// gpt-oss's defaults are `GptOssConfig`'s: every field but the shape left out, the layers slide
/// on even indices with a window of 128 and the RoPE is YaRN with `truncate: false`.
#[test]
fn gpt_oss_defaults_are_its_config_classes() {
    let minimal = r#"{"model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 16,
      "vocab_size": 256, "intermediate_size": 64, "num_local_experts": 8, "num_experts_per_tok": 2}"#;
    let spec = from_config_json(minimal, "minimal").expect("imports");
    let windows: Vec<Option<usize>> = spec.layers.iter().map(|l| l.window).collect();
    assert_eq!(windows, [Some(128), None, Some(128), None]);
    assert!(matches!(
        spec.layers[0].mixer,
        Mixer::Attention { head_dim: 64, kv_heads: 8, qkv_bias: true, o_bias: true, sinks: true, .. }
    ));
    assert!(matches!(spec.layers[0].ffn, Ffn::Moe { act: Act::SwigluOai { limit: 7.0 }, .. }));
    assert!(matches!(
        spec.rotations[0].scaling,
        RopeScaling::Yarn { factor: 32.0, original_max: 4096, truncate: false, .. }
    ));
    assert_eq!((spec.rotations[0].base, spec.max_ctx, spec.layers[0].norms.eps), (150000.0, 131072, 1e-5));
    let plain = minimal.replace(
        "\"num_experts_per_tok\": 2",
        "\"num_experts_per_tok\": 2, \"attention_bias\": false, \"sliding_window\": null",
    );
    let spec = from_config_json(&plain, "plain").expect("imports");
    assert!(spec.layers.iter().all(|l| l.window.is_none()));
    assert!(matches!(spec.layers[0].mixer, Mixer::Attention { qkv_bias: false, o_bias: false, sinks: true, .. }));
}

/// Mistral slides on every layer: by its `sliding_window` (4096 in Mistral-7B), by
/// `MistralConfig`'s default 4096 when the field is absent, and not at all when it is `null`.
/// Mixtral: every layer a top-2 MoE of 8 experts of `intermediate_size`, renormalised, no window.
#[test]
fn mistral_slides_and_mixtral_routes_as_configured() {
    let spec = preset("mistral-7b");
    assert!(spec.layers.iter().all(|l| l.window == Some(4096) && matches!(l.ffn, Ffn::Dense { hidden: 14336, .. })));
    assert_eq!(attention(&spec, 0), (32, 8, 128, false, false, false, 1.0 / 128f64.sqrt(), 128));
    let absent = edited("mistral-7b", |v| {
        v.as_object_mut().unwrap().remove("sliding_window");
    })
    .expect("imports");
    assert!(absent.layers.iter().all(|l| l.window == Some(4096)));
    let null = edited("mistral-7b", |v| v["sliding_window"] = Value::Null).expect("imports");
    assert!(null.layers.iter().all(|l| l.window.is_none()));
    let narrow = edited("tiny-mistral", |v| v["sliding_window"] = json!(8)).expect("imports");
    assert!(narrow.layers.iter().all(|l| l.window == Some(8)));

    let spec = preset("mixtral-8x7b");
    let moe = Ffn::Moe {
        experts: 8,
        top_k: 2,
        expert_hidden: 14336,
        act: Act::Silu,
        shared: None,
        router: Router::softmax(true, 1.0, 1, 1),
        bias: false,
    };
    assert!(spec.layers.iter().all(|l| l.ffn == moe && l.window.is_none()));
    assert_eq!((spec.rotations[0].base, spec.layers[0].norms.eps, spec.bos), (1e6, 1e-5, Some(1)));
    let windowed = edited("mixtral-8x7b", |v| v["sliding_window"] = json!(4096)).expect("imports");
    assert!(windowed.layers.iter().all(|l| l.window == Some(4096)));
}

#[test]
fn mlp_only_layers_and_sparse_step_pick_dense_layers() {
    let moe_layers = |spec: &ModelSpec| -> Vec<usize> {
        (0..spec.n_layers()).filter(|&i| matches!(spec.layers[i].ffn, Ffn::Moe { .. })).collect()
    };
    assert_eq!(moe_layers(&preset("tiny-qwen3-moe")), [1, 2, 3]);
    assert!(matches!(preset("tiny-qwen3-moe").layers[0].ffn, Ffn::Dense { hidden: 128, .. }));
    let step = edited("tiny-qwen3-moe", |v| {
        v["decoder_sparse_step"] = json!(2);
        v["mlp_only_layers"] = json!([]);
    })
    .expect("step 2");
    assert_eq!(moe_layers(&step), [1, 3]);
    let both = edited("tiny-qwen3-next", |v| {
        v["decoder_sparse_step"] = json!(2);
        v["mlp_only_layers"] = json!([3]);
    })
    .expect("step 2 and mlp_only_layers");
    assert_eq!(moe_layers(&both), [1]);
    let no_experts = edited("tiny-qwen3-moe", |v| v["num_experts"] = json!(0)).expect("no experts");
    assert!(moe_layers(&no_experts).is_empty());
}

#[test]
fn explicit_layer_types_win_over_the_interval() {
    let spec = edited("tiny-qwen3-next", |v| {
        v["layer_types"] = json!(["full_attention", "linear_attention", "linear_attention", "full_attention"]);
    })
    .expect("explicit layer_types");
    let labels: Vec<_> = spec.layers.iter().map(|l| l.mixer.label()).collect();
    assert_eq!(labels, ["gated_attention", "deltanet", "deltanet", "gated_attention"]);
    let default = preset("tiny-qwen3-next");
    let labels: Vec<_> = default.layers.iter().map(|l| l.mixer.label()).collect();
    assert_eq!(labels, ["deltanet", "gated_attention", "deltanet", "gated_attention"]);
    let gemma = edited("tiny-gemma3", |v| {
        v["layer_types"] = json!([
            "full_attention",
            "sliding_attention",
            "sliding_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention"
        ]);
    })
    .expect("gemma layer_types");
    let windows: Vec<_> = gemma.layers.iter().map(|l| l.window).collect();
    assert_eq!(windows, [None, Some(16), Some(16), Some(16), None, Some(16)]);
    assert_eq!(gemma.rotations[0].scaling, RopeScaling::Linear { factor: 8.0 }, "full layer 0 comes first");
}

#[test]
fn qwen_sliding_layers_start_at_max_window_layers() {
    let windows = |name: &str| -> Vec<Option<usize>> { preset(name).layers.iter().map(|l| l.window).collect() };
    assert_eq!(windows("tiny-qwen2"), [None, None, Some(32), Some(32)]);
    assert_eq!(windows("tiny-qwen3"), [None, None, None, Some(32)]);
    let off = edited("tiny-qwen2", |v| v["use_sliding_window"] = json!(false)).expect("no sliding");
    assert!(off.layers.iter().all(|l| l.window.is_none()));
    assert!(matches!(preset("tiny-qwen2").layers[0].mixer, Mixer::Attention { qkv_bias: true, qk_norm: false, .. }));
}

#[test]
fn hub_and_v5_rope_spellings_agree() {
    let legacy = edited("tiny-deepseek-v2", |_| {}).expect("type");
    let renamed = edited("tiny-deepseek-v2", |v| {
        let scaling = v["rope_scaling"].as_object_mut().expect("object");
        let kind = scaling.remove("type").expect("type key");
        scaling.insert("rope_type".into(), kind);
    })
    .expect("rope_type");
    let v5 = edited("tiny-deepseek-v2", |v| {
        let mut params = v["rope_scaling"].take();
        params["rope_theta"] = v["rope_theta"].take();
        v["rope_parameters"] = params;
        let obj = v.as_object_mut().expect("object");
        obj.remove("rope_scaling");
        obj.remove("rope_theta");
    })
    .expect("rope_parameters");
    assert_eq!(legacy, renamed);
    assert_eq!(legacy, v5);
    let gemma_v5 = edited("tiny-gemma3", |v| {
        v["rope_parameters"] = json!({
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}
        });
        let obj = v.as_object_mut().expect("object");
        for key in ["rope_scaling", "rope_theta", "rope_local_base_freq"] {
            obj.remove(key);
        }
    })
    .expect("gemma rope_parameters");
    assert_eq!(gemma_v5, preset("tiny-gemma3"));
}

#[test]
fn gemma3_wrapper_takes_text_config_defaults() {
    let spec = from_config_json(r#"{"model_type": "gemma3", "text_config": {"hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 8, "intermediate_size": 128}}"#, "g").expect("defaults");
    assert_eq!((spec.vocab, spec.max_ctx, spec.bos, spec.eos.as_slice()), (262208, 131072, Some(2), &[1][..]));
    assert_eq!(attention(&spec, 0), (8, 4, 256, true, false, false, 1.0 / 16.0, 256));
    assert_eq!(spec.layers[0].window, Some(4096));
    assert_eq!(spec.layers.iter().filter(|l| l.window.is_none()).count(), 1);
}

/// What is wrong, the import of a config so broken, and the field its error must name.
type FieldCase = (&'static str, rdu_compiler::error::Result<ModelSpec>, &'static str);

/// Bad fields every decoder reads: sizes, heads, RoPE, types.
fn decoder_field_cases() -> Vec<FieldCase> {
    vec![
        ("unknown model_type", edited("tiny-llama", |v| v["model_type"] = json!("mamba")), "model_type"),
        ("missing model_type", edited("tiny-llama", |v| v["model_type"] = Value::Null), "model_type"),
        (
            "missing hidden_size",
            edited("tiny-llama", |v| {
                v.as_object_mut().unwrap().remove("hidden_size");
            }),
            "hidden_size",
        ),
        (
            "heads not dividing hidden",
            edited("tiny-llama", |v| {
                v.as_object_mut().unwrap().remove("head_dim");
                v["num_attention_heads"] = json!(5);
                v["num_key_value_heads"] = json!(5);
            }),
            "num_attention_heads",
        ),
        (
            "kv heads not dividing heads",
            edited("tiny-qwen3", |v| v["num_key_value_heads"] = json!(3)),
            "num_key_value_heads",
        ),
        (
            "unknown rope type",
            edited("tiny-llama", |v| v["rope_scaling"]["rope_type"] = json!("dynamic")),
            "rope_scaling.rope_type",
        ),
        (
            "unknown legacy rope type",
            edited("tiny-deepseek-v2", |v| v["rope_scaling"]["type"] = json!("longrope")),
            "rope_scaling.type",
        ),
        (
            "llama3 without low_freq_factor",
            edited("tiny-llama", |v| {
                v["rope_scaling"].as_object_mut().unwrap().remove("low_freq_factor");
            }),
            "rope_scaling.low_freq_factor",
        ),
        ("wrong type", edited("tiny-llama", |v| v["num_hidden_layers"] = json!("four")), "num_hidden_layers"),
        (
            "wrong nested type",
            edited("tiny-llama", |v| v["rope_scaling"]["factor"] = json!("eight")),
            "rope_scaling.factor",
        ),
        (
            "wrong list element",
            edited("tiny-qwen3-moe", |v| v["mlp_only_layers"] = json!([0, "one"])),
            "mlp_only_layers[1]",
        ),
    ]
}

/// Bad fields of the families' own parts (experts, hybrid layers, Gemma, DeepSeek, Qwen3.5)
/// and of the file as a whole.
fn family_field_cases() -> Vec<FieldCase> {
    vec![
        (
            "top_k above experts",
            edited("tiny-qwen3-moe", |v| v["num_experts_per_tok"] = json!(9)),
            "num_experts_per_tok",
        ),
        (
            "deepseek top_k above experts",
            edited("tiny-deepseek-v2", |v| v["num_experts_per_tok"] = json!(9)),
            "num_experts_per_tok",
        ),
        (
            "missing experts",
            edited("tiny-qwen3-next", |v| {
                v.as_object_mut().unwrap().remove("num_experts");
            }),
            "num_experts",
        ),
        (
            "layer_types length",
            edited("tiny-qwen3-next", |v| v["layer_types"] = json!(["full_attention"])),
            "layer_types",
        ),
        (
            "unknown layer type",
            edited("tiny-gemma3", |v| {
                v["layer_types"] = json!([
                    "sliding_attention",
                    "linear_attention",
                    "full_attention",
                    "sliding_attention",
                    "sliding_attention",
                    "full_attention"
                ])
            }),
            "layer_types[1]",
        ),
        (
            "zero interval",
            edited("tiny-qwen3-next", |v| v["full_attention_interval"] = json!(0)),
            "full_attention_interval",
        ),
        ("zero pattern", edited("tiny-gemma3", |v| v["sliding_window_pattern"] = json!(0)), "sliding_window_pattern"),
        (
            "value heads",
            edited("tiny-qwen3-next", |v| v["linear_num_value_heads"] = json!(3)),
            "linear_num_value_heads",
        ),
        (
            "odd rotary dim",
            edited("tiny-qwen3-next", |v| v["partial_rotary_factor"] = json!(0.1)),
            "partial_rotary_factor",
        ),
        ("groups", edited("tiny-deepseek-v2", |v| v["n_group"] = json!(3)), "n_group"),
        ("topk groups", edited("tiny-deepseek-v2", |v| v["topk_group"] = json!(5)), "topk_group"),
        ("topk method", edited("tiny-deepseek-v2", |v| v["topk_method"] = json!("noaux_tc")), "topk_method"),
        ("activation", edited("tiny-gemma3", |v| v["hidden_activation"] = json!("relu")), "hidden_activation"),
        (
            "softcapping",
            edited("tiny-gemma3", |v| v["final_logit_softcapping"] = json!(30.0)),
            "final_logit_softcapping",
        ),
        ("o_proj bias", edited("tiny-llama", |v| v["attention_bias"] = json!(true)), "attention_bias"),
        (
            "missing text_config",
            edited("tiny-qwen3.5", |v| {
                v.as_object_mut().unwrap().remove("text_config");
            }),
            "text_config",
        ),
        (
            "text_config field",
            edited("tiny-qwen3.5", |v| {
                v["text_config"].as_object_mut().unwrap().remove("hidden_size");
            }),
            "text_config.hidden_size",
        ),
        (
            "tie disagreement",
            edited("tiny-qwen3.5", |v| v["tie_word_embeddings"] = json!(true)),
            "text_config.tie_word_embeddings",
        ),
        ("eos type", edited("tiny-llama", |v| v["eos_token_id"] = json!("</s>")), "eos_token_id"),
        ("not an object", from_config_json("[1, 2]", "array"), "$"),
        ("malformed JSON", from_config_json("{\"model_type\": \"llama\",", "broken"), "$"),
    ]
}

#[test]
fn errors_name_the_field() {
    let cases = decoder_field_cases().into_iter().chain(family_field_cases());
    for (what, result, field) in cases {
        let (got, message) = config_error(result);
        assert_eq!(got, field, "{what}: {message}");
        assert!(!message.is_empty() && !message.ends_with('.'), "{what}: {message}");
    }
}

/// gpt-oss, Mistral and Mixtral configs: every refusal names its field.
#[test]
fn gpt_oss_mistral_and_mixtral_errors_name_the_field() {
    let cases: Vec<(&str, rdu_compiler::error::Result<ModelSpec>, &str)> = vec![
        ("gpt-oss alpha", edited("tiny-gpt-oss", |v| v["swiglu_alpha"] = json!(1.5)), "swiglu_alpha"),
        ("gpt-oss limit", edited("tiny-gpt-oss", |v| v["swiglu_limit"] = json!(0.0)), "swiglu_limit"),
        (
            "gpt-oss top-k names disagree",
            edited("tiny-gpt-oss", |v| v["experts_per_token"] = json!(2)),
            "experts_per_token",
        ),
        (
            "gpt-oss without experts",
            edited("tiny-gpt-oss", |v| {
                v.as_object_mut().unwrap().remove("num_local_experts");
            }),
            "num_local_experts",
        ),
        (
            "gpt-oss top-k past the experts",
            edited("tiny-gpt-oss", |v| v["num_experts_per_tok"] = json!(9)),
            "num_experts_per_tok",
        ),
        ("gpt-oss window 0", edited("tiny-gpt-oss", |v| v["sliding_window"] = json!(0)), "sliding_window"),
        (
            "gpt-oss layer type",
            edited("tiny-gpt-oss", |v| v["layer_types"][1] = json!("linear_attention")),
            "layer_types[1]",
        ),
        ("gpt-oss layer count", edited("tiny-gpt-oss", |v| v["num_hidden_layers"] = json!(3)), "layer_types"),
        (
            "gpt-oss yarn truncate",
            edited("tiny-gpt-oss", |v| v["rope_scaling"]["truncate"] = json!("no")),
            "rope_scaling.truncate",
        ),
        ("mistral window 0", edited("tiny-mistral", |v| v["sliding_window"] = json!(0)), "sliding_window"),
        (
            "mixtral without top-k",
            edited("tiny-mixtral", |v| {
                v.as_object_mut().unwrap().remove("num_experts_per_tok");
            }),
            "num_experts_per_tok",
        ),
        (
            "mixtral without expert size",
            edited("tiny-mixtral", |v| {
                v.as_object_mut().unwrap().remove("intermediate_size");
            }),
            "intermediate_size",
        ),
    ];
    for (what, result, field) in cases {
        let (got, message) = config_error(result);
        assert_eq!(got, field, "{what}: {message}");
        assert!(!message.is_empty() && !message.ends_with('.'), "{what}: {message}");
    }
}

#[test]
fn error_messages_say_what_is_wrong() {
    let (_, message) = config_error(edited("tiny-llama", |v| v["model_type"] = json!("mamba")));
    assert!(message.contains("`mamba`") && config::MODEL_TYPES.iter().all(|t| message.contains(t)), "{message}");
    let (_, message) = config_error(edited("tiny-llama", |v| v["rope_scaling"]["rope_type"] = json!("dynamic")));
    assert!(message.contains("`dynamic`"), "{message}");
    let (_, message) = config_error(edited("tiny-llama", |v| v["num_hidden_layers"] = json!("four")));
    assert!(message.contains("invalid type"), "{message}");
    let (_, message) = config_error(from_config_json("{\"model_type\": ", "broken"));
    assert!(message.contains("line 1"), "{message}");
    let display = edited("tiny-llama", |v| {
        v.as_object_mut().unwrap().remove("hidden_size");
    })
    .unwrap_err()
    .to_string();
    assert_eq!(display, "tiny-llama: field `hidden_size`: required field is missing; add it to the config");
}

/// Every top-level and `text_config` field of every preset, replaced by values of every
/// JSON type: the import either succeeds or fails with a config error naming a field.
#[test]
fn no_field_value_makes_import_panic() {
    let replacements = [
        Value::Null,
        json!(0),
        json!(-1),
        json!(1.5),
        json!(1e300),
        json!(u64::MAX),
        json!("x"),
        json!(true),
        json!([]),
        json!([0, 1]),
        json!({}),
        json!({"rope_type": "yarn", "factor": 0.5}),
    ];
    let mut failures = 0;
    for name in presets::names() {
        let text = presets::config_text(name).expect("preset");
        let original: Value = serde_json::from_str(text).expect("JSON");
        let paths: Vec<Vec<String>> = original
            .as_object()
            .into_iter()
            .flat_map(|o| o.keys().map(|k| vec![k.clone()]))
            .chain(
                original
                    .get("text_config")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flat_map(|o| o.keys().map(|k| vec!["text_config".to_string(), k.clone()])),
            )
            .collect();
        for path in &paths {
            for replacement in &replacements {
                let mut value = original.clone();
                let slot = path.iter().fold(&mut value, |v, key| &mut v[key.as_str()]);
                *slot = replacement.clone();
                match from_config_json(&value.to_string(), name) {
                    Ok(spec) => assert!(spec.n_layers() > 0),
                    Err(Error::Config { field, .. }) => {
                        assert!(!field.is_empty(), "{name} {path:?}");
                        failures += 1;
                    }
                    Err(other) => panic!("{name} {path:?} = {replacement}: {other}"),
                }
            }
        }
    }
    assert!(failures > 1000, "only {failures} rejections");
}

#[test]
fn resolve_takes_names_files_and_directories() {
    assert_eq!(preset("tiny-qwen3").name, "tiny-qwen3");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fixtures/hf/llama");
    let by_dir = presets::resolve(dir.to_str().expect("utf-8")).expect("directory");
    assert_eq!(by_dir.name, "llama");
    let file = dir.join("config.hub_style.json");
    assert!(presets::resolve(file.to_str().expect("utf-8")).is_ok());
    match presets::resolve("no-such-model") {
        Err(Error::UnknownModel(name)) => assert_eq!(name, "no-such-model"),
        other => panic!("expected UnknownModel, got {other:?}"),
    }
    let missing = from_config_path(&dir.join("absent.json"));
    assert!(matches!(missing, Err(Error::Io { .. })));
}

/// A multimodal wrapper's `text_config` saved on its own, as transformers 5 saves a
/// `*ForCausalLM` (`qwen3_5_text`, `qwen3_5_moe_text`, `gemma3_text`), imports to the
/// wrapper's spec: every wrapper preset, and the gemma3 HF fixture wrapped and unwrapped.
#[test]
fn text_only_configs_import_like_their_wrappers() {
    let dir = rdu_testkit::fixtures::repo().join("crates/rdu-compiler/presets");
    let mut files: Vec<PathBuf> = Vec::new();
    for d in [dir.clone(), dir.join("tiny")] {
        for entry in std::fs::read_dir(&d).expect("presets") {
            files.push(entry.expect("entry").path());
        }
    }
    files.sort();
    let mut checked = Vec::new();
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "json")) {
        let text = std::fs::read_to_string(file).expect("preset");
        let wrapper: Value = serde_json::from_str(&text).expect("JSON");
        let Some(inner) = wrapper.get("text_config") else { continue };
        let mut only = inner.clone();
        let model_type = only["model_type"].as_str().expect("text_config.model_type").to_string();
        if only.get("tie_word_embeddings").is_none() {
            only["tie_word_embeddings"] = wrapper["tie_word_embeddings"].clone();
        }
        let whole = from_config_json(&text, "m").expect("the wrapper imports");
        let alone = from_config_json(&only.to_string(), "m").unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        same_model(&whole, &alone, &format!("{}: {model_type}", file.display()));
        checked.push(model_type);
    }
    for t in ["qwen3_5_text", "qwen3_5_moe_text"] {
        assert!(checked.iter().any(|c| c == t), "no preset exercised {t}: {checked:?}");
    }
    // The gemma3 HF fixture is text-only; wrapped as `gemma3`, it is the same model.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fixtures/hf/gemma3_text/config.json");
    let text: Value = serde_json::from_str(&std::fs::read_to_string(&fixture).expect("fixture")).expect("JSON");
    let wrapped =
        json!({"model_type": "gemma3", "text_config": text, "tie_word_embeddings": text["tie_word_embeddings"]});
    let alone = from_config_json(&text.to_string(), "m").expect("gemma3_text imports");
    same_model(&from_config_json(&wrapped.to_string(), "m").expect("the wrapper imports"), &alone, "gemma3 fixture");
}

/// The same language model; a causal LM's weights live under `model.` (the wrapper's under
/// its language model), and a wrapper may add end-of-sequence ids of its own.
fn same_model(whole: &ModelSpec, alone: &ModelSpec, what: &str) {
    assert_eq!(
        (whole.family, whole.vocab, whole.d_model, whole.max_ctx),
        (alone.family, alone.vocab, alone.d_model, alone.max_ctx),
        "{what}"
    );
    assert!(whole.layers == alone.layers, "{what}: the layers differ");
    assert!(whole.rotations == alone.rotations, "{what}: the rotations differ");
    assert!(whole.embed == alone.embed && whole.head == alone.head, "{what}: the embedding or head differ");
    assert_eq!(prefix(alone), "model.", "{what}: a causal LM's weights live under `model.`");
}

/// Every preset config as transformers 5.24 saves it (`config_class.from_dict(preset)
/// .save_pretrained`, `tests/data/fixtures/tools/save_configs_v5.py`) imports to the preset's
/// spec: `rope_parameters` for `rope_theta`/`rope_scaling`, `layer_types` for
/// `full_attention_interval`, and Qwen3-MoE's `num_local_experts` for `num_experts`.
#[test]
fn configs_saved_by_transformers_5_import_as_their_presets() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fixtures/configs_v5");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&root).expect("configs_v5") {
        let path = entry.expect("dir entry").path();
        let name = path.file_stem().and_then(|n| n.to_str()).expect("utf-8 name").to_string();
        let text = std::fs::read_to_string(&path).expect("read");
        let saved = from_config_json(&text, &name).unwrap_or_else(|e| panic!("{name} as transformers 5 saves it: {e}"));
        assert_eq!(saved, preset(&name), "{name}: the saved config differs from the hub config");
        seen.push((name, serde_json::from_str::<Value>(&text).expect("JSON")));
    }
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let qwen3_moe = &seen.iter().find(|(n, _)| n == "tiny-qwen3-moe").expect("tiny-qwen3-moe saved").1;
    assert!(qwen3_moe.get("num_local_experts").is_some() && qwen3_moe.get("num_experts").is_none());
    let families: std::collections::BTreeSet<String> =
        seen.iter().map(|(_, v)| v["model_type"].as_str().expect("model_type").to_string()).collect();
    let every =
        ["llama", "qwen2", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "gemma3", "gemma3_text"];
    for family in every.into_iter().chain(["deepseek_v2", "gpt_oss", "mistral", "mixtral"]) {
        assert!(families.contains(family), "no saved config of {family}: {families:?}");
    }
}

/// `quantization_config`: DeepSeek-V3's FP8 (e4m3, 128 × 128 blocks) and gpt-oss's MXFP4
/// (with `modules_to_not_convert`) read; anything rdu does not read refused naming the field.
#[test]
fn quantization_configs_are_read_or_refused_naming_the_field() {
    use rdu_compiler::model::spec::Declared;
    let v3 =
        json!({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]});
    let spec = edited("tiny-deepseek-v2", |v| v["quantization_config"] = v3.clone()).unwrap();
    let q = spec.quantization.expect("declared");
    assert_eq!((q.format, q.not_converted.len()), (Declared::Fp8Block { rows: 128, cols: 128 }, 0));
    let oss = json!({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]});
    let spec = edited("tiny-qwen3-moe", |v| v["quantization_config"] = oss.clone()).unwrap();
    assert_eq!(spec.quantization.unwrap().format, Declared::Mxfp4);
    assert!(preset("tiny-llama").quantization.is_none());
    let refused = |q: Value| config_error(edited("tiny-llama", |v| v["quantization_config"] = q));
    let (field, message) = refused(json!({"quant_method": "awq"}));
    assert_eq!(field, "quantization_config.quant_method");
    assert!(message.contains("`awq` is not read"), "{message}");
    let (field, message) = refused(json!({"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]}));
    assert_eq!((field.as_str(), message.contains("e4m3 only")), ("quantization_config.fmt", true), "{message}");
    let (field, _) = refused(json!({"quant_method": "fp8"}));
    assert_eq!(field, "quantization_config.weight_block_size");
    let (field, message) = refused(json!({"quant_method": "fp8", "weight_block_size": [128, 0]}));
    assert_eq!((field.as_str(), message.contains("positive")), ("quantization_config.weight_block_size", true));
}

/// compressed-tensors' `float-quantized` FP8 (GLM-4.5-FP8's layout): the `channel`, `block` and
/// `tensor` strategies read with `ignore` and `targets`; every other shape of config — integer
/// or 4-bit weights, group strategies, packed formats, static activation scales, a quantised KV
/// cache, an `re:` expression rdu cannot compile — refused in one line naming the field.
#[test]
fn compressed_tensors_configs_are_read_or_refused_naming_the_field() {
    use rdu_compiler::model::spec::Declared;
    let glm = preset("glm-4.5-fp8").quantization.expect("declared");
    assert_eq!((glm.format, glm.ignore.len(), glm.targets.len()), (Declared::Fp8Channel, 2, 0));
    assert!(glm.leaves("model.layers.7.mlp.gate") && glm.leaves("lm_head"));
    assert!(!glm.leaves("model.layers.7.mlp.gate_proj") && !glm.leaves("model.layers.7.mlp.experts.3.gate_proj"));
    let ct = |weights: Value, inputs: Value| {
        json!({"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
               "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": inputs}}})
    };
    let w = |strategy: &str| json!({"num_bits": 8, "type": "float", "symmetric": true, "dynamic": false, "strategy": strategy});
    let dynamic = json!({"num_bits": 8, "type": "float", "dynamic": true, "strategy": "token"});
    let read =
        |q: Value| edited("tiny-glm4-moe", |v| v["quantization_config"] = q).expect("read").quantization.expect("q");
    assert_eq!(read(ct(w("tensor"), Value::Null)).format, Declared::Fp8Tensor, "weights only (W8A16)");
    let mut block = w("block");
    block["block_structure"] = json!([128, 64]);
    assert_eq!(read(ct(block, dynamic.clone())).format, Declared::Fp8Block { rows: 128, cols: 64 });
    let mut only = ct(w("channel"), dynamic.clone());
    only["config_groups"]["group_0"]["targets"] = json!(["re:.*experts.*"]);
    let q = read(only);
    assert!(q.leaves("model.layers.1.self_attn.q_proj") && !q.leaves("model.layers.1.mlp.experts.0.up_proj"));
    let refused = |q: Value| config_error(edited("tiny-glm4-moe", |v| v["quantization_config"] = q));
    let at = "quantization_config.config_groups.group_0";
    let mut int = w("channel");
    int["type"] = json!("int");
    let mut four = w("channel");
    four["num_bits"] = json!(4);
    let mut statik = dynamic.clone();
    statik["dynamic"] = json!(false);
    let mut packed = ct(w("channel"), dynamic.clone());
    packed["format"] = json!("pack-quantized");
    let mut nvfp4 = ct(w("tensor_group"), dynamic.clone());
    nvfp4["format"] = json!("nvfp4-pack-quantized");
    let mut kv = ct(w("channel"), dynamic.clone());
    kv["kv_cache_scheme"] = json!({"num_bits": 8, "type": "float"});
    let mut regex = ct(w("channel"), dynamic.clone());
    regex["ignore"] = json!(["re:.*(?=gate)"]);
    for (config, field, words) in [
        (ct(int, dynamic.clone()), format!("{at}.weights.type"), "`int`: rdu reads `float`"),
        (ct(four, dynamic.clone()), format!("{at}.weights.num_bits"), "4: rdu reads 8-bit floats"),
        (ct(w("group"), dynamic.clone()), format!("{at}.weights.strategy"), "`group` is not read"),
        (ct(w("block"), dynamic.clone()), format!("{at}.weights.block_structure"), "required field is missing"),
        (ct(w("channel"), statik), format!("{at}.input_activations.dynamic"), "static activation scales"),
        (packed, "quantization_config.format".into(), "`pack-quantized` is not read"),
        (nvfp4, "quantization_config.format".into(), "`nvfp4-pack-quantized` is not read"),
        (kv, "quantization_config.kv_cache_scheme".into(), "a quantised KV cache"),
        (regex, "quantization_config.ignore".into(), "`re:.*(?=gate)` is not a regular expression rdu reads"),
    ] {
        let (got, message) = refused(config);
        assert_eq!(got, field, "{message}");
        assert!(message.contains(words) && !message.contains('\n'), "{field}: {message}");
    }
}

/// compressed-tensors' FP8 storage follows each weight's shape: one scale per output row is a
/// `[1, in]` block of every matrix (the experts' stacks too), one per tensor the matrix; the
/// routers and what `ignore` names stay dense.
#[test]
fn compressed_tensors_storage_follows_each_weights_shape() {
    use rdu_compiler::model::quantization::declared_storage;
    use rdu_compiler::model::storage::{Format, Storage};
    let Some(Storage::Exactly(stored)) = declared_storage(&preset("glm-4.5-fp8")) else { panic!("declared") };
    for (name, rows, cols) in
        [("Wq0", 1, 5120), ("Wo0", 1, 12288), ("Wd0", 1, 12288), ("Wed3", 1, 1536), ("Weg3", 1, 5120)]
    {
        assert_eq!(stored.get(name), Some(&Format::Fp8 { rows, cols }), "{name}");
    }
    assert!(!stored.contains_key("Wr3") && !stored.contains_key("Wout") && !stored.contains_key("E"));
    let spec = edited("glm-4.5-fp8", |v| {
        v["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = json!("tensor")
    });
    let Some(Storage::Exactly(stored)) = declared_storage(&spec.expect("tensor")) else { panic!("declared") };
    assert_eq!(
        (stored["Wq0"], stored["Wed3"]),
        (Format::Fp8 { rows: 12288, cols: 5120 }, Format::Fp8 { rows: 5120, cols: 1536 })
    );
}

/// The storage a config declares: every layer projection in its format but the router and the
/// modules it leaves unconverted; never the embedding or the head.
#[test]
fn declared_storage_follows_the_config() {
    use rdu_compiler::model::quantization::declared_storage;
    use rdu_compiler::model::storage::{Format, Storage};
    let oss = json!({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]});
    let spec = edited("tiny-qwen3-moe", |v| v["quantization_config"] = oss).unwrap();
    let Some(Storage::Exactly(stored)) = declared_storage(&spec) else { panic!("declared") };
    let bases: std::collections::BTreeSet<String> =
        stored.keys().map(|n| n.trim_end_matches(|c: char| c.is_ascii_digit()).to_string()).collect();
    assert!(stored.values().all(|f| *f == Format::Mxfp4));
    assert!(
        !bases.contains("Wr") && !bases.contains("Wq") && !bases.contains("E") && !bases.contains("Wout"),
        "{bases:?}"
    );
    assert!(bases.contains("Weg") && bases.contains("Wed"), "{bases:?}");
    assert!(declared_storage(&preset("tiny-llama")).is_none());
}
