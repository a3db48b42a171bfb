//! The plain attention decoders: `llama`, `qwen2`, `qwen3`, `qwen3_moe`, `mistral` (Llama
//! with a sliding window on every layer) and `mixtral` (Mistral with a softmax top-k MoE on
//! every layer).

use serde::Deserialize;
use serde_json::Value;

use super::fields::{layer_kinds, norms, Common, Core, Defaults, LayerKind};
use super::qwen_moe::{dense_hidden, ffn, MoeDefaults, QwenMoe};
use super::{rope, Ctx, Draft, LayerDraft};
use crate::error::Result;
use crate::model::spec::{Family, RopeStyle};

/// Builds a llama / qwen2 / qwen3 / qwen3_moe / mistral / mixtral model. Llama, Mistral and
/// Mixtral layers are uniform by construction (their configs have no per-layer knob); Qwen2/3
/// layers differ only in their sliding window, Qwen3-MoE layers also in dense vs MoE.
pub(super) fn build(ctx: &Ctx, root: &Value, family: Family) -> Result<Draft> {
    let common: Common = ctx.parse(root)?;
    let sliding: Sliding = ctx.parse(root)?;
    let defaults = defaults(family);
    let core = common.core(ctx, &defaults, None)?;
    common.check_silu(ctx)?;
    // Qwen2's q/k/v always carry biases and its o_proj never does; it reads no bias flag.
    if family != Family::Qwen2 {
        common.check_no_bias(ctx)?;
    }
    let theta = if family == Family::Mixtral { 1e6 } else { 1e4 };
    let rotation = rope::flat(ctx, &common, core.max_ctx, theta, 1.0)?.rotation(ctx, core.head_dim, RopeStyle::Neox)?;
    let qk_norm = matches!(family, Family::Qwen3 | Family::Qwen3Moe);
    let mixer = core.attention(qk_norm, false, family == Family::Qwen2, rotation.dim);
    let kinds = sliding.kinds(ctx, &common, &core, family)?;
    let window = sliding.window(family).map(|w| ctx.positive(w, "sliding_window")).transpose()?;
    let moe = match family {
        Family::Qwen3Moe => Some(ctx.parse::<QwenMoe>(root)?.rule(ctx, &core, &MoeDefaults::QWEN3_MOE)?),
        Family::Mixtral => Some(ctx.parse::<QwenMoe>(root)?.rule(ctx, &core, &MoeDefaults::MIXTRAL)?),
        _ => None,
    };
    let dense_hidden = dense_hidden(ctx, &common, moe.as_ref(), core.n_layers)?;
    let layers = kinds
        .iter()
        .enumerate()
        .map(|(layer_idx, kind)| LayerDraft {
            mixer: mixer.clone(),
            rotation: Some(rotation.clone()),
            window: if *kind == LayerKind::Sliding { window } else { None },
            ffn: ffn(moe.as_ref(), dense_hidden, layer_idx),
            norms: norms(core.eps, false, false),
        })
        .collect();
    Ok(Draft::new(family, &core, layers, false))
}

fn defaults(family: Family) -> Defaults {
    // LlamaConfig / Qwen2Config / Qwen3Config / Qwen3MoeConfig / MistralConfig / MixtralConfig.
    let (head_dim, kv_heads, max_ctx, bos, eos) = match family {
        Family::Llama => (None, None, 2048, Some(1), Some(2)),
        Family::Qwen2 => (None, Some(32), 32768, None, None),
        Family::Qwen3 => (Some(128), Some(32), 32768, None, None),
        Family::Mistral | Family::Mixtral => (None, Some(8), 4096 * 32, Some(1), Some(2)),
        _ => (None, Some(4), 32768, None, None),
    };
    let eps = if family == Family::Mixtral { 1e-5 } else { 1e-6 };
    Defaults { vocab: None, head_dim, kv_heads, max_ctx, eps, tied: false, bos, eos }
}

/// Qwen2/3 (and Mistral/Mixtral) sliding-window fields.
#[derive(Deserialize)]
struct Sliding {
    /// Default false; the window applies only when true (Qwen2/3; Mistral and Mixtral read
    /// no such flag: their window applies whenever it is set).
    use_sliding_window: Option<bool>,
    /// Default 4096 (Qwen2/3, Mistral) or none (Mixtral); `null` means no window.
    #[serde(default, deserialize_with = "super::fields::explicit")]
    sliding_window: Option<Option<usize>>,
    /// Default 28: layers at and after this index slide (Qwen2/3; Qwen3-MoE slides everywhere).
    max_window_layers: Option<usize>,
}

impl Sliding {
    /// The window of the sliding layers, as the family's transformers config reads it.
    fn window(&self, family: Family) -> Option<usize> {
        match family {
            Family::Mistral => self.sliding_window.unwrap_or(Some(4096)),
            Family::Mixtral => self.sliding_window.flatten(),
            _ if self.use_sliding_window == Some(true) => self.sliding_window.unwrap_or(Some(4096)),
            _ => None,
        }
    }

    fn kinds(&self, ctx: &Ctx, common: &Common, core: &Core, family: Family) -> Result<Vec<LayerKind>> {
        let explicit = common.layer_types.as_deref();
        if family == Family::Llama {
            return layer_kinds(ctx, explicit, core.n_layers, &[LayerKind::Full], |_| LayerKind::Full);
        }
        if matches!(family, Family::Mistral | Family::Mixtral) {
            // Every layer slides when a window is set (transformers' `sliding_window` mask).
            let kind = if self.window(family).is_some() { LayerKind::Sliding } else { LayerKind::Full };
            return layer_kinds(ctx, explicit, core.n_layers, &[kind], |_| kind);
        }
        let slides = self.use_sliding_window == Some(true) && self.sliding_window != Some(None);
        let first = match family {
            Family::Qwen3Moe => 0,
            _ => self.max_window_layers.unwrap_or(28),
        };
        let allowed = [LayerKind::Full, LayerKind::Sliding];
        layer_kinds(ctx, explicit, core.n_layers, &allowed, |layer_idx| {
            if slides && layer_idx >= first {
                LayerKind::Sliding
            } else {
                LayerKind::Full
            }
        })
    }
}
