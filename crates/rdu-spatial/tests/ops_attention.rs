//! `rope`, `cache_put`, `attend` and `attend_mla` against hand computations and a naive model.

mod common;
use common::*;
use rdu_spatial::MapBindings;

#[test]
fn rope_rotates_neox_and_interleaved_pairs_and_passes_the_rest() {
    // One head of 6 dims, rotary dim 4, table row p: (cos, sin) columns j = 0, 1.
    let cos = f(&[3, 2], &[1., 1., 0., 0.5, 0.6, 0.0]);
    let sin = f(&[3, 2], &[0., 0., 1., 0.5, 0.8, 1.0]);
    let x = f(&[2, 1, 6], &[1., 2., 3., 4., 5., 6., 1., 2., 3., 4., 5., 6.]);
    let b = MapBindings::new().with("x", x).with("cos", cos).with("sin", sin).with("pos", i(&[], &[1]));
    let b = b.with("pr", i(&[2], &[2, 0]));
    let ops = "n = rope(x, cos, sin, pos, dim=4, style=neox)\nl = rope(x, cos, sin, pr, dim=4, style=interleaved)";
    let r = run(&b, ops, &["n", "l"]).unwrap();
    // neox, row 0 at p=1: pairs (0,2) with (c,s)=(0,1): (−3, 1); (1,3) with (0.5,0.5): (−1, 3).
    // row 1 at p=2: (0,2) with (0.6,0.8): (0.6−2.4, 1.8+0.8); (1,3) with (0,1): (−4, 2).
    close(&out(&r, "n"), &[-3., -1., 1., 3., 5., 6., -1.8, -4., 2.6, 2., 5., 6.], 1e-6, 1e-6);
    // interleaved, row 0 at p=2: (0,1) with (0.6,0.8): (0.6−1.6, 1.2+0.8); (2,3) with (0,1): (−4, 3).
    // row 1 at p=0: identity.
    close(&out(&r, "l"), &[-1., 2., -4., 3., 5., 6., 1., 2., 3., 4., 5., 6.], 1e-6, 1e-6);
    let far = b.clone().with("pf", i(&[], &[2]));
    let e = run(&far, "n = rope(x, cos, sin, pf, dim=4, style=neox)", &["n"]).unwrap_err().to_string();
    assert!(e.contains("position 3 is beyond the 3 rows"), "{e}");
}

#[test]
fn cache_put_writes_ring_slots_in_place_of_the_state() {
    let b = MapBindings::new()
        .with("C", f(&[3, 2], &[0.; 6]))
        .with("x", f(&[2, 2], &[1., 2., 3., 4.]))
        .with("pos", i(&[], &[2]));
    let r = run(&b, "C <- cache_put(C, x, pos)", &[]).unwrap();
    // Positions 2 and 3 land in slots 2 and 0.
    assert_eq!(r.states["C"].as_f32().unwrap(), [3., 4., 0., 0., 1., 2.]);
    let e = run(&b, "D = cache_put(C, x, pos)\nC <- neg(D)", &[]).map(|r| r.states["C"].clone()).unwrap();
    assert_eq!(e.as_f32().unwrap(), [-3., -4., -0., -0., -1., -2.]);
}

/// Naive causal attention for one query row against slots, as the language defines it.
fn naive(q: &[f32], k: &[f32], v: &[f32], ts: &[usize], s: usize, scale: f32) -> Vec<f32> {
    let dv = v.len() / s;
    let dk = k.len() / s;
    let scores: Vec<f64> = ts
        .iter()
        .map(|t| (t % s, scale as f64))
        .map(|(sl, sc)| sc * (0..dk).map(|j| q[j] as f64 * k[sl * dk + j] as f64).sum::<f64>())
        .collect();
    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
    let tot: f64 = e.iter().sum();
    (0..dv).map(|c| ts.iter().zip(&e).map(|(t, w)| w / tot * v[(t % s) * dv + c] as f64).sum::<f64>() as f32).collect()
}

