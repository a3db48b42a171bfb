//! Multi-head attention with GQA, optional q/k norm, output gate, partial rotary and q/k/v
//! biases (Llama, Qwen2/3, Gemma 3, Qwen3-Next/3.5 gated attention).

use super::split::Run;
use super::verify::{self, Ring};
use super::writer::Writer;
use super::LayerCtx;
use crate::graph::Op;
use crate::model::spec::Mixer;

/// Writes the attention mixer over the normalised hidden state `hn`; returns its `[N, D]` output.
pub(super) fn write(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, hn: &str) -> String {
    let Mixer::Attention { heads, kv_heads, head_dim, qk_norm, output_gate, qkv_bias, scale, .. } = ctx.layer.mixer
    else {
        unreachable!("attention::write on a non-attention layer")
    };
    let (n, d, hd) = (ctx.rows, ctx.spec.d_model, head_dim);
    let q_unit = hd * if output_gate { 2 } else { 1 };
    // Each chip its heads (and their kv heads); the full model on one chip.
    let (q_heads, kv_runs) = ([Run::heads(heads, q_unit)], [Run::heads(kv_heads, hd)]);
    let wq = w.projection_split("Wq", &[heads * q_unit, d], 0, &q_heads);
    let wk = w.projection_split("Wk", &[kv_heads * hd, d], 0, &kv_runs);
    let wv = w.projection_split("Wv", &[kv_heads * hd, d], 0, &kv_runs);
    let wo = w.projection_split("Wo", &[d, heads * hd], 1, &[Run::heads(heads, hd)]);
    let (heads, kv_heads) = (ctx.local(heads), ctx.local_kv(kv_heads));
    let (bq, bk, bv) = if qkv_bias {
        let full_kv = kv_runs[0].count * hd;
        (
            Some(w.weight_split("bq", &[q_heads[0].count * q_unit], 0, &q_heads)),
            Some(w.weight_split("bk", &[full_kv], 0, &kv_runs)),
            Some(w.weight_split("bv", &[full_kv], 0, &kv_runs)),
        )
    } else {
        (None, None, None)
    };
    let (qn, kn) = if qk_norm { (Some(w.weight("qn", &[hd])), Some(w.weight("kn", &[hd]))) } else { (None, None) };
    let (cos, sin, rot) = ctx.rope_tables(w);

    let q = linear(w, "q", hn, &wq, bq.as_deref());
    let k = linear(w, "k", hn, &wk, bk.as_deref());
    let v = linear(w, "v", hn, &wv, bv.as_deref());
    let (qh, gate) = if output_gate {
        // q_proj emits, per head, hd query values then hd gate values.
        let qg = w.op("qg", Op::Reshape { shape: vec![n, heads, 2 * hd] }, &[&q]);
        let qh = w.op("qh", slice(2, 0, hd), &[&qg]);
        let gh = w.op("gh", slice(2, hd, hd), &[&qg]);
        (qh, Some(w.op("gf", Op::Reshape { shape: vec![n, heads * hd] }, &[&gh])))
    } else {
        (w.op("qh", Op::Reshape { shape: vec![n, heads, hd] }, &[&q]), None)
    };
    let kh = w.op("kh", Op::Reshape { shape: vec![n, kv_heads, hd] }, &[&k]);
    let vh = w.op("vh", Op::Reshape { shape: vec![n, kv_heads, hd] }, &[&v]);
    let (qh, kh) = match (qn, kn) {
        (Some(qn), Some(kn)) => (w.op("qnh", ctx.norm(), &[&qh, &qn]), w.op("knh", ctx.norm(), &[&kh, &kn])),
        _ => (qh, kh),
    };
    let rope = Op::Rope { dim: rot, style: ctx.rope_style() };
    let attend = Op::Attend { scale, window: ctx.layer.window };
    // Positions and caches are each sequence's own.
    let a = ctx.per_sequence(w, "a", &[("qh", &qh), ("kh", &kh), ("vh", &vh)], |w, seq, x| {
        let (qh, kh, vh, pos) = (&x[0], &x[1], &x[2], seq.pos.as_str());
        let by_kv_head = [Run::heads(kv_runs[0].count, 1)];
        let caches = ctx.decode().then(|| {
            let full = [ctx.cache_slots(), kv_runs[0].count, hd];
            (w.state_split("Kc", &full, 1, &by_kv_head), w.state_split("Vc", &full, 1, &by_kv_head))
        });
        let qr = w.op("qr", rope.clone(), &[qh, &cos, &sin, pos]);
        let kr = w.op("kr", rope.clone(), &[kh, &cos, &sin, pos]);
        match caches {
            Some((kc, vc)) if ctx.verify().is_some() && ctx.ring() => {
                // Drafted rows stay pending until the next step knows which were accepted.
                let full = [ctx.verify().unwrap_or(1), kv_runs[0].count, hd];
                let (kp, vp) = (w.state_split("Kp", &full, 1, &by_kv_head), w.state_split("Vp", &full, 1, &by_kv_head));
                let rings = [
                    Ring { cache: &kc, pending: &kp, rows: &kr, first: "kf" },
                    Ring { cache: &vc, pending: &vp, rows: vh, first: "vf" },
                ];
                verify::flush(w, seq, &rings);
                let a = w.op("a", attend.clone(), &[&qr, &kc, &vc, pos, &kr, vh]);
                verify::hold(w, ctx, pos, &rings);
                a
            }
            Some((kc, vc)) if ctx.prefill() => {
                // The chunk's own rows are attended to before they are written (ring caches).
                let a = w.op("a", attend.clone(), &[&qr, &kc, &vc, pos, &kr, vh]);
                w.update(&kc, Op::CachePut, &[&kc, &kr, pos]);
                w.update(&vc, Op::CachePut, &[&vc, vh, pos]);
                a
            }
            Some((kc, vc)) => {
                w.update(&kc, Op::CachePut, &[&kc, &kr, pos]);
                w.update(&vc, Op::CachePut, &[&vc, vh, pos]);
                w.op("a", attend.clone(), &[&qr, &kc, &vc, pos])
            }
            None => w.op("a", attend.clone(), &[&qr, &kr, vh, pos]),
        }
    });
    let af = w.op("af", Op::Reshape { shape: vec![n, heads * hd] }, &[&a]);
    let af = match gate {
        Some(gf) => {
            let sg = w.op("gs", Op::Sigmoid, &[&gf]);
            w.op("ag", Op::Mul, &[&af, &sg])
        }
        None => af,
    };
    w.op("mo", Op::Linear, &[&af, &wo])
}

/// `slice(axis, start, len)`.
pub(super) fn slice(axis: usize, start: usize, len: usize) -> Op {
    Op::Slice { axis, start, len }
}

pub(super) fn linear(w: &mut Writer<'_>, out: &str, x: &str, weight: &str, bias: Option<&str>) -> String {
    match bias {
        Some(b) => w.op(out, Op::Linear, &[x, weight, b]),
        None => w.op(out, Op::Linear, &[x, weight]),
    }
}
