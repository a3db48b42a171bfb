//! Decode tokens/s of the real Gemma 3 270M (Q4_K_M GGUF, Q8_0 as stored) with the spatial
//! engine: lowered once, written as a bundle, run by the host one token per step. Needs
//! `RDU_GEMMA3_270M_GGUF` (see the README); without it the benchmark says so and measures
//! nothing. Compare with llama.cpp's decode tok/s on the same machine.

use criterion::{criterion_group, criterion_main, Criterion};
use rdu_compiler::lower::streamed::{lower_decode_streamed, LowerOptions};
use rdu_compiler::model::gguf::from_gguf_path;
use rdu_compiler::reference::GgufWeights;
use rdu_host::{Host, WeightsSource};
use rdu_spatial::chip::Chip;
use std::path::PathBuf;

const CTX: usize = 512;

fn decode(c: &mut Criterion) {
    let Ok(file) = std::env::var("RDU_GEMMA3_270M_GGUF") else {
        eprintln!("skipped: set RDU_GEMMA3_270M_GGUF to the gemma-3-270m-q4_k_m.gguf file");
        return;
    };
    let path = PathBuf::from(file);
    let spec = from_gguf_path(&path).expect("the GGUF imports");
    let storage = GgufWeights::open(&spec, &path).expect("the GGUF opens").storage();
    let opts = LowerOptions { chip: Chip::builtin("sn50").expect("chip"), storage, seed: 0, progress: &mut |_| {} };
    let model = lower_decode_streamed(&spec, CTX, opts).expect("lowers and certifies");
    let dir = tempfile::tempdir().expect("temp dir");
    let bundle = dir.path().join("gemma");
    model.bundle().expect("bundle").write(&bundle, false).expect("write");
    let mut host = Host::load(&bundle, &WeightsSource::Gguf(path), &mut |_, _, _| {}).expect("host loads");
    let mut pos = 0;
    c.bench_function("gemma-3-270m decode step (spatial engine)", |b| {
        b.iter(|| {
            if pos == CTX {
                host.reset();
                pos = 0;
            }
            host.step(&[818], pos).expect("step");
            pos += 1;
        })
    });
}

criterion_group!(benches, decode);
criterion_main!(benches);
