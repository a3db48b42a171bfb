//! Positions and caches: `rope` (neox or interleaved pairs, partial rotary dims, tileable
//! along heads), `cache_put` (ring slots, in place), and causal softmax attention `attend`
//! (GQA, window, ring) and `attend_mla` (one shared latent key), tileable along heads.

use rayon::prelude::*;
use std::collections::BTreeMap;

use super::call::{kernels, Call, Outs};
use super::matmul::{gemm, View};
use super::region::{region, untiled, Axes};
use super::tensor::SimTensor;
use super::{invalid, SimError};
use crate::op::RopeStyle;
use crate::q8::{add_scaled, add_scaled_4x4, add_scaled_nx4, dot, dot2x2};

kernels! {
    Rope(call, a) => rope(call, a.dim, a.style),
    CachePut(call, _) => cache_put(call),
    Attend(call, a) => attend(call, Softmax { scale: a.scale as f32, window: a.window }),
    AttendMla(call, a) => attend_mla(call, a.latent, Softmax { scale: a.scale as f32, window: a.window }),
    AttendMlaUp(call, a) => attend_mla_up(call, a.latent, Softmax { scale: a.scale as f32, window: a.window }),
}

/// What an attention's softmax takes: the score scale, and the window of positions a row
/// sees, if any.
#[derive(Clone, Copy)]
struct Softmax {
    scale: f32,
    window: Option<usize>,
}

/// Heads one work item of an attention serves with each key it reads.
const HEADS: usize = 16;
/// From this many rows on (a prefill chunk), an attention runs as two products per block of
/// rows (`Rows::products`) instead of row by row.
const PRODUCT_ROWS: usize = 8;
/// Scores (f32) one task of `Rows::products` holds at a time (4 MiB): at a 4096-slot cache,
/// 16 heads by 16 rows.
const BLOCK_SCORES: usize = 1 << 20;
/// Heads whose keys and values `attend_mla_up` widens from the latents together (the latents
/// are packed once for them all).
const UP_HEADS: usize = 16;
/// Entries a task of `attend_mla_up`'s widening takes.
const UP_ENTRIES: usize = 256;

/// Rotates the first `dim` dims of every head of row `i` by table row `p_i`.
fn rope(call: &Call<'_>, r: usize, style: RopeStyle) -> Outs {
    let (tx, x) = call.f32(0)?;
    let (tc, cos) = call.f32(1)?;
    let (ts, sin) = call.f32(2)?;
    let &[n, h, d] = tx.shape.as_slice() else { return invalid(format!("expects x [N, h, d], given {:?}", tx.shape)) };
    let pos = positions(call, 3, n)?;
    let neox = style == RopeStyle::Neox;
    let (&[p_rows, half], true) = (tc.shape.as_slice(), tc.shape == ts.shape) else {
        return invalid(format!("cos {:?} and sin {:?} must be equal [P, R/2] tables", tc.shape, ts.shape));
    };
    if !r.is_multiple_of(2) || r > d || r / 2 > half {
        return invalid(format!("rotary dim {r} must be even, at most {d} and fit tables of {half} columns"));
    }
    let reg = region(call.tiling(), &tx.shape, Axes::Only(1), 1)?;
    let mut y = vec![0.0f32; x.len()];
    for (i, &p) in pos.iter().enumerate() {
        if p >= p_rows {
            return invalid(format!("position {p} is beyond the {p_rows} rows of the rope tables"));
        }
        let (c, s) = (&cos[p * half..p * half + r / 2], &sin[p * half..p * half + r / 2]);
        for &(h0, h1) in &reg.tiles {
            for j in h0..h1 {
                let base = (i * h + j) * d;
                let (src, dst) = (&x[base..base + d], &mut y[base..base + d]);
                dst[r..].copy_from_slice(&src[r..]);
                for k in 0..r / 2 {
                    let (a, b) = if neox { (k, k + r / 2) } else { (2 * k, 2 * k + 1) };
                    dst[a] = src[a] * c[k] - src[b] * s[k];
                    dst[b] = src[b] * c[k] + src[a] * s[k];
                }
            }
        }
    }
    Ok(vec![SimTensor::f32(tx.shape.clone(), y)])
}

/// Writes row `i` of `x` to slot `p_i mod S` of the cache `C`.
fn cache_put(call: &mut Call<'_>) -> Outs {
    untiled(call.tiling())?;
    let c_shape = call.shape_of(0)?;
    let (tx, x) = call.f32(1)?;
    let n = tx.shape.first().copied().unwrap_or(0);
    let pos = positions(call, 2, n)?;
    let (Some((&slots, c_row)), Some((_, x_row))) = (c_shape.split_first(), tx.shape.split_first()) else {
        return invalid(format!("cannot put rows {:?} into a cache {c_shape:?}", tx.shape));
    };
    if c_row != x_row || slots == 0 {
        return invalid(format!("cannot put rows {:?} into a cache {c_shape:?}", tx.shape));
    }
    let row: usize = c_shape[1..].iter().product();
    let mut cache = call.take_or_clone(0)?;
    let Some(data) = cache.as_f32_mut() else { return invalid("the cache must be f32") };
    for (i, p) in pos.iter().enumerate() {
        let slot = p % slots;
        data[slot * row..(slot + 1) * row].copy_from_slice(&x[i * row..(i + 1) * row]);
    }
    Ok(vec![cache])
}

