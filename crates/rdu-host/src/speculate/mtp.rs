//! A model's own multi-token-prediction (MTP) block drafting (`rdu run --draft mtp`): its
//! bundle is a one-layer model whose row at position `q` reads the token at `q + 1` and the
//! target's hidden state after row `q` (the rows the target's verify bundle exports), and
//! predicts the token at `q + 2` — vLLM's layout (the block's row sits at its hidden row's
//! position). Its cache is full, so a rejected row is dropped by writing the next row at its
//! position.
//!
//! Before drafting, the block catches up on every position whose target hidden state stands
//! (rows fed from its own drafts are fed again from the target's); then it drafts `k` tokens
//! by running itself on its own outputs: its next row reads the token it drafted and its own
//! exported hidden state, at the next position.

use super::draft::{draft_sampler, one_token_a_step, propose, Draft, Drafter};
use crate::error::{HostError, Result};
use crate::host::{Host, StepOutput};
use crate::sample::{Dist, Sampler, Sampling};
use rdu_spatial::SimTensor;

/// The MTP block's decode bundle drafting for a verify bundle that exports its hidden rows.
pub struct MtpDraft {
    host: Host,
    /// The target's hidden state after each position that stands, position by position.
    hidden: Vec<Vec<f32>>,
    /// The token each of the block's rows read from the target's rows (row `q`: the token at
    /// `q + 1`); rows past them were fed from the block's own drafts, or not at all.
    fed: Vec<u32>,
    width: usize,
    sampler: Sampler,
}

impl MtpDraft {
    /// A draft over an MTP block's bundle of one row a step (`hprev` input, `hn` output).
    pub fn new(host: Host, sampling: Sampling) -> Result<MtpDraft> {
        one_token_a_step(&host, "an MTP draft")?;
        let Some(width) = host.hidden_width() else {
            let problem = "the draft bundle reads no hidden state: it is not a multi-token-prediction block's".into();
            return Err(HostError::Verify { problem });
        };
        let sampler = draft_sampler(sampling)?;
        Ok(MtpDraft { host, hidden: Vec::new(), fed: Vec::new(), width, sampler })
    }

    /// The block's host, handed back (its states as the draft left them).
    pub fn into_host(self) -> Host {
        self.host
    }

    /// The block's logits and hidden state after reading `token` and `hidden` at `pos`.
    fn feed(&mut self, token: u32, pos: usize, hidden: &[f32]) -> Result<(Vec<f32>, Vec<f32>)> {
        let StepOutput { logits, hidden: out } = self.host.step_hidden(&[token], pos, hidden)?;
        let out = out.and_then(|t| t.as_f32().map(<[f32]>::to_vec)).ok_or_else(|| HostError::Verify {
            problem: "the MTP block's head exports no hidden state to draft again from".into(),
        })?;
        Ok((logits.as_f32().unwrap_or_default().to_vec(), out))
    }
}

impl Drafter for MtpDraft {
    fn observe(&mut self, pos: usize, hidden: Option<&SimTensor>, kept: usize) -> Result<()> {
        let rows = hidden.and_then(SimTensor::as_f32).ok_or_else(|| HostError::Verify {
            problem: "the verify bundle exports no hidden state for an MTP draft: lower it with --draft mtp".into(),
        })?;
        if pos > self.hidden.len() || rows.len() < kept * self.width {
            let problem = format!("hidden rows at position {pos} after {} kept ones", self.hidden.len());
            return Err(HostError::Verify { problem });
        }
        self.hidden.truncate(pos);
        self.hidden.extend(rows[..kept * self.width].chunks(self.width).map(<[f32]>::to_vec));
        Ok(())
    }

    fn draft(&mut self, seq: &[u32], k: usize) -> Result<Draft> {
        // Row `n - 2` reads the last token and the target's state after the token before it.
        let n = seq.len();
        if n < 2 || self.hidden.len() < n - 1 {
            // The target has not yet computed that state (the prompt's last rows): no draft.
            return Ok(Draft { tokens: Vec::new(), dists: None });
        }
        let same = self.fed.iter().zip(&seq[1..]).take_while(|(a, b)| a == b).count();
        self.fed.truncate(same.min(n - 2));
        let mut last = (Vec::new(), Vec::new());
        for q in self.fed.len()..n - 1 {
            let h = std::mem::take(&mut self.hidden[q]);
            let fed = self.feed(seq[q + 1], q, &h);
            self.hidden[q] = h;
            last = fed?;
            self.fed.push(seq[q + 1]);
        }
        let (mut tokens, mut dists): (Vec<u32>, Vec<Dist>) = (Vec::with_capacity(k), Vec::with_capacity(k));
        for i in 0..k {
            let (t, dist) = propose(&mut self.sampler, &last.0)?;
            tokens.push(t);
            dists.push(dist);
            if i + 1 < k {
                // The block's next row: the token it drafted, its own state, the next position.
                last = self.feed(t, n - 1 + i, &last.1)?;
            }
        }
        let dists = (!self.sampler.is_greedy()).then_some(dists);
        Ok(Draft { tokens, dists })
    }
}
