//! Every integration test of `rdu-compiler`, one binary: each `tests/*.rs` is a module here
//! (one link instead of one per file, and libtest spreads all of them over the cores).

// The real-shape certifications free gigabytes per kind: kept for reuse, not faulted in again.
rdu_testkit::keep_freed_memory!();

#[path = "support/tp.rs"]
mod support_tp;

mod batched;
mod bf16_states;
mod config;
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
mod prefill;
mod roofline;
mod schedule;
mod verify_mutants;
