//! Continuous batching: requests arrive, wait, are admitted to the free slots of a batched
//! deployment, prefill in whole chunks interleaved with the running sequences' decode rows
//! under a per-step token budget, generate, stop, and leave.
//!
//! The [`Scheduler`] is a state machine with no clock and no engine: the caller passes the time
//! (`now`, seconds on any clock) to [`Scheduler::submit`], [`Scheduler::plan`] and
//! [`Scheduler::complete`], runs each planned [`Step`] however it likes, and reports what the
//! step produced at each of its sampling points. `rdu serve` runs the steps on the host
//! ([`HostEngine`], wall-clock time); `rdu plan --workload` runs the same scheduler with step
//! times from the cost model (simulated time).
//!
//! A step is, in order: the slots to reset (newly admitted; those starting with chunks have their
//! states set aside for the prefill bundle, [`Step::parks`]), the prefill chunks (each a whole
//! chunk of one sequence's prompt through the prefill bundle; a slot may take several), and
//! one batched decode step — one row per slot: the next prompt token of a sequence whose
//! prompt's whole chunks are done (the tail shorter than a chunk, as `rdu run` feeds it), the
//! last generated token of a decoding sequence, or a throwaway row of an idle or prefilling
//! slot. The budget counts a token per decoding row and `chunk` per prefill chunk; decoding rows
//! always run (the batched step computes every row anyway), chunks take what is left, oldest
//! request first.

mod engine;
mod simulate;
mod stats;

pub use engine::{prefilling, HostEngine, Logits, PREFILLING};
pub use simulate::{poisson, simulate, Arrival, Simulated};
pub use stats::{percentile, Timing};

use std::collections::VecDeque;

/// A request's id, chosen by the caller (unique among live requests).
pub type Id = u64;

/// The deployment the scheduler fills and its limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Sequences a decode step holds (the batched bundle's batch).
    pub slots: usize,
    /// Positions each slot holds (the bundles' ctx).
    pub ctx: usize,
    /// Rows of a prefill chunk; `None` feeds every prompt a token a step through the decode rows.
    pub chunk: Option<usize>,
    /// Tokens a step may process: one per decoding row, `chunk` per prefill chunk.
    pub budget: usize,
    /// Requests that may wait for a slot; more are refused.
    pub queue: usize,
    /// Sequences that may be in their chunk phase at once (each holds a store of states beside
    /// the batched step's); a request that would start with chunks waits for one to finish.
    pub prefilling: usize,
}

impl Config {
    /// Refuses a configuration that cannot make progress, naming the field.
    pub fn check(&self) -> Result<(), String> {
        if self.slots == 0 {
            return Err("slots must be at least 1".into());
        }
        if self.ctx == 0 {
            return Err("ctx must be at least 1".into());
        }
        if let Some(c) = self.chunk {
            if self.prefilling == 0 {
                return Err("prefilling must be at least 1 when prompts are prefilled in chunks".into());
            }
            if c == 0 || c > self.ctx {
                return Err(format!("chunk {c} must be between 1 and the ctx ({})", self.ctx));
            }
            if self.budget < c + self.slots {
                return Err(format!(
                    "a step's token budget {} must hold a chunk ({c}) beside every decoding row ({}), at least {}",
                    self.budget,
                    self.slots,
                    c + self.slots
                ));
            }
        }
        Ok(())
    }
}

/// Why a request was not queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The queue holds `queue` requests already.
    QueueFull { queue: usize },
    /// The prompt has no tokens.
    EmptyPrompt,
    /// The prompt needs more positions than a slot holds.
    TooLong { prompt: usize, ctx: usize },
    /// `max_tokens` is 0.
    NothingToGenerate,
    /// The id is already live.
    DuplicateId,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::QueueFull { queue } => {
                write!(f, "the queue is full ({queue} requests wait for a slot); retry later")
            }
            Refusal::EmptyPrompt => write!(f, "the prompt has no tokens"),
            Refusal::TooLong { prompt, ctx } => {
                write!(f, "the prompt has {prompt} tokens but the context holds {ctx}; shorten it")
            }
            Refusal::NothingToGenerate => write!(f, "max_tokens must be at least 1"),
            Refusal::DuplicateId => write!(f, "a request with this id is already running"),
        }
    }
}

