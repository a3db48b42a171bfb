//! Seeded random weights for models without a checkpoint (presets, bare configs): the same
//! (seed, name, shape) always gives the same values, in the compiler and the host alike.

use crate::names::TensorName;
use crate::q8::{Q8Block, QK8_0};

/// The values of weight `name` of `shape` under `seed`. Projections are uniform with the
/// variance of `1/fan_in`; 1-D weights are small noise around a centre that suits their role
/// (norm weights around 1, or around 0 under the `(1+w)` convention).
pub fn seeded_weight(seed: u64, name: &str, shape: &[usize], unit_offset: bool) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let draw = Seeded::new(seed, name, shape, unit_offset);
    crate::fill::par_filled(n, 1 << 16, |i, out| draw.fill(i, out))
}

/// How [`seeded_weight`] draws each element of one weight: element `i` on its own, so a part
/// of a weight (a tensor-parallel slice, one Q8_0 block) is drawn without the rest.
#[derive(Clone, Copy, Debug)]
pub struct Seeded {
    key: u64,
    /// `Some(c)`: `c + amp · u` (1-D weights); `None`: `amp · u` (projections).
    centre: Option<f32>,
    amp: f32,
    /// A projection's Q8_0 scales ([`Seeded::fill_q8`]): the f16 bit patterns of `3/4` and all
    /// of `amp/127` (positive f16s order as their bits do).
    scales: (u16, u16),
}

/// `draw()` compiled for AVX-512 F and DQ where the CPU has them, else `None` (the caller then
/// draws portably). The stream's 64-bit multiplies are one instruction there (`vpmullq`)
/// instead of an emulation; the draws are integer arithmetic and exact conversions, so any
/// instructions give the same values (`the_compiled_draws_are_the_portable_draws`).
#[inline(always)]
fn on_avx512dq<R>(draw: impl FnOnce() -> R) -> Option<R> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512dq") {
        // SAFETY: called only where the CPU has AVX-512 F and DQ (detected just above).
        #[target_feature(enable = "avx512f,avx512dq")]
        unsafe fn compiled<R>(draw: impl FnOnce() -> R) -> R {
            draw()
        }
        // SAFETY: the CPU has AVX-512 F and DQ (DQ implies F).
        return Some(unsafe { compiled(draw) });
    }
    #[cfg(not(target_arch = "x86_64"))]
    drop(draw);
    None
}

impl Seeded {
    pub fn new(seed: u64, name: &str, shape: &[usize], unit_offset: bool) -> Seeded {
        let key = seed ^ fnv1a(name.as_bytes());
        if shape.len() == 1 {
            let base = TensorName::parse(name).base;
            let centre = match base.as_str() {
                "Alog" => 0.5,
                "ssma" => -1.5,
                "dtb" | "bq" | "bk" | "bv" => 0.0,
                _ if unit_offset && base != "gn" => 0.0,
                _ => 1.0,
            };
            Seeded { key, centre: Some(centre), amp: 0.1, scales: (0, 0) }
        } else {
            let fan_in = *shape.last().unwrap_or(&1) as f32;
            let amp = (3.0 / fan_in.max(1.0)).sqrt();
            let scale = |of: f32| half::f16::from_f32_const(of * amp / 127.0).to_bits();
            Seeded { key, centre: None, amp, scales: (scale(0.75), scale(1.0)) }
        }
    }

    /// Element `i` of the weight.
    #[inline]
    pub fn at(&self, i: usize) -> f32 {
        let u = uniform_at(self.key, i);
        match self.centre {
            Some(c) => c + self.amp * u,
            None => self.amp * u,
        }
    }

    /// Elements `start..start + out.len()` of the weight, into `out`.
    pub fn fill(&self, start: usize, out: &mut [f32]) {
        if on_avx512dq(|| self.fill_values(start, out)).is_none() {
            self.fill_values(start, out)
        }
    }

