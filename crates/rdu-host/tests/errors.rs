//! Bad input is a `HostError` with a message that names the thing and says what to do — never a panic.

use crate::common;

use std::path::Path;

use common::bundle::{bundle, write};
use common::*;
use rdu_host::{Host, HostError, WeightsSource};
use rdu_testkit::gguf_writer::{write_tensors, Data};

fn seeded() -> WeightsSource {
    WeightsSource::Seeded { seed: 1, unit_offset: false }
}

fn load(dir: &Path, source: &WeightsSource) -> Result<Host, HostError> {
    Host::load(dir, source, &mut |_, _, _| {})
}

fn error(result: Result<Host, HostError>) -> HostError {
    match result {
        Ok(_) => panic!("the host loaded a bundle it should refuse"),
        Err(e) => e,
    }
}

#[test]
fn token_past_the_vocabulary_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut host = load(&write_bundle(tmp.path(), Variant::Dense), &seeded()).unwrap();
    let err = host.step(&[VOCAB as u32], 0).unwrap_err();
    assert!(matches!(err, HostError::Token { token: 16, vocab: 16 }), "{err:?}");
    assert_eq!(err.to_string(), "token id 16 is out of range for a vocabulary of 16 tokens; pass ids below 16");
    let err = host.step(&[u32::MAX], 0).unwrap_err();
    assert!(matches!(err, HostError::Token { .. }), "{err:?}");
}

#[test]
fn position_past_the_context_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut host = load(&write_bundle(tmp.path(), Variant::Dense), &seeded()).unwrap();
    host.step(&[1], CTX - 1).unwrap();
    let err = host.step(&[1], CTX).unwrap_err();
    assert!(matches!(err, HostError::PastContext { pos: 4, ctx: 4 }), "{err:?}");
    assert_eq!(err.to_string(), "position 4 is past the context of 4 positions; lower with a larger --ctx");
}

#[test]
fn wrong_number_of_tokens_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut host = load(&write_bundle(tmp.path(), Variant::Dense), &seeded()).unwrap();
    let err = host.step(&[1, 2], 0).unwrap_err();
    assert_eq!(err.to_string(), "the bundle steps 1 token(s) at a time but 2 were given; pass exactly 1");
    assert!(matches!(host.step(&[], 0).unwrap_err(), HostError::Rows { rows: 1, given: 0 }));
}

#[test]
fn checkpoint_missing_a_tensor_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_bundle(tmp.path(), Variant::Dense);
    let mut tensors = checkpoint_tensors(&values());
    tensors.retain(|(name, _, _)| name != "model.norm.weight");
    let hf = tmp.path().join("hf");
    write_safetensors(&hf, &tensors);
    let err = error(load(&dir, &WeightsSource::Hf(hf.clone())));
    assert!(
        matches!(&err, HostError::MissingTensor { tensor, checkpoint, .. } if tensor == "nf" && checkpoint == "model.norm.weight")
    );
    let want = format!(
        "{}: no tensor `model.norm.weight` (the bundle's `nf` needs it); use the checkpoint the bundle was lowered for",
        hf.display()
    );
    assert_eq!(err.to_string(), want);
}

#[test]
fn checkpoint_tensor_of_the_wrong_shape_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_bundle(tmp.path(), Variant::Dense);
    let mut tensors = checkpoint_tensors(&values());
    for (name, shape, data) in &mut tensors {
        if name == "lm_head.weight" {
            *shape = vec![VOCAB / 2, 2 * D];
            assert_eq!(data.len(), VOCAB * D);
        }
    }
    let hf = tmp.path().join("hf");
    write_safetensors(&hf, &tensors);
    let err = error(load(&dir, &WeightsSource::Hf(hf.clone())));
    let want = format!(
        "{}: tensor `lm_head.weight` gives `Wout` the shape [8, 64] but the bundle declares [16, 32]; use the checkpoint the bundle was lowered for",
        hf.display()
    );
    assert_eq!(err.to_string(), want);
}

#[test]
fn slice_outside_its_checkpoint_tensor_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut b = bundle(Variant::Dense);
    b.manifest.tensors.get_mut("W1").unwrap().checkpoint.start = Some(2 * D);
    let dir = write(&b, tmp.path(), "bundle");
    let hf = tmp.path().join("hf");
    write_safetensors(&hf, &checkpoint_tensors(&values()));
    let err = error(load(&dir, &WeightsSource::Hf(hf)));
    assert!(matches!(&err, HostError::Assemble { tensor, .. } if tensor == "W1"), "{err:?}");
    assert!(err.to_string().contains("has no entries 64..96 on axis 0"), "{err}");
}

#[test]
fn directory_that_is_not_a_bundle_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let err = error(load(tmp.path(), &seeded()));
    assert!(matches!(err, HostError::NotABundle { .. }), "{err:?}");
    let want = format!(
        "{} is not an rdu bundle (no manifest.json marked \"rdu-bundle\"); pass the directory `rdu lower -o DIR` wrote",
        tmp.path().display()
    );
    assert_eq!(err.to_string(), want);
    std::fs::write(tmp.path().join("manifest.json"), r#"{"format": "something-else"}"#).unwrap();
    assert!(matches!(error(load(tmp.path(), &seeded())), HostError::NotABundle { .. }));
    let missing = tmp.path().join("nowhere");
    assert!(matches!(error(load(&missing, &seeded())), HostError::NotABundle { .. }));
}