/// One prefill chunk of a step: `tokens` at positions `pos..pos + tokens.len()` of `slot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub slot: usize,
    pub id: Id,
    pub tokens: Vec<u32>,
    pub pos: usize,
    /// The sequence's first chunk.
    pub first: bool,
    /// The sequence's last whole chunk: its states go back to the decode rows after it.
    pub last: bool,
    /// The chunk ends the prompt: its logits row is sampled.
    pub samples: bool,
}

/// One row of the batched decode step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub token: u32,
    pub pos: usize,
    /// The request the row feeds; `None` for a throwaway row (idle or prefilling slot).
    pub id: Option<Id>,
    /// The row's logits are sampled (it fed the sequence's last token so far).
    pub samples: bool,
}

/// What one step runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Slots that start a new sequence: zero their states first.
    pub resets: Vec<usize>,
    /// Of `resets`, the slots whose sequences start with prefill chunks: their states leave the
    /// decode rows until their last chunk (the throwaway rows they step meanwhile must not
    /// write into them — a recurrent state would take the throwaway token in).
    pub parks: Vec<usize>,
    /// Prefill chunks, run before the decode step, in order.
    pub chunks: Vec<Chunk>,
    /// The decode step's rows, one per slot; empty when no sequence decodes (no batched step).
    pub rows: Vec<Row>,
}

impl Step {
    /// The sampling points in the order [`Scheduler::complete`] takes their outcomes: every
    /// sampled chunk, then every sampled row.
    pub fn points(&self) -> usize {
        self.chunks.iter().filter(|c| c.samples).count() + self.rows.iter().filter(|r| r.samples).count()
    }

    /// Tokens the step processes: the chunks' and the decode rows of live sequences.
    pub fn tokens(&self) -> usize {
        self.chunks.iter().map(|c| c.tokens.len()).sum::<usize>() + self.rows.iter().filter(|r| r.id.is_some()).count()
    }
}

/// What the caller made of a sampling point's logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Keep generating after `token`.
    Token(u32),
    /// `token` is the last one (a stop string ended with it).
    Last(u32),
    /// An end-of-sequence token: nothing kept, the sequence ends.
    End,
}

/// Why a sequence ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
    /// [`Scheduler::cancel`]: the client went away.
    Cancelled,
}

/// What [`Scheduler::complete`] reports.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A request took a slot.
    Admitted { id: Id, slot: usize },
    /// A request generated `token`.
    Token { id: Id, token: u32 },
    /// A request ended.
    Done { id: Id, finish: Finish, timing: Timing },
}

/// A request as it is submitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: Id,
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
}

/// Where a running sequence is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Whole prompt chunks through the prefill bundle; `fed` prompt tokens so far.
    Chunks { fed: usize },
    /// Prompt tokens and then generated tokens through the decode rows; `fed` tokens so far.
    Rows { fed: usize },
}

/// A sequence in a slot.
#[derive(Clone, Debug)]
struct Running {
    req: Request,
    generated: Vec<u32>,
    phase: Phase,
    timing: Timing,
    /// Admission order (chunks go to the oldest first).
    order: u64,
}

/// The continuous-batching state machine (see the module documentation).
#[derive(Debug)]
pub struct Scheduler {
    cfg: Config,
    queue: VecDeque<(Request, f64)>,
    slots: Vec<Option<Running>>,
    cancelled: Vec<Id>,
    admitted: u64,
    /// Events produced while planning (admissions, cancellations), handed out by `complete`.
    pending: Vec<Event>,
}

