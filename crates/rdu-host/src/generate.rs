//! Generation: feed the prompts, step, sample, stop — the one loop behind `rdu run` (one
//! sequence, whole or in prefill chunks, then token by token) and batched runs (several
//! sequences stepped together), whatever computes the logits ([`Stepper`]: a [`Host`], a
//! [`Session`], or the caller's own engine).
//!
//! A sequence is fed its prompt, then each token it generates, until it has generated `n`
//! tokens or sampled a stop token (which is not kept); its last generated token is never fed.
//! Sequences stepped together all start at position 0 and advance one position a step; a
//! sequence whose prompt is shorter starts generating earlier, and a finished one keeps
//! stepping (its rows are computed and ignored) until every sequence is done. Each sequence
//! has its own sampler with the same seed, so it gets exactly what it would get alone.

use crate::error::HostError;
use crate::host::{Host, StepOutput};
use crate::sample::{Sampler, Sampling};
use crate::session::Session;
use rdu_spatial::manifest::CutMode;

/// What one step feeds a [`Stepper`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feed<'a> {
    /// The whole sequence from position 0 (the forward cut, no cache): a logits row per token.
    Whole(&'a [u32]),
    /// One whole prefill chunk at positions `pos..`: the logits row of its last position.
    Chunk(&'a [u32], usize),
    /// One token of every sequence, all at position `pos`: a logits row per sequence.
    Tokens(&'a [u32], usize),
}

impl<'a> Feed<'a> {
    /// The token ids fed.
    pub fn tokens(&self) -> &'a [u32] {
        match *self {
            Feed::Whole(t) | Feed::Chunk(t, _) | Feed::Tokens(t, _) => t,
        }
    }

    /// The position of the first token fed.
    pub fn pos(&self) -> usize {
        match *self {
            Feed::Whole(_) => 0,
            Feed::Chunk(_, pos) | Feed::Tokens(_, pos) => pos,
        }
    }
}

/// How a [`Stepper`] goes through a sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stepping {
    /// The whole sequence at every step ([`Feed::Whole`]).
    Forward,
    /// One token per step against the carried state ([`Feed::Tokens`]); with `chunk`, a lone
    /// sequence's prompt goes first in whole chunks of that many tokens ([`Feed::Chunk`]).
    Decode { chunk: Option<usize> },
}

/// Whatever computes logits rows for what it is fed.
pub trait Stepper {
    type Error: From<HostError>;

    fn stepping(&self) -> Stepping;

    /// The logits rows of one step, as [`Feed`] says.
    fn logits(&mut self, feed: Feed<'_>) -> Result<Vec<Vec<f32>>, Self::Error>;
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct Generate {
    /// Tokens to generate after each prompt (fewer when a stop token comes first).
    pub n: usize,
    /// Tokens that end a sequence (an end-of-sequence id); not kept.
    pub stop: Vec<u32>,
    pub sampling: Sampling,
    /// Keep every logits row computed; otherwise only the last (the one sampled from).
    pub keep_all: bool,
}

/// One sequence, generated.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    pub prompt: Vec<u32>,
    pub generated: Vec<u32>,
    /// The position of every logits row computed (a prefill chunk: its last position).
    pub positions: Vec<usize>,
    /// The rows kept (every row with [`Generate::keep_all`], else the last).
    pub logits: Vec<Vec<f32>>,
}

/// What generation reports as it goes (printing, timing); every method does nothing by default.
pub trait Observer {
    /// Every row of sequence `seq`'s prompt has been computed (a speculative run: and the step
    /// that computed its last rows, whose tokens were generated beside them, is done).
    fn prompt_done(&mut self, _seq: usize) {}
    /// Sequence `seq` generated `token`.
    fn token(&mut self, _seq: usize, _token: u32) {}
}

impl Observer for () {}

/// Generates after each of `prompts` (stepped together when there are several) with `stepper`.
pub fn generate<S: Stepper>(
    stepper: &mut S,
    prompts: Vec<Vec<u32>>,
    how: &Generate,
    observer: &mut dyn Observer,
) -> Result<Vec<Generated>, S::Error> {
    let mut seqs = prompts
        .into_iter()
        .map(|prompt| {
            let sampler = Sampler::new(how.sampling)?;
            Ok(Sequence {
                out: Generated { prompt, generated: Vec::new(), positions: Vec::new(), logits: Vec::new() },
                sampler,
                done: false,
            })
        })
        .collect::<Result<Vec<_>, HostError>>()?;
    match stepper.stepping() {
        Stepping::Forward => forward(stepper, &mut seqs, how, observer)?,
        Stepping::Decode { chunk } => decode(stepper, &mut seqs, chunk, how, observer)?,
    }
    Ok(seqs.into_iter().map(|s| s.out).collect())
}

/// The forward cut: each sequence in turn, whole at every step; each step's new rows kept.
fn forward<S: Stepper>(
    stepper: &mut S,
    seqs: &mut [Sequence],
    how: &Generate,
    observer: &mut dyn Observer,
) -> Result<(), S::Error> {
    for (b, s) in seqs.iter_mut().enumerate() {
        while !s.done {
            let tokens = s.tokens();
            let rows = stepper.logits(Feed::Whole(&tokens))?;
            let first = s.out.positions.is_empty();
            for (p, row) in rows.into_iter().enumerate().skip(s.out.positions.len()) {
                s.take(p, row, how.keep_all);
            }
            if first {
                observer.prompt_done(b);
            }
            s.next(b, how, observer)?;
        }
    }
    Ok(())
}

/// The decode cut: every sequence one token a step at the same position, after a lone
/// sequence's whole prefill chunks.
fn decode<S: Stepper>(
    stepper: &mut S,
    seqs: &mut [Sequence],
    chunk: Option<usize>,
    how: &Generate,
    observer: &mut dyn Observer,
) -> Result<(), S::Error> {
    let mut pos = 0;
    while seqs.iter().any(|s| !s.done) {
        if let (Some(chunk), [s]) = (chunk, &mut *seqs) {
            if pos + chunk <= s.out.prompt.len() {
                let rows = stepper.logits(Feed::Chunk(&s.out.prompt[pos..pos + chunk], pos))?;
                let no_row = || HostError::NoOutput { program: "the prefill step".into(), name: "logits".into() };
                let row = rows.into_iter().next().ok_or_else(no_row)?;
                pos += chunk;
                s.take(pos - 1, row, how.keep_all);
                s.fed(0, pos, how, observer)?;
                continue;
            }
        }
        let tokens: Vec<u32> = seqs.iter().map(|s| s.token_at(pos)).collect();
        let rows = stepper.logits(Feed::Tokens(&tokens, pos))?;
        for (b, (s, row)) in seqs.iter_mut().zip(rows).enumerate() {
            if s.done {
                continue;
            }
            s.take(pos, row, how.keep_all);
            s.fed(b, pos + 1, how, observer)?;
        }
        pos += 1;
    }
    Ok(())
}

/// A sequence being generated: what it has so far, its sampler, and whether it is done.
struct Sequence {
    out: Generated,
    sampler: Sampler,
    done: bool,
}

impl Sequence {
    /// The prompt and every generated token.
    fn tokens(&self) -> Vec<u32> {
        self.out.prompt.iter().chain(&self.out.generated).copied().collect()
    }