#[test]
fn invalid_bundle_is_refused_with_the_validation_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_bundle(tmp.path(), Variant::Dense);
    let manifest = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    std::fs::write(dir.join("manifest.json"), manifest.replace(r#""layer": 1"#, r#""layer": 5"#)).unwrap();
    let err = error(load(&dir, &seeded()));
    assert!(matches!(err, HostError::Bundle { .. }), "{err:?}");
    assert!(err.to_string().ends_with("re-lower the bundle with `rdu lower`"), "{err}");
}

#[test]
fn schedule_that_does_not_run_every_layer_once_in_order_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_bundle(tmp.path(), Variant::Dense);
    let manifest = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let looped = r#""block": ["blk"], "layers": [0, 1]"#;
    assert!(manifest.contains(looped), "{manifest}");
    for (broken, problem) in [
        ("[0, 0]", "schedule.invocations[1].layers: runs layer 0 where layer 1 comes next"),
        ("[1, 0]", "schedule.invocations[1].layers: runs layer 1 where layer 0 comes next"),
        ("[0]", "schedule.invocations: the loops run layers 0..1, but the bundle has 2 layers"),
    ] {
        let edited = manifest.replace(looped, &format!(r#""block": ["blk"], "layers": {broken}"#));
        std::fs::write(dir.join("manifest.json"), edited).unwrap();
        let err = error(load(&dir, &seeded()));
        assert!(matches!(err, HostError::Bundle { .. }), "{err:?}");
        assert!(err.to_string().contains(problem), "{broken}: {err}");
        assert!(!err.to_string().contains('\n'), "one line: {err}");
    }
}

#[test]
fn program_that_does_not_parse_is_refused_naming_its_file() {
    let tmp = tempfile::tempdir().unwrap();
    let mut b = bundle(Variant::Dense);
    b.files.insert("programs/blk.spatial".into(), "program blk chip=sn50\ntensor x : f32[1, oops]\n".into());
    b.rehash();
    let err = error(load(&write(&b, tmp.path(), "bundle"), &seeded()));
    assert!(matches!(&err, HostError::Program { file, .. } if file == "programs/blk.spatial"), "{err:?}");
    assert!(err.to_string().contains("programs/blk.spatial: line 2"), "{err}");
}

#[test]
fn binding_to_a_state_of_another_shape_names_layer_tensor_and_both_shapes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut b = bundle(Variant::Dense);
    b.manifest.states[1].shape = vec![CTX, 1, D / 2];
    let dir = write(&b, tmp.path(), "bundle");
    let err = error(load(&dir, &seeded()));
    let want = "layer 1 (kind blk): `K0` is bound to `K1` of shape [4, 1, 16] but the program declares [4, 1, 32]; re-lower the bundle";
    assert_eq!(err.to_string(), want);
}

#[test]
fn binding_a_weight_to_a_state_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut b = bundle(Variant::Dense);
    // Layer 1 swaps its weight and its cache: both exist, but as the wrong kind of tensor.
    let bind = &mut b.manifest.layers[1].bind;
    bind.insert("W0".into(), "K1".into());
    bind.insert("K0".into(), "W1".into());
    let err = error(load(&write(&b, tmp.path(), "bundle"), &seeded()));
    assert!(
        matches!(&err, HostError::Binding { program, tensor, target, .. }
        if program == "layer 1 (kind blk)" && tensor == "W0" && target == "K1"),
        "{err:?}"
    );
    assert!(err.to_string().contains("the manifest lists it among states, but the program declares a weight"), "{err}");
}

#[test]
fn storage_that_disagrees_with_the_program_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut b = bundle(Variant::Dense);
    b.manifest.tensors.get_mut("Wout").unwrap().storage = rdu_spatial::manifest::TensorStorage::Q8_0;
    let err = error(load(&write(&b, tmp.path(), "bundle"), &seeded()));
    assert!(
        err.to_string().contains("the manifest gives f32 stored q8_0, the program declares f32 stored dense"),
        "{err}"
    );
}

#[test]
fn gguf_tensor_whose_type_cannot_serve_q8_0_storage_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = write_bundle(tmp.path(), Variant::Q8);
    let tensors: Vec<(String, Vec<usize>, Data)> = checkpoint_tensors(&values())
        .into_iter()
        .map(|(name, shape, v)| {
            let data = if name == "lm_head.weight" { Data::Q4Zero } else { Data::F32(v) };
            (name, shape, data)
        })
        .collect();
    let path = tmp.path().join("model.gguf");
    write_tensors(&path, &tensors);
    let err = error(load(&dir, &WeightsSource::Gguf(path.clone())));
    let want = format!(
        "{}: tensor `lm_head.weight` is Q4_0, which cannot serve `Wout` stored q8_0; lower with --storage dense or use a q8_0 or f32/f16 checkpoint",
        path.display()
    );
    assert_eq!(err.to_string(), want);
}

#[test]
fn runtime_inputs_are_filled_by_their_role_and_a_role_the_host_cannot_fill_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let set = |edit: &dyn Fn(&mut rdu_spatial::manifest::InputEntry), dir: &str| {
        let mut b = bundle(Variant::Dense);
        edit(b.manifest.inputs.iter_mut().find(|i| i.name == "pos").unwrap());
        write(&b, tmp.path(), dir)
    };
    // The position input given the tokens' role: the host reads the role, not the name.
    let dir = set(&|i| i.role = rdu_spatial::manifest::InputRole::Tokens, "tokens");
    let err = error(load(&dir, &seeded()));
    assert!(matches!(&err, HostError::Input { name, .. } if name == "pos"), "{err:?}");
    assert!(err.to_string().contains("a tokens input of shape [] is not one this host fills"), "{err}");
    // A position of a sequence the step does not have.
    let dir = set(&|i| i.sequence = Some(1), "sequence");
    let err = error(load(&dir, &seeded()));
    assert!(err.to_string().contains("`pos`") && err.to_string().contains("names sequence 1 of a step of 1"), "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");
}
