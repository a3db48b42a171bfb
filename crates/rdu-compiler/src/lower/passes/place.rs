//! Placement: share each section's PCUs and PMUs among its stages so the pipeline is
//! balanced — every stage gets its minimum, and the rest goes to stages in proportion to
//! their FLOPs (PCUs) and the bytes they stream (PMUs) — then give every stage its region of
//! the chip's unit mesh: consecutive runs of PCUs and of PMUs in the mesh's serpentine order,
//! stage after stage, so each stage is a connected strip and the next stage starts where it
//! ends (`rdu_spatial::program::Region`).

use super::super::work::{op_work, Work, WorkModel};
use super::section::minimum_units;
use rdu_spatial::chip::Chip;
use rdu_spatial::program::{Region, SpatialProgram};

/// Assigns `pcus` and `pmus` to every stage of every section.
pub fn place(program: &mut SpatialProgram, chip: &Chip) {
    let chips = program.tp.as_ref().map_or(1, |t| t.chips.max(1) as u64);
    let model = WorkModel::new(&program.tensors, chips);
    for s in 0..program.sections.len() {
        let stages = &program.sections[s].stages;
        let mins: Vec<(u32, u32)> = stages.iter().map(|st| minimum_units(&model, st, chip)).collect();
        let works: Vec<Work> = stages
            .iter()
            .map(|st| {
                let mut w = Work::default();
                for op in &st.ops {
                    w += op_work(&model, op);
                }
                w
            })
            .collect();
        let pcus = share(
            chip.pcus,
            &mins.iter().map(|m| m.0).collect::<Vec<_>>(),
            &works.iter().map(|w| w.flops).collect::<Vec<_>>(),
        );
        let pmus = share(
            chip.pmus,
            &mins.iter().map(|m| m.1).collect::<Vec<_>>(),
            &works.iter().map(|w| w.hbm_bytes + w.sram_bytes).collect::<Vec<_>>(),
        );
        let (mut pcu, mut pmu) = (0u32, 0u32);
        for (i, stage) in program.sections[s].stages.iter_mut().enumerate() {
            stage.pcus = pcus[i];
            stage.pmus = pmus[i];
            let region = Region { pcu: (pcu, pcu.saturating_add(pcus[i])), pmu: (pmu, pmu.saturating_add(pmus[i])) };
            (pcu, pmu) = (region.pcu.1, region.pmu.1);
            stage.region = Some(region);
        }
    }
}

/// Every stage its minimum, then the remaining units in proportion to `weights` (largest
/// remainders first, ties to the earlier stage) — deterministic integer arithmetic.
fn share(total: u32, minimum: &[u32], weights: &[u64]) -> Vec<u32> {
    let used: u64 = minimum.iter().map(|&m| m as u64).sum();
    let spare = (total as u64).saturating_sub(used);
    let sum: u128 = weights.iter().map(|&w| w as u128).sum::<u128>().max(1);
    let mut out: Vec<u32> = minimum.to_vec();
    let mut remainders: Vec<(u128, usize)> = Vec::new();
    let mut given = 0u64;
    for (i, &w) in weights.iter().enumerate() {
        let exact = spare as u128 * w as u128;
        let whole = (exact / sum) as u64;
        out[i] = out[i].saturating_add(whole as u32);
        given += whole;
        remainders.push((exact % sum, i));
    }
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in remainders.iter().take((spare - given) as usize) {
        out[i] += 1;
    }
    out
}
