//! `route` and `experts`, including that `experts` reads only the experts it selects.

use crate::common;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Mutex;

use common::*;
use rdu_spatial::q8::Q8Weight;
use rdu_spatial::{MapBindings, SimBindings, SimTensor, WeightSlab};

#[test]
fn route_takes_top_k_of_the_softmax_with_ties_to_the_lower_index() {
    let l = f(&[1, 4], &[1.0, 3.0, 3.0, 0.0]);
    let b = MapBindings::new().with("l", l);
    let r = run(
        &b,
        "w, x = route(l, k=2, norm=0, scale=1.0)\nu, y = route(l, k=2, norm=1, scale=2.0)",
        &["w", "x", "u", "y"],
    );
    let r = r.unwrap();
    let e = [1f32.exp(), 3f32.exp(), 3f32.exp(), 1.0];
    let tot: f32 = e.iter().sum();
    assert_eq!(r.outputs["x"].as_i32().unwrap(), [1, 2]);
    close(&out(&r, "w"), &[e[1] / tot, e[2] / tot], 1e-7, 1e-6);
    assert_eq!(r.outputs["y"].as_i32().unwrap(), [1, 2]);
    close(&out(&r, "u"), &[1.0, 1.0], 1e-7, 1e-6);
}

#[test]
fn route_keeps_the_best_groups_before_the_top_k() {
    // 4 groups of 2; group maxima by logits: g0 = 5, g1 = 4.9, g2 = 6, g3 = 1. Keep 2 groups: g2, g0.
    let l = f(&[1, 8], &[5.0, 4.95, 4.9, 4.9, 6.0, 0.0, 1.0, 1.0]);
    let b = MapBindings::new().with("l", l);
    let r = run(&b, "w, x = route(l, k=3, norm=0, scale=1.0, groups=4, topk_groups=2)", &["w", "x"]).unwrap();
    assert_eq!(r.outputs["x"].as_i32().unwrap(), [4, 0, 1]);
}

#[test]
fn route_chooses_by_the_biased_sigmoid_scores_and_weighs_by_the_unbiased_ones() {
    let l = f(&[1, 4], &[0.0, 1.0, 2.0, 3.0]);
    let bias = f(&[4], &[2.0, 0.0, 0.0, 0.0]);
    let b = MapBindings::new().with("l", l).with("br", bias);
    let text = "w, x = route(l, br, k=2, norm=1, scale=2.5, groups=1, topk_groups=1, score=sigmoid)";
    let r = run(&b, text, &["w", "x"]).unwrap();
    assert_eq!(r.outputs["x"].as_i32().unwrap(), [0, 3]);
    let s = |v: f32| 1.0 / (1.0 + (-v).exp());
    let (s0, s3) = (s(0.0), s(3.0));
    close(&out(&r, "w"), &[2.5 * s0 / (s0 + s3), 2.5 * s3 / (s0 + s3)], 1e-7, 1e-6);
}

#[test]
fn route_scores_a_group_by_its_two_best_and_never_takes_an_unkept_group() {
    // Groups {0, 1} and {2, 3}: group 0 holds the best expert, group 1 the best pair.
    let l = f(&[1, 4], &[3.0, -3.0, 1.5, 1.5]);
    let zero = f(&[4], &[0.0; 4]);
    let b = MapBindings::new().with("l", l).with("z", zero);
    let top2 = "w, x = route(l, z, k=1, norm=0, scale=1.0, groups=2, topk_groups=1, score=sigmoid, group_score=top2)";
    assert_eq!(run(&b, top2, &["w", "x"]).unwrap().outputs["x"].as_i32().unwrap(), [2]);
    let max = "w, x = route(l, z, k=1, norm=0, scale=1.0, groups=2, topk_groups=1, score=sigmoid)";
    assert_eq!(run(&b, max, &["w", "x"]).unwrap().outputs["x"].as_i32().unwrap(), [0]);
    // Biased scores [-0.4, -0.4 | -0.1, -0.2]: the kept group's experts, all below 0.
    let l = f(&[1, 4], &[0.0; 4]);
    let bias = f(&[4], &[-0.9, -0.9, -0.6, -0.7]);
    let b = MapBindings::new().with("l", l).with("br", bias);
    let text = "w, x = route(l, br, k=2, norm=0, scale=1.0, groups=2, topk_groups=1, score=sigmoid, group_score=top2)";
    assert_eq!(run(&b, text, &["w", "x"]).unwrap().outputs["x"].as_i32().unwrap(), [2, 3]);
}