    /// The token this sequence feeds at position `pos` (once done, its last again).
    fn token_at(&self, pos: usize) -> u32 {
        let Generated { prompt, generated, .. } = &self.out;
        match prompt.get(pos) {
            Some(&t) => t,
            None => generated
                .get(pos - prompt.len())
                .copied()
                .unwrap_or_else(|| *generated.last().or(prompt.last()).expect("a prompt has at least one token")),
        }
    }

    /// Keeps the logits row of position `pos`.
    fn take(&mut self, pos: usize, row: Vec<f32>, keep_all: bool) {
        self.out.positions.push(pos);
        if !keep_all {
            self.out.logits.clear();
        }
        self.out.logits.push(row);
    }

    /// After the step that fed positions up to `fed`: the prompt is done when it was its last
    /// row, and when every token has been fed, the next one is sampled.
    fn fed(&mut self, b: usize, fed: usize, how: &Generate, observer: &mut dyn Observer) -> Result<(), HostError> {
        if fed == self.out.prompt.len() {
            observer.prompt_done(b);
        }
        if fed == self.out.prompt.len() + self.out.generated.len() {
            self.next(b, how, observer)?;
        }
        Ok(())
    }

    /// Samples the next token from the last row, or finishes the sequence: at `n` tokens, or
    /// on a stop token.
    fn next(&mut self, b: usize, how: &Generate, observer: &mut dyn Observer) -> Result<(), HostError> {
        if self.out.generated.len() == how.n {
            self.done = true;
            return Ok(());
        }
        let token = self.sampler.sample(self.out.logits.last().expect("a row was just kept"))?;
        if how.stop.contains(&token) {
            self.done = true;
            return Ok(());
        }
        self.out.generated.push(token);
        observer.token(b, token);
        self.done = self.out.generated.len() == how.n;
        Ok(())
    }
}

/// The logits of a step as rows of the vocabulary.
fn rows(out: StepOutput, vocab: usize) -> Vec<Vec<f32>> {
    out.logits.as_f32().unwrap_or_default().chunks(vocab).map(<[f32]>::to_vec).collect()
}

/// A bundle run by its host: a forward bundle steps whole sequences, any other one token of
/// each of its sequences a step.
impl Stepper for Host {
    type Error = HostError;

    fn stepping(&self) -> Stepping {
        match self.manifest().cut.mode {
            CutMode::Forward => Stepping::Forward,
            _ => Stepping::Decode { chunk: None },
        }
    }

    fn logits(&mut self, feed: Feed<'_>) -> Result<Vec<Vec<f32>>, HostError> {
        let vocab = self.vocab();
        let tokens = feed.tokens();
        if let Feed::Whole(_) = feed {
            // A forward bundle steps exactly its rows. Its layers are causal (a row reads only
            // the rows before it), so a shorter sequence padded with token 0 gives the
            // sequence's own rows exactly; the padding's rows are dropped.
            let mut padded = tokens.to_vec();
            padded.resize(tokens.len().max(self.rows()), 0);
            let mut all = rows(self.step(&padded, 0)?, vocab);
            all.truncate(tokens.len());
            return Ok(all);
        }
        Ok(rows(self.step(tokens, feed.pos())?, vocab))
    }
}

/// One sequence through a prefill bundle (its prompt's whole chunks) and a decode bundle.
impl Stepper for Session {
    type Error = HostError;

    fn stepping(&self) -> Stepping {
        Stepping::Decode { chunk: Some(self.chunk()) }
    }

    fn logits(&mut self, feed: Feed<'_>) -> Result<Vec<Vec<f32>>, HostError> {
        let vocab = self.decode_host().vocab();
        let out = match feed {
            Feed::Chunk(tokens, pos) => self.prefill(tokens, pos)?,
            Feed::Tokens(&[token], pos) => self.decode(token, pos)?,
            // A session decodes one sequence, one token a step.
            Feed::Tokens(tokens, _) | Feed::Whole(tokens) => {
                return Err(HostError::Rows { rows: 1, given: tokens.len() })
            }
        };
        Ok(rows(out, vocab))
    }
}
