//! [`Retimer`]: one section's time under placements that differ from a base placement in a
//! few stages' PCUs and in the hops after them — [`super::estimate`]'s seconds to the bit —
//! timing again only the stages from the first one whose fill can change.
//!
//! Placement's refinement (`rdu_compiler::lower::passes::place`) times every stage of a
//! section given a block of PCUs more, and moves between pairs of stages. Timed whole, every
//! trial timed all n stages of the section again (and allocated for each), so a move cost
//! n² stage timings and a batched program, whose sections hold up to one stage a PCU, lowered
//! in time growing with the square of its batch until its sections were full. Here the stages
//! before a trial's first change keep their fill and path length, and a later stage whose
//! time, role and hops are unchanged keeps its fill: a trial costs an addition and a few
//! comparisons for each stage after its first change.

use super::{reconfiguration, section_seconds, shared_seconds, slowest_of, slowest_stage, stage_fill, stage_times};
use super::{step_seconds, unrunnable, Bound, Precision, StageWork};
use crate::chip::Chip;

/// A base placement of one section, timed once, and the scratch its trials are timed in.
pub struct Retimer<'a> {
    chip: &'a Chip,
    work: Vec<StageWork>,
    precision: Precision,
    /// Every stage's earlier stages whose first tiles it waits for (`StageWork::after`), flat:
    /// stage `i`'s are `preds[pred_at[i]..pred_at[i + 1]]`.
    preds: Vec<usize>,
    pred_at: Vec<usize>,
    /// Every stage's steady seconds, the slowest stage, every stage's fill.
    seconds: Vec<f64>,
    slowest: usize,
    fill: Vec<f64>,
    /// Seconds until each stage's first tile is out: the path lengths of the section's fill.
    reach: Vec<f64>,
    /// `longest_before[i]`: the longest of `reach[..i]` (0 for none), folded as the fill is.
    longest_before: Vec<f64>,
    shared: [(f64, Bound); 3],
    pcus: u64,
    pmus: u64,
    /// A trial's changed stages and their steady seconds, and its path lengths from its first
    /// changed stage on.
    changed: Vec<(usize, f64)>,
    scratch: Vec<f64>,
    /// The stages trials have timed again so far: the work [`Retimer::seconds`] does.
    pub retimed: u64,
}

impl<'a> Retimer<'a> {
    /// The section `work` as placed (its stages' PCUs, PMUs and hops) timed on `chip` in
    /// `precision`, or `None` where a trial cannot be told from it: no stage, a stage the cost
    /// model refuses, a stage waiting for a later one, a time that is not a number.
    pub fn new(chip: &'a Chip, work: Vec<StageWork>, precision: Precision) -> Option<Retimer<'a>> {
        let n = work.len();
        if n == 0 || work.iter().any(|w| unrunnable(w, w.pcus)) {
            return None;
        }
        let (mut preds, mut pred_at) = (Vec::new(), vec![0]);
        for (i, w) in work.iter().enumerate() {
            let chain = i.checked_sub(1);
            let after = w.after.as_deref().unwrap_or(chain.as_slice());
            if after.iter().any(|&j| j >= i) {
                return None;
            }
            preds.extend_from_slice(after);
            pred_at.push(preds.len());
        }
        let seconds: Vec<f64> = work.iter().map(|w| slowest_of(stage_times(chip, w, w.pcus, precision)).0).collect();
        if seconds.iter().any(|s| s.is_nan()) {
            return None;
        }
        let slowest = slowest_stage(n, |i| seconds[i]);
        let fill: Vec<f64> =
            work.iter().enumerate().map(|(i, w)| stage_fill(chip, w, seconds[i], i == slowest, w.hops)).collect();
        let (mut reach, mut longest_before) = (Vec::with_capacity(n), vec![0.0]);
        for i in 0..n {
            let from = preds[pred_at[i]..pred_at[i + 1]].iter().fold(0.0, |from, &j| longer(from, reach[j]));
            reach.push(from + fill[i]);
            longest_before.push(longer(longest_before[i], reach[i]));
        }
        let shared = shared_seconds(chip, &work);
        let pcus = work.iter().map(|w| u64::from(w.pcus)).sum();
        let pmus = work.iter().map(|w| u64::from(w.pmus)).sum();
        Some(Retimer {
            chip,
            work,
            precision,
            preds,
            pred_at,
            seconds,
            slowest,
            fill,
            reach,
            longest_before,
            shared,
            pcus,
            pmus,
            changed: Vec::new(),
            scratch: vec![0.0; n],
            retimed: 0,
        })
    }

    /// The seconds [`super::estimate`] gives a step of this section alone, placed as the base
    /// but for the PCUs `p` of each distinct stage `c` of `changed` (`(c, p)`), on a chip of
    /// `pcus_available` PCUs, with `hops(i)` mesh hops before each stage `i` (asked for the
    /// stages from the first one whose fill can change on: those before the first changed stage
    /// must be the base's); `None` where `estimate` refuses the placement.
    pub fn seconds(
        &mut self,
        pcus_available: u32,
        changed: &[(usize, u32)],
        hops: impl Fn(usize) -> u32,
    ) -> Option<f64> {
        let n = self.work.len();
        let mut pcus = self.pcus;
        self.changed.clear();
        for &(c, p) in changed {
            let w = &self.work[c];
            if unrunnable(w, p) {
                return None;
            }
            pcus = pcus - u64::from(w.pcus) + u64::from(p);
            self.changed.push((c, slowest_of(stage_times(self.chip, w, p, self.precision)).0));
        }
        if pcus > u64::from(pcus_available) || self.pmus > u64::from(self.chip.pmus) {
            return None;
        }
        let (changed, base) = (&self.changed, &self.seconds);
        let seconds = |i: usize| changed.iter().find(|c| c.0 == i).map_or(base[i], |c| c.1);
        let (top, s) = (base[self.slowest], self.slowest);
        // The slowest stage stays unless it changed, or a changed stage now outlasts it (or
        // lasts as long and comes first).
        let stays = changed.iter().all(|&(c, t)| c != s && (t < top || (t == top && c > s)));
        let slowest = if stays { s } else { slowest_stage(n, seconds) };
        let first = changed.iter().map(|c| c.0).min().unwrap_or(n);
        let first = if slowest == s { first } else { first.min(s).min(slowest) };
        let [hbm, ddr, link] = self.shared;
        let steady = slowest_of([(seconds(slowest), Bound::Compute), hbm, ddr, link]).0;
        let mut longest = self.longest_before[first];
        for (i, w) in self.work.iter().enumerate().skip(first) {
            let (t, h) = (seconds(i), hops(i));
            let fill = if t.to_bits() == base[i].to_bits() && (i == slowest) == (i == s) && h == w.hops {
                self.fill[i]
            } else {
                stage_fill(self.chip, w, t, i == slowest, h)
            };
            let from = self.preds[self.pred_at[i]..self.pred_at[i + 1]]
                .iter()
                .fold(0.0, |from, &j| longer(from, if j < first { self.reach[j] } else { self.scratch[j] }));
            self.scratch[i] = from + fill;
            longest = longer(longest, self.scratch[i]);
        }
        self.retimed += (n - first) as u64;
        let (_, reconfiguration_seconds) = reconfiguration(self.chip, 1);
        let section = section_seconds(self.chip, steady, longest);
        Some(step_seconds(std::iter::once(section), reconfiguration_seconds))
    }
}

/// The longer of two path lengths as the section's fill folds them: `b` only if strictly longer.
fn longer(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}
