//! Placement: share each section's PCUs and PMUs among its stages so the pipeline is
//! balanced — every stage gets its minimum; the remaining PMUs go in proportion to the bytes
//! stages stream, the remaining PCUs in proportion to their FLOPs or one at a time to the stage
//! with the most FLOPs per PCU, whichever the cost model times shorter — then give every stage
//! its region of the chip's unit mesh: consecutive runs of PCUs and of PMUs in the mesh's
//! serpentine order, stage after stage, so each stage is a connected strip and the next stage
//! starts where it ends (`rdu_spatial::program::Region`). Last, blocks of PCUs move between
//! a section's stages while the cost model times the whole section — steady phase and fill —
//! shorter (`refine`): the pipeline's first tiles are paid once per run, and a light stage's
//! first tile can be the whole of its work.

use super::super::cost::cost_input;
use super::super::work::WorkModel;
use super::section::minimum_units;
use rdu_spatial::chip::Chip;
use rdu_spatial::cost::{estimate, CostInput, Precision, StageWork};
use rdu_spatial::program::{Region, SpatialProgram};

/// `refine` moves PCUs in blocks of `chip.pcus / REFINE_BLOCKS` (8 on the SN50's 2,080).
const REFINE_BLOCKS: u32 = 256;

/// `refine` makes at most this many moves a section.
const MAX_MOVES: usize = 64;

/// A move must shorten the section by more than this share of its time.
const MIN_GAIN: f64 = 1e-4;

/// Assigns `pcus` and `pmus` to every stage of every section.
pub fn place(program: &mut SpatialProgram, chip: &Chip) {
    let model = WorkModel::of(program);
    // Each section's stages' minimum units, before any placement changes the program.
    let mins: Vec<Vec<(u32, u32)>> = (program.sections.iter())
        .map(|section| section.stages.iter().map(|st| minimum_units(&model, st, chip)).collect())
        .collect();
    drop(model);
    // Every stage's work, which placement does not change (only the units doing it).
    let unplaced = cost_input(program);
    for (s, mins) in mins.into_iter().enumerate() {
        let work = &unplaced.sections[s];
        let pmus = share(
            chip.pmus,
            &mins.iter().map(|m| m.1).collect::<Vec<_>>(),
            &work.iter().map(|w| w.hbm_bytes + w.sram_bytes).collect::<Vec<_>>(),
        );
        let (pcu_mins, flops): (Vec<u32>, Vec<u64>) =
            mins.iter().map(|m| m.0).zip(work.iter().map(|w| w.flops)).unzip();
        // Two ways to share the PCUs: in proportion to FLOPs, and balanced (the slowest stage's
        // compute as short as whole units allow). Balanced is never slower in the steady phase,
        // but it slows the light stages, whose first tiles are the section's fill; the section
        // takes whichever the cost model times shorter (ties to the proportional share).
        let proportional = share(chip.pcus, &pcu_mins, &flops);
        let balanced = balance(chip.pcus, &pcu_mins, &flops);
        let chosen = if balanced != proportional
            && placed_seconds(chip, work, &balanced, &pmus) < placed_seconds(chip, work, &proportional, &pmus)
        {
            balanced
        } else {
            proportional
        };
        assign(program, s, &refine(chip, work, &chosen, &pmus, &pcu_mins), &pmus);
    }
}

