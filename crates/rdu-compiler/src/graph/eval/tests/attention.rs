//! RoPE, the cache and attention: GQA mapping, window masking, ring slots, positions.

use super::{assert_close, f, i, run1, try_run};
use crate::graph::{Op, RopeStyle, Tensor};

/// Table of 2 positions and 2 pairs: position 0 is the identity; position 1 turns pair 0
/// by 90° and leaves pair 1.
fn tables() -> (Tensor, Tensor) {
    (f(&[2, 2], &[1., 1., 0., 1.]), f(&[2, 2], &[0., 0., 1., 0.]))
}

#[test]
fn partial_neox_rope_rotates_half_pairs() {
    let (cos, sin) = tables();
    let x = f(&[1, 1, 6], &[1., 2., 3., 4., 5., 6.]);
    let op = Op::Rope { dim: 4, style: RopeStyle::Neox };
    // Pair (0, 2) by 90°: x0' = 1·0 − 3·1, x2' = 3·0 + 1·1; dims 4, 5 pass through.
    assert_close(&run1(op.clone(), &[&x, &cos, &sin, &Tensor::scalar_i32(1)]), &[1, 1, 6], &[-3., 2., 1., 4., 5., 6.]);
    assert_close(&run1(op, &[&x, &cos, &sin, &Tensor::scalar_i32(0)]), &[1, 1, 6], &[1., 2., 3., 4., 5., 6.]);
}

#[test]
fn partial_interleaved_rope_rotates_adjacent_pairs() {
    let (cos, sin) = tables();
    let x = f(&[1, 2, 6], &[1., 2., 3., 4., 5., 6., 10., 20., 30., 40., 50., 60.]);
    let op = Op::Rope { dim: 4, style: RopeStyle::Interleaved };
    // Pair (0, 1) by 90° in every head.
    let want = [-2., 1., 3., 4., 5., 6., -20., 10., 30., 40., 50., 60.];
    assert_close(&run1(op, &[&x, &cos, &sin, &Tensor::scalar_i32(1)]), &[1, 2, 6], &want);
}

#[test]
fn rope_positions_scalar_counts_up_and_vector_is_per_row() {
    // One pair: identity at position 0, 90° at position 1.
    let (cos, sin) = (f(&[2, 1], &[1., 0.]), f(&[2, 1], &[0., 1.]));
    let x = f(&[2, 1, 2], &[1., 2., 1., 2.]);
    let op = Op::Rope { dim: 2, style: RopeStyle::Neox };
    // Scalar 0: rows at positions 0 and 1.
    assert_close(&run1(op.clone(), &[&x, &cos, &sin, &Tensor::scalar_i32(0)]), &[2, 1, 2], &[1., 2., -2., 1.]);
    // Vector [1, 0].
    assert_close(&run1(op.clone(), &[&x, &cos, &sin, &i(&[2], &[1, 0])]), &[2, 1, 2], &[-2., 1., 1., 2.]);
    // Scalar 1: the second row is at position 2, past the table.
    let err = try_run(op, &[&x, &cos, &sin, &Tensor::scalar_i32(1)]).unwrap_err();
    assert!(err.message.contains("position 2"), "{err}");
}

#[test]
fn cache_put_writes_ring_slots() {
    let c = Tensor::from_fn(&[3, 1, 2], |_| -1.0);
    let x = f(&[2, 1, 2], &[1., 2., 3., 4.]);
    // Positions 4 and 5 land in slots 1 and 2.
    let put = run1(Op::CachePut, &[&c, &x, &Tensor::scalar_i32(4)]);
    assert_close(&put, &[3, 1, 2], &[-1., -1., 1., 2., 3., 4.]);
    // Positions [5, 3]: slots 2 and 0.
    let put = run1(Op::CachePut, &[&c, &x, &i(&[2], &[5, 3])]);
    assert_close(&put, &[3, 1, 2], &[3., 4., -1., -1., 1., 2.]);
}

#[test]
fn attend_maps_query_heads_to_kv_heads_in_groups() {
    // h = 4, g = 2: heads 0, 1 read kv head 0; heads 2, 3 read kv head 1. Zero queries give
    // uniform weights, so each head returns the mean value of its kv head over t = 0, 1.
    let q = Tensor::zeros([1, 4, 1]);
    let k = f(&[2, 2, 1], &[0., 0., 0., 0.]);
    let v = f(&[2, 2, 1], &[1., 10., 3., 20.]);
    let op = Op::Attend { scale: 1.0, window: None };
    assert_close(&run1(op, &[&q, &k, &v, &Tensor::scalar_i32(1)]), &[1, 4, 1], &[2., 2., 15., 15.]);
}