    #[inline(always)]
    fn fill_values(&self, start: usize, out: &mut [f32]) {
        // The stream's counter stepped by addition (element i's `key + (i+1)·GAMMA`, mod 2⁶⁴):
        // the same values as `at`, 1.4× as fast as the loop of `at` (measured, Zen 1), which
        // the compiler vectorises with emulated 64-bit multiplies.
        let mut z = counter(self.key, start);
        match self.centre {
            Some(c) => out.iter_mut().for_each(|v| {
                *v = c + self.amp * mix(z);
                z = z.wrapping_add(GAMMA);
            }),
            None => out.iter_mut().for_each(|v| {
                *v = self.amp * mix(z);
                z = z.wrapping_add(GAMMA);
            }),
        }
    }
}

impl Seeded {
    /// Q8_0 blocks `first..first + out.len()` of the weight, for a weight whose values only
    /// need to be Q8_0 blocks of its kind (certification's seeded Q8_0-stored weights). A
    /// projection's blocks are drawn as blocks: five SplitMix64 draws a block, four giving its
    /// 32 quants (a byte each, uniform over `[-127, 127]` — the range the quantiser's rounding
    /// of `amax/127`-scaled values gives — but for 0, twice as likely: the byte's −128 is taken
    /// as 0) and one its scale, an f16 drawn evenly from those between `3/4` and all of
    /// `amp/127`, so every value lies within the projection's `±amp` as its drawn values do and
    /// the blocks' largest values vary from block to block as quantised ones do — 6× fewer
    /// draws than drawing each of a block's values, and no quantiser. A 1-D weight (values
    /// around a centre, which a symmetric block cannot draw directly) is drawn value by value
    /// and quantised. Block `b` depends only on `(key, b)`: any run of blocks is drawn alone.
    pub fn fill_q8(&self, first: usize, out: &mut [Q8Block]) {
        if on_avx512dq(|| self.fill_q8_blocks(first, out)).is_none() {
            self.fill_q8_blocks(first, out)
        }
    }

    #[inline(always)]
    fn fill_q8_blocks(&self, first: usize, out: &mut [Q8Block]) {
        for (g, group) in out.chunks_mut(GROUP).enumerate() {
            let b0 = first + g * GROUP;
            match (self.centre, group.len()) {
                (None, GROUP) => {
                    let draws = group_draws(self.key, b0);
                    for (block, draws) in group.iter_mut().zip(draws.as_chunks::<Q8_DRAWS>().0) {
                        let (words, d) = self.projection_block_of(draws);
                        *block = Q8Block { d, qs: quants(words) };
                    }
                }
                _ => group.iter_mut().enumerate().for_each(|(j, block)| *block = self.q8_block(b0 + j)),
            }
        }
    }

    /// The values of Q8_0 blocks `first..` of the weight (see [`Seeded::fill_q8`]), exactly
    /// dequantised, into `out` (a whole number of blocks): `VALUE_BLOCKS` blocks at a time
    /// drawn as blocks ([`Seeded::fill_q8`]) into a buffer on the stack, then widened by
    /// [`crate::q8::dequant_blocks`]. One thread, on the Xeon VM, interleaved runs: 0.48–0.68 ns
    /// a value, against 1.46–1.54 drawing each block's values directly (their byte-by-byte
    /// conversion stayed scalar).
    pub fn fill_q8_values(&self, first: usize, out: &mut [f32]) {
        let mut blocks = [Q8Block { d: 0.0, qs: [0; QK8_0] }; VALUE_BLOCKS];
        for (c, values) in out.chunks_mut(VALUE_BLOCKS * QK8_0).enumerate() {
            let blocks = &mut blocks[..values.len() / QK8_0];
            self.fill_q8(first + c * VALUE_BLOCKS, blocks);
            crate::q8::dequant_blocks(blocks, values);
        }
    }

    /// Block `b` of [`Seeded::fill_q8`].
    #[inline(always)]
    fn q8_block(&self, b: usize) -> Q8Block {
        if self.centre.is_some() {
            let mut v = [0f32; QK8_0];
            self.fill(QK8_0 * b, &mut v);
            return Q8Block::quantize(&v);
        }
        let (words, d) = self.projection_block(b);
        Q8Block { d, qs: quants(words) }
    }

    /// A projection's block `b`: its quants, eight bytes (as `i8`s, little-endian) a word, and
    /// its scale.
    #[inline(always)]
    fn projection_block(&self, b: usize) -> ([u64; 4], f32) {
        let z = counter(self.key, Q8_DRAWS * b);
        self.projection_block_of(&[0u64, 1, 2, 3, 4].map(|w| mix64(z.wrapping_add(w.wrapping_mul(GAMMA)))))
    }

