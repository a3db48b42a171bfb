//! Shape ops — `reshape`, `slice`, `shard`, `concat`, `transpose` — on f32 or i32 data, `dequant`
//! (a Q8_0 weight as dense f32, for weight views) and `all_reduce` (the sum over the chips);
//! none of them is tileable.

use super::call::{kernels, ArgVal, Call, Outs};
use super::region::untiled;
use super::tensor::{strides, SimData, SimTensor};
use super::{invalid, SimError};

kernels! {
    Reshape(call, a) => reshape(call, &a.shape),
    Slice(call, a) => slice(call, a.axis, a.start, a.len),
    Shard(call, a) => shard(call, a.axis, a.chips),
    Concat(call, a) => concat(call, a.axis),
    Transpose(call, a) => transpose(call, &a.perm),
    Dequant(call, _) => dequant(call),
    AllReduce(call, _) => all_reduce(call),
}

/// Row-major reinterpretation: `reshape(x, [d0, d1, ...])`.
fn reshape(call: &Call<'_>, shape: &[usize]) -> Outs {
    untiled(call.tiling())?;
    let t = call.dense(0)?;
    let shape = shape.to_vec();
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if n != Some(t.len()) {
        return invalid(format!("cannot reshape {:?} ({} values) to {shape:?}", t.shape, t.len()));
    }
    Ok(vec![SimTensor { shape, data: t.data.clone() }])
}

/// Elements `start .. start + len` along `axis`.
fn slice(call: &Call<'_>, axis: usize, start: usize, len: usize) -> Outs {
    untiled(call.tiling())?;
    let t = call.dense(0)?;
    let Some(&dim) = t.shape.get(axis) else { return invalid(format!("axis {axis} of {:?}", t.shape)) };
    if start.checked_add(len).is_none_or(|end| end > dim) {
        return invalid(format!("slice {start}..{start}+{len} of axis {axis} of size {dim}"));
    }
    Ok(vec![range(t, axis, start, len)])
}

/// Elements `start .. start + len` (in bounds) along `axis` of `t`.
fn range(t: &SimTensor, axis: usize, start: usize, len: usize) -> SimTensor {
    let dim = t.shape[axis];
    let inner: usize = t.shape[axis + 1..].iter().product();
    let outer: usize = t.shape[..axis].iter().product();
    let mut shape = t.shape.clone();
    shape[axis] = len;
    let runs = (0..outer).map(|o| (o * dim + start) * inner..(o * dim + start + len) * inner);
    SimTensor { shape, data: gather_runs(&t.data, outer * len * inner, runs) }
}

/// `shard(x)`: this chip's part of `x` along `axis` — of `chips` equal parts, chip `c` takes
/// the `c`-th. The chip is the one the collective names; a program run on one chip alone is
/// chip 0 of a group of one, so only `chips=1` is its whole value.
fn shard(call: &Call<'_>, axis: usize, chips: usize) -> Outs {
    untiled(call.tiling())?;
    let t = call.dense(0)?;
    let (group, chip) = call.collective.map_or((1, 0), |(g, c)| (g.chips(), c));
    if chips != group {
        return invalid(format!("shard into {chips} parts on a group of {group} chips"));
    }
    let Some(&dim) = t.shape.get(axis) else { return invalid(format!("axis {axis} of {:?}", t.shape)) };
    if dim % chips != 0 {
        return invalid(format!("shard of axis {axis} of size {dim} into {chips} equal parts"));
    }
    let len = dim / chips;
    Ok(vec![range(t, axis, chip * len, len)])
}

/// Concatenation along `axis`; the other axes must agree.
fn concat(call: &Call<'_>, axis: usize) -> Outs {
    untiled(call.tiling())?;
    let parts: Vec<&SimTensor> = (0..call.args.len()).map(|i| call.dense(i)).collect::<Result<_, _>>()?;
    let first = parts[0];
    if axis >= first.shape.len() {
        return invalid(format!("axis {axis} of {:?}", first.shape));
    }
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for p in &parts {
        let same_rest = p.shape.len() == first.shape.len()
            && p.shape.iter().zip(&first.shape).enumerate().all(|(i, (a, b))| i == axis || a == b);
        if !same_rest || p.dtype() != first.dtype() {
            return invalid(format!("cannot concatenate {:?} and {:?} along axis {axis}", first.shape, p.shape));
        }
        shape[axis] += p.shape[axis];
    }
    let outer: usize = first.shape[..axis].iter().product();
    let inner: usize = first.shape[axis + 1..].iter().product();
    let mut data = match first.data {
        SimData::F32(_) => SimData::F32(Vec::new()),
        SimData::I32(_) => SimData::I32(Vec::new()),
    };
    for o in 0..outer {
        for p in &parts {
            let run = p.shape[axis] * inner;
            match (&mut data, &p.data) {
                (SimData::F32(d), SimData::F32(s)) => d.extend_from_slice(&s[o * run..(o + 1) * run]),
                (SimData::I32(d), SimData::I32(s)) => d.extend_from_slice(&s[o * run..(o + 1) * run]),
                _ => return invalid("mixed dtypes"),
            }
        }
    }
    Ok(vec![SimTensor { shape, data }])
}

