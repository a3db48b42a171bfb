//! Whether a drafted token stands, and what comes in its place when it does not: greedy
//! decoding's rule (the target's own argmax), and speculative sampling's (Leviathan, Kalman and
//! Matias, 2023: accept `d` with probability `min(1, p(d) / q(d))`, otherwise draw from
//! `max(0, p − q)` normalised), which leaves every token distributed exactly as the target's
//! sampler `p` would draw it, whatever the draft's distribution `q`.

use crate::error::Result;
use crate::sample::{greedy, Dist, Sampler};

/// The outcome of checking one drafted token against one row of the target's logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The drafted token stands.
    Accept,
    /// It does not; this token, drawn from the target's distribution, takes its place.
    Replace(u32),
}

/// Checks the drafted token `d` against the target's `logits`, `q` being the distribution the
/// draft drew it from (`None`: proposed deterministically, all its mass on `d`).
pub fn check(sampler: &mut Sampler, logits: &[f32], d: u32, q: Option<&Dist>) -> Result<Verdict> {
    if sampler.is_greedy() {
        let g = greedy(logits)?;
        return Ok(if g == d { Verdict::Accept } else { Verdict::Replace(g) });
    }
    let p = sampler.distribution(logits)?;
    let (pd, qd) = (p.prob(d), q.map_or(1.0, |q| q.prob(d)));
    if qd > 0.0 && sampler.uniform() * qd < pd {
        return Ok(Verdict::Accept);
    }
    Ok(Verdict::Replace(residual(&p, d, q).draw(sampler.uniform())))
}

/// `max(0, p − q)` over `p`'s tokens (what the draft over-proposed taken out); `p` itself when
/// nothing is left (the two distributions are equal, so a rejection cannot happen but by rounding).
pub fn residual(p: &Dist, d: u32, q: Option<&Dist>) -> Dist {
    let q_of: std::collections::HashMap<u32, f64> = match q {
        Some(q) => {
            let total: f64 = q.probs.iter().sum();
            q.tokens.iter().zip(&q.probs).map(|(&t, &w)| (t, w / total)).collect()
        }
        None => [(d, 1.0)].into_iter().collect(),
    };
    let total: f64 = p.probs.iter().sum();
    let probs: Vec<f64> = p
        .tokens
        .iter()
        .zip(&p.probs)
        .map(|(t, &w)| (w / total - q_of.get(t).copied().unwrap_or(0.0)).max(0.0))
        .collect();
    if probs.iter().sum::<f64>() > 0.0 {
        Dist { tokens: p.tokens.clone(), probs }
    } else {
        p.clone()
    }
}