    /// [`Seeded::projection_block`] from the block's five draws.
    #[inline(always)]
    fn projection_block_of(&self, draws: &[u64; Q8_DRAWS]) -> ([u64; 4], f32) {
        let words = [draws[0], draws[1], draws[2], draws[3]].map(clear_0x80);
        let (lo, hi) = self.scales;
        let u = draws[4] >> 32;
        let bits = lo + ((u * (hi - lo + 1) as u64) >> 32) as u16;
        (words, half::f16::from_bits(bits).to_f32())
    }
}

impl Seeded {
    /// FP8 bytes `start..start + out.len()` of a projection stored FP8 (certification's seeded
    /// FP8 weights, drawn as stored — never drawn as values and quantised): each byte uniform
    /// over the 256 patterns, eight a draw, NaN (`S.1111.111`) taken as 0. Byte `i` depends
    /// only on `(key, i)`, so any part of the weight is drawn alone.
    pub fn fill_fp8(&self, start: usize, out: &mut [u8]) {
        for (k, o) in out.iter_mut().enumerate() {
            let i = start + k;
            let byte = (mix64(counter(self.key, i / 8)) >> (8 * (i % 8))) as u8;
            *o = if rdu_checkpoint::fp8_e4m3_is_nan(byte) { 0 } else { byte };
        }
    }

    /// Block scales `start..` of a projection stored FP8 (see [`Seeded::fill_fp8`]): each
    /// between 3/4 and all of `amp / 448`, so every value lies within the projection's `±amp`.
    pub fn fill_fp8_scales(&self, start: usize, out: &mut [f32]) {
        let top = self.amp / rdu_checkpoint::FP8_E4M3_MAX;
        for (k, o) in out.iter_mut().enumerate() {
            *o = top * (0.875 + 0.125 * uniform_at(self.key ^ SCALE_STREAM, start + k));
        }
    }

    /// MXFP4 blocks `first..first + out.len()` of a projection stored MXFP4, as ggml lays
    /// them out (drawn as stored): three draws a block, two giving its 32 nibbles (uniform)
    /// and one its scale byte, one of the two largest whose values (at most 6 times the scale)
    /// stay within the projection's `±amp`. Block `b` depends only on `(key, b)`.
    pub fn fill_mxfp4(&self, first: usize, out: &mut [[u8; rdu_checkpoint::MXFP4_BLOCK_BYTES]]) {
        let top = 127 + (self.amp / 6.0).log2().floor() as i32;
        let top = top.clamp(1, i32::from(rdu_checkpoint::MXFP4_MAX_SCALE)) as u8;
        for (k, block) in out.iter_mut().enumerate() {
            let z = counter(self.key, MXFP4_DRAWS * (first + k));
            let draw = |w: u64| mix64(z.wrapping_add(w.wrapping_mul(GAMMA)));
            block[0] = top - (draw(2) >> 63) as u8;
            block[1..9].copy_from_slice(&draw(0).to_le_bytes());
            block[9..17].copy_from_slice(&draw(1).to_le_bytes());
        }
    }
}

/// The stream of FP8 block scales: the weight's key with these bits flipped.
const SCALE_STREAM: u64 = 0x5CA1_E5F8_0000_0001;

/// SplitMix64 draws a [`Seeded::fill_mxfp4`] block takes.
const MXFP4_DRAWS: usize = 3;

/// Blocks whose draws are taken together: a block's five draws are consecutive counters of the
/// stream, so a group's are one run of them, mixed as one vector loop — block by block, each
/// block's draws were a chain of dependent multiplies that left the CPU waiting.
const GROUP: usize = 8;

/// Blocks [`Seeded::fill_q8_values`] draws at a time (2.3 KB of blocks on the stack).
const VALUE_BLOCKS: usize = 8 * GROUP;

