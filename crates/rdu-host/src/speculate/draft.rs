//! Drafts: what proposes the tokens a verify step checks. Prompt lookup (n-gram matches in the
//! sequence so far, no model) and another model's decode bundle.

use std::collections::BTreeMap;

use rdu_spatial::SimTensor;

use crate::error::{HostError, Result};
use crate::host::Host;
use crate::sample::{Dist, Sampler, Sampling};

/// Tokens proposed to follow a sequence, with the distribution each was drawn from when the
/// draft sampled it (`None`: proposed deterministically).
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    pub tokens: Vec<u32>,
    pub dists: Option<Vec<Dist>>,
}

/// Whatever proposes tokens.
pub trait Drafter {
    /// Up to `k` tokens to follow `seq` (the prompt and every token generated so far); fewer
    /// when the draft cannot propose yet (the step's other rows are checked as padding).
    fn draft(&mut self, seq: &[u32], k: usize) -> Result<Draft>;

    /// The target's verify step at `pos`: its exported hidden rows (`[rows, d_model]`, when
    /// the bundle exports them), of which the first `kept` stand. Only a draft that reads the
    /// target's hidden state (a multi-token-prediction block) keeps them.
    fn observe(&mut self, _pos: usize, _hidden: Option<&SimTensor>, _kept: usize) -> Result<()> {
        Ok(())
    }
}

/// Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's last
/// `n` tokens, for the longest `n` up to `max_ngram` that occurs; the copy runs on through the
/// tokens it proposes (a repeating pattern repeats), and with no match at all the last token is
/// proposed again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lookup {
    pub max_ngram: usize,
}

impl Default for Lookup {
    fn default() -> Lookup {
        Lookup { max_ngram: 3 }
    }
}

impl Drafter for Lookup {
    fn draft(&mut self, seq: &[u32], k: usize) -> Result<Draft> {
        Ok(Draft { tokens: lookup(seq, k, self.max_ngram), dists: None })
    }
}

/// [`Lookup`]'s `k` tokens after `seq`.
pub fn lookup(seq: &[u32], k: usize, max_ngram: usize) -> Vec<u32> {
    let Some(&last) = seq.last() else { return Vec::new() };
    let start = (1..=max_ngram.min(seq.len().saturating_sub(1))).rev().find_map(|n| {
        let tail = &seq[seq.len() - n..];
        // The latest earlier occurrence: it ends before the sequence does.
        (0..seq.len() - n).rev().find(|&i| &seq[i..i + n] == tail).map(|i| i + n)
    });
    let mut out: Vec<u32> = Vec::with_capacity(k);
    match start {
        Some(from) => {
            for j in 0..k {
                // Copying on past the sequence's end reads what this copy has proposed.
                let at = from + j;
                let t = if at < seq.len() { seq[at] } else { out[at - seq.len()] };
                out.push(t);
            }
        }
        None => out.resize(k, last),
    }
    out
}

/// Another model, drafting through its own decode bundle: it feeds the sequence as far as it
/// has not, then proposes one token a step — greedily, or drawn with the run's sampling.
///
/// A full cache drops a rejected token's row when the next token is written at its position.
/// A sliding-window ring or a recurrent state does not (a ring's rejected rows overwrite rows
/// its window still needs; a recurrent state has taken them in), so before the drafted tokens
/// are fed the draft copies those states, and when any drafted token is rejected it puts the
/// copy back and feeds the accepted ones again.
pub struct ModelDraft {
    host: Host,
    /// The tokens whose rows the draft's states hold, position by position.
    fed: Vec<u32>,
    sampler: Sampler,
    /// The states that do not hold one row per position (rings, recurrent and conv states).
    partial: Vec<String>,
    /// Those states as they were after `fed[..n]` (`saved_at`: `Some(n)`), before the last
    /// drafted tokens; the buffers are kept from one draft to the next.
    saved: BTreeMap<String, SimTensor>,
    saved_at: Option<usize>,
}

/// Refuses a draft bundle (`what`: "a draft model", "an MTP draft") that is not a decode
/// bundle of one token a step.
pub(super) fn one_token_a_step(host: &Host, what: &str) -> Result<()> {
    if host.rows() != 1 || host.draft().is_some() {
        let problem = format!("{what} runs a decode bundle of one token a step, not one of {}", host.rows());
        return Err(HostError::Verify { problem });
    }
    Ok(())
}

