//! The routed + shared expert fields DeepSeek-V2, DeepSeek-V3 (and Kimi K2) and GLM-4.5 share
//! (`n_routed_experts`, `first_k_dense_replace`, `n_group`, …), and their two routers:
//! DeepSeek-V2's softmax (`greedy` / `group_limited_greedy`) and DeepSeek-V3's `noaux_tc`
//! (sigmoid scores, `e_score_correction_bias`, groups scored by their two best experts).

use serde::Deserialize;

use super::fields::{explicit, layer_kinds, norms, Common, Core, LayerKind};
use super::{Ctx, LayerDraft};
use crate::error::Result;
use crate::model::spec::{Act, Ffn, Mixer, Rotation, Router, SharedExpert};

/// The layers of a model of one mixer whose layer `l` is MoE iff `is_moe[l]` (the expert
/// block `moe`), else a dense SwiGLU of `intermediate_size`; full attention only (`layer_types`).
pub(super) fn dense_then_moe(
    ctx: &Ctx,
    common: &Common,
    core: &Core,
    (mixer, rotation): (&Mixer, &Rotation),
    moe: Option<&Ffn>,
    is_moe: &[bool],
) -> Result<Vec<LayerDraft>> {
    let dense_hidden = is_moe.contains(&false).then(|| common.dense_hidden(ctx)).transpose()?;
    let kinds =
        layer_kinds(ctx, common.layer_types.as_deref(), core.n_layers, &[LayerKind::Full], |_| LayerKind::Full)?;
    Ok((0..kinds.len())
        .map(|layer_idx| LayerDraft {
            mixer: mixer.clone(),
            rotation: Some(rotation.clone()),
            window: None,
            ffn: match moe {
                Some(moe) if is_moe[layer_idx] => moe.clone(),
                // `dense_hidden` is present whenever some layer is dense.
                _ => Ffn::Dense { hidden: dense_hidden.unwrap_or(0), act: Act::Silu },
            },
            norms: norms(core.eps, false, false),
        })
        .collect())
}

/// The expert fields, each absent or `null` falling back to the family's [`ExpertDefaults`].
#[derive(Deserialize)]
pub(super) struct ExpertFields {
    n_routed_experts: Option<usize>,
    /// `null` means no shared experts.
    #[serde(default, deserialize_with = "explicit")]
    n_shared_experts: Option<Option<usize>>,
    num_experts_per_tok: Option<usize>,
    moe_intermediate_size: Option<usize>,
    /// Layers before this index are dense.
    first_k_dense_replace: Option<usize>,
    /// Default 1 (DeepSeek's remote code; transformers does not read it).
    moe_layer_freq: Option<usize>,
    n_group: Option<usize>,
    topk_group: Option<usize>,
    topk_method: Option<String>,
    routed_scaling_factor: Option<f64>,
    norm_topk_prob: Option<bool>,
    scoring_func: Option<String>,
    /// Multi-token-prediction layers the checkpoint holds after the decoder's.
    num_nextn_predict_layers: Option<usize>,
}

/// A family's transformers defaults for [`ExpertFields`].
pub(super) struct ExpertDefaults {
    pub n_shared: usize,
    pub first_dense: usize,
    pub groups: usize,
    pub topk_groups: usize,
    pub norm_topk: bool,
    pub scaling: f64,
    pub mtp: usize,
}

impl ExpertDefaults {
    /// `DeepseekV2Config`.
    pub const DEEPSEEK_V2: ExpertDefaults = ExpertDefaults {
        n_shared: 2,
        first_dense: 0,
        groups: 1,
        topk_groups: 1,
        norm_topk: false,
        scaling: 1.0,
        mtp: 0,
    };
    /// `DeepseekV3Config`.
    pub const DEEPSEEK_V3: ExpertDefaults = ExpertDefaults {
        n_shared: 1,
        first_dense: 3,
        groups: 8,
        topk_groups: 4,
        norm_topk: true,
        scaling: 2.5,
        mtp: 1,
    };
    /// `Glm4MoeConfig`.
    pub const GLM4_MOE: ExpertDefaults = ExpertDefaults {
        n_shared: 1,
        first_dense: 1,
        groups: 1,
        topk_groups: 1,
        norm_topk: true,
        scaling: 1.0,
        mtp: 1,
    };
}

