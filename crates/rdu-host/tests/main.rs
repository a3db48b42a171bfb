//! Every integration test of `rdu-host`, one binary: each `tests/*.rs` is a module here
//! (one link instead of one per file, and libtest spreads all of them over the cores).

mod common;
mod errors;
mod generate;
mod prefill;
mod q8;
mod sample;
mod schedule;
mod speculate;
mod stack;
mod step;
mod tokenizer_bpe;
mod tokenizer_llamacpp;
mod tokenizer_spm;
