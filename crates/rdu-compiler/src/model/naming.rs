//! Checkpoint naming: which checkpoint tensor(s) fill each weight a program declares, for
//! every family — in one place.

use crate::model::spec::{Dialect, Family, Ffn, Layer, Mixer, ModelSpec};
use rdu_spatial::names::TensorName;

/// Where a program weight's values come from in the checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensorSource {
    /// One checkpoint tensor, used as is.
    Tensor(String),
    /// Per-expert tensors stacked along a new leading axis (HF `experts.{e}.*`).
    Stack(Vec<String>),
    /// Elements `start .. start+len` along `axis` of one tensor (fused `gate_up_proj`).
    Slice { name: String, axis: usize, start: usize, len: usize },
    /// One tensor with its last two axes swapped: HF gpt-oss stores its experts for `x·W`
    /// (`[E, in, out]`), where a program reads `[E, out, in]`.
    Transposed(String),
    /// Every `step`-th element from `start` along `axis`, `len` of them, of one tensor — its last
    /// two axes swapped first when `transposed` (gpt-oss's gate and up interleaved in
    /// `gate_up_proj`: columns of the dequantised tensor, rows of the MXFP4 one).
    Strided { name: String, transposed: bool, axis: usize, start: usize, step: usize, len: usize },
}

/// Whether where a weight's values lie in the checkpoint depends on how it is stored: HF
/// gpt-oss's experts lie out-major as MXFP4 blocks and in-major dequantised, so a checkpoint
/// whose config declares them MXFP4 must store them so.
pub fn layout_follows_storage(spec: &ModelSpec) -> bool {
    spec.family == Family::GptOss && matches!(spec.dialect, Dialect::Hf { .. })
}

/// The checkpoint source of the program weight `name` (`Wq3`, `E`, `nf`, `Wout`), or `None`
/// when `name` is not a weight the author declares for this model.
pub fn checkpoint_source(spec: &ModelSpec, name: &str) -> Option<TensorSource> {
    let prefix = match &spec.dialect {
        Dialect::Hf { prefix } => prefix,
        Dialect::Gguf => return gguf_source(spec, name).map(TensorSource::Tensor),
    };
    let one = |s: String| Some(TensorSource::Tensor(s));
    if let Some(found) = spec.mtp.as_ref().and_then(|block| crate::model::mtp::checkpoint_name(block, name)) {
        return one(found);
    }
    match name {
        "E" => return one(format!("{prefix}embed_tokens.weight")),
        "nf" => return one(format!("{prefix}norm.weight")),
        "Wout" if !spec.head.tied => {
            let lm = if prefix == "language_model.model." { "language_model.lm_head.weight" } else { "lm_head.weight" };
            return one(lm.to_string());
        }
        _ => {}
    }
    let TensorName { base, layer: Some(layer), seq: None } = TensorName::parse(name) else { return None };
    let base = base.as_str();
    let spec_layer = spec.layers.get(layer)?;
    // An MTP block's one layer sits at its own checkpoint index (DeepSeek-V3's: 61).
    let stored = layer + spec.mtp.as_ref().map_or(0, |block| block.layer);
    let at = |rest: &str| format!("{prefix}layers.{stored}.{rest}");
    let rest = hf_norm(spec_layer, base).or_else(|| hf_mixer(&spec_layer.mixer, base));
    match rest {
        Some(rest) => one(at(rest)),
        None => hf_ffn(spec, &spec_layer.ffn, base, &at),
    }
}

/// A layer's norm weight under its HF name (Gemma's four norms, or the usual two).
fn hf_norm(layer: &Layer, base: &str) -> Option<&'static str> {
    let gemma_norms = layer.norms.post_attn;
    match base {
        "an" => Some("input_layernorm.weight"),
        "pan" if gemma_norms => Some("post_attention_layernorm.weight"),
        "fn" if gemma_norms => Some("pre_feedforward_layernorm.weight"),
        "fn" => Some("post_attention_layernorm.weight"),
        "pfn" if layer.norms.post_ffn => Some("post_feedforward_layernorm.weight"),
        _ => None,
    }
}

