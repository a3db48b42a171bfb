//! How a tensor-parallel layer splits a tensor over its chips (Megatron-style, SPMD: every
//! chip runs the same program on its own slices). An axis is described as runs of heads (or
//! columns): a run of `count` heads of `unit` values each; chip `c` holds its `count / tp`
//! consecutive heads of every run, in order — or, when `tp` is a multiple of `count` (kv heads
//! fewer than chips), the one head `c / (tp / count)`, replicated on `tp / count` chips.
//!
//! `fit::admits_tp` decides which widths a model admits; the author only writes admitted ones.

use crate::model::storage::{Format, Storage};
use rdu_spatial::names::TensorName;

/// `count` heads (or columns) of `unit` values each, starting at `offset` along an axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub offset: usize,
    pub count: usize,
    pub unit: usize,
}

impl Run {
    /// `count` heads of `unit` values from the start of the axis.
    pub fn heads(count: usize, unit: usize) -> Run {
        Run { offset: 0, count, unit }
    }

    /// `n` columns from the start of the axis.
    pub fn columns(n: usize) -> Run {
        Run { offset: 0, count: n, unit: 1 }
    }

    /// Heads a chip holds of this run.
    fn local(&self, tp: usize) -> usize {
        if tp > self.count {
            1
        } else {
            self.count / tp
        }
    }
}

/// Values of the axis one chip holds.
pub(crate) fn local_extent(tp: usize, runs: &[Run]) -> usize {
    runs.iter().map(|r| r.local(tp) * r.unit).sum()
}

/// Every chip's half-open ranges of the axis, in order.
pub(crate) fn parts(tp: usize, runs: &[Run]) -> Vec<Vec<(usize, usize)>> {
    (0..tp)
        .map(|c| {
            runs.iter()
                .map(|r| {
                    let n = r.local(tp);
                    let first = if tp > r.count { c / (tp / r.count) } else { c * n };
                    (r.offset + first * r.unit, r.offset + (first + n) * r.unit)
                })
                .collect()
        })
        .collect()
}

/// Every chip's one range of an axis of `n` values that a tensor-parallel program gathers
/// rather than sums (the vocabulary of a vocabulary-parallel head): runs of `ceil(n / tp)`
/// values, chip `c`'s starting at `c·(n − run) / (tp − 1)`, so the runs cover `0..n` in chip
/// order — a partition into equal runs when `tp` divides `n`, overlapping runs otherwise
/// (the join takes each value from the first chip that holds it).
///
/// `n` must leave every chip a run starting after the one before: `n − ceil(n/tp) ≥ tp − 1`
/// ([`covers`]).
pub fn cover(n: usize, tp: usize) -> Vec<Vec<(usize, usize)>> {
    let run = n.div_ceil(tp.max(1));
    (0..tp)
        .map(|c| {
            let start = if tp > 1 { c * (n - run) / (tp - 1) } else { 0 };
            vec![(start, start + run)]
        })
        .collect()
}

/// Whether [`cover`] can split `n` values over `tp` chips (each chip's run starting after the one before).
pub fn covers(n: usize, tp: usize) -> bool {
    tp <= 1 || n - n.div_ceil(tp) >= tp - 1
}

/// The width the routed experts' intermediate columns of layer `layer` are deployed at over
/// `tp` chips: `hidden` itself, unless their down projection `Wed{layer}` is stored MXFP4
/// (blocks of 32 along those columns) and a chip's share of `hidden` would not be whole
/// blocks — then `hidden` zero-padded to the next multiple of `tp · 32`, so that every chip
/// holds whole blocks (as vLLM rounds gpt-oss's per-chip MXFP4 intermediate size up to a
/// block). A padded gate or up row is zero with a zero bias, so the gated unit gives exactly 0
/// there, and a padded down column adds 0: the result is the unpadded one. Only when the gate
/// and up projections are MXFP4 or dense too (the host pads those; never Q8_0 or FP8).
pub fn expert_width(storage: &Storage, layer: usize, hidden: usize, tp: usize) -> usize {
    let name = |base: &str| TensorName { base: base.into(), layer: Some(layer), seq: None }.to_string();
    let format = |base: &str| storage.format_of(&name(base));
    let block = rdu_checkpoint::QK_MXFP4;
    let paddable = |base: &str| matches!(format(base), None | Some(Format::Mxfp4));
    let stored_blocks = format("Wed") == Some(Format::Mxfp4) && hidden.is_multiple_of(block);
    if tp <= 1 || !stored_blocks || hidden.is_multiple_of(tp * block) || !paddable("Weg") || !paddable("Weu") {
        return hidden;
    }
    hidden.next_multiple_of(tp * block)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gpt-oss-120b's 2880 columns (90 blocks): whole blocks over 1 and 2 chips as they are,
    /// 2944 over 4 (23 blocks a chip), 3072 over 8 (12 a chip); never padded unless stored MXFP4.
    #[test]
    fn mxfp4_experts_are_padded_only_where_a_chip_would_split_blocks() {
        let names = |f: Format| ["Weg3", "Weu3", "Wed3"].map(|n| (n.to_string(), f)).into_iter().collect();
        let mxfp4 = Storage::Exactly(names(Format::Mxfp4));
        let widths: Vec<usize> = [1, 2, 4, 8].iter().map(|&tp| expert_width(&mxfp4, 3, 2880, tp)).collect();
        assert_eq!(widths, [2880, 2880, 2944, 3072]);
        assert_eq!(expert_width(&mxfp4, 0, 2880, 8), 2880, "layer 0 is not stored MXFP4");
        assert_eq!(expert_width(&Storage::Exactly(names(Format::Q8_0)), 3, 2880, 8), 2880);
        assert_eq!(expert_width(&Storage::AllQ8, 3, 2880, 8), 2880);
        assert_eq!(expert_width(&mxfp4, 3, 96, 2), 128);
    }

    #[test]
    fn covers_partition_evenly_and_overlap_otherwise() {
        assert_eq!(cover(12, 4), vec![vec![(0, 3)], vec![(3, 6)], vec![(6, 9)], vec![(9, 12)]]);
        assert_eq!(cover(10, 4), vec![vec![(0, 3)], vec![(2, 5)], vec![(4, 7)], vec![(7, 10)]]);
        assert_eq!(cover(5, 1), vec![vec![(0, 5)]]);
        assert!(covers(10, 4) && covers(4, 4) && !covers(3, 4));
    }

    #[test]
    fn heads_split_evenly_and_kv_heads_replicate() {
        assert_eq!(parts(2, &[Run::heads(4, 3)]), vec![vec![(0, 6)], vec![(6, 12)]]);
        // 2 kv heads over 4 chips: chips 0, 1 hold head 0; chips 2, 3 head 1.
        assert_eq!(parts(4, &[Run::heads(2, 5)]), vec![vec![(0, 5)], vec![(0, 5)], vec![(5, 10)], vec![(5, 10)]]);
        assert_eq!(local_extent(4, &[Run::heads(2, 5)]), 5);
        // Several runs: q, k and v heads of a fused projection.
        let runs = [Run::heads(2, 4), Run { offset: 8, count: 2, unit: 4 }, Run { offset: 16, count: 4, unit: 2 }];
        assert_eq!(parts(2, &runs)[1], vec![(4, 8), (12, 16), (20, 24)]);
        assert_eq!(local_extent(2, &runs), 12);
    }
}
