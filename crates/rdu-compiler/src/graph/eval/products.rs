//! Products and lookups: `linear`, `linear_heads` (dot products in f64, through [`super::gemm`]), `embed`, `argmax`.

use super::gemm::{self, View};
use super::{evals, f32s, i32s, out, Kernel};
use crate::graph::Tensor;
use rayon::prelude::*;
use rdu_spatial::q8::Q8Weight;

evals! {
    Linear(ins, _) => linear(ins[0], ins[1], ins.get(2).copied()),
    LinearHeads(ins, _) => linear_heads(ins[0], ins[1]),
    Embed(ins, _) => embed(ins[0], ins[1]),
    Argmax(ins, _) => argmax(ins[0]),
}

/// `y = x Wᵀ (+ b)` for `x [N, in]`, `W [out, in]`: dot products in f64 (`gemm`).
fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Kernel {
    let (o, width) = (w.shape()[0], x.shape()[1]);
    linear_of(x, gemm::Weights::F32(f32s(w)?), o, width, b)
}

/// [`linear`] of a weight `[out, in]` bound as Q8_0 blocks (rows of whole blocks, of the
/// graph's shape: checked by the caller), read as its exact values a block of rows at a time:
/// the same products as the dequantised weight's.
pub(super) fn linear_q8(x: &Tensor, w: &Q8Weight, b: Option<&Tensor>) -> Kernel {
    linear_of(x, gemm::Weights::Q8(&w.blocks), w.shape[0], x.shape()[1], b)
}

fn linear_of(x: &Tensor, w: gemm::Weights<'_>, o: usize, width: usize, b: Option<&Tensor>) -> Kernel {
    let n = x.shape()[0];
    let bias = b.map(f32s).transpose()?;
    let data = gemm::linear_f32(f32s(x)?, n, w, o, width, bias);
    Ok(vec![out(&[n, o], data)?])
}

/// `y[n, j] = W[j] x[n, j]` for `x [N, h, in]`, `W [h, out, in]`: dot products in f64, one
/// product per head (heads in parallel).
fn linear_heads(x: &Tensor, w: &Tensor) -> Kernel {
    let (n, h, width) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let o = w.shape()[1];
    let (x64, ws) = (gemm::widen(f32s(x)?), f32s(w)?);
    let per_head: Vec<Vec<f64>> = (0..h)
        .into_par_iter()
        .map(|j| {
            // Rows of head j: x[r, j, :] for every r.
            let xj = View { data: &x64, offset: j * width, rows: n, cols: width, row_stride: h * width, col_stride: 1 };
            let wj = gemm::widen(&ws[j * o * width..(j + 1) * o * width]);
            let mut y = vec![0f64; n * o];
            gemm::gemm(xj, View::dense(&wj, o, width).t(), &mut y);
            y
        })
        .collect();
    let mut data = vec![0f32; n * h * o];
    for (j, y) in per_head.iter().enumerate() {
        for r in 0..n {
            for (k, &v) in y[r * o..(r + 1) * o].iter().enumerate() {
                data[(r * h + j) * o + k] = v as f32;
            }
        }
    }
    Ok(vec![out(&[n, h, o], data)?])
}

/// Row lookup `E[ids[n]]`; an id outside `0..V` is an error.
fn embed(ids: &Tensor, e: &Tensor) -> Kernel {
    let (v, d) = (e.shape()[0], e.shape()[1]);
    let table = f32s(e)?;
    let mut data = Vec::with_capacity(ids.len() * d);
    for (n, &id) in i32s(ids)?.iter().enumerate() {
        let row = usize::try_from(id).ok().filter(|&r| r < v);
        let row = row.ok_or_else(|| format!("token id {id} of row {n} is outside the table's {v} rows"))?;
        data.extend_from_slice(&table[row * d..(row + 1) * d]);
    }
    Ok(vec![out(&[ids.len(), d], data)?])
}

/// The index of the largest value of each row (the first on ties; NaN never wins).
fn argmax(x: &Tensor) -> Kernel {
    let (n, v) = (x.shape()[0], x.shape()[1]);
    let xs = f32s(x)?;
    let mut data = Vec::with_capacity(n);
    for r in 0..n {
        let row = &xs[r * v..(r + 1) * v];
        let mut best = 0;
        for (i, &value) in row.iter().enumerate() {
            if value > row[best] || row[best].is_nan() && !value.is_nan() {
                best = i;
            }
        }
        data.push(i32::try_from(best).map_err(|_| format!("index {best} does not fit i32"))?);
    }
    Ok(vec![Tensor::try_i32(vec![n], data).ok_or("internal: wrong element count")?])
}
