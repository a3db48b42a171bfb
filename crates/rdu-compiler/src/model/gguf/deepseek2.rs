//! `deepseek2` (DeepSeek-V2 / V2-Lite) as llama.cpp's converter writes it: multi-head latent
//! attention with `kv_b` split per head into `attn_k_b` (W_UKᵀ) and `attn_v_b` (W_UV) for the
//! absorbed form, `attn_q` or the q-lora pair `attn_q_a`/`attn_q_b`, interleaved RoPE over the
//! `rope.dimension_count` rope dims with optional YaRN, `leading_dense_block_count` dense
//! layers, then stacked routed experts plus ungated shared experts.
//!
//! Metadata as llama.cpp reads it: `attention.key_length_mla` = qk_nope + qk_rope and
//! `attention.value_length_mla` = v_head_dim (`key_length` / `value_length` describe the
//! 576-wide MQA view and are only checked); `rope.scaling.yarn_log_multiplier` holds
//! `0.1·mscale_all_dim` (the converter's legacy pre-scaling for this architecture) and llama.cpp
//! takes `mscale = mscale_all_dim`, so RoPE magnitudes stay 1 and the softmax scale is
//! `(0.1·mscale_all_dim·ln factor + 1)² / √(qk_nope + qk_rope)`. Routing (`experts.rs`):
//! softmax (`expert_gating_func` 1 or absent, V2) or sigmoid (2, V3 and Kimi K2, with the
//! layer's `exp_probs_b.bias`), top-k, renormalised iff `expert_weights_norm`, then multiplied
//! by `expert_weights_scale`; `expert_group_count` / `expert_group_used_count` give
//! group-limited selection. A file that kept the multi-token-prediction blocks counts them in
//! `block_count` and says how many in `nextn_predict_layers`: they are not decoder layers.

use super::experts::{leading_dense_then_routed, split_nextn, ExpertRules};
use super::{basics, finish, Basics, Meta, Shape};
use crate::error::Result;
use crate::model::spec::{Embed, Family, Ffn, Mixer, ModelSpec, RopeScaling, RopeStyle, Rotation, Scoring};

const ARCH: &str = "deepseek2";

fn key(k: &str) -> String {
    format!("{ARCH}.{k}")
}

pub(super) fn build(m: &Meta, name: &str) -> Result<ModelSpec> {
    let Basics { d_model, blocks, eps, max_ctx, vocab } = basics(m, ARCH)?;
    let (n_layers, nextn) = split_nextn(m, ARCH, blocks)?;
    let heads = m.req_usize(&key("attention.head_count"))?;

    // Attention.
    let kv_lora_rank = m.req_usize(&key("attention.kv_lora_rank"))?;
    let q_lora_rank = m.usize(&key("attention.q_lora_rank"))?;
    let qk_rope = m.req_usize(&key("rope.dimension_count"))?;
    if !qk_rope.is_multiple_of(2) {
        return Err(m.err(&key("rope.dimension_count"), format!("{qk_rope} must be even")));
    }
    let Some(qk) = m.usize(&key("attention.key_length_mla"))? else {
        let field = key("attention.key_length_mla");
        let message = "missing: a file from before llama.cpp's absorbed MLA (one `attn_kv_b` per layer) is not \
                       supported; convert it again with a current convert_hf_to_gguf.py";
        return Err(m.err(&field, message));
    };
    if qk <= qk_rope {
        return Err(m.err(&key("attention.key_length_mla"), format!("{qk} must exceed rope.dimension_count {qk_rope}")));
    }
    let qk_nope = qk - qk_rope;
    let v_dim = m.req_usize(&key("attention.value_length_mla"))?;
    if let Some(k) = m.usize(&key("attention.key_length"))? {
        if k != kv_lora_rank + qk_rope {
            let message = format!("{k} differs from kv_lora_rank + rope.dimension_count = {}", kv_lora_rank + qk_rope);
            return Err(m.err(&key("attention.key_length"), message));
        }
    }
    for il in 0..n_layers {
        let kv_b = format!("blk.{il}.attn_kv_b.weight");
        if m.has_tensor(&kv_b) && !m.has_tensor(&format!("blk.{il}.attn_k_b.weight")) {
            return Err(m.err(&kv_b, "an unsplit kv_b is not supported; convert the model again for attn_k_b/attn_v_b"));
        }
    }

    // RoPE: interleaved pairs, optionally YaRN.
    let base = m.f32_as_f64(&key("rope.freq_base"))?.unwrap_or(10_000.0);
    let scaling = rope_scaling(m, ARCH)?;
    let scale = yarn_softmax_factor(&scaling) / (qk as f64).sqrt();
    let rotation = Rotation { base, dim: qk_rope, style: RopeStyle::Interleaved, scaling };
    let mixer = Mixer::Mla { heads, q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_dim, scale };

    // Feed-forward: leading dense blocks, then routed + shared experts.
    let layers = leading_dense_then_routed(m, ARCH, &RULES, &mixer, n_layers, eps)?;
    // A sigmoid router is DeepSeek-V3's (and Kimi K2's).
    let v3 = layers.iter().any(|l| matches!(&l.ffn, Ffn::Moe { router, .. } if router.scoring == Scoring::Sigmoid));
    let family = if v3 { Family::DeepseekV3 } else { Family::DeepseekV2 };
    let shape = Shape { family, vocab, d_model, eps, max_ctx };
    let spec = finish(m, name, shape, layers, vec![rotation], Embed { scale: None })?;
    Ok(ModelSpec { mtp_layers: nextn, ..spec })
}