/// A mixer weight under its HF name, relative to the layer.
fn hf_mixer(mixer: &Mixer, base: &str) -> Option<&'static str> {
    match mixer {
        Mixer::Attention { .. } => match base {
            "Wq" => Some("self_attn.q_proj.weight"),
            "Wk" => Some("self_attn.k_proj.weight"),
            "Wv" => Some("self_attn.v_proj.weight"),
            "Wo" => Some("self_attn.o_proj.weight"),
            "bq" => Some("self_attn.q_proj.bias"),
            "bk" => Some("self_attn.k_proj.bias"),
            "bv" => Some("self_attn.v_proj.bias"),
            "bo" => Some("self_attn.o_proj.bias"),
            "snk" => Some("self_attn.sinks"),
            "qn" => Some("self_attn.q_norm.weight"),
            "kn" => Some("self_attn.k_norm.weight"),
            _ => None,
        },
        Mixer::Mla { .. } => match base {
            "Wq" => Some("self_attn.q_proj.weight"),
            "Wqa" => Some("self_attn.q_a_proj.weight"),
            "qan" => Some("self_attn.q_a_layernorm.weight"),
            "Wqb" => Some("self_attn.q_b_proj.weight"),
            "Wkva" => Some("self_attn.kv_a_proj_with_mqa.weight"),
            "kvn" => Some("self_attn.kv_a_layernorm.weight"),
            "Wkvb" => Some("self_attn.kv_b_proj.weight"),
            "Wo" => Some("self_attn.o_proj.weight"),
            _ => None,
        },
        Mixer::GatedDeltaNet { .. } => match base {
            "Wqkvz" => Some("linear_attn.in_proj_qkvz.weight"),
            "Wba" => Some("linear_attn.in_proj_ba.weight"),
            "Wqkv" => Some("linear_attn.in_proj_qkv.weight"),
            "Wz" => Some("linear_attn.in_proj_z.weight"),
            "Wb" => Some("linear_attn.in_proj_b.weight"),
            "Wa" => Some("linear_attn.in_proj_a.weight"),
            "cw" => Some("linear_attn.conv1d.weight"),
            "dtb" => Some("linear_attn.dt_bias"),
            "Alog" => Some("linear_attn.A_log"),
            "gn" => Some("linear_attn.norm.weight"),
            "Wo" => Some("linear_attn.out_proj.weight"),
            _ => None,
        },
    }
}

/// A feed-forward weight's HF tensor(s): dense, or experts stacked, fused or shared; `at`
/// names a tensor of the layer.
fn hf_ffn(spec: &ModelSpec, ffn: &Ffn, base: &str, at: &dyn Fn(&str) -> String) -> Option<TensorSource> {
    let one = |s: String| Some(TensorSource::Tensor(s));
    match ffn {
        Ffn::Dense { .. } => match base {
            "Wg" => one(at("mlp.gate_proj.weight")),
            "Wu" => one(at("mlp.up_proj.weight")),
            "Wd" => one(at("mlp.down_proj.weight")),
            _ => None,
        },
        Ffn::Moe { .. } if spec.family == Family::GptOss => hf_gpt_oss_moe(spec, ffn, base, at),
        Ffn::Moe { experts, .. } if matches!(spec.family, Family::Mixtral | Family::MinimaxM2) => {
            block_sparse_moe(*experts, base, at)
        }
        Ffn::Moe { experts, expert_hidden, .. } => {
            let deepseek_like = matches!(spec.family, Family::DeepseekV2 | Family::DeepseekV3 | Family::Glm4Moe);
            let shared = if deepseek_like { "mlp.shared_experts" } else { "mlp.shared_expert" };
            let fused = spec.family == Family::Qwen35;
            let stack = |proj: &str| {
                Some(TensorSource::Stack(
                    (0..*experts).map(|e| at(&format!("mlp.experts.{e}.{proj}.weight"))).collect(),
                ))
            };
            let gate_up = |start: usize| {
                Some(TensorSource::Slice { name: at("mlp.experts.gate_up_proj"), axis: 1, start, len: *expert_hidden })
            };
            match base {
                "Wr" => one(at("mlp.gate.weight")),
                "bsel" => one(at("mlp.gate.e_score_correction_bias")),
                "Weg" if fused => gate_up(0),
                "Weu" if fused => gate_up(*expert_hidden),
                "Wed" if fused => one(at("mlp.experts.down_proj")),
                "Weg" => stack("gate_proj"),
                "Weu" => stack("up_proj"),
                "Wed" => stack("down_proj"),
                "Wsg" => one(at(&format!("{shared}.gate_proj.weight"))),
                "Wsu" => one(at(&format!("{shared}.up_proj.weight"))),
                "Wsd" => one(at(&format!("{shared}.down_proj.weight"))),
                "Wsgate" => one(at("mlp.shared_expert_gate.weight")),
                _ => None,
            }
        }
    }
}

