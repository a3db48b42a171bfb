//! Sectioning: when a kind's stages need more units than one configuration of the chip has,
//! split them, in order, into sections loaded one after another. A kind is sectioned, never
//! rejected, for size; a single stage larger than the chip is left for certification to refuse.

use super::super::work::{op_work, Work, WorkModel};
use rdu_spatial::chip::Chip;
use rdu_spatial::program::{Section, SpatialProgram, Stage};

/// The fewest PCUs and PMUs a stage can run on: one PCU, and enough PMUs for its results and
/// a double-buffered tile of its weights.
pub fn minimum_units(model: &WorkModel<'_>, stage: &Stage, chip: &Chip) -> (u32, u32) {
    let mut work = Work::default();
    for op in &stage.ops {
        work += op_work(model, op);
    }
    let tile_buffer = (2 * chip.pmu_sram_bytes).min(work.hbm_bytes);
    let pmus = (work.sram_bytes + tile_buffer).div_ceil(chip.pmu_sram_bytes.max(1)).max(1);
    (1, u32::try_from(pmus).unwrap_or(u32::MAX))
}

/// Splits the program's stages into as few in-order sections as fit the chip.
pub fn section(program: &mut SpatialProgram, chip: &Chip) {
    let stages: Vec<Stage> = program.sections.drain(..).flat_map(|s| s.stages).collect();
    let mut sections: Vec<Section> = Vec::new();
    let mut current = Section::default();
    let (mut pcus, mut pmus) = (0u64, 0u64);
    let model = WorkModel::of(program);
    for stage in stages {
        let (p, m) = minimum_units(&model, &stage, chip);
        let fits = pcus + p as u64 <= chip.pcus as u64 && pmus + m as u64 <= chip.pmus as u64;
        if !fits && !current.stages.is_empty() {
            sections.push(std::mem::take(&mut current));
            (pcus, pmus) = (0, 0);
        }
        pcus += p as u64;
        pmus += m as u64;
        current.stages.push(stage);
    }
    if !current.stages.is_empty() || sections.is_empty() {
        sections.push(current);
    }
    program.sections = sections;
}
