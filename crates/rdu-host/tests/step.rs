//! Stepping the hand-built bundle: logits equal the plain-loop math, for seeded and safetensors weights; state persists.

use crate::common;

use common::*;
use rdu_host::{Host, WeightsSource};
use rdu_testkit::Tolerance;

fn no_progress() -> impl FnMut(usize, usize, &str) {
    |_, _, _| {}
}

const TOKENS: [u32; 4] = [3, 15, 0, 7];

/// Steps `host` through `tokens` from position 0 and returns each step's logits row.
fn run(host: &mut Host, tokens: &[u32]) -> Vec<Vec<f32>> {
    tokens
        .iter()
        .enumerate()
        .map(|(pos, &t)| {
            let out = host.step(&[t], pos).unwrap();
            assert_eq!(out.logits.shape, [1, VOCAB]);
            out.logits.as_f32().unwrap().to_vec()
        })
        .collect()
}

#[test]
fn seeded_weights_give_the_hand_computed_logits() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_bundle(tmp.path(), Variant::Dense);
    let source = WeightsSource::Seeded { seed: 7, unit_offset: false };
    let mut host = Host::load(&dir, &source, &mut no_progress()).unwrap();
    assert_eq!((host.rows(), host.ctx(), host.vocab()), (1, CTX, VOCAB));
    let want = reference(&seeded_values(7), &TOKENS);
    assert!(want.iter().flatten().any(|v| v.abs() > 0.1), "the expectation is not trivially zero");
    for (pos, (got, want)) in run(&mut host, &TOKENS).iter().zip(&want).enumerate() {
        Tolerance::abs(1e-5).assert(&format!("seeded logits at position {pos}"), got, want);
    }
}

#[test]
fn safetensors_weights_give_the_hand_computed_logits() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_bundle(tmp.path(), Variant::Dense);
    let values = values();
    write_safetensors(&tmp.path().join("hf"), &checkpoint_tensors(&values));
    let mut host = Host::load(&dir, &WeightsSource::Hf(tmp.path().join("hf")), &mut no_progress()).unwrap();
    // W1 is rows 32..64 of its checkpoint tensor: the filler rows must not leak in.
    assert_eq!(host.weights().dense["W1"].as_f32().unwrap(), values["W1"].as_slice());
    let want = reference(&values, &TOKENS);
    for (pos, (got, want)) in run(&mut host, &TOKENS).iter().zip(&want).enumerate() {
        Tolerance::abs(1e-5).assert(&format!("safetensors logits at position {pos}"), got, want);
    }
}

#[test]
fn state_persists_across_steps_and_reset_clears_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_bundle(tmp.path(), Variant::Dense);
    let mut host =
        Host::load(&dir, &WeightsSource::Seeded { seed: 3, unit_offset: false }, &mut no_progress()).unwrap();
    let row = |host: &Host, name: &str, slot: usize| {
        host.state(name).unwrap().as_f32().unwrap()[slot * D..(slot + 1) * D].to_vec()
    };
    let first = host.step(&[5], 0).unwrap();
    let k0_after_first = row(&host, "K0", 0);
    assert!(k0_after_first.iter().any(|v| *v != 0.0), "step 0 wrote slot 0 of K0");
    assert!(row(&host, "K1", 0).iter().any(|v| *v != 0.0), "step 0 wrote slot 0 of K1");
    assert!(row(&host, "K0", 1).iter().all(|v| *v == 0.0), "slot 1 is untouched before step 1");

    let second = host.step(&[9], 1).unwrap();
    assert_eq!(row(&host, "K0", 0), k0_after_first, "step 1 keeps what step 0 cached");
    assert!(row(&host, "K0", 1).iter().any(|v| *v != 0.0), "step 1 wrote slot 1 of K0");
    let want = reference(&seeded_values(3), &[5, 9]);
    Tolerance::abs(1e-5).assert("second step attends over both positions", second.logits.as_f32().unwrap(), &want[1]);

    // Without step 0 in the cache, the same token at position 1 gives other logits.
    host.reset();
    assert!(host.states().names().all(|n| host.state(n).unwrap().as_f32().unwrap().iter().all(|v| *v == 0.0)));
    let alone = host.step(&[9], 1).unwrap();
    let diff = Tolerance::F32.worst(alone.logits.as_f32().unwrap(), second.logits.as_f32().unwrap()).diff;
    assert!(diff > 1e-4, "the cached position changes the logits (diff {diff})");

    host.reset();
    let again = host.step(&[5], 0).unwrap();
    assert_eq!(again.logits, first.logits, "a reset host repeats the first step exactly");
}

#[test]
fn progress_reports_every_tensor_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_bundle(tmp.path(), Variant::Dense);
    let mut seen = Vec::new();
    let mut progress = |done: usize, total: usize, name: &str| seen.push((done, total, name.to_string()));
    Host::load(&dir, &WeightsSource::Seeded { seed: 1, unit_offset: false }, &mut progress).unwrap();
    let mut names: Vec<String> = TENSORS.iter().map(|(n, _, _)| n.to_string()).collect();
    names.sort();
    let want: Vec<(usize, usize, String)> = names.into_iter().enumerate().map(|(i, n)| (i + 1, 7, n)).collect();
    assert_eq!(seen, want);
}

#[test]
fn shared_rope_tables_are_computed_at_their_declared_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_bundle(tmp.path(), Variant::Dense);
    let host = Host::load(&dir, &WeightsSource::Seeded { seed: 1, unit_offset: false }, &mut no_progress()).unwrap();
    let (cos, sin) = (host.shared("cos0").unwrap(), host.shared("sin0").unwrap());
    assert_eq!((cos.shape.as_slice(), sin.shape.as_slice()), ([CTX, D / 2].as_slice(), [CTX, D / 2].as_slice()));
    // Row 0 is angle 0; row 1 column 0 is angle 1 (frequency 1).
    let (c, s) = (cos.as_f32().unwrap(), sin.as_f32().unwrap());
    assert!(c[..D / 2].iter().all(|v| *v == 1.0) && s[..D / 2].iter().all(|v| *v == 0.0));
    assert_eq!((c[D / 2], s[D / 2]), (1f32.cos(), 1f32.sin()));
}
