//! The cost of a lowered program: per-stage work (`work::op_work`) handed to the chip's cost
//! model (`rdu_spatial::cost`).

use super::work::{op_work, Work, WorkModel};
use rdu_spatial::chip::Chip;
use rdu_spatial::cost::{estimate, CostError, CostInput, Precision, StageWork, StepCost};
use rdu_spatial::program::SpatialProgram;
use std::collections::{BTreeMap, BTreeSet};

/// The cost model's input for one step of `program`: each stage's work, and the earlier
/// stages of its section whose results it reads (`StageWork::after`).
pub fn cost_input(program: &SpatialProgram) -> CostInput {
    let model = WorkModel::of(program);
    CostInput {
        sections: program
            .sections
            .iter()
            .map(|section| {
                // The stage that last wrote each tensor (a result, or a state updated in place).
                let mut written: BTreeMap<&str, usize> = BTreeMap::new();
                section
                    .stages
                    .iter()
                    .enumerate()
                    .map(|(i, stage)| {
                        let reads = stage.ops.iter().flat_map(|op| op.reads());
                        let after: BTreeSet<usize> =
                            reads.filter_map(|t| written.get(t).copied()).filter(|&j| j != i).collect();
                        for out in stage.ops.iter().flat_map(|op| &op.outs) {
                            written.insert(out, i);
                        }
                        let mut w = Work::default();
                        let mut tiles = 1u32;
                        for op in &stage.ops {
                            w += op_work(&model, op);
                            if let Some(t) = &op.tiling {
                                tiles = tiles.max(t.tiles.len() as u32);
                            }
                        }
                        StageWork {
                            name: stage.name.clone(),
                            flops: w.flops,
                            hbm_bytes: w.hbm_bytes,
                            ddr_bytes: w.ddr_bytes,
                            sram_bytes: w.sram_bytes,
                            link_bytes: w.link_bytes,
                            pcus: stage.pcus,
                            pmus: stage.pmus,
                            tiles,
                            hops: 0,
                            after: Some(after.into_iter().collect()),
                        }
                    })
                    .collect()
            })
            .collect(),
    }
}

/// The estimated cost of one step of `program` on `chip`: `cost_input` with the mesh hops
/// between consecutive placed stages of each section.
pub fn program_cost(program: &SpatialProgram, chip: &Chip) -> Result<StepCost, CostError> {
    estimate(chip, &placed_input(program, chip), Precision::Bf16)
}

/// [`program_cost`] of a run whose first section's stages already hold `held[i]` bytes of the
/// weights stage `i` reads from HBM in on-chip memory (a looped iteration whose weights were
/// prefetched: `deploy::schedule`); those bytes are not read again, so the stage's steady phase
/// and its first tile are its remaining traffic's.
pub fn primed_cost(program: &SpatialProgram, chip: &Chip, held: &[u64]) -> Result<StepCost, CostError> {
    let mut input = placed_input(program, chip);
    if let Some(first) = input.sections.first_mut() {
        for (w, &bytes) in first.iter_mut().zip(held) {
            w.hbm_bytes = w.hbm_bytes.saturating_sub(bytes);
        }
    }
    estimate(chip, &input, Precision::Bf16)
}

/// `cost_input` with the mesh hops between consecutive placed stages of each section.
fn placed_input(program: &SpatialProgram, chip: &Chip) -> CostInput {
    let mut input = cost_input(program);
    for (section, work) in program.sections.iter().zip(&mut input.sections) {
        for (i, w) in work.iter_mut().enumerate().skip(1) {
            if let (Some(prev), Some(this)) = (&section.stages[i - 1].region, &section.stages[i].region) {
                w.hops = prev.hops_to(this, chip.mesh_cols);
            }
        }
    }
    input
}