/// Mixtral's and MiniMax-M2's expert block as their checkpoints name it (`block_sparse_moe`,
/// `w1` the gate, `w3` the up and `w2` the down projection of each expert; MiniMax-M2's
/// selection bias beside the router).
fn block_sparse_moe(experts: usize, base: &str, at: &dyn Fn(&str) -> String) -> Option<TensorSource> {
    let stack = |w: &str| {
        Some(TensorSource::Stack(
            (0..experts).map(|e| at(&format!("block_sparse_moe.experts.{e}.{w}.weight"))).collect(),
        ))
    };
    match base {
        "Wr" => Some(TensorSource::Tensor(at("block_sparse_moe.gate.weight"))),
        "bsel" => Some(TensorSource::Tensor(at("block_sparse_moe.e_score_correction_bias"))),
        "Weg" => stack("w1"),
        "Weu" => stack("w3"),
        "Wed" => stack("w2"),
        _ => None,
    }
}

/// gpt-oss's MoE weights: `mlp.router` with its bias, the experts' biases `[E, 2I]` (gate and
/// up interleaved: gate the even entries) and `[E, D]`, and the experts as the checkpoint
/// stores them. Dequantised, transformers holds them for `x·W`: `gate_up_proj` `[E, D, 2I]`
/// (gate the even columns) and `down_proj` `[E, I, D]`, which a program reads transposed.
/// Stored MXFP4 (the config's `quantization_config` converts `mlp.experts`), `*_blocks` and
/// `*_scales` hold them out-major, with blocks of 32 along the input axis — `gate_up_proj`
/// `[E, 2I, D]` (gate the even rows), `down_proj` `[E, D, I]` (transformers' `mxfp4.py`
/// transposes them as it dequantises) — which a program reads as they are.
fn hf_gpt_oss_moe(spec: &ModelSpec, ffn: &Ffn, base: &str, at: &dyn Fn(&str) -> String) -> Option<TensorSource> {
    let Ffn::Moe { expert_hidden: len, .. } = *ffn else { return None };
    let mxfp4 = spec.quantization.as_ref().is_some_and(|q| q.mxfp4(&at("mlp.experts")));
    let interleaved = |name: &str, transposed: bool, start: usize| {
        let name = at(&format!("mlp.experts.{name}"));
        Some(TensorSource::Strided { name, transposed, axis: 1, start, step: 2, len })
    };
    match base {
        "Wr" => Some(TensorSource::Tensor(at("mlp.router.weight"))),
        "br" => Some(TensorSource::Tensor(at("mlp.router.bias"))),
        "Weg" => interleaved("gate_up_proj", !mxfp4, 0),
        "Weu" => interleaved("gate_up_proj", !mxfp4, 1),
        "Wed" if mxfp4 => Some(TensorSource::Tensor(at("mlp.experts.down_proj"))),
        "Wed" => Some(TensorSource::Transposed(at("mlp.experts.down_proj"))),
        "beg" => interleaved("gate_up_proj_bias", false, 0),
        "beu" => interleaved("gate_up_proj_bias", false, 1),
        "bed" => Some(TensorSource::Tensor(at("mlp.experts.down_proj_bias"))),
        _ => None,
    }
}

