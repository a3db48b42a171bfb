//! Every integration test of `rdu-compiler`, one binary: each `tests/*.rs` is a module here
//! (one link instead of one per file, and libtest spreads all of them over the cores).

// The real-shape certifications free gigabytes per kind: kept for reuse, not faulted in again.
rdu_testkit::keep_freed_memory!();

#[path = "support/tp.rs"]
mod support_tp;

/// Held by each full-chunk prefill certification of a real preset, so that no two of them run at
/// once: each already spreads its work over every core, and two side by side fought over the
/// caches and memory (deepseek-v2's took 38 s alone and 100 s beside another). Lighter tests
/// still run beside one.
pub fn one_heavy_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A panicking holder poisons the lock; the next test still runs (and reports its own result).
    HEAVY.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Turns on sharing of reference results between certifications ([`rdu_compiler::certify::share_references`]):
/// the suites certify one kind for SN50 and SN40L, and over one chip and eight. Called by every
/// helper that lowers a real preset; the first call sets the budget.
pub fn share_references() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| rdu_compiler::certify::share_references(REFERENCE_BUDGET));
}

/// Bytes of reference results kept for reuse (`share_references`). A whole run stores about
/// 3.6 GiB of them; at 512 MiB llama-3.1-8b's prefill result was gone (560 MiB stored since) by
/// the time its 8-chip prefill certification asked for it, at 1 GiB it is there (18 more
/// reuses, 618 in all). Peak RSS of the binary 5.2 GB before, 5.6 GB after.
const REFERENCE_BUDGET: usize = 1 << 30;

mod batched;
mod beyond_hbm;
mod bf16_states;
mod config;
mod config_v3;
mod conformance;
mod estimate;
mod gguf;
mod gguf_convert;
mod graph_props;
mod kinds;
mod lang;
mod lift;
mod lift_errors;
mod lift_props;
mod lower;
mod lower_tp;
mod mtp;
mod prefill;
mod roofline;
mod schedule;
mod verify_cut;
mod verify_mutants;
