//! Dequantisation of hand-built blocks of every supported ggml type, and the Q8_0 quantiser.

use half::f16;
use rdu_checkpoint::{quantize_q8_0, CheckpointError, GgmlType, Gguf, Q8Block};
use rdu_testkit::gguf_writer::{f16_bytes, GgufWriter};

/// Writes one tensor of `ty` with GGUF dims `[n]` and reads it back through `read_f32`.
fn dequant(ty: GgmlType, n: u64, data: Vec<u8>) -> Vec<f32> {
    let bytes = GgufWriter::new().tensor("t", &[n], ty.id(), data).build();
    let gguf = Gguf::from_bytes("blocks.gguf", bytes).unwrap();
    gguf.read_f32("t").unwrap()
}

#[test]
fn f32_f16_bf16() {
    let values = [1.0f32, -2.5, 0.0, 65504.0, 3.0e-5];
    let f32_bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(dequant(GgmlType::F32, 5, f32_bytes), values);
    let f16_data = values.iter().flat_map(|&v| f16_bytes(v)).collect();
    let expected: Vec<f32> = values.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    assert_eq!(dequant(GgmlType::F16, 5, f16_data), expected);
    // bf16 is the top half of an f32: 0x3FC0 -> 1.5, 0xC020 -> -2.5.
    let bf16_data = vec![0xC0, 0x3F, 0x20, 0xC0];
    assert_eq!(dequant(GgmlType::BF16, 2, bf16_data), [1.5, -2.5]);
}

#[test]
fn q8_0() {
    let mut block = f16_bytes(0.5).to_vec();
    block.extend((0..32).map(|i| (i as i8 - 16) as u8));
    block.extend_from_slice(&f16_bytes(-2.0));
    block.extend([127u8, 0x80].iter().chain(&[0; 30]));
    let y = dequant(GgmlType::Q8_0, 64, block);
    for (i, &v) in y[..32].iter().enumerate() {
        assert_eq!(v, 0.5 * (i as f32 - 16.0), "element {i}");
    }
    assert_eq!(&y[32..35], [-254.0, 256.0, -0.0]);
}

/// `Q8Block::to_bytes` writes the file layout `from_bytes` reads: the scale as f16, then the
/// 32 values as bytes, two's complement.
#[test]
fn q8_0_block_bytes_round_trip() {
    let mut file = f16_bytes(-2.0).to_vec();
    file.extend([127u8, 0x80, 0xff].iter().chain(&[1; 29]));
    let block = Q8Block::from_bytes(&file);
    assert_eq!((block.d, block.qs[0], block.qs[1], block.qs[2]), (-2.0, 127, -128, -1));
    assert_eq!(block.to_bytes().as_slice(), file.as_slice());
    assert_eq!(Q8Block::BYTES, file.len());
}

#[test]
fn q4_0() {
    let mut block = f16_bytes(0.5).to_vec();
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = dequant(GgmlType::Q4_0, 32, block);
    assert_eq!((y[0], y[8], y[15], y[16], y[31]), (-4.0, 0.0, 3.5, 3.5, -4.0));
    for j in 0..16 {
        assert_eq!(y[j], 0.5 * (j as f32 - 8.0));
        assert_eq!(y[j + 16], 0.5 * ((15 - j) as f32 - 8.0));
    }
}

#[test]
fn q5_0() {
    let qh: u32 = 0xAAAA_5555;
    let mut block = f16_bytes(0.25).to_vec();
    block.extend_from_slice(&qh.to_le_bytes());
    block.extend((0..16u8).map(|j| j | (j << 4)));
    let y = dequant(GgmlType::Q5_0, 32, block);
    // qs[0] = 0x00 with qh bit 0 set: 16 - 16 = 0; qs[1] low 1, qh bit 1 clear: 1 - 16.
    assert_eq!((y[0], y[1]), (0.0, -3.75));
    // qs[0] high 0, qh bit 16 clear: -16; qs[1] high 1, qh bit 17 set: 17 - 16.
    assert_eq!((y[16], y[17]), (-4.0, 0.25));
    for j in 0..16 {
        let q_lo = j | (((qh >> j) & 1) << 4);
        let q_hi = j | (((qh >> (j + 16)) & 1) << 4);
        assert_eq!(y[j as usize], 0.25 * (q_lo as f32 - 16.0), "element {j}");
        assert_eq!(y[j as usize + 16], 0.25 * (q_hi as f32 - 16.0), "element {}", j + 16);
    }
}