#[test]
fn route_refuses_a_bias_of_another_width_and_unknown_words() {
    let l = f(&[1, 4], &[0.0; 4]);
    let b = MapBindings::new().with("l", l).with("br", f(&[3], &[0.0; 3]));
    let err = run(&b, "w, x = route(l, br, k=2, norm=0, scale=1.0, score=sigmoid)", &["w", "x"]).unwrap_err();
    assert!(err.to_string().contains("bias [4]"), "{err}");
    let err = run(&b, "w, x = route(l, k=2, norm=0, scale=1.0, score=tanh)", &["w", "x"]).unwrap_err();
    assert!(err.to_string().contains("`score` must be softmax or sigmoid"), "{err}");
}

/// Bindings that count how often each expert of each stacked weight is read.
struct Counting {
    inner: MapBindings,
    reads: Mutex<BTreeMap<(String, usize), usize>>,
    whole: Mutex<Vec<String>>,
}

impl SimBindings for Counting {
    fn tensor(&self, name: &str) -> Option<Cow<'_, SimTensor>> {
        self.whole.lock().expect("not poisoned").push(name.to_string());
        self.inner.tensor(name)
    }
    fn q8(&self, name: &str) -> Option<Cow<'_, Q8Weight>> {
        self.whole.lock().expect("not poisoned").push(name.to_string());
        self.inner.q8(name)
    }
    fn expert(&self, name: &str, expert: usize) -> Option<WeightSlab<'_>> {
        *self.reads.lock().expect("not poisoned").entry((name.to_string(), expert)).or_default() += 1;
        let w = self.inner.q8.get(name)?;
        let per = w.blocks.len() / w.shape[0];
        Some(WeightSlab::Q8(Cow::Borrowed(&w.blocks[expert * per..(expert + 1) * per])))
    }
}

#[test]
fn experts_reads_only_the_selected_experts_once_each_and_folds_q8() {
    let (e, hid, d) = (6, 32, 64);
    let (wg, wu, wd) = (q8(&[e, hid, d], 1), q8(&[e, hid, d], 2), q8(&[e, d, hid], 3));
    let inner = MapBindings::new()
        .with("x", rt(&[2, d], 4))
        .with("w", f(&[2, 2], &[0.7, 0.3, 0.6, 0.4]))
        .with("idx", i(&[2, 2], &[4, 1, 1, 4]))
        .with_q8("Wg", wg.clone())
        .with_q8("Wu", wu.clone())
        .with_q8("Wd", wd.clone());
    let ops = "y = experts(x, w, idx, Wg, Wu, Wd, act=silu) fold=q8";
    let prog = program(&inner, ops, &["y"]);
    let counting = Counting { inner: inner.clone(), reads: Mutex::default(), whole: Mutex::default() };
    let got = rdu_spatial::simulate(&prog, &counting).unwrap();
    let reads = counting.reads.lock().expect("not poisoned");
    let touched: Vec<(String, usize)> = reads.keys().cloned().collect();
    let want: Vec<(String, usize)> =
        ["Wd", "Wg", "Wu"].iter().flat_map(|n| [(n.to_string(), 1), (n.to_string(), 4)]).collect();
    assert_eq!(touched, want);
    assert!(reads.values().all(|&c| c == 1), "{reads:?}");
    let whole = counting.whole.lock().expect("not poisoned");
    assert!(!whole.iter().any(|n| n.starts_with('W')), "{whole:?}");

    // Against dense stacked weights and a naive sum.
    let dense = MapBindings::new()
        .with("x", inner.tensors["x"].clone())
        .with("w", inner.tensors["w"].clone())
        .with("idx", inner.tensors["idx"].clone())
        .with("Wg", f(&[e, hid, d], &wg.dequantize()))
        .with("Wu", f(&[e, hid, d], &wu.dequantize()))
        .with("Wd", f(&[e, d, hid], &wd.dequantize()));
    let want = out(&run(&dense, "y = experts(x, w, idx, Wg, Wu, Wd, act=silu)", &["y"]).unwrap(), "y");
    close_scaled(&out(&got, "y"), &want, 1e-5);
    let (x, g, u, dn) = (dense.tensors["x"].as_f32().unwrap(), wg.dequantize(), wu.dequantize(), wd.dequantize());
    let naive = |r: usize, ex: usize| -> Vec<f32> {
        let xr = &x[r * d..(r + 1) * d];
        let h: Vec<f32> = (0..hid)
            .map(|i| {
                let a: f32 = (0..d).map(|c| g[(ex * hid + i) * d + c] * xr[c]).sum();
                let b: f32 = (0..d).map(|c| u[(ex * hid + i) * d + c] * xr[c]).sum();
                a / (1.0 + (-a).exp()) * b
            })
            .collect();
        (0..d).map(|j| (0..hid).map(|i| dn[(ex * d + j) * hid + i] * h[i]).sum()).collect()
    };
    let mut expect = Vec::new();
    for (r, (ea, eb), (wa, wb)) in [(0, (4, 1), (0.7, 0.3)), (1, (1, 4), (0.6, 0.4))] {
        let (a, b) = (naive(r, ea), naive(r, eb));
        expect.extend(a.iter().zip(&b).map(|(p, q)| wa * p + wb * q));
    }
    close_scaled(&want, &expect, 1e-5);
}

