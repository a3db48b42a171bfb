//! Products and lookups: `linear` (tileable along output features), `linear_heads` (along
//! heads), `embed` (along model columns; Q8_0 rows folded block by block) and `argmax`.

use rayon::prelude::*;

use super::call::{kernels, Call, Outs, Weight};
use super::matmul::{products, products_into, tiles};
use super::packed::{widen_fp8_row, widen_row};
use super::region::{region, untiled, Axes};
use super::rows::Rows;
use super::tensor::SimTensor;
use super::{invalid, SimError};
use crate::q8::QK8_0;

kernels! {
    Linear(call, _) => linear(call),
    LinearHeads(call, _) => linear_heads(call),
    Embed(call, _) => embed(call),
    Argmax(call, _) => argmax(call),
}

/// `y = x Wᵀ (+ b)`: `x [N, in]`, `W [out, in]`, `b [out]`.
fn linear(call: &Call<'_>) -> Outs {
    let (tx, x) = call.f32(0)?;
    let w = call.weight(1)?;
    let (&[n, inp], &[out, w_in]) = (tx.shape.as_slice(), w.shape()) else {
        return invalid(format!("expects x [N, in] and W [out, in], given {:?} and {:?}", tx.shape, w.shape()));
    };
    if w_in != inp {
        return invalid(format!("x has {inp} features but W {:?} takes {w_in}", w.shape()));
    }
    let bias = match call.args.len() {
        3 => {
            let (tb, b) = call.f32(2)?;
            if tb.shape != [out] {
                return invalid(format!("bias {:?} does not match {out} outputs", tb.shape));
            }
            Some(b)
        }
        _ => None,
    };
    let rows = rows_of(w, 0, out)?;
    let reg = region(call.tiling(), &[n, out], Axes::Only(1), 1)?;
    if n > 1 && tiles(rows, n) {
        // Written in place by the threads that finish them.
        let mut y = vec![0.0f32; n * out];
        if products_into(rows, x, n, &reg.tiles, &mut y, out).is_some() {
            if let Some(b) = bias {
                for row in y.chunks_exact_mut(out) {
                    for j in reg.tiles.iter().flat_map(|&(s, e)| s..e) {
                        row[j] += b[j];
                    }
                }
            }
            return Ok(vec![SimTensor::f32(vec![n, out], y)]);
        }
    }
    let tmp = products(rows, x, n, &reg.tiles);
    // One row through tiles that cover the outputs in order (a decode step's usual case):
    // the products are already in place, only the bias to add.
    let in_order = reg.tiles.iter().try_fold(0, |at, &(s, e)| (s == at).then_some(e)) == Some(out);
    if n == 1 && in_order {
        let mut y = tmp;
        if let Some(b) = bias {
            y.iter_mut().zip(b).for_each(|(v, b)| *v += b);
        }
        return Ok(vec![SimTensor::f32(vec![n, out], y)]);
    }
    let mut y = vec![0.0f32; n * out];
    let mut at = 0;
    for &(s, e) in &reg.tiles {
        transposed(&tmp[at * n..(at + e - s) * n], n, |r, i, v| {
            y[r * out + s + i] = v + bias.map_or(0.0, |b| b[s + i]);
        });
        at += e - s;
    }
    Ok(vec![SimTensor::f32(vec![n, out], y)])
}

/// One `linear` per head: `x [N, h, in]`, `W [h, out, in]` → `[N, h, out]`.
fn linear_heads(call: &Call<'_>) -> Outs {
    let (tx, x) = call.f32(0)?;
    let w = call.weight(1)?;
    let (&[n, h, inp], &[wh, out, w_in]) = (tx.shape.as_slice(), w.shape()) else {
        return invalid(format!("expects x [N, h, in] and W [h, out, in], given {:?} and {:?}", tx.shape, w.shape()));
    };
    if wh != h || w_in != inp {
        return invalid(format!("x {:?} does not match W {:?}", tx.shape, w.shape()));
    }
    let reg = region(call.tiling(), &[n, h, out], Axes::Only(1), 1)?;
    let heads: Vec<usize> = reg.tiles.iter().flat_map(|&(s, e)| s..e).collect();
    let head = |&j: &usize| -> Result<Vec<f32>, SimError> {
        let xs = crate::view::gather(n * inp, (0..n).map(|r| &x[(r * h + j) * inp..(r * h + j + 1) * inp]));
        Ok(products(rows_of(w, j * out, out)?, &xs, n, &[(0, out)]))
    };
    let per_head: Vec<Vec<f32>> = if n * h * out * inp >= 1 << 16 {
        heads.par_iter().map(head).collect::<Result<_, _>>()?
    } else {
        heads.iter().map(head).collect::<Result<_, _>>()?
    };
    let mut y = vec![0.0f32; n * h * out];
    for (&j, tmp) in heads.iter().zip(&per_head) {
        transposed(tmp, n, |r, o, v| y[(r * h + j) * out + o] = v);
    }
    Ok(vec![SimTensor::f32(vec![n, h, out], y)])
}