/// 6-bit scales and mins per sub-block, with values above 15 to exercise the packed high bits.
const SC: [u8; 8] = [1, 2, 3, 4, 17, 33, 50, 63];
const MN: [u8; 8] = [0, 5, 10, 63, 20, 40, 1, 48];

/// Packs `SC`/`MN` into the 12-byte k-quant scale layout (the inverse of ggml's unpacking).
fn packed_scales() -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = SC[j] | ((SC[j + 4] >> 4) << 6);
        s[j + 4] = MN[j] | ((MN[j + 4] >> 4) << 6);
        s[j + 8] = (SC[j + 4] & 0xF) | ((MN[j + 4] & 0xF) << 4);
    }
    s
}

/// The 4-bit quant of element `i` of sub-block `s` from the 128 packed bytes `qs`.
fn nibble(qs: &[u8], s: usize, i: usize) -> u8 {
    let byte = qs[32 * (s / 2) + i];
    if s & 1 == 0 {
        byte & 0xF
    } else {
        byte >> 4
    }
}

#[test]
fn q4_k() {
    let (d, dmin) = (0.5f32, 0.25f32);
    let qs: Vec<u8> = (0..128).map(|i| (i * 37 % 256) as u8).collect();
    let mut block = [f16_bytes(d), f16_bytes(dmin)].concat();
    block.extend_from_slice(&packed_scales());
    block.extend_from_slice(&qs);
    let y = dequant(GgmlType::Q4_K, 256, block);
    for s in 0..8 {
        for i in 0..32 {
            let q = f32::from(nibble(&qs, s, i));
            let expected = d * f32::from(SC[s]) * q - dmin * f32::from(MN[s]);
            assert_eq!(y[32 * s + i], expected, "sub-block {s} element {i}");
        }
    }
    // Element 32 (sub-block 1): qs[0] = 0 -> high nibble 0, so y = -dmin*5.
    assert_eq!(y[32], -1.25);
}

#[test]
fn q5_k() {
    let (d, dmin) = (0.5f32, 0.25f32);
    let qh: Vec<u8> = (0..32).map(|l| (l * 73 % 256) as u8).collect();
    let qs: Vec<u8> = (0..128).map(|i| (i * 37 % 256) as u8).collect();
    let mut block = [f16_bytes(d), f16_bytes(dmin)].concat();
    block.extend_from_slice(&packed_scales());
    block.extend_from_slice(&qh);
    block.extend_from_slice(&qs);
    let y = dequant(GgmlType::Q5_K, 256, block);
    for s in 0..8 {
        for i in 0..32 {
            // Sub-block s takes its fifth bit from bit s of qh[i].
            let q = nibble(&qs, s, i) | (((qh[i] >> s) & 1) << 4);
            let expected = d * f32::from(SC[s]) * f32::from(q) - dmin * f32::from(MN[s]);
            assert_eq!(y[32 * s + i], expected, "sub-block {s} element {i}");
        }
    }
    // Element 1: qs[1] = 37 -> low nibble 5; qh[1] = 73 = 0b1001001 -> bit 0 set: 21.
    assert_eq!(y[1], 0.5 * 1.0 * 21.0);
}

#[test]
fn q6_k() {
    let d = 0.5f32;
    let ql: Vec<u8> = (0..128).map(|i| (i * 59 % 256) as u8).collect();
    let qh: Vec<u8> = (0..64).map(|i| (i * 101 % 256) as u8).collect();
    let scales: Vec<i8> = (0..16).map(|i| (i * 9 - 70) as i8).collect();
    let mut block = ql.clone();
    block.extend_from_slice(&qh);
    block.extend(scales.iter().map(|&s| s as u8));
    block.extend_from_slice(&f16_bytes(d));
    let y = dequant(GgmlType::Q6_K, 256, block);
    for e in 0..256 {
        let (half, rest) = (e / 128, e % 128);
        let (k, l) = (rest / 32, rest % 32);
        let byte = ql[64 * half + l + 32 * (k % 2)];
        let low = if k < 2 { byte & 0xF } else { byte >> 4 };
        let high = (qh[32 * half + l] >> (2 * k)) & 3;
        let q = i32::from(low | (high << 4)) - 32;
        let expected = d * f32::from(scales[e / 16]) * q as f32;
        assert_eq!(y[e], expected, "element {e}");
    }
    // Element 0: ql[0] = 0, qh[0] = 0 -> q = -32, scale -70: 0.5 * -70 * -32.
    assert_eq!(y[0], 1120.0);
}

