//! Positions and caches: `rope`, `cache_put`, and causal softmax attention (`attend`,
//! `attend_mla`) over ring caches, with scores, softmax and sums in f64.

use super::gemm::{self, View};
use super::{f32s, i32s, out, Kernel};
use crate::graph::{numel, Data, RopeStyle, Tensor};
use rayon::prelude::*;
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

/// Keys and values of one store (the cache's slots, or the chunk's own rows), widened to
/// f64: the key of (index, kv head) is `dk` values at `keys[(index·g + head)·key_stride..]`,
/// its value `dv` values at `values[(index·g + head)·value_stride..]`.
struct Store {
    keys: Vec<f64>,
    key_stride: usize,
    /// `None`: the values are the first `dv` values of the keys (latent attention).
    values: Option<Vec<f64>>,
    value_stride: usize,
}

impl Store {
    fn values(&self) -> &[f64] {
        self.values.as_deref().unwrap_or(&self.keys)
    }
}

/// Where one attention reads: `q [N, h, dk]`; the cache, and — for a prefill chunk — the
/// chunk's own rows.
struct Attention<'a> {
    q: &'a [f32],
    n: usize,
    heads: usize,
    dk: usize,
    slots: usize,
    kv_heads: usize,
    dv: usize,
    cache: Store,
    /// The chunk's own keys and values, when given.
    rows: Option<Store>,
}

/// A run of attended positions read from consecutive indices of one store.
#[derive(Clone, Copy)]
struct Run {
    /// Read from the chunk's rows (else from the cache's slots).
    chunk: bool,
    /// The store index of the run's first position.
    start: usize,
    len: usize,
}

/// Causal softmax attention: row `i` at `p_i` sees positions `t ≤ p_i` with `p_i − t < window`;
/// position `t` is read from the chunk's row `j` when the chunk is given and `p_j = t` (the last
/// such row), otherwise from slot `t mod S`; query head `j` uses kv head `j / (h/g)`. Scores
/// (`q·k`) and the weighted sum of values are f64 products (`gemm`), the softmax in f64; rows in
/// parallel.
fn attend_core(a: &Attention<'_>, pos: &Tensor, scale: f64, window: Option<usize>) -> Kernel {
    let positions = positions(pos, a.n)?;
    // Position → the chunk row that holds it (the last row at that position wins).
    let chunk: BTreeMap<usize, usize> =
        if a.rows.is_some() { positions.iter().enumerate().map(|(j, &p)| (p, j)).collect() } else { BTreeMap::new() };
    let q64 = gemm::widen(a.q);
    let rows: Vec<Result<Vec<f32>, String>> =
        (0..a.n).into_par_iter().map(|i| attend_row(a, &q64, &chunk, positions[i], i, scale, window)).collect();
    let mut data = Vec::with_capacity(a.n * a.heads * a.dv);
    for row in rows {
        data.extend(row?);
    }
    Ok(vec![out(&[a.n, a.heads, a.dv], data)?])
}

/// Row `i` (at position `p`) of [`attend_core`]: `h × dv` values.
fn attend_row(
    a: &Attention<'_>,
    q64: &[f64],
    chunk: &BTreeMap<usize, usize>,
    p: usize,
    i: usize,
    scale: f64,
    window: Option<usize>,
) -> Result<Vec<f32>, String> {
    let first = window.map_or(0, |w| (p + 1).saturating_sub(w));
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
    // The attended positions in order, as runs of consecutive store indices.
    let mut runs: Vec<Run> = Vec::new();
    for t in first..=p {
        let (in_chunk, index) = match chunk.get(&t) {
            Some(&row) => (true, row),
            None if a.slots == 0 => return Err(format!("row {i} reads position {t} from a cache with no slots")),
            None => (false, t % a.slots),
        };
        match runs.last_mut() {
            Some(r) if r.chunk == in_chunk && r.start + r.len == index => r.len += 1,
            _ => runs.push(Run { chunk: in_chunk, start: index, len: 1 }),
        }
    }
    let total_len = p + 1 - first;
    let group = a.heads / a.kv_heads;
    let mut row = Vec::with_capacity(a.heads * a.dv);
    for kv in 0..a.kv_heads {
        // The query heads of this kv head: `group × dk`.
        let q = View::dense(&q64[(i * a.heads + kv * group) * a.dk..][..group * a.dk], group, a.dk);
        let store = |r: &Run| if r.chunk { a.rows.as_ref().expect("chunk rows") } else { &a.cache };
        // scores[head, position] = scale · q·k
        let mut scores = vec![0f64; group * total_len];
        let mut column = 0;
        for r in &runs {
            let s = store(r);
            let keys = View {
                data: &s.keys,
                offset: (r.start * a.kv_heads + kv) * s.key_stride,
                rows: r.len,
                cols: a.dk,
                row_stride: a.kv_heads * s.key_stride,
                col_stride: 1,
            };
            let mut part = vec![0f64; group * r.len];
            gemm::gemm(q, keys.t(), &mut part, false);
            for h in 0..group {
                for (o, &v) in scores[h * total_len + column..][..r.len].iter_mut().zip(&part[h * r.len..][..r.len]) {
                    *o = scale * v;
                }
            }
            column += r.len;
        }
        // Softmax weights (unnormalised) and their totals, per head.
        let mut totals = vec![0f64; group];
        for (h, total) in totals.iter_mut().enumerate() {
            let head = &mut scores[h * total_len..][..total_len];
            let max = head.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            head.iter_mut().for_each(|s| *s = (*s - max).exp());
            *total = head.iter().sum();
        }
        // acc[head] = Σ weight · value, then divided by the head's total.
        let mut acc = vec![0f64; group * a.dv];
        let mut column = 0;
        for r in &runs {
            let s = store(r);
            let weights =
                View { data: &scores, offset: column, rows: group, cols: r.len, row_stride: total_len, col_stride: 1 };
            let values = View {
                data: s.values(),
                offset: (r.start * a.kv_heads + kv) * s.value_stride,
                rows: r.len,
                cols: a.dv,
                row_stride: a.kv_heads * s.value_stride,
                col_stride: 1,
            };
            gemm::gemm(weights, values, &mut acc, true);
            column += r.len;
        }
        for (h, total) in totals.iter().enumerate() {
            row.extend(acc[h * a.dv..][..a.dv].iter().map(|o| (o / total) as f32));
        }
    }
    Ok(row)
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
    let store = |ks: &[f32], vs: &[f32]| Store {
        keys: gemm::widen(ks),
        key_stride: dk,
        values: Some(gemm::widen(vs)),
        value_stride: dv,
    };
    let a = Attention {
        q: f32s(q)?,
        n: q.shape()[0],
        heads: q.shape()[1],
        dk,
        slots,
        kv_heads,
        dv,
        cache: store(f32s(k)?, f32s(v)?),
        rows: chunk.map(|(kn, vn)| store(kn, vn)),
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
    let store = |cs: &[f32]| Store { keys: gemm::widen(cs), key_stride: width, values: None, value_stride: width };
    let a = Attention {
        q: f32s(q)?,
        n: q.shape()[0],
        heads: q.shape()[1],
        dk: width,
        slots,
        kv_heads: 1,
        dv: latent,
        cache: store(f32s(c)?),
        rows: chunk.map(store),
    };
    attend_core(&a, pos, scale, window)
}
