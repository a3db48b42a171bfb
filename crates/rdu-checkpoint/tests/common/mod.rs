//! Shared test helpers: the fuzzing kit (the GGUF writer is `rdu_testkit::gguf_writer`).
pub mod fuzz;
