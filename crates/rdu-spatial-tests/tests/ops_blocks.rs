//! FP8 block-scaled and MXFP4 weights folded by the products that read them (`fold=fp8`,
//! `fold=mxfp4`): every product equals the same product over the weight's dequantised
//! values read dense, and a stored weight is read only by an op that folds its format.

use crate::common;
use common::*;
use rdu_checkpoint::{quantize_fp8, Fp8Weight, GgmlType, GgmlWeight};
use rdu_spatial::MapBindings;

/// A seeded FP8 weight of `shape` in `block` blocks (ragged where the block does not divide).
fn fp8(shape: &[usize], block: [usize; 2], seed: u64) -> Fp8Weight {
    quantize_fp8(&rand(shape.iter().product(), seed), shape, block).expect("quantisable")
}

/// A seeded MXFP4 weight of `shape`: bytes drawn, scale bytes between 2^-8 and 2^1.
fn mxfp4(shape: &[usize], seed: u64) -> GgmlWeight {
    let blocks = shape.iter().product::<usize>() / 32;
    let mut bytes: Vec<u8> = rand(blocks * 17, seed).iter().map(|v| ((v + 1.0) * 128.0) as u8).collect();
    for (k, b) in bytes.chunks_exact_mut(17).enumerate() {
        b[0] = 119 + (k % 10) as u8;
    }
    GgmlWeight::new(shape.to_vec(), GgmlType::MXFP4, bytes).expect("whole blocks")
}

#[test]
fn folded_fp8_and_mxfp4_linears_equal_dense_linears_over_their_values() {
    let w8 = fp8(&[96, 200], [24, 40], 3);
    let w4 = mxfp4(&[96, 256], 5);
    // 1 row (decode, row dots), 5 (register tiles), 400 (widened panels).
    for rows in [1, 5, 400] {
        let b = MapBindings::new()
            .with("x", rt(&[rows, 200], 4))
            .with("x4", rt(&[rows, 256], 6))
            .with_fp8("W8", w8.clone())
            .with("D8", f(&[96, 200], &w8.dequantize()))
            .with_packed("W4", w4.clone())
            .with("D4", f(&[96, 256], &w4.dequantize()));
        let ops = "y = linear(x, W8) fold=fp8\nz = linear(x, D8)\ny4 = linear(x4, W4) fold=mxfp4\nz4 = linear(x4, D4)";
        let r = run(&b, ops, &["y", "z", "y4", "z4"]).unwrap();
        close_scaled(&out(&r, "y"), &out(&r, "z"), 1e-5);
        close_scaled(&out(&r, "y4"), &out(&r, "z4"), 1e-5);
    }
}

#[test]
fn linear_heads_and_embed_read_fp8_and_mxfp4_as_their_values() {
    // Three heads, each its own FP8 matrix with its own grid of scales.
    let w8 = fp8(&[3, 20, 64], [8, 24], 7);
    let w4 = mxfp4(&[3, 4, 64], 8);
    let b = MapBindings::new()
        .with("x", rt(&[2, 3, 64], 9))
        .with_fp8("W8", w8.clone())
        .with("D8", f(&[3, 20, 64], &w8.dequantize()))
        .with_packed("W4", w4.clone())
        .with("D4", f(&[3, 4, 64], &w4.dequantize()));
    let ops = "y = linear_heads(x, W8) fold=fp8\nz = linear_heads(x, D8)\ny4 = linear_heads(x, W4) fold=mxfp4\nz4 = linear_heads(x, D4)";
    let r = run(&b, ops, &["y", "z", "y4", "z4"]).unwrap();
    close_scaled(&out(&r, "y"), &out(&r, "z"), 1e-5);
    close_scaled(&out(&r, "y4"), &out(&r, "z4"), 1e-5);

    let (e8, e4) = (fp8(&[7, 50], [3, 16], 10), mxfp4(&[7, 64], 11));
    let b =
        MapBindings::new().with("ids", i(&[3], &[6, 0, 4])).with_fp8("E8", e8.clone()).with_packed("E4", e4.clone());
    let r = run(&b, "y = embed(ids, E8) fold=fp8\ny4 = embed(ids, E4) fold=mxfp4", &["y", "y4"]).unwrap();
    let rows = |v: &[f32], d: usize| [6, 0, 4].iter().flat_map(|&r| v[r * d..(r + 1) * d].to_vec()).collect::<Vec<_>>();
    assert_eq!(out(&r, "y"), rows(&e8.dequantize(), 50), "exactly the rows' values");
    assert_eq!(out(&r, "y4"), rows(&e4.dequantize(), 64));
}

