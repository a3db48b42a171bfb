//! Shape ops, for either dtype: `reshape`, `slice`, `concat`, `transpose`. Each computes,
//! for every output element, the flat index of the input element it copies.

use super::Kernel;
use crate::graph::{numel, Data, Tensor};

/// The tensor of `shape` whose element `i` is element `picks[i]` of one of `sources`
/// (`picks[i] = (source, flat index)`).
fn gather(sources: &[&Tensor], shape: &[usize], picks: impl Iterator<Item = (usize, usize)>) -> Kernel {
    let t = match sources[0].data() {
        Data::F32(_) => {
            let srcs: Vec<&[f32]> = sources.iter().filter_map(|t| t.as_f32()).collect();
            (srcs.len() == sources.len())
                .then(|| Tensor::try_f32(shape.to_vec(), picks.map(|(s, i)| srcs[s][i]).collect()))
                .flatten()
        }
        Data::I32(_) => {
            let srcs: Vec<&[i32]> = sources.iter().filter_map(|t| t.as_i32()).collect();
            (srcs.len() == sources.len())
                .then(|| Tensor::try_i32(shape.to_vec(), picks.map(|(s, i)| srcs[s][i]).collect()))
                .flatten()
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

/// The picks `f(multi-index)` for every multi-index of `shape` in row-major order, one at a
/// time (a list of them took 16 bytes an element: a transpose of a large weight spent more
/// time having the kernel zero the list's pages than copying).
fn picks<'s>(
    shape: &'s [usize],
    mut f: impl FnMut(&[usize]) -> (usize, usize) + 's,
) -> impl Iterator<Item = (usize, usize)> + 's {
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

pub(super) fn reshape(x: &Tensor, shape: &[usize]) -> Kernel {
    Ok(vec![x.reshaped(shape).ok_or("element counts differ")?])
}

/// Elements `start .. start + len` along `axis`.
pub(super) fn slice(x: &Tensor, axis: usize, start: usize, len: usize) -> Kernel {
    let mut shape = x.shape().to_vec();
    shape[axis] = len;
    let st = strides(x.shape());
    let picks = picks(&shape, |i| (0, i.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>() + start * st[axis]));
    gather(&[x], &shape, picks)
}

/// The operands joined along `axis`.
pub(super) fn concat(parts: &[&Tensor], axis: usize) -> Kernel {
    let mut shape = parts[0].shape().to_vec();
    shape[axis] = parts.iter().map(|p| p.shape()[axis]).sum();
    // For each position along `axis`: which part it comes from and its offset in that part.
    let mut owner = Vec::with_capacity(shape[axis]);
    for (p, part) in parts.iter().enumerate() {
        owner.extend((0..part.shape()[axis]).map(|k| (p, k)));
    }
    let st: Vec<Vec<usize>> = parts.iter().map(|p| strides(p.shape())).collect();
    let picks = picks(&shape, |i| {
        let (p, k) = owner[i[axis]];
        let flat: usize = i.iter().enumerate().map(|(d, &a)| if d == axis { k } else { a } * st[p][d]).sum();
        (p, flat)
    });
    gather(parts, &shape, picks)
}

/// numpy `transpose(perm)`: output axis `k` is input axis `perm[k]`.
pub(super) fn transpose(x: &Tensor, perm: &[usize]) -> Kernel {
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let st = strides(x.shape());
    let picks = picks(&shape, |i| (0, i.iter().zip(perm).map(|(a, &p)| a * st[p]).sum()));
    gather(&[x], &shape, picks)
}
