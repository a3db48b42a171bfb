//! Elementwise ops and norms on tiny hand-computed cases.

use crate::common;
use common::*;
use rdu_spatial::MapBindings;

#[test]
fn add_sub_mul_broadcast_like_numpy() {
    let b = MapBindings::new().with("a", f(&[2, 3], &[1., 2., 3., 4., 5., 6.])).with("c", f(&[3], &[10., 20., 30.]));
    let b = b.with("col", f(&[2, 1], &[2., -1.]));
    let r = run(&b, "x = add(a, c)\ny = sub(c, a)\nz = mul(a, col)", &["x", "y", "z"]).unwrap();
    assert_eq!(out(&r, "x"), [11., 22., 33., 14., 25., 36.]);
    assert_eq!(out(&r, "y"), [9., 18., 27., 6., 15., 24.]);
    assert_eq!(out(&r, "z"), [2., 4., 6., -4., -5., -6.]);
    assert_eq!(r.outputs["z"].shape, [2, 3]);
    // [2,1] with [1,3] broadcasts to [2,3] from both sides.
    let b = MapBindings::new().with("p", f(&[2, 1], &[1., 2.])).with("q", f(&[1, 3], &[10., 20., 30.]));
    let r = run(&b, "x = add(p, q)", &["x"]).unwrap();
    assert_eq!(out(&r, "x"), [11., 21., 31., 12., 22., 32.]);
    let err = run(&b.with("bad", f(&[2], &[0., 0.])), "x = add(q, bad)", &["x"]).unwrap_err();
    assert!(err.to_string().contains("do not broadcast"), "{err}");
}

#[test]
fn unary_activations_match_their_formulas() {
    let xs = [-30.0f32, -1.0, 0.0, 0.5, 25.0];
    let b = MapBindings::new().with("x", f(&[5], &xs));
    let ops =
        "a = scale(x, by=0.5)\nb = neg(x)\nc = exp(x)\nd = sigmoid(x)\ne = silu(x)\ng = softplus(x)\nh = gelu_tanh(x)";
    let r = run(&b, ops, &["a", "b", "c", "d", "e", "g", "h"]).unwrap();
    let sig = |v: f32| 1.0 / (1.0 + (-v).exp());
    assert_eq!(out(&r, "a"), xs.map(|v| v * 0.5));
    assert_eq!(out(&r, "b"), xs.map(|v| -v));
    close(&out(&r, "c"), &xs.map(f32::exp), 0.0, 1e-6);
    close(&out(&r, "d"), &xs.map(sig), 1e-7, 1e-6);
    close(&out(&r, "e"), &xs.map(|v| v * sig(v)), 1e-7, 1e-6);
    // softplus is x itself above 20, ln(1 + eˣ) below.
    close(&out(&r, "g"), &[(-30f32).exp(), 0.31326166, std::f32::consts::LN_2, 0.974077, 25.0], 1e-7, 1e-6);
    let gelu = |v: f32| 0.5 * v * (1.0 + ((2.0 / std::f32::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh());
    close(&out(&r, "h"), &xs.map(gelu), 1e-7, 1e-6);
    assert_eq!(out(&r, "h")[2], 0.0);
}

#[test]
fn rms_norm_uses_mean_of_squares_eps_and_offset() {
    // Row [3, 4]: mean(x²) = 12.5, and with eps 3.5 the divisor is exactly √16 = 4.
    let b = MapBindings::new().with("x", f(&[2, 2], &[3., 4., 0., 2.])).with("w", f(&[2], &[1., 0.5]));
    let r = run(&b, "y = rms_norm(x, w, eps=3.5, offset=0)\nz = rms_norm(x, w, eps=3.5, offset=1)", &["y", "z"]);
    let r = r.unwrap();
    // Row 2 [0, 2]: mean 2 + 3.5 = 5.5.
    let s2 = 5.5f32.sqrt();
    close(&out(&r, "y"), &[0.75, 0.5, 0.0, 2.0 / s2 * 0.5], 1e-7, 1e-6);
    close(&out(&r, "z"), &[1.5, 1.5, 0.0, 2.0 / s2 * 1.5], 1e-7, 1e-6);
    let e = run(&b.with("w3", f(&[3], &[1., 1., 1.])), "y = rms_norm(x, w3, eps=1e-6)", &["y"]).unwrap_err();
    assert!(e.to_string().contains("does not match"), "{e}");
}

#[test]
fn l2_norm_divides_by_the_root_of_the_sum_of_squares() {
    let b = MapBindings::new().with("x", f(&[1, 2, 2], &[3., 4., 6., 8.]));
    let r = run(&b, "y = l2_norm(x, eps=0)", &["y"]).unwrap();
    close(&out(&r, "y"), &[0.6, 0.8, 0.6, 0.8], 1e-7, 1e-6);
    assert_eq!(r.outputs["y"].shape, [1, 2, 2]);
}

#[test]
fn elementwise_ops_reject_i32_and_missing_attributes() {
    let b = MapBindings::new().with("x", f(&[2], &[1., 2.])).with("t", i(&[2], &[1, 2]));
    assert!(run(&b, "y = exp(t)", &["y"]).unwrap_err().to_string().contains("must be f32"));
    assert!(run(&b, "y = scale(x)", &["y"]).unwrap_err().to_string().contains("missing attribute `by`"));
    assert!(run(&b, "y = neg(x, bogus=1)", &["y"]).unwrap_err().to_string().contains("unknown attribute"));
}
