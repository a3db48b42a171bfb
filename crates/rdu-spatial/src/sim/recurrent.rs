//! Gated DeltaNet ops: the causal depthwise `conv_step` (tileable along channels) and its
//! `conv_shift`, and the gated delta rule from zero (`delta_scan`) or from a state
//! (`delta_step`, written in place), value heads in parallel.

use rayon::prelude::*;

use super::call::{kernels, Call, Outs};
use super::invalid;
use super::region::{region, untiled, Axes};
use super::tensor::SimTensor;
use crate::op::KMap;

kernels! {
    ConvStep(call, _) => conv_step(call),
    ConvShift(call, _) => conv_shift(call),
    DeltaScan(call, a) => delta(call, false, a.kmap),
    DeltaStep(call, a) => delta(call, true, a.kmap),
}

/// `y[t, c] = Σᵢ w[c, i] · u[t + i, c]` with `u = concat(state or zeros, x)`.
fn conv_step(call: &Call<'_>) -> Outs {
    let (tx, x) = call.f32(0)?;
    let (tw, w) = call.f32(1)?;
    let (&[n, c], &[wc, k]) = (tx.shape.as_slice(), tw.shape.as_slice()) else {
        return invalid(format!("expects x [N, C] and w [C, K], given {:?} and {:?}", tx.shape, tw.shape));
    };
    if wc != c || k == 0 {
        return invalid(format!("x {:?} does not match w {:?}", tx.shape, tw.shape));
    }
    let state = match call.args.len() {
        3 => {
            let (ts, s) = call.f32(2)?;
            if ts.shape != [k - 1, c] {
                return invalid(format!("state {:?} must be [{}, {c}]", ts.shape, k - 1));
            }
            Some(s)
        }
        _ => None,
    };
    // Row `r` of u: a state row for r < K − 1, else row r − (K − 1) of x.
    let u = |r: usize, ch: usize| -> f32 {
        if r + 1 >= k {
            x[(r + 1 - k) * c + ch]
        } else {
            state.map_or(0.0, |s| s[r * c + ch])
        }
    };
    let reg = region(call.tiling(), &tx.shape, Axes::Only(1), 1)?;
    let mut y = vec![0.0f32; n * c];
    for t in 0..n {
        for &(c0, c1) in &reg.tiles {
            for ch in c0..c1 {
                let mut acc = 0.0f32;
                for i in 0..k {
                    acc += w[ch * k + i] * u(t + i, ch);
                }
                y[t * c + ch] = acc;
            }
        }
    }
    Ok(vec![SimTensor::f32(vec![n, c], y)])
}

/// The last `K − 1` rows of `concat(state, x)`.
fn conv_shift(call: &Call<'_>) -> Outs {
    untiled(call.tiling())?;
    let (ts, s) = call.f32(0)?;
    let (tx, x) = call.f32(1)?;
    let (&[km1, c], &[n, xc]) = (ts.shape.as_slice(), tx.shape.as_slice()) else {
        return invalid(format!("expects state [K-1, C] and x [N, C], given {:?} and {:?}", ts.shape, tx.shape));
    };
    if xc != c {
        return invalid(format!("state {:?} does not match x {:?}", ts.shape, tx.shape));
    }
    // concat(state, x) has K − 1 + N rows; the last K − 1 start at row N.
    let all: Vec<f32> = s.iter().chain(x).copied().collect();
    debug_assert_eq!(all.len(), (km1 + n) * c);
    Ok(vec![SimTensor::f32(ts.shape.clone(), all[n * c..].to_vec())])
}

