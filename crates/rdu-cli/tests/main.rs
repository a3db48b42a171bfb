//! Every integration test of `rdu-cli`, one binary: each `tests/*.rs` is a module here
//! (one link instead of one per file, and libtest spreads all of them over the cores).

mod bad_input;
mod batched;
mod bf16_states;
mod cli;
mod cli_batched;
mod common;
mod gemma270m;
mod gguf_convert_spatial;
mod gguf_real;
mod gguf_spatial;
mod mtp;
mod plan;
mod prefill_conformance;
mod quantised;
mod quantised_ct;
mod report;
mod serve;
mod spatial_conformance;
mod speculative;
mod tp_cli;
mod tp_conformance;
mod verify_cli;
