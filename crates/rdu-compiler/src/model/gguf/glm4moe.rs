//! `glm4moe` (GLM-4.5 / 4.5-Air / 4.6) as llama.cpp's converter writes it: grouped-query
//! attention (q/k/v biases and per-head q/k norms where the file holds `attn_q.bias` and
//! `attn_q_norm.weight`), neox RoPE over `rope.dimension_count` dims, the pre-FFN norm stored as
//! `post_attention_norm`, `leading_dense_block_count` dense layers, then stacked routed experts
//! plus shared experts routed by sigmoid scores with the selection bias (`experts.rs`). The
//! converter keeps the multi-token-prediction block: `block_count` counts it and
//! `nextn_predict_layers` says how many there are; they are not decoder layers.

use super::experts::{leading_dense_then_routed, split_nextn, ExpertRules};
use super::{attention, basics, finish, rope_scaling, Attention, Basics, Meta, Shape};
use crate::error::Result;
use crate::model::spec::{Embed, Family, Mixer, ModelSpec, RopeStyle, Rotation, Scoring};

const ARCH: &str = "glm4moe";

/// llama.cpp's `glm4moe`: sigmoid without `expert_gating_func`.
const RULES: ExpertRules = ExpertRules { scoring: Scoring::Sigmoid, always_norm: false, reads_scale: true };

pub(super) fn build(m: &Meta, name: &str) -> Result<ModelSpec> {
    let Basics { d_model, blocks, eps, max_ctx, vocab } = basics(m, ARCH)?;
    let (n_layers, nextn) = split_nextn(m, ARCH, blocks)?;
    let Attention { heads, kv_heads, head_dim, rotary_dim, base, scale } = attention(m, ARCH, d_model)?;
    let rotation = Rotation { base, dim: rotary_dim, style: RopeStyle::Neox, scaling: rope_scaling(m, ARCH)? };
    let mixer = Mixer::Attention {
        heads,
        kv_heads,
        head_dim,
        qk_norm: m.has_tensor("blk.0.attn_q_norm.weight"),
        qk_norm_whole: false,
        output_gate: false,
        qkv_bias: m.has_tensor("blk.0.attn_q.bias"),
        o_bias: false,
        sinks: false,
        scale,
        rotary_dim,
    };
    let layers = leading_dense_then_routed(m, ARCH, &RULES, &mixer, n_layers, eps)?;
    let shape = Shape { family: Family::Glm4Moe, vocab, d_model, eps, max_ctx };
    let spec = finish(m, name, shape, layers, vec![rotation], Embed { scale: None })?;
    Ok(ModelSpec { mtp_layers: nextn, ..spec })
}
