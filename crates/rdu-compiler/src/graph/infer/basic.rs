//! Types of the elementwise, norm, product and shape ops.

use super::{shapes, Fault, Operands, Site, TypeError};
use crate::graph::{DType, Type};
use rdu_spatial::op::Key;

shapes! {
    Add(a, _) => broadcast(a),
    Sub(a, _) => broadcast(a),
    Mul(a, _) => broadcast(a),
    Neg(a, _) => Ok(vec![a.ty(0).clone()]),
    Scale(a, _) => same_f32(a),
    Exp(a, _) => same_f32(a),
    Sigmoid(a, _) => same_f32(a),
    Silu(a, _) => same_f32(a),
    Softplus(a, _) => same_f32(a),
    GeluTanh(a, _) => same_f32(a),
    AllReduce(a, _) => same_f32(a),
    Dequant(a, _) => same_f32(a),
    RmsNorm(a, _) => norm(a),
    L2Norm(a, _) => norm(a),
    Linear(a, _) => linear(a),
    LinearHeads(a, _) => linear_heads(a),
    Embed(a, _) => embed(a),
    Argmax(a, _) => argmax(a),
    Reshape(a, r) => reshape(a, &r.shape),
    Slice(a, s) => slice(a, s.axis, s.start, s.len),
    Shard(a, s) => shard(a, s.axis, s.chips),
    Concat(a, c) => concat(a, c.axis),
    Transpose(a, t) => transpose(a, &t.perm),
}

/// An f32 operand's type, unchanged (the unary activations, `scale`, `all_reduce`).
fn same_f32(a: &Operands<'_>) -> Result<Vec<Type>, TypeError> {
    a.f32(0)?;
    Ok(vec![a.ty(0).clone()])
}

/// `add`/`sub`/`mul`: numpy broadcasting over operands of one dtype.
fn broadcast(a: &Operands<'_>) -> Result<Vec<Type>, TypeError> {
    let (x, y) = (a.ty(0), a.ty(1));
    if x.dtype != y.dtype {
        return Err(a.error(
            Fault::DType,
            Site::Arg(1),
            format!("`b` must be {} like `a`, found {y}", x.dtype.keyword()),
        ));
    }
    match broadcast_shape(&x.shape, &y.shape) {
        Some(shape) => Ok(vec![Type { dtype: x.dtype, shape }]),
        None => Err(a.error(Fault::Shape, Site::Arg(1), format!("cannot broadcast {x} with {y}"))),
    }
}

/// numpy's broadcast of two shapes: aligned from the right, a 1 stretches.
pub fn broadcast_shape(x: &[usize], y: &[usize]) -> Option<Vec<usize>> {
    let rank = x.len().max(y.len());
    let at = |s: &[usize], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|i| match (at(x, i), at(y, i)) {
            (p, q) if p == q => Some(p),
            (1, q) => Some(q),
            (p, 1) => Some(p),
            _ => None,
        })
        .collect()
}

/// `rms_norm(x, w)` and `l2_norm(x)`: over the last axis, `w` of that size.
fn norm(a: &Operands<'_>) -> Result<Vec<Type>, TypeError> {
    let x = a.f32(0)?;
    let Some(&d) = x.last() else {
        return Err(a.shape_error(0, "f32[..., d] (at least one axis)"));
    };
    if a.len() == 2 {
        a.f32_exact(1, &[d])?;
    }
    Ok(vec![a.ty(0).clone()])
}

/// `linear(x [N, in], W [out, in] (, b [out])) -> [N, out]`.
fn linear(a: &Operands<'_>) -> Result<Vec<Type>, TypeError> {
    let x = a.f32_rank(0, 2, "[N, in]")?;
    let w = a.f32_rank(1, 2, "[out, in]")?;
    if w[1] != x[1] {
        return Err(a.shape_error(1, format!("[out, {}] (its in axis is x's last)", x[1])));
    }
    if a.len() == 3 {
        a.f32_exact(2, &[w[0]])?;
    }
    Ok(vec![Type::f32(&[x[0], w[0]])])
}

/// `linear_heads(x [N, h, in], W [h, out, in]) -> [N, h, out]`.
fn linear_heads(a: &Operands<'_>) -> Result<Vec<Type>, TypeError> {
    let x = a.f32_rank(0, 3, "[N, h, in]")?;
    let w = a.f32_rank(1, 3, "[h, out, in]")?;
    if w[0] != x[1] || w[2] != x[2] {
        return Err(a.shape_error(1, format!("f32[{}, out, {}]", x[1], x[2])));
    }
    Ok(vec![Type::f32(&[x[0], x[1], w[1]])])
}

