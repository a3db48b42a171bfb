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
use rdu_spatial::cost::{estimate, CostInput, Precision, Retimer, StageWork};
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
///
/// A look times each of the section's n stages given the block, and a block more for one stage
/// moves the region of every stage after it (whose hops change), so no trial is timed in less
/// than the stages after its change: each is timed again from the stage it changes on
/// (`rdu_spatial::cost::Retimer`, the cost model's seconds to the bit), n(n+1)/2 stage timings
/// of a few additions and comparisons a look at the receivers — where each trial timed whole
/// cost n stage timings and an allocation each, n² a look. The bound that keeps lowering linear
/// in a batch: a section holds at most one stage a PCU, so n is at most the chip's PCUs (2,080
/// on the SN50), and a batched program past one full section adds sections, not stages to one.
fn refine(chip: &Chip, work: &[StageWork], pcus: &[u32], pmus: &[u32], pcu_mins: &[u32]) -> Vec<u32> {
    refined(chip, work, pcus, pmus, pcu_mins).pcus
}

/// What `refine` ends with, and the work it took to find.
struct Refined {
    pcus: Vec<u32>,
    /// Looks for a move made (the moves, and the last look that found none).
    looks: usize,
    /// Stages timed by the trials of every look, and by its receivers' trials alone.
    timed: u64,
    timed_receiving: u64,
}

/// `refine`, counting its work.
fn refined(chip: &Chip, work: &[StageWork], pcus: &[u32], pmus: &[u32], pcu_mins: &[u32]) -> Refined {
    let n = work.len();
    let mut out = Refined { pcus: pcus.to_vec(), looks: 0, timed: 0, timed_receiving: 0 };
    if n < 2 {
        return out;
    }
    // The stages' work without their names: timing a placement then allocates nothing per stage.
    let work: Vec<StageWork> = work.iter().map(|w| StageWork { name: String::new(), ..w.clone() }).collect();
    let mut now = placed_seconds(chip, &work, &out.pcus, pmus);
    for _ in 0..MAX_MOVES {
        let mut trials = Trials::new(chip, &work, &out.pcus, pmus);
        let found = best_move(&mut trials, now, pcu_mins);
        out.looks += 1;
        out.timed += trials.timed();
        out.timed_receiving += trials.timed_receiving;
        let Some((t, moved)) = found else { break };
        (now, out.pcus) = (t, moved);
    }
    out
}

/// The move `refine` makes from the placement `trials` times (`now` seconds), if any: the
/// section's time after it and its PCUs.
fn best_move(trials: &mut Trials<'_>, now: f64, pcu_mins: &[u32]) -> Option<(f64, Vec<u32>)> {
    /// Receivers tried a move.
    const RECEIVERS: usize = 3;
    let (n, block) = (trials.pcus.len(), trials.block);
    let mut receivers: Vec<(f64, usize)> =
        (0..n).map(|to| (trials.receiver(to), to)).filter(|&(t, _)| t < now * (1.0 - MIN_GAIN)).collect();
    receivers.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    for &(_, to) in receivers.iter().take(RECEIVERS) {
        let mut best: Option<(f64, usize, u32)> = None;
        for from in (0..n).filter(|&from| from != to) {
            let give = block.min(trials.pcus[from].saturating_sub(pcu_mins[from]));
            if give == 0 {
                continue;
            }
            let t = trials.donor(from, to, give);
            if t < now * (1.0 - MIN_GAIN) && best.is_none_or(|b| t < b.0) {
                best = Some((t, from, give));
            }
        }
        if let Some((t, from, give)) = best {
            let mut moved = trials.pcus.to_vec();
            moved[from] -= give;
            moved[to] += give;
            return Some((t, moved));
        }
    }
    None
}

/// A section placed with `pcus` on `pmus`, and the trials of one move timed against it: a block
/// more for one stage (a receiver, on a chip with the block spare), or `give` PCUs moved from
/// one stage to another (a donor's). Each is the section's `placed_seconds`, told by a
/// `Retimer` from the first stage the trial changes on; in tests and debug builds every trial
/// is also timed whole and must agree to the bit.
struct Trials<'a> {
    chip: &'a Chip,
    work: &'a [StageWork],
    pcus: &'a [u32],
    pmus: &'a [u32],
    block: u32,
    /// Every stage's run of PCUs and its hops from the stage before, as placed, and its hops if
    /// every region moved a block later (a receiver's later stages).
    runs: Vec<(u32, u32)>,
    hops: Vec<u32>,
    shifted: Vec<u32>,
    retimer: Option<Retimer<'a>>,
    /// Stages timed by trials timed whole (where there is no `retimer`), and by receivers' trials.
    whole: u64,
    timed_receiving: u64,
}

