//! The scheduler in simulated time: requests arrive on a simulated clock, each planned step
//! takes the time a cost model gives it, every sampling point produces a token, and a request
//! ends after its output tokens. `rdu plan --workload` runs it with the cost model's step times
//! of each deployment; it is the same [`Scheduler`] `rdu serve` runs in real time.

use super::{Config, Event, Next, Request, Scheduler, Step, Timing};

/// One request of a workload: when it arrives, its prompt and output lengths.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arrival {
    pub at: f64,
    pub prompt: usize,
    pub output: usize,
}

/// What a simulated run produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Simulated {
    /// Every request that finished, in the order they finished.
    pub done: Vec<Timing>,
    /// Requests refused (a full queue, or a prompt longer than the context).
    pub refused: usize,
    /// The clock when the last request finished.
    pub end: f64,
    /// Steps run.
    pub steps: usize,
    /// The most requests that waited for a slot at once.
    pub max_waiting: usize,
}

impl Simulated {
    /// Generated tokens per second from the first arrival to the last finish.
    pub fn throughput(&self, start: f64) -> f64 {
        let tokens: usize = self.done.iter().map(|t| t.completion_tokens).sum();
        let span = self.end - start;
        if span > 0.0 {
            tokens as f64 / span
        } else {
            0.0
        }
    }
}

/// Runs `arrivals` (sorted by time) through a scheduler of `cfg`, each step taking
/// `step_seconds(step)` (which must be positive).
pub fn simulate(cfg: Config, arrivals: &[Arrival], step_seconds: &dyn Fn(&Step) -> f64) -> Result<Simulated, String> {
    let mut sched = Scheduler::new(cfg)?;
    let mut out = Simulated::default();
    let mut next = 0;
    let mut now = arrivals.first().map_or(0.0, |a| a.at);
    loop {
        while let Some(a) = arrivals.get(next).filter(|a| a.at <= now) {
            let req = Request { id: next as u64, prompt: vec![0; a.prompt], max_tokens: a.output.max(1) };
            if sched.submit(req, a.at).is_err() {
                out.refused += 1;
            }
            next += 1;
        }
        out.max_waiting = out.max_waiting.max(sched.waiting());
        let Some(step) = sched.plan(now) else {
            match arrivals.get(next) {
                // Idle until the next request arrives.
                Some(a) => {
                    now = now.max(a.at);
                    continue;
                }
                None => break,
            }
        };
        let seconds = step_seconds(&step);
        if !(seconds.is_finite() && seconds > 0.0) {
            return Err(format!("a step's time must be positive, the cost model gave {seconds}"));
        }
        now += seconds;
        out.steps += 1;
        let outcomes = vec![Next::Token(0); step.points()];
        for event in sched.complete(&step, &outcomes, now) {
            if let Event::Done { timing, .. } = event {
                out.end = now;
                out.done.push(timing);
            }
        }
    }
    Ok(out)
}

/// `n` requests arriving as a Poisson process of `rate` a second (exponential gaps drawn from
/// a SplitMix64 stream seeded with `seed`), each of `prompt` and `output` tokens.
pub fn poisson(rate: f64, n: usize, prompt: usize, output: usize, seed: u64) -> Vec<Arrival> {
    let mut state = seed;
    let mut at = 0.0;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            // Uniform in (0, 1]: never 0, so the logarithm is finite.
            let u = ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
            let arrival = Arrival { at, prompt, output };
            at += -u.ln() / rate;
            arrival
        })
        .collect()
}
