//! RoPE tables: the shared tensors `cos{r}` / `sin{r}` (`[rows, dim/2]`) computed from a
//! rotation's description — by the compiler's reference runner and by the host alike.
//!
//! Frequencies follow transformers' `rope_init_fn`s (default, linear, llama3, YaRN) and
//! llama.cpp's `rope_freqs` divisors; angles and their cos/sin are taken in f32 like
//! transformers does, so tables agree with it bit for bit where the math is the same.

use serde::{Deserialize, Serialize};

/// How a rotation's frequencies are scaled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum RopeScaling {
    None,
    Linear {
        factor: f64,
    },
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max: usize,
    },
    Yarn {
        factor: f64,
        original_max: usize,
        beta_fast: f64,
        beta_slow: f64,
        mscale: f64,
        mscale_all_dim: f64,
        /// Whether the correction range is rounded outwards to whole dims (transformers'
        /// `truncate`, default true; llama.cpp always rounds). gpt-oss's config says false.
        #[serde(default = "truncate_default", skip_serializing_if = "is_truncate_default")]
        truncate: bool,
    },
    /// llama.cpp's `rope_freqs.weight`: each frequency divided by its factor.
    Factors {
        factors: Vec<f32>,
    },
}

fn truncate_default() -> bool {
    true
}

fn is_truncate_default(truncate: &bool) -> bool {
    *truncate
}

/// One rotation: base, rotary dims and scaling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RopeSpec {
    pub base: f64,
    pub dim: usize,
    pub scaling: RopeScaling,
}

/// YaRN's magnitude correction `0.1·m·ln(s) + 1` (1 when `s ≤ 1`).
pub fn yarn_mscale(scale: f64, m: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * m * scale.ln() + 1.0
    }
}

/// The `dim/2` inverse frequencies of a rotation.
pub fn inv_freq(spec: &RopeSpec) -> Vec<f32> {
    let half = spec.dim / 2;
    let base = spec.base as f32;
    let plain: Vec<f32> = (0..half).map(|i| 1.0 / base.powf((2 * i) as f32 / spec.dim as f32)).collect();
    match &spec.scaling {
        RopeScaling::None => plain,
        RopeScaling::Linear { factor } => plain.iter().map(|f| f / *factor as f32).collect(),
        RopeScaling::Factors { factors } => plain.iter().zip(factors).map(|(f, d)| f / d).collect(),
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max } => {
            let old = *original_max as f64;
            let (low_wave, high_wave) = (old / low_freq_factor, old / high_freq_factor);
            plain
                .iter()
                .map(|&f| {
                    let f = f as f64;
                    let wave = 2.0 * std::f64::consts::PI / f;
                    let scaled = if wave > low_wave { f / factor } else { f };
                    if wave < high_wave || wave > low_wave {
                        scaled as f32
                    } else {
                        let smooth = (old / wave - low_freq_factor) / (high_freq_factor - low_freq_factor);
                        ((1.0 - smooth) * scaled / factor + smooth * scaled) as f32
                    }
                })
                .collect()
        }
        RopeScaling::Yarn { factor, original_max, beta_fast, beta_slow, truncate, .. } => {
            let dim = spec.dim as f64;
            let corr = |rot: f64| {
                dim * (*original_max as f64 / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * spec.base.ln())
            };
            let (low, high) = (corr(*beta_fast), corr(*beta_slow));
            let (low, high) = if *truncate { (low.floor(), high.ceil()) } else { (low, high) };
            let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
            if low == high {
                high += 0.001;
            }
            (0..half)
                .map(|i| {
                    let pos_freq = base.powf((2 * i) as f32 / spec.dim as f32);
                    let extrapolation = 1.0 / pos_freq;
                    let interpolation = 1.0 / (*factor as f32 * pos_freq);
                    let ramp = ((i as f32 - low as f32) / (high as f32 - low as f32)).clamp(0.0, 1.0);
                    let keep = 1.0 - ramp;
                    interpolation * (1.0 - keep) + extrapolation * keep
                })
                .collect()
        }
    }
}

/// The factor YaRN multiplies cos and sin by (1 for every other scaling).
pub fn attention_factor(spec: &RopeSpec) -> f32 {
    match &spec.scaling {
        RopeScaling::Yarn { factor, mscale, mscale_all_dim, .. } if *mscale_all_dim != 0.0 => {
            (yarn_mscale(*factor, *mscale) / yarn_mscale(*factor, *mscale_all_dim)) as f32
        }
        RopeScaling::Yarn { factor, .. } => yarn_mscale(*factor, 1.0) as f32,
        _ => 1.0,
    }
}

/// `(cos, sin)`, each `[rows, dim/2]` row-major: row `p` holds the angles of position `p`.
pub fn tables(spec: &RopeSpec, rows: usize) -> (Vec<f32>, Vec<f32>) {
    let freqs = inv_freq(spec);
    let scale = attention_factor(spec);
    let mut cos = Vec::with_capacity(rows * freqs.len());
    let mut sin = Vec::with_capacity(rows * freqs.len());
    for p in 0..rows {
        for &f in &freqs {
            let angle = p as f32 * f;
            cos.push(angle.cos() * scale);
            sin.push(angle.sin() * scale);
        }
    }
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_scaling_splits_frequencies_as_documented() {
        let spec = RopeSpec {
            base: 500000.0,
            dim: 128,
            scaling: RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max: 8192,
            },
        };
        let plain = inv_freq(&RopeSpec { scaling: RopeScaling::None, ..spec.clone() });
        let scaled = inv_freq(&spec);
        let kept = plain.iter().zip(&scaled).filter(|(a, b)| a == b).count();
        let divided = plain.iter().zip(&scaled).filter(|(a, b)| ((**a / 8.0) - **b).abs() < 1e-12).count();
        // models.md §4: 29 unscaled, 29 ×1/8 and 6 blended frequencies for hd 128.
        assert_eq!((kept, divided, 64 - kept - divided), (29, 29, 6));
    }

    #[test]
    fn yarn_deepseek_keeps_low_dims_and_divides_high_dims() {
        let spec = RopeSpec {
            base: 10000.0,
            dim: 64,
            scaling: RopeScaling::Yarn {
                factor: 40.0,
                original_max: 4096,
                beta_fast: 32.0,
                beta_slow: 1.0,
                mscale: 0.707,
                mscale_all_dim: 0.707,
                truncate: true,
            },
        };
        let plain = inv_freq(&RopeSpec { scaling: RopeScaling::None, ..spec.clone() });
        let scaled = inv_freq(&spec);
        for i in 0..=10 {
            assert!((plain[i] - scaled[i]).abs() <= plain[i] * 1e-6, "dim {i} should extrapolate");
        }
        for i in 23..32 {
            assert!((plain[i] / 40.0 - scaled[i]).abs() <= plain[i] * 1e-6, "dim {i} should interpolate");
        }
        assert_eq!(attention_factor(&spec), 1.0);
        assert!((yarn_mscale(40.0, 0.707) - 1.260804).abs() < 1e-6);
    }
}
