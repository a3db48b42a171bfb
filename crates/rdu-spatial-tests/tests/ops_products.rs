//! `linear`, `linear_heads`, `embed`, `argmax` and Q8_0 folding.

use crate::common;
use common::*;
use rdu_spatial::MapBindings;

#[test]
fn linear_is_x_times_w_transposed_plus_bias() {
    let b = MapBindings::new()
        .with("x", f(&[2, 3], &[1., 2., 3., -1., 0., 1.]))
        .with("W", f(&[2, 3], &[1., 0., 0., 1., 1., 1.]))
        .with("bias", f(&[2], &[0.5, -0.5]));
    let r = run(&b, "y = linear(x, W)\nz = linear(x, W, bias)", &["y", "z"]).unwrap();
    assert_eq!(out(&r, "y"), [1., 6., -1., 0.]);
    assert_eq!(out(&r, "z"), [1.5, 5.5, -0.5, -0.5]);
    assert_eq!(r.outputs["y"].shape, [2, 2]);
}

#[test]
fn linear_over_many_rows_matches_the_row_by_row_product() {
    // Eight rows take the matrixmultiply path; each must equal its own single-row product.
    let (x, w) = (rt(&[8, 48], 1), rt(&[40, 48], 2));
    let b = MapBindings::new().with("x", x.clone()).with("W", w.clone());
    let all = out(&run(&b, "y = linear(x, W)", &["y"]).unwrap(), "y");
    let xs = x.as_f32().unwrap();
    for r in 0..8 {
        let row = MapBindings::new().with("x", f(&[1, 48], &xs[r * 48..(r + 1) * 48])).with("W", w.clone());
        let one = out(&run(&row, "y = linear(x, W)", &["y"]).unwrap(), "y");
        close(&all[r * 40..(r + 1) * 40], &one, 1e-5, 1e-5);
    }
}

#[test]
fn folded_q8_linear_equals_dense_linear_over_the_dequantised_weight() {
    let w = q8(&[96, 256], 3);
    let dense = w.dequantize();
    for rows in [1, 5] {
        let b = MapBindings::new().with("x", rt(&[rows, 256], 4)).with_q8("Wq", w.clone());
        let b = b.with("Wd", f(&[96, 256], &dense));
        let r = run(&b, "y = linear(x, Wq) fold=q8\nz = linear(x, Wd)", &["y", "z"]).unwrap();
        close_scaled(&out(&r, "y"), &out(&r, "z"), 1e-5);
    }
}

#[test]
fn q8_weights_must_be_folded_or_dequantised() {
    let b = MapBindings::new().with("x", rt(&[1, 32], 1)).with_q8("Wq", q8(&[4, 32], 2)).with("Wd", rt(&[4, 32], 3));
    let e = run(&b, "y = linear(x, Wq)", &["y"]).unwrap_err().to_string();
    assert!(e.contains("Wq is stored q8_0 but the op does not fold q8"), "{e}");
    let e = run(&b, "y = linear(x, Wd) fold=q8", &["y"]).unwrap_err().to_string();
    assert!(e.contains("no argument is stored q8_0"), "{e}");
    let e = run(&b, "v = reshape(Wq, [32, 4])", &["v"]).unwrap_err().to_string();
    assert!(e.contains("does not fold q8"), "{e}");
    // A weight view goes through dequant first.
    let r = run(&b, "d = dequant(Wq)\nv = reshape(d, [2, 64])", &["v"]).unwrap();
    assert_eq!(out(&r, "v"), b.q8["Wq"].dequantize());
    assert_eq!(r.outputs["v"].shape, [2, 64]);
}

#[test]
fn linear_heads_applies_one_matrix_per_head() {
    // h = 2 heads, in = 2, out = 1: head 0 sums, head 1 subtracts.
    let b = MapBindings::new().with("x", f(&[1, 2, 2], &[1., 2., 5., 3.])).with("W", f(&[2, 1, 2], &[1., 1., 1., -1.]));
    let r = run(&b, "y = linear_heads(x, W)", &["y"]).unwrap();
    assert_eq!(out(&r, "y"), [3., 2.]);
    assert_eq!(r.outputs["y"].shape, [1, 2, 1]);
    let w = q8(&[3, 4, 64], 7);
    let b = MapBindings::new().with("x", rt(&[2, 3, 64], 8)).with_q8("Wq", w.clone());
    let b = b.with("Wd", f(&[3, 4, 64], &w.dequantize()));
    let r = run(&b, "y = linear_heads(x, Wq) fold=q8\nz = linear_heads(x, Wd)", &["y", "z"]).unwrap();
    close_scaled(&out(&r, "y"), &out(&r, "z"), 1e-5);
}

#[test]
fn embed_looks_up_rows_dense_and_q8_and_rejects_bad_ids() {
    let e = f(&[3, 2], &[0., 1., 10., 11., 20., 21.]);
    let b = MapBindings::new().with("ids", i(&[3], &[2, 0, 2])).with("E", e);
    let r = run(&b, "y = embed(ids, E)", &["y"]).unwrap();
    assert_eq!(out(&r, "y"), [20., 21., 0., 1., 20., 21.]);
    let w = q8(&[5, 64], 9);
    let b = MapBindings::new().with("ids", i(&[2], &[4, 1])).with_q8("E", w.clone());
    let r = run(&b, "y = embed(ids, E) fold=q8", &["y"]).unwrap();
    let deq = w.dequantize();
    assert_eq!(out(&r, "y"), [&deq[256..320], &deq[64..128]].concat());
    let bad = MapBindings::new().with("ids", i(&[1], &[5])).with_q8("E", w.clone());
    let e = run(&bad, "y = embed(ids, E) fold=q8", &["y"]).unwrap_err().to_string();
    assert!(e.contains("token id 5 is out of range for a vocabulary of 5"), "{e}");
    let neg = MapBindings::new().with("ids", i(&[1], &[-1])).with_q8("E", w);
    assert!(run(&neg, "y = embed(ids, E) fold=q8", &["y"]).is_err());
}

#[test]
fn argmax_takes_the_first_of_equal_maxima() {
    let b = MapBindings::new().with("x", f(&[3, 3], &[1., 3., 3., -1., -2., -1., 0., 0., 7.]));
    let r = run(&b, "y = argmax(x)", &["y"]).unwrap();
    assert_eq!(r.outputs["y"].as_i32().unwrap(), [1, 0, 2]);
}
