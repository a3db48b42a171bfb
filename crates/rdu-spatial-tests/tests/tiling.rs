//! Tiled ops compute tile by tile into a zeroed output: a correct tiling changes nothing, a
//! gap or a wrong bound changes the numbers, and only tileable axes are accepted.

use crate::common;
use common::*;
use rdu_spatial::MapBindings;

fn linear_bind() -> MapBindings {
    MapBindings::new().with("x", rt(&[3, 64], 1)).with("W", rt(&[40, 64], 2)).with_q8("Wq", q8(&[40, 64], 3))
}

#[test]
fn a_linear_tiled_into_four_tiles_equals_the_untiled_one() {
    let b = linear_bind();
    let ops = "a = linear(x, W)\nt = linear(x, W) tile(axis=1, [0..10, 10..20, 20..30, 30..40])\n\
               qa = linear(x, Wq) fold=q8\nqt = linear(x, Wq) fold=q8 tile(axis=1, [30..40, 0..13, 13..30])";
    let r = run(&b, ops, &["a", "t", "qa", "qt"]).unwrap();
    assert_eq!(out(&r, "a"), out(&r, "t"));
    assert_eq!(out(&r, "qa"), out(&r, "qt"));
}

#[test]
fn a_gap_or_an_off_by_one_bound_changes_the_numbers() {
    let b = linear_bind();
    let ops = "a = linear(x, W)\ngap = linear(x, W) tile(axis=1, [0..10, 11..40])\n\
               short = linear(x, W) tile(axis=1, [0..20, 20..39])";
    let r = run(&b, ops, &["a", "gap", "short"]).unwrap();
    let (a, gap, short) = (out(&r, "a"), out(&r, "gap"), out(&r, "short"));
    assert_ne!(a, gap);
    assert_ne!(a, short);
    // Exactly the columns no tile covers are zero.
    for row in 0..3 {
        assert_eq!(gap[row * 40 + 10], 0.0);
        assert_eq!(short[row * 40 + 39], 0.0);
        assert_eq!(gap[row * 40 + 11], a[row * 40 + 11]);
    }
    let e = run(&b, "o = linear(x, W) tile(axis=1, [0..20, 20..41])", &["o"]).unwrap_err().to_string();
    assert!(e.contains("tile 20..41 is out of bounds for axis 1 of size 40"), "{e}");
}

#[test]
fn elementwise_ops_tile_along_any_axis_and_norms_along_any_but_the_last() {
    let b = MapBindings::new().with("x", rt(&[4, 6], 1)).with("y", rt(&[6], 2)).with("w", rt(&[6], 3));
    let ops = "a = add(x, y)\nr = add(x, y) tile(axis=0, [0..2, 2..4])\nc = add(x, y) tile(axis=1, [0..3, 3..6])\n\
               n = rms_norm(x, w, eps=1e-6)\nm = rms_norm(x, w, eps=1e-6) tile(axis=0, [2..4, 0..2])\n\
               s = silu(x) tile(axis=1, [0..5])";
    let r = run(&b, ops, &["a", "r", "c", "n", "m", "s"]).unwrap();
    assert_eq!(out(&r, "a"), out(&r, "r"));
    assert_eq!(out(&r, "a"), out(&r, "c"));
    assert_eq!(out(&r, "n"), out(&r, "m"));
    assert!(out(&r, "s").chunks(6).all(|row| row[5] == 0.0 && row[4] != 0.0));
    let e = run(&b, "n = rms_norm(x, w, eps=1e-6) tile(axis=1, [0..6])", &["n"]).unwrap_err().to_string();
    assert!(e.contains("cannot tile axis 1"), "{e}");
}

#[test]
fn heads_tile_attention_linear_heads_and_rope() {
    let b = MapBindings::new()
        .with("q", rt(&[2, 4, 8], 1))
        .with("K", rt(&[5, 2, 8], 2))
        .with("V", rt(&[5, 2, 8], 3))
        .with("W", rt(&[4, 3, 8], 4))
        .with("cos", rt(&[8, 4], 5))
        .with("sin", rt(&[8, 4], 6))
        .with("pos", i(&[], &[2]));
    let ops = "a = attend(q, K, V, pos, scale=0.3)\nb = attend(q, K, V, pos, scale=0.3) tile(axis=1, [0..1, 1..4])\n\
               h = linear_heads(q, W)\ng = linear_heads(q, W) tile(axis=1, [0..2, 2..4])\n\
               r = rope(q, cos, sin, pos, dim=8, style=neox)\ns = rope(q, cos, sin, pos, dim=8, style=neox) tile(axis=1, [0..3])";
    let r = run(&b, ops, &["a", "b", "h", "g", "r", "s"]).unwrap();
    assert_eq!(out(&r, "a"), out(&r, "b"));
    assert_eq!(out(&r, "h"), out(&r, "g"));
    let (full, part) = (out(&r, "r"), out(&r, "s"));
    assert_eq!(full[..24], part[..24]);
    assert!(part[24..32].iter().all(|v| *v == 0.0), "head 3 is not computed");
    let e = run(&b, "a = attend(q, K, V, pos, scale=0.3) tile(axis=2, [0..8])", &["a"]).unwrap_err().to_string();
    assert!(e.contains("cannot tile axis 2"), "{e}");
}

#[test]
fn experts_tile_along_the_model_dim_and_untileable_ops_refuse_a_tiling() {
    let b = MapBindings::new()
        .with("x", rt(&[2, 8], 1))
        .with("w", f(&[2, 1], &[1.0, 0.5]))
        .with("idx", i(&[2, 1], &[1, 0]))
        .with("Wg", rt(&[2, 4, 8], 2))
        .with("Wu", rt(&[2, 4, 8], 3))
        .with("Wd", rt(&[2, 8, 4], 4));
    let ops = "a = experts(x, w, idx, Wg, Wu, Wd, act=silu)\nb = experts(x, w, idx, Wg, Wu, Wd, act=silu) tile(axis=1, [4..8, 0..4])";
    let r = run(&b, ops, &["a", "b"]).unwrap();
    assert_eq!(out(&r, "a"), out(&r, "b"));
    for op in ["v = reshape(x, [16]) tile(axis=0, [0..16])", "v, j = route(x, k=1) tile(axis=0, [0..2])"] {
        let e = run(&b, op, &["v"]).unwrap_err().to_string();
        assert!(e.contains("cannot be tiled"), "{op}: {e}");
    }
}