/// The draws of blocks `b0..b0 + GROUP`: block `b0 + j`'s at `Q8_DRAWS·j..`, exactly the
/// values [`Seeded::projection_block`] draws.
#[inline(always)]
fn group_draws(key: u64, b0: usize) -> [u64; Q8_DRAWS * GROUP] {
    let mut draws = [0u64; Q8_DRAWS * GROUP];
    let mut z = counter(key, Q8_DRAWS * b0);
    for d in draws.iter_mut() {
        *d = mix64(z);
        z = z.wrapping_add(GAMMA);
    }
    draws
}

/// A block's 32 quants: its four words' little-endian bytes as one 32-byte value (built byte by
/// byte, a block was four 8-byte stores read back as one 32-byte load, which the CPU does not
/// forward).
#[inline(always)]
fn quants(words: [u64; 4]) -> [i8; QK8_0] {
    // SAFETY: `[u64; 4]` and `[i8; 32]` have the same size, and every bit pattern is an i8.
    unsafe { std::mem::transmute::<[u64; 4], [i8; QK8_0]>(words.map(u64::to_le)) }
}

/// The bytes of `x` with each 0x80 (as an `i8`, −128: outside the quantiser's range) made 0,
/// the others kept — eight at a time in one register (a byte is 0x80 exactly when it is zero
/// after flipping its top bit; that zero test is exact, carrying nothing between bytes).
#[inline(always)]
fn clear_0x80(x: u64) -> u64 {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const LOW: u64 = !HIGH;
    let t = x ^ HIGH;
    // A byte's top bit set in `m` exactly when the byte of `t` is not zero.
    let m = ((t & LOW) + LOW) | t;
    x & (m | LOW)
}

/// SplitMix64 draws a [`Seeded::fill_q8`] block takes.
const Q8_DRAWS: usize = 5;

/// FNV-1a: a stable 64-bit hash of a name (never `DefaultHasher`, whose values may change).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Element `i` of the SplitMix64 stream keyed by `key` (counter-based, so any element can be
/// computed on its own and chunks in parallel), mapped to a uniform value in [-1, 1).
pub fn uniform_at(key: u64, i: usize) -> f32 {
    mix(counter(key, i))
}

/// SplitMix64's increment.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The counter of element `i` of the stream keyed by `key`.
#[inline]
fn counter(key: u64, i: usize) -> u64 {
    key.wrapping_add((i as u64 + 1).wrapping_mul(GAMMA))
}

