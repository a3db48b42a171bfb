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

#[cfg(test)]
mod tests {
    use super::*;

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
