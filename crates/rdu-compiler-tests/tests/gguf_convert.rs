//! GGUF import of `deepseek2`, `qwen3next` and `qwen35moe`, without llama.cpp-made fixtures:
//! the transformers fixtures in `tests/data/fixtures/hf/` are converted the way llama.cpp's
//! `convert_hf_to_gguf.py` converts them (`rdu_testkit::hf_to_gguf`), imported, and run through
//! the reference runner — forward and token-by-token decode within 1e-4 of transformers'
//! logits for the F32 files; a Q8_0 file (storage as stored) within 1e-4 of the F32 file
//! holding its dequantised values. The imported spec must be the config.json spec up to the
//! dialect (GGUF norms hold w+1; llama.cpp's DeltaNet layouts).

use rdu_checkpoint::GgufValue;
use rdu_compiler::deploy::Storage;
use rdu_compiler::error::Error;
use rdu_compiler::model::config::from_config_path;
use rdu_compiler::model::gguf::from_gguf_path;
use rdu_compiler::model::naming::{checkpoint_source, TensorSource};
use rdu_compiler::model::spec::{Dialect, Family, GdnLayout, Mixer, ModelSpec};
use rdu_compiler::reference::{GgufWeights, Reference};
use rdu_testkit::hf_to_gguf::{convert, convert_edited, convert_with, Kvs, Quant, Target};
use rdu_testkit::{fixtures, npy, Tolerance};
use std::path::{Path, PathBuf};

/// Converts fixture `arch` to `target` in `dir`; returns the file.
fn gguf(dir: &Path, arch: &str, target: Target, quant: Quant) -> PathBuf {
    let out = dir.join(format!("{arch}-{target:?}-{quant:?}.gguf").to_lowercase());
    convert(&fixtures::hf(arch), target, quant, &out);
    out
}

/// The config.json spec as the GGUF dialect states it: norms hold w+1 (so no offset), and
/// DeltaNet layers use llama.cpp's layout.
fn as_gguf(mut spec: ModelSpec, name: &str, layout: GdnLayout) -> ModelSpec {
    spec.name = name.to_string();
    spec.dialect = Dialect::Gguf;
    spec.head.norm_unit_offset = false;
    for layer in &mut spec.layers {
        layer.norms.unit_offset = false;
        if let Mixer::GatedDeltaNet { layout: l, .. } = &mut layer.mixer {
            *l = layout;
        }
    }
    spec
}

/// Imports the F32 conversion of `arch`, checks its spec against config.json's, and runs
/// forward and decode through the reference runner against transformers.
fn check(arch: &str, target: Target, layout: GdnLayout) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = gguf(tmp.path(), arch, target, Quant::F32);
    let spec = f32_states(from_gguf_path(&path).unwrap_or_else(|e| panic!("{arch}: {e}")));
    let hf = f32_states(from_config_path(&fixtures::hf(arch).join("config.json")).expect("config"));
    let mut want = as_gguf(hf, &spec.name, layout);
    if target == Target::Qwen35Moe {
        // The same model, stored as Qwen3.5-MoE stores it.
        want.family = Family::Qwen35;
    }
    assert_eq!(spec, want, "{arch} as {target:?}: the GGUF spec differs from config.json's");

    let weights = GgufWeights::open(&spec, &path).expect("open");
    assert_eq!(weights.storage(), Storage::Exactly(Default::default()), "an F32 file stores nothing as Q8_0");
    let tokens = npy::ids(fixtures::hf(arch).join("tokens.npy"));
    let vocab = spec.vocab;
    let mut reference = Reference::new(&spec, weights.storage(), &weights);
    let out = reference.forward(&tokens).unwrap_or_else(|e| panic!("{arch}: {e}"));
    let forward = Tolerance::F32.assert(
        &format!("{arch} as {target:?} forward"),
        out.logits.as_f32().expect("f32"),
        &npy::f32(fixtures::hf(arch).join("logits_full.npy")),
    );
    let want_step = npy::f32(fixtures::hf(arch).join("logits_step.npy"));
    let mut decoder = reference.decoder(tokens.len()).expect("decoder");
    let mut decode = 0f32;
    for (pos, &tok) in tokens.iter().enumerate() {
        let row = decoder.step(tok, pos).expect("step").logits.into_f32();
        let want = &want_step[pos * vocab..(pos + 1) * vocab];
        decode = decode.max(Tolerance::F32.assert(&format!("{arch} as {target:?} decode at {pos}"), &row, want));
    }
    eprintln!("{arch} as {target:?} (reference): forward max |diff| {forward:e}, decode {decode:e}");
}

