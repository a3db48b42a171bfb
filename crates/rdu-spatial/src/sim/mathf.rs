//! `exp` and `tanh` in f32 written without a call into libm, so that the loops applying them
//! over a tile vectorise (glibc's `expf`/`tanhf` are scalar calls: the GELU of a prompt's
//! feed-forward was a tenth of a prefill). Both are within a few f32 ulps of the correctly
//! rounded value (tested against f64 below), far inside the simulator's 1e-4 tolerances.

/// `ln 2` split in two (Cody–Waite): `k·LN2_HI` is exact for the `k` that occur here.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// Below `exp` of this is subnormal; above the next, infinite: inputs are clamped to them.
const EXP_MIN: f32 = -87.3;
const EXP_MAX: f32 = 88.7;

/// `eˣ`, clamped to the normal range of f32 (the clamp gives 1.2e-38 below `-87.3` and 3.4e38
/// above `88.7`, where the true value would be subnormal, zero or infinite).
#[inline]
pub(super) fn exp(x: f32) -> f32 {
    let x = x.clamp(EXP_MIN, EXP_MAX);
    // x = k·ln 2 + r with |r| ≤ ln 2 / 2; k by truncation after a shift that makes it positive.
    // Nothing here may branch, or a loop of it is not vectorised: the integer steps wrap rather
    // than check (tests build with overflow checks; the clamp keeps them far from overflow),
    // and the shifted value — in 2.5..=256.5 unless `x` is NaN — is bounded explicitly (a NaN
    // becomes 0; the NaN still reaches the result through `r`) and converted unchecked, where
    // a saturating `as i32` is a scalar conversion and NaN test per lane (it was a third of
    // the simulator's softmax time).
    // (`max` and `min`, not `clamp`: `clamp` keeps a NaN.)
    #[allow(clippy::manual_clamp)]
    let shifted = (x * std::f32::consts::LOG2_E + 0.5 + 128.0).max(0.0).min(300.0);
    // SAFETY: `shifted` is finite and within 0..=300, so it truncates to an i32 exactly.
    let ki = unsafe { shifted.to_int_unchecked::<i32>() }.wrapping_sub(128);
    let k = ki as f32;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    // e^r by its Taylor series to r⁸ (the first omitted term is below 3e-10 for |r| ≤ 0.35).
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0 + r * (1.0 / 40320.0))))))));
    // 2^k: k is in -126..=128 after the clamp; split in two so both factors are normal.
    let (k1, k2) = (ki / 2, ki.wrapping_sub(ki / 2));
    p * f32::from_bits((k1.wrapping_add(127) as u32) << 23) * f32::from_bits((k2.wrapping_add(127) as u32) << 23)
}

/// `tanh x`: its odd Taylor series below 0.5 (to x¹⁷: the first omitted term is below 5e-9 of
/// the value), `1 − 2/(e^{2x} + 1)` above, and ±1 beyond 10 (where f32's tanh is 1).
#[inline]
pub(super) fn tanh(x: f32) -> f32 {
    let a = x.abs().min(10.0);
    let s = a * a;
    let series = a
        * (1.0
            + s * (-1.0 / 3.0
                + s * (2.0 / 15.0
                    + s * (-17.0 / 315.0
                        + s * (62.0 / 2835.0
                            + s * (-1382.0 / 155_925.0
                                + s * (21_844.0 / 6_081_075.0
                                    + s * (-929_569.0 / 638_512_875.0 + s * (6_404_582.0 / 10_854_718_875.0)))))))));
    let far = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    let t = if a < 0.5 { series } else { far };
    t.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Largest error relative to `max(|exact|, floor)` over `xs`.
    fn worst(xs: impl Iterator<Item = f32>, ours: fn(f32) -> f32, exact: fn(f64) -> f64, floor: f64) -> (f64, f32) {
        xs.map(|x| {
            let e = exact(x as f64);
            (((ours(x) as f64) - e).abs() / e.abs().max(floor), x)
        })
        .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
    }

    fn grid(lo: f32, hi: f32, n: usize) -> impl Iterator<Item = f32> {
        (0..=n).map(move |i| lo + (hi - lo) * i as f32 / n as f32)
    }

    #[test]
    fn exp_is_within_a_few_ulps_of_the_exact_value() {
        let (err, at) = worst(grid(-87.0, 88.0, 400_000), exp, f64::exp, 0.0);
        assert!(err < 4.0 * f32::EPSILON as f64, "relative error {err:e} at {at}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-200.0) > 0.0 && exp(-200.0) < 2e-38, "clamped low: {}", exp(-200.0));
        assert!(exp(200.0).is_finite() && exp(200.0) > 1e38, "clamped high: {}", exp(200.0));
        assert!(exp(f32::NAN).is_nan(), "a NaN stays a NaN");
        assert_eq!((exp(f32::INFINITY), exp(f32::NEG_INFINITY)), (exp(200.0), exp(-200.0)));
    }

    #[test]
    fn tanh_is_within_a_few_ulps_of_the_exact_value_and_odd() {
        for (lo, hi) in [(-12.0, 12.0), (-0.6, 0.6), (-1e-3, 1e-3)] {
            let (err, at) = worst(grid(lo, hi, 200_000), tanh, f64::tanh, 1e-30);
            assert!(err < 4.0 * f32::EPSILON as f64, "relative error {err:e} at {at}");
        }
        for x in [0.0f32, 0.25, 0.5, 0.499_999_97, 3.0, 9.5, 1e-30] {
            assert_eq!(tanh(-x), -tanh(x), "{x}");
        }
        assert_eq!(tanh(20.0), 1.0);
        assert_eq!(tanh(0.0), 0.0);
    }
}
