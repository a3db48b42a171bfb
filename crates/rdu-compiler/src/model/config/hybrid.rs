//! The Gated DeltaNet hybrids: `qwen3_next` and the `text_config` of `qwen3_5` /
//! `qwen3_5_moe` (linear-attention layers, with gated full attention every few layers).

use serde::Deserialize;
use serde_json::Value;

use super::fields::{layer_kinds, norms, Common, Core, Defaults, LayerKind, Outer};
use super::qwen_moe::{dense_hidden, ffn, MoeDefaults, MoeRule, QwenMoe};
use super::{rope, Ctx, Draft, LayerDraft};
use crate::error::Result;
use crate::model::spec::{Family, GdnLayout, Mixer, RopeStyle};

/// Which hybrid.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Qwen3-Next: grouped GDN projections, MoE by the Qwen rule.
    Next,
    /// Qwen3.5 / 3.6 dense: split GDN projections, a dense SwiGLU in every layer.
    Dense,
    /// Qwen3.5 / 3.6 MoE: split GDN projections, MoE in every layer.
    Moe,
}

/// The Gated DeltaNet and hybrid-pattern fields. Defaults from `Qwen3NextConfig` /
/// `Qwen3_5TextConfig` (the same for both): kernel 4, key/value head dim 128, 16 key heads,
/// 32 value heads, full attention every 4th layer.
#[derive(Deserialize)]
struct Gdn {
    linear_conv_kernel_dim: Option<usize>,
    linear_key_head_dim: Option<usize>,
    linear_value_head_dim: Option<usize>,
    linear_num_key_heads: Option<usize>,
    linear_num_value_heads: Option<usize>,
    full_attention_interval: Option<usize>,
    /// Qwen3.5 only; default true. transformers' `Qwen3_5Attention` always gates and does not
    /// read the key; it is honoured here so a config that turns it off is not silently wrong.
    attn_output_gate: Option<bool>,
}

/// Builds a hybrid from its (text) config; `outer` is the multimodal wrapper's top level.
pub(super) fn build(ctx: &Ctx, text: &Value, outer: Option<&Outer>, kind: Kind) -> Result<Draft> {
    let common: Common = ctx.parse(text)?;
    let gdn: Gdn = ctx.parse(text)?;
    let defaults = Defaults {
        // Qwen3_5TextConfig / Qwen3_5MoeTextConfig default vocab_size 248320.
        vocab: if kind == Kind::Next { None } else { Some(248_320) },
        head_dim: Some(256),
        kv_heads: Some(if kind == Kind::Dense { 4 } else { 2 }),
        max_ctx: 32768,
        eps: 1e-6,
        tied: false,
        bos: None,
        eos: None,
    };
    let core = common.core(ctx, &defaults, outer)?;
    common.check_silu(ctx)?;
    common.check_no_bias(ctx)?;
    // partial_rotary_factor defaults to 0.25 in both config classes.
    let rotation = rope::flat(ctx, &common, core.max_ctx, 1e4, 0.25)?.rotation(ctx, core.head_dim, RopeStyle::Neox)?;
    let output_gate = kind == Kind::Next || gdn.attn_output_gate.unwrap_or(true);
    let attention = core.attention(true, output_gate, false, rotation.dim);
    let deltanet = deltanet(ctx, &gdn, kind)?;
    let interval = ctx.positive(gdn.full_attention_interval.unwrap_or(4), "full_attention_interval")?;
    let allowed = [LayerKind::Linear, LayerKind::Full];
    let kinds = layer_kinds(ctx, common.layer_types.as_deref(), core.n_layers, &allowed, |layer_idx| {
        if (layer_idx + 1).is_multiple_of(interval) {
            LayerKind::Full
        } else {
            LayerKind::Linear
        }
    })?;
    let moe = moe(ctx, text, &core, kind)?;
    let dense_hidden = dense_hidden(ctx, &common, moe.as_ref(), core.n_layers)?;
    let layers = kinds
        .iter()
        .enumerate()
        .map(|(layer_idx, layer_kind)| {
            let (mixer, rotation) = match layer_kind {
                LayerKind::Linear => (deltanet.clone(), None),
                _ => (attention.clone(), Some(rotation.clone())),
            };
            LayerDraft {
                mixer,
                rotation,
                window: None,
                ffn: ffn(moe.as_ref(), dense_hidden, layer_idx),
                norms: norms(core.eps, true, false),
            }
        })
        .collect();
    // A multimodal wrapper keeps its language model under `model.language_model.`; a
    // text-only `Qwen3_5ForCausalLM` (`qwen3_5_text`) under `model.`.
    let (family, prefix) = match (kind, outer.is_some()) {
        (Kind::Next, _) => (Family::Qwen3Next, "model."),
        (_, true) => (Family::Qwen35, "model.language_model."),
        (_, false) => (Family::Qwen35, "model."),
    };
    Ok(Draft { prefix, ..Draft::new(family, &core, layers, true) })
}

/// The Gated DeltaNet mixer of the `linear_*` keys (transformers' defaults).
fn deltanet(ctx: &Ctx, gdn: &Gdn, kind: Kind) -> Result<Mixer> {
    let k_heads = ctx.positive(gdn.linear_num_key_heads.unwrap_or(16), "linear_num_key_heads")?;
    let v_heads = ctx.positive(gdn.linear_num_value_heads.unwrap_or(32), "linear_num_value_heads")?;
    if !v_heads.is_multiple_of(k_heads) {
        return Err(ctx.err(
            "linear_num_value_heads",
            format!("{v_heads} value heads are not a multiple of {k_heads} key heads"),
        ));
    }
    Ok(Mixer::GatedDeltaNet {
        k_heads,
        v_heads,
        k_dim: ctx.positive(gdn.linear_key_head_dim.unwrap_or(128), "linear_key_head_dim")?,
        v_dim: ctx.positive(gdn.linear_value_head_dim.unwrap_or(128), "linear_value_head_dim")?,
        conv_kernel: ctx.positive(gdn.linear_conv_kernel_dim.unwrap_or(4), "linear_conv_kernel_dim")?,
        layout: if kind == Kind::Next { GdnLayout::Grouped } else { GdnLayout::Split },
    })
}

/// The MoE rule of Qwen3-Next and Qwen3.5 / 3.6 MoE (`None`: Qwen3.5 / 3.6 dense).
fn moe(ctx: &Ctx, text: &Value, core: &Core, kind: Kind) -> Result<Option<MoeRule>> {
    Ok(match kind {
        Kind::Dense => None,
        // Qwen3NextConfig: 512 experts, top 10, size 512, shared 512, norm_topk_prob true;
        // they are required here except the shared size and norm_topk_prob.
        Kind::Next => {
            let d = MoeDefaults { shared: Some(512), norm_topk: true, ..MoeDefaults::QWEN3_MOE };
            Some(ctx.parse::<QwenMoe>(text)?.rule(ctx, core, &d)?)
        }
        // Qwen3_5MoeTextConfig: 256 experts, top 8, size 512, shared 512. Its router always
        // renormalises the top-k weights (it reads no norm_topk_prob), hence the default true.
        Kind::Moe => {
            let d = MoeDefaults {
                experts: Some(256),
                top_k: Some(8),
                expert_hidden: Some(512),
                norm_topk: true,
                shared: Some(512),
                every_layer: true,
                expert_hidden_field: "moe_intermediate_size",
            };
            Some(ctx.parse::<QwenMoe>(text)?.rule(ctx, core, &d)?)
        }
    })
}