#[test]
fn deepseek_v2_as_deepseek2_matches_transformers() {
    check("deepseek_v2", Target::Deepseek2, GdnLayout::Grouped);
}

#[test]
fn deepseek_v2_without_q_lora_as_deepseek2_matches_transformers() {
    check("deepseek_v2_noqlora", Target::Deepseek2, GdnLayout::Grouped);
}

#[test]
fn qwen3_next_as_qwen3next_matches_transformers() {
    check("qwen3_next", Target::Qwen3Next, GdnLayout::SplitGroupedBa);
}

#[test]
fn qwen3_next_t80_as_qwen3next_matches_transformers() {
    check("qwen3_next_T80", Target::Qwen3Next, GdnLayout::SplitGroupedBa);
}

#[test]
fn qwen3_next_as_qwen35moe_with_tiled_value_heads_matches_transformers() {
    check("qwen3_next", Target::Qwen35Moe, GdnLayout::SplitTiled);
}

/// The Q8_0 file run with storage as stored against the F32 file of its dequantised values.
fn check_q8(arch: &str, target: Target, q8_weights: &[&str]) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let q8_path = gguf(tmp.path(), arch, target, Quant::Q8_0);
    let deq_path = gguf(tmp.path(), arch, target, Quant::Q8_0Dequantized);
    let spec = f32_states(from_gguf_path(&q8_path).expect("import"));
    let q8 = GgufWeights::open(&spec, &q8_path).expect("open");
    let Storage::Exactly(set) = q8.storage() else { panic!("storage as stored") };
    for name in q8_weights {
        assert!(set.contains_key(*name), "{name} is Q8_0 in the file: {set:?}");
    }
    assert!(!set.keys().any(|n| n.starts_with("an") || n.starts_with("Wr")), "norms and routers stay F32: {set:?}");
    let deq_spec = f32_states(from_gguf_path(&deq_path).expect("import"));
    let deq = GgufWeights::open(&deq_spec, &deq_path).expect("open");
    let tokens = npy::ids(fixtures::hf(arch).join("tokens.npy"));
    let got = Reference::new(&spec, q8.storage(), &q8).forward(&tokens).expect("forward").logits;
    let want = Reference::new(&deq_spec, Storage::Dense, &deq).forward(&tokens).expect("forward").logits;
    let worst = Tolerance::F32.assert(
        &format!("{arch} as {target:?} Q8_0"),
        got.as_f32().expect("f32"),
        want.as_f32().expect("f32"),
    );
    eprintln!("{arch} as {target:?} Q8_0 (reference) vs its dequantised values: max |diff| {worst:e}");
}

#[test]
fn deepseek2_q8_0_matches_its_dequantised_values() {
    check_q8("deepseek_v2", Target::Deepseek2, &["E", "Wout", "Wqa0", "Wvb1", "Weg1", "Wed2", "Wsu2", "Wo0"]);
}

#[test]
fn qwen3next_q8_0_matches_its_dequantised_values() {
    check_q8("qwen3_next", Target::Qwen3Next, &["E", "Wqkv0", "Wz1", "Wba2", "Wo0", "Wq3", "Weu3", "Wsd1"]);
}

#[test]
fn qwen35moe_q8_0_matches_its_dequantised_values() {
    check_q8("qwen3_next", Target::Qwen35Moe, &["Wqkv0", "Wz1", "Wb2", "Wa2", "Wo0", "Wed3"]);
}