#[test]
fn attend_softmax_weights_the_scores() {
    // Scores 0 and ln 3 give weights 1/4 and 3/4; the scale multiplies q·k.
    let q = f(&[1, 1, 1], &[2.]);
    let k = f(&[2, 1, 1], &[0., 3f32.ln() / 4.]);
    let v = f(&[2, 1, 2], &[1., 0., 3., 8.]);
    let op = Op::Attend { scale: 2.0, window: None };
    assert_close(&run1(op, &[&q, &k, &v, &Tensor::scalar_i32(1)]), &[1, 1, 2], &[2.5, 6.]);
}

#[test]
fn a_sink_joins_the_denominator_and_attends_to_nothing() {
    // One position, score 0 (zero queries), value [4, 8]: head 0's sink ln 3 weighs the value
    // 1/(1 + 3); head 1's sink −∞-like leaves plain attention (the value itself). Sinks are not
    // scaled. Over a chunk (7 operands) and a decode step (5) alike.
    let q = Tensor::zeros([1, 2, 1]);
    let k = Tensor::zeros([1, 1, 1]);
    let v = f(&[1, 1, 2], &[4., 8.]);
    let sinks = f(&[2], &[3f32.ln(), -100.]);
    let op = Op::Attend { scale: 5.0, window: None };
    let want = [1., 2., 4., 8.];
    assert_close(&run1(op.clone(), &[&q, &k, &v, &Tensor::scalar_i32(0), &sinks]), &[1, 2, 2], &want);
    let (kn, vn) = (Tensor::zeros([1, 1, 1]), f(&[1, 1, 2], &[4., 8.]));
    // The cache's one slot holds position 0 too: the chunk's own row wins.
    let (kc, vc) = (Tensor::zeros([1, 1, 1]), Tensor::zeros([1, 1, 2]));
    let chunk = run1(op, &[&q, &kc, &vc, &Tensor::scalar_i32(0), &kn, &vn, &sinks]);
    assert_close(&chunk, &[1, 2, 2], &want);
}

#[test]
fn attend_is_causal_per_row() {
    // A forward step: S = N = 3, pos 0; row i sees positions 0..=i.
    let q = Tensor::zeros([3, 1, 1]);
    let k = Tensor::zeros([3, 1, 1]);
    let v = f(&[3, 1, 1], &[3., 6., 9.]);
    let op = Op::Attend { scale: 1.0, window: None };
    assert_close(&run1(op.clone(), &[&q, &k, &v, &Tensor::scalar_i32(0)]), &[3, 1, 1], &[3., 4.5, 6.]);
    // Per-row positions [2, 0, 1].
    assert_close(&run1(op, &[&q, &k, &v, &i(&[3], &[2, 0, 1])]), &[3, 1, 1], &[6., 3., 4.5]);
}

#[test]
fn attend_window_masks_old_positions() {
    let q = Tensor::zeros([1, 1, 1]);
    let k = Tensor::zeros([4, 1, 1]);
    let v = f(&[4, 1, 1], &[1., 2., 4., 8.]);
    // Position 3 with window 2 sees positions 2 and 3 only.
    let op = Op::Attend { scale: 1.0, window: Some(2) };
    assert_close(&run1(op, &[&q, &k, &v, &Tensor::scalar_i32(3)]), &[1, 1, 1], &[6.]);
    let op = Op::Attend { scale: 1.0, window: Some(1) };
    assert_close(&run1(op, &[&q, &k, &v, &Tensor::scalar_i32(3)]), &[1, 1, 1], &[8.]);
}

