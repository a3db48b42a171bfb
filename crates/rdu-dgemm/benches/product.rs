//! The reference interpreter's f64 products at the shapes a real-shape certification runs,
//! one thread (the interpreter runs products in parallel itself), in multiply-adds per second:
//! a 512-row prefill chunk through a 5120-wide projection, the chunk's scores against 4608
//! latent-cache entries, and an expert's 19 rows through 256 of its f32 weight rows (the
//! weights widened as they are packed). `cargo bench -p rdu-dgemm`; CI only builds this.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rdu_dgemm::{product, product_rows, Rows, View};
use std::hint::black_box;

/// Values in [-0.5, 0.5) with no pattern a kernel could profit from.
fn values(len: usize, seed: usize) -> Vec<f64> {
    (0..len).map(|i| ((i * 2_654_435_761 + seed * 40_503) % 1_000_003) as f64 / 1_000_003.0 - 0.5).collect()
}

struct F32Rows {
    values: Vec<f32>,
    o: usize,
    k: usize,
}

impl Rows for F32Rows {
    fn count(&self) -> usize {
        self.o
    }
    fn width(&self) -> usize {
        self.k
    }
    fn values(&self, j: usize, p0: usize, out: &mut [f32]) {
        out.copy_from_slice(&self.values[j * self.k + p0..][..out.len()]);
    }
}

fn products(c: &mut Criterion) {
    let mut group = c.benchmark_group("f64 product");
    group.sample_size(10);
    for (name, m, k, n) in
        [("prefill [512x5120]x[5120x512]", 512, 5120, 512), ("scores [512x192]x[192x4608]", 512, 192, 4608)]
    {
        let (a, b) = (values(m * k, 1), values(k * n, 2));
        let mut out = vec![0f64; m * n];
        group.throughput(Throughput::Elements((m * k * n) as u64));
        group.bench_function(name, |bench| {
            bench.iter(|| product(View::dense(black_box(&a), m, k), View::dense(black_box(&b), k, n), &mut out))
        });
    }
    let (n, k, o) = (19, 5120, 256);
    let x = values(n * k, 3);
    let w = F32Rows { values: values(o * k, 4).iter().map(|&v| v as f32).collect(), o, k };
    let mut out = vec![0f64; n * o];
    group.throughput(Throughput::Elements((n * k * o) as u64));
    group.bench_function("expert rows [19x5120]x[256x5120]^T", |bench| {
        bench.iter(|| product_rows(View::dense(black_box(&x), n, k), &w, &mut out))
    });
    group.finish();
}

criterion_group!(benches, products);
criterion_main!(benches);