impl<'a> Trials<'a> {
    fn new(chip: &'a Chip, work: &'a [StageWork], pcus: &'a [u32], pmus: &'a [u32]) -> Trials<'a> {
        let block = (chip.pcus / REFINE_BLOCKS).max(1);
        let runs: Vec<(u32, u32)> = regions(pcus, pmus).iter().map(|r| r.pcu).collect();
        let between = |runs: &[(u32, u32)], i: usize| if i == 0 { 0 } else { hops(chip, runs[i - 1], runs[i]) };
        let hops: Vec<u32> = (0..runs.len()).map(|i| between(&runs, i)).collect();
        let later: Vec<(u32, u32)> =
            runs.iter().map(|&(a, b)| (a.saturating_add(block), b.saturating_add(block))).collect();
        let shifted = (0..runs.len()).map(|i| between(&later, i)).collect();
        // Runs that saturate are laid out by `regions` otherwise than moved here: time those whole.
        let fits = pcus.iter().map(|&p| u64::from(p)).sum::<u64>() + u64::from(block) <= u64::from(u32::MAX);
        let placed = placed_work(work, pcus, pmus, &hops);
        let retimer = if fits { Retimer::new(chip, placed, Precision::Bf16) } else { None };
        Trials { chip, work, pcus, pmus, block, runs, hops, shifted, retimer, whole: 0, timed_receiving: 0 }
    }

    /// The stages the trials so far have timed (a check in a debug build not counted).
    fn timed(&self) -> u64 {
        self.whole + self.retimer.as_ref().map_or(0, |r| r.retimed)
    }

    /// The section's time with a block more for stage `to`, on a chip with the block spare.
    fn receiver(&mut self, to: usize) -> f64 {
        let before = self.timed();
        let t = self.time(self.chip.pcus.saturating_add(self.block), &[(to, i64::from(self.block))]);
        self.timed_receiving += self.timed() - before;
        t
    }

    /// The section's time with `give` PCUs moved from stage `from` to stage `to`.
    fn donor(&mut self, from: usize, to: usize, give: u32) -> f64 {
        let mut changes = [(from, -i64::from(give)), (to, i64::from(give))];
        changes.sort();
        self.time(self.chip.pcus, &changes)
    }

    /// The section's time with each stage `c` of `changes` (in stage order) given `d` PCUs
    /// more (`(c, d)`), on a chip of `available` PCUs.
    fn time(&mut self, available: u32, changes: &[(usize, i64)]) -> f64 {
        let new_pcus = |c: usize, d: i64| u32::try_from(i64::from(self.pcus[c]) + d).unwrap_or(0);
        let slow = || {
            let mut pcus = self.pcus.to_vec();
            changes.iter().for_each(|&(c, d)| pcus[c] = new_pcus(c, d));
            let chip = Chip { pcus: available, ..self.chip.clone() };
            placed_seconds(&chip, self.work, &pcus, self.pmus)
        };
        let Some(retimer) = &mut self.retimer else {
            self.whole += self.pcus.len() as u64;
            return slow();
        };
        let changed: Vec<(usize, u32)> = changes.iter().map(|&(c, d)| (c, new_pcus(c, d))).collect();
        let (runs, base, shifted, chip) = (&self.runs, &self.hops, &self.shifted, self.chip);
        // A stage's run moves by the PCUs the changes before it gave; a changed stage's ends later.
        let run = |i: usize| {
            let before: i64 = changes.iter().filter(|c| c.0 < i).map(|c| c.1).sum();
            let grown: i64 = changes.iter().filter(|c| c.0 == i).map(|c| c.1).sum();
            let at = |x: u32| u32::try_from(i64::from(x) + before).unwrap_or(0);
            (at(runs[i].0), u32::try_from(i64::from(at(runs[i].1)) + grown).unwrap_or(0))
        };
        let (last, moved): (usize, i64) = (changes[changes.len() - 1].0, changes.iter().map(|c| c.1).sum());
        let hops_at = |i: usize| match i {
            0 => 0,
            i if i < changes[0].0 => base[i],
            // Past the last change every run moved alike: by nothing, or (a receiver's) a block.
            i if i > last + 1 && moved == 0 => base[i],
            i if i > last + 1 && moved == i64::from(self.block) => shifted[i],
            i => hops(chip, run(i - 1), run(i)),
        };
        let t = retimer.seconds(available, &changed, hops_at).unwrap_or(f64::INFINITY);
        if cfg!(debug_assertions) {
            let whole = slow();
            assert_eq!(t.to_bits(), whole.to_bits(), "retimed {t}, timed whole {whole}: {changes:?}");
        }
        t
    }
}

