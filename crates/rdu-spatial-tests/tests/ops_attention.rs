//! `rope`, `cache_put`, `attend`, `attend_mla` and `attend_mla_up` against hand computations and a
//! naive model.

use crate::common;
use common::*;
use rdu_spatial::{MapBindings, SimTensor};

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

/// Keys `Wk[j]·x ‖ rope` and values `Wv[j]·x` of every entry of `lat` (`rows × (l + r)`), laid
/// out as `attend`'s `[rows, h, dk + r]` and `[rows, h, dv]`, by plain loops in f64.
fn expand(
    lat: &[f32],
    rows: usize,
    (h, l, r): (usize, usize, usize),
    wk: &[f32],
    wv: &[f32],
) -> (SimTensor, SimTensor) {
    let (dk, dv) = (wk.len() / (h * l), wv.len() / (h * l));
    let up = |w: &[f32], j: usize, o: usize, x: &[f32]| -> f32 {
        (0..l).map(|p| f64::from(w[(j * w.len() / h / l + o) * l + p]) * f64::from(x[p])).sum::<f64>() as f32
    };
    let (mut k, mut v) = (Vec::new(), Vec::new());
    for x in lat.chunks_exact(l + r).take(rows) {
        for j in 0..h {
            k.extend((0..dk).map(|o| up(wk, j, o, x)).chain(x[l..].iter().copied()));
            v.extend((0..dv).map(|o| up(wv, j, o, x)));
        }
    }
    (f(&[rows, h, dk + r], &k), f(&[rows, h, dv], &v))
}

#[test]
fn attend_mla_up_is_attend_over_the_keys_and_values_its_up_projections_make() {
    // 3 heads, a latent of 4 and a rope key of 2 per entry, keys of 3 + 2 and values of 5; a
    // cache of 6 slots and a chunk of 2 rows at positions 3 and 4 (read from the chunk).
    let (h, l, r, dk, dv, s, n) = (3, 4, 2, 3, 5, 6, 2);
    let (q, c, cn) = (rt(&[n, h, dk + r], 11), rt(&[s, l + r], 12), rt(&[n, l + r], 13));
    let (wk, wv) = (rt(&[h, dk, l], 14), rt(&[h, dv, l], 15));
    let (wkd, wvd) = (wk.as_f32().unwrap(), wv.as_f32().unwrap());
    let (kc, vc) = expand(c.as_f32().unwrap(), s, (h, l, r), wkd, wvd);
    let (kn, vn) = expand(cn.as_f32().unwrap(), n, (h, l, r), wkd, wvd);
    let b = MapBindings::new()
        .with("q", q)
        .with("C", c)
        .with("c", cn)
        .with("Wk", wk.clone())
        .with("Wv", wv.clone())
        .with("K", kc)
        .with("V", vc)
        .with("k", kn)
        .with("v", vn)
        .with("pos", i(&[], &[3]));
    let ops = "u = attend_mla_up(q, C, Wk, Wv, pos, c, scale=0.4, latent=4)\n\
               w = attend(q, K, V, pos, k, v, scale=0.4)\n\
               d = attend_mla_up(q, C, Wk, Wv, pos, scale=0.4, latent=4, window=2)\n\
               e = attend(q, K, V, pos, scale=0.4, window=2)\n\
               t = attend_mla_up(q, C, Wk, Wv, pos, c, scale=0.4, latent=4) tile(axis=1, [0..1, 1..3])";
    let res = run(&b, ops, &["u", "w", "d", "e", "t"]).unwrap();
    // Tiles along the heads give every head's output bit for bit.
    assert_eq!(out(&res, "t"), out(&res, "u"));
    assert_eq!(res.outputs["u"].shape, [n, h, dv]);
    close(&out(&res, "u"), &out(&res, "w"), 1e-6, 1e-5);
    // Without the chunk's latents every position is read from the cache, within a window of 2.
    close(&out(&res, "d"), &out(&res, "e"), 1e-6, 1e-5);
    // Up-projections of another latent width are refused in one line.
    let bad = b.with("Wn", rt(&[h, dk, l + 1], 16));
    let err = run(&bad, "u = attend_mla_up(q, C, Wn, Wv, pos, scale=0.4, latent=4)", &["u"]).unwrap_err().to_string();
    assert!(err.contains("do not agree"), "{err}");
}

