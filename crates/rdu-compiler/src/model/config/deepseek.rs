//! DeepSeek-V2 / V2-Lite (`deepseek_v2`) and DeepSeek-V3 / R1 / V3.1 and Kimi K2
//! (`deepseek_v3`, `kimi_k2`): multi-head latent attention with interleaved, YaRN-scaled RoPE,
//! dense first layers, then routed + shared experts (softmax routing for V2, `noaux_tc` for V3).

use serde::Deserialize;
use serde_json::Value;

use super::experts::{dense_then_moe, ExpertDefaults, ExpertFields};
use super::fields::{explicit, Common, Core, Defaults};
use super::{rope, Ctx, Draft};
use crate::error::Result;
use crate::model::spec::{Family, Mixer, RopeStyle, Rotation};

/// The MLA fields, with `DeepseekV2Config`'s defaults (V3's are the same).
#[derive(Deserialize)]
struct Deepseek {
    /// Default 1536; `null` means a plain `q_proj` (V2-Lite).
    #[serde(default, deserialize_with = "explicit")]
    q_lora_rank: Option<Option<usize>>,
    /// Default 512.
    kv_lora_rank: Option<usize>,
    /// Default 128.
    qk_nope_head_dim: Option<usize>,
    /// Default 64.
    qk_rope_head_dim: Option<usize>,
    /// Default 128.
    v_head_dim: Option<usize>,
    /// V3 only, default true: the rope dims are rotated in interleaved pairs (else neox halves).
    rope_interleave: Option<bool>,
}

/// Which DeepSeek generation a config is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Version {
    /// `deepseek_v2`: softmax routing.
    V2,
    /// `deepseek_v3` and `kimi_k2`: `noaux_tc` routing, multi-token-prediction layers.
    V3,
}

/// Builds DeepSeek-V2 or V3. Layer `l` is MoE iff `l >= first_k_dense_replace` and
/// `l % moe_layer_freq == 0`; the others are dense SwiGLUs of `intermediate_size`.
pub(super) fn build(ctx: &Ctx, root: &Value, version: Version) -> Result<Draft> {
    let common: Common = ctx.parse(root)?;
    let ds: Deepseek = ctx.parse(root)?;
    let moe_fields: ExpertFields = ctx.parse(root)?;
    // DeepseekV2Config: kv heads = heads, 2048 positions, eps 1e-6, untied, bos 1, eos 2;
    // DeepseekV3Config: 4096 positions, bos 0, eos 1.
    let (max_ctx, bos, eos, expert_defaults) = match version {
        Version::V2 => (2048, 1, 2, &ExpertDefaults::DEEPSEEK_V2),
        Version::V3 => (4096, 0, 1, &ExpertDefaults::DEEPSEEK_V3),
    };
    let defaults = Defaults {
        vocab: None,
        head_dim: None,
        kv_heads: None,
        max_ctx,
        eps: 1e-6,
        tied: false,
        bos: Some(bos),
        eos: Some(eos),
    };
    // MLA has no head_dim of its own (transformers overwrites it with qk_rope_head_dim).
    let common = Common { head_dim: Some(1), ..common };
    let core = common.core(ctx, &defaults, None)?;
    common.check_silu(ctx)?;
    common.check_no_bias(ctx)?;
    let (mixer, rotation) = mla(ctx, &common, &core, &ds, version)?;
    let is_moe = moe_fields.moe_layers(ctx, expert_defaults, core.n_layers)?;
    let moe = match version {
        _ if !is_moe.contains(&true) => None,
        Version::V2 => Some(moe_fields.softmax_ffn(ctx, expert_defaults)?),
        Version::V3 => Some(moe_fields.noaux_ffn(ctx, expert_defaults)?),
    };
    let layers = dense_then_moe(ctx, &common, &core, (&mixer, &rotation), moe.as_ref(), &is_moe)?;
    let family = if version == Version::V2 { Family::DeepseekV2 } else { Family::DeepseekV3 };
    let mtp_layers = if version == Version::V2 { 0 } else { moe_fields.mtp_layers(expert_defaults) };
    Ok(Draft { mtp_layers, ..Draft::new(family, &core, layers, false) })
}

/// The multi-head latent attention and its rotation: interleaved pairs (V2, and V3 unless
/// `rope_interleave` is false), YaRN-scaled.
fn mla(ctx: &Ctx, common: &Common, core: &Core, ds: &Deepseek, version: Version) -> Result<(Mixer, Rotation)> {
    let qk_nope = ctx.positive(ds.qk_nope_head_dim.unwrap_or(128), "qk_nope_head_dim")?;
    let qk_rope = ctx.positive(ds.qk_rope_head_dim.unwrap_or(64), "qk_rope_head_dim")?;
    let rope = rope::flat(ctx, common, core.max_ctx, 1e4, 1.0)?;
    // The rope part of each head is rotated whole; transformers ignores partial_rotary_factor.
    let rope = rope::Rope { partial: 1.0, ..rope };
    let style = match (version, ds.rope_interleave) {
        (Version::V3, Some(false)) => RopeStyle::Neox,
        _ => RopeStyle::Interleaved,
    };
    let rotation = rope.rotation(ctx, qk_rope, style)?;
    let scale = rope::yarn_attention_factor(&rotation.scaling) / (qk_nope as f64 + qk_rope as f64).sqrt();
    let q_lora_rank = match ds.q_lora_rank.unwrap_or(Some(1536)) {
        Some(rank) => Some(ctx.positive(rank, "q_lora_rank")?),
        None => None,
    };
    let mixer = Mixer::Mla {
        heads: core.heads,
        q_lora_rank,
        kv_lora_rank: ctx.positive(ds.kv_lora_rank.unwrap_or(512), "kv_lora_rank")?,
        qk_nope,
        qk_rope,
        v_dim: ctx.positive(ds.v_head_dim.unwrap_or(128), "v_head_dim")?,
        scale,
    };
    Ok((mixer, rotation))
}
