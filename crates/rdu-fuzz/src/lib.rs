//! Mutational fuzzing of every parser rdu reads, on stable Rust and deterministic (a seed gives
//! the same inputs): program text, spatial text, `manifest.json`, `config.json`, chip TOML,
//! safetensors, GGUF and `tokenizer.json` ([`targets::NAMES`]).
//!
//! Each input is a file of the seed corpus (`tests/data/fuzz/<target>/`) with 1–8 mutations
//! ([`mutate`]): byte-level, token- and line-level for text, node-level for JSON. The harness
//! ([`harness::run`]) runs it under `catch_unwind` (a panic is a failure, its input written to a
//! file), with the allocation guard armed ([`guard`]: an allocation an input's declared sizes
//! drive past a limit is a failure) and a watchdog (an input over the time limit is a hang).
//! `cargo run --release -p rdu-fuzz -- all 1000000` runs every target; `tests/props.rs` runs a few
//! thousand inputs of each in the ordinary test suite.

pub mod guard;
pub mod harness;
pub mod mutate;
pub mod rng;
pub mod targets;
