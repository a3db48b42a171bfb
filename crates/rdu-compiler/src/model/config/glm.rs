//! GLM-4.5 / 4.5-Air / 4.6 (`glm4_moe`): grouped-query attention with q/k/v biases
//! (`attention_bias`; o_proj has none), optional per-head q/k norms (`use_qk_norm`), partial
//! neox RoPE (`partial_rotary_factor`, default 0.5), dense first layers, then routed + shared
//! experts routed as DeepSeek-V3 routes (`Glm4MoeTopkRouter`).

use serde::Deserialize;
use serde_json::Value;

use super::experts::{dense_then_moe, ExpertDefaults, ExpertFields};
use super::fields::{Common, Defaults};
use super::{rope, Ctx, Draft};
use crate::error::Result;
use crate::model::spec::{Family, RopeStyle};

/// The GLM-only fields.
#[derive(Deserialize)]
struct Glm {
    /// Default false.
    use_qk_norm: Option<bool>,
}

/// Builds a GLM-4.5 model: layer `l` is MoE iff `l >= first_k_dense_replace`.
pub(super) fn build(ctx: &Ctx, root: &Value) -> Result<Draft> {
    let common: Common = ctx.parse(root)?;
    let glm: Glm = ctx.parse(root)?;
    let experts: ExpertFields = ctx.parse(root)?;
    // Glm4MoeConfig: 8 kv heads, 131072 positions, eps 1e-5, untied, no bos/eos.
    let defaults = Defaults {
        vocab: None,
        head_dim: None,
        kv_heads: Some(8),
        max_ctx: 131_072,
        eps: 1e-5,
        tied: false,
        bos: None,
        eos: None,
    };
    let core = common.core(ctx, &defaults, None)?;
    common.check_silu(ctx)?;
    // `attention_bias` puts biases on q, k and v only (Glm4MoeAttention's o_proj has none).
    if common.mlp_bias == Some(true) {
        return Err(ctx.err("mlp_bias", "biased MLP projections are not supported"));
    }
    let qkv_bias = common.attention_bias.unwrap_or(false);
    let rotation = rope::flat(ctx, &common, core.max_ctx, 1e4, 0.5)?.rotation(ctx, core.head_dim, RopeStyle::Neox)?;
    let mixer = core.attention(glm.use_qk_norm.unwrap_or(false), false, qkv_bias, rotation.dim);
    let d = &ExpertDefaults::GLM4_MOE;
    let is_moe = experts.moe_layers(ctx, d, core.n_layers)?;
    let moe = is_moe.contains(&true).then(|| experts.noaux_ffn(ctx, d)).transpose()?;
    let layers = dense_then_moe(ctx, &common, &core, (&mixer, &rotation), moe.as_ref(), &is_moe)?;
    Ok(Draft { mtp_layers: experts.mtp_layers(d), ..Draft::new(Family::Glm4Moe, &core, layers, false) })
}
