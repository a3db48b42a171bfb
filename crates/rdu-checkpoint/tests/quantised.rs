//! FP8 (e4m3fn) and MXFP4 decoded exactly as third-party code decodes them — every byte and
//! every scale against the tables `tests/data/fixtures/tools/make_quantised.py` recorded from
//! torch, gguf-py and transformers — and the safetensors readers of DeepSeek's and gpt-oss's
//! layouts, with their one-line refusals.

use rdu_checkpoint::{
    fp8_e4m3_to_f32, mxfp4_from_hf, quantize_mxfp4, CheckpointError, GgmlType, Gguf, SafeTensors, FP8_E4M3,
};
use rdu_testkit::gguf_writer::GgufWriter;
use rdu_testkit::safetensors_edit::{read, write, Stored};
use rdu_testkit::{fixtures, npy};

/// Bit for bit, NaN as NaN (whatever its payload).
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn every_fp8_byte_is_torchs_float8_e4m3fn() {
    let want = npy::f32(fixtures::quantised("fp8_e4m3.npy"));
    assert_eq!(want.len(), 256);
    for (b, &w) in want.iter().enumerate() {
        assert!(same(FP8_E4M3[b], w), "byte {b:#04x}: {} against torch's {w}", FP8_E4M3[b]);
        assert!(same(fp8_e4m3_to_f32(b as u8), w));
    }
}

/// 256 ggml MXFP4 blocks: block `e` has scale byte `e`, and byte `j` of its nibbles holds
/// `j | (15 - j) << 4`: every nibble in both halves (the tables' construction).
fn blocks() -> Vec<u8> {
    (0..256u32).flat_map(|e| std::iter::once(e as u8).chain((0..16u8).map(|j| j | ((15 - j) << 4)))).collect()
}

#[test]
fn every_mxfp4_scale_and_nibble_is_gguf_pys_and_transformers() {
    let bytes = blocks();
    let file = GgufWriter::new().tensor("t", &[32, 256], GgmlType::MXFP4.id(), bytes.clone()).build();
    let ours = Gguf::from_bytes("mxfp4.gguf", file).unwrap().read_f32("t").unwrap();
    let want = npy::f32(fixtures::quantised("mxfp4_gguf_py.npy"));
    assert_eq!(ours.len(), want.len());
    for (i, (&a, &b)) in ours.iter().zip(&want).enumerate() {
        assert!(same(a, b), "block {} value {}: {a} against gguf-py's {b}", i / 32, i % 32);
    }
    // The same values in the HF layout (value 2j low nibble of byte j, 2j + 1 high), regrouped.
    let hf = npy::f32(fixtures::quantised("mxfp4_transformers.npy"));
    // Value v of every block: nibble v in the low half, 15 − (v − 16) in the high one.
    let code = |v: usize| if v < 16 { v as u8 } else { 15 - (v - 16) as u8 };
    let packed: Vec<u8> = (0..256).flat_map(|_| (0..16).map(move |j| code(2 * j) | (code(2 * j + 1) << 4))).collect();
    let scales: Vec<u8> = (0..=255).collect();
    // Scale bytes past 252 are refused as a weight's (their blocks overflow f32), so regroup
    // the in-range ones and compare those; the dequantiser itself was held to every byte above.
    let w = mxfp4_from_hf(&packed[..253 * 16], &[253, 1, 16], &scales[..253], &[253, 1]).unwrap();
    for (i, (&a, &b)) in w.dequantize().iter().zip(&hf).enumerate() {
        // transformers' table has −0 for the negative zero nibble; ggml's (and rdu's) +0.
        assert!(
            same(a, b) || (a == 0.0 && b == 0.0),
            "block {} value {}: {a} against transformers' {b}",
            i / 32,
            i % 32
        );
    }
}

#[test]
fn mxfp4_quantiser_values_are_its_blocks() {
    let values: Vec<f32> = (0..64).map(|i| ((i * 37 % 29) as f32 - 14.0) * 0.37).collect();
    let w = quantize_mxfp4(&values, &[2, 32]).unwrap();
    assert_eq!(w.bytes.len(), 2 * 17);
    // Every value within half a step of the block's largest magnitude (6 times the scale).
    for (b, chunk) in values.chunks(32).enumerate() {
        let scale = 2f32.powi(i32::from(w.bytes[b * 17]) - 127);
        let back = &w.dequantize()[b * 32..(b + 1) * 32];
        assert!(chunk.iter().zip(back).all(|(a, q)| (a - q).abs() <= scale), "block {b}");
    }
}

/// The llama_fp8 fixture's checkpoint with `edit` applied, written to `dir`.
fn edited(dir: &std::path::Path, edit: impl FnOnce(&mut std::collections::BTreeMap<String, Stored>)) -> SafeTensors {
    let mut tensors = read(&fixtures::quantised("llama_fp8").join("model.safetensors"));
    edit(&mut tensors);
    let path = dir.join("model.safetensors");
    write(&path, &tensors);
    SafeTensors::open(&path).unwrap()
}

const WQ: &str = "model.layers.0.self_attn.q_proj.weight";