/// A chunk of rows (at least 8: the attention runs as products over blocks of rows) against the
/// naive model row by row: grouped heads, with and without a window, the chunk's own keys and
/// values or none, a 4-slot ring read past its size (a slot read as often as its positions), the
/// latent form, and tiles along the heads.
#[test]
fn attend_over_a_chunk_of_rows_is_the_naive_model_row_by_row() {
    // h = 4 query heads over g = 2 kv heads, S = 4 slots, 10 rows at positions 7..=16.
    let (h, g, dk, dv, s, n, first) = (4, 2, 8, 3, 4, 10, 7);
    let (q, k, v) = (rt(&[n, h, dk], 21), rt(&[s, g, dk], 22), rt(&[s, g, dv], 23));
    let (kn, vn) = (rt(&[n, g, dk], 24), rt(&[n, g, dv], 25));
    let (qm, c, cn) = (rt(&[n, h, 6], 26), rt(&[s, 6], 27), rt(&[n, 6], 28));
    let b = MapBindings::new()
        .with("q", q.clone())
        .with("K", k.clone())
        .with("V", v.clone())
        .with("k", kn.clone())
        .with("v", vn.clone())
        .with("qm", qm.clone())
        .with("C", c.clone())
        .with("c", cn.clone())
        .with("pos", i(&[], &[first as i32]));
    let ops = "a = attend(q, K, V, pos, scale=0.5, window=5)\n\
               w = attend(q, K, V, pos, k, v, scale=0.5)\n\
               x = attend(q, K, V, pos, k, v, scale=0.5, window=6)\n\
               t = attend(q, K, V, pos, k, v, scale=0.5) tile(axis=1, [0..1, 1..4])\n\
               m = attend_mla(qm, C, pos, c, scale=0.3, latent=4)";
    let r = run(&b, ops, &["a", "w", "x", "t", "m"]).unwrap();
    assert_eq!(out(&r, "t"), out(&r, "w"), "tiles along the heads give every head's output bit for bit");
    let (kd, vd, knd, vnd) = (k.as_f32().unwrap(), v.as_f32().unwrap(), kn.as_f32().unwrap(), vn.as_f32().unwrap());
    // The key and value of position `t` for kv head `kv`: the chunk's row when `chunk` and the
    // chunk holds `t`, otherwise slot `t mod S`.
    let kv_of = |t: usize, kv: usize, chunk: bool| -> (Vec<f32>, Vec<f32>) {
        if chunk && t >= first {
            let row = t - first;
            (knd[(row * g + kv) * dk..][..dk].to_vec(), vnd[(row * g + kv) * dv..][..dv].to_vec())
        } else {
            let sl = t % s;
            (kd[(sl * g + kv) * dk..][..dk].to_vec(), vd[(sl * g + kv) * dv..][..dv].to_vec())
        }
    };
    let qd = q.as_f32().unwrap();
    for row in 0..n {
        let p = first + row;
        for head in 0..h {
            let qv = &qd[(row * h + head) * dk..][..dk];
            let at = |name: &str| out(&r, name)[(row * h + head) * dv..][..dv].to_vec();
            for (name, lo, chunk) in [("a", p - 4, false), ("w", 0, true), ("x", p - 5, true)] {
                let (keys, values): (Vec<Vec<f32>>, Vec<Vec<f32>>) =
                    (lo..=p).map(|t| kv_of(t, head / (h / g), chunk)).unzip();
                let len = keys.len();
                let want = naive(qv, &keys.concat(), &values.concat(), &(0..len).collect::<Vec<_>>(), len, 0.5);
                close(&at(name), &want, 1e-6, 1e-5);
            }
        }
    }
    // The latent form: every head reads the latent `C[t mod S]` (or the chunk's row) as its key,
    // its first 4 values as its value.
    let (qmd, cd, cnd) = (qm.as_f32().unwrap(), c.as_f32().unwrap(), cn.as_f32().unwrap());
    for row in 0..n {
        let p = first + row;
        let keys: Vec<f32> = (0..=p)
            .flat_map(|t| if t >= first { &cnd[(t - first) * 6..][..6] } else { &cd[(t % s) * 6..][..6] })
            .copied()
            .collect();
        let values: Vec<f32> = keys.chunks_exact(6).flat_map(|key| &key[..4]).copied().collect();
        for head in 0..h {
            let want =
                naive(&qmd[(row * h + head) * 6..][..6], &keys, &values, &(0..=p).collect::<Vec<_>>(), p + 1, 0.3);
            close(&out(&r, "m")[(row * h + head) * 4..][..4], &want, 1e-6, 1e-5);
        }
    }
}

