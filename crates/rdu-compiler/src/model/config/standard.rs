//! The plain attention decoders: `llama`, `qwen2`, `qwen3`, `qwen3_moe`; also the Qwen MoE
//! rule that `qwen3_next` and `qwen3_5_moe` share.

use serde::Deserialize;
use serde_json::Value;

use super::fields::{layer_kinds, norms, Common, Core, Defaults, LayerKind};
use super::{rope, Ctx, Draft, LayerDraft};
use crate::error::Result;
use crate::model::spec::{Act, Embed, Family, Ffn, Head, Mixer, RopeStyle, Router, SharedExpert};

/// Builds a llama / qwen2 / qwen3 / qwen3_moe model. Llama layers are uniform by
/// construction (the config has no per-layer knob); Qwen2/3 layers differ only in their
/// sliding window, Qwen3-MoE layers also in dense vs MoE.
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
    let rotation = rope::flat(ctx, &common, core.max_ctx, 1e4, 1.0)?.rotation(
        ctx,
        core.head_dim,
        RopeStyle::Neox,
    )?;
    let mixer = Mixer::Attention {
        heads: core.heads,
        kv_heads: core.kv_heads,
        head_dim: core.head_dim,
        qk_norm: matches!(family, Family::Qwen3 | Family::Qwen3Moe),
        output_gate: false,
        qkv_bias: family == Family::Qwen2,
        scale: 1.0 / (core.head_dim as f64).sqrt(),
        rotary_dim: rotation.dim,
    };
    let kinds = sliding.kinds(ctx, &common, &core, family)?;
    let window = if sliding.use_sliding_window == Some(true) {
        sliding.sliding_window.unwrap_or(Some(4096))
    } else {
        None
    };
    let window = window
        .map(|w| ctx.positive(w, "sliding_window"))
        .transpose()?;
    let moe = match family {
        Family::Qwen3Moe => Some(ctx.parse::<QwenMoe>(root)?.rule(
            ctx,
            &core,
            &MoeDefaults::QWEN3_MOE,
        )?),
        _ => None,
    };
    let dense_hidden = dense_hidden(ctx, &common, moe.as_ref(), core.n_layers)?;
    let layers = kinds
        .iter()
        .enumerate()
        .map(|(layer_idx, kind)| LayerDraft {
            mixer: mixer.clone(),
            rotation: Some(rotation.clone()),
            window: if *kind == LayerKind::Sliding {
                window
            } else {
                None
            },
            ffn: ffn(moe.as_ref(), dense_hidden, layer_idx),
            norms: norms(core.eps, false, false),
        })
        .collect();
    Ok(draft(family, &core, layers, false))
}

/// A model's draft around its layers; `unit_offset` is the `(1 + w)` norm convention.
pub(super) fn draft(
    family: Family,
    core: &Core,
    layers: Vec<LayerDraft>,
    unit_offset: bool,
) -> Draft {
    Draft {
        family,
        vocab: core.vocab,
        d_model: core.d_model,
        layers,
        embed: Embed { scale: None },
        head: Head {
            tied: core.tied,
            norm_eps: core.eps,
            norm_unit_offset: unit_offset,
        },
        max_ctx: core.max_ctx,
        prefix: "model.",
        bos: core.bos,
        eos: core.eos.clone(),
    }
}

/// The layer's FFN: MoE where the rule says so, else the dense SwiGLU (`dense_hidden`, from
/// [`dense_hidden`], is present whenever some layer is dense).
pub(super) fn ffn(moe: Option<&MoeRule>, dense_hidden: Option<usize>, layer_idx: usize) -> Ffn {
    match (moe, dense_hidden) {
        (Some(rule), _) if rule.is_moe(layer_idx) => rule.ffn(),
        (_, hidden) => Ffn::Dense {
            hidden: hidden.unwrap_or(0),
            act: Act::Silu,
        },
    }
}

/// `intermediate_size`, required only when some layer is dense.
pub(super) fn dense_hidden(
    ctx: &Ctx,
    common: &Common,
    moe: Option<&MoeRule>,
    n_layers: usize,
) -> Result<Option<usize>> {
    let any_dense = (0..n_layers).any(|layer_idx| moe.is_none_or(|m| !m.is_moe(layer_idx)));
    any_dense.then(|| common.dense_hidden(ctx)).transpose()
}

fn defaults(family: Family) -> Defaults {
    // LlamaConfig / Qwen2Config / Qwen3Config / Qwen3MoeConfig.
    let (head_dim, kv_heads, max_ctx, bos, eos) = match family {
        Family::Llama => (None, None, 2048, Some(1), Some(2)),
        Family::Qwen2 => (None, Some(32), 32768, None, None),
        Family::Qwen3 => (Some(128), Some(32), 32768, None, None),
        _ => (None, Some(4), 32768, None, None),
    };
    Defaults {
        vocab: None,
        head_dim,
        kv_heads,
        max_ctx,
        eps: 1e-6,
        tied: false,
        bos,
        eos,
    }
}