/// llama.cpp's `deepseek2`: softmax without `expert_gating_func` (V2 files), the weights
/// renormalised only when `expert_weights_norm`.
const RULES: ExpertRules = ExpertRules { scoring: Scoring::Softmax, always_norm: false, reads_scale: true };

/// `{arch}.rope.scaling.*`: none, linear, or YaRN as llama.cpp reads it — its correction range
/// rounded to whole dims (`ggml_rope_yarn_corr_dims`), whatever the HF config's `truncate` was,
/// and with deepseek2's reading of the log multiplier (`gpt-oss` files carry none).
pub(super) fn rope_scaling(m: &Meta, arch: &str) -> Result<RopeScaling> {
    let key = |k: &str| format!("{arch}.{k}");
    let type_key = key("rope.scaling.type");
    let positive = |k: &str, default: Option<f64>| -> Result<f64> {
        let v = match (m.f32_as_f64(k)?, default) {
            (Some(v), _) | (None, Some(v)) => v,
            (None, None) => return Err(m.missing(k)),
        };
        if !(v.is_finite() && v > 0.0) {
            return Err(m.err(k, format!("must be a finite number greater than 0, found {v}")));
        }
        Ok(v)
    };
    match m.str(&type_key)? {
        None | Some("none") => Ok(RopeScaling::None),
        Some("linear") => Ok(RopeScaling::Linear { factor: positive(&key("rope.scaling.factor"), None)? }),
        Some("yarn") => {
            for (k, what) in
                [("rope.scaling.yarn_ext_factor", "ext_factor"), ("rope.scaling.attn_factor", "attn_factor")]
            {
                if let Some(v) = m.f32_as_f64(&key(k))? {
                    if v != 1.0 {
                        return Err(m.err(&key(k), format!("a yarn {what} of {v} is not supported (only 1)")));
                    }
                }
            }
            let factor = positive(&key("rope.scaling.factor"), None)?;
            let original_max = m.req_usize(&key("rope.scaling.original_context_length"))?;
            let mscale_all_dim = match m.f32_as_f64(&key("rope.scaling.yarn_log_multiplier"))? {
                // The converter writes 0.1·mscale_all_dim for deepseek2; llama.cpp divides it back.
                Some(v) if v.is_finite() && v >= 0.0 => v / 0.1,
                Some(v) => {
                    return Err(m.err(&key("rope.scaling.yarn_log_multiplier"), format!("{v} must be at least 0")))
                }
                None => 0.0,
            };
            Ok(RopeScaling::Yarn {
                factor,
                original_max,
                beta_fast: positive(&key("rope.scaling.yarn_beta_fast"), Some(32.0))?,
                beta_slow: positive(&key("rope.scaling.yarn_beta_slow"), Some(1.0))?,
                // llama.cpp assumes mscale = mscale_all_dim for deepseek2 (RoPE magnitude 1).
                mscale: if mscale_all_dim == 0.0 { 1.0 } else { mscale_all_dim },
                mscale_all_dim,
                // llama.cpp rounds the correction range (`ggml_rope_yarn_corr_dims`).
                truncate: true,
            })
        }
        Some(other) => Err(m.err(
            &type_key,
            format!("rope scaling `{other}` is not supported for {arch}; supported: none, linear, yarn"),
        )),
    }
}

/// YaRN's correction of the softmax scale, `m²` with `m = 0.1·mscale_all_dim·ln(factor) + 1`
/// (1 without YaRN or without a log multiplier).
fn yarn_softmax_factor(scaling: &RopeScaling) -> f64 {
    match *scaling {
        RopeScaling::Yarn { factor, mscale_all_dim, .. } if mscale_all_dim != 0.0 && factor > 1.0 => {
            let m = 0.1 * mscale_all_dim * factor.ln() + 1.0;
            m * m
        }
        _ => 1.0,
    }
}
