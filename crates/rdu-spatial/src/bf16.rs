//! Rounding to bfloat16, the storage of a `bf16` state (`storage=bf16`).
//!
//! The one function both executors use: the simulator when an op writes a bf16 state, and the
//! compiler's reference interpreter at the same write, so that certification compares like
//! with like. Round to nearest, ties to even — what torch's `.to(torch.bfloat16)` does — and
//! back to f32, which holds every bf16 value exactly (reads widen exactly).

/// `x` rounded to the nearest bfloat16 (ties to even), as an f32. NaN stays NaN, ±inf stay.
pub fn round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// Rounds every value of `values` to bfloat16 in place.
pub fn round_bf16_slice(values: &mut [f32]) {
    for v in values {
        *v = round_bf16(*v);
    }
}

/// Whether every value of `values` is a bfloat16 value (rounding leaves it as it is; any NaN
/// counts as one).
pub fn all_bf16(values: &[f32]) -> bool {
    values.iter().all(|&v| v.is_nan() || round_bf16(v).to_bits() == v.to_bits())
}

/// `x` rounded to bfloat16 as [`round_bf16`] rounds it, unless `x` lies within `band` (relative)
/// of the midpoint between its two bfloat16 neighbours and `other` is one of them: then `other`.
///
/// Certification's tie rule. The simulator computes a value in f32 and the reference in f64
/// (stored f32); the two agree to ~1e-6, but where that value sits on a rounding midpoint they
/// may round to different neighbours, a difference of 2⁻⁸ relative that says nothing about the
/// program. Within the band either neighbour is a correct rounding at the reference's own
/// accuracy; anywhere else the reference rounds on its own and the two must agree.
pub fn round_bf16_near(x: f32, other: f32, band: f32) -> f32 {
    let rounded = round_bf16(x);
    if other == rounded || !x.is_finite() || !other.is_finite() {
        return rounded;
    }
    // The neighbours are x truncated to bf16 (toward zero) and the next bf16 away from zero;
    // their midpoint is x's upper half with the rounding bit set, an exact f32.
    let upper = x.to_bits() & 0xFFFF_0000;
    let toward_zero = f32::from_bits(upper);
    let away = f32::from_bits(upper + 0x1_0000);
    let midpoint = f32::from_bits(upper | 0x8000);
    let near = ((x - midpoint).abs() as f64) <= band as f64 * midpoint.abs() as f64;
    if near && (other == toward_zero || other == away) {
        other
    } else {
        rounded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_near_a_midpoint_takes_the_other_engines_neighbour_and_no_other_value_does() {
        let (lo, hi) = (1.0f32, 1.0 + 2f32.powi(-7));
        let mid = 1.0 + 2f32.powi(-8);
        let just_above = f32::from_bits(mid.to_bits() + 3);
        assert_eq!(round_bf16(just_above), hi);
        // Within the band of the midpoint: either neighbour, as the other engine rounded.
        assert_eq!(round_bf16_near(just_above, lo, 1e-4), lo);
        assert_eq!(round_bf16_near(just_above, hi, 1e-4), hi);
        assert_eq!(round_bf16_near(mid, hi, 1e-4), hi, "an exact tie may go either way too");
        // A value that is not a neighbour is never taken.
        assert_eq!(round_bf16_near(just_above, 1.0 + 2f32.powi(-6), 1e-4), hi);
        assert_eq!(round_bf16_near(just_above, 0.5, 1e-4), hi);
        // Outside the band: the value's own rounding, whatever the other engine stored.
        let far = 1.0 + 2f32.powi(-8) + 2f32.powi(-10);
        assert_eq!(round_bf16_near(far, lo, 1e-4), hi);
        assert_eq!(round_bf16_near(1.0 + 2f32.powi(-10), hi, 1e-4), lo);
        // Negative values mirror: the neighbour toward zero and the one away from it.
        assert_eq!(round_bf16_near(-just_above, -lo, 1e-4), -lo);
        assert_eq!(round_bf16_near(-just_above, lo, 1e-4), -hi);
        // A bf16 value is never near a midpoint: it stays, whatever the other engine stored.
        assert_eq!(round_bf16_near(hi, lo, 1e-4), hi);
        assert!(round_bf16_near(f32::NAN, 1.0, 1e-4).is_nan());
    }

    #[test]
    fn rounds_to_nearest_even_as_torch() {
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
        assert_eq!(round_bf16(1.0 + 2f32.powi(-8)), 1.0);
        // 1 + 3·2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to the even one, 1 + 2^-6.
        assert_eq!(round_bf16(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        // Above the tie rounds up; bf16 values are fixed points.
        assert_eq!(round_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 1.0 + 2f32.powi(-7));
        assert_eq!(round_bf16(-0.3125), -0.3125);
        // 0.1 rounds to 0x3DCD (0.10009765625).
        let tenth = f32::from_bits(0x3DCD_0000);
        assert_eq!(round_bf16(0.1), tenth);
        assert!(round_bf16(f32::NAN).is_nan());
        assert_eq!(round_bf16(f32::INFINITY), f32::INFINITY);
        let mut v = [0.1f32, -0.1];
        round_bf16_slice(&mut v);
        assert_eq!(v, [tenth, -tenth]);
    }
}
