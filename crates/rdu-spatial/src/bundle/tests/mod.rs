//! Bundle tests: a sample bundle, writing (determinism, atomicity, refusals) and validation.

mod docs;
mod sample;
mod validate;
mod write;
