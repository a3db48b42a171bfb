//! The cost model: seconds per stage, section and step from a chip's figures, charging every overhead the chip file names.
//!
//! A stage streams its tiles through its own PCUs and PMUs, overlapping compute with
//! traffic, so its time is the largest of its compute, HBM, DDR, SRAM and link times.
//! A section runs its stages as one pipeline: the slowest stage (or the HBM, DDR or link
//! traffic all its stages share, if that takes longer), plus the fill — along the longest path
//! through the stages' graph (a stage waits for the first tiles of the stages whose results it
//! reads), each stage's first tile, `pipeline_fill` cycles per stage, the link latency of a
//! stage with all-reduce traffic, and the mesh hops from the previous stage's region to its own
//! (`hop` cycles each, from the placement) — plus one barrier. A step spanning several sections reloads
//! each of them once per step. It does not model contention inside the mesh or SRAM
//! capacity (certification checks that a section fits).

use serde::{Deserialize, Serialize};

use crate::chip::Chip;

mod retime;
pub use retime::Retimer;

/// The number format a stage's products run in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    #[default]
    Bf16,
    Fp8,
}

/// One step's work: sections loaded one after another, each a pipeline of stages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CostInput {
    pub sections: Vec<Vec<StageWork>>,
}

/// The work of one stage in one step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StageWork {
    pub name: String,
    pub flops: u64,
    pub hbm_bytes: u64,
    pub ddr_bytes: u64,
    /// Bytes the stage reads and writes in its PMUs' SRAM.
    pub sram_bytes: u64,
    /// All-reduce bytes this chip sends over the chip-to-chip link.
    pub link_bytes: u64,
    pub pcus: u32,
    pub pmus: u32,
    /// Tiles the stage streams; the first one fills the pipeline.
    pub tiles: u32,
    /// Mesh hops from the previous stage of the section to this one (from the placement);
    /// the first tile crosses them, one `hop` of cycles each.
    #[serde(default)]
    pub hops: u32,
    /// The earlier stages of the section (their indices) whose results this stage reads: its
    /// first tile waits for theirs. `None`: the stage just before it, as in a chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<usize>>,
}

/// What limits a stage or a section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Compute,
    Hbm,
    Ddr,
    Sram,
    Link,
}

/// One stage's estimate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageCost {
    pub name: String,
    /// Steady-state seconds: the largest of the five times below.
    pub seconds: f64,
    pub bound: Bound,
    pub compute_seconds: f64,
    pub hbm_seconds: f64,
    pub ddr_seconds: f64,
    pub sram_seconds: f64,
    pub link_seconds: f64,
    /// What this stage adds to its section's pipeline fill.
    pub fill_seconds: f64,
}

/// One section's estimate: `seconds = steady_seconds + fill_seconds + synchronisation_seconds`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SectionCost {
    pub stages: Vec<StageCost>,
    /// Index of the slowest stage.
    pub slowest: usize,
    pub steady_seconds: f64,
    pub bound: Bound,
    /// The longest path of first tiles through the section's stages (`StageWork::after`):
    /// the sum of each stage's `fill_seconds` along it.
    pub fill_seconds: f64,
    /// The all-reduce latency on that path (part of `fill_seconds`).
    pub latency_seconds: f64,
    pub synchronisation_seconds: f64,
    pub seconds: f64,
    pub pcus: u32,
    pub pmus: u32,
}

/// One step's estimate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepCost {
    pub precision: Precision,
    pub sections: Vec<SectionCost>,
    /// Section loads per step: 0 for one resident section, else one per section.
    pub reconfigurations: u32,
    pub reconfiguration_seconds: f64,
    pub seconds: f64,
    pub flops: u64,
    pub hbm_bytes: u64,
    pub ddr_bytes: u64,
    pub link_bytes: u64,
    /// The most PCUs and PMUs any section uses.
    pub pcus: u32,
    pub pmus: u32,
    /// The HBM roofline: every HBM byte the step must move at full HBM bandwidth.
    pub roofline_seconds: f64,
    /// `roofline_seconds / seconds`: at most 1, as every section lasts at least its HBM bytes over the bandwidth.
    pub roofline_fraction: f64,
}

