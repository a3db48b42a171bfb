//! Choosing the next token from a row of logits: greedy argmax, or temperature / top-k / top-p with a seeded RNG.
//!
//! Sampling is deterministic for a seed: the RNG is SplitMix64, candidates are ordered by
//! logit with ties broken by the lower id, and probabilities are computed in f64.

use crate::error::{HostError, Result};

/// How to choose a token. `temperature == 0` is greedy; `top_k == 0` and `top_p == 1` keep every candidate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub seed: u64,
}

impl Default for Sampling {
    /// Greedy.
    fn default() -> Sampling {
        Sampling { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 }
    }
}

/// The index of the largest logit, the first one on ties. Empty or NaN logits are an error.
pub fn greedy(logits: &[f32]) -> Result<u32> {
    check_logits(logits)?;
    // The largest value (no NaN is left: a select per lane, so the loop vectorises), then the
    // first index holding it — the first of equal values, as a strict `>` scan keeps.
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = logits.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    let max = lanes.iter().chain(rest).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    Ok(logits.iter().position(|&v| v == max).unwrap_or(0) as u32)
}

/// A seeded sampler: the same seed and logits always give the same tokens.
#[derive(Clone, Debug)]
pub struct Sampler {
    sampling: Sampling,
    rng: SplitMix64,
}

impl Sampler {
    /// Refuses a negative or non-finite temperature and a `top_p` outside `(0, 1]`.
    pub fn new(sampling: Sampling) -> Result<Sampler> {
        let fail = |problem: String| Err(HostError::Sampling { problem });
        if !(sampling.temperature.is_finite() && sampling.temperature >= 0.0) {
            return fail(format!(
                "temperature {} must be finite and at least 0; pass 0 for greedy",
                sampling.temperature
            ));
        }
        if !(sampling.top_p > 0.0 && sampling.top_p <= 1.0) {
            return fail(format!("top-p {} must be in (0, 1]; pass 1 to keep every token", sampling.top_p));
        }
        Ok(Sampler { sampling, rng: SplitMix64(sampling.seed) })
    }

    /// The next token from one row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        if self.sampling.temperature == 0.0 {
            return greedy(logits);
        }
        let dist = self.distribution(logits)?;
        Ok(dist.draw(self.uniform()))
    }

    /// Whether this sampler is greedy (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.sampling.temperature == 0.0
    }

    /// The distribution [`Sampler::sample`] draws from for one row of logits: the tokens it can
    /// choose with their probabilities (temperature, top-k and top-p applied; the greedy token
    /// alone, with probability 1, at temperature 0).
    pub fn distribution(&self, logits: &[f32]) -> Result<Dist> {
        let s = self.sampling;
        if s.temperature == 0.0 {
            return Ok(Dist { tokens: vec![greedy(logits)?], probs: vec![1.0] });
        }
        check_logits(logits)?;
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        if s.top_k > 0 {
            order.truncate(s.top_k);
        }
        let max = f64::from(logits[order[0]]);
        if !max.is_finite() {
            // An infinite top logit takes all the mass (and all -inf leaves nothing to weigh).
            return Ok(Dist { tokens: vec![order[0] as u32], probs: vec![1.0] });
        }
        let t = f64::from(s.temperature);
        let mut probs: Vec<f64> = order.iter().map(|&i| ((f64::from(logits[i]) - max) / t).exp()).collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        if s.top_p < 1.0 {
            // The smallest prefix whose mass reaches top_p; at least the most likely token.
            let mut mass = 0.0;
            let keep = probs.iter().position(|p| {
                mass += p;
                mass >= f64::from(s.top_p)
            });
            let keep = keep.map_or(probs.len(), |i| i + 1);
            order.truncate(keep);
            probs.truncate(keep);
        }
        Ok(Dist { tokens: order.into_iter().map(|i| i as u32).collect(), probs })
    }

    /// A uniform draw in `[0, 1)` from this sampler's generator.
    pub fn uniform(&mut self) -> f64 {
        self.rng.next_f64()
    }
}

/// A distribution over some tokens (the others have probability 0), most likely first, as
/// weights proportional to the probabilities (top-p keeps its prefix's weights unscaled).
#[derive(Clone, Debug, PartialEq)]
pub struct Dist {
    pub tokens: Vec<u32>,
    pub probs: Vec<f64>,
}

impl Dist {
    /// The probability of `token`.
    pub fn prob(&self, token: u32) -> f64 {
        let total: f64 = self.probs.iter().sum();
        self.tokens.iter().position(|&t| t == token).map_or(0.0, |i| self.probs[i] / total)
    }

    /// The token a uniform draw `u` in `[0, 1)` picks (inverse CDF in order).
    pub fn draw(&self, u: f64) -> u32 {
        let total: f64 = self.probs.iter().sum();
        let mut u = u * total;
        for (&t, &p) in self.tokens.iter().zip(&self.probs) {
            if u < p {
                return t;
            }
            u -= p;
        }
        *self.tokens.last().expect("a distribution has at least one token")
    }
}

fn check_logits(logits: &[f32]) -> Result<()> {
    if logits.is_empty() {
        return Err(HostError::Sampling {
            problem: "no logits to sample from; pass a row of the step's logits".into(),
        });
    }
    if let Some(i) = logits.iter().position(|v| v.is_nan()) {
        let problem = format!("logit {i} is NaN; the model's numbers broke down, check the checkpoint");
        return Err(HostError::Sampling { problem });
    }
    Ok(())
}

/// SplitMix64: a tiny, well-mixed 64-bit generator.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
