//! MiniMax-M2 (`minimax_m2`): grouped-query attention whose q and k are RMS-normed over the
//! whole projection (every head at once, `qk_norm_type: per_layer`), partial neox RoPE
//! (`rotary_dim`, or `partial_rotary_factor`), and a mixture of experts in every layer routed
//! by sigmoid scores with a selection bias and no groups, renormalised, unscaled
//! (`MiniMaxM2TopKRouter`); no shared expert.

use serde::Deserialize;
use serde_json::Value;

use super::fields::{layer_kinds, norms, Common, Defaults, LayerKind};
use super::{rope, Ctx, Draft, LayerDraft};
use crate::error::Result;
use crate::model::spec::{Act, Family, Ffn, Mixer, RopeStyle, Router};

/// The MiniMax-only fields.
#[derive(Deserialize)]
struct MiniMax {
    num_local_experts: Option<usize>,
    num_experts_per_tok: Option<usize>,
    /// The legacy spelling of partial RoPE: the rotated dims of a head.
    rotary_dim: Option<usize>,
    /// Default `sigmoid`.
    scoring_func: Option<String>,
    /// Default true: `e_score_correction_bias` chooses the experts.
    use_routing_bias: Option<bool>,
    /// Default true.
    use_qk_norm: Option<bool>,
    /// Default `per_layer`.
    qk_norm_type: Option<String>,
    /// Default 0: no shared expert.
    shared_intermediate_size: Option<usize>,
    /// 1 = full attention per layer (0 would be MiniMax-01's lightning attention).
    attn_type_list: Option<Vec<u32>>,
    /// The multi-token-prediction modules the checkpoint holds when `use_mtp`.
    use_mtp: Option<bool>,
    num_mtp_modules: Option<usize>,
}

/// Builds a MiniMax-M2 model: every layer attention + MoE.
pub(super) fn build(ctx: &Ctx, root: &Value) -> Result<Draft> {
    let common: Common = ctx.parse(root)?;
    let mm: MiniMax = ctx.parse(root)?;
    // MiniMaxM2Config: head_dim 128, 8 kv heads, 196608 positions, eps 1e-6, bos 200034, eos 200020.
    let defaults = Defaults {
        vocab: None,
        head_dim: Some(128),
        kv_heads: Some(8),
        max_ctx: 196_608,
        eps: 1e-6,
        tied: false,
        bos: Some(200_034),
        eos: Some(200_020),
    };
    let core = common.core(ctx, &defaults, None)?;
    common.check_silu(ctx)?;
    common.check_no_bias(ctx)?;
    mm.check(ctx, core.n_layers)?;
    let partial = match mm.rotary_dim {
        Some(dim) => ctx.positive(dim, "rotary_dim")? as f64 / core.head_dim as f64,
        None => 1.0,
    };
    let rotation =
        rope::flat(ctx, &common, core.max_ctx, 5e6, partial)?.rotation(ctx, core.head_dim, RopeStyle::Neox)?;
    let mut mixer = core.attention(true, false, false, rotation.dim);
    if let Mixer::Attention { qk_norm_whole, .. } = &mut mixer {
        *qk_norm_whole = true;
    }
    let ffn = mm.ffn(ctx, &common)?;
    let kinds =
        layer_kinds(ctx, common.layer_types.as_deref(), core.n_layers, &[LayerKind::Full], |_| LayerKind::Full)?;
    let layers = (0..kinds.len())
        .map(|_| LayerDraft {
            mixer: mixer.clone(),
            rotation: Some(rotation.clone()),
            window: None,
            ffn: ffn.clone(),
            norms: norms(core.eps, false, false),
        })
        .collect();
    let mtp_layers = if mm.use_mtp == Some(true) { mm.num_mtp_modules.unwrap_or(0) } else { 0 };
    Ok(Draft { mtp_layers, ..Draft::new(Family::MinimaxM2, &core, layers, false) })
}

impl MiniMax {
    /// Refuses what transformers' MiniMax-M2 does not compute.
    fn check(&self, ctx: &Ctx, n_layers: usize) -> Result<()> {
        if self.use_qk_norm == Some(false) {
            return Err(ctx.err("use_qk_norm", "MiniMax-M2 without q/k norms is not supported"));
        }
        match self.qk_norm_type.as_deref() {
            None | Some("per_layer") => {}
            Some(other) => {
                return Err(ctx.err("qk_norm_type", format!("`{other}` is not supported; expected `per_layer`")))
            }
        }
        if let Some(size) = self.shared_intermediate_size.filter(|&s| s != 0) {
            return Err(ctx.err("shared_intermediate_size", format!("a shared expert ({size}) is not supported")));
        }
        if let Some(list) = &self.attn_type_list {
            if list.len() != n_layers {
                return Err(ctx.err("attn_type_list", format!("lists {} layers, not {n_layers}", list.len())));
            }
            if let Some(l) = list.iter().position(|&t| t != 1) {
                let message =
                    format!("layer {l} is not full attention (type {}); lightning attention is not supported", list[l]);
                return Err(ctx.err("attn_type_list", message));
            }
        }
        Ok(())
    }

    /// The expert block: `num_local_experts` experts of `intermediate_size`, top-k by sigmoid
    /// score plus the selection bias, weights renormalised, no scaling, no groups.
    fn ffn(&self, ctx: &Ctx, common: &Common) -> Result<Ffn> {
        let experts = ctx.positive(ctx.require(self.num_local_experts, "num_local_experts")?, "num_local_experts")?;
        let top_k = ctx.require(self.num_experts_per_tok, "num_experts_per_tok")?;
        if top_k == 0 || top_k > experts {
            return Err(ctx.err(
                "num_experts_per_tok",
                format!("must be between 1 and num_local_experts ({experts}), found {top_k}"),
            ));
        }
        match self.scoring_func.as_deref() {
            None | Some("sigmoid") => {}
            Some(other) => {
                return Err(ctx.err("scoring_func", format!("`{other}` is not supported; expected `sigmoid`")))
            }
        }
        let router = Router { bias: self.use_routing_bias.unwrap_or(true), ..Router::noaux_tc(true, 1.0, 1, 1) };
        Ok(Ffn::Moe {
            experts,
            top_k,
            expert_hidden: common.dense_hidden(ctx)?,
            act: Act::Silu,
            shared: None,
            router,
            bias: false,
        })
    }
}