#[test]
fn experts_fold_fp8_and_mxfp4_slabs_expert_by_expert() {
    let (e, hid, d) = (5, 32, 64);
    let x = rt(&[3, d], 12);
    let (w, idx) = (f(&[3, 2], &[0.7, 0.3, 0.6, 0.4, 0.5, 0.5]), i(&[3, 2], &[4, 1, 1, 4, 0, 2]));
    let base = MapBindings::new().with("x", x).with("w", w).with("idx", idx);
    let dense = |g: Vec<f32>, u: Vec<f32>, dn: Vec<f32>| {
        let b = base.clone().with("Wg", f(&[e, hid, d], &g)).with("Wu", f(&[e, hid, d], &u));
        let b = b.with("Wd", f(&[e, d, hid], &dn));
        out(&run(&b, "y = experts(x, w, idx, Wg, Wu, Wd, act=silu)", &["y"]).unwrap(), "y")
    };
    // FP8, blocks ragged in both dimensions of every expert.
    let (g, u, dn) =
        (fp8(&[e, hid, d], [12, 24], 13), fp8(&[e, hid, d], [12, 24], 14), fp8(&[e, d, hid], [24, 12], 15));
    let want = dense(g.dequantize(), u.dequantize(), dn.dequantize());
    let b = base.clone().with_fp8("Wg", g).with_fp8("Wu", u).with_fp8("Wd", dn);
    let got = run(&b, "y = experts(x, w, idx, Wg, Wu, Wd, act=silu) fold=fp8", &["y"]).unwrap();
    close_scaled(&out(&got, "y"), &want, 1e-5);
    // MXFP4.
    let (g, u, dn) = (mxfp4(&[e, hid, d], 16), mxfp4(&[e, hid, d], 17), mxfp4(&[e, d, hid], 18));
    let want = dense(g.dequantize(), u.dequantize(), dn.dequantize());
    let b = base.with_packed("Wg", g).with_packed("Wu", u).with_packed("Wd", dn);
    let got = run(&b, "y = experts(x, w, idx, Wg, Wu, Wd, act=silu) fold=mxfp4", &["y"]).unwrap();
    close_scaled(&out(&got, "y"), &want, 1e-5);
}

#[test]
fn stored_weights_are_read_only_by_ops_that_fold_their_format() {
    let w8 = fp8(&[4, 64], [2, 32], 19);
    let w4 = mxfp4(&[4, 64], 20);
    let b = MapBindings::new().with("x", rt(&[1, 64], 21)).with_fp8("W8", w8.clone()).with_packed("W4", w4.clone());
    let e = run(&b, "y = linear(x, W8)", &["y"]).unwrap_err().to_string();
    assert!(e.contains("W8 is stored fp8 but the op does not fold fp8 (use fold=fp8 or dequant)"), "{e}");
    let e = run(&b, "y = linear(x, W4) fold=q8", &["y"]).unwrap_err().to_string();
    assert!(e.contains("W4 is stored mxfp4 but the op folds q8"), "{e}");
    let e = run(&b, "v = reshape(W4, [64, 4])", &["v"]).unwrap_err().to_string();
    assert!(e.contains("W4 is stored mxfp4 but the op does not fold mxfp4"), "{e}");
    // A weight view goes through dequant first.
    let r = run(&b, "d = dequant(W8)\nv = reshape(d, [2, 128])\nd4 = dequant(W4)", &["v", "d4"]).unwrap();
    assert_eq!(out(&r, "v"), w8.dequantize());
    assert_eq!(out(&r, "d4"), w4.dequantize());
}

#[test]
fn a_stored_weight_that_is_not_its_declaration_is_refused() {
    let w8 = fp8(&[4, 64], [2, 32], 22);
    let b = MapBindings::new().with("x", rt(&[1, 64], 23)).with_fp8("W8", w8.clone());
    let mut p = program(&b, "y = linear(x, W8) fold=fp8", &["y"]);
    // Declared in 4×32 blocks, bound in 2×32 ones.
    let decl = p.tensors.iter_mut().find(|t| t.name == "W8").unwrap();
    decl.storage = rdu_spatial::Storage::Fp8 { rows: 4, cols: 32 };
    let e = rdu_spatial::simulate(&p, &b).unwrap_err().to_string();
    assert!(e.contains("fp8 [4, 64] in 2×32 blocks with 4 scales, declared [4, 64] in 4×32 blocks"), "{e}");
    // An MXFP4 weight whose scale byte is NaN.
    let mut bad = mxfp4(&[4, 64], 24);
    bad.bytes[17 * 3] = 255;
    let b = MapBindings::new().with("x", rt(&[1, 64], 23)).with_packed("W4", bad);
    let e = run(&b, "y = linear(x, W4) fold=mxfp4", &["y"]).unwrap_err().to_string();
    assert!(e.contains("MXFP4 block 3 has scale byte 255 (NaN in e8m0)"), "{e}");
}