/// The GGUF tensor (llama.cpp names) holding the program weight `name`. Experts are already
/// stacked in GGUF files, so every weight is one tensor.
fn gguf_source(spec: &ModelSpec, name: &str) -> Option<String> {
    match name {
        "E" => return Some("token_embd.weight".into()),
        "nf" => return Some("output_norm.weight".into()),
        "Wout" if !spec.head.tied => return Some("output.weight".into()),
        _ => {}
    }
    let TensorName { base, layer: Some(layer), seq: None } = TensorName::parse(name) else { return None };
    let base = base.as_str();
    let spec_layer = spec.layers.get(layer)?;
    let norms = &spec_layer.norms;
    // Qwen3-Next/3.5, GLM-4.5 and gpt-oss store the pre-FFN norm (HF post_attention_layernorm)
    // as ATTN_POST_NORM.
    let hybrid = matches!(spec.family, Family::Qwen3Next | Family::Qwen35 | Family::Glm4Moe | Family::GptOss);
    let tensor = match base {
        "an" => "attn_norm.weight",
        "pan" if norms.post_attn => "post_attention_norm.weight",
        "fn" if hybrid => "post_attention_norm.weight",
        "fn" => "ffn_norm.weight",
        "pfn" if norms.post_ffn => "post_ffw_norm.weight",
        _ => {
            let mixer = match &spec_layer.mixer {
                Mixer::Attention { .. } => match base {
                    "Wq" => Some("attn_q.weight"),
                    "Wk" => Some("attn_k.weight"),
                    "Wv" => Some("attn_v.weight"),
                    "Wo" => Some("attn_output.weight"),
                    "bq" => Some("attn_q.bias"),
                    "bk" => Some("attn_k.bias"),
                    "bv" => Some("attn_v.bias"),
                    "bo" => Some("attn_output.bias"),
                    "snk" => Some("attn_sinks.weight"),
                    "qn" => Some("attn_q_norm.weight"),
                    "kn" => Some("attn_k_norm.weight"),
                    _ => None,
                },
                Mixer::Mla { .. } => match base {
                    "Wq" => Some("attn_q.weight"),
                    "Wqa" => Some("attn_q_a.weight"),
                    "qan" => Some("attn_q_a_norm.weight"),
                    "Wqb" => Some("attn_q_b.weight"),
                    "Wkva" => Some("attn_kv_a_mqa.weight"),
                    "kvn" => Some("attn_kv_a_norm.weight"),
                    "Wkb" => Some("attn_k_b.weight"),
                    "Wvb" => Some("attn_v_b.weight"),
                    "Wo" => Some("attn_output.weight"),
                    _ => None,
                },
                Mixer::GatedDeltaNet { .. } => match base {
                    // Legacy Qwen3-Next files: the raw grouped in_proj_qkvz.
                    "Wqkvz" => Some("ssm_in.weight"),
                    "Wqkv" => Some("attn_qkv.weight"),
                    "Wz" => Some("attn_gate.weight"),
                    "Wb" => Some("ssm_beta.weight"),
                    "Wa" => Some("ssm_alpha.weight"),
                    "Wba" => Some("ssm_ba.weight"),
                    "cw" => Some("ssm_conv1d.weight"),
                    "dtb" => Some("ssm_dt.bias"),
                    "ssma" => Some("ssm_a"),
                    "gn" => Some("ssm_norm.weight"),
                    "Wo" => Some("ssm_out.weight"),
                    _ => None,
                },
            };
            match (mixer, &spec_layer.ffn) {
                (Some(m), _) => m,
                (None, Ffn::Dense { .. }) => match base {
                    "Wg" => "ffn_gate.weight",
                    "Wu" => "ffn_up.weight",
                    "Wd" => "ffn_down.weight",
                    _ => return None,
                },
                (None, Ffn::Moe { .. }) => match base {
                    "Wr" => "ffn_gate_inp.weight",
                    "bsel" => "exp_probs_b.bias",
                    "Weg" => "ffn_gate_exps.weight",
                    "Weu" => "ffn_up_exps.weight",
                    "Wed" => "ffn_down_exps.weight",
                    "Wsg" => "ffn_gate_shexp.weight",
                    "Wsu" => "ffn_up_shexp.weight",
                    "Wsd" => "ffn_down_shexp.weight",
                    "Wsgate" => "ffn_gate_inp_shexp.weight",
                    "br" => "ffn_gate_inp.bias",
                    "beg" => "ffn_gate_exps.bias",
                    "beu" => "ffn_up_exps.bias",
                    "bed" => "ffn_down_exps.bias",
                    _ => return None,
                },
            }
        }
    };
    Some(format!("blk.{layer}.{tensor}"))
}