#[test]
fn checkpoint_names_follow_llama_cpp() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let ds = from_gguf_path(gguf(tmp.path(), "deepseek_v2", Target::Deepseek2, Quant::F32)).expect("import");
    let qn = from_gguf_path(gguf(tmp.path(), "qwen3_next", Target::Qwen3Next, Quant::F32)).expect("import");
    let q35 = from_gguf_path(gguf(tmp.path(), "qwen3_next", Target::Qwen35Moe, Quant::F32)).expect("import");
    let one = |t: &str| Some(TensorSource::Tensor(t.to_string()));
    for (spec, name, tensor) in [
        (&ds, "Wkb1", "blk.1.attn_k_b.weight"),
        (&ds, "Wvb1", "blk.1.attn_v_b.weight"),
        (&ds, "Wkva0", "blk.0.attn_kv_a_mqa.weight"),
        (&ds, "Wd0", "blk.0.ffn_down.weight"),
        (&ds, "Weg2", "blk.2.ffn_gate_exps.weight"),
        (&ds, "Wsd2", "blk.2.ffn_down_shexp.weight"),
        (&qn, "Wqkv0", "blk.0.attn_qkv.weight"),
        (&qn, "Wz0", "blk.0.attn_gate.weight"),
        (&qn, "Wba0", "blk.0.ssm_ba.weight"),
        (&qn, "ssma0", "blk.0.ssm_a"),
        (&qn, "fn3", "blk.3.post_attention_norm.weight"),
        (&qn, "Wsgate3", "blk.3.ffn_gate_inp_shexp.weight"),
        (&q35, "Wb1", "blk.1.ssm_beta.weight"),
        (&q35, "Wa1", "blk.1.ssm_alpha.weight"),
    ] {
        assert_eq!(checkpoint_source(spec, name), one(tensor), "{name}");
    }
    assert_eq!(checkpoint_source(&ds, "Wkvb1"), None, "absorbed MLA reads k_b and v_b, not kv_b");
}

// ---- errors ----

fn import_error(arch: &str, target: Target, edit: &dyn Fn(&mut Kvs)) -> (String, String) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("edited.gguf");
    convert_edited(&fixtures::hf(arch), target, Quant::F32, &out, edit);
    match from_gguf_path(&out) {
        Err(Error::Config { field, message, .. }) => {
            let line = from_gguf_path(&out).unwrap_err().to_string();
            assert_eq!(line.lines().count(), 1, "one line: {line}");
            (field, message)
        }
        Err(other) => panic!("expected a config error, got {other}"),
        Ok(_) => panic!("expected an error"),
    }
}

fn remove(key: &'static str) -> impl Fn(&mut Kvs) {
    move |kvs| kvs.retain(|(k, _)| k != key)
}

#[test]
fn a_pre_absorption_deepseek2_file_is_refused_by_key() {
    let (field, message) =
        import_error("deepseek_v2", Target::Deepseek2, &remove("deepseek2.attention.key_length_mla"));
    assert_eq!(field, "deepseek2.attention.key_length_mla");
    assert!(message.contains("attn_kv_b"), "{message}");
}

#[test]
fn an_unknown_gating_function_is_refused_by_key() {
    // 1 softmax and 2 sigmoid are read; llama.cpp's 3 (softmax of the weights) and 4
    // (sqrt-softplus) are not implemented.
    let edit = |kvs: &mut Kvs| kvs.push(("deepseek2.expert_gating_func".into(), GgufValue::U32(4)));
    let (field, message) = import_error("deepseek_v2", Target::Deepseek2, &edit);
    assert_eq!(field, "deepseek2.expert_gating_func");
    assert!(message.contains("gating function 4 is not supported"), "{message}");
}

#[test]
fn missing_deltanet_sizes_are_named() {
    let (field, message) = import_error("qwen3_next", Target::Qwen3Next, &remove("qwen3next.ssm.group_count"));
    assert_eq!(field, "qwen3next.ssm.group_count");
    assert!(message.contains("missing"), "{message}");
}

#[test]
fn an_unhandled_architecture_is_named() {
    let edit = |kvs: &mut Kvs| {
        kvs.retain(|(k, _)| k != "general.architecture");
        kvs.push(("general.architecture".into(), GgufValue::String("qwen3vlmoe".into())));
    };
    let (field, message) = import_error("qwen3_next", Target::Qwen3Next, &edit);
    assert_eq!(field, "general.architecture");
    assert!(message.contains("`qwen3vlmoe`") && message.contains("deepseek2"), "{message}");
}

