//! The model's roofline (issue 11): the floor recomputed independently from written manifests
//! (the formula of `shared/tools/model_roofline.py`), no estimate faster than it, and the floor
//! `rdu report` reads off a bundle (`bundle_floor`) the lowered model's own.

use rdu_compiler::deploy::{
    bundle_floor, lower_batched_decode_streamed, lower_batched_tp_decode_streamed, lower_decode_streamed,
    lower_prefill_streamed, lower_tp_decode_streamed, LowerOptions, ModelFloor, Progress, Storage, StreamedModel,
};
use rdu_compiler::model::presets;
use rdu_spatial::bundle::Bundle;
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::{Manifest, TensorStorage};
use rdu_spatial::program::SpatialProgram;
use std::collections::{BTreeMap, BTreeSet};

/// Options for `chip` and `storage`, no progress reports (a leaked empty closure per call).
fn opts(chip: &str, storage: Storage) -> LowerOptions<'static> {
    let progress: &'static mut dyn FnMut(Progress<'_>) = Box::leak(Box::new(|_: Progress<'_>| {}));
    LowerOptions { chip: Chip::builtin(chip).expect("builtin chip"), storage, seed: 7, progress }
}

/// HBM bandwidth as published (the script's table): SN50 1.8 TB/s, SN40L 1.6 TB/s.
fn published_hbm(chip: &str) -> f64 {
    match chip {
        "sn50" => 1.8e12,
        "sn40l" => 1.6e12,
        other => panic!("no published HBM figure for {other}"),
    }
}

/// Floor bytes of a written manifest, as `model_roofline.py` computes them from the bundle and
/// the model's config.json: every tensor once (Q8_0 34/32 bytes an element, FP8 1 + 4/128²
/// — one f32 scale a 128 × 128 block —, MXFP4 17/32, else 2), a table
/// only the embedding reads as one row per sequence, a stack of `n_experts` routed experts as
/// `min(1, batch·top_k/n_experts)` of it, every state once at 2 bytes an element.
fn floor_of_manifest(m: &Manifest, config: &serde_json::Value) -> f64 {
    let c = config.get("text_config").unwrap_or(config);
    let int = |k: &str| c.get(k).and_then(|v| v.as_u64()).unwrap_or(0) as f64;
    let n_exp = if int("num_experts") > 0.0 { int("num_experts") } else { int("n_routed_experts") };
    let top_k = int("num_experts_per_tok");
    let batch = m.cut.batch.unwrap_or(1) as f64;
    let head: BTreeSet<&String> = m.programs.head.declared.iter().collect();
    let embed_only: BTreeSet<&String> = m.programs.embed.declared.iter().filter(|n| !head.contains(n)).collect();
    let mut floor = 0.0;
    for (name, t) in &m.tensors {
        let mut n: f64 = t.shape.iter().map(|&d| d as f64).product();
        let per = match t.storage {
            TensorStorage::Q8_0 => 34.0 / 32.0,
            TensorStorage::Fp8 => 1.0 + 4.0 / (128.0 * 128.0),
            TensorStorage::Mxfp4 => 17.0 / 32.0,
            TensorStorage::Dense => 2.0,
        };
        if embed_only.contains(name) {
            n = *t.shape.last().unwrap() as f64 * batch;
        } else if n_exp > 0.0 && t.shape.len() == 3 && t.shape[0] as f64 == n_exp {
            n *= (batch * top_k / n_exp).min(1.0);
        }
        floor += n * per;
    }
    floor + m.states.iter().map(|s| s.shape.iter().map(|&d| d as f64).product::<f64>() * 2.0).sum::<f64>()
}

/// `model`'s bundle written and read back.
fn written_bundle(model: &StreamedModel) -> Bundle {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bundle");
    model.bundle().unwrap().write(&path, false).unwrap();
    Bundle::open(&path).expect("a valid bundle")
}

/// `model`'s bundle written and its manifest read back, and the preset `name`'s config.json.
fn written(name: &str, model: &StreamedModel) -> (Manifest, serde_json::Value) {
    (written_bundle(model).manifest, serde_json::from_str(presets::config_text(name).unwrap()).unwrap())
}

/// The floor of a written bundle as `rdu report` computes it (`bundle_floor` over the bundle's
/// manifest and parsed spatial programs).
fn floor_of_bundle(bundle: &Bundle, chip: &Chip) -> ModelFloor {
    let p = &bundle.manifest.programs;
    let files = std::iter::once((&p.embed.name, &p.embed.file_spatial))
        .chain(p.kinds.iter().map(|k| (&k.name, &k.file_spatial)))
        .chain(std::iter::once((&p.head.name, &p.head.file_spatial)));
    let spatial: BTreeMap<String, SpatialProgram> = files
        .map(|(name, file)| (name.clone(), rdu_spatial::text::parse(&bundle.files[file.as_str()]).expect("parses")))
        .collect();
    bundle_floor(&bundle.manifest, &|name| spatial.get(name), chip)
}

/// Writes `model`'s bundle, reads it back, and holds the estimate's floor, model roofline and
/// fraction to the ones recomputed from its manifest — and the floor `rdu report` computes from
/// the bundle to the model's own, bit for bit.
fn check_against_manifest(name: &str, model: &StreamedModel) {
    check_against_config(&serde_json::from_str(presets::config_text(name).unwrap()).unwrap(), name, model);
}

/// [`check_against_manifest`] with the model's config.json given.
fn check_against_config(config: &serde_json::Value, name: &str, model: &StreamedModel) {
    let bundle = written_bundle(model);
    assert_eq!(floor_of_bundle(&bundle, &model.chip), model.model_floor(), "{name} {}", model.cut.describe());
    let m = bundle.manifest;
    let floor = floor_of_manifest(&m, config);
    let step = model.step_estimate();
    let at = format!("{name} {}", model.cut.describe());
    assert!((step.floor_bytes as f64 - floor).abs() <= 1.0, "{at}: floor {} vs {floor}", step.floor_bytes);
    let chips = m.cut.tp.unwrap_or(1) as f64;
    let roof = floor / (chips * published_hbm(&m.chip));
    assert!(
        (step.model_roofline_seconds - roof).abs() <= 1e-9 * roof,
        "{at}: {} vs {roof}",
        step.model_roofline_seconds
    );
    let fraction = roof / step.seconds;
    assert!((step.model_roofline_fraction - fraction).abs() <= 1e-9, "{at}");
    assert!(fraction > 0.0 && fraction <= 1.0, "{at}: {fraction}");
}

#[test]
fn the_floor_is_the_issue_formula_over_a_written_manifest() {
    let sn50 = || opts("sn50", Storage::AllQ8);
    let spec = |n: &str| presets::resolve(n).unwrap();
    check_against_manifest("tiny-llama", &lower_decode_streamed(&spec("tiny-llama"), 64, sn50()).unwrap());
    // Routed experts of a batch, a dense first layer.
    let moe = lower_batched_decode_streamed(&spec("tiny-qwen3-moe"), 3, 64, sn50()).unwrap();
    check_against_manifest("tiny-qwen3-moe", &moe);
    // Split experts, latent caches.
    let ds = lower_tp_decode_streamed(&spec("tiny-deepseek-v2"), 2, 64, opts("sn40l", Storage::Dense));
    check_against_manifest("tiny-deepseek-v2", &ds.unwrap());
    // DeltaNet states per sequence over two chips.
    let next = lower_batched_tp_decode_streamed(&spec("tiny-qwen3-next"), 2, 2, 64, opts("sn50", Storage::Dense));
    let next = next.unwrap();
    check_against_manifest("tiny-qwen3-next", &next);
    // A tied table: the head reads it whole, so it is counted whole, once.
    check_against_manifest("tiny-gemma3", &lower_tp_decode_streamed(&spec("tiny-gemma3"), 2, 64, sn50()).unwrap());
    check_against_manifest("tiny-qwen3", &lower_prefill_streamed(&spec("tiny-qwen3"), 4, 64, sn50()).unwrap());
}

/// A config declaring FP8 in 128 × 128 blocks (every projection a whole number of them, as
/// DeepSeek-V3's nearly all are): the floor counts each FP8 weight's bytes as stored, one a
/// value and an f32 scale a block — what the script counts.
#[test]
fn the_floor_counts_fp8_weights_as_stored() {
    let text = r#"{"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 256,
        "max_position_embeddings": 128, "tie_word_embeddings": false,
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}"#;
    let spec = rdu_compiler::model::config::from_config_json(text, "fp8-llama").unwrap();
    let storage = rdu_compiler::model::quantization::declared_storage(&spec).expect("declared");
    let model = lower_decode_streamed(&spec, 64, opts("sn50", storage)).unwrap();
    let m = written_bundle(&model).manifest;
    assert!(m
        .tensors
        .iter()
        .filter(|(n, _)| n.starts_with('W') && n != &"Wout")
        .all(|(_, t)| t.storage == TensorStorage::Fp8));
    // Wq0 [256, 256]: 65536 values and 4 scales.
    let wq = rdu_spatial::memory::stored_bytes(
        &[256, 256],
        rdu_spatial::Role::Weight,
        rdu_spatial::Storage::Fp8 { rows: 128, cols: 128 },
    );
    assert_eq!(wq.unwrap(), 65536 + 4 * 4);
    check_against_config(&serde_json::from_str(text).unwrap(), "fp8-llama", &model);
}

