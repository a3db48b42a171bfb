//! `HostEngine`: the scheduler's steps run on the host — a batched decode bundle (one row per
//! slot, each slot its own position and states) and, optionally, a prefill bundle of the same
//! model over the same `ctx` that runs one sequence's whole chunks.
//!
//! A slot's states move (never copied) between the two hosts: when a sequence that starts with
//! chunks takes its slot, its freshly reset states are parked here and a spare store takes their place in the
//! batched host, so the throwaway rows that slot steps meanwhile write only into the spare;
//! each chunk moves the parked states into the prefill host and back; after the last chunk they
//! return to the slot and the spare to the pool. A sequence therefore gets exactly what
//! `rdu run --chunk C` gives it: its whole chunks through the prefill bundle, the rest of its
//! prompt and every generated token through decode rows.

use std::collections::BTreeMap;

use super::{Config, Step};
use crate::error::{HostError, Result};
use crate::host::Host;
use crate::states::States;
use rdu_spatial::sim::SimTensor;

/// Sequences that may be in their chunk phase at once under the default budget: with a chunk
/// beside every decoding row only the oldest one's chunks run while anything decodes, so a
/// second lets the next prompt start the step the first one's chunks end, and more would only
/// hold memory. A larger budget ([`prefilling`]) lets one more sequence in per chunk it holds.
pub const PREFILLING: usize = 2;

/// Sequences that may be in their chunk phase at once when a step's budget holds `budget`
/// tokens beside `slots` decoding rows: one more than the chunks of `chunk` rows it holds
/// beside them, and never fewer than [`PREFILLING`] (each holds a store of states while it is
/// in its chunk phase). 16 prompts arriving at once at a 16-slot Gemma 3 270M server with
/// `--chunk 32 --step-tokens 80` (two chunks a step) all started within 8 steps instead of 16.
pub fn prefilling(slots: usize, chunk: Option<usize>, budget: usize) -> usize {
    let chunks = chunk.map_or(0, |c| budget.saturating_sub(slots) / c.max(1));
    PREFILLING.max(chunks + 1)
}

/// The logits rows of a step's sampling points, in [`Step::points`] order, left where the step
/// wrote them: a prefill chunk's row, or a row of a batched step's `[rows, vocab]` logits (a
/// 16-row step of Gemma 3 270M writes 16 MiB of them, and copying each row out took about 1.5
/// ms of a 60 ms step).
#[derive(Debug, Default)]
pub struct Logits {
    /// What the step wrote: each sampled chunk's row, the batched step's rows.
    buffers: Vec<Vec<f32>>,
    /// Each point's buffer and first value.
    points: Vec<(usize, usize)>,
    vocab: usize,
}

impl Logits {
    /// Sampling points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Point `i`'s row of `vocab` values.
    pub fn row(&self, i: usize) -> &[f32] {
        let (b, at) = self.points[i];
        &self.buffers[b][at..at + self.vocab]
    }

    /// Every point's row, in order.
    pub fn rows(&self) -> impl Iterator<Item = &[f32]> {
        (0..self.len()).map(|i| self.row(i))
    }

    /// Keeps `buffer` (what one program wrote) and adds a point at each row of `rows` in it;
    /// refuses (nothing added) a row it does not hold.
    fn add(&mut self, buffer: Vec<f32>, rows: impl IntoIterator<Item = usize>, program: &str) -> Result<()> {
        let b = self.buffers.len();
        let starts: Vec<usize> = rows.into_iter().map(|r| r * self.vocab).collect();
        if starts.iter().any(|&at| at + self.vocab > buffer.len()) {
            return Err(HostError::NoOutput { program: program.into(), name: "logits".into() });
        }
        self.points.extend(starts.into_iter().map(|at| (b, at)));
        self.buffers.push(buffer);
        Ok(())
    }
}

