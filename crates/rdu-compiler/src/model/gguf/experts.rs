//! The routed (+ shared) expert block of the MoE architectures with llama.cpp's DeepSeek-style
//! keys (`deepseek2`, `glm4moe`, `minimax-m2`), as llama.cpp's loader reads them:
//! `expert_gating_func` (1 softmax, 2 sigmoid), `expert_group_count` / `expert_group_used_count`,
//! `expert_weights_norm`, `expert_weights_scale` (absent or 0: 1), `expert_shared_count`, and a
//! layer's `exp_probs_b.bias` (the selection bias, added to the scores to choose only).

use super::Meta;
use crate::error::Result;
use crate::model::spec::{Act, Ffn, Layer, Mixer, Norms, Router, Scoring, SharedExpert};

/// `n_layers` layers of `mixer` (rotation 0, pre-norms of `eps`): the first
/// `leading_dense_block_count` a dense SwiGLU of `feed_forward_length`, the rest [`routed`].
pub(super) fn leading_dense_then_routed(
    m: &Meta,
    arch: &str,
    rules: &ExpertRules,
    mixer: &Mixer,
    n_layers: usize,
    eps: f64,
) -> Result<Vec<Layer>> {
    let key = |k: &str| format!("{arch}.{k}");
    let leading = m.u64(&key("leading_dense_block_count"))?.unwrap_or(0);
    let leading = usize::try_from(leading).unwrap_or(usize::MAX).min(n_layers);
    let dense = match leading {
        0 => None,
        _ => Some(Ffn::Dense { hidden: m.req_usize(&key("feed_forward_length"))?, act: Act::Silu }),
    };
    let norms = Norms { eps, unit_offset: false, pre_attn: true, post_attn: false, pre_ffn: true, post_ffn: false };
    let mut layers = Vec::with_capacity(n_layers);
    for il in 0..n_layers {
        // `dense` is set when some layer is below `leading`.
        let ffn = match &dense {
            Some(dense) if il < leading => dense.clone(),
            _ => routed(m, arch, rules, il)?,
        };
        layers.push(Layer { mixer: mixer.clone(), rotation: Some(0), window: None, ffn, norms: norms.clone() });
    }
    Ok(layers)
}

/// What an architecture's loader assumes where the file is silent.
pub(super) struct ExpertRules {
    /// The scoring without `expert_gating_func`.
    pub scoring: Scoring,
    /// Renormalise whatever `expert_weights_norm` says (minimax-m2).
    pub always_norm: bool,
    /// Read `expert_weights_scale` (minimax-m2's loader does not).
    pub reads_scale: bool,
}

/// `{arch}.expert_count`, `expert_used_count` (at most the count) and `expert_feed_forward_length`.
pub(super) fn sizes(m: &Meta, arch: &str) -> Result<(usize, usize, usize)> {
    let key = |k: &str| format!("{arch}.{k}");
    let experts = m.req_usize(&key("expert_count"))?;
    let top_k = m.req_usize(&key("expert_used_count"))?;
    if top_k > experts {
        return Err(m.err(&key("expert_used_count"), format!("{top_k} exceeds expert_count {experts}")));
    }
    let expert_hidden = m.req_usize(&key("expert_feed_forward_length"))?;
    Ok((experts, top_k, expert_hidden))
}

/// `{arch}.expert_weights_scale`: absent or 0 means 1.
pub(super) fn weights_scale(m: &Meta, arch: &str) -> Result<f64> {
    let key = format!("{arch}.expert_weights_scale");
    match m.f32_as_f64(&key)? {
        None | Some(0.0) => Ok(1.0),
        Some(s) if s > 0.0 => Ok(s),
        Some(s) => Err(m.err(&key, format!("{s} must be greater than 0"))),
    }
}

/// The expert block of layer `il` of `arch`.
pub(super) fn routed(m: &Meta, arch: &str, rules: &ExpertRules, il: usize) -> Result<Ffn> {
    let key = |k: &str| format!("{arch}.{k}");
    let (experts, top_k, expert_hidden) = sizes(m, arch)?;
    let scoring = match m.u32(&key("expert_gating_func"))? {
        None => rules.scoring,
        Some(1) => Scoring::Softmax,
        Some(2) => Scoring::Sigmoid,
        Some(other) => {
            let message = format!("gating function {other} is not supported (1 softmax, 2 sigmoid)");
            return Err(m.err(&key("expert_gating_func"), message));
        }
    };
    let (groups, topk_groups) = match m.usize(&key("expert_group_count"))? {
        None | Some(1) => (1, 1),
        Some(groups) => (groups, m.req_usize(&key("expert_group_used_count"))?),
    };
    if !experts.is_multiple_of(groups) {
        return Err(m.err(&key("expert_group_count"), format!("{groups} groups do not divide {experts} experts")));
    }
    if topk_groups > groups || top_k > topk_groups * (experts / groups) {
        return Err(
            m.err(&key("expert_group_used_count"), "the selected groups hold fewer experts than expert_used_count")
        );
    }
    let norm_topk = rules.always_norm || m.bool(&key("expert_weights_norm"))?.unwrap_or(false);
    let scaling = if rules.reads_scale { weights_scale(m, arch)? } else { 1.0 };
    let n_shared = usize::try_from(m.u64(&key("expert_shared_count"))?.unwrap_or(0)).unwrap_or(usize::MAX);
    let shared = SharedExpert::ungated(n_shared, expert_hidden).map_err(|e| m.err(&key("expert_shared_count"), e))?;
    let bias = m.has_tensor(&format!("blk.{il}.exp_probs_b.bias"));
    let router = match scoring {
        // llama.cpp scores a group by its two best (biased) experts, as DeepSeek-V3 does.
        Scoring::Sigmoid => Router { bias, ..Router::noaux_tc(norm_topk, scaling, groups, topk_groups) },
        Scoring::Softmax => Router { bias, ..Router::softmax(norm_topk, scaling, groups, topk_groups) },
    };
    if scoring == Scoring::Sigmoid && groups > 1 && experts / groups < 2 {
        return Err(m.err(&key("expert_group_count"), "groups of one expert have no two best to score by"));
    }
    Ok(Ffn::Moe { experts, top_k, expert_hidden, act: Act::Silu, shared, router, bias: false })
}

/// `{arch}.nextn_predict_layers`: the multi-token-prediction blocks a file keeps after the
/// decoder's (counted in `block_count`), and the decoder's own layers.
pub(super) fn split_nextn(m: &Meta, arch: &str, blocks: usize) -> Result<(usize, usize)> {
    let key = format!("{arch}.nextn_predict_layers");
    let nextn = usize::try_from(m.u64(&key)?.unwrap_or(0)).unwrap_or(usize::MAX);
    if nextn >= blocks {
        return Err(m.err(&key, format!("{nextn} leaves none of the {blocks} blocks to the decoder")));
    }
    Ok((blocks - nextn, nextn))
}