impl ExpertFields {
    /// Layer `l` is MoE iff `l >= first_k_dense_replace` and `l % moe_layer_freq == 0`.
    pub fn moe_layers(&self, ctx: &Ctx, d: &ExpertDefaults, n_layers: usize) -> Result<Vec<bool>> {
        let first_dense = self.first_k_dense_replace.unwrap_or(d.first_dense);
        let freq = ctx.positive(self.moe_layer_freq.unwrap_or(1), "moe_layer_freq")?;
        Ok((0..n_layers).map(|l| l >= first_dense && l.is_multiple_of(freq)).collect())
    }

    /// The multi-token-prediction layers the config says the checkpoint holds.
    pub fn mtp_layers(&self, d: &ExpertDefaults) -> usize {
        self.num_nextn_predict_layers.unwrap_or(d.mtp)
    }

    /// The expert count, top-k and expert size, and the shared experts.
    fn experts(&self, ctx: &Ctx, d: &ExpertDefaults) -> Result<(usize, usize, usize, Option<SharedExpert>)> {
        let experts = ctx.require(self.n_routed_experts, "n_routed_experts")?;
        let experts = ctx.positive(experts, "n_routed_experts")?;
        let top_k = ctx.require(self.num_experts_per_tok, "num_experts_per_tok")?;
        if top_k == 0 || top_k > experts {
            return Err(ctx.err(
                "num_experts_per_tok",
                format!("must be between 1 and n_routed_experts ({experts}), found {top_k}"),
            ));
        }
        let expert_hidden = ctx.require(self.moe_intermediate_size, "moe_intermediate_size")?;
        let expert_hidden = ctx.positive(expert_hidden, "moe_intermediate_size")?;
        let n_shared = self.n_shared_experts.unwrap_or(Some(d.n_shared)).unwrap_or(0);
        let shared = SharedExpert::ungated(n_shared, expert_hidden).map_err(|e| ctx.err("n_shared_experts", e))?;
        Ok((experts, top_k, expert_hidden, shared))
    }

    /// `n_group` groups of the experts, `topk_group` of them kept, holding at least `top_k`.
    fn groups(&self, ctx: &Ctx, d: &ExpertDefaults, experts: usize, top_k: usize) -> Result<(usize, usize)> {
        let groups = ctx.positive(self.n_group.unwrap_or(d.groups), "n_group")?;
        if !experts.is_multiple_of(groups) {
            return Err(ctx.err("n_group", format!("{groups} groups do not divide {experts} experts")));
        }
        let topk_groups = self.topk_group.unwrap_or(d.topk_groups);
        if topk_groups == 0 || topk_groups > groups {
            return Err(ctx.err("topk_group", format!("must be between 1 and n_group ({groups})")));
        }
        if top_k > topk_groups.saturating_mul(experts / groups) {
            return Err(ctx.err("num_experts_per_tok", "exceeds the experts in the selected groups"));
        }
        Ok((groups, topk_groups))
    }