/// Model FLOPs of a step of a written manifest of an attention model without sliding windows,
/// from the manifest and config.json alone: 2 per row and element of every tensor of two or
/// more axes (not a table only the embedding reads; a stack of routed experts at
/// `top_k / n_experts`; the head's for one row a sequence in prefill), plus attention,
/// `2 · rows · heads · ctx · 2 · head_dim` a layer.
fn flops_of_manifest(m: &Manifest, config: &serde_json::Value) -> f64 {
    let int = |k: &str| config.get(k).and_then(|v| v.as_u64()).unwrap_or(0) as f64;
    let (n_exp, top_k) = (int("num_experts"), int("num_experts_per_tok"));
    let rows = m.cut.chunk.or(m.cut.batch).unwrap_or(1) as f64;
    let head_rows = if m.cut.chunk.is_some() { 1.0 } else { rows };
    let head: BTreeSet<&String> = m.programs.head.declared.iter().collect();
    let embed_only: BTreeSet<&String> = m.programs.embed.declared.iter().filter(|n| !head.contains(n)).collect();
    let mut flops = 0.0;
    for (name, t) in m.tensors.iter().filter(|(n, t)| t.shape.len() >= 2 && !embed_only.contains(n)) {
        let mut n: f64 = t.shape.iter().map(|&d| d as f64).product();
        if n_exp > 0.0 && t.shape.len() == 3 && t.shape[0] as f64 == n_exp {
            n *= top_k / n_exp;
        }
        flops += 2.0 * n * if head.contains(name) { head_rows } else { rows };
    }
    let ctx = m.cut.ctx.unwrap() as f64;
    flops + int("num_hidden_layers") * 2.0 * rows * int("num_attention_heads") * ctx * 2.0 * int("head_dim")
}

