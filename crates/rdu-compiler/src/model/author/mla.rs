//! DeepSeek-V2 multi-head latent attention: every step caches the normalised latent and the
//! rotated rope key (`kv_lora + qk_rope` values per position). Decode and forward steps attend
//! in the absorbed form (the key up-projection folded into the query, the value's applied after
//! the attention); a prefill chunk attends through the up-projections (`attend_mla_up`).

use super::attention::slice;
use super::split::Run;
use super::verify::{self, Ring};
use super::writer::{Writer, Q8_BLOCK};
use super::LayerCtx;
use crate::graph::Op;
use crate::model::spec::{Dialect, Mixer};

/// Writes the MLA mixer over `hn`; returns its `[N, D]` output.
pub(super) fn write(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, hn: &str) -> String {
    let Mixer::Mla { heads, q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_dim, scale } = ctx.layer.mixer else {
        unreachable!("mla::write on a non-MLA layer")
    };
    let (n, d) = (ctx.rows, ctx.spec.d_model);
    let dims = Dims { n, d, heads, kvr: kv_lora_rank, nope: qk_nope, rope: qk_rope, v_dim };
    let weights = declare_weights(w, ctx, &dims, q_lora_rank);
    let dims = Dims { heads: ctx.local(heads), ..dims };
    let (cos, sin, rot) = ctx.rope_tables(w);
    let reduced = weights.row_split.then(|| down_over_chips(w, ctx, &dims, hn, &weights));
    let (reduced_qa, reduced_ckv) = match reduced {
        Some((qa, ckv)) => (qa, Some(ckv)),
        None => (None, None),
    };
    let rope_op = Op::Rope { dim: rot, style: ctx.rope_style() };
    let rope = |w: &mut Writer<'_>, base: &str, input: (&str, &str)| {
        // Positions (and below, the latent cache) are each sequence's own.
        ctx.per_sequence(w, base, &[input], |w, seq, x| w.op(base, rope_op.clone(), &[&x[0], &cos, &sin, &seq.pos]))
    };
    let (qnp, qpr) = query(w, ctx, &dims, hn, weights.query, reduced_qa, &rope);
    let lat = latent(w, ctx, &dims, hn, (&weights.wkva, &weights.kvn), reduced_ckv, &rope);
    let attend = Attend { scale, latent: dims.kvr, window: ctx.layer.window };
    if ctx.prefill() {
        attend_unabsorbed(w, ctx, &dims, (&qnp, &qpr, &lat), weights.up, &weights.wo, attend)
    } else {
        attend_absorbed(w, ctx, &dims, (&qnp, &qpr, &lat), weights.up, &weights.wo, attend)
    }
}

/// The sizes the mixer is written with: rows, model width, heads (the whole model's while its
/// weights are declared, this chip's after), the latent's rank, the query/key's nope and rope
/// parts, the value's width.
#[derive(Clone, Copy)]
struct Dims {
    n: usize,
    d: usize,
    heads: usize,
    kvr: usize,
    nope: usize,
    rope: usize,
    v_dim: usize,
}

/// The mixer's weights as declared, and whether its down-projections are split along `in`.
struct Weights {
    query: Query,
    wkva: String,
    kvn: String,
    up: KvUp,
    wo: String,
    row_split: bool,
}

