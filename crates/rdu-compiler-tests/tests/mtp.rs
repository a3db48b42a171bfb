//! A model's own multi-token-prediction block as a draft (`--draft mtp`, issue 48): Qwen3-Next's,
//! DeepSeek-V3's and GLM-4.5's blocks are one-layer models of their own — the layer a kind of
//! its own (the fusion of the token and the previous row's hidden state before the family's MoE
//! layer), certified at tiny and real shapes; its tensors are the target checkpoint's (`mtp.*`;
//! `model.layers.{num_hidden_layers}.*`); the target's verify head exports the rows it reads.

use rdu_compiler::deploy::speculative::SpeculativeEstimate;
use rdu_compiler::deploy::{deploy, layer_kinds_for, LowerOptions, Storage, StreamedModel};
use rdu_compiler::lang::ast::DeclKind;
use rdu_compiler::lang::parse;
use rdu_compiler::model::author::{head_source, source_of};
use rdu_compiler::model::mtp::{exporting_hidden, falling_back, mtp_draft};
use rdu_compiler::model::naming::{checkpoint_source, TensorSource};
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::{Cut, Dialect};
use rdu_spatial::chip::Chip;

fn lower(name: &str, cut: Cut, storage: Storage) -> StreamedModel {
    crate::share_references();
    let target = presets::resolve(name).expect("preset");
    let spec = mtp_draft(&target).unwrap_or_else(|e| panic!("{name}: {e}"));
    let opts = LowerOptions { chip: Chip::builtin("sn50").expect("chip"), storage, seed: 7, progress: &mut |_| {} };
    deploy(&spec, &cut, opts).unwrap_or_else(|e| panic!("{name} MTP {cut:?}: {e}"))
}

/// The block's one kind: certified with numbers (`real`: at its real shapes).
fn certified(model: &StreamedModel, real: bool) {
    assert_eq!(model.kinds.len(), 1, "{}", model.spec.name);
    let c = &model.kinds[0].program.certificate;
    let ok = |c: &String| c.starts_with("numbers") && (!real || c.contains("at real shapes"));
    assert!(c.checks.iter().any(ok), "{}: {c:?}", model.spec.name);
    assert!(c.max_abs_err.is_finite());
}

/// The MTP block of the tiny preset `name` is a kind of its own (the fusion before the
/// family's layer: `weights` among its weights), certified at tiny shapes; its head and the
/// target's verify head export their rows.
fn kind_of_its_own(name: &str, weights: &[&str]) {
    let target = presets::resolve(name).expect("preset");
    let spec = mtp_draft(&target).unwrap_or_else(|e| panic!("{name} has an MTP block: {e}"));
    let cut = Cut::Decode { ctx: 64 };
    let layer = source_of(&spec, 0, cut, &Storage::AllQ8);
    let program = parse(layer.text()).expect("parses");
    let decls = |kind: DeclKind| -> Vec<String> {
        program.decls().filter(|d| d.kind == kind).map(|d| d.name.text.clone()).collect()
    };
    let inputs = decls(DeclKind::Input);
    assert!(inputs.contains(&"x".to_string()) && inputs.contains(&"hprev".to_string()), "{inputs:?}");
    for w in ["ne0", "nh0", "Wfc0"].iter().chain(weights) {
        assert!(decls(DeclKind::Weight).contains(&w.to_string()), "{w}: {:?}", decls(DeclKind::Weight));
    }
    // Its own kind: not any of the target's kinds, whose programs have no fusion.
    let mtp_kind = &layer_kinds_for(&spec, cut, &Storage::AllQ8)[0];
    for k in layer_kinds_for(&target, cut, &Storage::AllQ8) {
        assert_ne!(k.digest, mtp_kind.digest, "the MTP layer is a kind of its own, not {}", k.name);
    }
    // The block's head, and the target's verify head when drafted by it, export their rows.
    let verify = Cut::Verify { draft: 3, batch: None, tp: 1, ctx: 64 };
    for (head, rows) in [
        (head_source(&spec, cut, &Storage::AllQ8), 1),
        (head_source(&exporting_hidden(&target), verify, &Storage::AllQ8), 4),
    ] {
        let outs: Vec<String> = parse(head.text()).expect("parses").outputs().map(|o| o.text.clone()).collect();
        assert_eq!(outs, ["logits", "hn"], "rows {rows}");
    }
    let plain: Vec<String> = parse(head_source(&target, verify, &Storage::AllQ8).text())
        .expect("parses")
        .outputs()
        .map(|o| o.text.clone())
        .collect();
    assert_eq!(plain, ["logits"], "a verify head exports nothing unless an MTP block drafts");
    for storage in [Storage::AllQ8, Storage::Dense] {
        certified(&lower(name, cut, storage), false);
    }
}