/// Causal softmax attention over a (ring) cache with grouped kv heads and an optional window;
/// a prefill chunk passes its own keys and values after `pos`, and attention sinks (one logit
/// per head, in every softmax's denominator, attending to nothing) come last.
fn attend(call: &Call<'_>, softmax: Softmax) -> Outs {
    let (tq, q) = call.f32(0)?;
    let (tk, k) = call.f32(1)?;
    let (tv, v) = call.f32(2)?;
    let (&[n, h, dk], &[s, g, kdk], &[vs, vg, dv]) = (tq.shape.as_slice(), tk.shape.as_slice(), tv.shape.as_slice())
    else {
        return invalid(format!(
            "expects q [N, h, dk], K [S, g, dk], V [S, g, dv], given {:?}, {:?}, {:?}",
            tq.shape, tk.shape, tv.shape
        ));
    };
    if kdk != dk || vs != s || vg != g || g == 0 || h % g != 0 || s == 0 {
        return invalid(format!("q {:?}, K {:?} and V {:?} do not agree", tq.shape, tk.shape, tv.shape));
    }
    let keys = Kv { data: k, slot: g * dk, group: dk, len: dk };
    let values = Kv { data: v, slot: g * dv, group: dv, len: dv };
    // 4 operands, 5 (sinks), 6 (the chunk's k, v) or 7 (both).
    if call.args.len() == 5 && call.shape_of(4)?.len() == 3 {
        return invalid("takes the chunk's keys and values together: given the keys without the values");
    }
    let with_chunk = call.args.len() >= 6;
    let chunk = if with_chunk {
        let (tkn, kn) = call.f32(4)?;
        let (tvn, vn) = call.f32(5)?;
        if tkn.shape != [n, g, dk] || tvn.shape != [n, g, dv] {
            return invalid(format!(
                "the chunk's k {:?} and v {:?} must be [{n}, {g}, {dk}] and [{n}, {g}, {dv}]",
                tkn.shape, tvn.shape
            ));
        }
        Some((Kv { data: kn, ..keys }, Kv { data: vn, ..values }))
    } else {
        None
    };
    let sinks = if call.args.len() % 2 == 1 {
        let (ts, sinks) = call.f32(if with_chunk { 6 } else { 4 })?;
        if ts.shape != [h] {
            return invalid(format!("the sinks {:?} must be [{h}] (one logit per head)", ts.shape));
        }
        Some(sinks)
    } else {
        None
    };
    let at = Attended { s, per_group: h / g, keys, values, chunk, sinks };
    run(call, softmax, q, [n, h, dk], 3, at)
}

/// Absorbed multi-head latent attention: key `C[slot]` (all `c` dims), value its first `latent`;
/// a prefill chunk passes its own latents after `pos`.
fn attend_mla(call: &Call<'_>, latent: usize, softmax: Softmax) -> Outs {
    let (tq, q) = call.f32(0)?;
    let (tc, c) = call.f32(1)?;
    let (&[n, h, dc], &[s, cdim]) = (tq.shape.as_slice(), tc.shape.as_slice()) else {
        return invalid(format!("expects q [N, h, c] and C [S, c], given {:?} and {:?}", tq.shape, tc.shape));
    };
    if cdim != dc || latent > dc || s == 0 {
        return invalid(format!("q {:?}, C {:?} and latent {latent} do not agree", tq.shape, tc.shape));
    }
    let keys = Kv { data: c, slot: dc, group: 0, len: dc };
    let values = Kv { data: c, slot: dc, group: 0, len: latent };
    let chunk = if call.args.len() == 4 {
        let (tcn, cn) = call.f32(3)?;
        if tcn.shape != [n, dc] {
            return invalid(format!("the chunk's c {:?} must be [{n}, {dc}]", tcn.shape));
        }
        Some((Kv { data: cn, ..keys }, Kv { data: cn, ..values }))
    } else {
        None
    };
    let at = Attended { s, per_group: h.max(1), keys, values, chunk, sinks: None };
    run(call, softmax, q, [n, h, dc], 2, at)
}

