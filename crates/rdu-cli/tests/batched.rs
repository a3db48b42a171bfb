//! Batched decode against transformers and against each sequence run alone: every fixture
//! model lowered as a batched bundle of three sequences (each kind once, certified), written,
//! read back by the host with the HF checkpoint, and stepped with three prompts of different
//! lengths — one of them starting two steps late in a slot that held another sequence, so
//! the sequences' positions differ. The fixture's own prompt must reproduce `gen_ids.npy`
//! and `gen_logits.npy` within 1e-4; every sequence must get, token for token and within
//! 1e-4 logit for logit, what a decode bundle gives it alone.

use crate::common;

use common::f32_states;
use rdu_compiler::deploy::{
    lower_batched_decode_streamed, lower_batched_tp_decode_streamed, lower_decode_streamed, LowerOptions, Storage,
};
use rdu_compiler::model::config::from_config_path;
use rdu_host::{Host, WeightsSource};
use rdu_spatial::chip::Chip;
use rdu_testkit::{argmax, fixtures, npy, Tolerance};
use std::path::Path;

/// Generated tokens per sequence (the fixtures hold 8).
const GEN: usize = 8;
/// Sequence 2 joins this many steps late.
const LATE: usize = 2;

fn opts(progress: &mut dyn FnMut(rdu_compiler::deploy::Progress<'_>)) -> LowerOptions<'_> {
    LowerOptions { chip: Chip::builtin("sn50").expect("chip"), storage: Storage::Dense, seed: 0, progress }
}

/// Greedy decoding of `prompt` alone: (generated ids, logits row of every position).
fn alone(bundle: &Path, weights: &WeightsSource, prompt: &[u32]) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut host = Host::load(bundle, weights, &mut |_, _, _| {}).expect("load");
    let (mut seq, mut rows) = (prompt.to_vec(), Vec::new());
    for pos in 0..prompt.len() + GEN - 1 {
        let row = host.step(&[seq[pos]], pos).expect("step").logits.as_f32().expect("f32").to_vec();
        if pos + 1 >= prompt.len() {
            seq.push(argmax(&row));
        }
        rows.push(row);
    }
    seq.push(argmax(rows.last().expect("a row")));
    (seq[prompt.len()..prompt.len() + GEN].to_vec(), rows)
}

/// Steps `prompts` through the batched bundle `bundle` greedily, sequence 2 joining
/// [`LATE`] steps late in a reset slot: each sequence's tokens and logits rows.
fn run_batch(
    bundle: &Path,
    weights: &WeightsSource,
    prompts: &[Vec<u32>],
    vocab: usize,
) -> (Vec<Vec<u32>>, Vec<Vec<Vec<f32>>>) {
    let mut host = Host::load(bundle, weights, &mut |_, _, _| {}).expect("load");
    assert_eq!(host.sequences(), 3);
    let start = [0, 0, LATE];
    let mut seqs: Vec<Vec<u32>> = prompts.to_vec();
    let mut rows: Vec<Vec<Vec<f32>>> = vec![Vec::new(); 3];
    let ends: Vec<usize> = prompts.iter().zip(start).map(|(p, s)| s + p.len() + GEN - 1).collect();
    for step in 0..*ends.iter().max().expect("three") {
        if step == LATE {
            // Slot 2 ran a throwaway sequence until now; it starts over at position 0.
            host.reset_sequence(2);
        }
        let positions: Vec<usize> = start.iter().map(|&s| step.saturating_sub(s)).collect();
        let toks: Vec<u32> = (0..3)
            .map(|b| if step < start[b] { prompts[1][step] } else { *seqs[b].get(positions[b]).unwrap_or(&0) })
            .collect();
        let out = host.step_at(&toks, &positions).expect("step");
        let flat = out.logits.as_f32().expect("f32");
        for b in 0..3 {
            if step < start[b] || step >= ends[b] {
                continue;
            }
            let row = flat[b * vocab..(b + 1) * vocab].to_vec();
            if positions[b] + 1 >= prompts[b].len() {
                seqs[b].push(argmax(&row));
            }
            rows[b].push(row);
        }
    }

    (seqs, rows)
}

fn check(arch: &str) {
    let dir = fixtures::hf(arch);
    let spec = f32_states(from_config_path(&dir.join("config.json")).expect("config"));
    let weights = WeightsSource::Hf(dir.clone());
    let tokens = npy::ids(dir.join("tokens.npy"));
    let vocab = spec.vocab;
    // Three prompts of different lengths: the fixture's, a shorter one, a reordered one.
    let short: Vec<u32> = tokens.iter().rev().take(5).copied().collect();
    let mid: Vec<u32> = tokens.iter().skip(3).take(tokens.len() / 2).copied().collect();
    let prompts = [tokens.clone(), short, mid];
    let ctx = tokens.len() + GEN + LATE;
    let tmp = tempfile::tempdir().expect("temp dir");

    let mut quiet = |_: rdu_compiler::deploy::Progress<'_>| {};
    let model = lower_batched_decode_streamed(&spec, prompts.len(), ctx, opts(&mut quiet))
        .unwrap_or_else(|e| panic!("{arch}: {e}"));
    let batched = tmp.path().join("batched");
    model.bundle().expect("bundle").write(&batched, false).expect("write");
    let model = lower_decode_streamed(&spec, ctx, opts(&mut quiet)).unwrap_or_else(|e| panic!("{arch}: {e}"));
    let decode = tmp.path().join("decode");
    model.bundle().expect("bundle").write(&decode, false).expect("write");

    let (seqs, rows) = run_batch(&batched, &weights, &prompts, vocab);

    // The fixture's prompt: transformers' greedy tokens and their logits.
    let gen_ids = npy::ids(dir.join("gen_ids.npy"));
    let want_gen = npy::f32(dir.join("gen_logits.npy"));
    assert_eq!(seqs[0][tokens.len()..], gen_ids[..], "{arch}: batched greedy tokens differ from transformers");
    for k in 0..GEN {
        let row = &rows[0][tokens.len() - 1 + k];
        Tolerance::F32.assert(&format!("{arch} batched generation {k}"), row, &want_gen[k * vocab..(k + 1) * vocab]);
    }
    // Every sequence: what it gets alone.
    for b in 0..3 {
        let (ids, alone_rows) = alone(&decode, &weights, &prompts[b]);
        assert_eq!(seqs[b][prompts[b].len()..], ids[..], "{arch}: sequence {b} differs from its run alone");
        assert_eq!(rows[b].len(), alone_rows.len(), "{arch}: sequence {b} rows");
        for (pos, (got, want)) in rows[b].iter().zip(&alone_rows).enumerate() {
            Tolerance::F32.assert(&format!("{arch} sequence {b} at {pos}"), got, want);
        }
    }
}

/// The same batch over 2 chips (where the model admits it): every row within 1e-4 of one chip's.
fn check_tp(arch: &str) {
    let dir = fixtures::hf(arch);
    let spec = f32_states(from_config_path(&dir.join("config.json")).expect("config"));
    if rdu_compiler::fit::admits_tp(&spec, 2, &Storage::Dense).is_err() {
        return;
    }
    let weights = WeightsSource::Hf(dir.clone());
    let tokens = npy::ids(dir.join("tokens.npy"));
    let prompts = [tokens.clone(), tokens[..4].to_vec(), tokens.iter().rev().take(7).copied().collect()];
    let ctx = tokens.len() + GEN + LATE;
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut quiet = |_: rdu_compiler::deploy::Progress<'_>| {};
    let one = lower_batched_decode_streamed(&spec, 3, ctx, opts(&mut quiet)).expect("batched");
    one.bundle().expect("bundle").write(&tmp.path().join("one"), false).expect("write");
    let two = lower_batched_tp_decode_streamed(&spec, 3, 2, ctx, opts(&mut quiet)).expect("batched-tp");
    two.bundle().expect("bundle").write(&tmp.path().join("two"), false).expect("write");
    let (ids1, rows1) = run_batch(&tmp.path().join("one"), &weights, &prompts, spec.vocab);
    let (ids2, rows2) = run_batch(&tmp.path().join("two"), &weights, &prompts, spec.vocab);
    assert_eq!(ids2, ids1, "{arch}: batched tp 2 tokens differ from one chip's");
    for b in 0..3 {
        for (pos, (got, want)) in rows2[b].iter().zip(&rows1[b]).enumerate() {
            Tolerance::F32.assert(&format!("{arch} tp 2 sequence {b} at {pos}"), got, want);
        }
    }
    // And the fixture's own prompt over 2 chips still matches transformers.
    let want_gen = npy::f32(dir.join("gen_logits.npy"));
    for k in 0..GEN {
        let row = &rows2[0][tokens.len() - 1 + k];
        Tolerance::F32.assert(
            &format!("{arch} tp 2 generation {k}"),
            row,
            &want_gen[k * spec.vocab..(k + 1) * spec.vocab],
        );
    }
}

#[test]
fn every_fixture_batched_over_two_chips_matches_one_chip() {
    for arch in fixtures::HF {
        check_tp(arch);
    }
}

#[test]
fn every_fixture_batched_of_three_matches_alone_and_transformers() {
    for arch in fixtures::HF {
        check(arch);
    }
}
