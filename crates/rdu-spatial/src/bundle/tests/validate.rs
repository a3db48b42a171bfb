//! Validation: the sample passes, and each kind of broken manifest is rejected with the error that names it.

use super::sample::sample;
use crate::bundle::{Bundle, BundleError};
use crate::manifest::{CheckpointKind, CutMode, Slice, TensorStorage};

/// The problems of the sample after `edit`; exactly one problem is expected.
fn problem(edit: impl FnOnce(&mut Bundle)) -> BundleError {
    let mut bundle = sample();
    edit(&mut bundle);
    let mut problems = bundle.problems();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    problems.remove(0)
}

#[test]
fn the_sample_is_valid() {
    let bundle = sample();
    assert!(bundle.problems().is_empty(), "{:#?}", bundle.problems());
    assert!(bundle.validate().is_ok());
}

#[test]
fn a_missing_program_file_is_named_with_its_field() {
    let err = problem(|b| drop(b.files.remove("programs/window.rdu")));
    assert!(matches!(&err, BundleError::MissingFile { path, .. } if path == "programs/window.rdu"));
    assert_eq!(
        err.to_string(),
        "manifest.json: programs.kinds[window].file_source names `programs/window.rdu`, which the bundle does not contain"
    );
    let err = problem(|b| drop(b.files.remove("programs/head.spatial")));
    assert!(err.to_string().contains("programs.head.file_spatial"), "{err}");
}

#[test]
fn a_layer_running_an_undefined_kind_is_rejected() {
    let mut bundle = sample();
    bundle.manifest.programs.kinds.retain(|k| k.name != "window");
    let problems = bundle.problems();
    assert!(problems.iter().any(|p| matches!(p, BundleError::UnknownKind { idx: 1, kind } if kind == "window")));
    assert_eq!(problems.len(), 1, "{problems:#?}");
}

#[test]
fn a_binding_that_omits_a_declared_tensor_is_rejected() {
    let err = problem(|b| drop(b.manifest.layers[2].bind.remove("Wq0")));
    assert!(matches!(&err, BundleError::BindMissing { idx: 2, tensor, .. } if tensor == "Wq0"), "{err}");
    assert!(err.to_string().contains("layers[2].bind omits `Wq0`"), "{err}");
}

#[test]
fn a_binding_of_an_undeclared_tensor_is_rejected() {
    let err = problem(|b| drop(b.manifest.layers[1].bind.insert("Wk1".into(), "Wq0".into())));
    assert!(matches!(&err, BundleError::BindExtra { idx: 1, tensor, .. } if tensor == "Wk1"), "{err}");
}

#[test]
fn a_binding_that_names_one_layer_tensor_twice_is_rejected() {
    let err = problem(|b| drop(b.manifest.layers[2].bind.insert("Wo0".into(), "Wq2".into())));
    assert!(matches!(&err, BundleError::BindDuplicate { idx: 2, target, .. } if target == "Wq2"), "{err}");
}

#[test]
fn a_bound_tensor_the_manifest_does_not_define_is_rejected() {
    let err = problem(|b| {
        b.manifest.tensors.remove("Wq2");
    });
    assert!(matches!(&err, BundleError::Unresolved { tensor, .. } if tensor == "Wq2"), "{err}");
    assert!(err.to_string().contains("layers[2].bind.Wq0"), "{err}");
    let err = problem(|b| drop(b.manifest.tensors.remove("onorm")));
    assert!(err.to_string().contains("programs.head.declared"), "{err}");
}

#[test]
fn a_missing_or_repeated_layer_is_rejected() {
    let mut bundle = sample();
    bundle.manifest.layers.remove(1);
    bundle.manifest.programs.kinds[1].layers.clear();
    let problems = bundle.problems();
    assert!(problems.iter().any(|p| matches!(p, BundleError::LayerMissing { layer: 1, n_layers: 2 })), "{problems:#?}");
    assert!(problems.iter().any(|p| matches!(p, BundleError::LayerOrder { idx: 1, layer: 2, .. })), "{problems:#?}");

    let mut bundle = sample();
    bundle.manifest.layers[1] = bundle.manifest.layers[0].clone();
    let problems = bundle.problems();
    assert!(problems.iter().any(|p| matches!(p, BundleError::LayerOrder { idx: 1, layer: 0, .. })), "{problems:#?}");
}

#[test]
fn a_kind_whose_layer_list_disagrees_with_the_layers_is_rejected() {
    let err = problem(|b| b.manifest.programs.kinds[0].layers = vec![0]);
    assert!(err.to_string().contains("programs.kinds[attn].layers: lists [0] but the layers running it are [0, 2]"));
}

#[test]
fn a_name_defined_twice_is_rejected() {
    let err = problem(|b| {
        let entry = b.manifest.states[0].clone();
        b.manifest.activations.push(crate::manifest::ActivationEntry { name: entry.name, shape: entry.shape });
    });
    assert!(err.to_string().contains("`Kc0` is already defined in states"), "{err}");
    let err = problem(|b| b.manifest.programs.kinds[1].declared.push("an1".into()));
    assert!(err.to_string().contains("lists `an1` twice"), "{err}");
}