/// A batched host and an optional prefill host, run step by step.
pub struct HostEngine {
    decode: Host,
    prefill: Option<Host>,
    /// Batched hosts of fewer sequences ([`HostEngine::with_smaller`]), fewest first: a step
    /// whose live rows fit one runs there instead of stepping every slot's row.
    smaller: Vec<Host>,
    /// Steps run on a host of `smaller`.
    smaller_steps: u64,
    /// The real states of slots in their chunk phase.
    parked: BTreeMap<usize, States>,
    /// Stores that stand in for parked states in the batched host.
    spare: Vec<States>,
}

impl HostEngine {
    /// Pairs a batched bundle's host with a prefill bundle's host. Refuses (before anything
    /// runs) a decode host that is not batched, and a prefill host whose states are not exactly
    /// one of the batched host's sequences' or whose ctx differs.
    pub fn new(mut decode: Host, prefill: Option<Host>) -> Result<HostEngine> {
        // Refuses a host that is not batched (or is tensor-parallel) before anything runs.
        let probe = decode.take_sequence_states(0)?;
        let problem = prefill.as_ref().and_then(|p| {
            if p.ctx() != decode.ctx() {
                return Some(format!(
                    "the prefill bundle holds {} positions, the batched bundle {}",
                    p.ctx(),
                    decode.ctx()
                ));
            }
            crate::states::differ(p.states(), &probe)
        });
        decode.put_sequence_states(0, probe)?;
        if let Some(problem) = problem {
            return Err(HostError::StatesMismatch { problem });
        }
        // The prefill host's own store becomes the first spare, the others are made now. Every
        // store is written once here, so the states are resident from the start and serving
        // allocates none.
        let mut prefill = prefill;
        let mut spare: Vec<States> = prefill.as_mut().map(Host::take_states).into_iter().collect();
        if let Some(first) = spare.first() {
            let more: Vec<States> = (1..PREFILLING).map(|_| first.zeros_like()).collect();
            spare.extend(more);
        }
        spare.iter_mut().for_each(States::reset);
        decode.reset();
        Ok(HostEngine { decode, prefill, smaller: Vec::new(), smaller_steps: 0, parked: BTreeMap::new(), spare })
    }

    /// Adds a batched host of the same model over the same ctx with fewer sequences than the
    /// batched host (each sequence's states exactly one of its sequences'). A step whose live
    /// rows fit it runs there: the live slots' states move into its first rows (nothing is
    /// copied), stores of slots that are not live into the rest, it steps, and every store
    /// moves back. The rest step throwaway rows into idle or parked slots' stores, as the full
    /// step does, which are reset before they are used; the live rows compute what they would
    /// alone. Its own stores are dropped. Refuses (before anything runs) a host that is not
    /// batched, not smaller, over another ctx, or whose states do not match.
    pub fn with_smaller(mut self, mut host: Host) -> Result<HostEngine> {
        let n = host.sequences();
        if n >= self.decode.sequences() || host.ctx() != self.decode.ctx() {
            let problem = format!(
                "a smaller bundle must hold fewer than {} sequences over {} positions; this one holds {n} over {}",
                self.decode.sequences(),
                self.decode.ctx(),
                host.ctx()
            );
            return Err(HostError::StatesMismatch { problem });
        }
        let probe = self.decode.take_sequence_states(0)?;
        let theirs: Result<Vec<States>> = (0..n).map(|i| host.take_sequence_states(i)).collect();
        let problem = theirs.as_ref().ok().and_then(|t| t.first()).and_then(|ours| crate::states::differ(ours, &probe));
        self.decode.put_sequence_states(0, probe)?;
        drop(theirs?);
        if let Some(problem) = problem {
            return Err(HostError::StatesMismatch { problem });
        }
        let at = self.smaller.partition_point(|h| h.sequences() < n);
        self.smaller.insert(at, host);
        Ok(self)
    }

    /// Steps so far that ran on a smaller batched host ([`HostEngine::with_smaller`]).
    pub fn smaller_steps(&self) -> u64 {
        self.smaller_steps
    }

