//! Mutation fuzzer for the GGUF and safetensors readers on stable Rust: `cargo run --release --example fuzz_gguf -- [N] [SEED]`.

#[path = "../tests/common/mod.rs"]
mod common;

use common::fuzz::{apply, exercise_gguf, exercise_safetensors, safetensors_seed, seeds, XorShift};
use rdu_checkpoint::Gguf;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(10_000, |a| a.parse().expect("N must be a number"));
    let seed: u64 = args.next().map_or(0x5EED, |a| a.parse().expect("SEED must be a number"));
    let mut inputs = seeds();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fixtures/gguf");
    for file in ["llama/tiny-llama-q8_0.gguf", "gemma3/tiny-gemma3-q8_0.gguf"] {
        if let Ok(bytes) = std::fs::read(fixtures.join(file)) {
            inputs.push(bytes);
        }
    }
    let header_lens: Vec<u64> =
        inputs.iter().map(|b| Gguf::from_bytes("seed", b.clone()).expect("seed must be valid").data_start()).collect();
    let st_seed = safetensors_seed();
    let mut rng = XorShift(seed);
    let (mut opened, mut st_opened) = (0u64, 0u64);
    for i in 0..n {
        let which = (rng.next() % inputs.len() as u64) as usize;
        let n_mutations = 1 + rng.next() % 6;
        let mutations: Vec<_> = (0..n_mutations).map(|_| rng.mutation(header_lens[which])).collect();
        let bytes = apply(inputs[which].clone(), &mutations);
        let st_mutations: Vec<_> = (0..n_mutations).map(|_| rng.mutation(120)).collect();
        let st_bytes = apply(st_seed.clone(), &st_mutations);
        let result = catch_unwind(AssertUnwindSafe(|| (exercise_gguf(bytes), exercise_safetensors(st_bytes))));
        match result {
            Ok((gguf_ok, st_ok)) => {
                opened += u64::from(gguf_ok);
                st_opened += u64::from(st_ok);
            }
            Err(_) => {
                eprintln!("panic at iteration {i} (seed {seed}): input {which}, gguf mutations {mutations:?}, safetensors mutations {st_mutations:?}");
                std::process::exit(1);
            }
        }
    }
    println!(
        "ran {n} gguf inputs ({opened} opened, {} rejected) and {n} safetensors inputs ({st_opened} opened), no panics",
        n - opened
    );
}
