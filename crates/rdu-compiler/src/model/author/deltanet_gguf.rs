//! The Gated DeltaNet projection layouts only llama.cpp's GGUF files use (see
//! [`GdnLayout::SplitGroupedBa`] and [`GdnLayout::SplitTiled`]); the HF layouts are in
//! `deltanet.rs`.

use super::attention::slice;
use super::writer::Writer;
use crate::graph::{KMap, Op};
use crate::model::spec::GdnLayout;

/// The sizes a projection layout needs (local to a chip under tensor parallelism).
pub(super) struct Dims {
    pub rows: usize,
    pub k_heads: usize,
    pub v_heads: usize,
    pub v_dim: usize,
}

/// Qwen3-Next GGUF: `Wqkv` (q all | k all | v all) and `Wz` as in the split layout, `Wba`
/// grouped by key head (`[b (r) | a (r)]` per group), declared by the caller. Returns mixed
/// qkv `[N, conv]`, z `[N, nv, dv]`, b and a `[N, nv]`.
pub(super) fn split_grouped_ba(
    w: &mut Writer<'_>,
    hn: &str,
    dims: &Dims,
    [wqkv, wz, wba]: [&str; 3],
) -> (String, String, String, String) {
    let Dims { rows: n, v_heads: nv, v_dim: dv, .. } = *dims;
    let mixed = w.op("mix", Op::Linear, &[hn, wqkv]);
    let zf = w.op("zf", Op::Linear, &[hn, wz]);
    let z = w.op("z", Op::Reshape { shape: vec![n, nv, dv] }, &[&zf]);
    let (b, a) = grouped_ba(w, hn, dims, wba);
    (mixed, z, b, a)
}

/// `Wba` grouped by key head (`[b (r) | a (r)]` per group, both Qwen3-Next layouts): b and a
/// `[N, nv]`.
pub(super) fn grouped_ba(w: &mut Writer<'_>, hn: &str, dims: &Dims, wba: &str) -> (String, String) {
    let Dims { rows: n, k_heads: nk, v_heads: nv, .. } = *dims;
    let r = nv / nk;
    let ba = w.op("ba", Op::Linear, &[hn, wba]);
    let bag = w.op("bag", Op::Reshape { shape: vec![n, nk, 2 * r] }, &[&ba]);
    let bg = w.op("bg", slice(2, 0, r), &[&bag]);
    let ag = w.op("ag", slice(2, r, r), &[&bag]);
    let b = w.op("b", Op::Reshape { shape: vec![n, nv] }, &[&bg]);
    let a = w.op("a", Op::Reshape { shape: vec![n, nv] }, &[&ag]);
    (b, a)
}

/// The `kmap` attribute of the delta rule: value head `h` uses key head `h mod k_heads` when
/// the value heads are tiled, `h / (v_heads / k_heads)` (the default) otherwise.
pub(super) fn kmap_of(layout: GdnLayout) -> KMap {
    match layout {
        GdnLayout::SplitTiled => KMap::Tiled,
        GdnLayout::Grouped | GdnLayout::Split | GdnLayout::SplitGroupedBa => KMap::Grouped,
    }
}