    /// DeepSeek-V2's block. Routing (`p = softmax(x W_gᵀ)`, then top-k, group-limited for
    /// `group_limited_greedy`) is the same everywhere; the weights differ by implementation:
    /// - DeepSeek's own remote code (`modeling_deepseek.py`, shipped with the checkpoints):
    ///   `if top_k > 1 and norm_topk_prob: w ← w / (Σw + 1e-20) else: w ← w · routed_scaling_factor`
    ///   — renormalisation and scaling are never both applied.
    /// - transformers' native `DeepseekV2Moe.route_tokens_to_experts` does not read
    ///   `norm_topk_prob` at all and always multiplies by `routed_scaling_factor`.
    /// - Every released V2 / V2-Lite config has `norm_topk_prob: false`, where the two agree
    ///   (V2: ×16, Lite: ×1).
    ///
    /// The spec follows the remote code: `norm_topk = norm_topk_prob && top_k > 1`, and then
    /// `scaling = 1`; otherwise `scaling = routed_scaling_factor`. Groups apply only to
    /// `group_limited_greedy` (`n_group`, `topk_group`); `greedy` routes over all experts.
    pub fn softmax_ffn(&self, ctx: &Ctx, d: &ExpertDefaults) -> Result<Ffn> {
        let (experts, top_k, expert_hidden, shared) = self.experts(ctx, d)?;
        match self.scoring_func.as_deref() {
            None | Some("softmax") => {}
            Some(other) => {
                return Err(ctx.err("scoring_func", format!("`{other}` is not supported; expected `softmax`")))
            }
        }
        let (groups, topk_groups) = match self.topk_method.as_deref() {
            None | Some("greedy") => (1, 1),
            Some("group_limited_greedy") => {
                ctx.require(self.n_group, "n_group")?;
                ctx.require(self.topk_group, "topk_group")?;
                self.groups(ctx, d, experts, top_k)?
            }
            Some(other) => {
                return Err(ctx.err(
                    "topk_method",
                    format!("`{other}` is not supported; expected `greedy` or `group_limited_greedy`"),
                ))
            }
        };
        let norm_topk = self.norm_topk_prob.unwrap_or(d.norm_topk) && top_k > 1;
        let routed_scaling = self.routed_scaling_factor.unwrap_or(d.scaling);
        let routed_scaling = ctx.positive_f64(routed_scaling, "routed_scaling_factor")?;
        let router = Router::softmax(norm_topk, if norm_topk { 1.0 } else { routed_scaling }, groups, topk_groups);
        Ok(Ffn::Moe { experts, top_k, expert_hidden, act: Act::Silu, shared, router, bias: false })
    }

    /// DeepSeek-V3's (and GLM-4.5's) block, as `DeepseekV3TopkRouter` routes: `s = sigmoid(x
    /// W_gᵀ)`, experts chosen by `s + e_score_correction_bias` within the `topk_group` groups
    /// whose two best biased scores sum highest; weights `s`, over their sum when
    /// `norm_topk_prob`, always times `routed_scaling_factor`.
    pub fn noaux_ffn(&self, ctx: &Ctx, d: &ExpertDefaults) -> Result<Ffn> {
        let (experts, top_k, expert_hidden, shared) = self.experts(ctx, d)?;
        match self.scoring_func.as_deref() {
            None | Some("sigmoid") => {}
            Some(other) => {
                return Err(ctx.err("scoring_func", format!("`{other}` is not supported; expected `sigmoid`")))
            }
        }
        match self.topk_method.as_deref() {
            None | Some("noaux_tc") => {}
            Some(other) => {
                return Err(ctx.err("topk_method", format!("`{other}` is not supported; expected `noaux_tc`")))
            }
        }
        let (groups, topk_groups) = self.groups(ctx, d, experts, top_k)?;
        // Each group's score is the sum of its two best experts'.
        if experts / groups < 2 {
            return Err(
                ctx.err("n_group", format!("{groups} groups of {experts} experts leave fewer than 2 per group"))
            );
        }
        let norm_topk = self.norm_topk_prob.unwrap_or(d.norm_topk);
        let scaling = ctx.positive_f64(self.routed_scaling_factor.unwrap_or(d.scaling), "routed_scaling_factor")?;
        let router = Router::noaux_tc(norm_topk, scaling, groups, topk_groups);
        Ok(Ffn::Moe { experts, top_k, expert_hidden, act: Act::Silu, shared, router, bias: false })
    }
}
