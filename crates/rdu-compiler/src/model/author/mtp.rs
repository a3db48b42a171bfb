//! A multi-token-prediction block's fusion, before its decoder layer: the embedded token (the
//! layer's hidden input) and the hidden state of the row before it (the runtime input
//! `hprev`, role `hidden`) are each normed, concatenated — the embedding first — and
//! projected back to `d_model`. One program for every author, its weights named by the
//! author (`model::mtp::checkpoint_name`): vLLM's `qwen3_next_mtp`
//! `fc(cat([norm_e(e), norm_h(h)]))`, both norms Qwen3-Next's `(1 + w)` RMSNorm; vLLM's
//! `deepseek_mtp` / `glm4_moe_mtp` `eh_proj(cat([enorm(e), hnorm(h)]))`, plain RMSNorms. The
//! norms are the layer's (`LayerCtx::norm`). The result is the decoder layer's input and residual.

use super::{LayerCtx, Writer};
use crate::graph::Op;
use rdu_spatial::names::HIDDEN_INPUT;

/// Writes the fusion; returns the decoder layer's input.
pub(super) fn fuse(w: &mut Writer<'_>, ctx: &LayerCtx<'_>) -> String {
    let (d, n) = (ctx.spec.d_model, ctx.rows);
    w.input(HIDDEN_INPUT, "f32", &[n, d], None);
    let ne = w.weight("ne", &[d]);
    let nh = w.weight("nh", &[d]);
    let e = w.op("me", ctx.norm(), &[&ctx.hidden_in, &ne]);
    let h = w.op("mh", ctx.norm(), &[HIDDEN_INPUT, &nh]);
    let both = w.op("mc", Op::Concat { axis: 1 }, &[&e, &h]);
    let fc = w.projection("Wfc", &[d, 2 * d]);
    w.op("mx", Op::Linear, &[&both, &fc])
}
