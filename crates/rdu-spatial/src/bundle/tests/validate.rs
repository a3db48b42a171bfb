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
    // The schedule runs it too, and keeps it resident.
    let resident = "manifest.json: schedule.resident[2]: names `window`, which is not a program";
    assert!(problems.iter().any(|p| p.to_string() == resident), "{problems:#?}");
    assert_eq!(problems.len(), 2, "{problems:#?}");
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
        b.manifest.activations.push(crate::manifest::ActivationEntry {
            name: entry.name,
            shape: entry.shape,
            slices: Vec::new(),
        });
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

/// An MXFP4 or FP8 tensor is read as its checkpoint stores it, blocks along the last axis:
/// never transposed, never every `step`-th entry of that axis (rows are fine).
#[test]
fn block_tensors_are_read_as_stored() {
    // Wq0 is split over two chips by rows, which keeps whole blocks.
    let mxfp4 = |t: &mut crate::manifest::TensorEntry| t.storage = TensorStorage::Mxfp4;
    let err = problem(|b| {
        let t = b.manifest.tensors.get_mut("Wq0").unwrap();
        mxfp4(t);
        t.checkpoint.transposed = true;
    });
    assert!(
        err.to_string().contains(
            "tensors.Wq0: is stored mxfp4, read as the checkpoint stores it: its checkpoint cannot be transposed"
        ),
        "{err}"
    );
    let strided = |axis: usize| {
        move |b: &mut Bundle| {
            let t = b.manifest.tensors.get_mut("Wq0").unwrap();
            mxfp4(t);
            let c = &mut t.checkpoint;
            (c.kind, c.axis, c.start, c.len, c.step) = (CheckpointKind::Slice, Some(axis), Some(1), Some(64), Some(2));
        }
    };
    let err = problem(strided(1));
    assert!(err.to_string().contains("a slice of step 2 along its blocked last axis splits blocks"), "{err}");
    let mut rows = sample();
    strided(0)(&mut rows);
    assert!(rows.problems().is_empty(), "every 2nd row keeps whole blocks: {:#?}", rows.problems());
}

/// An FP8 tensor whose chip view cuts the checkpoint's blocks names both: `block` the chip's,
/// `stored_block` the checkpoint's, each of whose sizes the chip's divides.
#[test]
fn a_stored_block_is_cut_into_whole_blocks() {
    let fp8 = |block: [usize; 2], stored: Option<[usize; 2]>| {
        move |b: &mut Bundle| {
            let t = b.manifest.tensors.get_mut("Wq0").unwrap();
            (t.storage, t.block, t.stored_block) = (TensorStorage::Fp8, Some(block), stored);
        }
    };
    let mut cut = sample();
    fp8([16, 8], Some([16, 32]))(&mut cut);
    assert!(cut.problems().is_empty(), "16×8 pieces of 16×32 blocks: {:#?}", cut.problems());
    let err = problem(fp8([16, 12], Some([16, 32])));
    assert!(
        err.to_string().contains("tensors.Wq0: stored_block [16, 32] is not cut into whole blocks of [16, 12]"),
        "{err}"
    );
    let err = problem(|b| b.manifest.tensors.get_mut("Wq0").unwrap().stored_block = Some([16, 32]));
    assert!(err.to_string().contains("only an fp8 tensor with a `block` takes a `stored_block`"), "{err}");
}