/// Multi-head latent attention through the up-projections (the unabsorbed form, for prefill):
/// an entry — a cache slot of `C`, or a row of the chunk's own latents `c` — holds the latent
/// `x` (its first `latent` values) and the rotated rope key (the rest); head `j` reads the key
/// `Wk[j]·x ‖ rope key` and the value `Wv[j]·x`. Causal softmax as `attend`.
///
/// Sixteen heads of a tile at a time: the keys and values of every entry through
/// `matrixmultiply` (blocks of entries in parallel), then head by head (in parallel) the scores
/// of every row against every entry as one product, each row's softmax in f32 over the entries
/// it reads (the others weigh exactly 0), the weighted sum of values as a second product.
fn attend_mla_up(call: &Call<'_>, latent: usize, softmax: Softmax) -> Outs {
    let MlaUp { q, c, wk, wv, chunk, n, h, dq, s, width, nope, dv, latent } = MlaUp::of(call, latent)?;
    let scale = softmax.scale;
    // Each row's entries (cache slots, then chunk rows after the `s` slots) and multiplicities.
    let entry = |src: Src| match src {
        Src::Slot(sl) => sl,
        Src::Row(r) => s + r,
    };
    let runs: Vec<Vec<Run>> = (row_sources(call, softmax.window, 4, n, s, chunk.is_some())?.into_iter())
        .map(|srcs| runs_of(srcs.into_iter().map(|(src, m)| (entry(src), m))))
        .collect();
    let entries: Vec<f32>;
    let all = match chunk {
        Some(cn) => {
            entries = c.iter().chain(cn).copied().collect();
            &entries[..]
        }
        None => c,
    };
    let e = all.len() / width;
    let reg = region(call.tiling(), &[n, h, dv], Axes::Only(1), 1)?;
    let failed =
        || SimError::Invalid { message: "internal: a product of attend_mla_up does not fit its buffers".into() };
    let lat = View { data: all, offset: 0, rows: e, cols: latent, row_stride: width, col_stride: 1 };
    // Every entry's latent through the up-projection rows of heads `j0..j0 + g` (`[e, g·rows]`),
    // blocks of entries in parallel: each block's latents packed once for all the heads.
    let widen = |w: &[f32], rows: usize, j0: usize, g: usize| -> Result<Vec<f32>, SimError> {
        let b = View { offset: j0 * rows * latent, ..View::dense(w, g * rows, latent) }.t();
        let mut out = vec![0.0f32; e * g * rows];
        out.par_chunks_mut(UP_ENTRIES * g * rows).enumerate().try_for_each(|(block, o)| {
            let a = View { offset: block * UP_ENTRIES * width, rows: o.len() / (g * rows), ..lat };
            gemm(a, b, o, g * rows).ok_or_else(failed)
        })?;
        Ok(out)
    };
    let mut y = vec![0.0f32; n * h * dv];
    for &(t0, t1) in &reg.tiles {
        for j0 in (t0..t1).step_by(UP_HEADS) {
            let g = (t1 - j0).min(UP_HEADS);
            let (nopes, values) = (widen(wk, nope, j0, g)?, widen(wv, dv, j0, g)?);
            let head = |i: usize| -> Result<Vec<f32>, SimError> {
                let mut keys = vec![0.0f32; e * dq];
                for (x, key) in keys.chunks_exact_mut(dq).enumerate() {
                    key[..nope].copy_from_slice(&nopes[(x * g + i) * nope..][..nope]);
                    key[nope..].copy_from_slice(&all[x * width + latent..][..width - latent]);
                }
                let qj = View { data: q, offset: (j0 + i) * dq, rows: n, cols: dq, row_stride: h * dq, col_stride: 1 };
                let mut scores = vec![0.0f32; n * e];
                gemm(qj, View::dense(&keys, e, dq).t(), &mut scores, e).ok_or_else(failed)?;
                // Each row's scores become its softmax weights in place (`softmax_runs`).
                let mut scratch = (Vec::new(), Vec::new());
                for (runs, sc) in runs.iter().zip(scores.chunks_exact_mut(e)) {
                    softmax_runs(sc, runs, scale, None, &mut scratch);
                }
                let weights = scores;
                let v = View { data: &values, offset: i * dv, rows: e, cols: dv, row_stride: g * dv, col_stride: 1 };
                let mut o = vec![0.0f32; n * dv];
                gemm(View::dense(&weights, n, e), v, &mut o, dv).ok_or_else(failed)?;
                Ok(o)
            };
            let outs: Vec<Vec<f32>> = (0..g).into_par_iter().map(head).collect::<Result<_, _>>()?;
            for (i, o) in outs.iter().enumerate() {
                for (r, row) in o.chunks_exact(dv).enumerate() {
                    y[(r * h + j0 + i) * dv..][..dv].copy_from_slice(row);
                }
            }
        }
    }
    Ok(vec![SimTensor::f32(vec![n, h, dv], y)])
}

