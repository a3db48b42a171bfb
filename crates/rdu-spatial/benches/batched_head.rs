//! A batched decode step's head: `linear(x [R, 640], W [262144, 640])` with W a file Q8_0
//! weight read in place (Gemma 3 270M's tied embedding), at 16 rows (a 16-sequence step: the
//! product that takes 40% of `rdu serve`'s step, `bench/serve/README.md`; through the register
//! tiles, `sim/folded.rs`) and at 8 and 5 (a small batch's or a verify step's rows: a row dot
//! per activation row, `dot_q8_rows_avx512`). Beside it, the same 16 rows times Gemma 3
//! 270M's FFN gate `[2048, 640]`, whose 1.4 MB stay in the two cores' L2 from one call to
//! the next: the register tiles' rate without the head's stream from memory.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rdu_checkpoint::{GgmlType, GgmlWeight};
use rdu_spatial::q8::quantize_q8_0;
use rdu_spatial::text::parse;
use rdu_spatial::{seeded_weight, simulate, MapBindings, SimTensor};

const OUT: usize = 262_144;
const IN: usize = 640;

/// An empty vector with room for `len` bytes, its memory advised for transparent huge pages
/// before it is touched, as `rdu`'s loader reads a checkpoint (`Bytes::read_resident`): the
/// head's 178 MB then stream through the TLB as they do in `rdu serve`.
fn huge_page_vec(len: usize) -> Vec<u8> {
    const HUGE: usize = 2 << 20;
    let v = Vec::<u8>::with_capacity(len + HUGE);
    let start = v.as_ptr() as usize;
    let (first, last) = (start.next_multiple_of(HUGE), (start + len) / HUGE * HUGE);
    if last > first {
        // SAFETY: the range lies inside the vector's allocation, which no one has touched yet;
        // the advice changes how its pages are backed, not their contents.
        unsafe { libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_HUGEPAGE) };
    }
    v
}

/// A seeded `[out, IN]` weight as file Q8_0 blocks (an f16 scale, then 32 int8 values).
fn file_q8(out: usize) -> GgmlWeight {
    let q8 = quantize_q8_0(&seeded_weight(7, "W", &[out, IN], false), &[out, IN]).expect("quantisable");
    let mut bytes = huge_page_vec(q8.blocks.len() * rdu_checkpoint::Q8Block::BYTES);
    bytes.extend(q8.blocks.iter().flat_map(|b| b.to_bytes()));
    GgmlWeight { shape: vec![out, IN], format: GgmlType::Q8_0, bytes }
}

/// Times `linear(x [rows, IN], W [out, IN])` in `group`, W the file Q8_0 weight `bindings`
/// holds (read in place); hands the bindings back for the next.
fn product(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    bindings: MapBindings,
    out: usize,
    rows: usize,
) -> MapBindings {
    let text = format!(
        "program bench chip=sn50\n\
         tensor x : f32[{rows}, {IN}] role=input home=hbm\n\
         tensor W : f32[{out}, {IN}] storage=q8_0 role=weight home=hbm\n\
         section 0\nstage s0 pcus=1 pmus=1\n  y = linear(x, W) fold=q8\noutput y\n"
    );
    let program = parse(&text).expect("bench program parses");
    let x = SimTensor::f32(vec![rows, IN], seeded_weight(3, "x", &[rows, IN], false));
    let bindings = bindings.with("x", x);
    let name = format!("q8_0_packed_{rows}_rows");
    group.bench_function(name, |b| b.iter(|| simulate(black_box(&program), &bindings).expect("runs")));
    bindings
}

fn head(c: &mut Criterion) {
    let mut bindings = MapBindings::new().with_packed("W", file_q8(OUT));
    let mut group = c.benchmark_group("head_262144x640");
    group.sample_size(20);
    for rows in [16, 8, 5] {
        bindings = product(&mut group, bindings, OUT, rows);
    }
    group.finish();
}

/// 16 rows times a weight that stays in L2 between calls.
fn resident(c: &mut Criterion) {
    let mut group = c.benchmark_group("resident_2048x640");
    product(&mut group, MapBindings::new().with_packed("W", file_q8(2048)), 2048, 16);
    group.finish();
}

criterion_group!(benches, head, resident);
criterion_main!(benches);