/// Fill-aware refinement of a section's PCUs (`pcus`, for `work` on these PMUs), returning
/// the PCUs it ends with: while moving a block of PCUs from one stage (keeping its minimum) to
/// another makes the cost model time the whole section shorter (by more than `MIN_GAIN` of
/// it), make that move, at most `MAX_MOVES` times. The shares `place`
/// starts from balance the steady phase; this also weighs the fill, in which every stage but
/// the slowest pays its first tile (a router stage of one tile on three PCUs pays all of its
/// work there). PMUs stay as shared.
///
/// Each move is found in two looks, not by timing every pair of stages (which made `rdu plan`
/// of a large model minutes slower): the receivers are ranked by how much a block more
/// shortens the section on its own (timed as if the chip had the block spare), and for the
/// best `RECEIVERS` of them in that order, every donor is timed giving the block; the first
/// receiver with an improving donor takes the best one. Deterministic: ties to the earlier stage.
fn refine(chip: &Chip, work: &[StageWork], pcus: &[u32], pmus: &[u32], pcu_mins: &[u32]) -> Vec<u32> {
    /// Receivers tried a move.
    const RECEIVERS: usize = 3;
    let n = work.len();
    let mut pcus = pcus.to_vec();
    if n < 2 {
        return pcus;
    }
    // The stages' work without their names: timing a placement then allocates nothing per stage.
    let work: Vec<StageWork> = work.iter().map(|w| StageWork { name: String::new(), ..w.clone() }).collect();
    let block = (chip.pcus / REFINE_BLOCKS).max(1);
    let roomier = Chip { pcus: chip.pcus.saturating_add(block), ..chip.clone() };
    let mut now = placed_seconds(chip, &work, &pcus, pmus);
    for _ in 0..MAX_MOVES {
        let mut receivers: Vec<(f64, usize)> = (0..n)
            .map(|to| {
                let mut trial = pcus.clone();
                trial[to] += block;
                (placed_seconds(&roomier, &work, &trial, pmus), to)
            })
            .filter(|&(t, _)| t < now * (1.0 - MIN_GAIN))
            .collect();
        receivers.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut best: Option<(f64, Vec<u32>)> = None;
        for &(_, to) in receivers.iter().take(RECEIVERS) {
            for from in (0..n).filter(|&from| from != to) {
                let give = block.min(pcus[from].saturating_sub(pcu_mins[from]));
                if give == 0 {
                    continue;
                }
                let mut trial = pcus.clone();
                trial[from] -= give;
                trial[to] += give;
                let t = placed_seconds(chip, &work, &trial, pmus);
                if t < now * (1.0 - MIN_GAIN) && best.as_ref().is_none_or(|b| t < b.0) {
                    best = Some((t, trial));
                }
            }
            if best.is_some() {
                break;
            }
        }
        let Some((t, trial)) = best else { break };
        (now, pcus) = (t, trial);
    }
    pcus
}

/// The cost model's time for one section of `work` placed with these PCUs and PMUs, as
/// `assign` would lay them out (the hops between consecutive stages' regions included).
fn placed_seconds(chip: &Chip, work: &[StageWork], pcus: &[u32], pmus: &[u32]) -> f64 {
    let regions = regions(pcus, pmus);
    let stages: Vec<StageWork> = (work.iter().enumerate())
        .map(|(i, w)| StageWork {
            pcus: pcus[i],
            pmus: pmus[i],
            hops: if i == 0 { 0 } else { regions[i - 1].hops_to(&regions[i], chip.mesh_cols) },
            ..w.clone()
        })
        .collect();
    estimate(chip, &CostInput { sections: vec![stages] }, Precision::Bf16).map_or(f64::INFINITY, |c| c.seconds)
}

/// Consecutive runs of `pcus[i]` PCUs and `pmus[i]` PMUs, stage after stage.
fn regions(pcus: &[u32], pmus: &[u32]) -> Vec<Region> {
    let (mut pcu, mut pmu) = (0u32, 0u32);
    (pcus.iter().zip(pmus))
        .map(|(&c, &m)| {
            let region = Region { pcu: (pcu, pcu.saturating_add(c)), pmu: (pmu, pmu.saturating_add(m)) };
            (pcu, pmu) = (region.pcu.1, region.pmu.1);
            region
        })
        .collect()
}

/// Gives section `s`'s stages these PCUs and PMUs and their regions of the mesh: consecutive
/// runs in serpentine order, stage after stage.
fn assign(program: &mut SpatialProgram, s: usize, pcus: &[u32], pmus: &[u32]) {
    for (i, (stage, region)) in program.sections[s].stages.iter_mut().zip(regions(pcus, pmus)).enumerate() {
        stage.pcus = pcus[i];
        stage.pmus = pmus[i];
        stage.region = Some(region);
    }
}

/// Every stage its minimum, then each remaining unit to the stage with the most work per unit
/// (`weights[i] / units[i]`, ties to the earlier stage): the pipeline's slowest stage is as
/// fast as whole units allow. (Sharing the spare units in proportion gave the heaviest stage
/// less than its share whenever the lighter ones had large minimums: a llama-3.1-8b prefill
/// layer's FFN stage was the slowest, model FLOP utilisation 0.69.) Deterministic.
fn balance(total: u32, minimum: &[u32], weights: &[u64]) -> Vec<u32> {
    if weights.iter().all(|&w| w == 0) {
        // No work to balance: as `share` gives units out.
        return share(total, minimum, weights);
    }
    let mut out: Vec<u32> = minimum.to_vec();
    let used: u64 = minimum.iter().map(|&m| u64::from(m)).sum();
    for _ in 0..u64::from(total).saturating_sub(used) {
        // The stage with the largest weights[i] / out[i], compared exactly as
        // weights[i] · out[j] against weights[j] · out[i] (a stage with work and no unit first).
        let mut best = 0;
        for i in 1..out.len() {
            let (wi, ui) = (u128::from(weights[i]), u128::from(out[i]));
            let (wb, ub) = (u128::from(weights[best]), u128::from(out[best]));
            if wi * ub > wb * ui {
                best = i;
            }
        }
        out[best] += 1;
    }
    out
}