#[test]
fn deepseeks_fp8_layout_reads_as_stored_with_ragged_blocks() {
    let st = SafeTensors::open(fixtures::quantised("llama_fp8")).unwrap();
    let w = st.read_fp8(WQ, [24, 40]).unwrap();
    assert_eq!((w.shape.clone(), w.scales.len()), (vec![64, 64], 3 * 2), "a 3 × 2 grid, ragged both ways");
    let down = st.read_fp8("model.layers.1.mlp.down_proj.weight", [24, 40]).unwrap();
    assert_eq!((down.shape.clone(), down.scales.len()), (vec![64, 128], 3 * 4));
    // Every value is its byte's times its block's scale.
    let values = w.dequantize();
    assert_eq!(values[63 * 64 + 63], fp8_e4m3_to_f32(w.values[63 * 64 + 63]) * w.scales[2 * 2 + 1]);
}

#[test]
fn fp8_refusals_are_one_line_naming_the_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let lines = |e: CheckpointError| {
        let text = e.to_string();
        assert_eq!(text.lines().count(), 1, "{text}");
        text
    };
    let missing = edited(tmp.path(), |t| {
        t.remove(&format!("{WQ}_scale_inv"));
    });
    let e = lines(missing.read_fp8(WQ, [24, 40]).unwrap_err());
    assert!(
        e.ends_with(&format!("tensor `{WQ}`: stored F8_E4M3, but the checkpoint has no block scales `{WQ}_scale_inv`")),
        "{e}"
    );
    let st = SafeTensors::open(fixtures::quantised("llama_fp8")).unwrap();
    let e = lines(st.read_fp8(WQ, [32, 32]).unwrap_err());
    assert!(
        e.ends_with(&format!("block scales `{WQ}_scale_inv` are [3, 2], but 32×32 blocks of [64, 64] need [2, 2]")),
        "{e}"
    );
    let e = lines(st.read_fp8("model.norm.weight", [24, 40]).unwrap_err());
    assert!(e.contains("stored F32, where fp8 storage reads F8_E4M3"), "{e}");
}

/// compressed-tensors' layout (`make_fp8_glm_ct.py`): `weight_scale` beside the weight, BF16
/// `[out, 1]` for one scale per row (blocks of `1 × in`); one scale per matrix stored `[]` or
/// `[1]` (the `tensor` strategy) reads as the single block of the matrix.
#[test]
fn compressed_tensors_fp8_scales_read_by_row_and_by_matrix() {
    let wo = "model.layers.1.self_attn.o_proj.weight";
    let dir = fixtures::quantised("glm4_moe_fp8_channel");
    let st = SafeTensors::open(&dir).unwrap();
    let w = st.read_fp8(wo, [1, 64]).unwrap();
    assert_eq!((w.shape.clone(), w.scales.len()), (vec![64, 64], 64), "one scale a row");
    let bf16 = st.read_f32(&format!("{wo}_scale")).unwrap();
    let values = w.dequantize();
    for (r, &scale) in bf16.iter().enumerate() {
        assert_eq!(values[r * 64 + 17], fp8_e4m3_to_f32(w.values[r * 64 + 17]) * scale, "row {r}");
    }
    let e = st.read_fp8(wo, [8, 16]).unwrap_err().to_string();
    assert!(e.ends_with(&format!("scales `{wo}_scale` are [64, 1], but 8×16 blocks of [64, 64] need [8, 4]")), "{e}");
    let tmp = tempfile::tempdir().unwrap();
    for shape in [vec![], vec![1]] {
        let mut tensors = read(&dir.join("model.safetensors"));
        let one = Stored { dtype: "F32".into(), shape: shape.clone(), bytes: 0.5f32.to_le_bytes().to_vec() };
        tensors.insert(format!("{wo}_scale"), one);
        let path = tmp.path().join("model.safetensors");
        write(&path, &tensors);
        let w = SafeTensors::open(&path).unwrap().read_fp8(wo, [64, 64]).unwrap();
        assert_eq!(w.scales, vec![0.5], "{shape:?}");
        assert_eq!(w.dequantize()[5], fp8_e4m3_to_f32(w.values[5]) * 0.5, "{shape:?}");
    }
}

#[test]
fn gpt_oss_mxfp4_layout_refusals_are_one_line() {
    let dir = fixtures::quantised("qwen3_moe_mxfp4");
    let name = "model.layers.0.mlp.experts.3.down_proj.weight";
    let st = SafeTensors::open(&dir).unwrap();
    assert_eq!(st.read_mxfp4(name).unwrap().shape, vec![64, 32]);
    let tmp = tempfile::tempdir().unwrap();
    let mut tensors = read(&dir.join("model.safetensors"));
    // A block count that does not match the shape: one group of scales short.
    let scales = tensors.get_mut(&format!("{name}_scales")).unwrap();
    scales.shape = vec![63, 1];
    scales.bytes.truncate(63);
    // A scale out of range (255: NaN in e8m0).
    tensors.get_mut("model.layers.1.mlp.experts.0.up_proj.weight_scales").unwrap().bytes[5] = 255;
    let path = tmp.path().join("model.safetensors");
    write(&path, &tensors);
    let st = SafeTensors::open(&path).unwrap();
    let e = st.read_mxfp4(name).unwrap_err().to_string();
    assert!(
        e.ends_with("scales of shape [63, 1] do not match blocks of shape [64, 1, 16] (want [64, 1]: one per block)"),
        "{e}"
    );
    let e = st.read_mxfp4("model.layers.1.mlp.experts.0.up_proj.weight").unwrap_err().to_string();
    assert!(e.ends_with("MXFP4 block 5 has scale byte 255 (NaN in e8m0); scales are at most 252 (2^125)"), "{e}");
    assert_eq!(e.lines().count(), 1);
}