/// The mesh hops from one stage's run of PCUs to the next's (`Region::hops_to`).
fn hops(chip: &Chip, from: (u32, u32), to: (u32, u32)) -> u32 {
    let region = |pcu| Region { pcu, pmu: (0, 0) };
    region(from).hops_to(&region(to), chip.mesh_cols)
}

/// Every stage's work placed on these PCUs and PMUs, `hops[i]` from the stage before it.
fn placed_work(work: &[StageWork], pcus: &[u32], pmus: &[u32], hops: &[u32]) -> Vec<StageWork> {
    (work.iter().enumerate())
        .map(|(i, w)| StageWork { pcus: pcus[i], pmus: pmus[i], hops: hops[i], ..w.clone() })
        .collect()
}

/// The cost model's time for one section of `work` placed with these PCUs and PMUs, as
/// `assign` would lay them out (the hops between consecutive stages' regions included).
fn placed_seconds(chip: &Chip, work: &[StageWork], pcus: &[u32], pmus: &[u32]) -> f64 {
    let regions = regions(pcus, pmus);
    let hops: Vec<u32> = (0..regions.len())
        .map(|i| if i == 0 { 0 } else { regions[i - 1].hops_to(&regions[i], chip.mesh_cols) })
        .collect();
    let stages = placed_work(work, pcus, pmus, &hops);
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
    use super::{balance, placed_seconds, refine, refined, share};
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

    /// A batched program's section: a projection, then one light single-tile stage a sequence,
    /// each waiting for the one before, then another projection. `refine` moves blocks of PCUs
    /// to the light stages, and each look at the receivers times a block more for stage `k`
    /// from `k` on — n(n+1)/2 stage timings in all, where timing each trial whole cost n each,
    /// n² a look (the lowering time that grew with the square of the batch). A donor's trial
    /// is timed from the first of its two stages on.
    #[test]
    fn refine_times_a_look_in_half_the_stages_squared() {
        let chip = Chip::builtin("sn50").unwrap();
        let n = 128;
        let stage = |i: usize| {
            let heavy = i == 0 || i == n - 1;
            StageWork {
                flops: if heavy { 40_000_000_000 } else { 5_000_000 },
                sram_bytes: 1_000_000,
                tiles: if heavy { 64 } else { 1 },
                after: Some(if i == 0 { vec![] } else { vec![0, i - 1] }),
                ..StageWork::default()
            }
        };
        let work: Vec<StageWork> = (0..n).map(stage).collect();
        let mins = vec![1; n];
        let pcus = share(chip.pcus, &mins, &work.iter().map(|w| w.flops).collect::<Vec<_>>());
        let pmus = share(chip.pmus, &mins, &work.iter().map(|w| w.sram_bytes).collect::<Vec<_>>());
        let out = refined(&chip, &work, &pcus, &pmus, &mins);
        assert!(out.looks > 1, "refine moved nothing: {pcus:?}");
        let (n, looks) = (n as u64, out.looks as u64);
        // n(n+1)/2 a look, and up to n more where the slowest stage, given a block, stops being
        // the slowest and the stage that becomes it comes earlier.
        let receiving = looks * (n * (n + 1) / 2 + n);
        assert!(out.timed_receiving <= receiving, "{} stage timings in {looks} looks", out.timed_receiving);
        // The donors' trials too: fewer than the receivers' alone timed whole.
        assert!(out.timed < looks * n * n, "{} stage timings in {looks} looks", out.timed);
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