/// SplitMix64's output function of a counter, mapped to a uniform value in [-1, 1).
#[inline]
fn mix(z: u64) -> f32 {
    ((mix64(z) >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

/// SplitMix64's output function of a counter: 64 random bits.
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_inputs_same_values_and_names_differ() {
        let a = seeded_weight(7, "Wq3", &[4, 32], false);
        assert_eq!(a, seeded_weight(7, "Wq3", &[4, 32], false));
        assert_ne!(a, seeded_weight(7, "Wq4", &[4, 32], false));
        assert_ne!(a, seeded_weight(8, "Wq3", &[4, 32], false));
        let bound = (3.0f32 / 32.0).sqrt();
        assert!(a.iter().all(|v| v.abs() <= bound));
        let norm = seeded_weight(7, "an3", &[64], false);
        assert!(norm.iter().all(|v| (v - 1.0).abs() <= 0.1));
    }

    /// A projection's Q8_0 blocks drawn as blocks: any run of them alone is the same blocks;
    /// every value within the projection's `±amp`; quants over the whole of `[-127, 127]`,
    /// evenly; scales between `3/4` and all of `amp/127`. A 1-D weight's blocks are its drawn
    /// values quantised.
    #[test]
    fn q8_blocks_are_drawn_alone_within_the_weights_range() {
        let zero = Q8Block { d: 0.0, qs: [0; QK8_0] };
        let draw = Seeded::new(5, "Wu2", &[256, 512], false);
        let mut whole = vec![zero; 4096];
        draw.fill_q8(0, &mut whole);
        for (first, len) in [(0, 1), (7, 100), (4000, 96)] {
            let mut part = vec![zero; len];
            draw.fill_q8(first, &mut part);
            assert_eq!(part, whole[first..first + len], "blocks {first}..{}", first + len);
            let mut values = vec![0f32; QK8_0 * len];
            draw.fill_q8_values(first, &mut values);
            for (b, v) in whole[first..first + len].iter().zip(values.chunks(QK8_0)) {
                assert!(v.iter().zip(b.qs).all(|(&v, q)| v == q as f32 * b.d), "values of blocks from {first}");
            }
        }
        let amp = (3.0f32 / 512.0).sqrt();
        let mut counts = [0usize; 255];
        for b in &whole {
            assert!(b.d >= 0.74 * amp / 127.0 && b.d <= 1.001 * amp / 127.0, "scale {}", b.d);
            for &q in &b.qs {
                assert!(q >= -127, "a quant of -128");
                assert!((q as f32 * b.d).abs() <= 1.001 * amp);
                counts[(q as i32 + 127) as usize] += 1;
            }
        }
        // 131,072 quants, a 256th of them each value (~512) but 0, which has two 256ths.
        let (zero_count, others) = (counts[127], counts.iter().enumerate().filter(|&(i, _)| i != 127));
        let (lo, hi) = others.fold((usize::MAX, 0), |(lo, hi), (_, &c)| (lo.min(c), hi.max(c)));
        assert!(lo > 400 && hi < 630, "quant counts {lo}..{hi}");
        assert!((900..1150).contains(&zero_count), "zero {zero_count} times");
        let mut other = vec![zero; 4096];
        Seeded::new(6, "Wu2", &[256, 512], false).fill_q8(0, &mut other);
        assert_ne!(other, whole, "another seed, other blocks");
        // A norm weight (values around 1): its values drawn, then quantised.
        let norm = Seeded::new(5, "an2", &[64], false);
        let mut blocks = vec![zero; 2];
        norm.fill_q8(0, &mut blocks);
        let values = seeded_weight(5, "an2", &[64], false);
        assert_eq!(blocks, values.chunks(QK8_0).map(Q8Block::quantize).collect::<Vec<_>>());
    }

    /// `clear_0x80` makes exactly the bytes 0x80 zero, in every position, whatever the others.
    #[test]
    fn clear_0x80_clears_exactly_the_bytes_0x80() {
        for pos in 0..8 {
            for b in 0..=255u64 {
                for rest in [0u64, u64::MAX, 0x8080_8080_8080_8080, 0x7f7f_7f7f_7f7f_7f7f, 0x0123_4567_89ab_cdef] {
                    let x = (rest & !(0xff << (8 * pos))) | (b << (8 * pos));
                    let want = u64::from_le_bytes(x.to_le_bytes().map(|v| if v == 0x80 { 0 } else { v }));
                    assert_eq!(clear_0x80(x), want, "{x:#018x}");
                }
            }
        }
    }

    /// `fill` steps the counter by addition: the values `at` gives one by one, from any start.
    #[test]
    fn fill_is_at_element_by_element() {
        for (name, shape) in [("Wq3", vec![8, 96]), ("an3", vec![96])] {
            let draw = Seeded::new(11, name, &shape, false);
            let mut out = vec![0f32; 300];
            draw.fill(500, &mut out);
            for (j, v) in out.iter().enumerate() {
                assert_eq!(v.to_bits(), draw.at(500 + j).to_bits(), "{name} element {}", 500 + j);
            }
        }
    }

    /// What the CPU's compiled copies (AVX-512, AVX2) draw is what the portable loops draw:
    /// the same blocks, and their values exactly dequantised.
    #[test]
    fn the_compiled_draws_are_the_portable_draws() {
        for (name, shape) in [("Wq3", vec![64, 96]), ("an3", vec![96])] {
            let draw = Seeded::new(11, name, &shape, false);
            let (mut got, mut want) = (vec![Q8Block { d: 0.0, qs: [0; QK8_0] }; 40], vec![]);
            draw.fill_q8(7, &mut got);
            want.extend((7..47).map(|b| draw.q8_block(b)));
            assert_eq!(got, want, "{name}");
            let mut values = vec![0f32; 40 * QK8_0];
            draw.fill_q8_values(7, &mut values);
            for (block, values) in want.iter().zip(values.chunks_exact(QK8_0)) {
                let mut exact = [0f32; QK8_0];
                crate::q8::dequant_block(block, &mut exact);
                assert_eq!(values.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), exact.map(f32::to_bits), "{name}");
            }
        }
    }
}