/// `attend_mla_up`'s operands and sizes, checked: `q [n, h, dq]`, the cache `C [s, width]`,
/// `Wk [h, nope, latent]`, `Wv [h, dv, latent]`, and the chunk's own latents `[n, width]` when
/// given (operand 5).
struct MlaUp<'a> {
    q: &'a [f32],
    c: &'a [f32],
    wk: &'a [f32],
    wv: &'a [f32],
    chunk: Option<&'a [f32]>,
    n: usize,
    h: usize,
    dq: usize,
    s: usize,
    width: usize,
    nope: usize,
    dv: usize,
    latent: usize,
}

impl<'a> MlaUp<'a> {
    fn of(call: &'a Call<'_>, latent: usize) -> Result<MlaUp<'a>, SimError> {
        let (tq, q) = call.f32(0)?;
        let (tc, c) = call.f32(1)?;
        let (tk, wk) = call.f32(2)?;
        let (tv, wv) = call.f32(3)?;
        let shapes = (tq.shape.as_slice(), tc.shape.as_slice(), tk.shape.as_slice(), tv.shape.as_slice());
        let (&[n, h, dq], &[s, width], &[kh, nope, kl], &[vh, dv, vl]) = shapes else {
            return invalid(format!(
                "expects q [N, h, dq], C [S, c], Wk [h, dk, latent], Wv [h, dv, latent], given {:?}, {:?}, {:?}, {:?}",
                tq.shape, tc.shape, tk.shape, tv.shape
            ));
        };
        if s == 0
            || latent == 0
            || latent > width
            || (kh, vh, kl, vl) != (h, h, latent, latent)
            || dq != nope + width - latent
        {
            return invalid(format!(
                "q {:?}, C {:?}, Wk {:?}, Wv {:?} and latent {latent} do not agree",
                tq.shape, tc.shape, tk.shape, tv.shape
            ));
        }
        let chunk = if call.args.len() == 6 {
            let (tcn, cn) = call.f32(5)?;
            if tcn.shape != [n, width] {
                return invalid(format!("the chunk's c {:?} must be [{n}, {width}]", tcn.shape));
            }
            Some(cn)
        } else {
            None
        };
        Ok(MlaUp { q, c, wk, wv, chunk, n, h, dq, s, width, nope, dv, latent })
    }
}

/// Consecutive entries a row reads with one multiplicity: `first..first + len`, each weighing
/// `multiplicity` times its exponential.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Run {
    first: usize,
    len: usize,
    multiplicity: f32,
}

/// The runs of `reads` (entry, multiplicity), in reading order: a run continues while the next
/// entry is the one after it with the same multiplicity.
fn runs_of(reads: impl IntoIterator<Item = (usize, f32)>) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for (x, m) in reads {
        match runs.last_mut() {
            Some(r) if r.first + r.len == x && r.multiplicity == m => r.len += 1,
            _ => runs.push(Run { first: x, len: 1, multiplicity: m }),
        }
    }
    runs
}

/// One row's scores `sc` become its softmax weights in place, in f32, over the entries it reads
/// (`runs`, in reading order): the scaled scores gathered in reading order, shifted by their
/// maximum, their exponentials taken together (`map`: vectorised), each times its entry's
/// multiplicity, divided by their total (summed in reading order, then the sink's exponential
/// added when the head has a sink, which also joins the maximum); every other entry 0.
/// Whole runs rather than entry by entry, so that every step but the total is vectorised.
fn softmax_runs(
    sc: &mut [f32],
    runs: &[Run],
    scale: f32,
    sink: Option<f32>,
    (shifted, exps): &mut (Vec<f32>, Vec<f32>),
) {
    shifted.clear();
    for r in runs {
        shifted.extend(sc[r.first..r.first + r.len].iter().map(|&v| scale * v));
    }
    let max = sink.map_or(max_of(shifted), |sk| max_of(shifted).max(sk));
    shifted.iter_mut().for_each(|x| *x -= max);
    exps.resize(shifted.len(), 0.0);
    super::elementwise::map(exps, shifted, &super::mathf::exp);
    let mut at = 0;
    for r in runs {
        exps[at..at + r.len].iter_mut().for_each(|x| *x *= r.multiplicity);
        at += r.len;
    }
    let total: f32 = exps.iter().sum::<f32>() + sink.map_or(0.0, |sk| super::mathf::exp(sk - max));
    sc.fill(0.0);
    let mut at = 0;
    for r in runs {
        sc[r.first..r.first + r.len].iter_mut().zip(&exps[at..at + r.len]).for_each(|(w, &x)| *w = x / total);
        at += r.len;
    }
}

/// The largest of `xs` (NaNs ignored, as `f32::max` does; `-inf` for none), eight lanes at a
/// time so that it vectorises: the maximum is exact in any order.
fn max_of(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let (whole, rest) = xs.as_chunks::<8>();
    for c in whole {
        for l in 0..8 {
            lanes[l] = lanes[l].max(c[l]);
        }
    }
    rest.iter().chain(&lanes).copied().fold(f32::NEG_INFINITY, f32::max)
}