/// A tensor whose chips' shares would split its blocks is stored as it is and zero-padded
/// along the axis its slices cut: the slices partition the padded axis; a pad that does not
/// grow that axis, or of a Q8_0 tensor, is refused naming the tensor.
#[test]
fn a_pad_grows_the_axis_the_slices_cut() {
    // Wo1 [64, 64] split by columns into halves: stored with 32 columns, padded to 64.
    let padded = |storage: TensorStorage, axis: usize, to: usize| {
        move |b: &mut Bundle| {
            let t = b.manifest.tensors.get_mut("Wo1").unwrap();
            (t.storage, t.shape, t.pad) = (storage, vec![64, 32], Some(crate::manifest::Pad { axis, to }));
        }
    };
    for storage in [TensorStorage::Mxfp4, TensorStorage::Dense] {
        let mut ok = sample();
        padded(storage, 1, 64)(&mut ok);
        assert!(ok.problems().is_empty(), "32 columns padded to 64: {:#?}", ok.problems());
    }
    let err = problem(padded(TensorStorage::Mxfp4, 1, 32));
    assert!(err.to_string().contains("tensors.Wo1: pad grows axis 1 from 32 to 32, not beyond it"), "{err}");
    let err = problem(padded(TensorStorage::Mxfp4, 0, 80));
    assert!(err.to_string().contains("tensors.Wo1: pad grows axis 0, which its slices do not cut"), "{err}");
    let err = problem(padded(TensorStorage::Q8_0, 1, 64));
    assert!(err.to_string().contains("tensors.Wo1: storage q8_0 is never padded"), "{err}");
    let err = problem(padded(TensorStorage::Dense, 1, 80));
    assert!(
        err.to_string().contains("tensors.Wo1: the chips' slices of `the tensor` axis 1 stop at 64 of 80"),
        "{err}"
    );
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

mod schedule {
    use super::*;
    use crate::manifest::{Invocation, Run};

    fn looped(block: &[&str], layers: &[usize]) -> Invocation {
        Invocation { run: Run::Loop, block: block.iter().map(|s| s.to_string()).collect(), layers: layers.to_vec() }
    }

    #[test]
    fn the_sample_schedule_runs_each_run_of_a_kind_as_one_loop() {
        let s = &sample().manifest.schedule;
        assert_eq!(s.layer_order().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(s.invocations[1], looped(&["attn"], &[0]));
        assert_eq!(
            s.resident,
            [vec!["embed".to_string()], vec!["attn".into()], vec!["window".into()], vec!["head".into()]]
        );
    }

    #[test]
    fn a_block_of_kinds_resident_together_is_one_loop() {
        let mut bundle = sample();
        let s = &mut bundle.manifest.schedule;
        s.resident = vec![vec!["embed".into()], vec!["attn".into(), "window".into()], vec!["head".into()]];
        s.invocations.splice(1..4, [looped(&["attn", "window"], &[0, 1]), looped(&["attn"], &[2])]);
        assert!(bundle.problems().is_empty(), "{:#?}", bundle.problems());
    }

    #[test]
    fn a_block_of_kinds_not_resident_together_is_refused() {
        let err = problem(|b| {
            let s = &mut b.manifest.schedule;
            s.invocations.splice(1..4, [looped(&["attn", "window"], &[0, 1]), looped(&["attn"], &[2])]);
        });
        assert!(err.to_string().contains("schedule.invocations[1].block: loops over kinds"), "{err}");
        assert!(err.to_string().contains("not resident together"), "{err}");
    }

    #[test]
    fn a_schedule_that_skips_repeats_or_reorders_a_layer_is_refused() {
        let err = problem(|b| b.manifest.schedule.invocations[3] = looped(&["attn"], &[0]));
        assert_eq!(
            err.to_string(),
            "manifest.json: schedule.invocations[3].layers: runs layer 0 where layer 2 comes next; the loops run every layer once, in order"
        );
        let err = problem(|b| drop(b.manifest.schedule.invocations.remove(3)));
        assert!(err.to_string().contains("the loops run layers 0..2, but the bundle has 3 layers"), "{err}");
        let err = problem(|b| b.manifest.schedule.invocations.swap(1, 3));
        assert!(err.to_string().contains("runs layer 2 where layer 0 comes next"), "{err}");
    }

    #[test]
    fn a_loop_must_run_each_layer_as_its_own_kind_in_whole_blocks() {
        let err = problem(|b| b.manifest.schedule.invocations[2].block = vec!["attn".into()]);
        assert!(err.to_string().contains("runs layer 1 as kind `attn`, but layer 1 is kind `window`"), "{err}");
        let err = problem(|b| {
            let s = &mut b.manifest.schedule;
            s.resident = vec![vec!["embed".into()], vec!["attn".into(), "window".into()], vec!["head".into()]];
            s.invocations.splice(1..4, [looped(&["attn", "window"], &[0, 1, 2])]);
        });
        assert!(err.to_string().contains("loops 3 layers over a block of 2 kinds"), "{err}");
    }

    #[test]
    fn the_embedding_comes_first_and_the_head_last() {
        let mut bundle = sample();
        bundle.manifest.schedule.invocations.swap(0, 4);
        let problems: Vec<String> = bundle.problems().iter().map(|p| p.to_string()).collect();
        assert!(problems.iter().any(|p| p.contains("schedule.invocations[0]: runs head")), "{problems:#?}");
        assert!(problems.iter().any(|p| p.contains("schedule.invocations[4]: runs embed")), "{problems:#?}");
        let err = problem(|b| b.manifest.schedule.invocations[0].layers = vec![0]);
        assert!(err.to_string().contains("the embed invocation has no block or layers"), "{err}");
    }

    #[test]
    fn every_program_is_resident_in_exactly_one_set() {
        let err = problem(|b| b.manifest.schedule.resident.pop().map(drop).unwrap_or(()));
        assert!(err.to_string().contains("program `head` is in no set"), "{err}");
        let err = problem(|b| b.manifest.schedule.resident[0].push("attn".into()));
        assert!(err.to_string().contains("`attn` is in more than one set"), "{err}");
        let err = problem(|b| b.manifest.schedule.resident[0].push("mlp".into()));
        assert!(err.to_string().contains("names `mlp`, which is not a program"), "{err}");
    }
}
