//! One decode-sized product through the simulator: `linear(x [1, 8192], W [2048, 8192])` with W
//! folded from Q8_0 blocks versus W dense f32, side by side in one run (compare the ratio).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rdu_spatial::q8::quantize_q8_0;
use rdu_spatial::text::parse;
use rdu_spatial::{simulate, MapBindings, SimTensor};

const OUT: usize = 2048;
const IN: usize = 8192;

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

fn program(storage: &str, fold: &str) -> rdu_spatial::SpatialProgram {
    let text = format!(
        "program bench chip=sn50\n\
         tensor x : f32[1, {IN}] role=input home=hbm\n\
         tensor W : f32[{OUT}, {IN}]{storage} role=weight home=hbm\n\
         section 0\nstage s0 pcus=1 pmus=1\n  y = linear(x, W){fold}\noutput y\n"
    );
    parse(&text).expect("bench program parses")
}

fn matvec(c: &mut Criterion) {
    let w = values(OUT * IN, 7);
    let x = SimTensor::f32(vec![1, IN], values(IN, 3));
    let q8 = quantize_q8_0(&w, &[OUT, IN]).expect("quantisable");
    let dense = MapBindings::new().with("x", x.clone()).with("W", SimTensor::f32(vec![OUT, IN], w));
    let folded = MapBindings::new().with("x", x).with_q8("W", q8);
    let (pd, pq) = (program("", ""), program(" storage=q8_0", " fold=q8"));
    let mut group = c.benchmark_group("matvec_2048x8192");
    group.bench_function("q8_0", |b| b.iter(|| simulate(black_box(&pq), &folded).expect("runs")));
    group.bench_function("dense_f32", |b| b.iter(|| simulate(black_box(&pd), &dense).expect("runs")));
    group.finish();
}

criterion_group!(benches, matvec);
criterion_main!(benches);
