//! Dequantisation of the 256-element k-quant super-blocks Q4_K, Q5_K and Q6_K (not their
//! quantisation), one block into a slice of its values, as `quants` does.

use crate::quants::f16_at;

/// `{f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}`: 8 sub-blocks of 32 with 6-bit scales/mins.
#[inline(always)]
pub(crate) fn q4_k(block: &[u8], out: &mut [f32]) {
    nibbles_k(block, &block[16..144], None, out)
}

/// `{f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}`: as Q4_K with a fifth bit per
/// element: for chunk c, element `64c+l` takes bit `2c` of `qh[l]`, element `64c+32+l` bit `2c+1`.
#[inline(always)]
pub(crate) fn q5_k(block: &[u8], out: &mut [f32]) {
    nibbles_k(block, &block[48..176], Some(&block[16..48]), out)
}

/// Q4_K (no `qh`) and Q5_K: `d·sc·q − dmin·m` per sub-block of 32, `q` a nibble of `qs` with
/// its fifth bit from `qh` when there is one.
#[inline(always)]
fn nibbles_k(block: &[u8], qs: &[u8], qh: Option<&[u8]>, out: &mut [f32]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let scales = &block[4..16];
    for chunk in 0..4 {
        let q = &qs[32 * chunk..32 * chunk + 32];
        let (d1, m1) = k_scale_min(d, dmin, scales, 2 * chunk);
        let (d2, m2) = k_scale_min(d, dmin, scales, 2 * chunk + 1);
        let (lo, hi) = out[64 * chunk..64 * chunk + 64].split_at_mut(32);
        for l in 0..32 {
            let high = |bit: usize| qh.map_or(0, |qh| ((qh[l] >> bit) & 1) << 4);
            lo[l] = d1 * f32::from((q[l] & 0xF) | high(2 * chunk)) - m1;
            hi[l] = d2 * f32::from((q[l] >> 4) | high(2 * chunk + 1)) - m2;
        }
    }
}

/// `{u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}`: 16 sub-blocks of 16 with 8-bit scales,
/// 6-bit quants (4 low bits in `ql`, 2 high bits in `qh`) offset by 32.
#[inline(always)]
pub(crate) fn q6_k(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 208);
    let scales = &block[192..208];
    for half in 0..2 {
        let ql = &block[64 * half..64 * half + 64];
        let qh = &block[128 + 32 * half..128 + 32 * half + 32];
        let y = &mut out[128 * half..128 * half + 128];
        for k in 0..4 {
            // Element 128·half + 32k + l; its scale is sub-block (32k + l) / 16.
            let (s0, s1) = (scales[8 * half + 2 * k] as i8, scales[8 * half + 2 * k + 1] as i8);
            let (ds0, ds1) = (d * f32::from(s0), d * f32::from(s1));
            for l in 0..32 {
                let q = match k {
                    0 => (ql[l] & 0xF) | ((qh[l] & 3) << 4),
                    1 => (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                    2 => (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                    _ => (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
                };
                let ds = if l < 16 { ds0 } else { ds1 };
                y[32 * k + l] = ds * f32::from(i16::from(q) - 32);
            }
        }
    }
}

/// Scale `d*sc` and offset `dmin*m` of Q4_K / Q5_K sub-block `j` from the 12 packed 6-bit
/// scale bytes.
#[inline(always)]
pub fn k_scale_min(d: f32, dmin: f32, scales: &[u8], j: usize) -> (f32, f32) {
    let (sc, m) = if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        ((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))
    };
    (d * f32::from(sc), dmin * f32::from(m))
}
