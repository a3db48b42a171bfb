//! The test model's math in plain loops: what the host must compute, written without the simulator.

use super::{Values, CTX, D, VOCAB};

/// The logits of feeding `tokens` one at a time from position 0, one row per step.
pub fn reference(w: &Values, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut caches = vec![vec![[0.0f32; D]; CTX]; 2];
    let mut out = Vec::new();
    for (pos, &tok) in tokens.iter().enumerate() {
        let t = tok as usize;
        let mut x: Vec<f32> = w["E"][t * D..(t + 1) * D].to_vec();
        for (l, cache) in caches.iter_mut().enumerate() {
            let h = rms_norm(&x, &w[&format!("an{l}")]);
            let y = matvec(&w[&format!("W{l}")], &h, D);
            let r = rope(&y, pos);
            cache[pos] = r;
            let scores: Vec<f32> = (0..=pos).map(|p| 0.25 * dot(&r, &cache[p])).collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f32 = e.iter().sum();
            for i in 0..D {
                let a: f32 = (0..=pos).map(|p| e[p] / total * cache[p][i]).sum();
                x[i] += a;
            }
        }
        let hn = rms_norm(&x, &w["nf"]);
        out.push(matvec(&w["Wout"], &hn, VOCAB));
    }
    out
}

fn rms_norm(x: &[f32], w: &[f32]) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (ms + 1e-5).sqrt();
    x.iter().zip(w).map(|(v, g)| v * inv * g).collect()
}

/// `W x` for `W [rows, D]`.
fn matvec(w: &[f32], x: &[f32], rows: usize) -> Vec<f32> {
    (0..rows).map(|o| dot(&w[o * D..(o + 1) * D], x)).collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Neox rotation of all `D` dims at position `pos`, base 10000: pairs `(k, k + D/2)`.
fn rope(y: &[f32], pos: usize) -> [f32; D] {
    let half = D / 2;
    let mut out = [0.0f32; D];
    for k in 0..half {
        let freq = 1.0 / 10000f32.powf((2 * k) as f32 / D as f32);
        let angle = pos as f32 * freq;
        let (c, s) = (angle.cos(), angle.sin());
        out[k] = y[k] * c - y[k + half] * s;
        out[k + half] = y[k + half] * c + y[k] * s;
    }
    out
}