#[test]
fn the_mtp_block_is_a_kind_of_its_own_certified_at_tiny_shapes() {
    kind_of_its_own("tiny-qwen3-next", &["Wq0", "Wr0"]);
}

/// DeepSeek-V3's block: the fusion before an MLA layer with the biased (`noaux_tc`) router.
#[test]
fn deepseek_v3s_mtp_block_is_a_kind_of_its_own_certified_at_tiny_shapes() {
    kind_of_its_own("tiny-deepseek-v3", &["Wqa0", "Wkva0", "Wr0", "bsel0", "Wsg0"]);
}

/// GLM-4.5's block: the fusion before a biased-attention layer with the biased router.
#[test]
fn glm_4_5s_mtp_block_is_a_kind_of_its_own_certified_at_tiny_shapes() {
    kind_of_its_own("tiny-glm4-moe", &["Wq0", "bq0", "qn0", "Wr0", "bsel0"]);
}

/// Each program weight `name` of `spec` is read from the checkpoint tensor `tensor`.
fn reads(spec: &rdu_compiler::model::spec::ModelSpec, names: &[(&str, &str)]) {
    for (name, tensor) in names {
        assert_eq!(checkpoint_source(spec, name), Some(TensorSource::Tensor(tensor.to_string())), "{name}");
    }
}

#[test]
fn the_mtp_block_reads_the_targets_checkpoint_names() {
    let target = presets::resolve("qwen3-next-80b-a3b").expect("preset");
    let spec = mtp_draft(&target).expect("MTP");
    reads(
        &spec,
        &[
            ("E", "model.embed_tokens.weight"),
            ("Wout", "lm_head.weight"),
            ("nf", "mtp.norm.weight"),
            ("ne0", "mtp.pre_fc_norm_embedding.weight"),
            ("nh0", "mtp.pre_fc_norm_hidden.weight"),
            ("Wfc0", "mtp.fc.weight"),
            ("an0", "mtp.layers.0.input_layernorm.weight"),
            ("fn0", "mtp.layers.0.post_attention_layernorm.weight"),
            ("Wq0", "mtp.layers.0.self_attn.q_proj.weight"),
            ("qn0", "mtp.layers.0.self_attn.q_norm.weight"),
        ],
    );
    let Some(TensorSource::Stack(experts)) = checkpoint_source(&spec, "Weg0") else { panic!("experts are stacked") };
    assert_eq!((experts.len(), experts[511].as_str()), (512, "mtp.layers.0.mlp.experts.511.gate_proj.weight"));
}

/// DeepSeek-V3's block at checkpoint layer 61: its own norms, projection, embedding copy and
/// head (`shared_head`), its decoder layer's MLA and experts under the same prefix. GLM-4.5's
/// at layer 92, and read as GLM-4.6 stores it (no embedding copy, no `shared_head.head`): the
/// target's embedding table and `lm_head`.
#[test]
fn deepseek_v3s_and_glm_4_5s_blocks_read_their_checkpoint_names() {
    let v3 = mtp_draft(&presets::resolve("deepseek-v3").expect("preset")).expect("MTP");
    reads(
        &v3,
        &[
            ("E", "model.layers.61.embed_tokens.weight"),
            ("Wout", "model.layers.61.shared_head.head.weight"),
            ("nf", "model.layers.61.shared_head.norm.weight"),
            ("ne0", "model.layers.61.enorm.weight"),
            ("nh0", "model.layers.61.hnorm.weight"),
            ("Wfc0", "model.layers.61.eh_proj.weight"),
            ("an0", "model.layers.61.input_layernorm.weight"),
            ("Wqa0", "model.layers.61.self_attn.q_a_proj.weight"),
            ("Wkvb0", "model.layers.61.self_attn.kv_b_proj.weight"),
            ("bsel0", "model.layers.61.mlp.gate.e_score_correction_bias"),
            ("Wsd0", "model.layers.61.mlp.shared_experts.down_proj.weight"),
        ],
    );
    let Some(TensorSource::Stack(experts)) = checkpoint_source(&v3, "Wed0") else { panic!("experts are stacked") };
    assert_eq!((experts.len(), experts[255].as_str()), (256, "model.layers.61.mlp.experts.255.down_proj.weight"));
    let glm = mtp_draft(&presets::resolve("glm-4.5").expect("preset")).expect("MTP");
    reads(&glm, &[("Wout", "model.layers.92.shared_head.head.weight")]);
    let glm46 = falling_back(glm, &|name| !name.ends_with("embed_tokens.weight") && !name.contains("shared_head.head"));
    reads(
        &glm46,
        &[
            ("E", "model.embed_tokens.weight"),
            ("Wout", "lm_head.weight"),
            ("nf", "model.layers.92.shared_head.norm.weight"),
            ("Wfc0", "model.layers.92.eh_proj.weight"),
            ("bq0", "model.layers.92.self_attn.q_proj.bias"),
        ],
    );
}

