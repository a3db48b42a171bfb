//! The host runtime: loads a bundle and a checkpoint, holds KV caches and carried state,
//! steps the model through the simulator, samples and tokenizes.
//!
//! Architecture invariant: this crate never depends on `rdu-compiler` — a bundle plus a
//! checkpoint is enough to run.
