//! `GET /metrics`: Prometheus' text exposition format (version 0.0.4), written by hand — a few
//! gauges, counters and two histograms need no client library.

use std::collections::BTreeMap;
use std::fmt::Write;

/// Histogram bucket bounds, seconds.
const TTFT_BUCKETS: [f64; 12] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
const TPOT_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5];

#[derive(Clone, Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }

    fn observe(&mut self, v: f64) {
        for (c, &b) in self.counts.iter_mut().zip(self.bounds) {
            if v <= b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (c, b) in self.counts.iter().zip(self.bounds) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}",
            self.count, self.sum, self.count
        );
    }
}

/// Everything `/metrics` reports; the worker updates it after each step.
#[derive(Clone, Debug)]
pub struct Metrics {
    pub waiting: usize,
    pub running: usize,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub steps: u64,
    /// Steps run on a smaller batched bundle (`HostEngine::smaller_steps`).
    pub smaller_steps: u64,
    /// Finished requests by finish reason (`stop`, `length`, `cancelled`, `error`).
    pub finished: BTreeMap<&'static str, u64>,
    /// Refused requests by reason (`bad_request`, `queue_full`, `shutting_down`).
    pub refused: BTreeMap<&'static str, u64>,
    ttft: Histogram,
    tpot: Histogram,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            waiting: 0,
            running: 0,
            prompt_tokens: 0,
            generation_tokens: 0,
            steps: 0,
            smaller_steps: 0,
            finished: BTreeMap::new(),
            refused: BTreeMap::new(),
            ttft: Histogram::new(&TTFT_BUCKETS),
            tpot: Histogram::new(&TPOT_BUCKETS),
        }
    }
}

impl Metrics {
    pub fn observe_ttft(&mut self, seconds: f64) {
        self.ttft.observe(seconds);
    }

    pub fn observe_tpot(&mut self, seconds: f64) {
        self.tpot.observe(seconds);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut one = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        one("rdu_queue_depth", "gauge", "Requests waiting for a slot.", self.waiting.to_string());
        one("rdu_running_sequences", "gauge", "Sequences in slots of the batched step.", self.running.to_string());
        one(
            "rdu_prompt_tokens_total",
            "counter",
            "Prompt tokens of admitted requests.",
            self.prompt_tokens.to_string(),
        );
        one("rdu_generation_tokens_total", "counter", "Tokens generated.", self.generation_tokens.to_string());
        one("rdu_steps_total", "counter", "Scheduler steps run.", self.steps.to_string());
        one(
            "rdu_smaller_steps_total",
            "counter",
            "Steps whose live sequences ran on a smaller batched bundle than --batch.",
            self.smaller_steps.to_string(),
        );
        let mut labelled = |name: &str, help: &str, label: &str, map: &BTreeMap<&'static str, u64>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (k, v) in map {
                let _ = writeln!(out, "{name}{{{label}=\"{k}\"}} {v}");
            }
        };
        labelled("rdu_requests_finished_total", "Requests that ended, by finish reason.", "finish", &self.finished);
        labelled("rdu_requests_refused_total", "Requests refused, by reason.", "reason", &self.refused);
        self.ttft.write(&mut out, "rdu_time_to_first_token_seconds", "Arrival to first generated token.");
        self.tpot.write(
            &mut out,
            "rdu_time_per_output_token_seconds",
            "Mean time between a request's tokens after the first.",
        );
        out
    }
}