impl Scheduler {
    pub fn new(cfg: Config) -> Result<Scheduler, String> {
        cfg.check()?;
        Ok(Scheduler {
            cfg,
            queue: VecDeque::new(),
            slots: vec![None; cfg.slots],
            cancelled: Vec::new(),
            admitted: 0,
            pending: Vec::new(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Queues `req` (arrived at `now`), or says why not.
    pub fn submit(&mut self, req: Request, now: f64) -> Result<(), Refusal> {
        if req.prompt.is_empty() {
            return Err(Refusal::EmptyPrompt);
        }
        if req.prompt.len() > self.cfg.ctx {
            return Err(Refusal::TooLong { prompt: req.prompt.len(), ctx: self.cfg.ctx });
        }
        if req.max_tokens == 0 {
            return Err(Refusal::NothingToGenerate);
        }
        if self.is_live(req.id) {
            return Err(Refusal::DuplicateId);
        }
        if self.queue.len() >= self.cfg.queue {
            return Err(Refusal::QueueFull { queue: self.cfg.queue });
        }
        self.queue.push_back((req, now));
        Ok(())
    }

    /// Ends request `id` (waiting or running) at the next [`Scheduler::plan`]: its slot is free
    /// for that step.
    pub fn cancel(&mut self, id: Id) {
        self.cancelled.push(id);
    }

    fn is_live(&self, id: Id) -> bool {
        self.queue.iter().any(|(r, _)| r.id == id) || self.slots.iter().flatten().any(|s| s.req.id == id)
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Sequences in slots.
    pub fn running(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// The requests in slots, by slot.
    pub fn running_ids(&self) -> Vec<Id> {
        self.slots.iter().flatten().map(|s| s.req.id).collect()
    }

    /// Whether nothing waits or runs.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.running() == 0
    }

    /// The next step at `now`: cancellations applied, waiting requests admitted to free slots,
    /// chunks and rows chosen under the budget. `None` when nothing runs.
    pub fn plan(&mut self, now: f64) -> Option<Step> {
        self.apply_cancellations(now);
        let mut step = Step::default();
        self.admit(now, &mut step);
        // Decode rows first: every sequence in its row phase feeds one token.
        let decoding = self.slots.iter().flatten().filter(|s| matches!(s.phase, Phase::Rows { .. })).count();
        let mut left = self.cfg.budget.saturating_sub(decoding);
        self.plan_chunks(&mut left, &mut step);
        if decoding > 0 {
            step.rows = self.slots.iter().map(row_of).collect();
        }
        (!step.chunks.is_empty() || !step.rows.is_empty()).then_some(step)
    }

    fn apply_cancellations(&mut self, now: f64) {
        for id in std::mem::take(&mut self.cancelled) {
            if let Some(at) = self.queue.iter().position(|(r, _)| r.id == id) {
                let (req, arrived) = self.queue.remove(at).expect("a position found above");
                let timing = Timing::queued(arrived, req.prompt.len());
                self.pending.push(Event::Done { id, finish: Finish::Cancelled, timing: timing.ended(now) });
            }
            for slot in &mut self.slots {
                if slot.as_ref().is_some_and(|s| s.req.id == id) {
                    let s = slot.take().expect("checked above");
                    self.pending.push(Event::Done { id, finish: Finish::Cancelled, timing: s.timing.ended(now) });
                }
            }
        }
    }

    /// Free slots take waiting requests, oldest first; one that starts with chunks waits while
    /// `prefilling` sequences are in their chunk phase.
    fn admit(&mut self, now: f64, step: &mut Step) {
        let mut prefilling = self.slots.iter().flatten().filter(|s| matches!(s.phase, Phase::Chunks { .. })).count();
        for (b, slot) in self.slots.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            let Some((req, _)) = self.queue.front() else { break };
            let whole = self.cfg.chunk.is_some_and(|c| req.prompt.len() >= c);
            if whole && prefilling >= self.cfg.prefilling {
                break;
            }
            prefilling += usize::from(whole);
            let Some((req, arrived)) = self.queue.pop_front() else { break };
            let phase = if whole { Phase::Chunks { fed: 0 } } else { Phase::Rows { fed: 0 } };
            let mut timing = Timing::queued(arrived, req.prompt.len());
            timing.admitted = Some(now);
            self.pending.push(Event::Admitted { id: req.id, slot: b });
            self.admitted += 1;
            *slot = Some(Running { req, generated: Vec::new(), phase, timing, order: self.admitted });
            step.resets.push(b);
            if whole {
                step.parks.push(b);
            }
        }
    }

    /// Whole chunks for the sequences still in their chunk phase, oldest first, while `left`
    /// holds a chunk.
    fn plan_chunks(&mut self, left: &mut usize, step: &mut Step) {
        let Some(c) = self.cfg.chunk else { return };
        let mut order: Vec<(u64, usize)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(b, s)| s.as_ref().filter(|s| matches!(s.phase, Phase::Chunks { .. })).map(|s| (s.order, b)))
            .collect();
        order.sort_unstable();
        for (_, b) in order {
            let Some(s) = self.slots[b].as_mut() else { continue };
            let Phase::Chunks { mut fed } = s.phase else { continue };
            let whole = s.req.prompt.len() / c * c;
            while *left >= c && fed < whole {
                let last = fed + c == whole;
                step.chunks.push(Chunk {
                    slot: b,
                    id: s.req.id,
                    tokens: s.req.prompt[fed..fed + c].to_vec(),
                    pos: fed,
                    first: fed == 0,
                    last,
                    samples: fed + c == s.req.prompt.len(),
                });
                fed += c;
                *left -= c;
            }
            s.phase = Phase::Chunks { fed };
        }
    }

    /// Takes the outcome of each of `step`'s sampling points (in [`Step::points`] order), at
    /// `now` (when the step ended): the sequences advance, finished ones leave their slots.
    pub fn complete(&mut self, step: &Step, outcomes: &[Next], now: f64) -> Vec<Event> {
        let mut events = std::mem::take(&mut self.pending);
        let mut outcomes = outcomes.iter().copied();
        for chunk in &step.chunks {
            let Some(s) = self.slots[chunk.slot].as_mut().filter(|s| s.req.id == chunk.id) else { continue };
            if chunk.last {
                s.phase = Phase::Rows { fed: chunk.pos + chunk.tokens.len() };
            }
            if chunk.samples {
                let next = outcomes.next().unwrap_or(Next::End);
                self.advance(chunk.slot, next, now, &mut events);
            }
        }
        for (b, row) in step.rows.iter().enumerate() {
            let Some(s) = self.slots[b].as_mut().filter(|s| Some(s.req.id) == row.id) else { continue };
            if let Phase::Rows { fed } = &mut s.phase {
                *fed += 1;
            }
            if row.samples {
                let next = outcomes.next().unwrap_or(Next::End);
                self.advance(b, next, now, &mut events);
            }
        }
        events
    }

    /// Slot `b`'s sequence takes `next`; it leaves on a stop, at `max_tokens`, or when the
    /// context is full.
    fn advance(&mut self, b: usize, next: Next, now: f64, events: &mut Vec<Event>) {
        let Some(s) = self.slots[b].as_mut() else { return };
        let id = s.req.id;
        let (token, mut finish) = match next {
            Next::Token(t) => (Some(t), None),
            Next::Last(t) => (Some(t), Some(Finish::Stop)),
            Next::End => (None, Some(Finish::Stop)),
        };
        if let Some(t) = token {
            s.generated.push(t);
            s.timing.token(now);
            events.push(Event::Token { id, token: t });
            // The last token is never fed: the context is full when every position holds one.
            let full = s.req.prompt.len() + s.generated.len() > self.cfg.ctx;
            if finish.is_none() && (s.generated.len() >= s.req.max_tokens || full) {
                finish = Some(Finish::Length);
            }
        }
        if let Some(finish) = finish {
            let timing = s.timing.clone().ended(now);
            self.slots[b] = None;
            events.push(Event::Done { id, finish, timing });
        }
    }
}

/// The decode row of a slot: its next token at its next position, or a throwaway row.
fn row_of(slot: &Option<Running>) -> Row {
    let idle = Row { token: 0, pos: 0, id: None, samples: false };
    let Some(s) = slot else { return idle };
    let Phase::Rows { fed } = s.phase else { return idle };
    let prompt = &s.req.prompt;
    let token = prompt.get(fed).or_else(|| s.generated.get(fed - prompt.len())).copied();
    match token {
        Some(token) => Row { token, pos: fed, id: Some(s.req.id), samples: fed + 1 >= prompt.len() },
        None => idle,
    }
}
