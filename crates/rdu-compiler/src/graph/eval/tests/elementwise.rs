//! Elementwise ops, norms and products.

use super::{assert_close, f, i, run1, try_run};
use crate::graph::Op;

#[test]
fn binary_ops_broadcast_like_numpy() {
    let a = f(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = f(&[3], &[10., 20., 30.]);
    assert_close(&run1(Op::Add, &[&a, &b]), &[2, 3], &[11., 22., 33., 14., 25., 36.]);
    assert_close(&run1(Op::Sub, &[&a, &b]), &[2, 3], &[-9., -18., -27., -6., -15., -24.]);
    let col = f(&[2, 1], &[1., 2.]);
    let row = f(&[1, 3], &[1., 10., 100.]);
    assert_close(&run1(Op::Mul, &[&col, &row]), &[2, 3], &[1., 10., 100., 2., 20., 200.]);
    let s = f(&[], &[2.]);
    assert_close(&run1(Op::Mul, &[&s, &b]), &[3], &[20., 40., 60.]);
}

#[test]
fn binary_ops_on_i32() {
    let a = i(&[2], &[3, -4]);
    let b = i(&[], &[5]);
    assert_eq!(run1(Op::Add, &[&a, &b]), i(&[2], &[8, 1]));
    assert_eq!(run1(Op::Mul, &[&a, &b]), i(&[2], &[15, -20]));
    assert_eq!(run1(Op::Neg, &[&a]), i(&[2], &[-3, 4]));
}

#[test]
fn unary_ops() {
    let x = f(&[4], &[0., 1., -2., 25.]);
    assert_close(&run1(Op::Scale { by: 0.5 }, &[&x]), &[4], &[0., 0.5, -1., 12.5]);
    assert_close(&run1(Op::Neg, &[&x]), &[4], &[0., -1., 2., -25.]);
    assert_close(&run1(Op::Exp, &[&x]), &[4], &[1., 1f32.exp(), (-2f32).exp(), 25f32.exp()]);
    let sig = |v: f32| 1.0 / (1.0 + (-v).exp());
    assert_close(&run1(Op::Sigmoid, &[&x]), &[4], &[0.5, sig(1.), sig(-2.), sig(25.)]);
    assert_close(&run1(Op::Silu, &[&x]), &[4], &[0., sig(1.), -2. * sig(-2.), 25. * sig(25.)]);
    // softplus is exactly x above the threshold 20, as torch.
    let sp = run1(Op::Softplus, &[&x]);
    assert_close(&sp, &[4], &[2f32.ln(), 1f32.exp().ln_1p(), (-2f32).exp().ln_1p(), 25.]);
    assert_eq!(sp.as_f32().unwrap()[3], 25.0);
    let just_above = run1(Op::Softplus, &[&f(&[1], &[20.5])]);
    assert_eq!(just_above.as_f32().unwrap()[0], 20.5);
    // gelu_tanh(1) = 0.5 (1 + tanh(√(2/π) · 1.044715)) = 0.8411920
    assert_close(&run1(Op::GeluTanh, &[&f(&[2], &[1., 0.])]), &[2], &[0.841_192, 0.]);
}

#[test]
fn rms_norm_over_the_last_axis_with_offset() {
    // Row [3, 4]: mean of squares 12.5, so x / √12.5.
    let x = f(&[2, 2], &[3., 4., 1., 1.]);
    let w = f(&[2], &[1., 2.]);
    let r = 12.5f32.sqrt();
    let plain = run1(Op::RmsNorm { eps: 0.0, offset: 0.0 }, &[&x, &w]);
    assert_close(&plain, &[2, 2], &[3. / r, 8. / r, 1., 2.]);
    let unit = run1(Op::RmsNorm { eps: 0.0, offset: 1.0 }, &[&x, &w]);
    assert_close(&unit, &[2, 2], &[6. / r, 12. / r, 2., 3.]);
    // eps under the root: [1, 1] with eps 3 gives 1 / √4.
    let eps = run1(Op::RmsNorm { eps: 3.0, offset: 0.0 }, &[&f(&[2], &[1., 1.]), &f(&[2], &[1., 1.])]);
    assert_close(&eps, &[2], &[0.5, 0.5]);
}

#[test]
fn l2_norm_over_the_last_axis() {
    let x = f(&[1, 2, 2], &[3., 4., 0., 2.]);
    assert_close(&run1(Op::L2Norm { eps: 0.0 }, &[&x]), &[1, 2, 2], &[0.6, 0.8, 0., 1.]);
    // [3, 4] with eps 11: 1/√36.
    assert_close(&run1(Op::L2Norm { eps: 11.0 }, &[&f(&[2], &[3., 4.])]), &[2], &[0.5, 4. / 6.]);
}

#[test]
fn linear_with_and_without_bias() {
    let x = f(&[2, 3], &[1., 2., 3., 0., 1., 0.]);
    let w = f(&[2, 3], &[1., 0., 0., 1., 1., 1.]);
    let b = f(&[2], &[10., 20.]);
    assert_close(&run1(Op::Linear, &[&x, &w]), &[2, 2], &[1., 6., 0., 1.]);
    assert_close(&run1(Op::Linear, &[&x, &w, &b]), &[2, 2], &[11., 26., 10., 21.]);
}

#[test]
fn linear_heads_is_one_linear_per_head() {
    // x [1, 2, 2], W [2, 1, 2]: head 0 sums, head 1 takes the difference.
    let x = f(&[1, 2, 2], &[1., 2., 5., 3.]);
    let w = f(&[2, 1, 2], &[1., 1., 1., -1.]);
    assert_close(&run1(Op::LinearHeads, &[&x, &w]), &[1, 2, 1], &[3., 2.]);
}

#[test]
fn embed_looks_up_rows_and_rejects_ids_out_of_range() {
    let e = f(&[3, 2], &[0., 1., 10., 11., 20., 21.]);
    assert_close(&run1(Op::Embed, &[&i(&[3], &[2, 0, 2]), &e]), &[3, 2], &[20., 21., 0., 1., 20., 21.]);
    for bad in [3, -1] {
        let err = try_run(Op::Embed, &[&i(&[1], &[bad]), &e]).unwrap_err();
        assert!(err.message.contains(&format!("token id {bad}")), "{err}");
        assert_eq!(err.stmt, Some(0));
    }
}

#[test]
fn argmax_takes_the_first_of_ties() {
    let x = f(&[2, 4], &[1., 5., 5., 0., -1., -3., -1., -2.]);
    assert_eq!(run1(Op::Argmax, &[&x]), i(&[2], &[1, 0]));
}
