//! Kernel looping: the step's schedule covers every layer exactly once, in order, is derived
//! deterministically, loops a repeating block of kinds only when they are resident together, and
//! its estimate is never slower than the unlooped step nor faster than the HBM roofline of its
//! own bytes. Looped kind programs stay one program per kind, byte-identical whatever the depth.

use rdu_compiler::deploy::{
    lower_batched_decode_streamed, lower_batched_tp_decode_streamed, lower_decode_streamed, lower_forward_streamed,
    lower_prefill_streamed, lower_tp_decode_streamed, LowerOptions, Storage, StreamedModel,
};
use rdu_compiler::fit::admits_tp;
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::ModelSpec;
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::Run;

fn opts<'a>(chip: &str, progress: &'a mut dyn FnMut(rdu_compiler::deploy::Progress<'_>)) -> LowerOptions<'a> {
    LowerOptions { chip: Chip::builtin(chip).expect("builtin chip"), storage: Storage::AllQ8, seed: 3, progress }
}

/// Every cut of a tiny preset: decode, batched, tp 2 and batched-tp 2 (where admitted), prefill, forward.
fn every_cut(name: &str, spec: &ModelSpec) -> Vec<(String, StreamedModel)> {
    let ok = |cut: &str, r: Result<StreamedModel, _>| {
        (format!("{name} {cut}"), r.unwrap_or_else(|e| panic!("{name} {cut}: {e}")))
    };
    let mut out = vec![
        ok("decode", lower_decode_streamed(spec, 32, opts("sn50", &mut |_| {}))),
        ok("batched 3", lower_batched_decode_streamed(spec, 3, 32, opts("sn50", &mut |_| {}))),
        ok("prefill 4", lower_prefill_streamed(spec, 4, 32, opts("sn40l", &mut |_| {}))),
        ok("forward 5", lower_forward_streamed(spec, 5, opts("sn50", &mut |_| {}))),
    ];
    if admits_tp(spec, 2, &Storage::AllQ8).is_ok() {
        out.push(ok("tp 2", lower_tp_decode_streamed(spec, 2, 32, opts("sn50", &mut |_| {}))));
        out.push(ok("batched-tp 2", lower_batched_tp_decode_streamed(spec, 2, 2, 32, opts("sn50", &mut |_| {}))));
    }
    out
}

fn check_schedule(label: &str, model: &StreamedModel) {
    let schedule = model.schedule();
    assert_eq!(schedule, model.schedule(), "{label}: the schedule is deterministic");
    // Every layer exactly once, in order; each loop a whole number of blocks of its layers' kinds.
    let order: Vec<usize> = schedule.layer_order().collect();
    assert_eq!(order, (0..model.layers.len()).collect::<Vec<_>>(), "{label}");
    let runs: Vec<Run> = schedule.invocations.iter().map(|i| i.run).collect();
    assert_eq!((runs[0], runs[runs.len() - 1]), (Run::Embed, Run::Head), "{label}");
    for inv in schedule.invocations.iter().filter(|i| i.run == Run::Loop) {
        assert_eq!(inv.layers.len() % inv.block.len(), 0, "{label}");
        for (j, &l) in inv.layers.iter().enumerate() {
            assert_eq!(model.layers[l].kind, inv.block[j % inv.block.len()], "{label} layer {l}");
        }
    }
    // The bundle carries this schedule and passes validation (the host's rules).
    let bundle = model.bundle().unwrap_or_else(|e| panic!("{label}: {e}"));
    assert_eq!(bundle.manifest.schedule, schedule, "{label}");
    assert!(bundle.problems().is_empty(), "{label}: {:#?}", bundle.problems());
    // Prefetch marks: only in kind programs, only on stages that stream a weight ahead.
    for k in &model.kinds {
        let p = &k.program.spatial;
        assert!(p.prefetch_problems().is_empty(), "{label} {}: {:?}", k.program.name, p.prefetch_problems());
        let marked = p.sections.iter().flat_map(|s| &s.stages).any(|s| s.prefetch);
        assert_eq!(marked, p.sections.len() == 1, "{label} {}: a one-section kind prefetches", k.program.name);
    }
    for part in [&model.embed, &model.head] {
        assert!(!part.spatial.sections.iter().flat_map(|s| &s.stages).any(|s| s.prefetch), "{label}");
    }
    // Looping never makes a step slower, and never beats the HBM roofline of its own bytes.
    let (looped, serial) = (model.step_estimate(), model.serial_step_estimate());
    assert!(looped.seconds <= serial.seconds, "{label}: looped {looped:?} > serial {serial:?}");
    assert!(looped.reconfigurations <= serial.reconfigurations, "{label}");
    assert_eq!((looped.hbm_bytes, looped.roofline_seconds), (serial.hbm_bytes, serial.roofline_seconds), "{label}");
    for step in [&looped, &serial] {
        assert!(step.roofline_seconds <= step.seconds * (1.0 + 1e-12), "{label}: beats the roofline: {step:?}");
        assert!(step.roofline_fraction > 0.0 && step.roofline_fraction <= 1.0 + 1e-12, "{label}: {step:?}");
    }
}

#[test]
fn every_tiny_preset_and_cut_has_a_covering_schedule_within_the_roofline() {
    for name in presets::names().into_iter().filter(|n| n.starts_with("tiny-")) {
        let spec = presets::resolve(name).expect("preset");
        for (label, model) in every_cut(name, &spec) {
            check_schedule(&label, &model);
        }
    }
}

#[test]
fn one_kind_loops_once_and_overlaps_its_layer_tails() {
    let spec = presets::resolve("tiny-llama").unwrap();
    let model = lower_decode_streamed(&spec, 32, opts("sn50", &mut |_| {})).unwrap();
    let schedule = model.schedule();
    assert_eq!(schedule.invocations.len(), 3, "{schedule:?}");
    assert_eq!(schedule.invocations[1].block, [model.kinds[0].program.name.clone()]);
    let (looped, serial) = (model.step_estimate(), model.serial_step_estimate());
    assert_eq!(looped.loops, 1);
    assert!(
        looped.seconds < serial.seconds,
        "every layer after the first hides some of its tail: {looped:?} {serial:?}"
    );
}

#[test]
fn alternating_kinds_share_the_chip_and_loop_as_one_block() {
    // tiny-qwen3-next alternates DeltaNet and attention layers: on a decode cut both kinds are
    // placed on half the chip each, stay resident together, and the step is one loop over the
    // block with no reconfiguration between them.
    let spec = presets::resolve("tiny-qwen3-next").unwrap();
    let model = lower_decode_streamed(&spec, 32, opts("sn50", &mut |_| {})).unwrap();
    let kinds: Vec<String> = model.kinds.iter().map(|k| k.program.name.clone()).collect();
    assert_eq!(kinds.len(), 2);
    let schedule = model.schedule();
    assert!(schedule.resident.iter().any(|s| kinds.iter().all(|k| s.contains(k))), "{schedule:?}");
    assert_eq!(schedule.invocations.len(), 3, "{schedule:?}");
    let body: Vec<&str> = model.layers[..2].iter().map(|b| b.kind.as_str()).collect();
    assert_eq!(schedule.invocations[1].block, body);
    let chip = Chip::builtin("sn50").unwrap();
    let units: u32 = model.kinds.iter().map(|k| k.program.cost.pcus).sum();
    assert!(units <= chip.pcus, "{units}");
    let (looped, serial) = (model.step_estimate(), model.serial_step_estimate());
    // Embedding and head each switch: into the loop, out of it, and back to the embedding.
    assert_eq!(looped.reconfigurations, 3, "{looped:?}");
    assert!(serial.reconfigurations > looped.reconfigurations, "{serial:?}");
    // The prefill cut places every kind on the whole chip: runs of one kind, no block.
    let prefill = lower_prefill_streamed(&spec, 4, 32, opts("sn50", &mut |_| {})).unwrap();
    assert!(prefill.schedule().invocations.iter().all(|i| i.block.len() <= 1), "{:?}", prefill.schedule());
}

#[test]
fn looped_kind_programs_do_not_depend_on_depth_and_schedules_differ_only_in_layers() {
    let base = presets::resolve("tiny-qwen3-next").expect("preset");
    let mut deep = base.clone();
    deep.layers = (0..12).map(|l| base.layers[l % base.layers.len()].clone()).collect();
    let lowered = |spec: &ModelSpec| lower_decode_streamed(spec, 32, opts("sn50", &mut |_| {})).expect("lowers");
    let (shallow, deep) = (lowered(&base), lowered(&deep));
    let (a, b) = (shallow.bundle().unwrap(), deep.bundle().unwrap());
    let programs = |files: &std::collections::BTreeMap<String, String>| {
        files
            .iter()
            .filter(|(k, _)| k.starts_with("programs/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(programs(&a.files), programs(&b.files), "kind programs differ between 4 and 12 layers");
    let without_layers = |s: &rdu_spatial::manifest::Schedule| {
        let mut s = s.clone();
        s.invocations.iter_mut().for_each(|i| i.layers.clear());
        s
    };
    assert_ne!(a.manifest.schedule, b.manifest.schedule);
    assert_eq!(without_layers(&a.manifest.schedule), without_layers(&b.manifest.schedule));
    assert_eq!(b.manifest.schedule.layer_order().count(), 12);
}
