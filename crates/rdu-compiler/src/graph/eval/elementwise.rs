//! Elementwise ops (numpy broadcasting for the binary ones; transcendental functions in f64)
//! and the two norms over the last axis (sums in f64).

use super::{evals, f32s, out, Kernel};
use crate::graph::infer::broadcast_shape;
use crate::graph::{numel, Data, Tensor};

evals! {
    Add(ins, _) => binary(ins[0], ins[1], |p, q| p + q, i32::wrapping_add),
    Sub(ins, _) => binary(ins[0], ins[1], |p, q| p - q, i32::wrapping_sub),
    Mul(ins, _) => binary(ins[0], ins[1], |p, q| p * q, i32::wrapping_mul),
    Scale(ins, a) => {
        let by = a.by;
        unary(ins[0], move |v| v * by)
    },
    Neg(ins, _) => match ins[0].data() {
        Data::I32(v) => {
            let t = Tensor::try_i32(ins[0].shape().to_vec(), v.iter().map(|a| a.wrapping_neg()).collect());
            Ok(vec![t.ok_or("internal: wrong element count")?])
        }
        _ => unary(ins[0], |v| -v),
    },
    Exp(ins, _) => unary(ins[0], f64::exp),
    Sigmoid(ins, _) => unary(ins[0], sigmoid),
    Silu(ins, _) => unary(ins[0], silu),
    Softplus(ins, _) => unary(ins[0], softplus),
    GeluTanh(ins, _) => unary(ins[0], gelu_tanh),
    RmsNorm(ins, a) => rms_norm(ins[0], ins[1], a.eps, a.offset),
    L2Norm(ins, a) => l2_norm(ins[0], a.eps),
}

/// For each element of the broadcast `shape`, the flat index into a tensor of `from`.
fn broadcast_index(from: &[usize], shape: &[usize]) -> Vec<usize> {
    let rank = shape.len();
    // Strides of `from` aligned to the right of `shape`; 0 where `from` stretches.
    let mut strides = vec![0; rank];
    let mut stride = 1;
    for (k, &d) in from.iter().enumerate().rev() {
        let axis = rank - from.len() + k;
        strides[axis] = if d == 1 { 0 } else { stride };
        stride *= d;
    }
    let mut index = vec![0usize; rank];
    let mut flat = Vec::with_capacity(numel(shape));
    for _ in 0..numel(shape) {
        flat.push(index.iter().zip(&strides).map(|(i, s)| i * s).sum());
        for axis in (0..rank).rev() {
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    flat
}

/// `add`, `sub`, `mul`: `f` on f32, `g` (wrapping arithmetic) on i32.
fn binary(a: &Tensor, b: &Tensor, f: fn(f32, f32) -> f32, g: fn(i32, i32) -> i32) -> Kernel {
    let shape = broadcast_shape(a.shape(), b.shape()).ok_or("operands do not broadcast")?;
    let (ia, ib) = (broadcast_index(a.shape(), &shape), broadcast_index(b.shape(), &shape));
    let t = match (a.data(), b.data()) {
        (Data::F32(x), Data::F32(y)) => {
            Tensor::try_f32(shape.clone(), ia.iter().zip(&ib).map(|(&i, &j)| f(x[i], y[j])).collect())
        }
        (Data::I32(x), Data::I32(y)) => {
            Tensor::try_i32(shape.clone(), ia.iter().zip(&ib).map(|(&i, &j)| g(x[i], y[j])).collect())
        }
        _ => return Err("operands of different dtypes".into()),
    };
    Ok(vec![t.ok_or("internal: wrong element count")?])
}

pub(super) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

pub(super) fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

pub(super) fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// torch's softplus (beta 1, threshold 20): `x` above 20, `ln(1 + eˣ)` otherwise.
pub(super) fn softplus(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// `f` elementwise on f32 values, in f64: `scale`, `neg`, `exp`, `sigmoid`, `silu`,
/// `softplus`, `gelu_tanh`.
fn unary(x: &Tensor, f: impl Fn(f64) -> f64) -> Kernel {
    let data = f32s(x)?.iter().map(|&v| f(f64::from(v)) as f32).collect();
    Ok(vec![out(x.shape(), data)?])
}

/// The rows of `x` along its last axis (no rows when the last axis is empty).
fn last_axis_rows(x: &Tensor) -> Result<(usize, &[f32]), String> {
    let d = *x.shape().last().ok_or("a scalar has no last axis")?;
    Ok((d, f32s(x)?))
}

/// `x / √(mean(x²) + eps) · (w + offset)` over the last axis.
fn rms_norm(x: &Tensor, w: &Tensor, eps: f64, offset: f64) -> Kernel {
    let (d, xs) = last_axis_rows(x)?;
    let w = f32s(w)?;
    let mut data = Vec::with_capacity(xs.len());
    if d > 0 {
        for row in xs.chunks_exact(d) {
            let mean = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / d as f64;
            let inv = 1.0 / (mean + eps).sqrt();
            data.extend(row.iter().zip(w).map(|(&v, &wv)| (f64::from(v) * inv * (f64::from(wv) + offset)) as f32));
        }
    }
    Ok(vec![out(x.shape(), data)?])
}

/// `x / √(Σx² + eps)` over the last axis.
fn l2_norm(x: &Tensor, eps: f64) -> Kernel {
    let (d, xs) = last_axis_rows(x)?;
    let mut data = Vec::with_capacity(xs.len());
    if d > 0 {
        for row in xs.chunks_exact(d) {
            let sum = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>();
            let inv = 1.0 / (sum + eps).sqrt();
            data.extend(row.iter().map(|&v| (f64::from(v) * inv) as f32));
        }
    }
    Ok(vec![out(x.shape(), data)?])
}
