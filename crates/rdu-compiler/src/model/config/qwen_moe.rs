//! The Qwen MoE rule shared by `qwen3_moe`, `qwen3_next` and `qwen3_5_moe`: which layers
//! are MoE, and their routed (+ gated shared) expert block.

use serde::Deserialize;

use super::fields::{Common, Core};
use super::Ctx;
use crate::error::Result;
use crate::model::spec::{Act, Ffn, Router, SharedExpert};

/// The layer's FFN: MoE where the rule says so, else the dense SwiGLU (`dense_hidden`, from
/// [`dense_hidden`], is present whenever some layer is dense).
pub(super) fn ffn(moe: Option<&MoeRule>, dense_hidden: Option<usize>, layer_idx: usize) -> Ffn {
    match (moe, dense_hidden) {
        (Some(rule), _) if rule.is_moe(layer_idx) => rule.ffn(),
        (_, hidden) => Ffn::Dense { hidden: hidden.unwrap_or(0), act: Act::Silu },
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

/// The Qwen MoE fields (Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE).
#[derive(Deserialize)]
pub(super) struct QwenMoe {
    num_experts: Option<usize>,
    /// transformers 5's name for `num_experts` (Qwen3-MoE's `save_pretrained` writes it).
    num_local_experts: Option<usize>,
    num_experts_per_tok: Option<usize>,
    moe_intermediate_size: Option<usize>,
    /// Mixtral's expert width.
    intermediate_size: Option<usize>,
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
    /// The field holding each expert's width.
    pub expert_hidden_field: &'static str,
}

impl MoeDefaults {
    pub const QWEN3_MOE: MoeDefaults = MoeDefaults {
        experts: None,
        top_k: None,
        expert_hidden: None,
        norm_topk: false,
        shared: None,
        every_layer: false,
        expert_hidden_field: "moe_intermediate_size",
    };

    /// Mixtral: every layer MoE, the top-k of the softmax renormalised, each expert
    /// `intermediate_size` wide (`MixtralSparseMoeBlock`).
    pub const MIXTRAL: MoeDefaults = MoeDefaults {
        experts: None,
        top_k: None,
        expert_hidden: None,
        norm_topk: true,
        shared: None,
        every_layer: true,
        expert_hidden_field: "intermediate_size",
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
        let experts = ctx.require(self.num_experts.or(self.num_local_experts).or(d.experts), "num_experts")?;
        if d.every_layer {
            ctx.positive(experts, "num_experts")?;
        }
        let step = ctx.positive(self.decoder_sparse_step.unwrap_or(1), "decoder_sparse_step")?;
        let mlp_only = self.mlp_only_layers.clone().unwrap_or_default();
        if let Some(bad) = mlp_only.iter().find(|&&l| l >= core.n_layers) {
            return Err(ctx.err("mlp_only_layers", format!("layer {bad} does not exist ({} layers)", core.n_layers)));
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
            let field = d.expert_hidden_field;
            let given = if field == "intermediate_size" { self.intermediate_size } else { self.moe_intermediate_size };
            let hidden = ctx.require(given.or(d.expert_hidden), field)?;
            (top_k, ctx.positive(hidden, field)?)
        };
        let shared = match d.shared.map(|default| self.shared_expert_intermediate_size.unwrap_or(default)) {
            Some(0) | None => None,
            Some(hidden) => Some(SharedExpert { hidden, gated: true }),
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
            || (!self.mlp_only.contains(&layer_idx) && self.experts > 0 && (layer_idx + 1).is_multiple_of(self.step))
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
            router: Router::softmax(self.norm_topk, 1.0, 1, 1),
            bias: false,
        }
    }
}
