//! Shape ops, for either dtype: `reshape`, `slice`, `concat`, `transpose`. Each computes,
//! for every output row (along the last axis), where in its input that row's values are: a
//! slice and a concatenation copy whole runs; a transpose reads a row at a stride. And the
//! ops that are the value itself on one chip: `all_reduce`, `shard` into one part, `dequant`.

use super::{evals, Kernel};
use crate::graph::{numel, Data, Tensor};

evals! {
    Reshape(ins, a) => reshape(ins[0], &a.shape),
    Slice(ins, a) => slice(ins[0], a.axis, a.start, a.len),
    Concat(ins, a) => concat(ins, a.axis),
    Transpose(ins, a) => transpose(ins[0], &a.perm),
    // The reference interpreter runs a program as one chip: the sum over one chip is the value.
    AllReduce(ins, _) => Ok(vec![ins[0].clone()]),
    // ... and one chip of one holds the whole value; a part of several chips needs the chip.
    Shard(ins, a) => match a.chips {
        1 => Ok(vec![ins[0].clone()]),
        chips => Err(format!("shard into {chips} parts needs a chip's index: run it on the simulator's chips")),
    },
    // A Q8_0 weight's values are the reference's own.
    Dequant(ins, _) => Ok(vec![ins[0].clone()]),
}

/// The tensor of `shape` made of runs copied from `sources`: `runs` gives, in order, each run's
/// source, first flat index, length and stride (the run is `len` elements `stride` apart).
fn gather(sources: &[&Tensor], shape: &[usize], runs: impl Iterator<Item = (usize, usize, usize, usize)>) -> Kernel {
    fn copy<T: Copy>(srcs: &[&[T]], total: usize, runs: impl Iterator<Item = (usize, usize, usize, usize)>) -> Vec<T> {
        let mut out = Vec::with_capacity(total);
        for (s, first, len, stride) in runs {
            if stride == 1 {
                out.extend_from_slice(&srcs[s][first..first + len]);
            } else {
                out.extend((0..len).map(|j| srcs[s][first + j * stride]));
            }
        }
        out
    }
    let total = numel(shape);
    let t = match sources[0].data() {
        Data::F32(_) => {
            let srcs: Vec<&[f32]> = sources.iter().filter_map(|t| t.as_f32()).collect();
            (srcs.len() == sources.len()).then(|| Tensor::try_f32(shape.to_vec(), copy(&srcs, total, runs))).flatten()
        }
        Data::I32(_) => {
            let srcs: Vec<&[i32]> = sources.iter().filter_map(|t| t.as_i32()).collect();
            (srcs.len() == sources.len()).then(|| Tensor::try_i32(shape.to_vec(), copy(&srcs, total, runs))).flatten()
        }
    };
    Ok(vec![t.ok_or("operands of mixed dtypes or a wrong element count")?])
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1];
    }
    s
}

/// `f(multi-index)` for every multi-index of `shape` in row-major order, one at a time (a list
/// of them took 16 bytes an element: a transpose of a large weight spent more time having the
/// kernel zero the list's pages than copying).
fn indices<'s, T>(shape: &'s [usize], mut f: impl FnMut(&[usize]) -> T + 's) -> impl Iterator<Item = T> + 's {
    let mut index = vec![0usize; shape.len()];
    (0..numel(shape)).map(move |_| {
        let pick = f(&index);
        for axis in (0..shape.len()).rev() {
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
        pick
    })
}

/// `shape` as `[outer, shape[axis], inner]`: the products of the axes before and after `axis`.
fn around(shape: &[usize], axis: usize) -> (usize, usize) {
    (shape[..axis].iter().product(), shape[axis + 1..].iter().product())
}

fn reshape(x: &Tensor, shape: &[usize]) -> Kernel {
    Ok(vec![x.reshaped(shape).ok_or("element counts differ")?])
}

/// Elements `start .. start + len` along `axis`: for each index before `axis`, one run of
/// `len·inner` values.
fn slice(x: &Tensor, axis: usize, start: usize, len: usize) -> Kernel {
    let mut shape = x.shape().to_vec();
    shape[axis] = len;
    let (outer, inner) = around(x.shape(), axis);
    let dim = x.shape()[axis];
    gather(&[x], &shape, (0..outer).map(|o| (0, (o * dim + start) * inner, len * inner, 1)))
}

/// The operands joined along `axis`: for each index before `axis`, each part's run of
/// `size·inner` values in turn.
fn concat(parts: &[&Tensor], axis: usize) -> Kernel {
    let mut shape = parts[0].shape().to_vec();
    shape[axis] = parts.iter().map(|p| p.shape()[axis]).sum();
    let (outer, inner) = around(&shape, axis);
    let runs = (0..outer).flat_map(|o| {
        parts.iter().enumerate().map(move |(p, part)| {
            let run = part.shape()[axis] * inner;
            (p, o * run, run, 1)
        })
    });
    gather(parts, &shape, runs)
}

/// numpy `transpose(perm)`: output axis `k` is input axis `perm[k]`. Row by row of the output:
/// a row's values are its input axis `perm[last]`, read at that axis' stride.
fn transpose(x: &Tensor, perm: &[usize]) -> Kernel {
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let st = strides(x.shape());
    let Some((&last, rows)) = shape.split_last() else { return gather(&[x], &shape, std::iter::once((0, 0, 1, 1))) };
    let stride = st[perm[perm.len() - 1]];
    let runs = indices(rows, move |i| (0, i.iter().zip(perm).map(|(a, &p)| a * st[p]).sum(), last, stride));
    gather(&[x], &shape, runs)
}
