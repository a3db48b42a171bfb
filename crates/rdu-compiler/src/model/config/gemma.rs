//! Gemma 3: `gemma3_text`, and the `text_config` of the multimodal `gemma3` with
//! `Gemma3TextConfig`'s defaults for what the released configs leave out.

use serde::Deserialize;
use serde_json::Value;

use super::fields::{explicit, layer_kinds, norms, Common, Defaults, LayerKind, Outer};
use super::{rope, Ctx, Draft, LayerDraft};
use crate::error::Result;
use crate::model::spec::{Act, Embed, Family, Ffn, Mixer, RopeStyle};

/// The Gemma-only fields, with `Gemma3TextConfig`'s defaults.
#[derive(Deserialize)]
struct Gemma {
    /// Default 256; the softmax scale is its inverse square root.
    query_pre_attn_scalar: Option<f64>,
    /// Default 4096; `null` means no window.
    #[serde(default, deserialize_with = "explicit")]
    sliding_window: Option<Option<usize>>,
    /// Default 6: layer i is full attention iff (i + 1) % pattern == 0.
    sliding_window_pattern: Option<usize>,
    /// The spelling of the pattern in newer dumps (which also list `layer_types`).
    #[serde(rename = "_sliding_window_pattern")]
    private_sliding_window_pattern: Option<usize>,
    /// Default 10000: the RoPE base of sliding layers (hub layout).
    rope_local_base_freq: Option<f64>,
    /// Default `gelu_pytorch_tanh`.
    hidden_activation: Option<String>,
    attn_logit_softcapping: Option<f64>,
    final_logit_softcapping: Option<f64>,
    use_bidirectional_attention: Option<bool>,
}

/// `Gemma3TextConfig` defaults: vocab 262208, head_dim 256, 4 kv heads, 131072 positions,
/// eps 1e-6, tied, bos 2, eos 1 (rope_theta 1e6 is in [`rope::gemma`]).
const DEFAULTS: Defaults = Defaults {
    vocab: Some(262_208),
    head_dim: Some(256),
    kv_heads: Some(4),
    max_ctx: 131_072,
    eps: 1e-6,
    tied: true,
    bos: Some(2),
    eos: Some(1),
};

/// Builds Gemma 3 from its (text) config; `outer` is the multimodal wrapper's top level,
/// whose checkpoint names sit under `language_model.model.`.
pub(super) fn build(ctx: &Ctx, text: &Value, outer: Option<&Outer>) -> Result<Draft> {
    let common: Common = ctx.parse(text)?;
    let gemma: Gemma = ctx.parse(text)?;
    let core = common.core(ctx, &DEFAULTS, outer)?;
    common.check_no_bias(ctx)?;
    match gemma.hidden_activation.as_deref() {
        None | Some("gelu_pytorch_tanh") => {}
        Some(other) => {
            return Err(
                ctx.err("hidden_activation", format!("`{other}` is not supported; expected `gelu_pytorch_tanh`"))
            )
        }
    }
    for (value, field) in [
        (gemma.attn_logit_softcapping, "attn_logit_softcapping"),
        (gemma.final_logit_softcapping, "final_logit_softcapping"),
    ] {
        if value.is_some() {
            return Err(ctx.err(field, "logit soft-capping is not supported (Gemma 3 sets it to null)"));
        }
    }
    if gemma.use_bidirectional_attention == Some(true) {
        return Err(ctx.err("use_bidirectional_attention", "only causal attention is supported"));
    }
    let scalar = ctx.positive_f64(gemma.query_pre_attn_scalar.unwrap_or(256.0), "query_pre_attn_scalar")?;
    let window = gemma.sliding_window.unwrap_or(Some(4096));
    let window = window.map(|w| ctx.positive(w, "sliding_window")).transpose()?;
    let pattern = gemma.sliding_window_pattern.or(gemma.private_sliding_window_pattern).unwrap_or(6);
    let pattern = ctx.positive(pattern, "sliding_window_pattern")?;
    let allowed = [LayerKind::Sliding, LayerKind::Full];
    let kinds = layer_kinds(ctx, common.layer_types.as_deref(), core.n_layers, &allowed, |layer_idx| {
        if (layer_idx + 1).is_multiple_of(pattern) {
            LayerKind::Full
        } else {
            LayerKind::Sliding
        }
    })?;
    let (sliding_rope, full_rope) = rope::gemma(ctx, &common, gemma.rope_local_base_freq, core.max_ctx)?;
    let sliding_rotation = sliding_rope.rotation(ctx, core.head_dim, RopeStyle::Neox)?;
    let full_rotation = full_rope.rotation(ctx, core.head_dim, RopeStyle::Neox)?;
    let mixer = Mixer::Attention {
        heads: core.heads,
        kv_heads: core.kv_heads,
        head_dim: core.head_dim,
        qk_norm: true,
        qk_norm_whole: false,
        output_gate: false,
        qkv_bias: false,
        o_bias: false,
        sinks: false,
        scale: 1.0 / scalar.sqrt(),
        rotary_dim: core.head_dim,
    };
    let ffn = Ffn::Dense { hidden: common.dense_hidden(ctx)?, act: Act::GeluTanh };
    let layers = kinds
        .iter()
        .map(|kind| {
            let (rotation, window) = match kind {
                LayerKind::Sliding => (sliding_rotation.clone(), window),
                _ => (full_rotation.clone(), None),
            };
            LayerDraft {
                mixer: mixer.clone(),
                rotation: Some(rotation),
                window,
                ffn: ffn.clone(),
                norms: norms(core.eps, true, true),
            }
        })
        .collect();
    let prefix = if outer.is_some() { "language_model.model." } else { "model." };
    // √d_model computed in f32, as transformers does before casting to the weight dtype.
    let embed = Embed { scale: Some(f64::from((core.d_model as f32).sqrt())) };
    Ok(Draft { prefix, embed, ..Draft::new(Family::Gemma3, &core, layers, true) })
}