/// The gated delta rule, row by row, from zero (`delta_scan`) or from state `S` (`delta_step`,
/// whose second output is the state after the last row).
fn delta(call: &mut Call<'_>, with_state: bool, kmap: KMap) -> Outs {
    let first = usize::from(with_state);
    untiled(call.tiling())?;
    let (tq, q) = call.f32(first)?;
    let (tk, k) = call.f32(first + 1)?;
    let (tv, v) = call.f32(first + 2)?;
    let (tg, g) = call.f32(first + 3)?;
    let (tb, beta) = call.f32(first + 4)?;
    let (&[n, hk, dk], &[n_v, hv, dv]) = (tq.shape.as_slice(), tv.shape.as_slice()) else {
        return invalid(format!("expects q [N, hk, dk] and v [N, hv, dv], given {:?} and {:?}", tq.shape, tv.shape));
    };
    let gates = [n, hv];
    if tk.shape != tq.shape || n_v != n || tg.shape != gates || tb.shape != gates || hk == 0 {
        let shapes = [&tq.shape, &tk.shape, &tv.shape, &tg.shape, &tb.shape];
        return invalid(format!("q, k, v, g, beta shapes {shapes:?} do not agree"));
    }
    let grouped = match kmap {
        KMap::Grouped if hv % hk == 0 => true,
        KMap::Grouped => return invalid(format!("{hv} value heads are not a multiple of {hk} key heads")),
        KMap::Tiled => false,
    };
    let slab = dk * dv;
    let mut state = if with_state {
        let shape = call.shape_of(0)?;
        if shape != [hv, dk, dv] {
            return invalid(format!("state {shape:?} must be [{hv}, {dk}, {dv}]"));
        }
        call.take_or_clone(0)?
    } else {
        SimTensor::zeros(crate::program::Dtype::F32, vec![hv, dk, dv])
    };
    let Some(s) = state.as_f32_mut() else { return invalid("the state must be f32") };
    let head = |(h, st): (usize, &mut [f32])| -> Vec<f32> {
        let kh = if grouped { h / (hv / hk) } else { h % hk };
        let mut o = vec![0.0f32; n * dv];
        let (mut m, mut u) = (vec![0.0f32; dv], vec![0.0f32; dv]);
        for r in 0..n {
            let decay = g[r * hv + h].exp();
            let b = beta[r * hv + h];
            let kv = &k[(r * hk + kh) * dk..(r * hk + kh + 1) * dk];
            let qv = &q[(r * hk + kh) * dk..(r * hk + kh + 1) * dk];
            let vv = &v[(r * hv + h) * dv..(r * hv + h + 1) * dv];
            m.fill(0.0);
            for (row, &ki) in st.chunks_exact_mut(dv.max(1)).zip(kv) {
                for (mj, sj) in m.iter_mut().zip(row.iter_mut()) {
                    *sj *= decay;
                    *mj += *sj * ki;
                }
            }
            for ((uj, vj), mj) in u.iter_mut().zip(vv).zip(&m) {
                *uj = b * (vj - mj);
            }
            let out = &mut o[r * dv..(r + 1) * dv];
            for ((row, &ki), &qi) in st.chunks_exact_mut(dv.max(1)).zip(kv).zip(qv) {
                for ((sj, uj), oj) in row.iter_mut().zip(&u).zip(out.iter_mut()) {
                    *sj += ki * uj;
                    *oj += *sj * qi;
                }
            }
        }
        o
    };
    let per_head: Vec<Vec<f32>> = if slab == 0 {
        vec![vec![0.0; n * dv]; hv]
    } else if n * hv * slab >= 1 << 15 {
        s.par_chunks_mut(slab).enumerate().map(head).collect()
    } else {
        s.chunks_mut(slab).enumerate().map(head).collect()
    };
    let mut y = vec![0.0f32; n * hv * dv];
    for (h, o) in per_head.iter().enumerate() {
        for r in 0..n {
            y[(r * hv + h) * dv..(r * hv + h + 1) * dv].copy_from_slice(&o[r * dv..(r + 1) * dv]);
        }
    }
    let o = SimTensor::f32(vec![n, hv, dv], y);
    Ok(if with_state { vec![o, state] } else { vec![o] })
}
