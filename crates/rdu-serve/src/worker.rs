//! The engine loop: takes requests from the HTTP side, runs the scheduler's steps on the host
//! engine in real time, samples each request's tokens, finds its stops, and sends its text back
//! on the request's own channel. A request whose channel has closed (the client went away) is
//! cancelled before the next step, so its slot is free for that step.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use rayon::prelude::*;
use rdu_host::schedule::{Event, Finish, HostEngine, Logits, Next, Request, Scheduler, Step, Timing};
use rdu_host::{Sampler, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

use crate::api::{ApiError, Generation};
use crate::text::TextStream;
use crate::Shared;

/// A checked request on its way to the worker.
pub struct Job {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub generation: Generation,
    /// Seconds since the server started.
    pub arrived: f64,
    pub out: UnboundedSender<Out>,
}

/// What the worker sends back on a request's channel.
#[derive(Clone, Debug, PartialEq)]
pub enum Out {
    /// New text (possibly empty while a stop string or a character is incomplete) and the token.
    Delta { text: String, token: Option<u32> },
    /// The end: `stop` or `length`, and the usage counts.
    Done { finish: &'static str, prompt_tokens: usize, completion_tokens: usize },
    /// The request failed after it was accepted.
    Failed(ApiError),
}

/// Each sampling point's token, drawn by its request's sampler from the point's logits row
/// (`None` for a throwaway point, a request no longer live, or a row the step did not give):
/// the points in parallel, as each request draws from its own sampler once a step (16 greedy
/// rows of Gemma 3's 262,144 logits took about 2 ms one after another). Should a request ever
/// have two points in one step, they are drawn one after another, in order.
fn sample_all(
    ids: &[Option<u64>],
    logits: &Logits,
    live: &mut BTreeMap<u64, Live>,
) -> Vec<Option<rdu_host::Result<u32>>> {
    let row = |i: usize| (i < logits.len()).then(|| logits.row(i));
    let mut seen = std::collections::BTreeSet::new();
    if !ids.iter().flatten().all(|&id| seen.insert(id)) {
        let draw = |(i, id): (usize, &Option<u64>)| {
            let l = id.and_then(|id| live.get_mut(&id))?;
            Some(l.sampler.sample(row(i)?))
        };
        return ids.iter().enumerate().map(draw).collect();
    }
    let mut samplers: BTreeMap<u64, &mut Sampler> = live.iter_mut().map(|(&id, l)| (id, &mut l.sampler)).collect();
    let draws: Vec<(Option<&mut Sampler>, Option<&[f32]>)> =
        ids.iter().enumerate().map(|(i, id)| (id.and_then(|id| samplers.remove(&id)), row(i))).collect();
    draws.into_par_iter().map(|(sampler, row)| Some(sampler?.sample(row?))).collect()
}

/// A request the worker is generating.
struct Live {
    sampler: Sampler,
    text: TextStream,
    out: UnboundedSender<Out>,
}

/// The worker's parts.
pub struct Worker {
    pub engine: HostEngine,
    pub sched: Scheduler,
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// Ids that end a sequence (not kept).
    pub eos: Vec<u32>,
    pub shared: Arc<Shared>,
}

impl Worker {
    /// Runs until `jobs` is closed (the HTTP side has shut down) and nothing waits or runs.
    pub fn run(mut self, jobs: Receiver<Job>) {
        let mut live: BTreeMap<u64, Live> = BTreeMap::new();
        let mut open = true;
        loop {
            if self.sched.is_idle() {
                if !open {
                    return;
                }
                match jobs.recv_timeout(Duration::from_millis(50)) {
                    Ok(job) => self.accept(job, &mut live),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            loop {
                match jobs.try_recv() {
                    Ok(job) => self.accept(job, &mut live),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            for (&id, l) in &live {
                if l.out.is_closed() {
                    self.sched.cancel(id);
                }
            }
            let now = self.shared.now();
            if let Some(step) = self.sched.plan(now) {
                self.step(&step, &mut live);
            } else {
                // Only cancellations happened: hand out their events.
                let events = self.sched.complete(&Step::default(), &[], now);
                self.dispatch(events, &mut live);
            }
        }
    }

    /// Queues `job`, or refuses it on its channel.
    fn accept(&mut self, job: Job, live: &mut BTreeMap<u64, Live>) {
        let max_tokens = job.generation.max_tokens.unwrap_or(usize::MAX);
        let req = Request { id: job.id, prompt: job.prompt, max_tokens };
        let sampler = Sampler::new(job.generation.sampling);
        let queued = sampler.map_err(|e| ApiError::invalid(None, e.to_string())).and_then(|sampler| {
            self.sched
                .submit(req, job.arrived)
                .map(|()| sampler)
                .map_err(|r| ApiError::invalid(Some("prompt"), r.to_string()))
        });
        match queued {
            Ok(sampler) => {
                live.insert(job.id, Live { sampler, text: TextStream::new(job.generation.stop), out: job.out });
            }
            Err(e) => {
                self.shared.queued.fetch_sub(1, Ordering::SeqCst);
                let _ = job.out.send(Out::Failed(e));
            }
        }
    }

    /// Runs `step` on the engine, samples, advances the scheduler and sends what came out. A
    /// failed (or panicking) step fails every running request and resets the engine; the
    /// server goes on.
    fn step(&mut self, step: &Step, live: &mut BTreeMap<u64, Live>) {
        let ran = catch_unwind(AssertUnwindSafe(|| self.engine.run(step)));
        let logits = match ran {
            Ok(Ok(logits)) => logits,
            Ok(Err(e)) => return self.fail_all(step, &e.to_string(), live),
            Err(_) => return self.fail_all(step, "the engine panicked", live),
        };
        let ids = step.chunks.iter().filter(|c| c.samples).map(|c| Some(c.id));
        let ids: Vec<Option<u64>> = ids.chain(step.rows.iter().filter(|r| r.samples).map(|r| r.id)).collect();
        let tokens = sample_all(&ids, &logits, live);
        let outcomes: Vec<Next> = ids.iter().zip(tokens).map(|(&id, token)| self.next(id, token, live)).collect();
        let events = self.sched.complete(step, &outcomes, self.shared.now());
        let mut m = self.shared.metrics();
        m.steps += 1;
        m.smaller_steps = self.engine.smaller_steps();
        drop(m);
        self.dispatch(events, live);
    }

    /// Request `id`'s next token, as sampled from its logits row: its text sent, and whether it
    /// ends the request (an end-of-sequence id, a stop string).
    fn next(&self, id: Option<u64>, token: Option<rdu_host::Result<u32>>, live: &mut BTreeMap<u64, Live>) -> Next {
        let Some((id, l)) = id.and_then(|id| live.get_mut(&id).map(|l| (id, l))) else { return Next::End };
        let token = match token {
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                let _ = l.out.send(Out::Failed(ApiError::server(e.to_string())));
                live.remove(&id);
                return Next::End;
            }
            None => return Next::End,
        };
        if self.eos.contains(&token) {
            return Next::End;
        }
        let (text, stopped) = l.text.push(self.tokenizer.as_deref(), token);
        let _ = l.out.send(Out::Delta { text, token: Some(token) });
        if stopped {
            Next::Last(token)
        } else {
            Next::Token(token)
        }
    }

    /// Hands the scheduler's events to their requests and the metrics.
    fn dispatch(&mut self, events: Vec<Event>, live: &mut BTreeMap<u64, Live>) {
        let mut m = self.shared.metrics();
        for event in events {
            match event {
                Event::Admitted { .. } => {
                    self.shared.queued.fetch_sub(1, Ordering::SeqCst);
                }
                Event::Token { .. } => m.generation_tokens += 1,
                Event::Done { id, finish, timing } => {
                    if timing.admitted.is_none() {
                        self.shared.queued.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        m.prompt_tokens += timing.prompt_tokens as u64;
                    }
                    let word = finish_word(finish);
                    *m.finished.entry(word).or_default() += 1;
                    observe(&mut m, &timing);
                    if let Some(mut l) = live.remove(&id) {
                        let tail = l.text.finish();
                        if !tail.is_empty() {
                            // The held-back text: no new token comes with it.
                            let _ = l.out.send(Out::Delta { text: tail, token: None });
                        }
                        let (prompt_tokens, completion_tokens) = (timing.prompt_tokens, timing.completion_tokens);
                        let _ = l.out.send(Out::Done { finish: word, prompt_tokens, completion_tokens });
                    }
                }
            }
        }
        m.waiting = self.sched.waiting();
        m.running = self.sched.running();
    }

    /// Fails every running request when a step could not run, and starts the engine over
    /// (waiting requests stay queued).
    fn fail_all(&mut self, step: &Step, problem: &str, live: &mut BTreeMap<u64, Live>) {
        for id in self.sched.running_ids() {
            self.sched.cancel(id);
            if let Some(l) = live.remove(&id) {
                let _ = l.out.send(Out::Failed(ApiError::server(format!("the step failed: {problem}"))));
            }
        }
        self.engine.recover();
        let ends = vec![Next::End; step.points()];
        let events = self.sched.complete(step, &ends, self.shared.now());
        self.dispatch(events, live);
        *self.shared.metrics().finished.entry("error").or_default() += 1;
        eprintln!("rdu serve: a step failed ({problem}); its requests failed, the engine was reset");
    }
}

fn finish_word(finish: Finish) -> &'static str {
    match finish {
        Finish::Stop => "stop",
        Finish::Length => "length",
        Finish::Cancelled => "cancelled",
    }
}

fn observe(m: &mut crate::metrics::Metrics, timing: &Timing) {
    if let Some(t) = timing.ttft() {
        m.observe_ttft(t);
    }
    if let Some(t) = timing.tpot() {
        m.observe_tpot(t);
    }
}
