//! Every integration test of `rdu-checkpoint`, one binary: each `tests/*.rs` is a module here
//! (one link instead of one per file, and libtest spreads all of them over the cores).

mod dequant;
mod fixtures;
mod gguf_read;
mod gguf_reject;
mod quantised;
mod safetensors;