    /// The scheduler's configuration for this deployment: `budget` tokens a step (at least a
    /// chunk beside every decoding row; `None` for exactly that) and `queue` waiting requests.
    pub fn config(&self, budget: Option<usize>, queue: usize) -> Config {
        let slots = self.decode.sequences();
        let chunk = self.prefill.as_ref().map(Host::rows);
        let budget = budget.unwrap_or(slots + chunk.unwrap_or(0));
        Config { slots, ctx: self.decode.ctx(), chunk, budget, queue, prefilling: prefilling(slots, chunk, budget) }
    }

    /// The vocabulary both bundles compute logits over.
    pub fn vocab(&self) -> usize {
        self.decode.vocab()
    }

    pub fn decode_host(&self) -> &Host {
        &self.decode
    }

    /// Runs `step`: resets, chunks, then the batched decode step. Returns the logits row of each
    /// sampling point, in [`Step::points`] order.
    pub fn run(&mut self, step: &Step) -> Result<Logits> {
        for &b in &step.resets {
            if let Some(states) = self.parked.remove(&b) {
                // A sequence that left mid-prompt: its slot holds a spare now; reset that.
                self.spare.push(states);
            }
            self.decode.reset_sequence(b);
        }
        for &b in &step.parks {
            self.park(b)?;
        }
        let mut out = Logits { vocab: self.decode.vocab(), ..Logits::default() };
        for chunk in &step.chunks {
            let row = self.run_chunk(chunk.slot, &chunk.tokens, chunk.pos)?;
            if chunk.samples {
                out.add(row, [0], "the prefill step")?;
            }
        }
        self.decode_rows(step, &mut out)?;
        // A slot whose chunks ended this step stepped a throwaway row above, into its spare: its
        // own states come back only now.
        for chunk in step.chunks.iter().filter(|c| c.last) {
            self.unpark(chunk.slot)?;
        }
        Ok(out)
    }

    /// The batched decode step of `step.rows`; the sampled rows' logits added to `out`.
    fn decode_rows(&mut self, step: &Step, out: &mut Logits) -> Result<()> {
        let live: Vec<usize> = (0..step.rows.len()).filter(|&b| step.rows[b].id.is_some()).collect();
        if let Some(h) = self.smaller.iter().position(|h| !live.is_empty() && h.sequences() >= live.len()) {
            self.smaller_step(h, step, &live, out)?;
            self.smaller_steps += 1;
            return Ok(());
        }
        if !step.rows.is_empty() {
            let tokens: Vec<u32> = step.rows.iter().map(|r| r.token).collect();
            let positions: Vec<usize> = step.rows.iter().map(|r| r.pos).collect();
            let logits = self.decode.step_at(&tokens, &positions)?.logits.into_f32().unwrap_or_default();
            let sampled = step.rows.iter().enumerate().filter(|(_, row)| row.samples).map(|(b, _)| b);
            out.add(logits, sampled, "the batched step")?;
        }
        Ok(())
    }

    /// The step's `live` rows on smaller host `h`: their slots' states in its first rows,
    /// stores of slots that are not live in the rest (their throwaway rows), every store moved
    /// back to its slot whether the step succeeds or not; the sampled live rows' logits
    /// added to `out`, in row order.
    fn smaller_step(&mut self, h: usize, step: &Step, live: &[usize], out: &mut Logits) -> Result<()> {
        let Some(host) = self.smaller.get_mut(h) else { return Ok(()) };
        let n = host.sequences();
        let others = (0..step.rows.len()).filter(|b| !live.contains(b));
        let members: Vec<usize> = live.iter().copied().chain(others).take(n).collect();
        let mut moved = 0;
        let mut result = Ok(());
        for (i, &b) in members.iter().enumerate() {
            result = self.decode.take_sequence_states(b).and_then(|st| host.put_sequence_states(i, st));
            if result.is_err() {
                break;
            }
            moved += 1;
        }
        let mut logits = None;
        if result.is_ok() {
            let tokens: Vec<u32> = members.iter().map(|&b| step.rows[b].token).collect();
            let positions: Vec<usize> = members.iter().map(|&b| step.rows[b].pos).collect();
            match host.step_at(&tokens, &positions) {
                Ok(o) => logits = Some(o.logits),
                Err(e) => result = Err(e),
            }
        }
        for (i, &b) in members.iter().enumerate().take(moved) {
            let back = host.take_sequence_states(i).and_then(|st| self.decode.put_sequence_states(b, st));
            if result.is_ok() {
                result = back;
            }
        }
        result?;
        let sampled = live.iter().enumerate().filter(|&(_, &b)| step.rows[b].samples).map(|(i, _)| i);
        out.add(logits.and_then(SimTensor::into_f32).unwrap_or_default(), sampled, "the smaller batched step")
    }

