//! Products and lookups: `linear`, `linear_heads` (dot products in f64), `embed`, `argmax`.

use super::{f32s, i32s, out, Kernel};
use crate::graph::Tensor;

/// `Σᵢ a[i]·b[i]` accumulated in f64.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&p, &q)| f64::from(p) * f64::from(q)).sum()
}

/// `y = x Wᵀ (+ b)` for `x [N, in]`, `W [out, in]`.
pub(super) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Kernel {
    let (n, o) = (x.shape()[0], w.shape()[0]);
    let (xs, ws) = (f32s(x)?, f32s(w)?);
    let bias = b.map(f32s).transpose()?;
    let width = x.shape()[1];
    let mut data = Vec::with_capacity(n * o);
    for r in 0..n {
        let row = &xs[r * width..(r + 1) * width];
        for j in 0..o {
            let acc = dot(row, &ws[j * width..(j + 1) * width]) + bias.map_or(0.0, |b| f64::from(b[j]));
            data.push(acc as f32);
        }
    }
    Ok(vec![out(&[n, o], data)?])
}

/// `y[n, j] = W[j] x[n, j]` for `x [N, h, in]`, `W [h, out, in]`.
pub(super) fn linear_heads(x: &Tensor, w: &Tensor) -> Kernel {
    let (n, h, width) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let o = w.shape()[1];
    let (xs, ws) = (f32s(x)?, f32s(w)?);
    let mut data = Vec::with_capacity(n * h * o);
    for r in 0..n {
        for j in 0..h {
            let row = &xs[(r * h + j) * width..][..width];
            for k in 0..o {
                data.push(dot(row, &ws[(j * o + k) * width..][..width]) as f32);
            }
        }
    }
    Ok(vec![out(&[n, h, o], data)?])
}

/// Row lookup `E[ids[n]]`; an id outside `0..V` is an error.
pub(super) fn embed(ids: &Tensor, e: &Tensor) -> Kernel {
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
pub(super) fn argmax(x: &Tensor) -> Kernel {
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
