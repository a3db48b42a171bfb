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
