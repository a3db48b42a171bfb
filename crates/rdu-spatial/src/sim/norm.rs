//! Row norms over the last axis — `rms_norm` (with the `(w + offset)` convention) and
//! `l2_norm` — in f32; tileable along any axis but the last.

use super::call::{kernels, Call, Outs};
use super::invalid;
use super::region::{region, Axes};
use super::tensor::SimTensor;
use crate::q8::dot_dense;

kernels! {
    RmsNorm(call, a) => rms_norm(call, a.eps as f32, a.offset as f32),
    L2Norm(call, a) => l2_norm(call, a.eps as f32),
}

/// `x / √(mean(x²) + eps) · (w + offset)` over the last axis.
fn rms_norm(call: &Call<'_>, eps: f32, offset: f32) -> Outs {
    let (t, x) = call.f32(0)?;
    let (tw, w) = call.f32(1)?;
    let d = last_dim(&t.shape)?;
    if tw.shape != [d] {
        return invalid(format!("weight {:?} does not match the last axis {d} of {:?}", tw.shape, t.shape));
    }
    let scale: Vec<f32> = w.iter().map(|v| v + offset).collect();
    rows(call, t, x, d, |row, out| {
        let inv = 1.0 / (dot_dense(row, row) / d as f32 + eps).sqrt();
        for ((o, v), s) in out.iter_mut().zip(row).zip(&scale) {
            *o = v * inv * s;
        }
    })
}

/// `x / √(Σx² + eps)` over the last axis.
fn l2_norm(call: &Call<'_>, eps: f32) -> Outs {
    let (t, x) = call.f32(0)?;
    let d = last_dim(&t.shape)?;
    rows(call, t, x, d, |row, out| {
        let inv = 1.0 / (dot_dense(row, row) + eps).sqrt();
        for (o, v) in out.iter_mut().zip(row) {
            *o = v * inv;
        }
    })
}

fn last_dim(shape: &[usize]) -> Result<usize, super::SimError> {
    match shape.last() {
        Some(&d) => Ok(d),
        None => invalid("a norm needs at least one axis"),
    }
}

/// Applies `f` to every row of width `d` inside the region.
fn rows(call: &Call<'_>, t: &SimTensor, x: &[f32], d: usize, f: impl Fn(&[f32], &mut [f32])) -> Outs {
    let reg = region(call.tiling(), &t.shape, Axes::AllButLast, 0)?;
    let mut out = vec![0.0f32; x.len()];
    if d > 0 {
        for seg in reg.segments(&t.shape) {
            for (row, o) in x[seg.clone()].chunks_exact(d).zip(out[seg].chunks_exact_mut(d)) {
                f(row, o);
            }
        }
    }
    Ok(vec![SimTensor::f32(t.shape.clone(), out)])
}