#[test]
fn model_flops_are_the_model_count_over_a_written_manifest_and_utilisation_is_of_the_chips_peak() {
    let spec = |n: &str| presets::resolve(n).unwrap();
    let cases = [
        ("tiny-llama", lower_prefill_streamed(&spec("tiny-llama"), 8, 64, opts("sn50", Storage::AllQ8)).unwrap()),
        ("tiny-llama", lower_decode_streamed(&spec("tiny-llama"), 64, opts("sn40l", Storage::Dense)).unwrap()),
        // Routed experts at top_k / n_experts, a dense first layer, two chips.
        (
            "tiny-qwen3-moe",
            lower_batched_tp_decode_streamed(&spec("tiny-qwen3-moe"), 3, 2, 64, opts("sn50", Storage::Dense)).unwrap(),
        ),
    ];
    for (name, model) in cases {
        let (m, config) = written(name, &model);
        let want = flops_of_manifest(&m, &config);
        let step = model.step_estimate();
        let at = format!("{name} {}", model.cut.describe());
        assert!((step.model_flops - want).abs() <= 1e-9 * want, "{at}: {} vs {want}", step.model_flops);
        let peak = m.cut.tp.unwrap_or(1) as f64 * model.chip.peak_flops_bf16;
        let mfu = want / step.seconds / peak;
        assert!((step.model_flop_utilisation - mfu).abs() <= 1e-12, "{at}: {} vs {mfu}", step.model_flop_utilisation);
        assert!(mfu > 0.0 && mfu < 1.0, "{at}: {mfu}");
    }
}
