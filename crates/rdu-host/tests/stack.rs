//! Stacked checkpoint tensors: per-row (per-expert) tensors stacked along a new axis, dense from safetensors and as Q8_0 blocks from GGUF.

use crate::common;

use common::bundle::{bundle, write};
use common::*;
use rdu_host::{Host, WeightsSource};
use rdu_spatial::manifest::{Checkpoint, CheckpointKind};
use rdu_testkit::gguf_writer::{write_tensors, Data};
use rdu_testkit::Tolerance;

/// `E` and `Wout` each loaded as a stack of `VOCAB` tensors of shape `[D]`, one per row.
fn stacked_bundle(variant: Variant) -> rdu_spatial::bundle::Bundle {
    let mut b = bundle(variant);
    for (name, prefix) in [("E", "embed.row"), ("Wout", "out.row")] {
        let names = (0..VOCAB).map(|r| format!("{prefix}.{r}")).collect();
        b.manifest.tensors.get_mut(name).unwrap().checkpoint = Checkpoint {
            kind: CheckpointKind::Stack,
            names,
            axis: Some(0),
            start: None,
            len: None,
            step: None,
            transposed: false,
        };
    }
    b
}

/// The checkpoint with `E` and `Wout` split into rows.
fn split_rows(values: &Values) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut tensors: Vec<_> = checkpoint_tensors(values)
        .into_iter()
        .filter(|(n, _, _)| n != "model.embed_tokens.weight" && n != "lm_head.weight")
        .collect();
    for (name, prefix) in [("E", "embed.row"), ("Wout", "out.row")] {
        for r in 0..VOCAB {
            tensors.push((format!("{prefix}.{r}"), vec![D], values[name][r * D..(r + 1) * D].to_vec()));
        }
    }
    tensors
}

#[test]
fn dense_rows_stack_into_the_table() {
    let tmp = tempfile::tempdir().unwrap();
    let values = values();
    let hf = tmp.path().join("hf");
    write_safetensors(&hf, &split_rows(&values));
    let dir = write(&stacked_bundle(Variant::Dense), tmp.path(), "bundle");
    let mut host = Host::load(&dir, &WeightsSource::Hf(hf), &mut |_, _, _| {}).unwrap();
    assert_eq!(host.weights().dense["E"].as_f32().unwrap(), values["E"].as_slice());
    let logits = host.step(&[4], 0).unwrap().logits;
    Tolerance::abs(1e-5).assert("stacked tables", logits.as_f32().unwrap(), &reference(&values, &[4])[0]);
}

#[test]
fn q8_0_rows_stack_block_by_block() {
    let tmp = tempfile::tempdir().unwrap();
    let values = values();
    let tensors: Vec<(String, Vec<usize>, Data)> = split_rows(&values)
        .into_iter()
        .map(|(n, s, v)| {
            let q8 = n.starts_with("out.row") || n.contains("proj");
            (n, s, if q8 { Data::Q8(v) } else { Data::F32(v) })
        })
        .collect();
    let path = tmp.path().join("model.gguf");
    write_tensors(&path, &tensors);
    let dir = write(&stacked_bundle(Variant::Q8), tmp.path(), "bundle");
    let mut host = Host::load(&dir, &WeightsSource::Gguf(path), &mut |_, _, _| {}).unwrap();
    let wout = &host.weights().q8["Wout"];
    assert_eq!((wout.shape.as_slice(), wout.blocks.len()), ([VOCAB, D].as_slice(), VOCAB));
    // Every row was its own tensor of one block: quantising per row equals quantising the table.
    let want = q8_values(&values);
    let held: Vec<f32> = wout.blocks.iter().flat_map(|b| b.qs.map(|q| q as f32 * b.d)).collect();
    assert_eq!(held, want["Wout"]);
    let logits = host.step(&[9], 0).unwrap().logits;
    Tolerance::abs(1e-5).assert("stacked q8 head", logits.as_f32().unwrap(), &reference(&want, &[9])[0]);
}
