//! Depth independence: lowering and certifying a 64-layer model against the same model with
//! one layer per kind (Qwen3-Next-80B-A3B's layers at real shapes, its 3:1 pattern repeated to
//! 64 layers). Compare the two times printed side by side; CI only builds this.

use criterion::{criterion_group, criterion_main, Criterion};
use rdu_compiler::deploy::{layer_kinds, lower_decode_streamed, LowerOptions, Storage};
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::ModelSpec;
use rdu_spatial::chip::Chip;

fn lower(spec: &ModelSpec) {
    let opts = LowerOptions {
        chip: Chip::builtin("sn50").expect("chip"),
        storage: Storage::AllQ8,
        seed: 0,
        progress: &mut |_| {},
    };
    lower_decode_streamed(spec, 4096, opts).expect("lowers");
}

fn depth(c: &mut Criterion) {
    let base = presets::resolve("qwen3-next-80b-a3b").expect("preset");
    let mut deep = base.clone();
    deep.layers = (0..64).map(|l| base.layers[l % 4].clone()).collect();
    let mut shallow = base.clone();
    shallow.layers =
        layer_kinds(&deep, &Storage::AllQ8).iter().map(|k| deep.layers[k.representative()].clone()).collect();
    let mut group = c.benchmark_group("lower+certify qwen3-next shapes");
    group.sample_size(10);
    group.bench_function("64 layers", |b| b.iter(|| lower(&deep)));
    group.bench_function("one layer per kind", |b| b.iter(|| lower(&shallow)));
    group.finish();
}

criterion_group!(benches, depth);
criterion_main!(benches);