#[test]
fn a_model_without_an_mtp_block_is_refused_in_one_line() {
    let llama = presets::resolve("tiny-llama").expect("preset");
    let e = mtp_draft(&llama).unwrap_err();
    assert!(e.contains("tiny-llama (llama) has no multi-token-prediction block"), "{e}");
    let kimi = mtp_draft(&presets::resolve("kimi-k2").expect("preset")).unwrap_err();
    assert!(kimi.contains("kimi-k2 (deepseek_v3) has no multi-token-prediction block"), "{kimi}");
    assert!(kimi.contains("num_nextn_predict_layers is 0") && !kimi.contains('\n'), "{kimi}");
    let gguf = rdu_compiler::model::spec::ModelSpec {
        dialect: Dialect::Gguf,
        ..presets::resolve("tiny-qwen3-next").expect("preset")
    };
    assert!(mtp_draft(&gguf).unwrap_err().contains("GGUF"), "a GGUF converter drops the block");
    let block = mtp_draft(&presets::resolve("tiny-qwen3-next").expect("preset")).expect("MTP");
    assert!(mtp_draft(&block).unwrap_err().contains("itself a multi-token-prediction block"));
    assert!(!e.contains('\n'));
}

/// Qwen3-Next 80B-A3B drafted by its MTP block at real shapes (K = 4, ctx 4096, Q8_0, bf16
/// states, SN50) — what `rdu lower qwen3-next-80b-a3b --cut verify --draft mtp` deploys: the
/// block (the fusion, the gated attention, the 512-expert MoE) and every kind of the verify step
/// certified at real shapes, the verify head exporting its rows; the estimate at acceptance 0.8.
#[test]
fn qwen3_next_80b_a3b_drafted_by_its_mtp_block_certifies_at_real_shapes() {
    let started = std::time::Instant::now();
    let block = lower("qwen3-next-80b-a3b", Cut::Decode { ctx: 4096 }, Storage::AllQ8);
    certified(&block, true);
    let target = exporting_hidden(&presets::resolve("qwen3-next-80b-a3b").expect("preset"));
    let opts = LowerOptions {
        chip: Chip::builtin("sn50").expect("chip"),
        storage: Storage::AllQ8,
        seed: 7,
        progress: &mut |_| {},
    };
    let verify = deploy(&target, &Cut::Verify { draft: 4, batch: None, tp: 1, ctx: 4096 }, opts).expect("verify");
    for k in &verify.kinds {
        let c = &k.program.certificate;
        assert!(c.checks.iter().any(|c| c.contains("at real shapes")), "{}: {c:?}", k.program.name);
    }
    assert!(verify.head.spatial.outputs.iter().any(|o| o == "hn"), "the verify head exports its rows");
    let e = SpeculativeEstimate::new(&verify, Some(&block), 0.8).expect("estimate");
    eprintln!(
        "qwen3-next-80b-a3b + MTP, K = 4, A = 0.8: verify {:.1} µs, MTP step {:.1} µs, {:.3} tokens a step, {:.1} tokens/s (lowered and certified in {:.1}s)",
        e.verify_step_seconds * 1e6,
        e.draft_step_seconds * 1e6,
        e.expected_tokens_per_step,
        e.tokens_per_second,
        started.elapsed().as_secs_f64()
    );
    assert!(e.draft_step_seconds > 0.0 && e.draft_step_seconds < e.verify_step_seconds, "{e:?}");
}

/// DeepSeek-V3's MTP block at real shapes (d_model 7168, MLA, 256 routed experts + 1 shared,
/// ctx 4096, Q8_0, bf16 states, SN50): its one kind certified with numbers at real shapes.
#[test]
fn deepseek_v3s_mtp_block_certifies_at_real_shapes() {
    let started = std::time::Instant::now();
    let block = lower("deepseek-v3", Cut::Decode { ctx: 4096 }, Storage::AllQ8);
    certified(&block, true);
    eprintln!(
        "deepseek-v3 MTP block: {:.1} µs a step, lowered and certified in {:.1}s ({:?})",
        block.step_estimate().seconds * 1e6,
        started.elapsed().as_secs_f64(),
        block.kinds[0].program.certificate.checks
    );
}
