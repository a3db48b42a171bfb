//! `estimate_streamed` (what `rdu plan` lowers): the same programs, bindings, schedule and step
//! estimate as the certified lowering of the same cut, on every tiny preset in the decode-type
//! cuts (and prefill and forward on one); every certificate says it is an estimate only; a
//! bundle refuses such a model; an `Estimator`'s shared embedding and head give the same
//! estimates as lowering each cut afresh.

use rdu_compiler::deploy::{
    estimate_streamed, lower_batched_decode_streamed, lower_batched_tp_decode_streamed, lower_decode_streamed,
    lower_forward_streamed, lower_prefill_streamed, lower_prefill_tp_streamed, lower_tp_decode_streamed,
    lower_verify_streamed, Estimator, LowerOptions, Storage, StreamedModel, StreamedReject, ESTIMATE_ONLY,
};
use rdu_compiler::fit::admits_tp;
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::{Cut, ModelSpec};
use rdu_spatial::chip::Chip;

fn opts<'a>(progress: &'a mut dyn FnMut(rdu_compiler::deploy::Progress<'_>)) -> LowerOptions<'a> {
    LowerOptions { chip: Chip::builtin("sn50").expect("builtin chip"), storage: Storage::AllQ8, seed: 5, progress }
}

/// The certified lowering of `cut`.
fn certified(spec: &ModelSpec, cut: Cut) -> Result<StreamedModel, StreamedReject> {
    let mut quiet = |_: rdu_compiler::deploy::Progress<'_>| {};
    let o = opts(&mut quiet);
    match cut {
        Cut::Forward { seq } => lower_forward_streamed(spec, seq, o),
        Cut::Decode { ctx } => lower_decode_streamed(spec, ctx, o),
        Cut::Batched { batch, ctx } => lower_batched_decode_streamed(spec, batch, ctx, o),
        Cut::Tp { tp, ctx } => lower_tp_decode_streamed(spec, tp, ctx, o),
        Cut::BatchedTp { batch, tp, ctx } => lower_batched_tp_decode_streamed(spec, batch, tp, ctx, o),
        Cut::Prefill { chunk, ctx } => lower_prefill_streamed(spec, chunk, ctx, o),
        Cut::PrefillTp { chunk, tp, ctx } => lower_prefill_tp_streamed(spec, chunk, tp, ctx, o),
        Cut::Verify { draft, batch, tp, ctx } => lower_verify_streamed(spec, draft, batch, tp, ctx, o),
    }
}

/// Every program of `m` as (name, spatial text).
fn programs(m: &StreamedModel) -> Vec<(String, String)> {
    std::iter::once(&m.embed)
        .chain(m.kinds.iter().map(|k| &k.program))
        .chain([&m.head])
        .map(|p| (p.name.clone(), rdu_spatial::text::print(&p.spatial)))
        .collect()
}

fn same(label: &str, estimated: &StreamedModel, lowered: &StreamedModel) {
    assert_eq!(programs(estimated), programs(lowered), "{label}: the same programs");
    assert_eq!(estimated.layers, lowered.layers, "{label}: the same bindings");
    assert_eq!(estimated.schedule(), lowered.schedule(), "{label}: the same schedule");
    assert_eq!(estimated.step_estimate(), lowered.step_estimate(), "{label}: the same step estimate");
    assert_eq!(estimated.serial_step_estimate(), lowered.serial_step_estimate(), "{label}");
    for p in
        std::iter::once(&estimated.embed).chain(estimated.kinds.iter().map(|k| &k.program)).chain([&estimated.head])
    {
        assert!(p.certificate.checks.iter().any(|c| c == ESTIMATE_ONLY), "{label}: {} says so", p.name);
        assert!(p.certificate.checks.iter().any(|c| c == "structure"), "{label}: {} structure checked", p.name);
        assert!(p.certificate.checks.iter().any(|c| c == "resources"), "{label}: {} resources checked", p.name);
    }
    let refusal = estimated.bundle().expect_err("a bundle refuses an estimate");
    assert!(refusal.contains("estimate only"), "{label}: {refusal}");
}

#[test]
fn estimates_equal_the_certified_lowering_on_every_tiny_preset() {
    let ctx = 32;
    for name in presets::names().into_iter().filter(|n| n.starts_with("tiny-")) {
        let spec = presets::get(name).expect("preset");
        let mut cuts = vec![Cut::Decode { ctx }, Cut::Batched { batch: 4, ctx }];
        if admits_tp(&spec, 2, &Storage::AllQ8).is_ok() {
            cuts.push(Cut::Tp { tp: 2, ctx });
            cuts.push(Cut::BatchedTp { batch: 4, tp: 2, ctx });
        }
        let estimator = Estimator::new(&spec, Chip::builtin("sn50").unwrap(), Storage::AllQ8, 5);
        for cut in cuts {
            let label = format!("{name} {}", cut.describe());
            let lowered = certified(&spec, cut).unwrap_or_else(|e| panic!("{label}: {e}"));
            let estimated = estimate_streamed(&spec, cut, opts(&mut |_| {})).unwrap_or_else(|e| panic!("{label}: {e}"));
            same(&label, &estimated, &lowered);
            // A tensor-parallel cut shares its one-chip counterpart's embedding and head.
            let spine = estimator.spine(Cut::Decode { ctx }, &mut |_| {}).unwrap();
            let spine = if cut.batch().is_some() {
                estimator.spine(Cut::Batched { batch: 4, ctx }, &mut |_| {}).unwrap()
            } else {
                spine
            };
            let shared = estimator.estimate(cut, &spine, &mut |_| {}).unwrap_or_else(|e| panic!("{label}: {e}"));
            same(&format!("{label} (shared spine)"), &shared, &lowered);
        }
    }
}

#[test]
fn prefill_and_forward_estimates_equal_their_lowering() {
    let spec = presets::get("tiny-qwen3-next").expect("preset");
    for cut in [Cut::Prefill { chunk: 4, ctx: 32 }, Cut::Forward { seq: 5 }] {
        let label = format!("tiny-qwen3-next {}", cut.describe());
        let lowered = certified(&spec, cut).unwrap();
        let estimated = estimate_streamed(&spec, cut, opts(&mut |_| {})).unwrap();
        same(&label, &estimated, &lowered);
    }
    // Prefill over two chips.
    let spec = presets::get("tiny-llama").expect("preset");
    let cut = Cut::PrefillTp { chunk: 4, tp: 2, ctx: 32 };
    let lowered = certified(&spec, cut).unwrap();
    let estimated = estimate_streamed(&spec, cut, opts(&mut |_| {})).unwrap();
    same("tiny-llama prefill over 2 chips", &estimated, &lowered);
}

#[test]
fn verify_estimates_equal_their_lowering() {
    for (name, cut) in [
        ("tiny-qwen3-next", Cut::Verify { draft: 3, batch: None, tp: 1, ctx: 32 }),
        ("tiny-gemma3", Cut::Verify { draft: 2, batch: Some(2), tp: 1, ctx: 32 }),
        ("tiny-llama", Cut::Verify { draft: 4, batch: None, tp: 2, ctx: 32 }),
    ] {
        let spec = presets::get(name).expect("preset");
        let label = format!("{name} {}", cut.describe());
        let lowered = certified(&spec, cut).unwrap_or_else(|e| panic!("{label}: {e}"));
        let estimated = estimate_streamed(&spec, cut, opts(&mut |_| {})).unwrap_or_else(|e| panic!("{label}: {e}"));
        same(&label, &estimated, &lowered);
    }
}

#[test]
fn estimates_refuse_what_the_lowering_refuses() {
    let spec = presets::get("tiny-llama").expect("preset");
    let err = |cut| estimate_streamed(&spec, cut, opts(&mut |_| {})).unwrap_err().to_string();
    assert!(err(Cut::Decode { ctx: 0 }).contains("at least 1 position"));
    assert!(err(Cut::Batched { batch: 0, ctx: 8 }).contains("at least 1 sequence"));
    assert!(err(Cut::Tp { tp: 3, ctx: 8 }).starts_with("--tp 3 does not divide"));
    let estimator = Estimator::new(&spec, Chip::builtin("sn50").unwrap(), Storage::AllQ8, 5);
    let spine = estimator.spine(Cut::Decode { ctx: 8 }, &mut |_| {}).unwrap();
    let wrong = estimator.estimate(Cut::Batched { batch: 2, ctx: 8 }, &spine, &mut |_| {}).unwrap_err();
    assert!(wrong.to_string().contains("are not those of"), "{wrong}");
}
