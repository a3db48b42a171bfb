//! Elementwise ops (numpy broadcasting for the binary ones; transcendental functions in f64)
//! and the two norms over the last axis (sums in f64).

use super::{f32s, out, Kernel};
use crate::graph::infer::broadcast_shape;
use crate::graph::{numel, Data, Op, Tensor};

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

/// `add`, `sub`, `mul` (f32, or i32 with wrapping arithmetic).
pub(super) fn binary(op: &Op, a: &Tensor, b: &Tensor) -> Kernel {
    let shape = broadcast_shape(a.shape(), b.shape()).ok_or("operands do not broadcast")?;
    let (ia, ib) = (broadcast_index(a.shape(), &shape), broadcast_index(b.shape(), &shape));
    let t = match (a.data(), b.data()) {
        (Data::F32(x), Data::F32(y)) => {
            let f: fn(f32, f32) -> f32 = match op {
                Op::Add => |p, q| p + q,
                Op::Sub => |p, q| p - q,
                _ => |p, q| p * q,
            };
            Tensor::try_f32(shape.clone(), ia.iter().zip(&ib).map(|(&i, &j)| f(x[i], y[j])).collect())
        }
        (Data::I32(x), Data::I32(y)) => {
            let f: fn(i32, i32) -> i32 = match op {
                Op::Add => i32::wrapping_add,
                Op::Sub => i32::wrapping_sub,
                _ => i32::wrapping_mul,
            };
            Tensor::try_i32(shape.clone(), ia.iter().zip(&ib).map(|(&i, &j)| f(x[i], y[j])).collect())
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

/// `scale`, `neg`, `exp`, `sigmoid`, `silu`, `softplus`, `gelu_tanh`.
pub(super) fn unary(op: &Op, x: &Tensor) -> Kernel {
    if let (Op::Neg, Data::I32(v)) = (op, x.data()) {
        let t = Tensor::try_i32(x.shape().to_vec(), v.iter().map(|a| a.wrapping_neg()).collect());
        return Ok(vec![t.ok_or("internal: wrong element count")?]);
    }
    let f: Box<dyn Fn(f64) -> f64> = match op {
        Op::Scale { by } => {
            let by = *by;
            Box::new(move |v| v * by)
        }
        Op::Neg => Box::new(|v| -v),
        Op::Exp => Box::new(f64::exp),
        Op::Sigmoid => Box::new(sigmoid),
        Op::Silu => Box::new(silu),
        Op::Softplus => Box::new(softplus),
        Op::GeluTanh => Box::new(gelu_tanh),
        other => return Err(format!("internal: `{}` is not unary", other.name())),
    };
    let data = f32s(x)?.iter().map(|&v| f(f64::from(v)) as f32).collect();
    Ok(vec![out(x.shape(), data)?])
}

/// The rows of `x` along its last axis (no rows when the last axis is empty).
fn last_axis_rows(x: &Tensor) -> Result<(usize, &[f32]), String> {
    let d = *x.shape().last().ok_or("a scalar has no last axis")?;
    Ok((d, f32s(x)?))
}

/// `x / √(mean(x²) + eps) · (w + offset)` over the last axis.
pub(super) fn rms_norm(x: &Tensor, w: &Tensor, eps: f64, offset: f64) -> Kernel {
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
pub(super) fn l2_norm(x: &Tensor, eps: f64) -> Kernel {
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