/// Every stage its minimum, then the remaining units in proportion to `weights` (largest
/// remainders first, ties to the earlier stage) — deterministic integer arithmetic. PMUs are
/// shared this way, and PCUs too where it times shorter than `balance` (`place`).
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

#[cfg(test)]
mod tests {
    use super::{balance, placed_seconds, refine, share};
    use rdu_spatial::chip::Chip;
    use rdu_spatial::cost::StageWork;

    /// A router-like stage (one tile, a little compute, on its minimum of PCUs) between two
    /// heavy many-tile stages: its first tile is all of its work, paid in the fill. `refine`
    /// gives it PCUs, times the section shorter than `place`'s proportional share did, keeps
    /// every stage's minimum and the section's total, and is a fixed point of itself.
    #[test]
    fn refine_shortens_a_section_whose_fill_is_one_light_stage() {
        let chip = Chip::builtin("sn50").unwrap();
        let stage = |flops: u64, hbm_bytes: u64, tiles: u32| StageWork {
            name: String::new(),
            flops,
            hbm_bytes,
            tiles,
            ..StageWork::default()
        };
        let work = [
            stage(40_000_000_000, 2_000_000_000, 64),
            stage(200_000_000, 1_000_000, 1),
            stage(40_000_000_000, 2_000_000_000, 64),
        ];
        let mins = [1, 1, 1];
        let flops: Vec<u64> = work.iter().map(|w| w.flops).collect();
        let pcus = share(chip.pcus, &mins, &flops);
        let pmus = share(chip.pmus, &mins, &work.iter().map(|w| w.hbm_bytes).collect::<Vec<_>>());
        let refined = refine(&chip, &work, &pcus, &pmus, &mins);
        let (before, after) =
            (placed_seconds(&chip, &work, &pcus, &pmus), placed_seconds(&chip, &work, &refined, &pmus));
        assert!(after < before * (1.0 - 1e-3), "{pcus:?} {before} -> {refined:?} {after}");
        assert!(refined[1] > pcus[1], "{pcus:?} -> {refined:?}");
        assert_eq!(refined.iter().sum::<u32>(), pcus.iter().sum::<u32>());
        assert!(refined.iter().zip(&mins).all(|(r, m)| r >= m));
        assert_eq!(refine(&chip, &work, &refined, &pmus, &mins), refined);
    }

    /// The slowest stage's work per unit, `max weights[i] / units[i]`, as an exact fraction
    /// (numerator, denominator); a stage with work and no unit is infinitely slow.
    fn slowest(units: &[u32], weights: &[u64]) -> (u128, u128) {
        let mut best = (0u128, 1u128);
        for (&u, &w) in units.iter().zip(weights) {
            let (n, d) = (u128::from(w), u128::from(u));
            if d == 0 && n > 0 {
                return (1, 0);
            }
            if d > 0 && n * best.1 > best.0 * d {
                best = (n, d);
            }
        }
        best
    }

    /// Every way of giving `total` units to three stages with at least their minimums: no way
    /// makes the slowest stage faster than `balance` does, and `balance` gives out every unit.
    #[test]
    fn balance_makes_the_slowest_stage_as_fast_as_whole_units_allow() {
        let cases: [([u32; 3], [u64; 3]); 5] = [
            ([4, 1, 1], [1, 10, 10]),
            ([0, 0, 0], [3, 5, 7]),
            ([2, 0, 3], [0, 9, 1]),
            ([1, 1, 1], [1_000_000, 1, 999_999]),
            ([3, 3, 0], [7, 7, 7]),
        ];
        for (minimum, weights) in cases {
            for total in minimum.iter().sum::<u32>()..=14 {
                let got = balance(total, &minimum, &weights);
                assert_eq!(got.iter().sum::<u32>(), total, "{minimum:?} {weights:?} total {total}");
                assert!(got.iter().zip(&minimum).all(|(g, m)| g >= m));
                let mine = slowest(&got, &weights);
                for a in minimum[0]..=total {
                    for b in minimum[1]..=total - a {
                        let c = total - a - b;
                        if c < minimum[2] {
                            continue;
                        }
                        let other = slowest(&[a, b, c], &weights);
                        // mine ≤ other, as fractions (an infinite one has denominator 0).
                        assert!(
                            mine.0 * other.1 <= other.0 * mine.1 || other.1 == 0,
                            "{minimum:?} {weights:?} total {total}: {got:?} is slower than {:?}",
                            [a, b, c]
                        );
                    }
                }
            }
        }
        assert_eq!(balance(10, &[1, 2], &[0, 0]), vec![2, 3]);
    }
}
