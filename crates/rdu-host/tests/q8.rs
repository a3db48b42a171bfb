//! Q8_0 storage: quantised on load over a dense checkpoint, kept as blocks from a Q8_0 GGUF, within Q8_0 error of the dense run.

use crate::common;

use common::*;
use rdu_host::{Host, WeightsSource};
use rdu_testkit::gguf_writer::{write_tensors, Data};
use rdu_testkit::Tolerance;

const TOKENS: [u32; 3] = [2, 11, 6];

fn logits(host: &mut Host, tokens: &[u32]) -> Vec<Vec<f32>> {
    tokens.iter().enumerate().map(|(pos, &t)| host.step(&[t], pos).unwrap().logits.as_f32().unwrap().to_vec()).collect()
}

#[test]
fn q8_0_storage_over_a_dense_checkpoint_quantises_on_load() {
    let tmp = tempfile::tempdir().unwrap();
    let values = values();
    let hf = tmp.path().join("hf");
    write_safetensors(&hf, &checkpoint_tensors(&values));
    let dense_dir = write_bundle(&tmp.path().join("dense"), Variant::Dense);
    let q8_dir = write_bundle(&tmp.path().join("q8"), Variant::Q8);
    let mut dense = Host::load(&dense_dir, &WeightsSource::Hf(hf.clone()), &mut |_, _, _| {}).unwrap();
    let mut q8 = Host::load(&q8_dir, &WeightsSource::Hf(hf), &mut |_, _, _| {}).unwrap();

    let w = q8.weights();
    assert_eq!(w.q8.keys().collect::<Vec<_>>(), ["W0", "W1", "Wout"]);
    assert!(!w.dense.contains_key("W0") && w.dense.contains_key("E"));
    let want_blocks = rdu_checkpoint::quantize_q8_0(&values["W1"], &[D, D]).unwrap();
    let got: Vec<(f32, [i8; 32])> = w.q8["W1"].blocks.iter().map(|b| (b.d, b.qs)).collect();
    let want: Vec<(f32, [i8; 32])> = want_blocks.blocks.iter().map(|b| (b.d, b.qs)).collect();
    assert_eq!(got, want, "W1 holds ggml's Q8_0 blocks of its slice");

    let (got_dense, got_q8) = (logits(&mut dense, &TOKENS), logits(&mut q8, &TOKENS));
    let want_q8 = reference(&q8_values(&values), &TOKENS);
    let mut worst = 0.0f32;
    for pos in 0..TOKENS.len() {
        Tolerance::abs(1e-5).assert(&format!("q8 logits at position {pos}"), &got_q8[pos], &want_q8[pos]);
        // Q8_0 keeps every weight within half a step (amax/254) of its value: the logits move by
        // at most a few hundredths here, and they do move.
        Tolerance::abs(0.05).assert(&format!("q8 vs dense at position {pos}"), &got_q8[pos], &got_dense[pos]);
        worst = worst.max(Tolerance::F32.worst(&got_q8[pos], &got_dense[pos]).diff);
    }
    assert!(worst > 1e-6, "quantisation changed the numbers (worst difference {worst})");
}

#[test]
fn q8_0_gguf_tensors_are_kept_as_their_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let values = values();
    let tensors: Vec<(String, Vec<usize>, Data)> = checkpoint_tensors(&values)
        .into_iter()
        .map(|(name, shape, v)| {
            let q8 = ["model.layers.0.proj.weight", "model.layers.1.proj_big.weight", "lm_head.weight"];
            let data = if q8.contains(&name.as_str()) { Data::Q8(v) } else { Data::F32(v) };
            (name, shape, data)
        })
        .collect();
    let path = tmp.path().join("model.gguf");
    write_tensors(&path, &tensors);
    let dir = write_bundle(tmp.path(), Variant::Q8);
    let mut reports: Vec<(usize, usize, String)> = Vec::new();
    let mut host = Host::load(&dir, &WeightsSource::Gguf(path.clone()), &mut |done, total, name| {
        reports.push((done, total, name.to_string()))
    })
    .unwrap();
    // The file read into memory is reported first (none of its tensors loaded yet), then each tensor.
    let size = std::fs::metadata(&path).unwrap().len() as f64 / 1e9;
    let total = reports.last().map(|r| r.1).unwrap();
    assert_eq!(reports[0], (0, total, format!("(reading the file: {size:.2} of {size:.2} GB)")));
    assert_eq!(reports[1..].iter().map(|r| r.0).collect::<Vec<_>>(), (1..=total).collect::<Vec<_>>());

    // A whole Q8_0 tensor is read in place: the held bytes are the file's own.
    let file = rdu_checkpoint::Gguf::open(&path).unwrap();
    let held = &host.weights().packed["Wout"];
    assert_eq!(held.format, rdu_checkpoint::GgmlType::Q8_0);
    assert_eq!(held.bytes(), file.tensor_bytes("lm_head.weight").unwrap());
    assert!(!host.weights().q8.contains_key("Wout"));
    // W1's slice of the stored Q8_0 tensor is its second half of blocks.
    let big = file.read_q8_0("model.layers.1.proj_big.weight").unwrap();
    let held: Vec<f32> = host.weights().q8["W1"].blocks.iter().map(|b| b.d).collect();
    assert_eq!(held, big.blocks[D..].iter().map(|b| b.d).collect::<Vec<_>>());

    let got = logits(&mut host, &TOKENS);
    let mut want_values = q8_values(&values);
    // W1 was quantised inside its [64, 32] tensor; row blocks do not cross rows, so the slice is the same.
    want_values.insert("W1".into(), big.dequantize()[D * D..].to_vec());
    let want = reference(&want_values, &TOKENS);
    for pos in 0..TOKENS.len() {
        Tolerance::abs(1e-5).assert(&format!("gguf q8 logits at position {pos}"), &got[pos], &want[pos]);
    }
}

#[test]
fn dense_storage_over_q8_0_gguf_tensors_dequantises() {
    let tmp = tempfile::tempdir().unwrap();
    let values = values();
    let tensors: Vec<(String, Vec<usize>, Data)> = checkpoint_tensors(&values)
        .into_iter()
        .map(|(name, shape, v)| {
            let data = if name == "lm_head.weight" { Data::Q8(v) } else { Data::F32(v) };
            (name, shape, data)
        })
        .collect();
    let path = tmp.path().join("model.gguf");
    write_tensors(&path, &tensors);
    let dir = write_bundle(tmp.path(), Variant::Dense);
    let mut host = Host::load(&dir, &WeightsSource::Gguf(path), &mut |_, _, _| {}).unwrap();
    // Kept as the file's blocks, widened to exactly the dequantised values.
    let want = rdu_checkpoint::quantize_q8_0(&values["Wout"], &[VOCAB, D]).unwrap().dequantize();
    assert_eq!(host.weights().packed["Wout"].widen(), want);
    assert!(host.weights().q8.is_empty() && !host.weights().dense.contains_key("Wout"));
    let mut want_values = values.clone();
    want_values.insert("Wout".into(), want);
    let got = logits(&mut host, &TOKENS);
    let want = reference(&want_values, &TOKENS);
    for pos in 0..TOKENS.len() {
        Tolerance::abs(1e-5).assert(&format!("dense over q8_0 gguf at position {pos}"), &got[pos], &want[pos]);
    }
}