/// Naive causal attention with a sink: the sink's logit joins the softmax's maximum and total
/// and weighs no value.
fn naive_with_sink(q: &[f32], k: &[f32], v: &[f32], len: usize, scale: f32, sink: f32) -> Vec<f32> {
    let (dk, dv) = (k.len() / len, v.len() / len);
    let scores: Vec<f64> =
        (0..len).map(|t| scale as f64 * (0..dk).map(|j| q[j] as f64 * k[t * dk + j] as f64).sum::<f64>()).collect();
    let m = scores.iter().copied().fold(sink as f64, f64::max);
    let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
    let tot: f64 = e.iter().sum::<f64>() + (sink as f64 - m).exp();
    (0..dv).map(|c| (0..len).map(|t| e[t] / tot * v[t * dv + c] as f64).sum::<f64>() as f32).collect()
}

/// Attention sinks (one logit per query head, last operand) in a decode step's row-by-row
/// attention and in a chunk's products (10 rows), with and without the chunk's own keys, and
/// tiled along the heads: each head against the naive model with its sink.
#[test]
fn attend_with_sinks_weighs_each_heads_sink_in_its_softmax_only() {
    let (h, g, dk, dv, s) = (4, 2, 8, 3, 16);
    let (k, v) = (rt(&[s, g, dk], 31), rt(&[s, g, dv], 32));
    let sinks = f(&[h], &[0.5, -1.0, 2.0, 0.0]);
    for (n, first) in [(1usize, 9usize), (10, 3)] {
        let (q, kn, vn) = (rt(&[n, h, dk], 33), rt(&[n, g, dk], 34), rt(&[n, g, dv], 35));
        let b = MapBindings::new()
            .with("q", q.clone())
            .with("K", k.clone())
            .with("V", v.clone())
            .with("k", kn.clone())
            .with("v", vn.clone())
            .with("S", sinks.clone())
            .with("pos", i(&[], &[first as i32]));
        let ops = "a = attend(q, K, V, pos, S, scale=0.5, window=4)\n\
                   c = attend(q, K, V, pos, k, v, S, scale=0.5)\n\
                   t = attend(q, K, V, pos, k, v, S, scale=0.5) tile(axis=1, [0..3, 3..4])";
        let r = run(&b, ops, &["a", "c", "t"]).unwrap();
        assert_eq!(out(&r, "t"), out(&r, "c"), "tiles along the heads give every head's output bit for bit");
        let (qd, kd, vd) = (q.as_f32().unwrap(), k.as_f32().unwrap(), v.as_f32().unwrap());
        let (knd, vnd) = (kn.as_f32().unwrap(), vn.as_f32().unwrap());
        for row in 0..n {
            let p = first + row;
            for head in 0..h {
                let (kv, sink) = (head / (h / g), sinks.as_f32().unwrap()[head]);
                let qv = &qd[(row * h + head) * dk..][..dk];
                let at = |name: &str| out(&r, name)[(row * h + head) * dv..][..dv].to_vec();
                for (name, lo, chunk) in [("a", p.saturating_sub(3), false), ("c", 0, true)] {
                    let (mut keys, mut values) = (Vec::new(), Vec::new());
                    for t in lo..=p {
                        let (src_k, src_v, at_k, at_v) = if chunk && t >= first {
                            (knd, vnd, ((t - first) * g + kv) * dk, ((t - first) * g + kv) * dv)
                        } else {
                            (kd, vd, ((t % s) * g + kv) * dk, ((t % s) * g + kv) * dv)
                        };
                        keys.extend_from_slice(&src_k[at_k..][..dk]);
                        values.extend_from_slice(&src_v[at_v..][..dv]);
                    }
                    let want = naive_with_sink(qv, &keys, &values, p - lo + 1, 0.5, sink);
                    close(&at(name), &want, 1e-6, 1e-5);
                }
            }
        }
    }
    let bad = MapBindings::new()
        .with("q", rt(&[1, h, dk], 36))
        .with("K", k.clone())
        .with("V", v.clone())
        .with("S", f(&[3], &[0., 0., 0.]))
        .with("pos", i(&[], &[2]));
    let e = run(&bad, "a = attend(q, K, V, pos, S, scale=0.5)", &["a"]).unwrap_err().to_string();
    assert!(e.contains("sinks [3] must be [4]"), "{e}");
}
