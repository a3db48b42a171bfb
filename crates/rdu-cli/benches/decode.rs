//! Decode tokens/s with the spatial engine: lowered once, written as a bundle, run by the host
//! one token per step (criterion reports the step time and, as throughput, tokens/s).
//!
//! - `gemma-3-270m seeded`: the `gemma-3-270m` preset on seeded weights (Q8_0 storage, the
//!   preset default) — always runs.
//! - `gemma-3-270m gguf`: the real Gemma 3 270M file named by `RDU_GEMMA3_270M_GGUF` (the
//!   Q4_K_M package file, or a Q8_0 one; see the README), weights as stored; without the
//!   variable it says so and measures nothing. `bench/vs-llama-cpp` compares with llama.cpp.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rdu_compiler::deploy::{lower_decode_streamed, LowerOptions, Storage};
use rdu_compiler::model::gguf::from_gguf_path;
use rdu_compiler::reference::GgufWeights;
use rdu_host::{Host, WeightsSource};
use rdu_spatial::chip::Chip;
use std::path::PathBuf;

const CTX: usize = 512;

/// Lowers `spec` for decode, writes the bundle and loads it over `weights`.
fn host(
    spec: &rdu_compiler::model::spec::ModelSpec,
    storage: Storage,
    weights: WeightsSource,
) -> (Host, tempfile::TempDir) {
    let opts = LowerOptions { chip: Chip::builtin("sn50").expect("chip"), storage, seed: 0, progress: &mut |_| {} };
    let model = lower_decode_streamed(spec, CTX, opts).expect("lowers and certifies");
    let dir = tempfile::tempdir().expect("temp dir");
    let bundle = dir.path().join("gemma");
    model.bundle().expect("bundle").write(&bundle, false).expect("write");
    let host = Host::load(&bundle, &weights, &mut |_, _, _| {}).expect("host loads");
    (host, dir)
}

/// One decode step a criterion iteration, wrapping around the context; each step runs on a
/// worker of a rayon pool, as `rdu run` runs (so its products fork inside the pool).
fn steps(c: &mut Criterion, name: &str, host: &mut Host) {
    let pool = rayon::ThreadPoolBuilder::new().build().expect("a thread pool");
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    let mut pos = 0;
    group.bench_function(name, |b| {
        b.iter(|| {
            if pos == CTX {
                host.reset();
                pos = 0;
            }
            pool.install(|| host.step(&[818], pos).expect("step"));
            pos += 1;
        })
    });
    group.finish();
}

fn seeded(c: &mut Criterion) {
    let spec = rdu_compiler::model::presets::get("gemma-3-270m").expect("the preset");
    let unit_offset = spec.head.norm_unit_offset;
    let (mut host, _dir) = host(&spec, Storage::AllQ8, WeightsSource::Seeded { seed: 0, unit_offset });
    steps(c, "gemma-3-270m seeded (tok/s)", &mut host);
}

fn gguf(c: &mut Criterion) {
    let Ok(file) = std::env::var("RDU_GEMMA3_270M_GGUF") else {
        eprintln!("skipped gemma-3-270m gguf: set RDU_GEMMA3_270M_GGUF to a gemma-3-270m GGUF file");
        return;
    };
    let path = PathBuf::from(file);
    let spec = from_gguf_path(&path).expect("the GGUF imports");
    let storage = GgufWeights::open(&spec, &path).expect("the GGUF opens").storage();
    let (mut host, _dir) = host(&spec, storage, WeightsSource::Gguf(path));
    steps(c, "gemma-3-270m gguf (tok/s)", &mut host);
}

criterion_group!(benches, seeded, gguf);
criterion_main!(benches);