#[test]
fn yarn_metadata_gives_deepseeks_softmax_scale_and_frequencies() {
    // DeepSeek-V2's rope: yarn, factor 40 over 4096 positions, mscale_all_dim 0.707, written by
    // the converter as yarn_log_multiplier = 0.1 · 0.707.
    let edit = |kvs: &mut Kvs| {
        for (k, v) in [
            ("rope.scaling.type", GgufValue::String("yarn".into())),
            ("rope.scaling.factor", GgufValue::F32(40.0)),
            ("rope.scaling.original_context_length", GgufValue::U32(4096)),
            ("rope.scaling.yarn_log_multiplier", GgufValue::F32(0.1 * 0.707)),
        ] {
            kvs.push((format!("deepseek2.{k}"), v));
        }
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("yarn.gguf");
    convert_edited(&fixtures::hf("deepseek_v2"), Target::Deepseek2, Quant::F32, &out, &edit);
    let spec = f32_states(from_gguf_path(&out).expect("import"));
    // The same rope in a config.json, through the HF importer.
    let config = std::fs::read_to_string(fixtures::hf("deepseek_v2").join("config.json")).expect("config");
    let mut config: serde_json::Value = serde_json::from_str(&config).expect("json");
    config["rope_parameters"] = serde_json::json!({"rope_theta": 10000.0, "rope_type": "yarn", "factor": 40.0,
        "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
        "mscale": 0.707, "mscale_all_dim": 0.707});
    std::fs::write(tmp.path().join("config.json"), config.to_string()).expect("write");
    let hf = from_config_path(&tmp.path().join("config.json")).expect("config");
    let (Mixer::Mla { scale, .. }, Mixer::Mla { scale: hf_scale, .. }) = (&spec.layers[0].mixer, &hf.layers[0].mixer)
    else {
        panic!("MLA expected")
    };
    assert!((scale - hf_scale).abs() <= 1e-6 * hf_scale, "softmax scale {scale} vs config.json's {hf_scale}");
    let (got, want) = (spec.rotations[0].rope_spec(), hf.rotations[0].rope_spec());
    let (gf, wf) = (rdu_spatial::rope::inv_freq(&got), rdu_spatial::rope::inv_freq(&want));
    assert_eq!(gf, wf, "YaRN frequencies");
    assert_eq!(rdu_spatial::rope::attention_factor(&got), rdu_spatial::rope::attention_factor(&want));
}

#[test]
fn squeezed_unit_axes_read_the_same() {
    // An older converter's file: the shared-expert gate [1, H] stored as [H].
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("squeezed.gguf");
    convert_with(&fixtures::hf("qwen3_next"), Target::Qwen3Next, Quant::F32, &out, &|_| {}, true);
    let gguf = rdu_checkpoint::Gguf::open(&out).expect("GGUF");
    assert_eq!(gguf.tensor("blk.0.ffn_gate_inp_shexp.weight").expect("gate").shape, vec![64]);
    let spec = f32_states(from_gguf_path(&out).expect("import"));
    let weights = GgufWeights::open(&spec, &out).expect("open");
    let tokens = npy::ids(fixtures::hf("qwen3_next").join("tokens.npy"));
    let logits = Reference::new(&spec, Storage::Dense, &weights).forward(&tokens).expect("forward").logits;
    let want = npy::f32(fixtures::hf("qwen3_next").join("logits_full.npy"));
    Tolerance::F32.assert("squeezed qwen3next forward", logits.as_f32().expect("f32"), &want);
}

#[test]
fn qwen35_is_the_dense_hybrid() {
    // The qwen35moe conversion relabelled `qwen35` (the dense Qwen3.5 / 3.6): every layer's
    // FFN is the dense SwiGLU of feed_forward_length, the DeltaNet value heads tiled.
    let rename = |kvs: &mut Kvs| {
        for (k, v) in kvs.iter_mut() {
            if let Some(rest) = k.strip_prefix("qwen35moe.") {
                *k = format!("qwen35.{rest}");
            }
            if k == "general.architecture" {
                *v = GgufValue::String("qwen35".into());
            }
        }
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("qwen35.gguf");
    convert_edited(&fixtures::hf("qwen3_next"), Target::Qwen35Moe, Quant::F32, &out, &rename);
    let spec = f32_states(from_gguf_path(&out).expect("import"));
    assert_eq!(spec.family, Family::Qwen35);
    for layer in &spec.layers {
        assert_eq!(
            layer.ffn,
            rdu_compiler::model::spec::Ffn::Dense { hidden: 128, act: rdu_compiler::model::spec::Act::Silu }
        );
    }
    let layouts: Vec<_> = spec
        .layers
        .iter()
        .map(|l| match l.mixer {
            Mixer::GatedDeltaNet { layout, .. } => Some(layout),
            _ => None,
        })
        .collect();
    assert_eq!(layouts, vec![Some(GdnLayout::SplitTiled); 3].into_iter().chain([None]).collect::<Vec<_>>());
}

/// `spec` with its states stored f32, as transformers' float32 cache holds them (the fixtures'
/// f32 files are the reference within 1e-4).
fn f32_states(mut spec: rdu_compiler::model::spec::ModelSpec) -> rdu_compiler::model::spec::ModelSpec {
    spec.state = rdu_compiler::model::spec::StateDtype::F32;
    spec
}