/// Positions of `n` rows from argument `i`: a scalar `pos` (row `r` at `pos + r`) or `i32[n]`.
pub(super) fn positions(call: &Call<'_>, i: usize, n: usize) -> Result<Vec<usize>, SimError> {
    let (t, p) = call.i32(i)?;
    let neg = || invalid(format!("negative position in {p:?}"));
    match t.shape.as_slice() {
        [] => {
            let base = usize::try_from(p.first().copied().unwrap_or(-1)).or_else(|_| neg())?;
            Ok((0..n).map(|r| base + r).collect())
        }
        [m] if *m == n => p.iter().map(|&v| usize::try_from(v).or_else(|_| neg())).collect(),
        other => invalid(format!("positions must be i32[] or i32[{n}], given i32{other:?}")),
    }
}

/// Where keys or values sit: `data[slot·S + group·g ..][..len]`.
#[derive(Clone, Copy)]
struct Kv<'a> {
    data: &'a [f32],
    slot: usize,
    group: usize,
    len: usize,
}

impl<'a> Kv<'a> {
    fn at(&self, slot: usize, group: usize) -> &'a [f32] {
        let start = slot * self.slot + group * self.group;
        &self.data[start..start + self.len]
    }
}

/// Where one attended key sits: a cache slot, or a row of the chunk's own keys.
#[derive(Clone, Copy)]
enum Src {
    Slot(usize),
    Row(usize),
}

/// The attended keys of a row at `p` (from `lo`), each with its multiplicity: positions held by
/// the chunk's rows (`chunk`: position → row) are read from them, the others from slot `t mod S`
/// — with their multiplicity when more positions than slots are read from a ring.
fn sources(lo: usize, p: usize, s: usize, chunk: &BTreeMap<usize, usize>) -> Vec<(Src, f32)> {
    let cached = || (lo..=p).filter(|t| !chunk.contains_key(t));
    let rows = (lo..=p).filter_map(|t| chunk.get(&t).map(|&r| (Src::Row(r), 1.0)));
    let (first, last) = (cached().next(), cached().next_back());
    let from_cache: Vec<(Src, f32)> = match (first, last) {
        (Some(a), Some(b)) if b - a < s => cached().map(|t| (Src::Slot(t % s), 1.0)).collect(),
        (Some(_), Some(_)) => {
            let mut count = vec![0usize; s];
            cached().for_each(|t| count[t % s] += 1);
            count.iter().enumerate().filter(|(_, &c)| c > 0).map(|(sl, &c)| (Src::Slot(sl), c as f32)).collect()
        }
        _ => Vec::new(),
    };
    from_cache.into_iter().chain(rows).collect()
}

/// The attended keys of each of the `n` rows (positions from argument `pos_arg`, the `window`
/// attribute if any) over a cache of `s` slots and, when `chunk`, the chunk's own rows.
fn row_sources(
    call: &Call<'_>,
    window: Option<usize>,
    pos_arg: usize,
    n: usize,
    s: usize,
    chunk: bool,
) -> Result<Vec<Vec<(Src, f32)>>, SimError> {
    if window == Some(0) {
        return invalid("window must be at least 1");
    }
    let pos = positions(call, pos_arg, n)?;
    let by_position: BTreeMap<usize, usize> =
        if chunk { pos.iter().enumerate().map(|(r, &p)| (p, r)).collect() } else { BTreeMap::new() };
    Ok(pos.iter().map(|&p| sources(window.map_or(0, |w| (p + 1).saturating_sub(w)), p, s, &by_position)).collect())
}

/// The key or value `src` points at: in the cache `kv`, or in the chunk's `rows`.
fn read<'d>(kv: &Kv<'d>, rows: Option<&Kv<'d>>, src: Src, group: usize) -> Result<&'d [f32], SimError> {
    match (src, rows) {
        (Src::Slot(sl), _) => Ok(kv.at(sl, group)),
        (Src::Row(r), Some(rows)) => Ok(rows.at(r, group)),
        (Src::Row(_), None) => invalid("internal: a chunk row without the chunk's keys"),
    }
}

