//! `eˣ` in f64 over a whole slice, written without a call into libm so that the loop
//! vectorises: glibc's `exp` is a scalar call, and attention's softmax takes one for every
//! score (268 million for one of deepseek-v2's real prefill chunks). Within a few f64 ulps of
//! the correctly rounded value (tested against libm below): its error is some 10¹¹ times below
//! the f32 results the reference is compared in. The same arithmetic on every CPU — no fused
//! multiply-adds — so the values do not depend on which loop runs.

/// `ln 2` split in two (fdlibm's `ln2_hi`, `ln2_lo`): `k·LN2_HI` is exact for `|k| < 2²⁰`.
const LN2_HI: f64 = 0.693_147_180_369_123_8;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
/// Above this, `eˣ` is past f64's largest value; below the next it rounds to 0.
const EXP_MAX: f64 = 709.782_712_893_384;
const EXP_MIN: f64 = -745.133_219_101_941_1;

/// `1/n!` for `n = 0..=13`: `eʳ`'s Taylor coefficients.
const TAYLOR: [f64; 14] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5_040.0,
    1.0 / 40_320.0,
    1.0 / 362_880.0,
    1.0 / 3_628_800.0,
    1.0 / 39_916_800.0,
    1.0 / 479_001_600.0,
    1.0 / 6_227_020_800.0,
];

/// Every `x` of `xs` becomes `eˣ` (∞ above `EXP_MAX`, 0 below `EXP_MIN`, NaN for NaN).
pub(super) fn exp_all(xs: &mut [f64]) {
    #[inline(always)]
    fn each(xs: &mut [f64]) {
        xs.iter_mut().for_each(|x| *x = exp(*x));
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: called only where the CPU has AVX-512F (detected below).
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512(xs: &mut [f64]) {
            each(xs)
        }
        // SAFETY: called only where the CPU has AVX2 (detected below).
        #[target_feature(enable = "avx2")]
        unsafe fn avx2(xs: &mut [f64]) {
            each(xs)
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { avx512(xs) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { avx2(xs) };
        }
    }
    each(xs)
}

/// `eˣ`: `x = k·ln 2 + r` with `|r| ≤ ln 2 / 2`, `eʳ` by its Taylor series to `r¹³` (the first
/// omitted term is below 5e-18), times `2ᵏ` as two normal powers of two. Nothing branches (a
/// loop of it must vectorise): the ends are selected, and `k` comes from a value bounded
/// explicitly (a NaN becomes 0 there and still reaches the result through `r`) and converted
/// unchecked, where a saturating `as` is a scalar conversion and NaN test per value.
#[inline(always)]
pub(super) fn exp(x: f64) -> f64 {
    // (`max` and `min`, not `clamp`: `clamp` keeps a NaN.)
    #[allow(clippy::manual_clamp)]
    let shifted = (x * std::f64::consts::LOG2_E + 0.5 + 1100.0).max(0.0).min(2200.0);
    // SAFETY: `shifted` is finite and within 0..=2200, so it truncates to an i32 exactly.
    let ki = unsafe { shifted.to_int_unchecked::<i32>() }.wrapping_sub(1100);
    let k = f64::from(ki);
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let mut q = TAYLOR[13];
    for c in TAYLOR[..13].iter().rev() {
        q = q * r + c;
    }
    let (k1, k2) = (ki / 2, ki.wrapping_sub(ki / 2));
    let two = |k: i32| f64::from_bits((i64::from(k).wrapping_add(1023) as u64) << 52);
    let v = q * two(k1) * two(k2);
    if x > EXP_MAX {
        f64::INFINITY
    } else if x < EXP_MIN {
        0.0
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::{exp, exp_all};

    /// Within 4 ulps of libm's `exp` over the whole range, and the ends exact.
    #[test]
    fn exp_is_within_a_few_ulps_of_libm() {
        let n = 2_000_000;
        let xs: Vec<f64> = (0..=n).map(|i| -745.0 + 1454.7 * i as f64 / n as f64).collect();
        let mut got = xs.clone();
        exp_all(&mut got);
        for (&x, &g) in xs.iter().zip(&got) {
            let want = x.exp();
            // Relative to the value, or to the smallest normal below it (subnormal results).
            let err = (g - want).abs() / want.max(f64::MIN_POSITIVE);
            assert!(err <= 4.0 * f64::EPSILON, "exp({x}) = {g}, libm {want}: relative error {err:e}");
            assert_eq!(g.to_bits(), exp(x).to_bits(), "the vector loop differs from the scalar at {x}");
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!((exp(-746.0), exp(-1e300), exp(f64::NEG_INFINITY)), (0.0, 0.0, 0.0));
        assert_eq!((exp(710.0), exp(f64::INFINITY)), (f64::INFINITY, f64::INFINITY));
        assert!(exp(f64::NAN).is_nan());
        for x in [1e-300, -1e-300, 1e-17, -1e-17, 0.5, -0.5, 1.0, -1.0, 7.5, -300.25] {
            let err = (exp(x) - x.exp()).abs() / x.exp();
            assert!(err <= 2.0 * f64::EPSILON, "exp({x}): {err:e}");
        }
    }
}