/// `put(r, i, src[i·n + r])` for every row `i` of `src` (`[m, n]`, the products' order: a
/// feature's `n` activation rows together) and `r < n`, in blocks of 16 × 16 so that both the
/// reads and the caller's writes along `i` stay in cache (one pass down a column of the
/// output a row apart missed the cache on every value of a prefill chunk).
#[inline]
fn transposed(src: &[f32], n: usize, mut put: impl FnMut(usize, usize, f32)) {
    const B: usize = 16;
    let m = src.len().checked_div(n).unwrap_or(0);
    for i0 in (0..m).step_by(B) {
        for r0 in (0..n).step_by(B) {
            for r in r0..(r0 + B).min(n) {
                for i in i0..(i0 + B).min(m) {
                    put(r, i, src[i * n + r]);
                }
            }
        }
    }
}

/// Row lookup `E[ids[n]]`: `ids i32[N]`, `E [V, D]` → `[N, D]`.
fn embed(call: &Call<'_>) -> Outs {
    let (tid, ids) = call.i32(0)?;
    let e = call.weight(1)?;
    let (&[n], &[v, d]) = (tid.shape.as_slice(), e.shape()) else {
        return invalid(format!("expects ids i32[N] and E [V, D], given {:?} and {:?}", tid.shape, e.shape()));
    };
    let reg = region(call.tiling(), &[n, d], Axes::Only(1), 1)?;
    let mut y = vec![0.0f32; n * d];
    for (r, &id) in ids.iter().enumerate() {
        let row = match usize::try_from(id) {
            Ok(row) if row < v => row,
            _ => return invalid(format!("token id {id} is out of range for a vocabulary of {v}")),
        };
        for &(s, t) in &reg.tiles {
            let dst = &mut y[r * d + s..r * d + t];
            match e {
                Weight::Dense(_, data) => dst.copy_from_slice(&data[row * d + s..row * d + t]),
                Weight::Q8(q) => {
                    let nb = d / QK8_0;
                    for (c, o) in (s..t).zip(dst) {
                        let block = &q.blocks[row * nb + c / QK8_0];
                        *o = block.d * block.qs[c % QK8_0] as f32;
                    }
                }
                Weight::Packed(p) => {
                    let mut full = vec![0.0f32; d];
                    widen_row(p.format, p.row(row), &mut full);
                    dst.copy_from_slice(&full[s..t]);
                }
                Weight::Fp8(w) => {
                    let mut full = vec![0.0f32; d];
                    widen_fp8_row(&w.view(), row, &mut full);
                    dst.copy_from_slice(&full[s..t]);
                }
            }
        }
    }
    Ok(vec![SimTensor::f32(vec![n, d], y)])
}

/// Index of the largest value of each row (the first on ties): `x [N, V]` → `i32[N]`.
fn argmax(call: &Call<'_>) -> Outs {
    untiled(call.tiling())?;
    let (t, x) = call.f32(0)?;
    let &[n, v] = t.shape.as_slice() else { return invalid(format!("expects x [N, V], given {:?}", t.shape)) };
    if v == 0 || v > i32::MAX as usize {
        return invalid(format!("cannot take the argmax of rows of {v} values"));
    }
    let mut out = Vec::with_capacity(n);
    for row in x.chunks_exact(v) {
        let mut best = 0;
        for (i, &val) in row.iter().enumerate() {
            if val > row[best] {
                best = i;
            }
        }
        out.push(best as i32);
    }
    Ok(vec![SimTensor::i32(vec![n], out)])
}

/// Rows `first..first + count` of a weight whose last axis is its columns.
pub(super) fn rows_of(w: Weight<'_>, first: usize, count: usize) -> Result<Rows<'_>, SimError> {
    let cols = w.shape().last().copied().unwrap_or(0);
    match w {
        Weight::Dense(_, data) => data
            .get(first * cols..(first + count) * cols)
            .map(|data| Rows::Dense { data, cols })
            .map_or_else(|| invalid("weight rows out of range"), Ok),
        Weight::Packed(p) => {
            let rb = p.row_bytes();
            let bytes = first.checked_mul(rb).zip((first + count).checked_mul(rb)).and_then(|(a, b)| p.bytes.get(a..b));
            bytes
                .map(|bytes| Rows::Packed { format: p.format, bytes, cols })
                .map_or_else(|| invalid("weight rows out of range"), Ok)
        }
        Weight::Q8(q) => {
            let nb = cols / QK8_0;
            q.blocks
                .get(first * nb..(first + count) * nb)
                .map(|blocks| Rows::Q8 { blocks, cols })
                .map_or_else(|| invalid("weight rows out of range"), Ok)
        }
        Weight::Fp8(w) => {
            let view = w.view();
            match first.checked_add(count).and_then(|e| e.checked_mul(cols)) {
                Some(end) if end <= view.values.len() => Ok(Rows::Fp8 { view, first }),
                _ => invalid("weight rows out of range"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::transposed;

    /// Every element once, at its transposed place, for sizes on and off the block of 16
    /// (and no rows at all).
    #[test]
    fn transposed_puts_every_element_once_at_its_place() {
        for (m, n) in [(1, 1), (16, 16), (37, 5), (5, 37), (40, 33), (0, 4), (3, 0)] {
            let src: Vec<f32> = (0..m * n).map(|v| v as f32).collect();
            let mut got = vec![-1.0f32; m * n];
            let mut seen = 0;
            transposed(&src, n, |r, i, v| {
                assert_eq!(got[r * m + i], -1.0, "({r}, {i}) put twice");
                got[r * m + i] = v;
                seen += 1;
            });
            let want: Vec<f32> = (0..n).flat_map(|r| (0..m).map(move |i| (i * n + r) as f32)).collect();
            assert_eq!((seen, got), (m * n, want), "m {m} n {n}");
        }
    }
}
