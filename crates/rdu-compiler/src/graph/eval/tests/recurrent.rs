//! The causal convolution and the gated delta rule.

use super::{assert_close, f, noise, run, run1};
use crate::graph::{KMap, Op, Tensor};

#[test]
fn conv_step_without_state_starts_from_zeros() {
    // Channel 0: kernel [1, 10, 100] over u = [0, 0, 1, 2]; channel 1: kernel [1, 1, 1] over [0, 0, 5, 6].
    let x = f(&[2, 2], &[1., 5., 2., 6.]);
    let w = f(&[2, 3], &[1., 10., 100., 1., 1., 1.]);
    assert_close(&run1(Op::ConvStep, &[&x, &w]), &[2, 2], &[100., 5., 210., 11.]);
}

#[test]
fn conv_step_with_state_reads_the_history_first() {
    // Channel 0: u = [3, 4, 1, 2]; channel 1: u = [0, 0, 5, 6].
    let x = f(&[2, 2], &[1., 5., 2., 6.]);
    let w = f(&[2, 3], &[1., 10., 100., 1., 1., 1.]);
    let state = f(&[2, 2], &[3., 0., 4., 0.]);
    assert_close(&run1(Op::ConvStep, &[&x, &w, &state]), &[2, 2], &[143., 5., 214., 11.]);
}

#[test]
fn conv_shift_keeps_the_last_rows() {
    let state = f(&[2, 1], &[3., 4.]);
    assert_close(&run1(Op::ConvShift, &[&state, &f(&[1, 1], &[9.])]), &[2, 1], &[4., 9.]);
    assert_close(&run1(Op::ConvShift, &[&state, &f(&[3, 1], &[7., 8., 9.])]), &[2, 1], &[8., 9.]);
}

#[test]
fn delta_step_matches_a_hand_computed_row() {
    // S = [[1], [2]], α = 0.5 → [[0.5], [1]]; k = [1, 0]: m = 0.5; δ = 0.5 (3 − 0.5) = 1.25;
    // S = [[1.75], [1]]; q = [1, 1]: o = 2.75.
    let s = f(&[1, 2, 1], &[1., 2.]);
    let q = f(&[1, 1, 2], &[1., 1.]);
    let k = f(&[1, 1, 2], &[1., 0.]);
    let v = f(&[1, 1, 1], &[3.]);
    let g = f(&[1, 1], &[0.5f32.ln()]);
    let beta = f(&[1, 1], &[0.5]);
    let outs = run(Op::DeltaStep { kmap: KMap::Grouped }, &[&s, &q, &k, &v, &g, &beta]);
    assert_close(&outs[0], &[1, 1, 1], &[2.75]);
    assert_close(&outs[1], &[1, 2, 1], &[1.75, 1.]);
}

#[test]
fn kmap_chooses_grouped_or_tiled_key_heads() {
    // hk = 2, hv = 4, one dim each: from zero state with α = β = 1 and v = 1, S = k and o = k·q,
    // so each value head reports its key head's k (1 or 2).
    let q = f(&[1, 2, 1], &[1., 1.]);
    let k = f(&[1, 2, 1], &[1., 2.]);
    let v = f(&[1, 4, 1], &[1., 1., 1., 1.]);
    let g = Tensor::zeros([1, 4]);
    let beta = f(&[1, 4], &[1., 1., 1., 1.]);
    let grouped = run1(Op::DeltaScan { kmap: KMap::Grouped }, &[&q, &k, &v, &g, &beta]);
    assert_close(&grouped, &[1, 4, 1], &[1., 1., 2., 2.]);
    let tiled = run1(Op::DeltaScan { kmap: KMap::Tiled }, &[&q, &k, &v, &g, &beta]);
    assert_close(&tiled, &[1, 4, 1], &[1., 2., 1., 2.]);
}

/// Operands of the delta rule over `n` rows: hk = 2, hv = 4, dk = 3, dv = 2.
fn operands(n: usize) -> [Tensor; 5] {
    let g = Tensor::from_fn(&[n, 4], |i| -0.1 - 0.05 * i as f32);
    let beta = Tensor::from_fn(&[n, 4], |i| 0.2 + 0.03 * i as f32);
    [noise(&[n, 2, 3], 1), noise(&[n, 2, 3], 2), noise(&[n, 4, 2], 3), g, beta]
}

/// Rows `r..r+1` of each operand.
fn row(t: &Tensor, r: usize) -> Tensor {
    let mut shape = t.shape().to_vec();
    shape[0] = 1;
    t.slice0(r).unwrap().reshaped(&shape).unwrap()
}

#[test]
fn delta_step_of_n_rows_equals_n_single_row_steps() {
    let ops = operands(3);
    let s0 = noise(&[4, 3, 2], 9);
    let mut args: Vec<&Tensor> = vec![&s0];
    args.extend(ops.iter());
    let all = run(Op::DeltaStep { kmap: KMap::Grouped }, &args);

    let mut s = s0.clone();
    let mut o = Vec::new();
    for r in 0..3 {
        let rows: Vec<Tensor> = ops.iter().map(|t| row(t, r)).collect();
        let mut args: Vec<&Tensor> = vec![&s];
        args.extend(rows.iter());
        let step = run(Op::DeltaStep { kmap: KMap::Grouped }, &args);
        o.extend_from_slice(step[0].as_f32().unwrap());
        s = step[1].clone();
    }
    assert_eq!(all[0], Tensor::f32([3, 4, 2], o), "outputs differ");
    assert_eq!(all[1], s, "final states differ");
}

#[test]
fn delta_scan_equals_delta_step_from_a_zero_state() {
    for kmap in [KMap::Grouped, KMap::Tiled] {
        let ops = operands(4);
        let refs: Vec<&Tensor> = ops.iter().collect();
        let scan = run1(Op::DeltaScan { kmap }, &refs);
        let zero = Tensor::zeros([4, 3, 2]);
        let mut args = vec![&zero];
        args.extend(refs);
        let step = run(Op::DeltaStep { kmap }, &args);
        assert_eq!(scan, step[0]);
    }
}
