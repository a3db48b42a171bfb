//! Multi-head attention with GQA, optional q/k norm (per head, or over the whole projection),
//! output gate, partial rotary, q/k/v (and o) biases and attention sinks (Llama, Qwen2/3,
//! Gemma 3, Qwen3-Next/3.5 gated attention, Mistral, gpt-oss, GLM-4.5, MiniMax-M2).

use super::split::Run;
use super::verify::{self, Ring};
use super::writer::Writer;
use super::{LayerCtx, Sequence};
use crate::graph::Op;
use crate::model::spec::Mixer;

/// Writes the attention mixer over the normalised hidden state `hn`; returns its `[N, D]` output.
pub(super) fn write(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, hn: &str) -> String {
    let Mixer::Attention { heads, kv_heads, head_dim, scale, .. } = ctx.layer.mixer else {
        unreachable!("attention::write on a non-attention layer")
    };
    let (n, hd) = (ctx.rows, head_dim);
    let kv_runs = [Run::heads(kv_heads, hd)];
    let Projected { qh, kh, vh, gate, wo, sinks } = project(w, ctx, hn);
    let heads = ctx.local(heads);
    let (cos, sin, rot) = ctx.rope_tables(w);
    let rope = Op::Rope { dim: rot, style: ctx.rope_style() };
    let attend = Op::Attend { scale, window: ctx.layer.window };
    let tables = Tables { cos: &cos, sin: &sin, rope, attend, sinks: sinks.as_deref() };
    // Positions and caches are each sequence's own.
    let a = ctx.per_sequence(w, "a", &[("qh", &qh), ("kh", &kh), ("vh", &vh)], |w, seq, x| {
        let by_kv_head = [Run::heads(kv_runs[0].count, 1)];
        let caches = ctx.decode().then(|| {
            let full = [ctx.cache_slots(), kv_runs[0].count, hd];
            (w.state_split("Kc", &full, 1, &by_kv_head), w.state_split("Vc", &full, 1, &by_kv_head))
        });
        let pending = (ctx.verify().is_some() && ctx.ring()).then(|| {
            // Drafted rows stay pending until the next step knows which were accepted.
            let full = [ctx.verify().unwrap_or(1), kv_runs[0].count, hd];
            (w.state_split("Kp", &full, 1, &by_kv_head), w.state_split("Vp", &full, 1, &by_kv_head))
        });
        attend_sequence(w, ctx, &tables, [&x[0], &x[1], &x[2]], seq, (caches, pending))
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

/// A layer's queries `[N, h, hd]` (normed when the layer norms them), keys and values
/// `[N, g, hd]`, and the output gate `[N, h·hd]` when there is one, for this chip's heads.
struct Projected {
    qh: String,
    kh: String,
    vh: String,
    gate: Option<String>,
    /// The output projection (declared after q, k and v).
    wo: String,
    /// One sink logit per query head of this chip (gpt-oss).
    sinks: Option<String>,
}

/// The layer's attention sinks, one logit per query head: each chip its heads'.
fn sinks(w: &mut Writer<'_>, ctx: &LayerCtx<'_>) -> Option<String> {
    let Mixer::Attention { heads, sinks, .. } = ctx.layer.mixer else { return None };
    sinks.then(|| w.weight_split("snk", &[heads], 0, &[Run::heads(heads, 1)]))
}

/// The q/k/v projections (with biases, the output gate, the sinks and the per-head q/k norms).
fn project(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, hn: &str) -> Projected {
    let Mixer::Attention { heads, kv_heads, head_dim: hd, qk_norm, qk_norm_whole, output_gate, qkv_bias, .. } =
        ctx.layer.mixer
    else {
        unreachable!("attention::project on a non-attention layer")
    };
    if qk_norm && qk_norm_whole {
        return project_whole_norm(w, ctx, hn);
    }
    let (n, d) = (ctx.rows, ctx.spec.d_model);
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
    let sinks = sinks(w, ctx);
    let (qn, kn) = if qk_norm { (Some(w.weight("qn", &[hd])), Some(w.weight("kn", &[hd]))) } else { (None, None) };
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
    Projected { qh, kh, vh, gate, wo, sinks }
}

/// q and k normed over the whole projection, every head's values at once (MiniMax-M2). On the
/// chips of a tensor-parallel layer the norm reads every head: each chip projects q and k
/// whole, norms them, and takes its heads with `shard` (a kv head it shares with other chips
/// repeated once per chip sharing it, so that the equal parts `shard` cuts are the chips' heads).
fn project_whole_norm(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, hn: &str) -> Projected {
    let Mixer::Attention { heads, kv_heads, head_dim: hd, .. } = ctx.layer.mixer else {
        unreachable!("attention::project_whole_norm on a non-attention layer")
    };
    let (n, d) = (ctx.rows, ctx.spec.d_model);
    let wq = w.projection("Wq", &[heads * hd, d]);
    let wk = w.projection("Wk", &[kv_heads * hd, d]);
    let wv = w.projection_split("Wv", &[kv_heads * hd, d], 0, &[Run::heads(kv_heads, hd)]);
    let wo = w.projection_split("Wo", &[d, heads * hd], 1, &[Run::heads(heads, hd)]);
    let qn = w.weight("qn", &[heads * hd]);
    let kn = w.weight("kn", &[kv_heads * hd]);
    let sinks = sinks(w, ctx);
    let q = w.op("q", Op::Linear, &[hn, &wq]);
    let k = w.op("k", Op::Linear, &[hn, &wk]);
    let v = w.op("v", Op::Linear, &[hn, &wv]);
    let q = w.op("qnf", ctx.norm(), &[&q, &qn]);
    let k = w.op("knf", ctx.norm(), &[&k, &kn]);
    let (q, k) = if ctx.tensor_parallel() {
        let shard = Op::Shard { axis: 1, chips: ctx.tp };
        let q = w.op("qs", shard.clone(), &[&q]);
        let k = if ctx.tp > kv_heads {
            // Chip c's kv head is c / (tp / kv_heads): each head repeated for its chips, in order.
            let copies = ctx.tp / kv_heads;
            let kr = w.op("kgr", Op::Reshape { shape: vec![n, kv_heads, 1, hd] }, &[&k]);
            let refs = vec![kr.as_str(); copies];
            let kc = w.op("kgc", Op::Concat { axis: 2 }, &refs);
            let kf = w.op("kgf", Op::Reshape { shape: vec![n, ctx.tp * hd] }, &[&kc]);
            w.op("ks", shard, &[&kf])
        } else {
            w.op("ks", shard, &[&k])
        };
        (q, k)
    } else {
        (q, k)
    };
    let (heads, kv_heads) = (ctx.local(heads), ctx.local_kv(kv_heads));
    let qh = w.op("qh", Op::Reshape { shape: vec![n, heads, hd] }, &[&q]);
    let kh = w.op("kh", Op::Reshape { shape: vec![n, kv_heads, hd] }, &[&k]);
    let vh = w.op("vh", Op::Reshape { shape: vec![n, kv_heads, hd] }, &[&v]);
    Projected { qh, kh, vh, gate: None, wo, sinks }
}

/// What every sequence's attention reads besides its rows: the RoPE tables and op, the
/// attention op and the sinks, if any.
struct Tables<'t> {
    cos: &'t str,
    sin: &'t str,
    rope: Op,
    attend: Op,
    sinks: Option<&'t str>,
}

/// A sequence's `(K, V)` names: its cache, or a verify step's pending rows.
type KvNames = Option<(String, String)>;

/// One sequence's RoPE, cache writes and attention over `[qh, kh, vh]` at its position (the
/// caches `Kc`, `Vc` of a step with a cache; a verify step's pending rows `Kp`, `Vp`); the
/// sinks, when the layer has them, are `attend`'s last operand.
fn attend_sequence(
    w: &mut Writer<'_>,
    ctx: &LayerCtx<'_>,
    t: &Tables<'_>,
    [qh, kh, vh]: [&str; 3],
    seq: &Sequence,
    (caches, pending): (KvNames, KvNames),
) -> String {
    let pos = seq.pos.as_str();
    let qr = w.op("qr", t.rope.clone(), &[qh, t.cos, t.sin, pos]);
    let kr = w.op("kr", t.rope.clone(), &[kh, t.cos, t.sin, pos]);
    let attend = |w: &mut Writer<'_>, args: &[&str]| {
        let mut args = args.to_vec();
        args.extend(t.sinks);
        w.op("a", t.attend.clone(), &args)
    };
    match (caches, pending) {
        (Some((kc, vc)), Some((kp, vp))) => {
            let rings = [
                Ring { cache: &kc, pending: &kp, rows: &kr, first: "kf" },
                Ring { cache: &vc, pending: &vp, rows: vh, first: "vf" },
            ];
            verify::flush(w, seq, &rings);
            let a = attend(w, &[&qr, &kc, &vc, pos, &kr, vh]);
            verify::hold(w, ctx, pos, &rings);
            a
        }
        (Some((kc, vc)), _) if ctx.prefill() => {
            // The chunk's own rows are attended to before they are written (ring caches).
            let a = attend(w, &[&qr, &kc, &vc, pos, &kr, vh]);
            w.update(&kc, Op::CachePut, &[&kc, &kr, pos]);
            w.update(&vc, Op::CachePut, &[&vc, vh, pos]);
            a
        }
        (Some((kc, vc)), _) => {
            w.update(&kc, Op::CachePut, &[&kc, &kr, pos]);
            w.update(&vc, Op::CachePut, &[&vc, vh, pos]);
            attend(w, &[&qr, &kc, &vc, pos])
        }
        (None, _) => attend(w, &[&qr, &kr, vh, pos]),
    }
}

/// What the attention adds once its chips' partial sums are summed (`out`): o_proj's bias
/// (gpt-oss), added once. Nothing for other layers.
pub(super) fn after_reduce(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, out: &str) -> String {
    let Mixer::Attention { o_bias: true, .. } = ctx.layer.mixer else { return out.to_string() };
    let bo = w.weight("bo", &[ctx.spec.d_model]);
    w.op("mb", Op::Add, &[out, &bo])
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
