//! The step's schedule and its cost: KERNEL LOOPING (Koeplinger et al., "Kernel Looping:
//! Eliminating Synchronization Boundaries for Peak Inference Performance", arXiv 2410.23668).
//!
//! A step is the embedding, every layer through its kind's program, and the head. Consecutive
//! calls of one kind program become ONE looped invocation — one program per kind is what makes
//! this possible — and so does a repeating block of kinds whose programs are resident on the
//! chip together (Qwen3-Next's three DeltaNet layers and one attention layer). Inside a loop,
//! the next iteration's weight stream is prefetched (the stages marked `prefetch` in the kind
//! program) while this iteration's pipeline fills, drains, synchronises and all-reduces.
//!
//! The schedule is derived from the layer bindings and the programs' resources only, written
//! to the manifest (`schedule`), run by the host in that order, and costed exactly as written:
//! `docs/SPATIAL.md` gives the model term by term.

use super::model::{ProgramPart, StepEstimate, StreamedModel};
use crate::lower::work::stored_bytes;
use crate::model::spec::Cut;
use rdu_spatial::chip::Chip;
use rdu_spatial::cost::StepCost;
use rdu_spatial::manifest::{Invocation, Run, Schedule};
use rdu_spatial::program::SpatialProgram;

/// Marks every stage of a one-section layer-kind program that reads a weight it can stream
/// ahead of its activations (`Stage::prefetchable_weights`). A program of several sections
/// reloads the chip between them and is never marked. The marks do not change what the program
/// computes; they say what a looped invocation of it overlaps.
pub(crate) fn mark_prefetch(program: &mut SpatialProgram) {
    if program.sections.len() != 1 {
        return;
    }
    let marks: Vec<bool> =
        program.sections[0].stages.iter().map(|st| !st.prefetchable_weights(program).is_empty()).collect();
    for (stage, mark) in program.sections[0].stages.iter_mut().zip(marks) {
        stage.prefetch = mark;
    }
}

/// The share of `chip` each of a model's `kinds` layer kinds is placed on, so that all of them
/// can stay configured on the chip at once (`schedule.resident`) and a step switches between
/// them without reconfiguring: the chip's PCUs, PMUs and SRAM split evenly among the kinds.
/// Only for the decode-type cuts (one row per sequence, or a verify step's few: the programs
/// stream weights and need few units), and only with several kinds; otherwise the whole chip. The share has the chip's name
/// and every other figure unchanged (one program runs at a time, with the chip's HBM, clock and
/// links). Depends on the number of kinds only, so kind programs do not depend on depth.
pub(crate) fn kind_chip(chip: &Chip, cut: Cut, kinds: usize) -> Chip {
    let decode = matches!(
        cut,
        Cut::Decode { .. } | Cut::Batched { .. } | Cut::Tp { .. } | Cut::BatchedTp { .. } | Cut::Verify { .. }
    );
    if !decode || kinds < 2 {
        return chip.clone();
    }
    let k = kinds as u64;
    Chip {
        pcus: (u64::from(chip.pcus) / k) as u32,
        pmus: (u64::from(chip.pmus) / k) as u32,
        sram_bytes: chip.sram_bytes / k,
        ..chip.clone()
    }
}

/// What the schedule's cost needs of one program.
struct Timing<'p> {
    part: Scheduled<'p>,
    /// One section: a program the chip can keep configured and loop.
    single: bool,
    /// The section's fill (first tiles, `pipeline_fill` per stage, all-reduce latency) plus its
    /// barrier: what the next iteration's weight stream overlaps.
    tail: f64,
    /// Seconds of weight streaming the marked stages can do ahead of their activations: each
    /// stage's prefetchable weights, at most what its PMUs' SRAM holds, at HBM bandwidth.
    prefetch: f64,
    /// How much the steady phase can shrink when weights arrive early: down to what the
    /// section needs of everything but HBM (compute, SRAM, DDR, link).
    headroom: f64,
}