#[test]
fn unsafe_and_colliding_file_paths_are_rejected() {
    for path in ["../escape.rdu", "/abs.rdu", "programs//x", "manifest.json", "programs/attn.rdu/inner"] {
        let err = problem(|b| drop(b.files.insert(path.into(), String::new())));
        assert!(matches!(&err, BundleError::BadPath { .. }), "{path}: {err}");
    }
}

#[test]
fn tensors_are_checked_against_their_shapes_and_the_chips() {
    let err = problem(|b| b.manifest.tensors.get_mut("Wq0").unwrap().slices.pop().map(drop).unwrap());
    assert!(err.to_string().contains("tensors.Wq0: has 1 slices for 2 chips"), "{err}");
    let err =
        problem(|b| b.manifest.tensors.get_mut("Wo1").unwrap().slices[1] = vec![Slice { axis: 1, start: 48, len: 32 }]);
    assert!(err.to_string().contains("slices[1] lies outside shape [64, 64]"), "{err}");
    // Both chips the same half: the slices do not partition the columns.
    let err =
        problem(|b| b.manifest.tensors.get_mut("Wo1").unwrap().slices[1] = vec![Slice { axis: 1, start: 0, len: 32 }]);
    assert!(err.to_string().contains("stop at 32 of 64"), "{err}");
    let err = problem(|b| {
        b.manifest.tensors.get_mut("Wq2").unwrap().slices =
            vec![vec![Slice { axis: 0, start: 0, len: 16 }], vec![Slice { axis: 0, start: 16, len: 48 }]];
    });
    assert!(err.to_string().contains("holds 48"), "{err}");
    let err = problem(|b| b.manifest.states[0].slices[1] = vec![Slice { axis: 1, start: 0, len: 1 }]);
    assert!(err.to_string().contains("states.Kc0"), "{err}");
    let err = problem(|b| {
        b.manifest.tensors.get_mut("Wo2").unwrap().slices = vec![
            vec![Slice { axis: 1, start: 0, len: 16 }, Slice { axis: 1, start: 32, len: 16 }],
            vec![Slice { axis: 1, start: 16, len: 16 }, Slice { axis: 1, start: 48, len: 16 }],
        ];
    });
    assert!(err.to_string().contains("split its Q8_0 blocks"), "{err}");
    let err = problem(|b| {
        let t = b.manifest.tensors.get_mut("an0").unwrap();
        t.storage = TensorStorage::Q8_0;
        t.shape = vec![48];
    });
    assert!(err.to_string().contains("cannot be Q8_0"), "{err}");
    let err = problem(|b| b.manifest.tensors.get_mut("We0").unwrap().checkpoint.names.pop().map(drop).unwrap());
    assert!(err.to_string().contains("stacks 3 tensors along an axis of length 4"), "{err}");
    let err = problem(|b| b.manifest.tensors.get_mut("Wout").unwrap().checkpoint.kind = CheckpointKind::Tensor);
    assert!(err.to_string().contains("needs exactly one name and no axis"), "{err}");
    let err = problem(|b| b.manifest.shared[0].shape = vec![16, 16]);
    assert!(err.to_string().contains("shared.cos0: shape [16, 16] is not [rows, 8]"), "{err}");
}

#[test]
fn the_cut_needs_the_fields_of_its_mode() {
    let err = problem(|b| b.manifest.cut.mode = CutMode::BatchedTp);
    assert!(err.to_string().contains("cut.batch: is required by mode batched-tp"), "{err}");
    let err = problem(|b| b.manifest.cut.ctx = Some(0));
    assert!(err.to_string().contains("cut.ctx: must be at least 1"), "{err}");
    let err = problem(|b| b.manifest.cut.mode = CutMode::Prefill);
    assert!(err.to_string().contains("cut.chunk: is required by mode prefill"), "{err}");
}

#[test]
fn uncertified_programs_are_rejected() {
    let err = problem(|b| b.manifest.programs.kinds[1].certificate.max_abs_err = 0.5);
    assert!(err
        .to_string()
        .contains("programs.kinds[window].certificate: max_abs_err 0.5 exceeds its tolerance 0.0001"));
    let err = problem(|b| b.manifest.programs.embed.certificate.checks.clear());
    assert!(err.to_string().contains("programs.embed.certificate.checks"), "{err}");
    let err = problem(|b| b.manifest.programs.head.cost.seconds = f64::NAN);
    assert!(err.to_string().contains("programs.head.cost.seconds"), "{err}");
}

#[test]
fn the_version_and_format_marker_are_checked() {
    let err = problem(|b| b.manifest.version = 9);
    assert!(err.to_string().contains("version: is 9"), "{err}");
    let err = problem(|b| b.manifest.format = "nope".into());
    assert!(err.to_string().contains("format: is \"nope\""), "{err}");
}