/// Work the model cannot cost; each names the section and stage.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CostError {
    #[error("nothing to cost: the step has no sections")]
    NoSections,
    #[error("section {section} has no stages")]
    EmptySection { section: usize },
    #[error("section {section} stage `{stage}` has {work} but no {unit}s to do it; give it at least one")]
    NoUnits { section: usize, stage: String, work: &'static str, unit: &'static str },
    #[error("section {section} stage `{stage}` has 0 tiles; a stage streams at least one tile")]
    NoTiles { section: usize, stage: String },
    #[error("section {section} stage `{stage}` waits for stage {after}, which does not come before it")]
    StageOrder { section: usize, stage: String, after: usize },
    #[error("section {section} uses {used} {unit}s but the chip has {available}; split it into more sections")]
    OverChip { section: usize, unit: &'static str, used: u64, available: u64 },
    #[error("tensor of shape {shape:?} is not Q8_0: its last dimension is not a multiple of 32")]
    Q8Misaligned { shape: Vec<u64> },
    #[error("tensor of shape {shape:?} cannot be held {format}")]
    Misfit { shape: Vec<u64>, format: &'static str },
    #[error("tensor of shape {shape:?} has more bytes than fit in 64 bits")]
    TooLarge { shape: Vec<u64> },
}

/// Estimate one step of `input` on `chip`, products in `precision`.
pub fn estimate(chip: &Chip, input: &CostInput, precision: Precision) -> Result<StepCost, CostError> {
    if input.sections.is_empty() {
        return Err(CostError::NoSections);
    }
    let sections = (input.sections.iter().enumerate())
        .map(|(idx, stages)| section(chip, idx, stages, precision))
        .collect::<Result<Vec<_>, _>>()?;
    let (reconfigurations, reconfiguration_seconds) = reconfiguration(chip, sections.len());
    let seconds = step_seconds(sections.iter().map(|s| s.seconds), reconfiguration_seconds);
    let all = || input.sections.iter().flatten();
    let hbm_bytes = all().map(|w| w.hbm_bytes).sum::<u64>();
    let roofline_seconds = hbm_bytes as f64 / chip.hbm_bandwidth;
    Ok(StepCost {
        precision,
        reconfigurations,
        reconfiguration_seconds,
        seconds,
        flops: all().map(|w| w.flops).sum(),
        hbm_bytes,
        ddr_bytes: all().map(|w| w.ddr_bytes).sum(),
        link_bytes: all().map(|w| w.link_bytes).sum(),
        pcus: sections.iter().map(|s| s.pcus).max().unwrap_or(0),
        pmus: sections.iter().map(|s| s.pmus).max().unwrap_or(0),
        roofline_seconds,
        roofline_fraction: roofline_seconds / seconds,
        sections,
    })
}

/// The sections a step of `sections` loads (none for one resident section) and their seconds.
fn reconfiguration(chip: &Chip, sections: usize) -> (u32, f64) {
    let reconfigurations = if sections > 1 { sections as u32 } else { 0 };
    (reconfigurations, f64::from(reconfigurations) * chip.reconfiguration)
}

/// A step's seconds: its sections' and their loads'.
fn step_seconds(sections: impl Iterator<Item = f64>, reconfiguration_seconds: f64) -> f64 {
    sections.sum::<f64>() + reconfiguration_seconds
}

impl StepCost {
    /// Tokens per second when a step processes `rows_per_step` rows (tokens).
    pub fn tokens_per_second(&self, rows_per_step: u64) -> f64 {
        rows_per_step as f64 / self.seconds
    }
}

fn section(chip: &Chip, idx: usize, work: &[StageWork], precision: Precision) -> Result<SectionCost, CostError> {
    if work.is_empty() {
        return Err(CostError::EmptySection { section: idx });
    }
    let pcus = work.iter().map(|w| u64::from(w.pcus)).sum::<u64>();
    let pmus = work.iter().map(|w| u64::from(w.pmus)).sum::<u64>();
    for (unit, used, available) in [("PCU", pcus, chip.pcus), ("PMU", pmus, chip.pmus)] {
        if used > u64::from(available) {
            return Err(CostError::OverChip { section: idx, unit, used, available: u64::from(available) });
        }
    }
    let mut stages = work.iter().map(|w| stage(chip, idx, w, precision)).collect::<Result<Vec<_>, _>>()?;
    let slowest = slowest_stage(stages.len(), |i| stages[i].seconds);
    for (i, (cost, w)) in stages.iter_mut().zip(work).enumerate() {
        cost.fill_seconds = stage_fill(chip, w, cost.seconds, i == slowest, w.hops);
    }
    let [hbm, ddr, link] = shared_seconds(chip, work);
    let (steady_seconds, bound) = slowest_of([(stages[slowest].seconds, stages[slowest].bound), hbm, ddr, link]);
    let (fill_seconds, latency_seconds) = longest_fill(chip, idx, work, &stages)?;
    Ok(SectionCost {
        slowest,
        steady_seconds,
        bound,
        fill_seconds,
        latency_seconds,
        synchronisation_seconds: chip.synchronisation,
        seconds: section_seconds(chip, steady_seconds, fill_seconds),
        pcus: pcus as u32,
        pmus: pmus as u32,
        stages,
    })
}

/// The slowest of `n` stages whose steady seconds are `seconds(i)`: the first of the longest.
fn slowest_stage(n: usize, seconds: impl Fn(usize) -> f64) -> usize {
    (0..n).fold(0, |best, i| if seconds(i) > seconds(best) { i } else { best })
}

/// What stage `w`, whose steady phase takes `seconds`, adds to its section's fill: its first
/// tile (none for the `slowest` stage, whose tiles are the steady phase), the pipeline fill,
/// its all-reduce latency and its `hops` from the stage before it.
fn stage_fill(chip: &Chip, w: &StageWork, seconds: f64, slowest: bool, hops: u32) -> f64 {
    let first_tile = if slowest { 0.0 } else { seconds / f64::from(w.tiles) };
    let per_stage_fill = chip.pipeline_fill_cycles / chip.clock_hz;
    let latency = link_latency(chip, w);
    let hops = f64::from(hops) * chip.hop_cycles / chip.clock_hz;
    first_tile + per_stage_fill + latency + hops
}

/// The HBM, DDR and link traffic all of a section's stages share, each over its bandwidth.
fn shared_seconds(chip: &Chip, work: &[StageWork]) -> [(f64, Bound); 3] {
    let shared = |bytes: fn(&StageWork) -> u64, bandwidth: f64| work.iter().map(bytes).sum::<u64>() as f64 / bandwidth;
    [
        (shared(|w| w.hbm_bytes, chip.hbm_bandwidth), Bound::Hbm),
        (shared(|w| w.ddr_bytes, chip.ddr_bandwidth), Bound::Ddr),
        (shared(|w| w.link_bytes, chip.link_bandwidth), Bound::Link),
    ]
}

/// A section's seconds: its steady phase, its fill and the barrier.
fn section_seconds(chip: &Chip, steady: f64, fill: f64) -> f64 {
    steady + fill + chip.synchronisation
}

/// The section's fill: the longest path of first tiles through its stages, each stage's first
/// tile leaving once those of the stages it reads (`StageWork::after`) have, and the
/// all-reduce latency on that path. A chain (every `after` unset) sums every stage's fill.
fn longest_fill(
    chip: &Chip,
    section: usize,
    work: &[StageWork],
    stages: &[StageCost],
) -> Result<(f64, f64), CostError> {
    // Per stage: seconds until its first tile is out, and the all-reduce latency on the way.
    let mut reach: Vec<(f64, f64)> = Vec::with_capacity(stages.len());
    for (i, (cost, w)) in stages.iter().zip(work).enumerate() {
        let chain = i.checked_sub(1);
        let after = w.after.as_deref().unwrap_or(chain.as_slice());
        let mut from = (0.0, 0.0);
        for &j in after {
            let &(seconds, latency) =
                reach.get(j).ok_or_else(|| CostError::StageOrder { section, stage: w.name.clone(), after: j })?;
            if seconds > from.0 {
                from = (seconds, latency);
            }
        }
        reach.push((from.0 + cost.fill_seconds, from.1 + link_latency(chip, w)));
    }
    Ok(reach.into_iter().fold((0.0, 0.0), |best, r| if r.0 > best.0 { r } else { best }))
}

/// The all-reduce latency a stage's first tile waits for: `link_latency` if it sends link traffic.
fn link_latency(chip: &Chip, w: &StageWork) -> f64 {
    if w.link_bytes > 0 {
        chip.link_latency
    } else {
        0.0
    }
}

fn stage(chip: &Chip, section: usize, w: &StageWork, precision: Precision) -> Result<StageCost, CostError> {
    let missing =
        |work: &'static str, unit: &'static str| CostError::NoUnits { section, stage: w.name.clone(), work, unit };
    if w.tiles == 0 {
        return Err(CostError::NoTiles { section, stage: w.name.clone() });
    }
    if w.flops > 0 && w.pcus == 0 {
        return Err(missing("FLOPs", "PCU"));
    }
    if w.sram_bytes > 0 && w.pmus == 0 {
        return Err(missing("SRAM traffic", "PMU"));
    }
    let times = stage_times(chip, w, w.pcus, precision);
    let (seconds, bound) = slowest_of(times);
    let [compute_seconds, hbm_seconds, ddr_seconds, sram_seconds, link_seconds] = times.map(|t| t.0);
    Ok(StageCost {
        name: w.name.clone(),
        seconds,
        bound,
        compute_seconds,
        hbm_seconds,
        ddr_seconds,
        sram_seconds,
        link_seconds,
        fill_seconds: 0.0,
    })
}

/// Whether `stage` refuses `w` on `pcus` PCUs (no tiles, or work without the units to do it).
fn unrunnable(w: &StageWork, pcus: u32) -> bool {
    w.tiles == 0 || (w.flops > 0 && pcus == 0) || (w.sram_bytes > 0 && w.pmus == 0)
}

/// A stage's compute, HBM, DDR, SRAM and link times with its work on `pcus` PCUs.
fn stage_times(chip: &Chip, w: &StageWork, pcus: u32, precision: Precision) -> [(f64, Bound); 5] {
    let per_pcu = match precision {
        Precision::Bf16 => chip.pcu_flops_bf16,
        Precision::Fp8 => chip.pcu_flops_fp8,
    };
    let ratio = |amount: u64, rate: f64| if amount == 0 { 0.0 } else { amount as f64 / rate };
    [
        (ratio(w.flops, f64::from(pcus) * per_pcu), Bound::Compute),
        (ratio(w.hbm_bytes, chip.hbm_bandwidth), Bound::Hbm),
        (ratio(w.ddr_bytes, chip.ddr_bandwidth), Bound::Ddr),
        (ratio(w.sram_bytes, f64::from(w.pmus) * chip.pmu_bandwidth()), Bound::Sram),
        (ratio(w.link_bytes, chip.link_bandwidth), Bound::Link),
    ]
}

/// The largest time and its bound; ties go to the earliest candidate.
fn slowest_of<const N: usize>(candidates: [(f64, Bound); N]) -> (f64, Bound) {
    candidates.into_iter().fold(candidates[0], |best, c| if c.0 > best.0 { c } else { best })
}
