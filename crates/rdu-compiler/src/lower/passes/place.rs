//! Placement: share each section's PCUs and PMUs among its stages so the pipeline is
//! balanced — every stage gets its minimum; the remaining PMUs go in proportion to the bytes
//! stages stream, the remaining PCUs in proportion to their FLOPs or one at a time to the stage
//! with the most FLOPs per PCU, whichever the cost model times shorter — then give every stage
//! its region of the chip's unit mesh: consecutive runs of PCUs and of PMUs in the mesh's
//! serpentine order, stage after stage, so each stage is a connected strip and the next stage
//! starts where it ends (`rdu_spatial::program::Region`).

use super::super::work::{op_work, Work, WorkModel};
use super::section::minimum_units;
use rdu_spatial::chip::Chip;
use rdu_spatial::program::{Region, SpatialProgram};

/// A section's stages' minimum (PCUs, PMUs) and work.
type StageNeeds = (Vec<(u32, u32)>, Vec<Work>);

/// Assigns `pcus` and `pmus` to every stage of every section.
pub fn place(program: &mut SpatialProgram, chip: &Chip) {
    let chips = program.tp.as_ref().map_or(1, |t| t.chips.max(1) as u64);
    let model = WorkModel::new(&program.tensors, chips);
    // Each section's stages' minimum units and work, before any placement changes the program.
    let sections: Vec<StageNeeds> = program
        .sections
        .iter()
        .map(|section| {
            let stages = &section.stages;
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
            (mins, works)
        })
        .collect();
    drop(model);
    for (s, (mins, works)) in sections.into_iter().enumerate() {
        let pmus = share(
            chip.pmus,
            &mins.iter().map(|m| m.1).collect::<Vec<_>>(),
            &works.iter().map(|w| w.hbm_bytes + w.sram_bytes).collect::<Vec<_>>(),
        );
        let (pcu_mins, flops): (Vec<u32>, Vec<u64>) =
            mins.iter().map(|m| m.0).zip(works.iter().map(|w| w.flops)).unzip();
        // Two ways to share the PCUs: in proportion to FLOPs, and balanced (the slowest stage's
        // compute as short as whole units allow). Balanced is never slower in the steady phase,
        // but it slows the light stages, whose first tiles are the section's fill; the section
        // takes whichever the cost model times shorter (ties to the proportional share).
        let proportional = share(chip.pcus, &pcu_mins, &flops);
        let balanced = balance(chip.pcus, &pcu_mins, &flops);
        assign(program, s, &proportional, &pmus);
        if balanced != proportional {
            let before = section_seconds(program, s, chip);
            assign(program, s, &balanced, &pmus);
            if section_seconds(program, s, chip) >= before {
                assign(program, s, &proportional, &pmus);
            }
        }
    }
}

/// Gives section `s`'s stages these PCUs and PMUs and their regions of the mesh: consecutive
/// runs in serpentine order, stage after stage.
fn assign(program: &mut SpatialProgram, s: usize, pcus: &[u32], pmus: &[u32]) {
    let (mut pcu, mut pmu) = (0u32, 0u32);
    for (i, stage) in program.sections[s].stages.iter_mut().enumerate() {
        stage.pcus = pcus[i];
        stage.pmus = pmus[i];
        let region = Region { pcu: (pcu, pcu.saturating_add(pcus[i])), pmu: (pmu, pmu.saturating_add(pmus[i])) };
        (pcu, pmu) = (region.pcu.1, region.pmu.1);
        stage.region = Some(region);
    }
}

/// The cost model's time for section `s` as placed (infinite when it cannot be timed).
fn section_seconds(program: &SpatialProgram, s: usize, chip: &Chip) -> f64 {
    match crate::lower::cost::program_cost(program, chip) {
        Ok(cost) => cost.sections.get(s).map_or(f64::INFINITY, |c| c.seconds),
        Err(_) => f64::INFINITY,
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
    use super::balance;

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
