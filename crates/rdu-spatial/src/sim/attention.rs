//! Positions and caches: `rope` (neox or interleaved pairs, partial rotary dims, tileable
//! along heads), `cache_put` (ring slots, in place), and causal softmax attention `attend`
//! (GQA, window, ring) and `attend_mla` (one shared latent key), tileable along heads.

use rayon::prelude::*;

use super::ops::{Call, Outs};
use super::region::{region, untiled, Axes};
use super::tensor::SimTensor;
use super::{invalid, SimError};
use crate::q8::dot;

/// Rotates the first `dim` dims of every head of row `i` by table row `p_i`.
pub(super) fn rope(call: &Call<'_>) -> Outs {
    call.expect(4, 4, &["dim", "style"])?;
    let (tx, x) = call.f32(0)?;
    let (tc, cos) = call.f32(1)?;
    let (ts, sin) = call.f32(2)?;
    let &[n, h, d] = tx.shape.as_slice() else { return invalid(format!("expects x [N, h, d], given {:?}", tx.shape)) };
    let pos = positions(call, 3, n)?;
    let r = call.req_count("dim")?;
    let neox = match call.attr_word("style")?.unwrap_or("neox") {
        "neox" => true,
        "interleaved" => false,
        other => return invalid(format!("unknown rope style `{other}` (neox or interleaved)")),
    };
    let (&[p_rows, half], true) = (tc.shape.as_slice(), tc.shape == ts.shape) else {
        return invalid(format!("cos {:?} and sin {:?} must be equal [P, R/2] tables", tc.shape, ts.shape));
    };
    if r % 2 != 0 || r > d || r / 2 > half {
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
pub(super) fn cache_put(call: &mut Call<'_>) -> Outs {
    call.expect(3, 3, &[])?;
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

/// Causal softmax attention over a (ring) cache with grouped kv heads and an optional window.
pub(super) fn attend(call: &Call<'_>) -> Outs {
    call.expect(4, 4, &["scale", "window"])?;
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
    run(call, q, [n, h, dk], s, h / g, keys, values)
}

/// Absorbed multi-head latent attention: key `C[slot]` (all `c` dims), value its first `latent`.
pub(super) fn attend_mla(call: &Call<'_>) -> Outs {
    call.expect(3, 3, &["scale", "latent", "window"])?;
    let (tq, q) = call.f32(0)?;
    let (tc, c) = call.f32(1)?;
    let (&[n, h, dc], &[s, cdim]) = (tq.shape.as_slice(), tc.shape.as_slice()) else {
        return invalid(format!("expects q [N, h, c] and C [S, c], given {:?} and {:?}", tq.shape, tc.shape));
    };
    let latent = call.req_count("latent")?;
    if cdim != dc || latent > dc || s == 0 {
        return invalid(format!("q {:?}, C {:?} and latent {latent} do not agree", tq.shape, tc.shape));
    }
    let keys = Kv { data: c, slot: dc, group: 0, len: dc };
    let values = Kv { data: c, slot: dc, group: 0, len: latent };
    run(call, q, [n, h, dc], s, h.max(1), keys, values)
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

impl Kv<'_> {
    fn at(&self, slot: usize, group: usize) -> &[f32] {
        let start = slot * self.slot + group * self.group;
        &self.data[start..start + self.len]
    }
}

/// Scores `scale · q·k` over the attended positions, softmax in f32, weighted sum of values.
fn run(call: &Call<'_>, q: &[f32], [n, h, dk]: [usize; 3], s: usize, per_group: usize, keys: Kv, values: Kv) -> Outs {
    let scale = call.req_float("scale")?;
    let window = call.attr_count("window")?;
    if window == Some(0) {
        return invalid("window must be at least 1");
    }
    let pos = positions(call, call.args.len() - 1, n)?;
    let dv = values.len;
    let reg = region(call.tiling(), &[n, h, dv], Axes::Only(1), 1)?;
    let items: Vec<(usize, usize)> =
        (0..n).flat_map(|r| reg.tiles.iter().flat_map(move |&(a, b)| (a..b).map(move |j| (r, j)))).collect();
    let one = |&(r, j): &(usize, usize)| -> Vec<f32> {
        let p = pos[r];
        let lo = window.map_or(0, |w| (p + 1).saturating_sub(w));
        // Slot t mod S of every attended position t, with its multiplicity when a ring wraps.
        let span = p - lo + 1;
        let slots: Vec<(usize, f32)> = if span <= s {
            (lo..=p).map(|t| (t % s, 1.0)).collect()
        } else {
            (0..s).map(|sl| (sl, count_congruent(lo, p, sl, s) as f32)).filter(|(_, c)| *c > 0.0).collect()
        };
        let qv = &q[(r * h + j) * dk..(r * h + j + 1) * dk];
        let kvh = j / per_group;
        let scores: Vec<f32> = slots.iter().map(|&(sl, _)| scale * dot(qv, keys.at(sl, kvh))).collect();
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let weights: Vec<f32> = scores.iter().zip(&slots).map(|(sc, (_, m))| m * (sc - max).exp()).collect();
        let total: f32 = weights.iter().sum();
        let mut o = vec![0.0f32; dv];
        for (w, &(sl, _)) in weights.iter().zip(&slots) {
            let w = w / total;
            for (acc, val) in o.iter_mut().zip(values.at(sl, kvh)) {
                *acc += w * val;
            }
        }
        o
    };
    let work: usize = items.len() * dk * pos.iter().map(|p| p.min(&s) + 1).max().unwrap_or(1);
    let outs: Vec<Vec<f32>> =
        if work >= 1 << 16 { items.par_iter().map(one).collect() } else { items.iter().map(one).collect() };
    let mut y = vec![0.0f32; n * h * dv];
    for (&(r, j), o) in items.iter().zip(outs) {
        y[(r * h + j) * dv..(r * h + j + 1) * dv].copy_from_slice(&o);
    }
    Ok(vec![SimTensor::f32(vec![n, h, dv], y)])
}

/// How many `t` in `lo..=hi` have `t mod s == slot`.
fn count_congruent(lo: usize, hi: usize, slot: usize, s: usize) -> usize {
    let upto = |x: usize| if x < slot { 0 } else { (x - slot) / s + 1 };
    upto(hi) - if lo == 0 { 0 } else { upto(lo - 1) }
}
