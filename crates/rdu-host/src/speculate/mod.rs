//! Speculative decoding on the host: a draft proposes `K` tokens, the target's verify bundle
//! (`rdu lower --cut verify`) computes the logits after the last accepted token and after each
//! drafted one in one step, and the drafted tokens stand as long as the target agrees —
//! greedily, its own argmax, so the tokens are a plain run's token for token; sampling, by
//! speculative sampling's rule ([`accept`]), so they are distributed as a plain run's. The
//! first row that disagrees gives the target's own token in its place (and when every drafted
//! token stands, the last row gives one more), so a step makes between 1 and `K + 1` tokens.
//!
//! The verify bundle serves the prompt too: its tokens go in `K + 1` at a time, every row
//! standing, and the prompt's last rows share a step with the first drafted tokens. After a
//! step the host is told how many rows stand (`Host::keep`), and the next step starts after
//! them: a cache's rows past them are overwritten, a ring's drafted rows and a recurrent state's
//! history are taken from what the program kept (`rdu_compiler`'s `author::verify`).

pub mod accept;
pub mod draft;
pub mod mtp;

pub use draft::{Draft, Drafter, Lookup, ModelDraft};
pub use mtp::MtpDraft;

use crate::error::{HostError, Result};
use crate::generate::{Generate, Generated, Observer};
use crate::host::Host;
use crate::sample::Sampler;
use accept::Verdict;

/// What speculation did: verify steps, tokens drafted and accepted (prompt-only steps count
/// as steps but draft nothing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Speculation {
    pub steps: usize,
    pub drafted: usize,
    pub accepted: usize,
}

/// Generates after `prompt` with the verify bundle `target`, `drafter` proposing its tokens.
pub fn speculate(
    target: &mut Host,
    drafter: &mut dyn Drafter,
    prompt: Vec<u32>,
    how: &Generate,
    observer: &mut dyn Observer,
) -> Result<(Generated, Speculation)> {
    let k = target.draft().ok_or_else(|| HostError::Verify {
        problem: format!("speculative decoding needs a verify bundle; this one steps {} row(s)", target.rows()),
    })?;
    if target.sequences() != 1 {
        let problem = format!("this bundle verifies {} sequences a step; a speculative run is one", target.sequences());
        return Err(HostError::Verify { problem });
    }
    let mut run = Run {
        out: Generated { prompt: prompt.clone(), generated: Vec::new(), positions: Vec::new(), logits: Vec::new() },
        seq: prompt,
        sampler: Sampler::new(how.sampling)?,
        stats: Speculation::default(),
        done: false,
    };
    let rows = k + 1;
    // The target holds the rows of positions below `fed`.
    let mut fed = 0;
    while !run.done {
        let take = (run.seq.len() - fed).min(rows);
        let draft = match take < rows {
            true => drafter.draft(&run.seq, rows - take)?,
            false => Draft { tokens: Vec::new(), dists: None },
        };
        let mut tokens: Vec<u32> = run.seq[fed..fed + take].iter().chain(&draft.tokens).copied().collect();
        // A draft that proposed fewer tokens leaves rows of padding, which never stand.
        let pad = tokens.last().copied().unwrap_or(0);
        tokens.resize(rows, pad);
        let out = target.step(&tokens, fed)?;
        let logits: Vec<Vec<f32>> =
            out.logits.as_f32().unwrap_or_default().chunks(target.vocab()).map(<[f32]>::to_vec).collect();
        run.stats.steps += 1;
        if fed + take < run.seq.len() {
            // The prompt's rows alone: every one stands.
            run.rows(fed, &logits, rows, how.keep_all);
            drafter.observe(fed, out.hidden.as_ref(), rows)?;
            fed += rows;
            continue;
        }
        let first = fed + take == run.out.prompt.len() && run.out.generated.is_empty();
        let valid = run.decide(fed, take, &draft, &logits, how, observer)?;
        if first {
            // The step that finished the prompt (its first tokens generated beside it) is the
            // prompt's: decoding starts after it.
            observer.prompt_done(0);
        }
        target.keep(0, valid)?;
        drafter.observe(fed, out.hidden.as_ref(), valid)?;
        fed += valid;
    }
    Ok((run.out, run.stats))
}

/// One sequence being generated speculatively.
struct Run {
    out: Generated,
    /// The prompt and every token generated so far.
    seq: Vec<u32>,
    sampler: Sampler,
    stats: Speculation,
    done: bool,
}

impl Run {
    /// Records the rows `0..n` of a step at position `pos` as computed, keeping their logits
    /// (or, without `keep_all`, the last row's only).
    fn rows(&mut self, pos: usize, logits: &[Vec<f32>], n: usize, keep_all: bool) {
        self.out.positions.extend(pos..pos + n);
        if keep_all {
            self.out.logits.extend(logits[..n].iter().cloned());
        } else if let Some(last) = n.checked_sub(1).and_then(|r| logits.get(r)) {
            self.out.logits = vec![last.clone()];
        }
    }

    /// Checks the drafted tokens of a step at `pos` whose first `take` rows are the sequence's
    /// own, emitting every token that stands and the one that takes the first rejected token's
    /// place (or follows the last drafted one); returns how many rows stand.
    fn decide(
        &mut self,
        pos: usize,
        take: usize,
        draft: &Draft,
        logits: &[Vec<f32>],
        how: &Generate,
        observer: &mut dyn Observer,
    ) -> Result<usize> {
        self.stats.drafted += draft.tokens.len();
        let mut used = take;
        for (i, &d) in draft.tokens.iter().enumerate() {
            if self.out.generated.len() == how.n {
                break;
            }
            let row = &logits[take - 1 + i];
            let q = draft.dists.as_ref().map(|dists| &dists[i]);
            match accept::check(&mut self.sampler, row, d, q)? {
                Verdict::Accept => {
                    self.stats.accepted += 1;
                    self.emit(d, how, observer);
                    used += 1;
                    if self.done {
                        break;
                    }
                }
                Verdict::Replace(t) => {
                    self.rows(pos, logits, used, how.keep_all);
                    self.emit(t, how, observer);
                    return Ok(used);
                }
            }
        }
        self.rows(pos, logits, used, how.keep_all);
        if !self.done && self.out.generated.len() < how.n {
            // Every drafted token stood: the last row gives one more.
            let t = self.sampler.sample(&logits[used - 1])?;
            self.emit(t, how, observer);
        } else {
            self.done = true;
        }
        Ok(used)
    }

    /// Appends `token` to the sequence, or ends it: at a stop token (not kept), or at `n` tokens.
    fn emit(&mut self, token: u32, how: &Generate, observer: &mut dyn Observer) {
        if how.stop.contains(&token) {
            self.done = true;
            return;
        }
        self.out.generated.push(token);
        self.seq.push(token);
        observer.token(0, token);
        self.done = self.out.generated.len() == how.n;
    }
}
