//! DeepSeek-V2 / V2-Lite (`deepseek_v2`): multi-head latent attention with interleaved,
//! YaRN-scaled RoPE, dense first layers, then routed + shared experts.

use serde::Deserialize;
use serde_json::Value;

use super::fields::{explicit, layer_kinds, norms, Common, Defaults, LayerKind};
use super::{rope, Ctx, Draft, LayerDraft};
use crate::error::Result;
use crate::model::spec::{Act, Family, Ffn, Mixer, RopeStyle, Router, SharedExpert};

/// The DeepSeek-only fields, with `DeepseekV2Config`'s defaults.
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
    n_routed_experts: Option<usize>,
    /// Default 2; `null` means no shared experts.
    #[serde(default, deserialize_with = "explicit")]
    n_shared_experts: Option<Option<usize>>,
    num_experts_per_tok: Option<usize>,
    moe_intermediate_size: Option<usize>,
    /// Default 0: layers before this index are dense.
    first_k_dense_replace: Option<usize>,
    /// Default 1 (remote code; transformers does not read it).
    moe_layer_freq: Option<usize>,
    /// `null` → 1.
    n_group: Option<usize>,
    topk_group: Option<usize>,
    /// Default `greedy`.
    topk_method: Option<String>,
    /// Default 1.
    routed_scaling_factor: Option<f64>,
    /// Default false.
    norm_topk_prob: Option<bool>,
    /// Default `softmax`.
    scoring_func: Option<String>,
}

/// Builds DeepSeek-V2. Layer `l` is MoE iff `l >= first_k_dense_replace` and
/// `l % moe_layer_freq == 0`; the others are dense SwiGLUs of `intermediate_size`.
pub(super) fn build(ctx: &Ctx, root: &Value) -> Result<Draft> {
    let common: Common = ctx.parse(root)?;
    let ds: Deepseek = ctx.parse(root)?;
    // DeepseekV2Config: kv heads = heads, 2048 positions, eps 1e-6, untied, bos 1, eos 2.
    let defaults = Defaults {
        vocab: None,
        head_dim: None,
        kv_heads: None,
        max_ctx: 2048,
        eps: 1e-6,
        tied: false,
        bos: Some(1),
        eos: Some(2),
    };
    // MLA has no head_dim of its own (transformers overwrites it with qk_rope_head_dim).
    let common = Common { head_dim: Some(1), ..common };
    let core = common.core(ctx, &defaults, None)?;
    common.check_silu(ctx)?;
    common.check_no_bias(ctx)?;
    let qk_nope = ctx.positive(ds.qk_nope_head_dim.unwrap_or(128), "qk_nope_head_dim")?;
    let qk_rope = ctx.positive(ds.qk_rope_head_dim.unwrap_or(64), "qk_rope_head_dim")?;
    let rope = rope::flat(ctx, &common, core.max_ctx, 1e4, 1.0)?;
    // The rope part of each head is rotated whole; transformers ignores partial_rotary_factor.
    let rope = rope::Rope { partial: 1.0, ..rope };
    let rotation = rope.rotation(ctx, qk_rope, RopeStyle::Interleaved)?;
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
    let first_dense = ds.first_k_dense_replace.unwrap_or(0);
    let freq = ctx.positive(ds.moe_layer_freq.unwrap_or(1), "moe_layer_freq")?;
    let is_moe = |layer_idx: usize| layer_idx >= first_dense && layer_idx.is_multiple_of(freq);
    let moe = (0..core.n_layers).any(is_moe).then(|| moe_ffn(ctx, &ds)).transpose()?;
    let any_dense = (0..core.n_layers).any(|layer_idx| !is_moe(layer_idx));
    let dense_hidden = any_dense.then(|| common.dense_hidden(ctx)).transpose()?;
    let kinds =
        layer_kinds(ctx, common.layer_types.as_deref(), core.n_layers, &[LayerKind::Full], |_| LayerKind::Full)?;
    let layers = (0..kinds.len())
        .map(|layer_idx| LayerDraft {
            mixer: mixer.clone(),
            rotation: Some(rotation.clone()),
            window: None,
            ffn: match &moe {
                Some(moe) if is_moe(layer_idx) => moe.clone(),
                // `dense_hidden` is present whenever some layer is dense.
                _ => Ffn::Dense { hidden: dense_hidden.unwrap_or(0), act: Act::Silu },
            },
            norms: norms(core.eps, false, false),
        })
        .collect();
    Ok(Draft::new(Family::DeepseekV2, &core, layers, false))
}

/// The routed + shared expert block.
///
/// Routing (`p = softmax(x W_gᵀ)`, then top-k, group-limited for `group_limited_greedy`) is
/// the same everywhere; the weights differ by implementation:
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
fn moe_ffn(ctx: &Ctx, ds: &Deepseek) -> Result<Ffn> {
    let experts = ctx.positive(ctx.require(ds.n_routed_experts, "n_routed_experts")?, "n_routed_experts")?;
    let top_k = ctx.require(ds.num_experts_per_tok, "num_experts_per_tok")?;
    if top_k == 0 || top_k > experts {
        return Err(ctx
            .err("num_experts_per_tok", format!("must be between 1 and n_routed_experts ({experts}), found {top_k}")));
    }
    let expert_hidden = ctx.require(ds.moe_intermediate_size, "moe_intermediate_size")?;
    let expert_hidden = ctx.positive(expert_hidden, "moe_intermediate_size")?;
    match ds.scoring_func.as_deref() {
        None | Some("softmax") => {}
        Some(other) => return Err(ctx.err("scoring_func", format!("`{other}` is not supported; expected `softmax`"))),
    }
    let (groups, topk_groups) = match ds.topk_method.as_deref() {
        None | Some("greedy") => (1, 1),
        Some("group_limited_greedy") => {
            let groups = ctx.positive(ctx.require(ds.n_group, "n_group")?, "n_group")?;
            if !experts.is_multiple_of(groups) {
                return Err(ctx.err("n_group", format!("{groups} groups do not divide {experts} experts")));
            }
            let topk_groups = ctx.require(ds.topk_group, "topk_group")?;
            if topk_groups == 0 || topk_groups > groups {
                return Err(ctx.err("topk_group", format!("must be between 1 and n_group ({groups})")));
            }
            if top_k > topk_groups.saturating_mul(experts / groups) {
                return Err(ctx.err("num_experts_per_tok", "exceeds the experts in the selected groups"));
            }
            (groups, topk_groups)
        }
        Some(other) => {
            return Err(ctx.err(
                "topk_method",
                format!("`{other}` is not supported; expected `greedy` or `group_limited_greedy`"),
            ))
        }
    };
    let norm_topk = ds.norm_topk_prob.unwrap_or(false) && top_k > 1;
    let routed_scaling = ds.routed_scaling_factor.unwrap_or(1.0);
    let routed_scaling = ctx.positive_f64(routed_scaling, "routed_scaling_factor")?;
    let n_shared = ds.n_shared_experts.unwrap_or(Some(2)).unwrap_or(0);
    let shared = SharedExpert::ungated(n_shared, expert_hidden).map_err(|e| ctx.err("n_shared_experts", e))?;
    let router = Router { norm_topk, scaling: if norm_topk { 1.0 } else { routed_scaling }, groups, topk_groups };
    Ok(Ffn::Moe { experts, top_k, expert_hidden, act: Act::Silu, shared, router, bias: false })
}