/// Declares the mixer's weights. Each chip its heads; the latent cache is replicated on every
/// chip. The latent's down-projections (q_a, kv_a), whose results every head reads, are split
/// along their `in` axis when each chip's columns hold whole Q8_0 blocks (an FP8 block a
/// chip's share cuts is held as finer blocks sharing its scale): each chip multiplies
/// its shard of `hn` by its columns and one all-reduce sums both ([`down_over_chips`]);
/// otherwise every chip reads them whole.
fn declare_weights(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, dims: &Dims, q_lora_rank: Option<usize>) -> Weights {
    let Dims { d, heads, kvr, nope, rope, v_dim, .. } = *dims;
    let qk = nope + rope;
    let by_heads = |unit: usize| [Run::heads(heads, unit)];
    let row_split = ctx.tensor_parallel() && d.is_multiple_of(ctx.tp * Q8_BLOCK);
    let down = |w: &mut Writer<'_>, base: &str, rows: usize| {
        if row_split {
            w.projection_split(base, &[rows, d], 1, &[Run::columns(d)])
        } else {
            w.projection(base, &[rows, d])
        }
    };
    let query = match q_lora_rank {
        Some(ql) => {
            let wqa = down(w, "Wqa", ql);
            let qan = w.weight("qan", &[ql]);
            let wqb = w.projection_split("Wqb", &[heads * qk, ql], 0, &by_heads(qk));
            Query::Lora { rank: ql, wqa, qan, wqb }
        }
        None => Query::Direct(w.projection_split("Wq", &[heads * qk, d], 0, &by_heads(qk))),
    };
    let wkva = down(w, "Wkva", kvr + rope);
    let kvn = w.weight("kvn", &[kvr]);
    let up = if matches!(ctx.spec.dialect, Dialect::Gguf) {
        // llama.cpp splits kv_b per head: attn_k_b = W_UKᵀ [h, kvr, nope], attn_v_b = W_UV [h, v, kvr].
        KvUp::PerHead {
            wkb: w.projection_split("Wkb", &[heads, kvr, nope], 0, &by_heads(1)),
            wvb: w.projection_split("Wvb", &[heads, v_dim, kvr], 0, &by_heads(1)),
        }
    } else {
        KvUp::Fused(w.projection_split("Wkvb", &[heads * (nope + v_dim), kvr], 0, &by_heads(nope + v_dim)))
    };
    let wo = w.projection_split("Wo", &[d, heads * v_dim], 1, &by_heads(v_dim));
    Weights { query, wkva, kvn, up, wo, row_split }
}

/// The down-projections over the chips: both partial products summed by one all-reduce.
/// Returns the low-rank query's `qa` (when it has one) and the latent with its rope key, `ckv`.
fn down_over_chips(
    w: &mut Writer<'_>,
    ctx: &LayerCtx<'_>,
    dims: &Dims,
    hn: &str,
    weights: &Weights,
) -> (Option<String>, String) {
    let hs = w.op("hs", Op::Shard { axis: 1, chips: ctx.tp }, &[hn]);
    let ckv = w.op("ckvp", Op::Linear, &[&hs, &weights.wkva]);
    match &weights.query {
        Query::Lora { rank: ql, wqa, .. } => {
            let qa = w.op("qap", Op::Linear, &[&hs, wqa]);
            let both = w.op("dp", Op::Concat { axis: 1 }, &[&qa, &ckv]);
            let sum = ctx.all_reduce(w, "dr", &both);
            let qa = w.op("qa", slice(1, 0, *ql), &[&sum]);
            (Some(qa), w.op("ckv", slice(1, *ql, dims.kvr + dims.rope), &[&sum]))
        }
        Query::Direct(_) => (None, ctx.all_reduce(w, "ckv", &ckv)),
    }
}

/// A rope over one named input, each sequence at its own positions: `(writer, base, (name, value))`.
type RopeFn<'r> = dyn Fn(&mut Writer<'_>, &str, (&str, &str)) -> String + 'r;

