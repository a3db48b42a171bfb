//! The host runtime: loads a bundle and a checkpoint, holds KV caches and carried state,
//! steps the model through the simulator and samples.
//!
//! Architecture invariant: this crate never depends on `rdu-compiler` — a bundle plus a
//! checkpoint is enough to run.
//!
//! Codemap, in the order a step's data flows: [`weights`] (checkpoint → dense or Q8_0
//! tensors), `assemble` (stack and slice), [`shared`] (RoPE tables), [`states`] (carried
//! state), `check` (load-time binding checks), `plan` (a step's inputs and limits), `env`
//! (a program's view of the host), `tensor_parallel` (chips' slices and threads), [`host`] (load and step), [`session`] (a prefill and a decode
//! bundle over one sequence's states), [`sample`] (next token), [`tokenizer`]
//! (text ↔ ids), [`schedule`] (continuous batching: the scheduler and
//! its host engine).

mod assemble;
mod check;
mod env;
mod error;
pub mod generate;
pub mod host;
mod plan;
pub mod sample;
pub mod schedule;
pub mod session;
pub mod shared;
pub mod speculate;
pub mod states;
mod tensor_parallel;
pub mod tokenizer;
pub mod weights;

pub use error::{HostError, Result};
pub use generate::{generate, Feed, Generate, Generated, Observer, Stepper, Stepping};
pub use host::{Host, StepOutput};
pub use sample::{greedy, Sampler, Sampling};
pub use session::Session;
pub use speculate::{speculate, Speculation};
pub use states::States;
pub use tokenizer::{StreamDecoder, Tokenizer};
pub use weights::{Packed, Progress, Weights, WeightsSource};
