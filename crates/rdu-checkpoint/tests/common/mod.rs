//! Shared test helpers.
pub mod gguf_writer;