    /// After a failed step: every slot's states zeroed and in place (re-made where a failure
    /// lost them), nothing parked. The sequences that were running must start over.
    pub fn recover(&mut self) {
        self.parked.clear();
        // A smaller host keeps no stores between steps; a failed move may have left some there.
        for host in &mut self.smaller {
            for i in 0..host.sequences() {
                drop(host.take_sequence_states(i));
            }
        }
        if let Some(p) = &mut self.prefill {
            if p.states().is_held() {
                self.spare.push(p.take_states());
            }
        }
        self.decode.reset();
    }

    /// Moves slot `b`'s (just reset) states out to the parked stores and a spare in.
    fn park(&mut self, b: usize) -> Result<()> {
        let real = self.decode.take_sequence_states(b)?;
        // The scheduler parks at most `prefilling` slots: the spares made up front cover
        // `PREFILLING` of them, and a larger budget's further spares are made here once, then
        // return to the pool.
        let spare = self.spare.pop().unwrap_or_else(|| real.zeros_like());
        if let Err(e) = self.decode.put_sequence_states(b, spare) {
            self.decode.put_sequence_states(b, real)?;
            return Err(e);
        }
        self.parked.insert(b, real);
        Ok(())
    }

    /// Moves slot `b`'s parked states back into the batched host, its spare to the pool.
    fn unpark(&mut self, b: usize) -> Result<()> {
        let Some(real) = self.parked.remove(&b) else { return Ok(()) };
        let spare = self.decode.take_sequence_states(b)?;
        self.decode.put_sequence_states(b, real)?;
        self.spare.push(spare);
        Ok(())
    }

    /// One whole chunk of slot `b`'s prompt through the prefill host, over its parked states
    /// (which come back here whether the step succeeds or not): the logits of its last row.
    fn run_chunk(&mut self, b: usize, tokens: &[u32], pos: usize) -> Result<Vec<f32>> {
        let prefill = self.prefill.as_mut().ok_or_else(|| HostError::StatesMismatch {
            problem: "a prefill chunk was planned but this engine has no prefill bundle".into(),
        })?;
        let states = self.parked.remove(&b).ok_or_else(|| HostError::StatesMismatch {
            problem: format!("slot {b} runs a chunk but its states were never parked"),
        })?;
        prefill.put_states(states)?;
        let out = prefill.step(tokens, pos);
        self.parked.insert(b, prefill.take_states());
        Ok(out?.logits.into_f32().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points are rows of the buffers they were added with, in order; a row a buffer does not
    /// hold is refused and nothing of that buffer is kept.
    #[test]
    fn logits_points_are_rows_left_in_place() {
        let mut logits = Logits { vocab: 3, ..Logits::default() };
        logits.add(vec![1.0, 2.0, 3.0], [0], "a chunk").expect("a chunk's row");
        let batch: Vec<f32> = (0..12).map(|v| v as f32 * 10.0).collect();
        logits.add(batch, [1, 3], "the batched step").expect("two of four rows");
        assert_eq!(logits.len(), 3);
        let rows: Vec<&[f32]> = logits.rows().collect();
        assert_eq!(rows, [&[1.0, 2.0, 3.0][..], &[30.0, 40.0, 50.0], &[90.0, 100.0, 110.0]]);
        let refused = logits.add(vec![0.0; 6], [1, 2], "a short step");
        assert!(matches!(refused, Err(HostError::NoOutput { .. })), "{refused:?}");
        assert_eq!((logits.len(), logits.buffers.len()), (3, 2), "nothing of a refused buffer is kept");
    }
}