/// `embed(ids i32[N], E [V, D]) -> [N, D]`.
fn embed(a: &Operands<'_>) -> Result<Vec<Type>, TypeError> {
    let ids = a.dtype(0, DType::I32)?;
    if ids.len() != 1 {
        return Err(a.shape_error(0, "i32[N]"));
    }
    let e = a.f32_rank(1, 2, "[V, D]")?;
    Ok(vec![Type::f32(&[ids[0], e[1]])])
}

/// `argmax(x [N, V]) -> i32[N]`.
fn argmax(a: &Operands<'_>) -> Result<Vec<Type>, TypeError> {
    let x = a.f32_rank(0, 2, "[N, V]")?;
    if x[1] == 0 {
        return Err(a.shape_error(0, "f32[N, V] with V > 0"));
    }
    Ok(vec![Type::i32(&[x[0]])])
}

fn reshape(a: &Operands<'_>, shape: &[usize]) -> Result<Vec<Type>, TypeError> {
    let x = a.ty(0);
    let count = |shape: &[usize]| shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let (source, target) = (count(&x.shape), count(shape));
    if source.is_none() || target != source {
        let shown = |n: Option<usize>| n.map_or("more than fit in memory".to_string(), |n| n.to_string());
        let message =
            format!("cannot reshape {x} ({} elements) to {shape:?} ({} elements)", shown(source), shown(target));
        return Err(a.error(Fault::Shape, Site::Attr(Key::Shape), message));
    }
    Ok(vec![Type { dtype: x.dtype, shape: shape.to_vec() }])
}

fn slice(a: &Operands<'_>, axis: usize, start: usize, len: usize) -> Result<Vec<Type>, TypeError> {
    let x = a.ty(0);
    let Some(&size) = x.shape.get(axis) else {
        return Err(a.attr_error(Key::Axis, format!("axis {axis} is out of range for {x}")));
    };
    if start > size {
        return Err(a.attr_error(Key::Start, format!("start {start} is past the end of axis {axis} of {x}")));
    }
    if len > size - start {
        return Err(a.attr_error(Key::Len, format!("{start} + {len} runs past the end of axis {axis} of {x}")));
    }
    let mut shape = x.shape.clone();
    shape[axis] = len;
    Ok(vec![Type { dtype: x.dtype, shape }])
}

/// `shard(x, axis=A, chips=C)`: one chip's `1/C` of axis `A`, which `C` must divide.
fn shard(a: &Operands<'_>, axis: usize, chips: usize) -> Result<Vec<Type>, TypeError> {
    let x = a.ty(0);
    let Some(&size) = x.shape.get(axis) else {
        return Err(a.attr_error(Key::Axis, format!("axis {axis} is out of range for {x}")));
    };
    if chips == 0 || size % chips != 0 {
        return Err(
            a.attr_error(Key::Chips, format!("{chips} chips do not divide axis {axis} of {x} into equal parts"))
        );
    }
    let mut shape = x.shape.clone();
    shape[axis] = size / chips;
    Ok(vec![Type { dtype: x.dtype, shape }])
}

/// `concat(a, b, ..., axis=A)`: one dtype and rank, equal sizes except along `A`.
fn concat(a: &Operands<'_>, axis: usize) -> Result<Vec<Type>, TypeError> {
    let first = a.ty(0);
    if axis >= first.rank() {
        return Err(a.attr_error(Key::Axis, format!("axis {axis} is out of range for {first}")));
    }
    let mut shape = first.shape.clone();
    for i in 1..a.len() {
        let t = a.ty(i);
        a.dtype(i, first.dtype)?;
        let fits = t.rank() == first.rank() && (0..t.rank()).all(|d| d == axis || t.shape[d] == first.shape[d]);
        if !fits {
            let mut want: Vec<String> = first.shape.iter().map(|d| d.to_string()).collect();
            want[axis] = "_".into();
            return Err(
                a.shape_error(i, format!("{}[{}] like the first operand", first.dtype.keyword(), want.join(", ")))
            );
        }
        shape[axis] += t.shape[axis];
    }
    Ok(vec![Type { dtype: first.dtype, shape }])
}

/// `transpose(x, perm)`: `perm` a permutation of the axes.
fn transpose(a: &Operands<'_>, perm: &[usize]) -> Result<Vec<Type>, TypeError> {
    let x = a.ty(0);
    let mut seen = vec![false; x.rank()];
    let is_perm =
        perm.len() == x.rank() && perm.iter().all(|&p| p < x.rank() && !std::mem::replace(&mut seen[p], true));
    if !is_perm {
        return Err(a.attr_error(Key::Perm, format!("{perm:?} is not a permutation of the {} axes of {x}", x.rank())));
    }
    Ok(vec![Type { dtype: x.dtype, shape: perm.iter().map(|&p| x.shape[p]).collect() }])
}