/// `scores[head][e] = scale · q·k` of every head of a run (`qs`) against the `len` keys it
/// attends (`key(e)`): two heads by two keys at a time (`dot2x2`, each score exactly its `dot`).
fn scores<'k>(
    qs: &[&[f32]],
    key: impl Fn(usize) -> Result<&'k [f32], SimError>,
    len: usize,
    scale: f32,
) -> Result<Vec<f32>, SimError> {
    let mut scores = vec![0.0f32; qs.len() * len];
    let mut e = 0;
    while e + 2 <= len {
        let two = [key(e)?, key(e + 1)?];
        let mut jj = 0;
        while jj + 2 <= qs.len() {
            let d = dot2x2([qs[jj], qs[jj + 1]], two);
            let (first, second) = (jj * len + e, (jj + 1) * len + e);
            (scores[first], scores[first + 1]) = (scale * d[0], scale * d[1]);
            (scores[second], scores[second + 1]) = (scale * d[2], scale * d[3]);
            jj += 2;
        }
        if jj < qs.len() {
            for (i, k) in two.into_iter().enumerate() {
                scores[jj * len + e + i] = scale * dot(qs[jj], k);
            }
        }
        e += 2;
    }
    if e < len {
        let k = key(e)?;
        for (jj, qv) in qs.iter().enumerate() {
            scores[jj * len + e] = scale * dot(qv, k);
        }
    }
    Ok(scores)
}

/// `o[head] = Σₑ weights[head][e] · value(e)` in order of `e` (each product rounded, then added,
/// as `add_scaled`), four heads by four values at a time (`add_scaled_4x4`; the heads past the
/// last four together, four values at a time: `add_scaled_nx4`).
fn weighted_sum<'v>(
    weights: &[f32],
    len: usize,
    value: impl Fn(usize) -> Result<&'v [f32], SimError>,
    heads: usize,
    dv: usize,
) -> Result<Vec<f32>, SimError> {
    let mut o = vec![0.0f32; heads * dv];
    let mut e = 0;
    while e + 4 <= len {
        let vals = [value(e)?, value(e + 1)?, value(e + 2)?, value(e + 3)?];
        let mut jj = 0;
        while jj + 4 <= heads {
            let w = std::array::from_fn(|h| std::array::from_fn(|i| weights[(jj + h) * len + e + i]));
            add_scaled_4x4(&mut o[jj * dv..(jj + 4) * dv], w, vals);
            jj += 4;
        }
        if jj < heads {
            let mut w = [[0f32; 4]; 4];
            for (h, wh) in (jj..heads).zip(w.iter_mut()) {
                *wh = std::array::from_fn(|i| weights[h * len + e + i]);
            }
            add_scaled_nx4(&mut o[jj * dv..heads * dv], &w[..heads - jj], vals);
        }
        e += 4;
    }
    for e in e..len {
        let val = value(e)?;
        for (jj, acc) in o.chunks_exact_mut(dv.max(1)).enumerate() {
            add_scaled(acc, weights[jj * len + e], val);
        }
    }
    Ok(o)
}

/// What an attention reads besides its queries: the cache of `s` slots (keys and values, `per_group`
/// query heads a kv head), a prefill chunk's own keys and values, and the sinks (one logit per
/// query head) if any.
struct Attended<'a> {
    s: usize,
    per_group: usize,
    keys: Kv<'a>,
    values: Kv<'a>,
    chunk: Option<(Kv<'a>, Kv<'a>)>,
    sinks: Option<&'a [f32]>,
}