impl<'p> Timing<'p> {
    fn new(part: Scheduled<'p>, chip: &Chip) -> Timing<'p> {
        let cost = part.cost;
        let single = cost.sections.len() == 1;
        if !single {
            return Timing { part, single, tail: 0.0, prefetch: 0.0, headroom: 0.0 };
        }
        let section = &cost.sections[0];
        let program = part.spatial;
        let prefetch_bytes: u64 = program.sections[0]
            .stages
            .iter()
            .filter(|st| st.prefetch)
            .map(|st| {
                let weights: u64 = st.prefetchable_weights(program).into_iter().map(stored_bytes).sum();
                weights.min(u64::from(st.pmus).saturating_mul(chip.pmu_sram_bytes))
            })
            .sum();
        let others = section
            .stages
            .iter()
            .map(|s| s.compute_seconds.max(s.sram_seconds).max(s.ddr_seconds).max(s.link_seconds))
            .fold(0.0, f64::max)
            .max(cost.ddr_bytes as f64 / chip.ddr_bandwidth)
            .max(cost.link_bytes as f64 / chip.link_bandwidth);
        Timing {
            part,
            single,
            tail: section.fill_seconds + section.synchronisation_seconds,
            prefetch: prefetch_bytes as f64 / chip.hbm_bandwidth,
            headroom: (section.steady_seconds - others).max(0.0),
        }
    }

    /// Seconds `next`, the following iteration of the same loop, saves by streaming its
    /// weights during this iteration's tail: at most the tail, at most what it can prefetch,
    /// at most what its steady phase can shrink.
    fn overlap(&self, next: &Timing<'_>) -> f64 {
        if !(self.single && next.single) {
            return 0.0;
        }
        self.tail.min(next.prefetch).min(next.headroom)
    }
}

impl StreamedModel {
    /// The programs, by name, that the chip keeps configured together (`Schedule::resident`):
    /// every layer kind together when all are one section and their PCUs and PMUs fit the chip
    /// at once, else each kind alone; the embedding joins the first layer's set and the head the
    /// last layer's set (or the embedding's) when they fit too. Deterministic.
    pub fn resident_sets(&self) -> Vec<Vec<String>> {
        let fits = |set: &[&ProgramPart], extra: &ProgramPart| {
            let all = || set.iter().copied().chain(std::iter::once(extra));
            all().all(|p| p.cost.sections.len() == 1)
                && all().map(|p| u64::from(p.cost.pcus)).sum::<u64>() <= u64::from(self.chip.pcus)
                && all().map(|p| u64::from(p.cost.pmus)).sum::<u64>() <= u64::from(self.chip.pmus)
        };
        let kinds: Vec<&ProgramPart> = self.kinds.iter().map(|k| &k.program).collect();
        let mut sets: Vec<Vec<&ProgramPart>> = Vec::new();
        let together = kinds.len() > 1 && fits(&kinds[1..], kinds[0]);
        if together {
            sets.push(kinds.clone());
        } else {
            sets.extend(kinds.iter().map(|k| vec![*k]));
        }
        let set_of =
            |sets: &[Vec<&ProgramPart>], name: &str| sets.iter().position(|s| s.iter().any(|p| p.name == name));
        let first = self.layers.first().and_then(|b| set_of(&sets, &b.kind));
        match first {
            Some(i) if fits(&sets[i], &self.embed) => sets[i].insert(0, &self.embed),
            _ => sets.insert(0, vec![&self.embed]),
        }
        let last = self.layers.last().and_then(|b| set_of(&sets, &b.kind));
        let embed_set = set_of(&sets, &self.embed.name);
        match (last, embed_set) {
            (Some(i), _) if fits(&sets[i], &self.head) => sets[i].push(&self.head),
            (_, Some(i)) if fits(&sets[i], &self.head) => sets[i].push(&self.head),
            _ => sets.push(vec![&self.head]),
        }
        sets.into_iter().map(|s| s.into_iter().map(|p| p.name.clone()).collect()).collect()
    }

