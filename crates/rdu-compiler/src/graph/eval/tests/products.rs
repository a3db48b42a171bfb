//! `linear`, `linear_heads` and chunked `attend` through the f64 products: the plainest
//! formula (a sequential f64 sum per element) within f64 rounding, and a row's value the same
//! whether computed in a chunk or alone (bit for bit for `linear`).

use super::{noise, run1};
use crate::graph::{Op, Tensor};

/// `Σᵢ a[i]·b[i]`, summed in f64 in order.
fn naive_dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&p, &q)| f64::from(p) * f64::from(q)).sum()
}

fn rows(t: &Tensor, r: usize) -> Tensor {
    let width: usize = t.shape()[1..].iter().product();
    let mut shape = t.shape().to_vec();
    shape[0] = 1;
    Tensor::f32(shape, t.as_f32().unwrap()[r * width..(r + 1) * width].to_vec())
}

#[test]
fn linear_is_the_f64_dot_of_each_row_and_column() {
    // 150 output columns cross the product's column blocks; 37 rows, 300 inputs.
    let (x, w, b) = (noise(&[37, 300], 1), noise(&[150, 300], 2), noise(&[150], 3));
    let y = run1(Op::Linear, &[&x, &w, &b]);
    let (xs, ws, bs) = (x.as_f32().unwrap(), w.as_f32().unwrap(), b.as_f32().unwrap());
    for r in 0..37 {
        for j in 0..150 {
            let want = naive_dot(&xs[r * 300..][..300], &ws[j * 300..][..300]) + f64::from(bs[j]);
            let got = f64::from(y.as_f32().unwrap()[r * 150 + j]);
            assert!((got - want).abs() <= 1e-6 * want.abs().max(1e-3), "({r}, {j}): {got} vs {want}");
        }
        // Row r alone gives the same bits as row r of the chunk.
        let alone = run1(Op::Linear, &[&rows(&x, r), &w, &b]);
        assert_eq!(alone.as_f32().unwrap(), &y.as_f32().unwrap()[r * 150..(r + 1) * 150], "row {r}");
    }
}

#[test]
fn linear_heads_is_the_f64_dot_per_head() {
    let (x, w) = (noise(&[5, 3, 70], 4), noise(&[3, 9, 70], 5));
    let y = run1(Op::LinearHeads, &[&x, &w]);
    let (xs, ws, ys) = (x.as_f32().unwrap(), w.as_f32().unwrap(), y.as_f32().unwrap());
    for r in 0..5 {
        for h in 0..3 {
            for k in 0..9 {
                let want = naive_dot(&xs[(r * 3 + h) * 70..][..70], &ws[(h * 9 + k) * 70..][..70]);
                let got = f64::from(ys[(r * 3 + h) * 9 + k]);
                assert!((got - want).abs() <= 1e-6 * want.abs().max(1e-3), "({r}, {h}, {k}): {got} vs {want}");
            }
        }
    }
}

#[test]
fn a_chunk_attends_as_its_rows_do_one_at_a_time() {
    // 6 rows at positions 10..16 over a ring of 8 slots with a window of 8: each row reads the
    // cache before the chunk (wrapping the ring) and the chunk's own earlier rows. Row by row,
    // the same row reads the same positions from a cache holding the earlier rows.
    let (n, h, g, dk, dv, slots) = (6, 4, 2, 5, 3, 8);
    let (q, k, v) = (noise(&[n, h, dk], 6), noise(&[slots, g, dk], 7), noise(&[slots, g, dv], 8));
    let (kn, vn) = (noise(&[n, g, dk], 9), noise(&[n, g, dv], 10));
    let pos = Tensor::i32([n], (10..16).collect());
    let op = Op::Attend { scale: 0.4, window: Some(8) };
    let chunk = run1(op.clone(), &[&q, &k, &v, &pos, &kn, &vn]);
    let (mut kc, mut vc) = (k.as_f32().unwrap().to_vec(), v.as_f32().unwrap().to_vec());
    for r in 0..n {
        let slot = (10 + r) % slots;
        kc[slot * g * dk..][..g * dk].copy_from_slice(&kn.as_f32().unwrap()[r * g * dk..][..g * dk]);
        vc[slot * g * dv..][..g * dv].copy_from_slice(&vn.as_f32().unwrap()[r * g * dv..][..g * dv]);
        let (kt, vt) = (Tensor::f32([slots, g, dk], kc.clone()), Tensor::f32([slots, g, dv], vc.clone()));
        let alone = run1(op.clone(), &[&rows(&q, r), &kt, &vt, &Tensor::scalar_i32(10 + r as i32)]);
        // The same positions and weights; the f64 sums may group differently (cache runs).
        let want = &chunk.as_f32().unwrap()[r * h * dv..(r + 1) * h * dv];
        for (a, b) in alone.as_f32().unwrap().iter().zip(want) {
            assert!((a - b).abs() <= 1e-6 * b.abs().max(1e-3), "row {r}: {a} vs {b}");
        }
    }
}

/// Bindings that hold the weight `W` only as Q8_0 blocks: `tensor("W")` is unbound, so a
/// `linear` that evaluates at all read the blocks in place.
struct BlocksOnly {
    dense: std::collections::BTreeMap<String, Tensor>,
    w: rdu_spatial::q8::Q8Weight,
}

impl crate::graph::Bindings for BlocksOnly {
    fn tensor(&self, name: &str) -> Option<std::sync::Arc<Tensor>> {
        self.dense.get(name).cloned().map(std::sync::Arc::new)
    }
    fn q8(&self, name: &str) -> Option<&rdu_spatial::q8::Q8Weight> {
        (name == "W").then_some(&self.w)
    }
}

/// A `linear` whose weight is bound as Q8_0 blocks gives, bit for bit, what it gives over the
/// blocks' exact values as an f32 tensor — few rows (the direct sums) and many (the `gemm`
/// path), across blocks of weight rows — without the f32 tensor ever being asked for.
#[test]
fn linear_over_q8_blocks_is_linear_over_their_values() {
    use crate::graph::{eval, Declaration, Graph, Type};
    use crate::lang::ast::{DeclKind, Span};
    let (o, k) = (70, 96);
    let w = rdu_spatial::q8::quantize_q8_0(noise(&[o, k], 11).as_f32().unwrap(), &[o, k]).unwrap();
    let values: Vec<f32> = w.blocks.iter().flat_map(|b| b.dequantize()).collect();
    for n in [1, 3, 37] {
        let mut g = Graph::new();
        let x = g.declare("x", Type::f32(&[n, k]), Declaration::of(DeclKind::Input));
        let wv = g.declare("W", Type::f32(&[o, k]), Declaration::of(DeclKind::Weight));
        let b = g.declare("b", Type::f32(&[o]), Declaration::of(DeclKind::Weight));
        let y = g.push(Op::Linear, &[x, wv, b], &["y"], 0, Span::default()).unwrap()[0];
        g.output("y", y);
        let dense: std::collections::BTreeMap<String, Tensor> =
            [("x".to_string(), noise(&[n, k], 12)), ("b".to_string(), noise(&[o], 13))].into();
        let mut whole = dense.clone();
        whole.insert("W".into(), Tensor::f32(vec![o, k], values.clone()));
        let want = eval(&g, &whole).unwrap().outputs["y"].clone();
        let got = eval(&g, &BlocksOnly { dense, w: w.clone() }).unwrap().outputs["y"].clone();
        assert_eq!(got, want, "{n} rows");
    }
}