/// Qwen2/3 sliding-window fields.
#[derive(Deserialize)]
struct Sliding {
    /// Default false; the window applies only when true.
    use_sliding_window: Option<bool>,
    /// Default 4096; `null` means no window.
    #[serde(default, deserialize_with = "super::fields::explicit")]
    sliding_window: Option<Option<usize>>,
    /// Default 28: layers at and after this index slide (Qwen2/3; Qwen3-MoE slides everywhere).
    max_window_layers: Option<usize>,
}

impl Sliding {
    fn kinds(
        &self,
        ctx: &Ctx,
        common: &Common,
        core: &Core,
        family: Family,
    ) -> Result<Vec<LayerKind>> {
        let explicit = common.layer_types.as_deref();
        if family == Family::Llama {
            return layer_kinds(ctx, explicit, core.n_layers, &[LayerKind::Full], |_| {
                LayerKind::Full
            });
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

/// The Qwen MoE fields (Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE).
#[derive(Deserialize)]
pub(super) struct QwenMoe {
    num_experts: Option<usize>,
    num_experts_per_tok: Option<usize>,
    moe_intermediate_size: Option<usize>,
    /// Default 1.
    decoder_sparse_step: Option<usize>,
    /// Default empty.
    mlp_only_layers: Option<Vec<usize>>,
    norm_topk_prob: Option<bool>,
    shared_expert_intermediate_size: Option<usize>,
}

/// A family's transformers defaults for [`QwenMoe`]; `None` sizes are required.
pub(super) struct MoeDefaults {
    pub experts: Option<usize>,
    pub top_k: Option<usize>,
    pub expert_hidden: Option<usize>,
    pub norm_topk: bool,
    /// `None`: no shared expert.
    pub shared: Option<usize>,
    /// Every layer is MoE (Qwen3.5-MoE reads neither `mlp_only_layers` nor the step).
    pub every_layer: bool,
}

impl MoeDefaults {
    pub const QWEN3_MOE: MoeDefaults = MoeDefaults {
        experts: None,
        top_k: None,
        expert_hidden: None,
        norm_topk: false,
        shared: None,
        every_layer: false,
    };
}

/// Which layers are MoE and what their block is.
pub(super) struct MoeRule {
    experts: usize,
    top_k: usize,
    expert_hidden: usize,
    step: usize,
    mlp_only: Vec<usize>,
    every_layer: bool,
    shared: Option<SharedExpert>,
    norm_topk: bool,
}

impl QwenMoe {
    pub fn rule(&self, ctx: &Ctx, core: &Core, d: &MoeDefaults) -> Result<MoeRule> {
        let experts = ctx.require(self.num_experts.or(d.experts), "num_experts")?;
        if d.every_layer {
            ctx.positive(experts, "num_experts")?;
        }
        let step = ctx.positive(self.decoder_sparse_step.unwrap_or(1), "decoder_sparse_step")?;
        let mlp_only = self.mlp_only_layers.clone().unwrap_or_default();
        if let Some(bad) = mlp_only.iter().find(|&&l| l >= core.n_layers) {
            return Err(ctx.err(
                "mlp_only_layers",
                format!("layer {bad} does not exist ({} layers)", core.n_layers),
            ));
        }
        let (top_k, expert_hidden) = if experts == 0 {
            (0, 0)
        } else {
            let top_k = ctx.require(self.num_experts_per_tok.or(d.top_k), "num_experts_per_tok")?;
            if top_k == 0 || top_k > experts {
                return Err(ctx.err(
                    "num_experts_per_tok",
                    format!("must be between 1 and num_experts ({experts}), found {top_k}"),
                ));
            }
            let hidden = ctx.require(
                self.moe_intermediate_size.or(d.expert_hidden),
                "moe_intermediate_size",
            )?;
            (top_k, ctx.positive(hidden, "moe_intermediate_size")?)
        };
        let shared = match d
            .shared
            .map(|default| self.shared_expert_intermediate_size.unwrap_or(default))
        {
            Some(0) | None => None,
            Some(hidden) => Some(SharedExpert {
                hidden,
                gated: true,
            }),
        };
        Ok(MoeRule {
            experts,
            top_k,
            expert_hidden,
            step,
            mlp_only,
            every_layer: d.every_layer,
            shared,
            norm_topk: self.norm_topk_prob.unwrap_or(d.norm_topk),
        })
    }
}

impl MoeRule {
    /// transformers: MoE iff `l ∉ mlp_only_layers` and `num_experts > 0` and
    /// `(l + 1) % decoder_sparse_step == 0`.
    pub fn is_moe(&self, layer_idx: usize) -> bool {
        self.every_layer
            || (!self.mlp_only.contains(&layer_idx)
                && self.experts > 0
                && (layer_idx + 1).is_multiple_of(self.step))
    }

    /// Qwen routing: softmax over all experts, top-k, optional renormalisation, no scaling
    /// and no groups.
    fn ffn(&self) -> Ffn {
        Ffn::Moe {
            experts: self.experts,
            top_k: self.top_k,
            expert_hidden: self.expert_hidden,
            act: Act::Silu,
            shared: self.shared.clone(),
            router: Router {
                norm_topk: self.norm_topk,
                scaling: 1.0,
                groups: 1,
                topk_groups: 1,
            },
        }
    }
}