    /// The step's schedule: the embedding, loops covering every layer once in order, the head.
    /// From each layer on, the loop that covers the most layers: a run of one kind, or at least
    /// two whole repeats of a block of several kinds that are resident together (ties to the
    /// shorter block). Deterministic: the same bindings and resources give the same schedule.
    pub fn schedule(&self) -> Schedule {
        let resident = self.resident_sets();
        let set_of = |kind: &str| resident.iter().position(|s| s.iter().any(|n| n == kind));
        let kinds: Vec<&str> = self.layers.iter().map(|b| b.kind.as_str()).collect();
        let n = kinds.len();
        let mut invocations = vec![Invocation { run: Run::Embed, block: vec![], layers: vec![] }];
        let mut i = 0;
        while i < n {
            let run = kinds[i..].iter().take_while(|k| **k == kinds[i]).count();
            let (mut period, mut cover) = (1, run);
            for p in 2..=(n - i) / 2 {
                let block = &kinds[i..i + p];
                let distinct = block.iter().any(|k| *k != block[0]);
                if !distinct || block.iter().any(|k| set_of(k) != set_of(block[0])) {
                    continue;
                }
                let repeats = (0..).take_while(|r| i + (r + 1) * p <= n && kinds[i + r * p..i + (r + 1) * p] == *block);
                let repeats = repeats.count();
                if repeats >= 2 && p * repeats > cover {
                    (period, cover) = (p, p * repeats);
                }
            }
            invocations.push(Invocation {
                run: Run::Loop,
                block: kinds[i..i + period].iter().map(|k| k.to_string()).collect(),
                layers: (i..i + cover).collect(),
            });
            i += cover;
        }
        invocations.push(Invocation { run: Run::Head, block: vec![], layers: vec![] });
        Schedule { resident, invocations }
    }

    /// One step's estimate from the cost model, run as the bundle's schedule says.
    pub fn step_estimate(&self) -> StepEstimate {
        estimate(self, &self.schedule(), true)
    }

    /// The same step without kernel looping: every layer its own invocation, nothing
    /// prefetched, every program resident alone (the estimate before schedules existed).
    pub fn serial_step_estimate(&self) -> StepEstimate {
        let layers: Vec<_> = self
            .layers
            .iter()
            .map(|b| rdu_spatial::manifest::LayerEntry {
                layer: b.layer,
                kind: b.kind.clone(),
                bind: Default::default(),
            })
            .collect();
        let mut schedule = Schedule::by_runs(&self.embed.name, &self.head.name, &layers);
        let looped = schedule.invocations.drain(1..schedule.invocations.len() - 1).collect::<Vec<_>>();
        let singles = looped.into_iter().flat_map(|inv| {
            inv.layers.into_iter().map(move |l| Invocation {
                run: Run::Loop,
                block: inv.block.clone(),
                layers: vec![l],
            })
        });
        let head = schedule.invocations.pop().expect("by_runs ends with the head");
        schedule.invocations.extend(singles);
        schedule.invocations.push(head);
        estimate(self, &schedule, false)
    }
}

/// One program as the schedule's cost sees it: its name, spatial program and cost.
#[derive(Clone, Copy)]
pub struct Scheduled<'p> {
    pub name: &'p str,
    pub spatial: &'p SpatialProgram,
    pub cost: &'p StepCost,
}

impl<'p> Scheduled<'p> {
    fn of(part: &'p ProgramPart) -> Scheduled<'p> {
        Scheduled { name: &part.name, spatial: &part.spatial, cost: &part.cost }
    }
}

/// One step's cost under a schedule ([`schedule_cost`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleCost {
    pub seconds: f64,
    /// Every program call of the step in order: the program's name, and the seconds its
    /// weight stream overlapped the previous iteration's tail (kernel looping; 0 outside a loop).
    pub calls: Vec<(String, f64)>,
    /// Reconfigurations between consecutive calls of programs not resident together (and from
    /// the head back to the next step's embedding), each costing the chip's reconfiguration.
    pub reconfigurations: usize,
    pub roofline_seconds: f64,
    pub hbm_bytes: u64,
    pub flops: u64,
    /// Looped invocations.
    pub loops: usize,
}

