//! Positions and caches: `rope`, `cache_put`, and causal softmax attention (`attend`,
//! `attend_mla`) over ring caches, with scores and softmax in f64.

use super::products::dot;
use super::{f32s, i32s, out, Kernel};
use crate::graph::{numel, Data, RopeStyle, Tensor};
use std::collections::BTreeMap;

/// The position of each of `n` rows: `pos + i` for a scalar `pos`, `pos[i]` for a vector.
pub(super) fn positions(pos: &Tensor, n: usize) -> Result<Vec<usize>, String> {
    let ps = i32s(pos)?;
    let all: Vec<i64> = match (pos.shape().is_empty(), ps) {
        (true, [p]) => (0..n).map(|i| i64::from(*p) + i as i64).collect(),
        (false, ps) if ps.len() == n => ps.iter().map(|&p| i64::from(p)).collect(),
        _ => return Err(format!("positions {pos:?} do not fit {n} rows")),
    };
    all.into_iter()
        .enumerate()
        .map(|(i, p)| usize::try_from(p).map_err(|_| format!("row {i} has the negative position {p}")))
        .collect()
}

/// Rotates the first `dim` values of every head of row `i` by the angles of table row `p_i`.
pub(super) fn rope(ins: &[&Tensor], dim: usize, style: RopeStyle) -> Kernel {
    let [x, cos, sin, pos] = ins else { return Err("rope takes x, cos, sin, pos".into()) };
    let (n, h, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let (rows, half) = (cos.shape()[0], cos.shape()[1]);
    let (cos, sin) = (f32s(cos)?, f32s(sin)?);
    let mut data = f32s(x)?.to_vec();
    for (i, p) in positions(pos, n)?.into_iter().enumerate() {
        if p >= rows {
            return Err(format!("row {i} is at position {p}, past the {rows} rows of the RoPE table"));
        }
        for j in 0..h {
            let head = &mut data[(i * h + j) * d..][..d];
            for c in 0..dim / 2 {
                let (a, b) = match style {
                    RopeStyle::Neox => (c, c + dim / 2),
                    RopeStyle::Interleaved => (2 * c, 2 * c + 1),
                };
                let (cs, sn) = (f64::from(cos[p * half + c]), f64::from(sin[p * half + c]));
                let (xa, xb) = (f64::from(head[a]), f64::from(head[b]));
                head[a] = (xa * cs - xb * sn) as f32;
                head[b] = (xb * cs + xa * sn) as f32;
            }
        }
    }
    Ok(vec![out(x.shape(), data)?])
}

/// Writes row `i` of `x` to slot `p_i mod S` of a copy of `c`.
pub(super) fn cache_put(c: &Tensor, x: &Tensor, pos: &Tensor) -> Kernel {
    let slots = c.shape()[0];
    let width = numel(&c.shape()[1..]);
    let rows = positions(pos, x.shape()[0])?;
    if slots == 0 {
        return Err("the cache has no slots".into());
    }
    let slot_of = |i: usize| rows[i] % slots * width;
    let t = match (c.data(), x.data()) {
        (Data::F32(cv), Data::F32(xv)) => {
            let mut data = cv.clone();
            for i in 0..rows.len() {
                data[slot_of(i)..][..width].copy_from_slice(&xv[i * width..][..width]);
            }
            Tensor::try_f32(c.shape().to_vec(), data)
        }
        (Data::I32(cv), Data::I32(xv)) => {
            let mut data = cv.clone();
            for i in 0..rows.len() {
                data[slot_of(i)..][..width].copy_from_slice(&xv[i * width..][..width]);
            }
            Tensor::try_i32(c.shape().to_vec(), data)
        }
        _ => None,
    };
    Ok(vec![t.ok_or("cache and rows of different dtypes")?])
}

/// Where one attention reads: `q [N, h, dk]`; keys and values per (slot, kv head) of the
/// cache, and — for a prefill chunk — per (row, kv head) of the chunk's own rows.
struct Attention<'a> {
    q: &'a [f32],
    n: usize,
    heads: usize,
    dk: usize,
    slots: usize,
    kv_heads: usize,
    dv: usize,
    /// The key of (slot, kv head): `dk` values.
    key: &'a dyn Fn(usize, usize) -> &'a [f32],
    /// The value of (slot, kv head): `dv` values.
    value: &'a dyn Fn(usize, usize) -> &'a [f32],
    /// Whether the chunk's own keys and values are given (read by `row_key`, `row_value`).
    rows: bool,
    /// The key of (chunk row, kv head).
    row_key: &'a dyn Fn(usize, usize) -> &'a [f32],
    /// The value of (chunk row, kv head).
    row_value: &'a dyn Fn(usize, usize) -> &'a [f32],
}