/// A draft's sampler: the run's settings with a generator of its own, so the target's draws
/// do not depend on the draft's.
pub(super) fn draft_sampler(sampling: Sampling) -> Result<Sampler> {
    Sampler::new(Sampling { seed: sampling.seed ^ 0x5EED_D4AF, ..sampling })
}

/// The token a draft proposes after `logits` (its argmax at greedy decoding, else drawn) and
/// the distribution it came from.
pub(super) fn propose(sampler: &mut Sampler, logits: &[f32]) -> Result<(u32, Dist)> {
    let dist = sampler.distribution(logits)?;
    let t = if sampler.is_greedy() { dist.tokens[0] } else { dist.draw(sampler.uniform()) };
    Ok((t, dist))
}

impl ModelDraft {
    /// A draft over a one-sequence decode bundle. Its states that do not hold one row per
    /// position of its context are copied before each draft and put back after a rejection;
    /// a tensor-parallel draft with such states is refused, naming one.
    pub fn new(host: Host, sampling: Sampling) -> Result<ModelDraft> {
        one_token_a_step(&host, "a draft model")?;
        let ctx = host.ctx();
        let partial: Vec<String> =
            host.states().shapes().iter().filter(|(_, s)| s.first() != Some(&ctx)).map(|(n, _)| n.clone()).collect();
        if let (Some(name), true) = (partial.first(), host.chips() > 1) {
            let problem = format!(
                "the draft's state `{name}` is a sliding-window ring or a recurrent state, which a tensor-parallel draft cannot put back after a rejected token; draft on one chip"
            );
            return Err(HostError::Verify { problem });
        }
        let sampler = draft_sampler(sampling)?;
        Ok(ModelDraft { host, fed: Vec::new(), sampler, partial, saved: BTreeMap::new(), saved_at: None })
    }

    /// The draft's host, handed back (its states as the draft left them).
    pub fn into_host(self) -> Host {
        self.host
    }

    /// The draft's logits after feeding `token` at the next position.
    fn feed(&mut self, token: u32) -> Result<Vec<f32>> {
        if token as usize >= self.host.vocab() {
            // A target whose embedding is padded past the draft's tokenizer made a token of it.
            let problem =
                format!("the target made token {token}, past the draft's vocabulary of {} tokens", self.host.vocab());
            return Err(HostError::Verify { problem });
        }
        let out = self.host.step(&[token], self.fed.len())?;
        self.fed.push(token);
        Ok(out.logits.as_f32().unwrap_or_default().to_vec())
    }

    /// Drops the fed tokens past `keep`: a full cache's rows are overwritten when the next
    /// tokens are fed; the other states go back to their copy (or to zero, with nothing fed,
    /// when no copy is old enough) and the tokens after the copy are fed again by the caller.
    fn rewind(&mut self, keep: usize) -> Result<()> {
        if keep >= self.fed.len() {
            return Ok(());
        }
        if self.partial.is_empty() {
            self.fed.truncate(keep);
            return Ok(());
        }
        match self.saved_at.filter(|&at| at <= keep) {
            Some(at) => {
                self.host.restore_states(&self.saved)?;
                self.fed.truncate(at);
            }
            None => {
                self.host.reset();
                self.fed.clear();
            }
        }
        Ok(())
    }
}

impl Drafter for ModelDraft {
    fn draft(&mut self, seq: &[u32], k: usize) -> Result<Draft> {
        // Keep the rows of the tokens the sequence still holds; the last token is fed again if
        // it was fed, since its logits were not kept.
        let same = self.fed.iter().zip(seq).take_while(|(a, b)| a == b).count();
        self.rewind(same.min(seq.len().saturating_sub(1)))?;
        let mut logits = Vec::new();
        for &t in &seq[self.fed.len()..] {
            logits = self.feed(t)?;
        }
        if !self.partial.is_empty() && k > 1 && self.host.copy_states(&self.partial, &mut self.saved) {
            self.saved_at = Some(self.fed.len());
        }
        let (mut tokens, mut dists) = (Vec::with_capacity(k), Vec::with_capacity(k));
        for i in 0..k {
            let (t, dist) = propose(&mut self.sampler, &logits)?;
            tokens.push(t);
            dists.push(dist);
            if i + 1 < k {
                logits = self.feed(t)?;
            }
        }
        let dists = (!self.sampler.is_greedy()).then_some(dists);
        Ok(Draft { tokens, dists })
    }
}
