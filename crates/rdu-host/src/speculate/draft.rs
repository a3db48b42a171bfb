//! Drafts: what proposes the tokens a verify step checks. Prompt lookup (n-gram matches in the
//! sequence so far, no model) and another model's decode bundle.

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
    /// `k` tokens to follow `seq` (the prompt and every token generated so far).
    fn draft(&mut self, seq: &[u32], k: usize) -> Result<Draft>;
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
/// has not (its cache rows of rejected tokens are overwritten at their positions), then
/// proposes one token a step — greedily, or drawn with the run's sampling.
pub struct ModelDraft {
    host: Host,
    /// The tokens whose cache rows the draft holds, position by position.
    fed: Vec<u32>,
    sampler: Sampler,
}

impl ModelDraft {
    /// A draft over a decode bundle of one sequence whose every state holds one row per position
    /// of its context (full KV or latent caches): only those drop a rejected token's row by
    /// writing the next token at its position. A sliding-window ring or a recurrent state would
    /// keep what the rejected tokens wrote, so such a bundle is refused, naming the state.
    pub fn new(host: Host, sampling: Sampling) -> Result<ModelDraft> {
        let fail = |problem: String| Err(HostError::Verify { problem });
        if host.rows() != 1 || host.draft().is_some() {
            return fail(format!("a draft model runs a decode bundle of one token a step, not one of {}", host.rows()));
        }
        let ctx = host.ctx();
        if let Some((name, shape)) = host.states().shapes().iter().find(|(_, s)| s.first() != Some(&ctx)) {
            return fail(format!(
                "the draft's state `{name}` holds {} rows, not one per position of its {ctx}-position context (a sliding-window ring or a recurrent state), so it cannot drop a rejected token; draft with a model whose caches are full, or at a --ctx within its window",
                shape.first().copied().unwrap_or(0)
            ));
        }
        // The draft draws with its own generator, so the target's draws do not depend on it.
        let sampler = Sampler::new(Sampling { seed: sampling.seed ^ 0x5EED_D4AF, ..sampling })?;
        Ok(ModelDraft { host, fed: Vec::new(), sampler })
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
}

impl Drafter for ModelDraft {
    fn draft(&mut self, seq: &[u32], k: usize) -> Result<Draft> {
        // Keep the rows of the tokens the sequence still holds; the last token is fed again if
        // it was fed, since its logits were not kept.
        let same = self.fed.iter().zip(seq).take_while(|(a, b)| a == b).count();
        self.fed.truncate(same.min(seq.len().saturating_sub(1)));
        let mut logits = Vec::new();
        for &t in &seq[self.fed.len()..] {
            logits = self.feed(t)?;
        }
        let (mut tokens, mut dists) = (Vec::with_capacity(k), Vec::with_capacity(k));
        for i in 0..k {
            let dist = self.sampler.distribution(&logits)?;
            let t = if self.sampler.is_greedy() { dist.tokens[0] } else { dist.draw(self.sampler.uniform()) };
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