#[test]
fn attend_reads_a_ring_by_slot() {
    // A ring of 2 slots at position 5 with window 2: positions 4 and 5 sit in slots 0 and 1.
    let c = f(&[2, 1, 1], &[-100., -100.]);
    let at4 = run1(Op::CachePut, &[&c, &f(&[1, 1, 1], &[1.]), &Tensor::scalar_i32(4)]);
    let at5 = run1(Op::CachePut, &[&at4, &f(&[1, 1, 1], &[5.]), &Tensor::scalar_i32(5)]);
    assert_close(&at5, &[2, 1, 1], &[1., 5.]);
    let q = f(&[1, 1, 1], &[1.]);
    let k = f(&[2, 1, 1], &[0., 3f32.ln()]);
    let op = Op::Attend { scale: 1.0, window: Some(2) };
    assert_close(&run1(op, &[&q, &k, &at5, &Tensor::scalar_i32(5)]), &[1, 1, 1], &[0.25 + 3.75]);
}

#[test]
fn attend_refuses_more_positions_than_slots() {
    let q = Tensor::zeros([1, 1, 1]);
    let k = Tensor::zeros([2, 1, 1]);
    let err = try_run(Op::Attend { scale: 1.0, window: None }, &[&q, &k, &k, &Tensor::scalar_i32(2)]).unwrap_err();
    assert!(err.message.contains("reads positions 0..=2 from the cache but it holds 2 slots"), "{err}");
    let err = try_run(Op::Attend { scale: 1.0, window: None }, &[&q, &k, &k, &Tensor::scalar_i32(-1)]).unwrap_err();
    assert!(err.message.contains("negative position -1"), "{err}");
}

#[test]
fn attend_mla_shares_one_key_and_reads_the_latent_prefix() {
    // C [2, 2]: keys are whole rows, values their first column.
    let ln3 = 3f32.ln();
    let c = f(&[2, 2], &[0., 5., ln3, 7.]);
    // Head 0: zero query, uniform weights; head 1: scores C[t, 0] = 0, ln 3 → weights 1/4, 3/4.
    let q = f(&[1, 2, 2], &[0., 0., 1., 0.]);
    let op = Op::AttendMla { scale: 1.0, latent: 1, window: None };
    assert_close(&run1(op, &[&q, &c, &Tensor::scalar_i32(1)]), &[1, 2, 1], &[ln3 / 2., 0.75 * ln3]);
    let op = Op::AttendMla { scale: 1.0, latent: 2, window: Some(1) };
    assert_close(&run1(op, &[&q, &c, &Tensor::scalar_i32(1)]), &[1, 2, 2], &[ln3, 7., ln3, 7.]);
}

#[test]
fn attend_mla_up_equals_the_absorbed_form() {
    // The unabsorbed form's score q_nope·(Wk c) + q_rope·rope is the absorbed one's
    // (Wkᵀ q_nope)·c + q_rope·rope, and its value Wv·(Σ w c) the absorbed output's projection.
    let (h, l, r, dk, dv, s, n) = (2, 4, 2, 3, 3, 5, 2);
    let wave = |seed: f32| move |x: usize| ((x as f32 + 1.0) * seed).sin();
    let (q, c, cn) = (
        Tensor::from_fn(&[n, h, dk + r], wave(0.7)),
        Tensor::from_fn(&[s, l + r], wave(1.3)),
        Tensor::from_fn(&[n, l + r], wave(2.1)),
    );
    let (wk, wv) = (Tensor::from_fn(&[h, dk, l], wave(0.37)), Tensor::from_fn(&[h, dv, l], wave(0.53)));
    let (qd, wkd) = (q.as_f32().unwrap(), wk.as_f32().unwrap());
    // The absorbed query: Wk[j]ᵀ q_nope ‖ q_rope, for every row and head.
    let mut qc = Vec::new();
    for row in 0..n {
        for j in 0..h {
            let qj = &qd[(row * h + j) * (dk + r)..][..dk + r];
            qc.extend((0..l).map(|p| (0..dk).map(|o| wkd[(j * dk + o) * l + p] * qj[o]).sum::<f32>()));
            qc.extend_from_slice(&qj[dk..]);
        }
    }
    let qc = f(&[n, h, l + r], &qc);
    let pos = Tensor::scalar_i32(3);
    for window in [None, Some(2)] {
        let up = run1(Op::AttendMlaUp { scale: 0.4, latent: l, window }, &[&q, &c, &wk, &wv, &pos, &cn]);
        let u = run1(Op::AttendMla { scale: 0.4, latent: l, window }, &[&qc, &c, &pos, &cn]);
        let absorbed = run1(Op::LinearHeads, &[&u, &wv]);
        assert_close(&up, &[n, h, dv], absorbed.as_f32().unwrap());
    }
}
