//! A request's times (on the scheduler's clock) and the latencies read off them.

/// When a request arrived, took a slot, produced its first and last tokens, and ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timing {
    pub arrived: f64,
    pub admitted: Option<f64>,
    pub first_token: Option<f64>,
    pub last_token: Option<f64>,
    pub finished: f64,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
}

impl Timing {
    pub(crate) fn queued(arrived: f64, prompt_tokens: usize) -> Timing {
        Timing { arrived, prompt_tokens, ..Timing::default() }
    }

    /// A token was produced at `now`.
    pub(crate) fn token(&mut self, now: f64) {
        self.first_token.get_or_insert(now);
        self.last_token = Some(now);
        self.completion_tokens += 1;
    }

    pub(crate) fn ended(mut self, now: f64) -> Timing {
        self.finished = now;
        self
    }

    /// Time to first token: arrival to the first generated token.
    pub fn ttft(&self) -> Option<f64> {
        self.first_token.map(|t| t - self.arrived)
    }

    /// Time per output token after the first: (last − first) / (tokens − 1); `None` for fewer
    /// than two tokens.
    pub fn tpot(&self) -> Option<f64> {
        match (self.first_token, self.last_token) {
            (Some(first), Some(last)) if self.completion_tokens > 1 => {
                Some((last - first) / (self.completion_tokens - 1) as f64)
            }
            _ => None,
        }
    }

    /// Time spent waiting for a slot.
    pub fn queued_for(&self) -> Option<f64> {
        self.admitted.map(|t| t - self.arrived)
    }
}

/// The `p`-th percentile (0–100) of `values` by the nearest-rank method (the smallest value with
/// at least `p`% of the values at or below it); `None` when empty. NaNs sort last.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}