#[test]
fn attend_is_causal_grouped_windowed_and_reads_ring_slots() {
    // h = 4 query heads over g = 2 kv heads, S = 4 slots, rows at positions 5 and 6 (a wrapped ring).
    let (q, k, v) = (rt(&[2, 4, 8], 1), rt(&[4, 2, 8], 2), rt(&[4, 2, 3], 3));
    let b =
        MapBindings::new().with("q", q.clone()).with("K", k.clone()).with("V", v.clone()).with("pos", i(&[2], &[5, 6]));
    let r = run(&b, "a = attend(q, K, V, pos, scale=0.5, window=3)\nw = attend(q, K, V, pos, scale=0.5)", &["a", "w"]);
    let r = r.unwrap();
    let (qd, kd, vd) = (q.as_f32().unwrap(), k.as_f32().unwrap(), v.as_f32().unwrap());
    let head_kv = |g: usize| -> (Vec<f32>, Vec<f32>) {
        let kk = (0..4).flat_map(|s| kd[(s * 2 + g) * 8..(s * 2 + g + 1) * 8].to_vec()).collect();
        let vv = (0..4).flat_map(|s| vd[(s * 2 + g) * 3..(s * 2 + g + 1) * 3].to_vec()).collect();
        (kk, vv)
    };
    for (row, p) in [(0usize, 5usize), (1, 6)] {
        for h in 0..4 {
            let (kk, vv) = head_kv(h / 2);
            let qv = &qd[(row * 4 + h) * 8..(row * 4 + h + 1) * 8];
            let windowed: Vec<usize> = (p - 2..=p).collect();
            let all: Vec<usize> = (0..=p).collect();
            let at = |name: &str| out(&r, name)[(row * 4 + h) * 3..(row * 4 + h + 1) * 3].to_vec();
            close(&at("a"), &naive(qv, &kk, &vv, &windowed, 4, 0.5), 1e-6, 1e-5);
            close(&at("w"), &naive(qv, &kk, &vv, &all, 4, 0.5), 1e-6, 1e-5);
        }
    }
}

#[test]
fn attend_forward_attends_to_its_own_rows_causally() {
    let (q, k, v) = (rt(&[3, 1, 4], 4), rt(&[3, 1, 4], 5), f(&[3, 1, 1], &[1., 2., 4.]));
    let b = MapBindings::new().with("q", q).with("K", k).with("V", v).with("pos", i(&[], &[0]));
    let r = run(&b, "a = attend(q, K, V, pos, scale=1.0)", &["a"]).unwrap();
    let a = out(&r, "a");
    assert_eq!(a[0], 1.0, "row 0 sees only itself");
    assert!(a[1] > 1.0 && a[1] < 2.0 && a[2] > 1.0 && a[2] < 4.0, "{a:?}");
}

#[test]
fn attend_mla_uses_the_latent_as_key_and_its_prefix_as_value() {
    let (q, c) = (rt(&[1, 2, 6], 6), rt(&[5, 6], 7));
    let b = MapBindings::new().with("q", q.clone()).with("C", c.clone()).with("pos", i(&[], &[3]));
    let r = run(&b, "u = attend_mla(q, C, pos, scale=0.3, latent=4)", &["u"]).unwrap();
    assert_eq!(r.outputs["u"].shape, [1, 2, 4]);
    let cd = c.as_f32().unwrap();
    let vals: Vec<f32> = (0..5).flat_map(|s| cd[s * 6..s * 6 + 4].to_vec()).collect();
    for h in 0..2 {
        let want = naive(&q.as_f32().unwrap()[h * 6..(h + 1) * 6], cd, &vals, &[0, 1, 2, 3], 5, 0.3);
        close(&out(&r, "u")[h * 4..(h + 1) * 4], &want, 1e-6, 1e-5);
    }
}