/// Scores `scale · q·k` over the attended positions (`pos` is argument `pos_arg`), softmax in
/// f32 (a head's sink, when given, joins the maximum and the total), weighted sum of values: a
/// chunk of at least `PRODUCT_ROWS` rows as products over blocks of rows (`Rows::products`),
/// fewer rows (a decode step) row by row, each key and value read in place once for every head
/// of a run.
fn run(call: &Call<'_>, softmax: Softmax, q: &[f32], [n, h, dk]: [usize; 3], pos_arg: usize, at: Attended<'_>) -> Outs {
    let scale = softmax.scale;
    let row_sources = row_sources(call, softmax.window, pos_arg, n, at.s, at.chunk.is_some())?;
    let dv = at.values.len;
    let reg = region(call.tiling(), &[n, h, dv], Axes::Only(1), 1)?;
    if n >= PRODUCT_ROWS {
        let a = Rows { q, n, h, dk, dv, at: &at, sources: &row_sources, scale };
        return Ok(vec![SimTensor::f32(vec![n, h, dv], a.products(&reg.tiles)?)]);
    }
    let Attended { per_group, keys, values, chunk, sinks, .. } = at;
    // Work items: a row and a run of at most HEADS heads of one tile sharing one kv head, so
    // each key and value read serves every head of the run; run-major, so the items a thread
    // takes in turn read the same kv head's keys and values (the whole cache may not fit in
    // the last-level cache: row-major order streamed it from memory for every row).
    let mut items: Vec<(usize, usize, usize)> = Vec::new();
    for &(a, b) in &reg.tiles {
        let mut j0 = a;
        while j0 < b {
            let j1 = b.min((j0 / per_group + 1) * per_group).min(j0 + HEADS);
            items.extend((0..n).map(|r| (r, j0, j1)));
            j0 = j1;
        }
    }
    let (row_keys, row_values) = (chunk.as_ref().map(|c| &c.0), chunk.as_ref().map(|c| &c.1));
    let one = |&(r, j0, j1): &(usize, usize, usize)| -> Result<Vec<f32>, SimError> {
        let (srcs, kvh, heads) = (&row_sources[r], j0 / per_group, j1 - j0);
        let len = srcs.len();
        let qs: Vec<&[f32]> = (j0..j1).map(|j| &q[(r * h + j) * dk..(r * h + j + 1) * dk]).collect();
        let mut scores = scores(&qs, |e| read(&keys, row_keys, srcs[e].0, kvh), len, scale)?;
        // Softmax weights in f32, each divided by its head's total (the exponentials of a head's
        // shifted scores taken together, `map`: vectorised).
        let mut shifted = vec![0.0f32; len];
        for (jj, head) in scores.chunks_exact_mut(len.max(1)).enumerate() {
            let sink = sinks.map(|sk| sk[j0 + jj]);
            let max = head.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let max = sink.map_or(max, |sk| max.max(sk));
            shifted.iter_mut().zip(&*head).for_each(|(d, s)| *d = s - max);
            super::elementwise::map(head, &shifted, &super::mathf::exp);
            head.iter_mut().zip(srcs).for_each(|(s, (_, m))| *s *= m);
            let total: f32 = head.iter().sum::<f32>() + sink.map_or(0.0, |sk| super::mathf::exp(sk - max));
            head.iter_mut().for_each(|w| *w /= total);
        }
        weighted_sum(&scores, len, |e| read(&values, row_values, srcs[e].0, kvh), heads, dv)
    };
    let work: usize = n * h * dk * row_sources.iter().map(Vec::len).max().unwrap_or(1);
    let outs: Vec<Vec<f32>> = if work >= 1 << 16 {
        items.par_iter().map(one).collect::<Result<_, _>>()?
    } else {
        items.iter().map(one).collect::<Result<_, _>>()?
    };
    let mut y = vec![0.0f32; n * h * dv];
    for (&(r, j0, j1), o) in items.iter().zip(outs) {
        y[(r * h + j0) * dv..(r * h + j1) * dv].copy_from_slice(&o);
    }
    Ok(vec![SimTensor::f32(vec![n, h, dv], y)])
}

/// A chunk's attention (`run` of at least `PRODUCT_ROWS` rows): where its queries, keys and
/// values sit and which entries each row reads.
struct Rows<'a> {
    q: &'a [f32],
    n: usize,
    h: usize,
    dk: usize,
    dv: usize,
    /// The cache (its slots; the chunk's rows are entries `s..s + n`), the chunk and the sinks.
    at: &'a Attended<'a>,
    sources: &'a [Vec<(Src, f32)>],
    scale: f32,
}