/// Causal softmax attention: row `i` at `p_i` sees positions `t ≤ p_i` with `p_i − t < window`;
/// position `t` is read from the chunk's row `j` when the chunk is given and `p_j = t` (the last
/// such row), otherwise from slot `t mod S`; query head `j` uses kv head `j / (h/g)`.
fn attend_core(a: &Attention<'_>, pos: &Tensor, scale: f64, window: Option<usize>) -> Kernel {
    let group = a.heads / a.kv_heads;
    let positions = positions(pos, a.n)?;
    // Position → the chunk row that holds it (the last row at that position wins).
    let chunk: BTreeMap<usize, usize> =
        if a.rows { positions.iter().enumerate().map(|(j, &p)| (p, j)).collect() } else { BTreeMap::new() };
    let mut data = Vec::with_capacity(a.n * a.heads * a.dv);
    for (i, &p) in positions.iter().enumerate() {
        let first = window.map_or(0, |w| (p + 1).saturating_sub(w));
        // Where each attended position is read: Ok(chunk row) or Err(cache slot).
        let sources: Vec<Result<usize, usize>> =
            (first..=p).map(|t| chunk.get(&t).copied().ok_or(t % a.slots)).collect();
        let cached: Vec<usize> = (first..=p).filter(|t| !chunk.contains_key(t)).collect();
        if let (Some(lo), Some(hi)) = (cached.first(), cached.last()) {
            if hi - lo + 1 > a.slots {
                return Err(format!(
                    "row {i} at position {p} reads positions {lo}..={hi} from the cache but it holds {} slots; \
                     use a window of at most {} or a larger cache",
                    a.slots, a.slots
                ));
            }
        }
        let key = |src: Result<usize, usize>, kv: usize| match src {
            Ok(row) => (a.row_key)(row, kv),
            Err(slot) => (a.key)(slot, kv),
        };
        let value = |src: Result<usize, usize>, kv: usize| match src {
            Ok(row) => (a.row_value)(row, kv),
            Err(slot) => (a.value)(slot, kv),
        };
        for j in 0..a.heads {
            let kv = j / group;
            let q = &a.q[(i * a.heads + j) * a.dk..][..a.dk];
            let scores: Vec<f64> = sources.iter().map(|&src| scale * dot(q, key(src, kv))).collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mut acc = vec![0f64; a.dv];
            for (&src, w) in sources.iter().zip(&weights) {
                for (o, &v) in acc.iter_mut().zip(value(src, kv)) {
                    *o += w * f64::from(v);
                }
            }
            data.extend(acc.iter().map(|o| (o / total) as f32));
        }
    }
    Ok(vec![out(&[a.n, a.heads, a.dv], data)?])
}

/// `attend(q [N, h, dk], K [S, g, dk], V [S, g, dv], pos (, k [N, g, dk], v [N, g, dv]))`.
pub(super) fn attend(ins: &[&Tensor], scale: f64, window: Option<usize>) -> Kernel {
    let (q, k, v, pos, chunk) = match ins {
        [q, k, v, pos] => (q, k, v, pos, None),
        [q, k, v, pos, kn, vn] => (q, k, v, pos, Some((f32s(kn)?, f32s(vn)?))),
        _ => return Err("attend takes q, K, V, pos (and the chunk's k, v)".into()),
    };
    let (slots, kv_heads, dk) = (k.shape()[0], k.shape()[1], k.shape()[2]);
    let dv = v.shape()[2];
    let (ks, vs) = (f32s(k)?, f32s(v)?);
    let key = |s: usize, g: usize| &ks[(s * kv_heads + g) * dk..][..dk];
    let value = |s: usize, g: usize| &vs[(s * kv_heads + g) * dv..][..dv];
    let (kn, vn) = chunk.unwrap_or((&[], &[]));
    let row_key = |r: usize, g: usize| &kn[(r * kv_heads + g) * dk..][..dk];
    let row_value = |r: usize, g: usize| &vn[(r * kv_heads + g) * dv..][..dv];
    let a = Attention {
        q: f32s(q)?,
        n: q.shape()[0],
        heads: q.shape()[1],
        dk,
        slots,
        kv_heads,
        dv,
        key: &key,
        value: &value,
        rows: chunk.is_some(),
        row_key: &row_key,
        row_value: &row_value,
    };
    attend_core(&a, pos, scale, window)
}

/// `attend_mla(q [N, h, c], C [S, c], pos (, c [N, c]))`: one key per slot (or chunk row) for
/// every head, its first `latent` values the value.
pub(super) fn attend_mla(ins: &[&Tensor], scale: f64, latent: usize, window: Option<usize>) -> Kernel {
    let (q, c, pos, chunk) = match ins {
        [q, c, pos] => (q, c, pos, None),
        [q, c, pos, cn] => (q, c, pos, Some(f32s(cn)?)),
        _ => return Err("attend_mla takes q, C, pos (and the chunk's c)".into()),
    };
    let (slots, width) = (c.shape()[0], c.shape()[1]);
    let cs = f32s(c)?;
    let key = |s: usize, _: usize| &cs[s * width..][..width];
    let value = |s: usize, _: usize| &cs[s * width..][..latent];
    let rs = chunk.unwrap_or(&[]);
    let row_key = |r: usize, _: usize| &rs[r * width..][..width];
    let row_value = |r: usize, _: usize| &rs[r * width..][..latent];
    let a = Attention {
        q: f32s(q)?,
        n: q.shape()[0],
        heads: q.shape()[1],
        dk: width,
        slots,
        kv_heads: 1,
        dv: latent,
        key: &key,
        value: &value,
        rows: chunk.is_some(),
        row_key: &row_key,
        row_value: &row_value,
    };
    attend_core(&a, pos, scale, window)
}