/// numpy's `transpose(perm)`: output axis `i` is input axis `perm[i]`.
fn transpose(call: &Call<'_>, perm: &[usize]) -> Outs {
    untiled(call.tiling())?;
    let t = call.dense(0)?;
    let rank = t.shape.len();
    let mut seen = vec![false; rank];
    for &p in perm {
        if p >= rank || std::mem::replace(&mut seen[p], true) {
            return invalid(format!("perm {perm:?} is not a permutation of {rank} axes"));
        }
    }
    if perm.len() != rank {
        return invalid(format!("perm {perm:?} is not a permutation of {rank} axes"));
    }
    let shape: Vec<usize> = perm.iter().map(|&p| t.shape[p]).collect();
    let in_strides = strides(&t.shape);
    let data = match &t.data {
        SimData::F32(v) => SimData::F32(transposed(v, &shape, perm, &in_strides)),
        SimData::I32(v) => SimData::I32(transposed(v, &shape, perm, &in_strides)),
    };
    Ok(vec![SimTensor { shape, data }])
}

/// The values of `v` (strides `in_strides`) in the order of the transposed `shape`: row by row
/// of the output, each row read at the stride of its input axis `perm[last]`, the row's start
/// stepped like an odometer (per value, a division by each axis' stride made the transposes of
/// a decode step's up-projections a tenth of its certification).
fn transposed<T: Copy>(v: &[T], shape: &[usize], perm: &[usize], in_strides: &[usize]) -> Vec<T> {
    let Some((&len, rows)) = shape.split_last() else { return v.to_vec() };
    let step = in_strides[perm[perm.len() - 1]];
    let mut out = Vec::with_capacity(shape.iter().product());
    let (mut index, mut base) = (vec![0usize; rows.len()], 0usize);
    for _ in 0..rows.iter().product::<usize>() {
        out.extend((0..len).map(|j| v[base + j * step]));
        for axis in (0..rows.len()).rev() {
            index[axis] += 1;
            base += in_strides[perm[axis]];
            if index[axis] < rows[axis] {
                break;
            }
            base -= index[axis] * in_strides[perm[axis]];
            index[axis] = 0;
        }
    }
    out
}

/// A Q8_0 weight as dense f32 of its declared shape.
fn dequant(call: &Call<'_>) -> Outs {
    untiled(call.tiling())?;
    match call.args.first() {
        Some(ArgVal::Q8(w)) => Ok(vec![SimTensor::f32(w.shape.clone(), w.dequantize())]),
        Some(ArgVal::Fp8(w)) => Ok(vec![SimTensor::f32(w.shape.clone(), w.dequantize())]),
        Some(ArgVal::Packed(w, Some(_))) => Ok(vec![SimTensor::f32(w.shape.to_vec(), w.widen_all())]),
        _ => Err(SimError::Invalid { message: "dequant reads a weight stored q8_0, fp8 or mxfp4".into() }),
    }
}

/// `all_reduce(x)`: the sum of `x` over the chips (the value itself on one chip).
fn all_reduce(call: &Call<'_>) -> Outs {
    let mut x = call.f32(0)?.0.clone();
    if let Some((group, chip)) = call.collective {
        group.all_reduce(chip, &mut x)?;
    }
    Ok(vec![x])
}

fn gather_runs(data: &SimData, total: usize, runs: impl Iterator<Item = std::ops::Range<usize>>) -> SimData {
    match data {
        SimData::F32(v) => SimData::F32(crate::view::gather(total, runs.map(|r| &v[r]))),
        SimData::I32(v) => SimData::I32(crate::view::gather(total, runs.map(|r| &v[r]))),
    }
}