/// The step's seconds under `schedule` on `chip`, for programs found by name with `program`
/// (`spine`: the names of the embedding and the head):
/// every call's own estimate, minus what each loop iteration's prefetch overlaps of the
/// previous iteration's tail (when `looping`), plus a reconfiguration between consecutive
/// programs that are not resident together (and from the head back to the next step's
/// embedding). `StreamedModel::step_estimate` and `rdu report` (from a bundle's manifest) both
/// cost a step with it. Refuses a schedule naming a program `program` does not know.
pub fn schedule_cost<'p>(
    schedule: &Schedule,
    spine: (&str, &str),
    program: &dyn Fn(&str) -> Option<Scheduled<'p>>,
    chip: &Chip,
    looping: bool,
) -> Result<ScheduleCost, String> {
    let find = |name: &str| program(name).ok_or_else(|| format!("the schedule runs `{name}`, which is not a program"));
    // Every program call of the step in order, and whether it continues the loop of the call before.
    let mut calls: Vec<(Timing<'p>, bool)> = Vec::new();
    for inv in &schedule.invocations {
        match inv.run {
            Run::Embed => calls.push((Timing::new(find(spine.0)?, chip), false)),
            Run::Head => calls.push((Timing::new(find(spine.1)?, chip), false)),
            Run::Loop => {
                if inv.block.is_empty() {
                    return Err("a loop of the schedule has no block".into());
                }
                for (j, _) in inv.layers.iter().enumerate() {
                    let kind = &inv.block[j % inv.block.len()];
                    calls.push((Timing::new(find(kind)?, chip), j > 0));
                }
            }
        }
    }
    let mut seconds: f64 = calls.iter().map(|(t, _)| t.part.cost.seconds).sum();
    let mut overlaps = vec![0.0; calls.len()];
    if looping {
        for (i, w) in calls.windows(2).enumerate() {
            if w[1].1 {
                overlaps[i + 1] = w[0].0.overlap(&w[1].0);
            }
        }
        seconds -= calls.windows(2).filter(|w| w[1].1).map(|w| w[0].0.overlap(&w[1].0)).sum::<f64>();
    }
    let set_of = |name: &str| schedule.resident.iter().position(|s| s.iter().any(|n| n == name));
    // A sectioned program already pays for loading each of its sections every run.
    let switch = |a: &Timing<'_>, b: &Timing<'_>| {
        a.part.name != b.part.name && a.single && b.single && set_of(a.part.name) != set_of(b.part.name)
    };
    let mut reconfigurations = calls.windows(2).filter(|w| switch(&w[0].0, &w[1].0)).count();
    if let (Some(last), Some(first)) = (calls.last(), calls.first()) {
        reconfigurations += usize::from(switch(&last.0, &first.0));
    }
    seconds += reconfigurations as f64 * chip.reconfiguration;
    Ok(ScheduleCost {
        seconds,
        calls: calls.iter().zip(overlaps).map(|((t, _), o)| (t.part.name.to_string(), o)).collect(),
        reconfigurations,
        roofline_seconds: calls.iter().map(|(t, _)| t.part.cost.roofline_seconds).sum(),
        hbm_bytes: calls.iter().map(|(t, _)| t.part.cost.hbm_bytes).sum(),
        flops: calls.iter().map(|(t, _)| t.part.cost.flops).sum(),
        loops: schedule.invocations.iter().filter(|i| i.run == Run::Loop).count(),
    })
}

/// [`schedule_cost`] of `model`'s own programs, as its estimate.
fn estimate(model: &StreamedModel, schedule: &Schedule, looping: bool) -> StepEstimate {
    let program = |name: &str| -> Option<Scheduled<'_>> {
        if name == model.embed.name {
            Some(Scheduled::of(&model.embed))
        } else if name == model.head.name {
            Some(Scheduled::of(&model.head))
        } else {
            model.kinds.iter().find(|k| k.program.name == name).map(|k| Scheduled::of(&k.program))
        }
    };
    let cost = schedule_cost(schedule, (&model.embed.name, &model.head.name), &program, &model.chip, looping)
        .expect("the schedule runs the model's programs");
    let seconds = cost.seconds;
    let rows = model.cut.rows();
    let (floor, model_flops) = model.model_yardsticks();
    let peak = model.cut.tp().max(1) as f64 * model.chip.peak_flops_bf16;
    StepEstimate {
        model_flops,
        model_flop_utilisation: if seconds > 0.0 { model_flops / seconds / peak } else { 0.0 },
        floor_bytes: floor.bytes.round() as u64,
        model_roofline_seconds: floor.seconds,
        model_roofline_fraction: if seconds > 0.0 { floor.seconds / seconds } else { 0.0 },
        seconds,
        roofline_seconds: cost.roofline_seconds,
        roofline_fraction: if seconds > 0.0 { cost.roofline_seconds / seconds } else { 0.0 },
        tokens_per_second: if seconds > 0.0 { rows as f64 / seconds } else { 0.0 },
        hbm_bytes: cost.hbm_bytes,
        flops: cost.flops,
        reconfigurations: cost.reconfigurations,
        loops: cost.loops,
    }
}