/// The query, per head: its nope part `qnp` and its rotated rope part `qpr`.
fn query(
    w: &mut Writer<'_>,
    ctx: &LayerCtx<'_>,
    dims: &Dims,
    hn: &str,
    weights: Query,
    reduced_qa: Option<String>,
    rope: &RopeFn<'_>,
) -> (String, String) {
    let Dims { n, heads, nope, rope: rope_dim, .. } = *dims;
    let q = match weights {
        Query::Direct(wq) => w.op("q", Op::Linear, &[hn, &wq]),
        Query::Lora { wqa, qan, wqb, .. } => {
            let qa = match reduced_qa {
                Some(qa) => qa,
                None => w.op("qa", Op::Linear, &[hn, &wqa]),
            };
            let qan_out = w.op("qal", ctx.norm(), &[&qa, &qan]);
            w.op("q", Op::Linear, &[&qan_out, &wqb])
        }
    };
    let qh = w.op("qh", Op::Reshape { shape: vec![n, heads, nope + rope_dim] }, &[&q]);
    let qnp = w.op("qnp", slice(2, 0, nope), &[&qh]);
    let qpe = w.op("qpe", slice(2, nope, rope_dim), &[&qh]);
    let qpr = rope(w, "qpr", ("qpe", &qpe));
    (qnp, qpr)
}

/// The normed latent and the rotated rope key of every row, concatenated (`lat`): what the
/// cache holds.
fn latent(
    w: &mut Writer<'_>,
    ctx: &LayerCtx<'_>,
    dims: &Dims,
    hn: &str,
    (wkva, kvn): (&str, &str),
    reduced_ckv: Option<String>,
    rope: &RopeFn<'_>,
) -> String {
    let Dims { n, kvr, rope: rope_dim, .. } = *dims;
    let ckv = match reduced_ckv {
        Some(ckv) => ckv,
        None => w.op("ckv", Op::Linear, &[hn, wkva]),
    };
    let c = w.op("c", slice(1, 0, kvr), &[&ckv]);
    let kpe = w.op("kpe", slice(1, kvr, rope_dim), &[&ckv]);
    let cn = w.op("cn", ctx.norm(), &[&c, kvn]);
    let kph = w.op("kph", Op::Reshape { shape: vec![n, 1, rope_dim] }, &[&kpe]);
    let kpr = rope(w, "kpr", ("kph", &kph));
    let kpf = w.op("kpf", Op::Reshape { shape: vec![n, rope_dim] }, &[&kpr]);
    w.op("lat", Op::Concat { axis: 1 }, &[&cn, &kpf])
}

/// A prefill chunk attends in the unabsorbed form: each head widens every cached latent (and
/// the chunk's own) into its key and value through the up-projections, so a row's score costs
/// `qk_nope + qk_rope` and its value `v_dim` instead of the absorbed form's `kv_lora + qk_rope`
/// and `kv_lora`; the latent cache is the decode step's own.
fn attend_unabsorbed(
    w: &mut Writer<'_>,
    ctx: &LayerCtx<'_>,
    dims: &Dims,
    (qnp, qpr, lat): (&str, &str, &str),
    up: KvUp,
    wo: &str,
    attend: Attend,
) -> String {
    let Dims { n, heads, kvr, nope, rope, v_dim, .. } = *dims;
    let (wk, wv) = match up {
        // attn_k_b holds W_UKᵀ per head: its transpose is W_UK [h, nope, kvr].
        KvUp::PerHead { wkb, wvb } => (w.op("wuk", Op::Transpose { perm: vec![0, 2, 1] }, &[&wkb]), wvb),
        KvUp::Fused(wkvb) => {
            let kvb = w.op("kvb", Op::Reshape { shape: vec![heads, nope + v_dim, kvr] }, &[&wkvb]);
            (w.op("wuk", slice(1, 0, nope), &[&kvb]), w.op("wuv", slice(1, nope, v_dim), &[&kvb]))
        }
    };
    let qf = w.op("qf", Op::Concat { axis: 2 }, &[qnp, qpr]);
    let u = ctx.per_sequence(w, "u", &[("qf", &qf), ("lat", lat)], |w, seq, x| {
        let (qf, lat, pos) = (&x[0], &x[1], seq.pos.as_str());
        let lc = w.state("Lc", &[ctx.cache_slots(), kvr + rope]);
        // As attention: the chunk's own latents are attended to before they are written.
        let u = w.op("u", attend.up(), &[qf, &lc, &wk, &wv, pos, lat]);
        w.update(&lc, Op::CachePut, &[&lc, lat, pos]);
        u
    });
    let of = w.op("of", Op::Reshape { shape: vec![n, heads * v_dim] }, &[&u]);
    w.op("mo", Op::Linear, &[&of, wo])
}

