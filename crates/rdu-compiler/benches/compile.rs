//! Benchmarks of the compiler's depth-independent work: grouping layers into kinds on a
//! 64-layer model against the same model cut to one layer per kind. Compare the ratio
//! printed side by side in one run; CI only builds this.

use criterion::{criterion_group, criterion_main, Criterion};
use rdu_compiler::deploy::{layer_kinds, Storage};
use rdu_compiler::model::presets;
use std::hint::black_box;

fn kinds(c: &mut Criterion) {
    let full = presets::resolve("qwen3.5-27b").expect("preset");
    let mut one_per_kind = full.clone();
    let reps: Vec<usize> = layer_kinds(&full, &Storage::AllQ8).iter().map(|k| k.representative()).collect();
    one_per_kind.layers = reps.iter().map(|&l| full.layers[l].clone()).collect();
    let mut group = c.benchmark_group("layer_kinds qwen3.5-27b");
    group.bench_function("64 layers", |b| b.iter(|| layer_kinds(black_box(&full), &Storage::AllQ8)));
    group.bench_function("one layer per kind", |b| b.iter(|| layer_kinds(black_box(&one_per_kind), &Storage::AllQ8)));
    group.finish();
}

criterion_group!(benches, kinds);
criterion_main!(benches);
