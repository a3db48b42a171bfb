//! `conv_step`, `conv_shift`, `delta_scan` and `delta_step`.

use crate::common;
use common::*;
use rdu_spatial::MapBindings;

#[test]
fn conv_step_convolves_causally_over_state_then_rows() {
    // C = 2 channels, K = 3 taps; state rows [1, 10], [2, 20]; x rows [3, 30], [4, 40].
    let b = MapBindings::new()
        .with("x", f(&[2, 2], &[3., 30., 4., 40.]))
        .with("w", f(&[2, 3], &[1., 0., 0., 0., 1., 2.]))
        .with("Sc", f(&[2, 2], &[1., 10., 2., 20.]));
    let r = run(&b, "y = conv_step(x, w, Sc)\nz = conv_step(x, w)\nSc <- conv_shift(Sc, x)", &["y", "z"]).unwrap();
    // Channel 0 takes u[t]: 1, 2. Channel 1 takes u[t+1] + 2·u[t+2]: 20 + 60, 30 + 80.
    assert_eq!(out(&r, "y"), [1., 80., 2., 110.]);
    // Without a state u starts with two zero rows: channel 0 is 0, 0; channel 1: 0 + 60, 30 + 80.
    assert_eq!(out(&r, "z"), [0., 60., 0., 110.]);
    assert_eq!(r.states["Sc"].as_f32().unwrap(), [3., 30., 4., 40.]);
    let one = MapBindings::new().with("Sc", f(&[2, 1], &[1., 2.])).with("x", f(&[1, 1], &[3.]));
    let r = run(&one, "Sc <- conv_shift(Sc, x)", &[]).unwrap();
    assert_eq!(r.states["Sc"].as_f32().unwrap(), [2., 3.]);
}

fn delta_inputs(n: usize, seed: u64) -> MapBindings {
    // hk = 2 key heads, hv = 4 value heads, dk = 3, dv = 2.
    MapBindings::new()
        .with("q", rt(&[n, 2, 3], seed))
        .with("k", rt(&[n, 2, 3], seed + 1))
        .with("v", rt(&[n, 4, 2], seed + 2))
        .with("g", f(&[n, 4], &rand(n * 4, seed + 3).iter().map(|v| -v.abs()).collect::<Vec<_>>()))
        .with("bt", f(&[n, 4], &rand(n * 4, seed + 4).iter().map(|v| v.abs()).collect::<Vec<_>>()))
}

fn row(t: &rdu_spatial::SimTensor, r: usize) -> rdu_spatial::SimTensor {
    let per: usize = t.shape[1..].iter().product();
    let mut shape = t.shape.clone();
    shape[0] = 1;
    f(&shape, &t.as_f32().unwrap()[r * per..(r + 1) * per])
}

#[test]
fn delta_step_over_n_rows_equals_n_single_row_steps() {
    let n = 4;
    let b = delta_inputs(n, 11).with("Sd", rt(&[4, 3, 2], 99));
    let all = run(&b, "o, Sd <- delta_step(Sd, q, k, v, g, bt)", &["o"]).unwrap();
    let mut state = b.tensors["Sd"].clone();
    let mut outs = Vec::new();
    for r in 0..n {
        let mut one = MapBindings::new().with("Sd", state.clone());
        for name in ["q", "k", "v", "g", "bt"] {
            one = one.with(name, row(&b.tensors[name], r));
        }
        let res = run(&one, "o, Sd <- delta_step(Sd, q, k, v, g, bt)", &["o"]).unwrap();
        outs.extend(out(&res, "o"));
        state = res.states["Sd"].clone();
    }
    close(&out(&all, "o"), &outs, 1e-6, 1e-5);
    close(all.states["Sd"].as_f32().unwrap(), state.as_f32().unwrap(), 1e-6, 1e-5);
}

#[test]
fn delta_scan_is_delta_step_from_a_zero_state() {
    let b = delta_inputs(3, 5).with("Sd", f(&[4, 3, 2], &[0.; 24]));
    let ops = "a = delta_scan(q, k, v, g, bt)\nb, Sd <- delta_step(Sd, q, k, v, g, bt)";
    let r = run(&b, ops, &["a", "b"]).unwrap();
    assert_eq!(out(&r, "a"), out(&r, "b"));
}

#[test]
fn one_delta_row_matches_the_rule_by_hand() {
    // hk = hv = 1, dk = 2, dv = 1: S = [[1], [2]], g = ln 0.5, k = [1, 0], q = [0, 1], v = 3, beta = 0.5.
    let b = MapBindings::new()
        .with("Sd", f(&[1, 2, 1], &[1., 2.]))
        .with("q", f(&[1, 1, 2], &[0., 1.]))
        .with("k", f(&[1, 1, 2], &[1., 0.]))
        .with("v", f(&[1, 1, 1], &[3.]))
        .with("g", f(&[1, 1], &[0.5f32.ln()]))
        .with("bt", f(&[1, 1], &[0.5]));
    let r = run(&b, "o, Sd <- delta_step(Sd, q, k, v, g, bt)", &["o"]).unwrap();
    // S ← 0.5·S = [0.5, 1]; m = Sᵀk = 0.5; S ← S + k·0.5·(3 − 0.5) = [1.75, 1]; o = Sᵀq = 1.
    close(r.states["Sd"].as_f32().unwrap(), &[1.75, 1.0], 1e-6, 1e-6);
    close(&out(&r, "o"), &[1.0], 1e-6, 1e-6);
}

#[test]
fn kmap_chooses_grouped_or_tiled_key_heads() {
    // Value head 1 of 2 over 2 key heads... with hk = 2, hv = 4: grouped maps 1 → 0, tiled maps 1 → 1.
    let b = delta_inputs(1, 21);
    let r = run(
        &b,
        "a = delta_scan(q, k, v, g, bt, kmap=grouped)\nt = delta_scan(q, k, v, g, bt, kmap=tiled)",
        &["a", "t"],
    );
    let r = r.unwrap();
    let (a, t) = (out(&r, "a"), out(&r, "t"));
    assert_eq!(a[0..2], t[0..2], "head 0 reads key head 0 either way");
    assert_ne!(a[2..4], t[2..4], "head 1 reads key head 0 (grouped) or 1 (tiled)");
    assert_eq!(a[6..8], t[6..8], "head 3 reads key head 1 either way");
}