impl Rows<'_> {
    /// Every head of the `tiles`, `[n, h, dv]` (the heads outside them 0): blocks of rows by
    /// runs of at most `HEADS` heads sharing a kv head, in parallel. A block gathers the keys
    /// and values of the entries its rows read (their union, in entry order: slots, then the
    /// chunk's rows); the scores of every row and head against them are one product
    /// (`matrixmultiply`); each row's softmax in f32 runs over the entries it reads, in reading
    /// order, as row by row; an entry the row does not read weighs exactly 0; the weighted sum
    /// of values is a second product.
    fn products(&self, tiles: &[(usize, usize)]) -> Result<Vec<f32>, SimError> {
        let (s, per_group) = (self.at.s, self.at.per_group);
        let entries = s + if self.at.chunk.is_some() { self.n } else { 0 };
        let mut items: Vec<(usize, usize, usize, usize)> = Vec::new();
        for &(a, b) in tiles {
            let mut j0 = a;
            while j0 < b {
                let j1 = b.min((j0 / per_group + 1) * per_group).min(j0 + HEADS);
                let block = (BLOCK_SCORES / ((j1 - j0) * entries).max(1)).max(1);
                items.extend((0..self.n).step_by(block).map(|r0| (r0, self.n.min(r0 + block), j0, j1)));
                j0 = j1;
            }
        }
        let outs: Vec<Vec<f32>> = items.par_iter().map(|&item| self.block(item)).collect::<Result<_, _>>()?;
        let mut y = vec![0.0f32; self.n * self.h * self.dv];
        for (&(r0, r1, j0, j1), o) in items.iter().zip(outs) {
            let g = j1 - j0;
            for (r, row) in (r0..r1).zip(o.chunks_exact(g * self.dv)) {
                y[(r * self.h + j0) * self.dv..(r * self.h + j1) * self.dv].copy_from_slice(row);
            }
        }
        Ok(y)
    }

    /// Rows `r0..r1`, heads `j0..j1` (one kv head's): `[rows, heads, dv]`.
    fn block(&self, (r0, r1, j0, j1): (usize, usize, usize, usize)) -> Result<Vec<f32>, SimError> {
        let (at, s) = (self.at, self.at.s);
        let (g, kvh, dk, dv) = (j1 - j0, j0 / at.per_group, self.dk, self.dv);
        let entry = |src: Src| match src {
            Src::Slot(sl) => sl,
            Src::Row(r) => s + r,
        };
        // The union of the rows' entries, in entry order, and each entry's place in it.
        let (entries, place) =
            crate::view::union(s + self.n, self.sources[r0..r1].iter().flatten().map(|&(src, _)| entry(src)));
        let union: Vec<Src> = entries.into_iter().map(|e| if e < s { Src::Slot(e) } else { Src::Row(e - s) }).collect();
        let u = union.len();
        let (row_keys, row_values) = (at.chunk.as_ref().map(|c| &c.0), at.chunk.as_ref().map(|c| &c.1));
        let mut keys = Vec::with_capacity(u * dk);
        let mut values = Vec::with_capacity(u * dv);
        for &src in &union {
            keys.extend_from_slice(read(&at.keys, row_keys, src, kvh)?);
            values.extend_from_slice(read(&at.values, row_values, src, kvh)?);
        }
        let rows = r1 - r0;
        let q = crate::view::gather(
            rows * g * dk,
            (r0..r1).map(|r| &self.q[(r * self.h + j0) * dk..(r * self.h + j1) * dk]),
        );
        let failed = || SimError::Invalid { message: "internal: a product of attend does not fit its buffers".into() };
        let mut scores = vec![0.0f32; rows * g * u];
        gemm(View::dense(&q, rows * g, dk), View::dense(&keys, u, dk).t(), &mut scores, u).ok_or_else(failed)?;
        // Each (row, head)'s scores become its weights in place (`softmax_runs`).
        let runs: Vec<Vec<Run>> = self.sources[r0..r1]
            .iter()
            .map(|read| runs_of(read.iter().map(|&(src, m)| (place[entry(src)], m))))
            .collect();
        let mut scratch = (Vec::new(), Vec::new());
        for (rh, sc) in scores.chunks_exact_mut(u.max(1)).enumerate() {
            let sink = at.sinks.map(|sk| sk[j0 + rh % g]);
            softmax_runs(sc, &runs[rh / g], self.scale, sink, &mut scratch);
        }
        let mut out = vec![0.0f32; rows * g * dv];
        gemm(View::dense(&scores, rows * g, u), View::dense(&values, u, dv), &mut out, dv).ok_or_else(failed)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{max_of, runs_of, softmax_runs, Run};

    #[test]
    fn reads_become_runs_of_consecutive_entries_with_one_multiplicity() {
        let reads = [(5, 1.0), (6, 1.0), (7, 2.0), (8, 2.0), (0, 1.0), (1, 1.0), (3, 1.0)];
        let run = |first, len, multiplicity| Run { first, len, multiplicity };
        assert_eq!(runs_of(reads), [run(5, 2, 1.0), run(7, 2, 2.0), run(0, 2, 1.0), run(3, 1, 1.0)]);
        assert_eq!(runs_of([]), []);
    }

    /// `softmax_runs` is the softmax written entry by entry, bit for bit: the same steps on the
    /// same values in reading order (a ring's wrap, a gap, a multiplicity).
    #[test]
    fn the_softmax_over_runs_is_the_softmax_entry_by_entry() {
        let scores: Vec<f32> = (0..41).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.37).collect();
        let reads = [(30, 1.0), (31, 1.0), (32, 3.0), (33, 1.0), (2, 1.0), (3, 1.0), (4, 1.0), (9, 1.0), (40, 1.0)];
        let scale = 0.71f32;
        let mut want = vec![0f32; scores.len()];
        let shifted: Vec<f32> = reads.iter().map(|&(x, _)| scale * scores[x]).collect();
        let max = shifted.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f32> =
            reads.iter().zip(&shifted).map(|(&(_, m), s)| m * super::super::mathf::exp(s - max)).collect();
        let total: f32 = exps.iter().sum();
        reads.iter().zip(&exps).for_each(|(&(x, _), e)| want[x] = e / total);
        let mut got = scores.clone();
        softmax_runs(&mut got, &runs_of(reads), scale, None, &mut (Vec::new(), Vec::new()));
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn the_maximum_ignores_nans_as_f32_max_does() {
        let xs: Vec<f32> = (0..19).map(|i| (i * 7 % 19) as f32 - 3.0).collect();
        assert_eq!(max_of(&xs), 15.0);
        assert_eq!(max_of(&[f32::NAN, -2.0, f32::NAN]), -2.0);
        assert_eq!(max_of(&[]), f32::NEG_INFINITY);
    }
}