#[test]
fn q8_0_blocks_are_kept() {
    let mut data = Vec::new();
    for row in 0..2u8 {
        for block in 0..2u8 {
            data.extend_from_slice(&f16_bytes(f32::from(row * 2 + block + 1)));
            data.extend((0..32).map(|i: u8| i.wrapping_sub(row)));
        }
    }
    let bytes = GgufWriter::new().tensor("w", &[64, 2], GgmlType::Q8_0.id(), data).build();
    let gguf = Gguf::from_bytes("q8.gguf", bytes).unwrap();
    let q8 = gguf.read_q8_0("w").unwrap();
    assert_eq!(q8.shape, [2, 64]);
    assert_eq!(q8.blocks.len(), 4);
    assert_eq!(q8.blocks.iter().map(|b| b.d).collect::<Vec<_>>(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(q8.blocks[2].qs[0], -1);
    assert_eq!(q8.dequantize(), gguf.read_f32("w").unwrap());
}

#[test]
fn quantize_rounds_half_away_from_zero_with_an_f32_scale() {
    // max|x| = 127 gives d = 1 exactly, so q = round(x).
    let mut x = vec![0.0f32; 32];
    x[..6].copy_from_slice(&[127.0, 2.5, -2.5, 0.5, -0.5, 1.49]);
    let b = Q8Block::quantize(&x);
    assert_eq!(b.d, 1.0);
    assert_eq!(&b.qs[..6], [127, 3, -3, 1, -1, 1]);

    // max|x| = 1: d = 1/127 is stored as f16 (0.0078735…), but q uses the f32 d. For this
    // x, x/d_f32 = 100.497 rounds to 100 while x/d_f16 = 100.503 would round to 101.
    let d32 = 1.0f32 / 127.0;
    let mut x = vec![0.0f32; 32];
    x[0] = 1.0;
    x[1] = 100.497 * d32;
    let b = Q8Block::quantize(&x);
    assert_eq!(b.d, f16::from_f32(d32).to_f32());
    assert_ne!(b.d, d32);
    assert_eq!((b.qs[0], b.qs[1]), (127, 100));

    let zero = Q8Block::quantize(&[0.0; 32]);
    assert_eq!((zero.d, zero.qs), (0.0, [0; 32]));
}

#[test]
fn quantize_dequantize_error_is_within_half_a_step() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let values: Vec<f32> = (0..4 * 96)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 6.0
        })
        .collect();
    let q8 = quantize_q8_0(&values, &[4, 96]).unwrap();
    assert_eq!((q8.shape.as_slice(), q8.blocks.len()), ([4, 96].as_slice(), 12));
    let back = q8.dequantize();
    for (block, (x, y)) in values.chunks(32).zip(back.chunks(32)).enumerate() {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d32 = amax / 127.0;
        let d16 = q8.blocks[block].d;
        // Half a step of the f32 scale, plus the f16 rounding of d times |q| <= 127.
        let bound = 0.5 * d32 + 127.0 * (d32 - d16).abs() + 1e-6;
        for (i, (a, b)) in x.iter().zip(y).enumerate() {
            assert!((a - b).abs() <= bound, "block {block} element {i}: {a} vs {b}");
        }
    }
}

#[test]
fn quantize_rejects_bad_shapes() {
    for (len, shape) in [(40, vec![40]), (64, vec![2, 16, 2]), (64, vec![3, 32]), (0, vec![])] {
        let err = quantize_q8_0(&vec![0.0; len], &shape).unwrap_err();
        assert!(matches!(err, CheckpointError::QuantizeShape { .. }), "{err}");
    }
    let err = quantize_q8_0(&[0.0; 32], &[usize::MAX, 3]).unwrap_err();
    assert!(err.to_string().contains("overflows"), "{err}");
}
