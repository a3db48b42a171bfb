//! Beyond HBM (issue 46, item 6): a deployment whose weights exceed a chip's HBM is lowered,
//! not refused; the least-read classes of layer weights live in DDR (`fit::weight_tiers`), the
//! kind programs say so (`home` ddr), and the estimate reads those bytes at DDR bandwidth.

use rdu_compiler::deploy::{estimate_streamed, lower_decode_streamed, LowerOptions, Storage, StreamedModel};
use rdu_compiler::fit::{decode_parts, decode_tiers, Tier, WeightClass};
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::{Cut, ModelSpec};
use rdu_spatial::chip::Chip;
use rdu_spatial::program::{Home, Role};

fn sn50() -> Chip {
    Chip::builtin("sn50").expect("builtin chip")
}

fn in_ddr(tiers: &[WeightClass]) -> Vec<&str> {
    tiers.iter().filter(|c| c.tier == Tier::Ddr).map(|c| c.name.as_str()).collect()
}

/// What stays in HBM: every byte each chip holds but the classes moved to DDR.
fn hbm_left(spec: &ModelSpec, (batch, tp): (usize, Option<usize>), tiers: &[WeightClass]) -> u64 {
    let (_, demand) = decode_parts(spec, &Storage::AllQ8, 4096, batch, tp).unwrap();
    demand.total() - tiers.iter().filter(|c| c.tier == Tier::Ddr).map(|c| c.bytes).sum::<u64>()
}

#[test]
fn cold_routed_experts_go_to_ddr_first_and_only_what_hbm_cannot_hold_moves() {
    let chip = sn50();
    // deepseek-v2 in Q8_0 on one chip: 251 GB against 64 GB of HBM. Its routed experts are read
    // at 6 of 160 a step, everything else whole: only expert classes move.
    let spec = presets::resolve("deepseek-v2").unwrap();
    let tiers = decode_tiers(&spec, &Storage::AllQ8, (4096, 1, None), &chip).unwrap();
    let ddr = in_ddr(&tiers);
    assert_eq!(ddr, ["Wed", "Weg", "Weu"], "{tiers:?}");
    for c in &tiers {
        let share = if c.tier == Tier::Ddr { 6.0 / 160.0 } else { 1.0 };
        assert_eq!(c.read_share, share, "{c:?}");
    }
    assert!(hbm_left(&spec, (1, None), &tiers) <= chip.hbm_bytes);
    // Over 4 chips, 4 sequences' caches beside the weights: one class of experts is enough;
    // over 8 chips everything fits HBM.
    let tiers = decode_tiers(&spec, &Storage::AllQ8, (4096, 4, Some(4)), &chip).unwrap();
    assert_eq!(in_ddr(&tiers).len(), 1, "{tiers:?}");
    assert!(hbm_left(&spec, (4, Some(4)), &tiers) <= chip.hbm_bytes);
    let tiers = decode_tiers(&spec, &Storage::AllQ8, (4096, 1, Some(8)), &chip).unwrap();
    assert!(in_ddr(&tiers).is_empty(), "{tiers:?}");
    // A dense model: every class is read whole, so the fewest bytes that cover the overflow move.
    let spec = presets::resolve("llama-3.1-405b").unwrap();
    let tiers = decode_tiers(&spec, &Storage::AllQ8, (4096, 1, Some(4)), &chip).unwrap();
    let moved: u64 = tiers.iter().filter(|c| c.tier == Tier::Ddr).map(|c| c.bytes).sum();
    let left = hbm_left(&spec, (1, Some(4)), &tiers);
    assert!(left <= chip.hbm_bytes && left + moved > chip.hbm_bytes, "{tiers:?}");
    let biggest = tiers.iter().map(|c| c.bytes).max().unwrap();
    assert!(moved - (left + moved - chip.hbm_bytes) < biggest, "no class moved that was not needed: {tiers:?}");
}

/// The bytes a step of `m` reads from DDR a chip, and the kind programs' DDR-homed weights.
fn ddr_of(m: &StreamedModel) -> (u64, Vec<String>) {
    let (classes, bytes) = m.ddr_classes();
    for k in &m.kinds {
        for t in &k.program.spatial.tensors {
            let base = rdu_spatial::names::TensorName::parse(&t.name).base;
            assert_eq!(t.home == Home::Ddr, t.role == Role::Weight && classes.contains(&base), "{}", t.name);
        }
    }
    (bytes, classes)
}

#[test]
fn a_deployment_beyond_hbm_is_estimated_with_its_ddr_reads() {
    // deepseek-v2 over 2 chips (126 GB a chip): not refused; its kind programs home two expert
    // classes in DDR, and the step reads the chosen experts' bytes of them at DDR bandwidth.
    let spec = presets::resolve("deepseek-v2").unwrap();
    let cut = Cut::Tp { tp: 2, ctx: 4096 };
    let opts = LowerOptions { chip: sn50(), storage: Storage::AllQ8, seed: 5, progress: &mut |_| {} };
    let m = estimate_streamed(&spec, cut, opts).unwrap();
    let (bytes, classes) = ddr_of(&m);
    assert_eq!(classes, ["Wed", "Weu"]);
    let moe = m.kinds.iter().find(|k| k.program.spatial.tensors.iter().any(|t| t.home == Home::Ddr)).unwrap();
    // 6 of 160 experts a layer, each chip's half of two of its three matrices.
    let per_layer: u64 = (moe.program.spatial.tensors.iter())
        .filter(|t| t.home == Home::Ddr)
        .map(|t| rdu_compiler::lower::work::stored_bytes(t) / t.shape[0] as u64 * 6)
        .sum();
    assert_eq!(bytes, per_layer * moe.layers.len() as u64);
    let step = m.step_estimate();
    assert!(step.seconds >= bytes as f64 / m.chip.ddr_bandwidth, "{} s", step.seconds);
    // Over 8 chips everything fits HBM: nothing in DDR.
    let opts = LowerOptions { chip: sn50(), storage: Storage::AllQ8, seed: 5, progress: &mut |_| {} };
    let m8 = estimate_streamed(&spec, Cut::Tp { tp: 8, ctx: 4096 }, opts).unwrap();
    assert_eq!(ddr_of(&m8), (0, vec![]));
}

#[test]
fn a_certified_bundle_beyond_hbm_says_ddr_and_verifies() {
    // A tiny MoE on a chip with less HBM than its weights: certified (the homes do not change
    // what is computed), the bundle's kind programs say `ddr`, and `verify` accepts it.
    let spec = presets::resolve("tiny-qwen3-moe").unwrap();
    let (_, demand) = decode_parts(&spec, &Storage::AllQ8, 32, 1, None).unwrap();
    let chip = Chip { hbm_bytes: demand.total() - 1, ..sn50() };
    let opts = LowerOptions { chip: chip.clone(), storage: Storage::AllQ8, seed: 5, progress: &mut |_| {} };
    let m = lower_decode_streamed(&spec, 32, opts).unwrap();
    let (bytes, classes) = ddr_of(&m);
    assert!(!classes.is_empty() && bytes > 0, "{classes:?}");
    let bundle = m.bundle().unwrap();
    let texts: Vec<String> = m.kinds.iter().map(|k| rdu_spatial::text::print(&k.program.spatial)).collect();
    assert!(texts.iter().any(|t| t.lines().any(|l| l.contains("role=weight home=ddr"))), "{texts:?}");
    rdu_compiler::verify::verify_bundle(&bundle, &chip, &mut |_| {}).unwrap();
}