/// A decode or forward step attends in the absorbed form: the key up-projection folded into
/// the query (`q_abs_h = W_UK_hᵀ q_nope_h`), the value's applied after the attention.
fn attend_absorbed(
    w: &mut Writer<'_>,
    ctx: &LayerCtx<'_>,
    dims: &Dims,
    (qnp, qpr, lat): (&str, &str, &str),
    up: KvUp,
    wo: &str,
    attend: Attend,
) -> String {
    let Dims { n, heads, kvr, nope, rope, v_dim, .. } = *dims;
    let (wukt, wuv) = match up {
        KvUp::PerHead { wkb, wvb } => (wkb, wvb),
        KvUp::Fused(wkvb) => {
            let kvb = w.op("kvb", Op::Reshape { shape: vec![heads, nope + v_dim, kvr] }, &[&wkvb]);
            let wuk = w.op("wuk", slice(1, 0, nope), &[&kvb]);
            let wukt = w.op("wukt", Op::Transpose { perm: vec![0, 2, 1] }, &[&wuk]);
            let wuv = w.op("wuv", slice(1, nope, v_dim), &[&kvb]);
            (wukt, wuv)
        }
    };
    let qab = w.op("qab", Op::LinearHeads, &[qnp, &wukt]);
    let qc = w.op("qc", Op::Concat { axis: 2 }, &[&qab, qpr]);
    let u = ctx.per_sequence(w, "u", &[("qc", &qc), ("lat", lat)], |w, seq, x| {
        let (qc, lat, pos) = (&x[0], &x[1], seq.pos.as_str());
        match ctx.decode().then(|| w.state("Lc", &[ctx.cache_slots(), kvr + rope])) {
            Some(lc) if ctx.ring() && ctx.verify().is_some() => {
                // A verify step's drafted latents stay pending on a ring (`author::verify`).
                let lp = w.state("Lp", &[ctx.verify().unwrap_or(1), kvr + rope]);
                let rings = [Ring { cache: &lc, pending: &lp, rows: lat, first: "lf" }];
                verify::flush(w, seq, &rings);
                let u = w.op("u", attend.absorbed(), &[qc, &lc, pos, lat]);
                verify::hold(w, ctx, pos, &rings);
                u
            }
            Some(lc) => {
                w.update(&lc, Op::CachePut, &[&lc, lat, pos]);
                w.op("u", attend.absorbed(), &[qc, &lc, pos])
            }
            None => w.op("u", attend.absorbed(), &[qc, lat, pos]),
        }
    });
    let oh = w.op("oh", Op::LinearHeads, &[&u, &wuv]);
    let of = w.op("of", Op::Reshape { shape: vec![n, heads * v_dim] }, &[&oh]);
    w.op("mo", Op::Linear, &[&of, wo])
}

/// The query projection: direct, or through the low-rank `q_a` (normed, `rank` wide) and `q_b`.
enum Query {
    Direct(String),
    Lora { rank: usize, wqa: String, qan: String, wqb: String },
}

/// The latent's key/value up-projection: HF's fused `kv_b`, or llama.cpp's per-head
/// `attn_k_b` (W_UKᵀ) and `attn_v_b` (W_UV).
enum KvUp {
    Fused(String),
    PerHead { wkb: String, wvb: String },
}

/// The attention's own attributes, shared by its absorbed and unabsorbed forms.
#[derive(Clone, Copy)]
struct Attend {
    scale: f64,
    latent: usize,
    window: Option<usize>,
}

impl Attend {
    fn up(self) -> Op {
        Op::AttendMlaUp { scale: self.scale, latent: self.latent, window: self.window }
    }
    fn absorbed(self) -> Op {
        Op::AttendMla { scale: self.scale, latent: self.latent, window: self.window }
    }
}
