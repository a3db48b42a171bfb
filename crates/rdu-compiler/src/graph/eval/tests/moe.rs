//! Routing and experts, including that `experts` fetches only the experts it uses.

use super::{assert_close, f, i, run};
use crate::graph::eval::moe::Rule;
use crate::graph::{eval, Act, Bindings, Declaration, Graph, GroupScore, Op, Score, Tensor, Type};
use crate::lang::ast::{DeclKind, Span};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

fn logits(p: &[f32]) -> Tensor {
    f(&[1, p.len()], &p.iter().map(|v| v.ln()).collect::<Vec<_>>())
}

fn route(k: usize, norm: bool, scale: f64, groups: usize, topk_groups: usize) -> Op {
    Op::Route { k, norm, scale, groups, topk_groups, score: Score::Softmax, group_score: GroupScore::Max }
}

/// DeepSeek-V3's routing: sigmoid scores, a selection bias, groups scored by their two best.
fn noaux(k: usize, norm: bool, scale: f64, groups: usize, topk_groups: usize) -> Op {
    Op::Route { k, norm, scale, groups, topk_groups, score: Score::Sigmoid, group_score: GroupScore::Top2 }
}

/// The attributes of a `route` op.
fn rule(op: &Op) -> Rule {
    let Op::Route { k, norm, scale, groups, topk_groups, score, group_score } = *op else { panic!("not a route") };
    Rule { k, norm, scale, groups, topk_groups, score, group_score }
}

