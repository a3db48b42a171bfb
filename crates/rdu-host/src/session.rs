//! `Session`: one sequence over a prefill bundle and a decode bundle of the same model.
//!
//! The two hosts share one state store: whichever bundle runs a step holds the states for it,
//! and they move — never copied — to the other host when it runs next. A prompt runs its whole
//! chunks through the prefill bundle; the rest of the prompt (a partial last chunk) and every
//! generated token run through the decode bundle, one row a step.

use crate::error::{HostError, Result};
use crate::host::{Host, StepOutput};

/// A prefill host and a decode host over one sequence's states.
pub struct Session {
    prefill: Host,
    decode: Host,
    /// Which host holds the states now.
    at_prefill: bool,
}

impl Session {
    /// Pairs a prefill bundle's host with a decode bundle's host. Refuses (before anything
    /// runs) bundles whose states differ — names or shapes — or whose contexts differ, and a
    /// decode host that steps more than one row.
    pub fn new(prefill: Host, mut decode: Host) -> Result<Session> {
        prefill.check_states_match(&decode)?;
        if prefill.ctx() != decode.ctx() {
            let problem =
                format!("the prefill bundle holds {} positions, the decode bundle {}", prefill.ctx(), decode.ctx());
            return Err(HostError::StatesMismatch { problem });
        }
        if decode.rows() != 1 {
            let problem = format!("the decode bundle steps {} rows at a time; a session decodes one", decode.rows());
            return Err(HostError::StatesMismatch { problem });
        }
        // The states start with the prefill host; the decode host holds none until it runs.
        let _ = decode.take_states();
        let _ = decode.take_chip_states();
        Ok(Session { prefill, decode, at_prefill: true })
    }

    /// Rows of one prefill chunk.
    pub fn chunk(&self) -> usize {
        self.prefill.rows()
    }

    /// Positions the states hold.
    pub fn ctx(&self) -> usize {
        self.decode.ctx()
    }

    pub fn prefill_host(&self) -> &Host {
        &self.prefill
    }

    pub fn decode_host(&self) -> &Host {
        &self.decode
    }

    /// Runs one whole chunk (`tokens` holds exactly [`Session::chunk`] ids at positions
    /// `pos..pos + chunk`) through the prefill bundle: the logits of its last row, `[1, vocab]`.
    pub fn prefill(&mut self, tokens: &[u32], pos: usize) -> Result<StepOutput> {
        self.hold(true)?;
        self.prefill.step(tokens, pos)
    }

    /// Runs one token at `pos` through the decode bundle: its logits, `[1, vocab]`.
    pub fn decode(&mut self, token: u32, pos: usize) -> Result<StepOutput> {
        self.hold(false)?;
        self.decode.step(&[token], pos)
    }

    /// Zeroes the states: the next step starts a new sequence.
    pub fn reset(&mut self) {
        if self.at_prefill {
            self.prefill.reset();
        } else {
            self.decode.reset();
        }
    }

    /// Moves the states to the prefill host (`true`) or the decode host.
    fn hold(&mut self, prefill: bool) -> Result<()> {
        if self.at_prefill != prefill {
            let (from, to) =
                if prefill { (&mut self.decode, &mut self.prefill) } else { (&mut self.prefill, &mut self.decode) };
            to.put_states(from.take_states())?;
            to.put_chip_states(from.take_chip_states())?;
            self.at_prefill = prefill;
        }
        Ok(())
    }
}
