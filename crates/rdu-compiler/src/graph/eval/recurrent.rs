//! Gated DeltaNet: the causal depthwise convolution (`conv_step`, `conv_shift`) and the
//! gated delta rule (`delta_scan`, `delta_step`).
//!
//! The delta rule computes each row in f64 and stores the state as f32 after every row, so
//! `delta_step` over N rows equals N one-row steps bit for bit.

use super::{evals, f32s, out, Kernel};
use crate::graph::{KMap, Tensor};
use rayon::prelude::*;

evals! {
    ConvStep(ins, _) => conv_step(ins[0], ins[1], ins.get(2).copied()),
    ConvShift(ins, _) => conv_shift(ins[0], ins[1]),
    DeltaScan(ins, a) => delta(None, ins, a.kmap),
    DeltaStep(ins, a) => delta(Some(ins[0]), &ins[1..], a.kmap),
}

/// `y[t, c] = Σᵢ w[c, i] · u[t+i, c]` with `u = concat(state or zeros [K−1, C], x)`.
fn conv_step(x: &Tensor, w: &Tensor, state: Option<&Tensor>) -> Kernel {
    let (n, channels) = (x.shape()[0], x.shape()[1]);
    let kernel = w.shape()[1];
    let history = kernel - 1;
    let (xs, ws) = (f32s(x)?, f32s(w)?);
    let zeros = vec![0f32; history * channels];
    let hs = match state {
        Some(s) => f32s(s)?,
        None => &zeros,
    };
    // Row r of u: the state's rows first, then x's.
    let u = |r: usize, c: usize| if r < history { hs[r * channels + c] } else { xs[(r - history) * channels + c] };
    let mut data = Vec::with_capacity(n * channels);
    for t in 0..n {
        for c in 0..channels {
            let acc: f64 = (0..kernel).map(|i| f64::from(ws[c * kernel + i]) * f64::from(u(t + i, c))).sum();
            data.push(acc as f32);
        }
    }
    Ok(vec![out(x.shape(), data)?])
}

/// The last `K−1` rows of `concat(state, x)`.
fn conv_shift(state: &Tensor, x: &Tensor) -> Kernel {
    let (history, channels) = (state.shape()[0], state.shape()[1]);
    let mut rows = f32s(state)?.to_vec();
    rows.extend_from_slice(f32s(x)?);
    let keep = rows.split_off(rows.len() - history * channels);
    Ok(vec![out(state.shape(), keep)?])
}

/// The gated delta rule over `ins = [q, k, v, g, beta]` from `state` (zeros when `None`).
/// Returns `o`, and also the final state when `state` is given. Heads are independent and
/// run in parallel; within a head the rows run in order.
fn delta(state: Option<&Tensor>, ins: &[&Tensor], kmap: KMap) -> Kernel {
    let [q, k, v, g, beta] = ins else { return Err("the delta rule takes q, k, v, g, beta".into()) };
    let (n, hk, dk) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    let (hv, dv) = (v.shape()[1], v.shape()[2]);
    let (qs, ks, vs, gs, bs) = (f32s(q)?, f32s(k)?, f32s(v)?, f32s(g)?, f32s(beta)?);
    let mut s = match state {
        Some(t) => f32s(t)?.to_vec(),
        None => vec![0f32; hv * dk * dv],
    };
    // Each head's outputs, `n × dv`, computed with its slice of the state.
    let per_head: Vec<Vec<f32>> = s
        .par_chunks_mut((dk * dv).max(1))
        .take(hv)
        .enumerate()
        .map(|(h, sh)| {
            let kh = match kmap {
                KMap::Grouped => h / (hv / hk),
                KMap::Tiled => h % hk,
            };
            let mut o = Vec::with_capacity(n * dv);
            let mut decayed = vec![0f64; dk * dv];
            for r in 0..n {
                let qv = &qs[(r * hk + kh) * dk..][..dk];
                let kv = &ks[(r * hk + kh) * dk..][..dk];
                let vv = &vs[(r * hv + h) * dv..][..dv];
                let alpha = f64::from(gs[r * hv + h]).exp();
                let b = f64::from(bs[r * hv + h]);
                // S ← exp(g)·S
                for (d, &sv) in decayed.iter_mut().zip(sh.iter()) {
                    *d = alpha * f64::from(sv);
                }
                // m = Sᵀk (each m[j] summed over i in order); δ = β(v − m); S ← S + k ⊗ δ
                let mut m = vec![0f64; dv];
                for i in 0..dk {
                    let ki = f64::from(kv[i]);
                    for (mj, &d) in m.iter_mut().zip(&decayed[i * dv..(i + 1) * dv]) {
                        *mj += d * ki;
                    }
                }
                let delta: Vec<f64> = m.iter().zip(vv).map(|(&mj, &vj)| b * (f64::from(vj) - mj)).collect();
                for i in 0..dk {
                    let ki = f64::from(kv[i]);
                    for j in 0..dv {
                        sh[i * dv + j] = (decayed[i * dv + j] + ki * delta[j]) as f32;
                    }
                }
                // o = Sᵀq, read after the update (each o[j] summed over i in order).
                let mut acc = vec![0f64; dv];
                for i in 0..dk {
                    let qi = f64::from(qv[i]);
                    for (a, &sv) in acc.iter_mut().zip(&sh[i * dv..(i + 1) * dv]) {
                        *a += f64::from(sv) * qi;
                    }
                }
                o.extend(acc.iter().map(|&a| a as f32));
            }
            o
        })
        .collect();
    let mut o = vec![0f32; n * hv * dv];
    for (h, oh) in per_head.iter().enumerate() {
        for r in 0..n {
            o[(r * hv + h) * dv..][..dv].copy_from_slice(&oh[r * dv..(r + 1) * dv]);
        }
    }
    let o = out(&[n, hv, dv], o)?;
    match state {
        Some(t) => Ok(vec![o, out(t.shape(), s)?]),
        None => Ok(vec![o]),
    }
}
