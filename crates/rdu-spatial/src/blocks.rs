//! A weight held in a block format other than Q8_0 (which [`crate::q8::Q8Weight`] holds):
//! FP8 with its block scales, or a ggml block format (MXFP4) — what the host loads and
//! certification draws for a tensor the manifest stores `fp8` or `mxfp4`, and what the
//! simulator folds through [`crate::sim::SimBindings::fp8`] and
//! [`crate::sim::SimBindings::packed`].

use std::borrow::Cow;

use rdu_checkpoint::{quantize_fp8, quantize_mxfp4, Fp8Weight, GgmlType, GgmlWeight};

use crate::program::Storage;
use crate::sim::{PackedWeight, WeightSlab};
use crate::tensor_parallel::{pad_ggml, take_fp8, take_ggml};

/// A weight stored FP8 or in a ggml block format.
#[derive(Clone, Debug, PartialEq)]
pub enum BlockWeight {
    Fp8(Fp8Weight),
    Ggml(GgmlWeight),
}

impl BlockWeight {
    /// `values` (row-major, `shape`) quantised to `storage` — FP8 in its blocks as DeepSeek's
    /// quantiser does, MXFP4 as ggml's — or `None` for a storage that is neither.
    pub fn quantize(values: &[f32], shape: &[usize], storage: Storage) -> Option<Result<BlockWeight, String>> {
        Some(match storage {
            Storage::Fp8 { rows, cols } => {
                quantize_fp8(values, shape, [rows as usize, cols as usize]).map(BlockWeight::Fp8)
            }
            Storage::Mxfp4 => quantize_mxfp4(values, shape).map(BlockWeight::Ggml),
            _ => return None,
        })
    }

    pub fn shape(&self) -> &[usize] {
        match self {
            BlockWeight::Fp8(w) => &w.shape,
            BlockWeight::Ggml(w) => &w.shape,
        }
    }

    /// How a program declares it (`fp8_RxC`, `mxfp4`; a ggml format other than MXFP4 is read
    /// as values: dense).
    pub fn storage(&self) -> Storage {
        match self {
            BlockWeight::Fp8(w) => Storage::Fp8 { rows: w.block[0] as u32, cols: w.block[1] as u32 },
            BlockWeight::Ggml(w) if w.format == GgmlType::MXFP4 => Storage::Mxfp4,
            BlockWeight::Ggml(_) => Storage::Dense,
        }
    }

    /// Every value as f32, exactly.
    pub fn dequantize(&self) -> Vec<f32> {
        match self {
            BlockWeight::Fp8(w) => w.dequantize(),
            BlockWeight::Ggml(w) => w.dequantize(),
        }
    }

    /// A chip's slice: the blocks of `ranges` of `axis` (a range that splits a block is refused).
    pub fn take(&self, axis: usize, ranges: &[(usize, usize)]) -> Result<BlockWeight, String> {
        Ok(match self {
            BlockWeight::Fp8(w) => BlockWeight::Fp8(take_fp8(w, axis, ranges)?),
            BlockWeight::Ggml(w) => BlockWeight::Ggml(take_ggml(w, axis, ranges)?),
        })
    }

    /// A chip's slice held as `storage` declares: an FP8 weight first cut into the chip's
    /// finer blocks (`Fp8Weight::refined`, the same values and scales) when its share cuts a
    /// block, then [`BlockWeight::take`].
    pub fn take_as(&self, axis: usize, ranges: &[(usize, usize)], storage: Storage) -> Result<BlockWeight, String> {
        match (self, storage) {
            (BlockWeight::Fp8(w), Storage::Fp8 { rows, cols }) if w.block != [rows as usize, cols as usize] => {
                BlockWeight::Fp8(w.clone().refined([rows as usize, cols as usize])?).take(axis, ranges)
            }
            _ => self.take(axis, ranges),
        }
    }

    /// Zero-padded along `axis` to `to` values (`tensor_parallel::pad_ggml`: zero blocks
    /// appended, the stored ones kept). Only a ggml block format is padded; FP8 is refused.
    pub fn pad(&self, axis: usize, to: usize) -> Result<BlockWeight, String> {
        match self {
            BlockWeight::Ggml(w) => Ok(BlockWeight::Ggml(pad_ggml(w, axis, to)?)),
            BlockWeight::Fp8(_) => Err("an FP8 weight is never zero-padded".into()),
        }
    }

    /// The weights `parts` (equal shapes, equal formats) stacked along a new first axis: a
    /// stack of experts, each keeping its blocks (and an FP8 expert its grid of scales).
    pub fn stack(parts: Vec<BlockWeight>) -> Result<BlockWeight, String> {
        let Some(first) = parts.first() else { return Err("nothing to stack".into()) };
        let (mut shape, storage) = (first.shape().to_vec(), first.storage());
        if let Some(p) = parts.iter().find(|p| p.shape() != shape.as_slice() || p.storage() != storage) {
            let (a, b) = (storage.word(), p.storage().word());
            return Err(format!("cannot stack {:?} {b} onto {shape:?} {a}", p.shape()));
        }
        shape.insert(0, parts.len());
        Ok(match first {
            BlockWeight::Fp8(f) => {
                let block = f.block;
                let (mut values, mut scales) = (Vec::new(), Vec::new());
                for p in parts {
                    if let BlockWeight::Fp8(w) = p {
                        values.extend(w.values);
                        scales.extend(w.scales);
                    }
                }
                BlockWeight::Fp8(Fp8Weight::new(shape, block, values, scales)?)
            }
            BlockWeight::Ggml(g) => {
                let format = g.format;
                let bytes =
                    parts.into_iter().flat_map(|p| if let BlockWeight::Ggml(w) = p { w.bytes } else { Vec::new() });
                BlockWeight::Ggml(GgmlWeight::new(shape, format, bytes.collect())?)
            }
        })
    }

    /// The FP8 weight, if it is one.
    pub fn fp8(&self) -> Option<&Fp8Weight> {
        match self {
            BlockWeight::Fp8(w) => Some(w),
            BlockWeight::Ggml(_) => None,
        }
    }

    /// The simulator's in-place view of a ggml-format weight, if it is one.
    pub fn packed(&self) -> Option<PackedWeight<'_>> {
        match self {
            BlockWeight::Ggml(w) => Some(PackedWeight::of(w)),
            BlockWeight::Fp8(_) => None,
        }
    }

    /// The whole weight as one expert's slab, owned.
    pub fn into_slab(self) -> WeightSlab<'static> {
        match self {
            BlockWeight::Fp8(w) => {
                WeightSlab::Fp8 { block: w.block, values: Cow::Owned(w.values), scales: Cow::Owned(w.scales) }
            }
            BlockWeight::Ggml(w) => WeightSlab::Packed { format: w.format, bytes: Cow::Owned(w.bytes) },
        }
    }
}
