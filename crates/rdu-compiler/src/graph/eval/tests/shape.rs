//! Shape ops on both dtypes.

use super::{assert_close, f, i, run1, try_run};
use crate::graph::{Op, Tensor};

#[test]
fn reshape_keeps_row_major_order() {
    let x = Tensor::from_fn(&[2, 3], |k| k as f32);
    assert_close(&run1(Op::Reshape { shape: vec![3, 1, 2] }, &[&x]), &[3, 1, 2], &[0., 1., 2., 3., 4., 5.]);
}

#[test]
fn slice_along_an_inner_axis() {
    let x = Tensor::from_fn(&[2, 4], |k| k as f32);
    assert_close(&run1(Op::Slice { axis: 1, start: 1, len: 2 }, &[&x]), &[2, 2], &[1., 2., 5., 6.]);
    assert_close(&run1(Op::Slice { axis: 0, start: 1, len: 1 }, &[&x]), &[1, 4], &[4., 5., 6., 7.]);
    let ids = i(&[3], &[7, 8, 9]);
    assert_eq!(run1(Op::Slice { axis: 0, start: 2, len: 1 }, &[&ids]), i(&[1], &[9]));
}

#[test]
fn shard_on_one_chip_is_the_whole_value_and_needs_a_chip_otherwise() {
    let x = Tensor::from_fn(&[2, 4], |k| k as f32);
    assert_close(&run1(Op::Shard { axis: 1, chips: 1 }, &[&x]), &[2, 4], &[0., 1., 2., 3., 4., 5., 6., 7.]);
    let e = try_run(Op::Shard { axis: 1, chips: 2 }, &[&x]).expect_err("two chips' parts on one").to_string();
    assert!(e.contains("shard into 2 parts needs a chip's index"), "{e}");
}

#[test]
fn concat_joins_along_the_axis() {
    let a = f(&[2, 1], &[1., 2.]);
    let b = f(&[2, 2], &[3., 4., 5., 6.]);
    let c = f(&[2, 1], &[7., 8.]);
    assert_close(&run1(Op::Concat { axis: 1 }, &[&a, &b, &c]), &[2, 4], &[1., 3., 4., 7., 2., 5., 6., 8.]);
    let d = f(&[1, 1], &[9.]);
    assert_close(&run1(Op::Concat { axis: 0 }, &[&a, &d]), &[3, 1], &[1., 2., 9.]);
}

#[test]
fn transpose_follows_numpy() {
    // numpy: np.arange(6).reshape(1, 2, 3).transpose(0, 2, 1) = [[[0, 3], [1, 4], [2, 5]]]
    let x = Tensor::from_fn(&[1, 2, 3], |k| k as f32);
    assert_close(&run1(Op::Transpose { perm: vec![0, 2, 1] }, &[&x]), &[1, 3, 2], &[0., 3., 1., 4., 2., 5.]);
    // np.arange(6).reshape(1, 2, 3).transpose(2, 0, 1) has shape (3, 1, 2): [[[0, 3]], [[1, 4]], [[2, 5]]]
    assert_close(&run1(Op::Transpose { perm: vec![2, 0, 1] }, &[&x]), &[3, 1, 2], &[0., 3., 1., 4., 2., 5.]);
    // (1, 2, 0): shape (2, 3, 1), y[a, b, 0] = x[0, a, b], i.e. the original order.
    assert_close(&run1(Op::Transpose { perm: vec![1, 2, 0] }, &[&x]), &[2, 3, 1], &[0., 1., 2., 3., 4., 5.]);
}

/// Every permutation of four axes, both dtypes, element by element against the definition
/// `y[i₀, i₁, i₂, i₃] = x[j]` where input axis `perm[k]` is at `i_k`; and a slice and a
/// concatenation along every axis against the same element-wise reading.
#[test]
fn shape_ops_agree_with_their_definitions_on_every_axis() {
    let dims = [2usize, 3, 4, 5];
    let x = Tensor::from_fn(&dims, |k| k as f32);
    let xi = i(&dims, &(0..120).collect::<Vec<i32>>());
    let flat = |idx: &[usize], shape: &[usize]| idx.iter().zip(shape).fold(0, |acc, (&a, &d)| acc * d + a);
    let all = |shape: &[usize]| -> Vec<Vec<usize>> {
        let mut out = vec![vec![]];
        for &d in shape {
            out =
                out.into_iter().flat_map(|p: Vec<usize>| (0..d).map(move |a| [p.clone(), vec![a]].concat())).collect();
        }
        out
    };
    let mut perms = vec![];
    for a in 0..4 {
        for b in (0..4).filter(|&b| b != a) {
            for c in (0..4).filter(|&c| c != a && c != b) {
                perms.push(vec![a, b, c, 6 - a - b - c]);
            }
        }
    }
    for perm in perms {
        let shape: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
        let want: Vec<f32> = all(&shape)
            .iter()
            .map(|out| {
                let mut at = [0usize; 4];
                perm.iter().zip(out).for_each(|(&p, &a)| at[p] = a);
                flat(&at, &dims) as f32
            })
            .collect();
        assert_close(&run1(Op::Transpose { perm: perm.clone() }, &[&x]), &shape, &want);
        let ints = i(&shape, &want.iter().map(|&v| v as i32).collect::<Vec<_>>());
        assert_eq!(run1(Op::Transpose { perm: perm.clone() }, &[&xi]), ints, "{perm:?}");
    }
    for axis in 0..4 {
        let (start, len) = (1, dims[axis] - 1);
        let mut shape = dims.to_vec();
        shape[axis] = len;
        let want: Vec<f32> = all(&shape)
            .iter()
            .map(|idx| {
                let mut at = idx.clone();
                at[axis] += start;
                flat(&at, &dims) as f32
            })
            .collect();
        let part = run1(Op::Slice { axis, start, len }, &[&x]);
        assert_close(&part, &shape, &want);
        // The slice joined back to the first index along the axis is the whole tensor.
        let head = run1(Op::Slice { axis, start: 0, len: 1 }, &[&x]);
        let joined = run1(Op::Concat { axis }, &[&head, &part]);
        assert_close(&joined, &dims, &(0..120).map(|k| k as f32).collect::<Vec<_>>());
    }
}
