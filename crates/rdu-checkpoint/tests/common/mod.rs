//! Shared test helpers: an in-memory GGUF writer and the fuzzing kit.
pub mod fuzz;
pub mod gguf_writer;
