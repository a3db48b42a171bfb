//! The Gated DeltaNet projection layouts only llama.cpp's GGUF files use (see
//! [`GdnLayout::SplitGroupedBa`] and [`GdnLayout::SplitTiled`]); the HF layouts are in
//! `deltanet.rs`.

use super::attention::slice;
use super::writer::{list, Writer};
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
    let mixed = w.op("mix", "linear", &[hn, wqkv], &[]);
    let zf = w.op("zf", "linear", &[hn, wz], &[]);
    let z = w.op("z", "reshape", &[&zf, &list(&[n, nv, dv])], &[]);
    let (b, a) = grouped_ba(w, hn, dims, wba);
    (mixed, z, b, a)
}

/// `Wba` grouped by key head (`[b (r) | a (r)]` per group, both Qwen3-Next layouts): b and a
/// `[N, nv]`.
pub(super) fn grouped_ba(w: &mut Writer<'_>, hn: &str, dims: &Dims, wba: &str) -> (String, String) {
    let Dims { rows: n, k_heads: nk, v_heads: nv, .. } = *dims;
    let r = nv / nk;
    let ba = w.op("ba", "linear", &[hn, wba], &[]);
    let bag = w.op("bag", "reshape", &[&ba, &list(&[n, nk, 2 * r])], &[]);
    let bg = w.op("bg", "slice", &[&bag], &slice(2, 0, r));
    let ag = w.op("ag", "slice", &[&bag], &slice(2, r, r));
    let b = w.op("b", "reshape", &[&bg, &list(&[n, nv])], &[]);
    let a = w.op("a", "reshape", &[&ag, &list(&[n, nv])], &[]);
    (b, a)
}

/// The `kmap` attribute of the delta rule: value head `h` uses key head `h mod k_heads` when
/// the value heads are tiled, `h / (v_heads / k_heads)` (the default) otherwise.
pub(super) fn kmap_attr(layout: GdnLayout) -> Vec<(&'static str, String)> {
    match layout {
        GdnLayout::SplitTiled => vec![("kmap", "tiled".to_string())],
        GdnLayout::Grouped | GdnLayout::Split | GdnLayout::SplitGroupedBa => Vec::new(),
    }
}