#[test]
fn experts_rejects_an_index_beyond_the_experts() {
    let b = MapBindings::new()
        .with("x", rt(&[1, 4], 1))
        .with("w", f(&[1, 1], &[1.0]))
        .with("idx", i(&[1, 1], &[3]))
        .with("Wg", rt(&[3, 2, 4], 2))
        .with("Wu", rt(&[3, 2, 4], 3))
        .with("Wd", rt(&[3, 4, 2], 4));
    let e = run(&b, "y = experts(x, w, idx, Wg, Wu, Wd, act=silu)", &["y"]).unwrap_err().to_string();
    assert!(e.contains("expert index 3 is out of range for 3 experts"), "{e}");
}

/// gpt-oss's experts (`act=swiglu_oai limit=L` with the gate and up biases `bg`, `bu`) against a
/// naive model: the biased gate capped at L, the biased up clamped to ±L, `(up + 1)·g σ(1.702 g)`;
/// the limit low enough that both clamps act on these values.
#[test]
fn swiglu_oai_experts_clamp_the_biased_gate_and_up_as_gpt_oss_does() {
    let (e, hid, d, limit) = (4, 8, 16, 0.5f32);
    let (wg, wu, wd) = (rt(&[e, hid, d], 41), rt(&[e, hid, d], 42), rt(&[e, d, hid], 43));
    let (bg, bu) = (rt(&[e, hid], 44), rt(&[e, hid], 45));
    let x = rt(&[2, d], 46);
    let b = MapBindings::new()
        .with("x", x.clone())
        .with("w", f(&[2, 2], &[0.7, 0.3, 0.6, 0.4]))
        .with("idx", i(&[2, 2], &[3, 0, 0, 2]))
        .with("Wg", wg.clone())
        .with("Wu", wu.clone())
        .with("Wd", wd.clone())
        .with("bg", bg.clone())
        .with("bu", bu.clone());
    let r = run(&b, "y = experts(x, w, idx, Wg, Wu, Wd, bg, bu, act=swiglu_oai, limit=0.5)", &["y"]).unwrap();
    let (xd, g, u, dn) = (x.as_f32().unwrap(), wg.as_f32().unwrap(), wu.as_f32().unwrap(), wd.as_f32().unwrap());
    let (bgd, bud) = (bg.as_f32().unwrap(), bu.as_f32().unwrap());
    let (mut capped, mut clamped) = (0, 0);
    let mut naive = |row: usize, ex: usize| -> Vec<f64> {
        let xr = &xd[row * d..(row + 1) * d];
        let h: Vec<f64> = (0..hid)
            .map(|i| {
                let dot = |w: &[f32]| (0..d).map(|c| w[(ex * hid + i) * d + c] as f64 * xr[c] as f64).sum::<f64>();
                let (gate, up) = (dot(g) + bgd[ex * hid + i] as f64, dot(u) + bud[ex * hid + i] as f64);
                capped += usize::from(gate > limit as f64);
                clamped += usize::from(up.abs() > limit as f64);
                let gate = gate.min(limit as f64);
                (up.clamp(-(limit as f64), limit as f64) + 1.0) * gate / (1.0 + (-1.702 * gate).exp())
            })
            .collect();
        (0..d).map(|j| (0..hid).map(|i| dn[(ex * d + j) * hid + i] as f64 * h[i]).sum()).collect()
    };
    let mut want = Vec::new();
    for (row, (ea, eb), (wa, wb)) in [(0, (3, 0), (0.7, 0.3)), (1, (0, 2), (0.6, 0.4))] {
        let (a, b) = (naive(row, ea), naive(row, eb));
        want.extend(a.iter().zip(&b).map(|(p, q)| (wa * p + wb * q) as f32));
    }
    assert!(capped > 0 && clamped > 0, "the clamps act: {capped} gates capped, {clamped} ups clamped");
    close_scaled(&out(&r, "y"), &want, 1e-5);
    for (ops, needle) in [
        ("y = experts(x, w, idx, Wg, Wu, Wd, act=swiglu_oai)", "needs limit"),
        ("y = experts(x, w, idx, Wg, Wu, Wd, act=silu, limit=1.0)", "swiglu_oai only"),
        ("y = experts(x, w, idx, Wg, Wu, Wd, bg, act=swiglu_oai, limit=1.0)", "6 or 8 arguments"),
    ] {
        let err = run(&b, ops, &["y"]).unwrap_err().to_string();
        assert!(err.contains(needle), "{ops}: {err}");
    }
}
