//! Reference results shared between certifications that ask for the same one.
//!
//! The reference interpreter's result of one certification depends on nothing but the lifted
//! graph, the seeded inputs (the seed, and which tensors the program stores as Q8_0 blocks or
//! as stacked experts), the tie band, and — at near-ties only — the simulator's final bf16
//! states and route choices it is offered (`graph::eval_breaking_all_ties`). It does not
//! depend on the chip or on how the program was tiled. So the SN50 and SN40L programs of one
//! kind, and a tensor-parallel certification's unsplit program, are checked against one
//! reference result when these agree.
//!
//! Off unless [`share_references`] turns it on (`rdu-compiler`'s test binary does: it certifies
//! the same kinds for several chips and cuts), and then no key is even computed. A result is reused only when its key — a BLAKE3 digest
//! of the graph, the inputs' description, the seed and the band — is the same, and every
//! tie-breaker the first evaluation read (a state's or a route's values, by name, or that
//! there was none) hashes the same now: the reference is deterministic, so it would compute
//! the same values again. Results are kept up to a byte budget, the least recently used
//! dropped first.

use crate::graph::{EvalError, Evaluated};
use std::sync::{Arc, Mutex};

/// What the first evaluation read from a tie-breaker: which one, the name, and a digest of the
/// values offered (`None`: none were).
type Consulted = (Breaker, String, Option<blake3::Hash>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Breaker {
    State,
    Route,
}

struct Entry {
    key: blake3::Hash,
    consulted: Vec<Consulted>,
    result: Arc<Evaluated>,
    bytes: usize,
}

struct Memo {
    budget: usize,
    /// Most recently used last.
    entries: Vec<Entry>,
}

static MEMO: Mutex<Memo> = Mutex::new(Memo { budget: 0, entries: Vec::new() });

/// Keeps reference results of up to `budget_bytes` in all for reuse by later certifications in
/// this process (0, the default, keeps none and drops any kept).
pub fn share_references(budget_bytes: usize) {
    let mut memo = MEMO.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    memo.budget = budget_bytes;
    memo.evict();
}

impl Memo {
    fn evict(&mut self) {
        let mut used: usize = self.entries.iter().map(|e| e.bytes).sum();
        while used > self.budget {
            used -= self.entries.remove(0).bytes;
        }
    }
}

/// The digest identifying one reference evaluation up to its tie-breakers: `parts`, each
/// length-prefixed so that no two lists of parts hash alike by concatenation.
pub(super) fn key(parts: &[&[u8]]) -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(&(p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize()
}

/// A digest of a tie-breaker's values (their little-endian bytes, a run at a time).
fn digest<T: Copy, const N: usize>(values: &[T], bytes: fn(T) -> [u8; N]) -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    for run in values.chunks(1 << 12) {
        h.update(&run.iter().flat_map(|&v| bytes(v)).collect::<Vec<u8>>());
    }
    h.finalize()
}

fn digest_f32(values: &[f32]) -> blake3::Hash {
    digest(values, f32::to_le_bytes)
}

fn digest_i32(values: &[i32]) -> blake3::Hash {
    digest(values, i32::to_le_bytes)
}

fn bytes_of(result: &Evaluated) -> usize {
    // f32 and i32 values alike are 4 bytes.
    result.outputs.values().chain(result.states.values()).map(|t| t.len() * 4).sum()
}

/// A tie-breaker as the reference interpreter takes it: values by name.
pub(super) type Breaks<'b, 't, T> = &'b dyn Fn(&str) -> Option<&'t [T]>;

/// The reference result under `key` (computed only when sharing is on) and whether it was
/// reused: reused when `share` and sharing is on and it is kept, and every tie-breaker it read
/// offers the same values now; else computed by `evaluate` (given tie-breakers that record
/// what it reads) and kept when sharing is on.
pub(super) fn reference<'t>(
    key: impl FnOnce() -> blake3::Hash,
    share: bool,
    ties: Breaks<'_, 't, f32>,
    routes: Breaks<'_, 't, i32>,
    evaluate: impl FnOnce(Breaks<'_, 't, f32>, Breaks<'_, 't, i32>) -> Result<Evaluated, EvalError>,
) -> Result<(Arc<Evaluated>, bool), EvalError> {
    let offered = |(breaker, name, _): &Consulted| match breaker {
        Breaker::State => ties(name).map(digest_f32),
        Breaker::Route => routes(name).map(digest_i32),
    };
    let key = {
        let mut memo = MEMO.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if memo.budget == 0 || !share {
            drop(memo);
            return Ok((Arc::new(evaluate(ties, routes)?), false));
        }
        let key = key();
        let hit = memo.entries.iter().position(|e| e.key == key && e.consulted.iter().all(|c| offered(c) == c.2));
        if let Some(i) = hit {
            let entry = memo.entries.remove(i);
            let result = entry.result.clone();
            memo.entries.push(entry);
            return Ok((result, true));
        }
        key
    };
    let consulted = Mutex::new(Vec::<Consulted>::new());
    let note = |c: Consulted| {
        let mut seen = consulted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !seen.iter().any(|s| s.0 == c.0 && s.1 == c.1) {
            seen.push(c);
        }
    };
    let recording_ties = |name: &str| {
        let v = ties(name);
        note((Breaker::State, name.to_string(), v.map(digest_f32)));
        v
    };
    let recording_routes = |name: &str| {
        let v = routes(name);
        note((Breaker::Route, name.to_string(), v.map(digest_i32)));
        v
    };
    let result = Arc::new(evaluate(&recording_ties, &recording_routes)?);
    let consulted = consulted.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let bytes = bytes_of(&result);
    let mut memo = MEMO.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if bytes <= memo.budget {
        memo.entries.push(Entry { key, consulted, result: result.clone(), bytes });
        memo.evict();
    }
    Ok((result, false))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::graph::Tensor;
    use std::cell::Cell;
    use std::collections::BTreeMap;

    /// The budget every unit test that turns sharing on sets (they run side by side).
    pub(crate) const BUDGET: usize = 8 << 20;

    /// An evaluation that reads the tie-breaker `s` and returns what it offered (and counts
    /// itself): a stand-in for the reference interpreter.
    fn echo<'t>(
        calls: &Cell<usize>,
    ) -> impl FnOnce(Breaks<'_, 't, f32>, Breaks<'_, 't, i32>) -> Result<Evaluated, EvalError> + '_ {
        move |ties, _| {
            calls.set(calls.get() + 1);
            let s = ties("s").map(<[f32]>::to_vec).unwrap_or_default();
            let states = BTreeMap::from([("s".to_string(), Tensor::f32(vec![s.len()], s))]);
            Ok(Evaluated { outputs: BTreeMap::new(), states })
        }
    }

    /// A result is reused only under its key, when sharing is on and asked for, and when every
    /// tie-breaker the first evaluation read offers the same values; one past the budget is not
    /// kept. (Under keys no certification makes.)
    #[test]
    fn a_result_is_reused_only_under_its_key_and_the_same_tie_breakers() {
        share_references(BUDGET);
        let (k1, k2, k3) = (key(&[b"memo test", b"1"]), key(&[b"memo test", b"2"]), key(&[b"memo test", b"3"]));
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]), "parts are length-prefixed");
        let (a, b, big) = (vec![1.0f32, 2.0], vec![1.0f32, 2.5], vec![0.5f32; BUDGET / 4 + 1]);
        let (offer_a, offer_b) = (|n: &str| (n == "s").then_some(&a[..]), |n: &str| (n == "s").then_some(&b[..]));
        let offer_big = |n: &str| (n == "s").then_some(&big[..]);
        let none = |_: &str| None;
        let calls = Cell::new(0);
        fn evaluated<'t>(
            calls: &Cell<usize>,
            k: blake3::Hash,
            share: bool,
            ties: Breaks<'_, 't, f32>,
        ) -> (Vec<f32>, bool) {
            let no_routes = |_: &str| None::<&'t [i32]>;
            let (r, reused) = reference(|| k, share, ties, &no_routes, echo(calls)).expect("evaluates");
            (r.states["s"].as_f32().unwrap().to_vec(), reused)
        }
        let run = |k, share, ties: Breaks<'_, '_, f32>| evaluated(&calls, k, share, ties);
        assert_eq!(run(k1, true, &offer_a), (a.clone(), false));
        assert_eq!(run(k1, true, &offer_a), (a.clone(), true), "the same key and tie-breakers");
        assert_eq!(calls.get(), 1);
        assert_eq!(run(k1, true, &offer_b), (b.clone(), false), "other tie-breaker values");
        assert_eq!(run(k1, true, &none), (vec![], false), "no tie-breaker where one was read");
        assert_eq!(run(k2, true, &offer_a), (a.clone(), false), "another key");
        assert_eq!(run(k1, false, &offer_a), (a.clone(), false), "not asked to share");
        assert_eq!(calls.get(), 5);
        // Both results under `k1` are kept: each is found by its tie-breakers.
        assert_eq!(run(k1, true, &offer_b), (b.clone(), true));
        assert_eq!(run(k1, true, &offer_a), (a.clone(), true));
        // A result larger than the whole budget is computed and not kept.
        assert!(!run(k3, true, &offer_big).1);
        assert!(!run(k3, true, &offer_big).1);
        assert_eq!(calls.get(), 7);
    }
}
