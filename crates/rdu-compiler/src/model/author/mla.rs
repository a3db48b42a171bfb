//! DeepSeek-V2 multi-head latent attention: every step caches the normalised latent and the
//! rotated rope key (`kv_lora + qk_rope` values per position). Decode and forward steps attend
//! in the absorbed form (the key up-projection folded into the query, the value's applied after
//! the attention); a prefill chunk attends through the up-projections (`attend_mla_up`).

use super::attention::slice;
use super::split::Run;
use super::verify::{self, Ring};
use super::writer::{float, list, Writer, Q8_BLOCK};
use super::LayerCtx;
use crate::model::spec::{Dialect, Mixer};
use rdu_spatial::Op;

/// Writes the MLA mixer over `hn`; returns its `[N, D]` output.
pub(super) fn write(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, hn: &str) -> String {
    let Mixer::Mla { heads, q_lora_rank, kv_lora_rank: kvr, qk_nope: nope, qk_rope: rope, v_dim, scale } =
        ctx.layer.mixer
    else {
        unreachable!("mla::write on a non-MLA layer")
    };
    let (n, d) = (ctx.rows, ctx.spec.d_model);
    let qk = nope + rope;
    // Each chip its heads; the latent cache is replicated on every chip. The latent's
    // down-projections (q_a, kv_a), whose results every head reads, are split along their `in`
    // axis when each chip's columns hold whole Q8_0 blocks: each chip multiplies its shard of
    // `hn` by its columns and one all-reduce sums both (`down`); otherwise every chip reads them
    // whole.
    let by_heads = |unit: usize| [Run::heads(heads, unit)];
    let row_split = ctx.tensor_parallel() && d.is_multiple_of(ctx.tp * Q8_BLOCK);
    let down = |w: &mut Writer<'_>, base: &str, rows: usize| {
        if row_split {
            w.projection_split(base, &[rows, d], 1, &[Run::columns(d)])
        } else {
            w.projection(base, &[rows, d])
        }
    };
    let q_weights = match q_lora_rank {
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
    let gguf = matches!(ctx.spec.dialect, Dialect::Gguf);
    let up = if gguf {
        // llama.cpp splits kv_b per head: attn_k_b = W_UKᵀ [h, kvr, nope], attn_v_b = W_UV [h, v, kvr].
        KvUp::PerHead {
            wkb: w.projection_split("Wkb", &[heads, kvr, nope], 0, &by_heads(1)),
            wvb: w.projection_split("Wvb", &[heads, v_dim, kvr], 0, &by_heads(1)),
        }
    } else {
        KvUp::Fused(w.projection_split("Wkvb", &[heads * (nope + v_dim), kvr], 0, &by_heads(nope + v_dim)))
    };
    let wo = w.projection_split("Wo", &[d, heads * v_dim], 1, &by_heads(v_dim));
    let heads = ctx.local(heads);
    let (cos, sin, rot) = ctx.rope_tables(w);

    // The down-projections over the chips: both partial products summed by one all-reduce.
    let reduced = row_split.then(|| {
        let chips = [("axis", "1".to_string()), ("chips", ctx.tp.to_string())];
        let hs = w.op("hs", Op::Shard, &[hn], &chips);
        let ckv = w.op("ckvp", Op::Linear, &[&hs, &wkva], &[]);
        match &q_weights {
            Query::Lora { rank: ql, wqa, .. } => {
                let qa = w.op("qap", Op::Linear, &[&hs, wqa], &[]);
                let both = w.op("dp", Op::Concat, &[&qa, &ckv], &[("axis", "1".into())]);
                let sum = ctx.all_reduce(w, "dr", &both);
                let qa = w.op("qa", Op::Slice, &[&sum], &slice(1, 0, *ql));
                (Some(qa), w.op("ckv", Op::Slice, &[&sum], &slice(1, *ql, kvr + rope)))
            }
            Query::Direct(_) => (None, ctx.all_reduce(w, "ckv", &ckv)),
        }
    });

    // Query.
    let q = match q_weights {
        Query::Direct(wq) => w.op("q", Op::Linear, &[hn, &wq], &[]),
        Query::Lora { wqa, qan, wqb, .. } => {
            let qa = match reduced.as_ref().and_then(|r| r.0.clone()) {
                Some(qa) => qa,
                None => w.op("qa", Op::Linear, &[hn, &wqa], &[]),
            };
            let qan_out = w.op("qal", Op::RmsNorm, &[&qa, &qan], &ctx.norm_attrs());
            w.op("q", Op::Linear, &[&qan_out, &wqb], &[])
        }
    };
    let qh = w.op("qh", Op::Reshape, &[&q, &list(&[n, heads, qk])], &[]);
    let qnp = w.op("qnp", Op::Slice, &[&qh], &slice(2, 0, nope));
    let qpe = w.op("qpe", Op::Slice, &[&qh], &slice(2, nope, rope));
    let rope_attrs = [("dim", rot.to_string()), ("style", ctx.rope_style().to_string())];
    // Positions (and below, the latent cache) are each sequence's own.
    let qpr = ctx.per_sequence(w, "qpr", &[("qpe", &qpe)], |w, seq, x| {
        w.op("qpr", Op::Rope, &[&x[0], &cos, &sin, &seq.pos], &rope_attrs)
    });

    // Latent and rope key.
    let ckv = match reduced {
        Some((_, ckv)) => ckv,
        None => w.op("ckv", Op::Linear, &[hn, &wkva], &[]),
    };
    let c = w.op("c", Op::Slice, &[&ckv], &slice(1, 0, kvr));
    let kpe = w.op("kpe", Op::Slice, &[&ckv], &slice(1, kvr, rope));
    let cn = w.op("cn", Op::RmsNorm, &[&c, &kvn], &ctx.norm_attrs());
    let kph = w.op("kph", Op::Reshape, &[&kpe, &list(&[n, 1, rope])], &[]);
    let kpr = ctx.per_sequence(w, "kpr", &[("kph", &kph)], |w, seq, x| {
        w.op("kpr", Op::Rope, &[&x[0], &cos, &sin, &seq.pos], &rope_attrs)
    });
    let kpf = w.op("kpf", Op::Reshape, &[&kpr, &list(&[n, rope])], &[]);
    let lat = w.op("lat", Op::Concat, &[&cn, &kpf], &[("axis", "1".into())]);

    let mut attrs = vec![("scale", float(scale)), ("latent", kvr.to_string())];
    attrs.extend(ctx.window_attr());
    if ctx.prefill() {
        // A prefill chunk attends in the unabsorbed form: each head widens every cached latent
        // (and the chunk's own) into its key and value through the up-projections, so a row's
        // score costs `qk_nope + qk_rope` and its value `v_dim` instead of the absorbed form's
        // `kv_lora + qk_rope` and `kv_lora`; the latent cache is the decode step's own.
        let (wk, wv) = match up {
            // attn_k_b holds W_UKᵀ per head: its transpose is W_UK [h, nope, kvr].
            KvUp::PerHead { wkb, wvb } => (w.op("wuk", Op::Transpose, &[&wkb], &[("perm", list(&[0, 2, 1]))]), wvb),
            KvUp::Fused(wkvb) => {
                let kvb = w.op("kvb", Op::Reshape, &[&wkvb, &list(&[heads, nope + v_dim, kvr])], &[]);
                (
                    w.op("wuk", Op::Slice, &[&kvb], &slice(1, 0, nope)),
                    w.op("wuv", Op::Slice, &[&kvb], &slice(1, nope, v_dim)),
                )
            }
        };
        let qf = w.op("qf", Op::Concat, &[&qnp, &qpr], &[("axis", "2".into())]);
        let u = ctx.per_sequence(w, "u", &[("qf", &qf), ("lat", &lat)], |w, seq, x| {
            let (qf, lat, pos) = (&x[0], &x[1], seq.pos.as_str());
            let lc = w.state("Lc", &[ctx.cache_slots(), kvr + rope]);
            // As attention: the chunk's own latents are attended to before they are written.
            let u = w.op("u", Op::AttendMlaUp, &[qf, &lc, &wk, &wv, pos, lat], &attrs);
            w.update(&lc, Op::CachePut, &[&lc, lat, pos], &[]);
            u
        });
        let of = w.op("of", Op::Reshape, &[&u, &list(&[n, heads * v_dim])], &[]);
        return w.op("mo", Op::Linear, &[&of, &wo], &[]);
    }

    // Absorb the key up-projection into the query: q_abs_h = W_UK_hᵀ q_nope_h.
    let (wukt, wuv) = match up {
        KvUp::PerHead { wkb, wvb } => (wkb, wvb),
        KvUp::Fused(wkvb) => {
            let kvb = w.op("kvb", Op::Reshape, &[&wkvb, &list(&[heads, nope + v_dim, kvr])], &[]);
            let wuk = w.op("wuk", Op::Slice, &[&kvb], &slice(1, 0, nope));
            let wukt = w.op("wukt", Op::Transpose, &[&wuk], &[("perm", list(&[0, 2, 1]))]);
            let wuv = w.op("wuv", Op::Slice, &[&kvb], &slice(1, nope, v_dim));
            (wukt, wuv)
        }
    };
    let qab = w.op("qab", Op::LinearHeads, &[&qnp, &wukt], &[]);
    let qc = w.op("qc", Op::Concat, &[&qab, &qpr], &[("axis", "2".into())]);
    let u = ctx.per_sequence(w, "u", &[("qc", &qc), ("lat", &lat)], |w, seq, x| {
        let (qc, lat, pos) = (&x[0], &x[1], seq.pos.as_str());
        match ctx.decode().then(|| w.state("Lc", &[ctx.cache_slots(), kvr + rope])) {
            Some(lc) if ctx.ring() && ctx.verify().is_some() => {
                // A verify step's drafted latents stay pending on a ring (`author::verify`).
                let lp = w.state("Lp", &[ctx.verify().unwrap_or(1), kvr + rope]);
                let rings = [Ring { cache: &lc, pending: &lp, rows: lat, first: "lf" }];
                verify::flush(w, seq, &rings);
                let u = w.op("u", Op::AttendMla, &[qc, &lc, pos, lat], &attrs);
                verify::hold(w, ctx, pos, &rings);
                u
            }
            Some(lc) => {
                w.update(&lc, Op::CachePut, &[&lc, lat, pos], &[]);
                w.op("u", Op::AttendMla, &[qc, &lc, pos], &attrs)
            }
            None => w.op("u", Op::AttendMla, &[qc, lat, pos], &attrs),
        }
    });
    let oh = w.op("oh", Op::LinearHeads, &[&u, &wuv], &[]);
    let of = w.op("of", Op::Reshape, &[&oh, &list(&[n, heads * v_dim])], &[]);
    w.op("mo", Op::Linear, &[&of, &wo], &[])
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