/// The reference's softmax route of `l` with another engine's choice `tie`.
fn reference_route(
    l: &Tensor,
    k: usize,
    norm: bool,
    scale: f64,
    groups: usize,
    topk_groups: usize,
    tie: Option<(&[i32], f64)>,
) -> Result<Vec<Tensor>, String> {
    let rule = rule(&route(k, norm, scale, groups, topk_groups));
    crate::graph::eval::moe::route(l, None, &rule, tie)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn a_selection_bias_chooses_the_experts_but_the_unbiased_scores_weigh_them() {
    // s = sigmoid([0, 1, 2, 3]); the bias lifts expert 0 above the rest: chosen [0, 3].
    let l = f(&[1, 4], &[0., 1., 2., 3.]);
    let bias = f(&[4], &[2., 0., 0., 0.]);
    let outs = run(noaux(2, true, 2.5, 1, 1), &[&l, &bias]);
    assert_eq!(outs[1], i(&[1, 2], &[0, 3]));
    let (s0, s3) = (sigmoid(0.), sigmoid(3.));
    assert_close(&outs[0], &[1, 2], &[(2.5 * s0 / (s0 + s3)) as f32, (2.5 * s3 / (s0 + s3)) as f32]);
    // Without the bias, the two largest scores; unnormalised, only scaled.
    let plain = run(noaux(2, false, 2.5, 1, 1), &[&l]);
    assert_eq!(plain[1], i(&[1, 2], &[3, 2]));
    assert_close(&plain[0], &[1, 2], &[(2.5 * s3) as f32, (2.5 * sigmoid(2.)) as f32]);
}

#[test]
fn a_group_is_scored_by_the_sum_of_its_two_best_biased_scores() {
    // Groups {0, 1} and {2, 3}: group 0 holds the single best expert (max wins it), group 1
    // the better pair (top-2 sum wins it).
    let l = f(&[1, 4], &[3., -3., 1.5, 1.5]);
    let zero = f(&[4], &[0.; 4]);
    assert_eq!(run(noaux(1, false, 1.0, 2, 1), &[&l, &zero])[1], i(&[1, 1], &[2]));
    let max = Op::Route {
        k: 1,
        norm: false,
        scale: 1.0,
        groups: 2,
        topk_groups: 1,
        score: Score::Sigmoid,
        group_score: GroupScore::Max,
    };
    assert_eq!(run(max, &[&l, &zero])[1], i(&[1, 1], &[0]));
    // The bias counts in the group's score: lifting expert 1 by 0.7 gives group 0 the better
    // pair (0.95 + 0.75 against 0.82 + 0.82), whose best is still expert 0.
    let lift = f(&[4], &[0., 0.7, 0., 0.]);
    assert_eq!(run(noaux(1, false, 1.0, 2, 1), &[&l, &lift])[1], i(&[1, 1], &[0]));
}

#[test]
fn an_unkept_group_never_supplies_an_expert_even_when_every_kept_score_is_negative() {
    // Biased scores [-0.4, -0.4 | -0.1, -0.2]: group 1 is kept, every score in it below 0;
    // group 0's experts must not be taken as if masked to 0 (transformers 5 and llama.cpp mask
    // them to -inf).
    let l = f(&[1, 4], &[0., 0., 0., 0.]);
    let bias = f(&[4], &[-0.9, -0.9, -0.6, -0.7]);
    assert_eq!(run(noaux(2, false, 1.0, 2, 1), &[&l, &bias])[1], i(&[1, 2], &[2, 3]));
}

/// A near-tie in the biased scores: the other engine's choice is taken within the band, its
/// weights the unbiased scores of what it chose.
#[test]
fn a_near_tie_of_biased_scores_takes_the_other_engines_choice() {
    let l = f(&[1, 3], &[0., 0., 1.]);
    let bias = f(&[3], &[0.5, 0.5 - 1e-7, 0.]);
    let rule = rule(&noaux(1, true, 1.0, 1, 1));
    let own = crate::graph::eval::moe::route(&l, Some(&bias), &rule, None).expect("routes");
    assert_eq!(own[1], i(&[1, 1], &[0]));
    let near = crate::graph::eval::moe::route(&l, Some(&bias), &rule, Some((&[1], 1e-4))).expect("routes");
    assert_eq!(near[1], i(&[1, 1], &[1]));
    let far = crate::graph::eval::moe::route(&l, Some(&bias), &rule, Some((&[2], 1e-4))).expect("routes");
    assert_eq!(far[1], own[1], "expert 2's biased score is 0.23 below");
}

#[test]
fn route_takes_the_top_k_of_the_softmax_descending() {
    // p = [1, 2, 3, 4] / 10.
    let l = logits(&[1., 2., 3., 4.]);
    let outs = run(route(2, false, 1.0, 1, 1), &[&l]);
    assert_close(&outs[0], &[1, 2], &[0.4, 0.3]);
    assert_eq!(outs[1], i(&[1, 2], &[3, 2]));
    // Renormalised then scaled: [4/7, 3/7] · 2.
    let outs = run(route(2, true, 2.0, 1, 1), &[&l]);
    assert_close(&outs[0], &[1, 2], &[8. / 7., 6. / 7.]);
}

#[test]
fn route_breaks_ties_toward_the_lower_index() {
    let l = f(&[2, 4], &[1., 1., 0., 1., 0., 2., 2., 0.]);
    let outs = run(route(3, false, 1.0, 1, 1), &[&l]);
    assert_eq!(outs[1], i(&[2, 3], &[0, 1, 3, 1, 2, 0]));
}

#[test]
fn route_with_groups_keeps_the_best_groups_only() {
    // p ∝ [1, 5, 3, 3]: group 0 = {1, 5} (max 5) beats group 1 = {3, 3} (max 3).
    let l = logits(&[1., 5., 3., 3.]);
    let plain = run(route(2, false, 1.0, 1, 1), &[&l]);
    assert_eq!(plain[1], i(&[1, 2], &[1, 2]));
    let grouped = run(route(2, false, 1.0, 2, 1), &[&l]);
    assert_eq!(grouped[1], i(&[1, 2], &[1, 0]));
    assert_close(&grouped[0], &[1, 2], &[5. / 12., 1. / 12.]);
    // Both groups kept: the same as no grouping.
    assert_eq!(run(route(2, false, 1.0, 2, 2), &[&l])[1], plain[1]);
    // Groups tied on their maximum: the lower group wins.
    let tied = logits(&[4., 1., 1., 4.]);
    assert_eq!(run(route(2, false, 1.0, 2, 1), &[&tied])[1], i(&[1, 2], &[0, 1]));
}

/// Another engine's choice of experts is taken for a row exactly when it is a near-tie (each
/// chosen expert's `p` within the band of the reference's `k`-th, its group within the band of
/// the last group kept), its weights from the same probabilities; otherwise the reference's
/// own choice stands.
#[test]
fn route_takes_another_engines_choice_only_at_a_near_tie() {
    // p ∝ [0.25, 0.25 + 1e-6, 0.3, 0.2 − 1e-6]: the top 2 are [2, 1]; [2, 0] is a near-tie.
    let l = logits(&[0.25, 0.25 + 1e-6, 0.3, 0.2 - 1e-6]);
    let own = reference_route(&l, 2, true, 1.0, 1, 1, None).expect("routes");
    assert_eq!(own[1], i(&[1, 2], &[2, 1]));
    let near = reference_route(&l, 2, true, 1.0, 1, 1, Some((&[2, 0], 1e-4))).expect("routes");
    assert_eq!(near[1], i(&[1, 2], &[2, 0]));
    assert_close(&near[0], &[1, 2], &[0.3 / 0.55, 0.25 / 0.55]);
    // The same set in another order is taken too (it fixes the order the experts are summed in).
    let order = reference_route(&l, 2, true, 1.0, 1, 1, Some((&[1, 2], 1e-4))).expect("routes");
    assert_eq!(order[1], i(&[1, 2], &[1, 2]));
    // Expert 3 is 0.05 below: not a tie, and neither is anything with a band of zero.
    for (other, band) in [([2, 3], 1e-4), ([2, 0], 0.0), ([2, 2], 1e-4), ([2, 9], 1e-4), ([2, -1], 1e-4)] {
        let got = reference_route(&l, 2, true, 1.0, 1, 1, Some((&other, band))).expect("routes");
        assert_eq!(got[1], own[1], "{other:?} band {band}");
    }
    // Groups {0, 1} and {2, 3}, one kept: group 1 (max 0.3) wins; expert 1 of group 0 is in a
    // group 0.05 below the kept one, so choosing it is no tie.
    let grouped = reference_route(&l, 1, false, 1.0, 2, 1, Some((&[1], 1e-4))).expect("routes");
    assert_eq!(grouped[1], i(&[1, 1], &[2]));
    // Groups {0, 1} (max 0.25 + 1e-6) and {2, 3} with p ∝ [.., .., 0.25, 0.2]: a near-tie of groups.
    let l2 = logits(&[0.3, 0.25 + 1e-6, 0.25, 0.2]);
    let g2 = reference_route(&l2, 1, false, 1.0, 2, 1, None).expect("routes");
    assert_eq!(g2[1], i(&[1, 1], &[0]));
    let g2 = reference_route(&logits(&[0.25, 0.2, 0.25 + 1e-6, 0.3 - 1e-6]), 1, false, 1.0, 2, 1, Some((&[0], 1e-4)));
    assert_eq!(g2.expect("routes")[1], i(&[1, 1], &[3]), "expert 0's p is 0.05 below the k-th: no tie");
}

/// Bindings over a map that count every fetch.
struct Counting {
    inner: BTreeMap<String, Tensor>,
    whole: RefCell<Vec<String>>,
    rows: RefCell<Vec<(String, usize)>>,
}

impl Bindings for Counting {
    fn tensor(&self, name: &str) -> Option<Arc<Tensor>> {
        self.whole.borrow_mut().push(name.to_string());
        self.inner.tensor(name)
    }
    fn slice0(&self, name: &str, index: usize) -> Option<Arc<Tensor>> {
        self.rows.borrow_mut().push((name.to_string(), index));
        self.inner.slice0(name, index)
    }
}

/// experts over E = 4, D = 2, I = 1 with Wg[e] = [e+1, 0], Wu[e] = [0, 1], Wd[e] = [[1], [e]].
fn experts_case(act: Act) -> (Graph, Counting) {
    let tensors = [
        ("x", f(&[1, 2], &[1., 2.])),
        ("w", f(&[1, 2], &[0.5, 0.25])),
        ("idx", i(&[1, 2], &[2, 0])),
        ("Wg", Tensor::from_fn(&[4, 1, 2], |k| if k % 2 == 0 { (k / 2 + 1) as f32 } else { 0. })),
        ("Wu", Tensor::from_fn(&[4, 1, 2], |k| (k % 2) as f32)),
        ("Wd", Tensor::from_fn(&[4, 2, 1], |k| if k % 2 == 0 { 1. } else { (k / 2) as f32 })),
    ];
    let mut g = Graph::new();
    let mut ids = Vec::new();
    for (name, t) in &tensors {
        let kind = if name.starts_with('W') { DeclKind::Weight } else { DeclKind::Input };
        ids.push(g.declare(name, Type::new(t.dtype(), t.shape()), Declaration::of(kind)));
    }
    let y = g.push(Op::Experts { act, limit: None }, &ids, &["y"], 0, Span::default()).unwrap()[0];
    g.output("y", y);
    let inner = tensors.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    (g, Counting { inner, whole: RefCell::new(Vec::new()), rows: RefCell::new(Vec::new()) })
}

#[test]
fn experts_sum_the_chosen_experts_weighted() {
    // Expert e: gate = e + 1, up = 2, h = act(e + 1)·2, y = [h, e·h].
    // Row 0 chose experts 2 (w 0.5) and 0 (w 0.25).
    let silu = |v: f32| v / (1.0 + (-v).exp());
    let (h2, h0) = (silu(3.) * 2., silu(1.) * 2.);
    let (g, env) = experts_case(Act::Silu);
    let y = &eval(&g, &env).unwrap().outputs["y"];
    assert_close(y, &[1, 2], &[0.5 * h2 + 0.25 * h0, h2]);

    let gelu = |v: f32| 0.5 * v * (1. + ((2. / std::f32::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh());
    let (h2, h0) = (gelu(3.) * 2., gelu(1.) * 2.);
    let (g, env) = experts_case(Act::GeluTanh);
    let y = &eval(&g, &env).unwrap().outputs["y"];
    assert_close(y, &[1, 2], &[0.5 * h2 + 0.25 * h0, h2]);
}

#[test]
fn experts_fetch_only_the_selected_experts() {
    let (g, env) = experts_case(Act::Silu);
    eval(&g, &env).unwrap();
    let whole = env.whole.borrow();
    assert_eq!(*whole, vec!["x".to_string(), "w".to_string(), "idx".to_string()]);
    let mut rows = env.rows.borrow().clone();
    rows.sort();
    let want: Vec<(String, usize)> =
        ["Wd", "Wg", "Wu"].iter().flat_map(|w| [(w.to_string(), 0), (w.to_string(), 2)]).collect();
    assert_eq!(rows, want);
}

#[test]
fn experts_reject_an_index_out_of_range() {
    let (g, mut env) = experts_case(Act::Silu);
    env.inner.insert("idx".into(), i(&[1, 2], &[4, 0]));
    let err = eval(&g, &env).unwrap_err();
    assert!(err.message.contains("expert 4, outside the 4 experts"), "{err}");
}

/// Stacked expert weights bound only as Q8_0 blocks, one expert at a time (`slice0_q8`):
/// neither the whole weights nor an expert's values are bound, so `experts` evaluates at all
/// only by reading the blocks in place.
struct ExpertBlocks {
    inner: BTreeMap<String, Tensor>,
    stacked: BTreeMap<String, rdu_spatial::q8::Q8Weight>,
}

impl Bindings for ExpertBlocks {
    fn tensor(&self, name: &str) -> Option<Arc<Tensor>> {
        self.inner.tensor(name)
    }
    fn slice0(&self, name: &str, index: usize) -> Option<Arc<Tensor>> {
        self.inner.slice0(name, index)
    }
    fn slice0_q8(&self, name: &str, index: usize) -> Option<rdu_spatial::q8::Q8Weight> {
        let w = self.stacked.get(name)?;
        let per = w.blocks.len() / w.shape[0];
        Some(rdu_spatial::q8::Q8Weight {
            shape: w.shape[1..].to_vec(),
            blocks: w.blocks[index * per..][..per].to_vec(),
        })
    }
}

/// `experts` over Q8_0 expert blocks gives, bit for bit, what it gives over their exact values
/// as f32 tensors (E = 4, D = 64, I = 96, 7 rows choosing 2 experts each).
#[test]
fn experts_over_q8_blocks_are_experts_over_their_values() {
    let (e, d, hidden, n, k) = (4, 64, 96, 7, 2);
    let noise = |len: usize, seed: u32| -> Vec<f32> {
        (0..len)
            .map(|j| ((j as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / (1 << 24) as f32 - 0.5)
            .collect()
    };
    let stacked = |name: &str, shape: [usize; 3], seed| {
        let values = noise(shape.iter().product(), seed);
        (name.to_string(), rdu_spatial::q8::quantize_q8_0(&values, &shape).unwrap())
    };
    let q8: BTreeMap<String, rdu_spatial::q8::Q8Weight> =
        [stacked("Wg", [e, hidden, d], 1), stacked("Wu", [e, hidden, d], 2), stacked("Wd", [e, d, hidden], 3)].into();
    let inputs = [
        ("x", f(&[n, d], &noise(n * d, 4))),
        ("w", f(&[n, k], &noise(n * k, 5))),
        ("idx", i(&[n, k], &(0..n * k).map(|j| ((j * 3 + j / 2) % e) as i32).collect::<Vec<_>>())),
    ];
    let mut g = Graph::new();
    let mut ids = Vec::new();
    for (name, t) in &inputs {
        ids.push(g.declare(name, Type::new(t.dtype(), t.shape()), Declaration::of(DeclKind::Input)));
    }
    for name in ["Wg", "Wu", "Wd"] {
        ids.push(g.declare(name, Type::f32(&q8[name].shape), Declaration::of(DeclKind::Weight)));
    }
    let y = g.push(Op::Experts { act: Act::Silu, limit: None }, &ids, &["y"], 0, Span::default()).unwrap()[0];
    g.output("y", y);
    let inner: BTreeMap<String, Tensor> = inputs.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    let mut whole = inner.clone();
    for (name, w) in &q8 {
        let values: Vec<f32> = w.blocks.iter().flat_map(|b| b.dequantize()).collect();
        whole.insert(name.clone(), Tensor::f32(w.shape.clone(), values));
    }
    let want = eval(&g, &whole).unwrap().outputs["y"].clone();
    let got = eval(&g, &ExpertBlocks { inner, stacked: q8 }).unwrap().outputs["y"].clone();
    assert_eq!(got, want);
}

/// gpt-oss's experts: biased gate and up, the gate capped at the limit, the up clamped to ±limit,
/// `(up + 1) · gate σ(1.702 gate)` (E = 2, D = 1, I = 2: expert e's gate is `x·gw[e] + bg[e]`).
#[test]
fn swiglu_oai_experts_clamp_the_biased_gate_and_up() {
    let limit = 1.0f64;
    let tensors = [
        ("x", f(&[1, 1], &[2.])),
        ("w", f(&[1, 2], &[0.75, 0.25])),
        ("idx", i(&[1, 2], &[1, 0])),
        ("Wg", f(&[2, 2, 1], &[0.1, 0.3, 1.0, -0.5])),
        ("Wu", f(&[2, 2, 1], &[0.2, -2.0, 0.25, 0.4])),
        ("Wd", f(&[2, 1, 2], &[1., 2., -1., 0.5])),
        ("bg", f(&[2, 2], &[0.1, 0., 0.5, 0.2])),
        ("bu", f(&[2, 2], &[0., 0.1, -0.3, 0.])),
    ];
    let mut g = Graph::new();
    let mut ids = Vec::new();
    for (name, t) in &tensors {
        ids.push(g.declare(name, Type::new(t.dtype(), t.shape()), Declaration::of(DeclKind::Input)));
    }
    let op = Op::Experts { act: Act::SwigluOai, limit: Some(limit) };
    let y = g.push(op, &ids, &["y"], 0, Span::default()).unwrap()[0];
    g.output("y", y);
    let env: BTreeMap<String, Tensor> = tensors.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    let unit = |g: f64, u: f64| {
        let g = g.min(limit);
        (u.clamp(-limit, limit) + 1.0) * g / (1.0 + (-1.702 * g).exp())
    };
    // Expert 0: gates [0.3, 0.6], ups [0.4, -3.9 → −1]; expert 1: gates [2.5 → 1, −0.8], ups [0.2, 0.8].
    let h0 = [unit(0.3, 0.4), unit(0.6, -3.9)];
    let h1 = [unit(2.5, 0.2), unit(-0.8, 0.8)];
    let y0 = h0[0] + 2. * h0[1];
    let y1 = -h1[0] + 0.5 * h1[1];
    let got = &eval(&g, &env).unwrap().outputs["y"];
    assert_close(got, &[1, 1], &[(0.75 * y1 + 0.25 * y0) as f32]);
}
