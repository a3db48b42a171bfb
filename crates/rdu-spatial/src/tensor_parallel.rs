//! Tensor parallelism on the target: every chip of a tensor-parallel program runs the same
//! spatial program on its own slices of the split tensors (`TpSplit`: ranges of one axis of the
//! full tensor, concatenated), and `all_reduce` sums the partial results over the chips
//! (`sim::AllReduce`). This module checks a split against its full tensor and cuts a chip's
//! slice out of a full tensor — dense values, or Q8_0 blocks when the split axis keeps whole
//! blocks — for certification and for the host. A split OUTPUT (a vocabulary-parallel head's
//! logits) is the other way round: every chip computes its ranges of the whole result, and
//! [`join`] puts the whole together in chip order.

use crate::program::TpSplit;
use crate::q8::{Q8Weight, QK8_0};
use rdu_checkpoint::{Fp8Weight, GgmlWeight};

/// Checks that `split` of a tensor of shape `full` over `chips` chips is in bounds, gives
/// every chip `local` values of the axis, and covers the axis exactly: its distinct ranges
/// partition it, each held by the same number of chips (one for a partition, several for
/// replicated kv heads). A zero-padded split (`stored`) partitions the padded axis, which
/// must be longer than the `stored` values, `full`'s extent.
pub fn check_split(split: &TpSplit, full: &[usize], local: Option<usize>, chips: usize) -> Result<(), String> {
    let name = &split.tensor;
    let Some(&whole) = full.get(split.axis) else {
        return Err(format!("split of `{name}` along axis {} of a tensor of rank {}", split.axis, full.len()));
    };
    let extent = split.extent(whole);
    if let Some(stored) = split.stored {
        if stored != whole || extent <= stored {
            return Err(format!(
                "`{name}` is padded from {stored} to {extent} values of axis {}, but holds {whole}",
                split.axis
            ));
        }
    }
    if split.parts.len() != chips {
        return Err(format!("`{name}` is split over {} chips, the program runs on {chips}", split.parts.len()));
    }
    let mut all: Vec<(usize, usize)> = Vec::new();
    for (c, ranges) in split.parts.iter().enumerate() {
        let mut held = 0usize;
        for &(s, e) in ranges {
            if s >= e || e > extent {
                return Err(format!(
                    "chip {c}'s range {s}..{e} of `{name}` axis {} is outside 0..{extent}",
                    split.axis
                ));
            }
            held += e - s;
            all.push((s, e));
        }
        if let Some(local) = local {
            if held != local {
                return Err(format!(
                    "chip {c} holds {held} of `{name}` axis {}, the program declares {local}",
                    split.axis
                ));
            }
        }
    }
    all.sort_unstable();
    let mut distinct = all.clone();
    distinct.dedup();
    let mut next = 0;
    for &(s, e) in &distinct {
        if s != next {
            return Err(format!(
                "the chips' slices of `{name}` axis {} do not partition it: {} at {next}",
                split.axis,
                if s < next { "overlap" } else { "gap" }
            ));
        }
        next = e;
    }
    if next != extent {
        return Err(format!("the chips' slices of `{name}` axis {} stop at {next} of {extent}", split.axis));
    }
    let copies = |r: &(usize, usize)| all.iter().filter(|a| *a == r).count();
    let first = copies(&distinct[0]);
    if distinct.iter().any(|r| copies(r) != first) {
        return Err(format!("the chips' slices of `{name}` replicate some ranges more often than others"));
    }
    Ok(())
}

/// Checks that `split` of a tensor of shape `full` over `chips` chips is a COVER of its axis:
/// every chip one range of `local` values, in chip order, each starting after the one before
/// and no later than its end, from 0 to the whole extent. A partition into equal runs is a
/// cover; so is the split of an axis that `chips` does not divide, every chip `ceil(n/chips)`
/// values and the last range ending at the extent (overlapping the one before it). Only a
/// value that is gathered, never summed, may be split so ([`join`]).
pub fn check_cover(split: &TpSplit, full: &[usize], local: usize, chips: usize) -> Result<(), String> {
    let name = &split.tensor;
    let Some(&extent) = full.get(split.axis) else {
        return Err(format!("split of `{name}` along axis {} of a tensor of rank {}", split.axis, full.len()));
    };
    if split.parts.len() != chips {
        return Err(format!("`{name}` is split over {} chips, the program runs on {chips}", split.parts.len()));
    }
    let mut end = 0usize;
    let mut start = None;
    for (c, ranges) in split.parts.iter().enumerate() {
        let &[(s, e)] = ranges.as_slice() else {
            return Err(format!("chip {c} holds {} ranges of `{name}`; a cover gives each chip one", ranges.len()));
        };
        if e != s + local || e > extent {
            return Err(format!("chip {c}'s range {s}..{e} of `{name}` is not {local} values inside 0..{extent}"));
        }
        if s > end || start.is_some_and(|p| s <= p) {
            return Err(format!("chip {c}'s range {s}..{e} of `{name}` does not follow on from 0..{end}"));
        }
        start = Some(s);
        end = e;
    }
    if end != extent {
        return Err(format!("the chips' ranges of `{name}` axis {} stop at {end} of {extent}", split.axis));
    }
    Ok(())
}

/// The whole of a value gathered from every chip's ranges of it: chip `c`'s `pieces[c]` holds
/// the ranges `parts[c]` of `axis` of a whole tensor of extent `extent` there, concatenated;
/// the whole takes each position from the first chip in order that holds it. Every position
/// must be held by some chip.
pub fn join<T: Copy + Default>(
    pieces: &[(&[usize], &[T])],
    axis: usize,
    parts: &[Vec<(usize, usize)>],
    extent: usize,
) -> Result<(Vec<usize>, Vec<T>), String> {
    let Some(&(shape0, _)) = pieces.first() else { return Err("no chip's value to join".into()) };
    if pieces.len() != parts.len() {
        return Err(format!("{} chips' values for {} chips' ranges", pieces.len(), parts.len()));
    }
    let Some(_) = shape0.get(axis) else { return Err(format!("axis {axis} of a value of rank {}", shape0.len())) };
    let mut shape = shape0.to_vec();
    shape[axis] = extent;
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out = vec![T::default(); outer * extent * inner];
    let mut held = vec![false; extent];
    for (c, ((piece_shape, values), ranges)) in pieces.iter().zip(parts).enumerate() {
        let local: usize = ranges.iter().map(|(s, e)| e.saturating_sub(*s)).sum();
        let mut want = shape.clone();
        want[axis] = local;
        if *piece_shape != want.as_slice() || values.len() != outer * local * inner {
            return Err(format!("chip {c}'s value has shape {piece_shape:?}, its ranges make {want:?}"));
        }
        let mut at = 0;
        for &(s, e) in ranges {
            if s > e || e > extent {
                return Err(format!("chip {c}'s range {s}..{e} is outside 0..{extent}"));
            }
            for (i, held) in held.iter_mut().enumerate().take(e).skip(s) {
                if !*held {
                    *held = true;
                    for o in 0..outer {
                        let from = (o * local + at + i - s) * inner;
                        let to = (o * extent + i) * inner;
                        out[to..to + inner].copy_from_slice(&values[from..from + inner]);
                    }
                }
            }
            at += e - s;
        }
    }
    if let Some(i) = held.iter().position(|h| !h) {
        return Err(format!("no chip holds position {i} of axis {axis}"));
    }
    Ok((shape, out))
}

/// The values of the half-open `ranges` of `axis` of a row-major tensor of `shape`,
/// concatenated along `axis`: the sliced shape and values.
pub fn take<T: Copy>(
    shape: &[usize],
    data: &[T],
    axis: usize,
    ranges: &[(usize, usize)],
) -> Result<(Vec<usize>, Vec<T>), String> {
    let Some(&extent) = shape.get(axis) else {
        return Err(format!("axis {axis} of a tensor of rank {}", shape.len()));
    };
    if shape.iter().product::<usize>() != data.len() {
        return Err(format!("{} values for shape {shape:?}", data.len()));
    }
    if let Some(&(s, e)) = ranges.iter().find(|&&(s, e)| s > e || e > extent) {
        return Err(format!("range {s}..{e} outside 0..{extent} of axis {axis}"));
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let local: usize = ranges.iter().map(|(s, e)| e - s).sum();
    let mut out = Vec::with_capacity(outer * local * inner);
    for o in 0..outer {
        let base = o * extent * inner;
        for &(s, e) in ranges {
            out.extend_from_slice(&data[base + s * inner..base + e * inner]);
        }
    }
    let mut sliced = shape.to_vec();
    sliced[axis] = local;
    Ok((sliced, out))
}

/// A row-major tensor of `shape` zero-padded along `axis` to `to` values (at least its
/// extent): the padded shape and values. What a chip of a zero-padded split (`TpSplit::stored`)
/// takes its ranges from.
pub fn pad<T: Copy + Default>(
    shape: &[usize],
    data: &[T],
    axis: usize,
    to: usize,
) -> Result<(Vec<usize>, Vec<T>), String> {
    let Some(&extent) = shape.get(axis) else {
        return Err(format!("axis {axis} of a tensor of rank {}", shape.len()));
    };
    if to < extent || shape.iter().product::<usize>() != data.len() {
        return Err(format!("cannot pad {} values of shape {shape:?} to {to} along axis {axis}", data.len()));
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(outer * to * inner);
    for o in 0..outer {
        out.extend_from_slice(&data[o * extent * inner..(o + 1) * extent * inner]);
        out.resize(out.len() + (to - extent) * inner, T::default());
    }
    let mut padded = shape.to_vec();
    padded[axis] = to;
    Ok((padded, out))
}

/// A weight in a ggml block format zero-padded along `axis` to `to` values: along the last
/// axis whole zero blocks appended to every row (`to` a multiple of the block; an all-zero
/// MXFP4 block is 0 at scale 2^-127), along another axis zero rows. The stored blocks are kept
/// as they are: nothing is widened.
pub fn pad_ggml(w: &GgmlWeight, axis: usize, to: usize) -> Result<GgmlWeight, String> {
    let (rank, block, size, byte_shape) = byte_grid(w, axis)?;
    let byte_to = if axis == rank - 1 {
        if !to.is_multiple_of(block) {
            return Err(format!("padding to {to} splits the {} blocks of {block} values", w.format));
        }
        to / block * size
    } else {
        to
    };
    let (mut shape, bytes) = pad(&byte_shape, &w.bytes, axis, byte_to)?;
    shape[rank - 1] = shape[rank - 1] / size * block;
    GgmlWeight::new(shape, w.format, bytes)
}

/// A chip's slice of a Q8_0 weight: its blocks, cut along `axis` (along the last axis only at
/// whole blocks — a range that would split a block is an error).
pub fn take_q8(w: &Q8Weight, axis: usize, ranges: &[(usize, usize)]) -> Result<Q8Weight, String> {
    let (block_shape, block_ranges) = q8_block_ranges(&w.shape, axis, ranges)?;
    let (mut shape, blocks) = take(&block_shape, &w.blocks, axis, &block_ranges)?;
    shape[w.shape.len() - 1] *= QK8_0;
    Ok(Q8Weight { shape, blocks })
}

/// A chip's slice of an FP8 weight: its values and the scales of the blocks they hold, cut
/// along `axis`. Along the last two axes a range starts on a block and ends on one or at the
/// axis' end (a ragged edge block); the slice's blocks must be the grid of its own shape.
pub fn take_fp8(w: &Fp8Weight, axis: usize, ranges: &[(usize, usize)]) -> Result<Fp8Weight, String> {
    let rank = w.shape.len();
    let (shape, values) = take(&w.shape, &w.values, axis, ranges)?;
    let grid = rdu_checkpoint::Fp8Grid::of(&w.shape, w.block)?;
    let mut grid_shape = w.shape[..rank - 2].to_vec();
    grid_shape.extend([grid.rows, grid.cols]);
    let grid_ranges: Vec<(usize, usize)> = match rank - axis {
        1 | 2 => {
            let (unit, extent) = (w.block[2 - (rank - axis)], w.shape[axis]);
            if let Some(&(s, e)) =
                ranges.iter().find(|&&(s, e)| !s.is_multiple_of(unit) || !(e.is_multiple_of(unit) || e == extent))
            {
                return Err(format!("range {s}..{e} of axis {axis} splits the FP8 blocks of {unit}"));
            }
            ranges.iter().map(|&(s, e)| (s / unit, e.div_ceil(unit))).collect()
        }
        _ => ranges.to_vec(),
    };
    let (_, scales) = take(&grid_shape, &w.scales, axis, &grid_ranges)?;
    Fp8Weight::new(shape, w.block, values, scales)
}

/// A ggml-format weight as a grid of bytes (its last axis `size` bytes a block of `block`
/// values), for cutting or padding along `axis`: its rank, block, block bytes and byte shape.
fn byte_grid(w: &GgmlWeight, axis: usize) -> Result<(usize, usize, usize, Vec<usize>), String> {
    let rank = w.shape.len();
    let (block, size) = (w.format.block_size() as usize, w.format.type_size() as usize);
    if rank == 0 || axis >= rank {
        return Err(format!("axis {axis} of a {} weight of shape {:?}", w.format, w.shape));
    }
    let mut byte_shape = w.shape.clone();
    byte_shape[rank - 1] = w.shape[rank - 1] / block * size;
    Ok((rank, block, size, byte_shape))
}

/// A chip's slice of a weight in a ggml block format: its blocks, cut along `axis` (along the
/// last axis only at whole blocks).
pub fn take_ggml(w: &GgmlWeight, axis: usize, ranges: &[(usize, usize)]) -> Result<GgmlWeight, String> {
    let (rank, block, size, byte_shape) = byte_grid(w, axis)?;
    let byte_ranges: Vec<(usize, usize)> = if axis == rank - 1 {
        if let Some(&(s, e)) = ranges.iter().find(|(s, e)| !s.is_multiple_of(block) || !e.is_multiple_of(block)) {
            return Err(format!("range {s}..{e} splits the {} blocks of {block} values", w.format));
        }
        ranges.iter().map(|(s, e)| (s / block * size, e / block * size)).collect()
    } else {
        ranges.to_vec()
    };
    let (mut shape, bytes) = take(&byte_shape, &w.bytes, axis, &byte_ranges)?;
    shape[rank - 1] = shape[rank - 1] / size * block;
    GgmlWeight::new(shape, w.format, bytes)
}

/// A weight's grid of Q8_0 blocks and ranges on it: see [`q8_block_ranges`].
pub type BlockGrid = (Vec<usize>, Vec<(usize, usize)>);

/// A Q8_0 weight of `shape` as a grid of blocks (the last axis counted in blocks of
/// [`QK8_0`]), and `ranges` of `axis` on that grid: [`take`] of the block grid with them is
/// [`take_q8`]'s slice. Along the last axis only whole blocks may be taken.
pub fn q8_block_ranges(shape: &[usize], axis: usize, ranges: &[(usize, usize)]) -> Result<BlockGrid, String> {
    let rank = shape.len();
    if rank == 0 || axis >= rank {
        return Err(format!("axis {axis} of a Q8_0 weight of shape {shape:?}"));
    }
    let mut block_shape = shape.to_vec();
    block_shape[rank - 1] /= QK8_0;
    let block_ranges: Vec<(usize, usize)> = if axis == rank - 1 {
        if let Some(&(s, e)) = ranges.iter().find(|(s, e)| !s.is_multiple_of(QK8_0) || !e.is_multiple_of(QK8_0)) {
            return Err(format!("range {s}..{e} splits the Q8_0 blocks of {QK8_0} values"));
        }
        ranges.iter().map(|(s, e)| (s / QK8_0, e / QK8_0)).collect()
    } else {
        ranges.to_vec()
    };
    Ok((block_shape, block_ranges))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(parts: Vec<Vec<(usize, usize)>>) -> TpSplit {
        TpSplit { tensor: "W".into(), axis: 0, parts, stored: None }
    }

    #[test]
    fn take_concatenates_ranges_of_an_inner_axis() {
        // [2, 4]: rows 0..2 of columns {0, 2..4}.
        let data: Vec<i32> = (0..8).collect();
        let (shape, v) = take(&[2, 4], &data, 1, &[(0, 1), (2, 4)]).unwrap();
        assert_eq!(shape, vec![2, 3]);
        assert_eq!(v, vec![0, 2, 3, 4, 6, 7]);
        assert!(take(&[2, 4], &data, 1, &[(3, 5)]).is_err());
    }

    #[test]
    fn splits_partition_or_replicate_exactly() {
        assert!(check_split(&split(vec![vec![(0, 2)], vec![(2, 4)]]), &[4, 3], Some(2), 2).is_ok());
        assert!(
            check_split(&split(vec![vec![(0, 2)], vec![(0, 2)], vec![(2, 4)], vec![(2, 4)]]), &[4], None, 4).is_ok()
        );
        let overlap = check_split(&split(vec![vec![(0, 3)], vec![(2, 4)]]), &[4], None, 2).unwrap_err();
        assert!(overlap.contains("overlap"), "{overlap}");
        assert!(check_split(&split(vec![vec![(0, 2)], vec![(3, 4)]]), &[4], None, 2).unwrap_err().contains("gap"));
        assert!(check_split(&split(vec![vec![(0, 2)], vec![(2, 5)]]), &[4], None, 2).is_err());
        assert!(check_split(&split(vec![vec![(0, 2)], vec![(0, 2)], vec![(2, 4)]]), &[4], None, 3).is_err());
    }

    /// A zero-padded split partitions the padded axis, which must outgrow the stored values.
    #[test]
    fn a_padded_split_partitions_the_padded_axis() {
        let padded = |parts, stored| TpSplit { stored: Some(stored), ..split(parts) };
        assert!(check_split(&padded(vec![vec![(0, 4)], vec![(4, 8)]], 6), &[6, 2], Some(4), 2).is_ok());
        let e = check_split(&padded(vec![vec![(0, 4)], vec![(4, 8)]], 5), &[6, 2], Some(4), 2).unwrap_err();
        assert!(e.contains("padded from 5 to 8 values of axis 0, but holds 6"), "{e}");
        let e = check_split(&padded(vec![vec![(0, 3)], vec![(3, 6)]], 6), &[6, 2], Some(3), 2).unwrap_err();
        assert!(e.contains("padded from 6 to 6"), "{e}");
        assert!(check_split(&padded(vec![vec![(0, 4)], vec![(5, 8)]], 6), &[6], None, 2).unwrap_err().contains("gap"));
    }

    #[test]
    fn pad_appends_zeros_along_an_axis_and_zero_blocks_along_the_blocked_one() {
        let data: Vec<i32> = (1..=6).collect();
        assert_eq!(pad(&[2, 3], &data, 1, 5).unwrap(), (vec![2, 5], vec![1, 2, 3, 0, 0, 4, 5, 6, 0, 0]));
        assert_eq!(pad(&[2, 3], &data, 0, 3).unwrap(), (vec![3, 3], vec![1, 2, 3, 4, 5, 6, 0, 0, 0]));
        assert!(pad(&[2, 3], &data, 1, 2).is_err());
        let bytes: Vec<u8> = (0..2 * 17).map(|i| if i % 17 == 0 { 120 } else { i as u8 }).collect();
        let m = GgmlWeight::new(vec![2, 32], rdu_checkpoint::GgmlType::MXFP4, bytes).unwrap();
        let wide = pad_ggml(&m, 1, 96).unwrap();
        assert_eq!(wide.shape, vec![2, 96]);
        let zeros = [0u8; 34];
        assert_eq!(wide.bytes, [&m.bytes[..17], &zeros, &m.bytes[17..], &zeros].concat());
        let values = wide.dequantize();
        assert_eq!((&values[..32], &values[96..128]), (&m.dequantize()[..32], &m.dequantize()[32..]));
        assert!(values[32..96].iter().chain(&values[128..]).all(|v| *v == 0.0));
        assert!(pad_ggml(&m, 1, 48).unwrap_err().contains("splits the MXFP4 blocks"));
        assert_eq!(pad_ggml(&m, 0, 3).unwrap().bytes, [&m.bytes[..], &[0u8; 17]].concat());
    }

    #[test]
    fn covers_follow_on_and_join_takes_the_first_chip() {
        // 10 over 4 chips: runs of 3, the last ending at 10 (overlapping the third).
        let cover = split(vec![vec![(0, 3)], vec![(3, 6)], vec![(6, 9)], vec![(7, 10)]]);
        assert!(check_cover(&cover, &[10, 2], 3, 4).is_ok());
        assert!(check_cover(&split(vec![vec![(0, 3)], vec![(4, 7)]]), &[7], 3, 2).unwrap_err().contains("follow"));
        assert!(check_cover(&split(vec![vec![(0, 3)], vec![(3, 6)]]), &[7], 3, 2).unwrap_err().contains("stop"));
        assert!(check_cover(&split(vec![vec![(0, 3)], vec![(0, 3)]]), &[3], 3, 2).is_err());
        // A [2, 10] value joined along axis 1 from four chips' [2, 3] pieces.
        let whole: Vec<i32> = (0..20).collect();
        let pieces: Vec<(Vec<usize>, Vec<i32>)> =
            cover.parts.iter().map(|r| take(&[2, 10], &whole, 1, r).unwrap()).collect();
        let views: Vec<(&[usize], &[i32])> = pieces.iter().map(|(s, v)| (s.as_slice(), v.as_slice())).collect();
        assert_eq!(join(&views, 1, &cover.parts, 10).unwrap(), (vec![2, 10], whole.clone()));
        assert!(join(&views[..3], 1, &cover.parts[..3], 10).unwrap_err().contains("position 9"));
    }

    #[test]
    fn fp8_and_mxfp4_slices_keep_whole_blocks() {
        // [5, 6] in 2×4 blocks: grid 3×2, ragged last row and column.
        let values: Vec<f32> = (0..30).map(|i| i as f32 - 15.0).collect();
        let w = rdu_checkpoint::quantize_fp8(&values, &[5, 6], [2, 4]).unwrap();
        let rows = take_fp8(&w, 0, &[(2, 5)]).unwrap();
        assert_eq!((rows.shape.clone(), rows.scales.clone()), (vec![3, 6], w.scales[2..].to_vec()));
        assert_eq!(rows.dequantize(), w.dequantize()[12..].to_vec());
        let cols = take_fp8(&w, 1, &[(4, 6)]).unwrap();
        assert_eq!(cols.scales, vec![w.scales[1], w.scales[3], w.scales[5]]);
        assert!(take_fp8(&w, 0, &[(1, 3)]).is_err(), "splits a block of rows");
        assert!(take_fp8(&w, 1, &[(0, 3)]).is_err(), "splits a block of columns");
        let bytes: Vec<u8> = (0..4 * 17).map(|i| if i % 17 == 0 { 120 } else { i as u8 }).collect();
        let m = GgmlWeight::new(vec![2, 64], rdu_checkpoint::GgmlType::MXFP4, bytes).unwrap();
        let right = take_ggml(&m, 1, &[(32, 64)]).unwrap();
        assert_eq!(right.bytes, [&m.bytes[17..34], &m.bytes[51..68]].concat());
        assert!(take_ggml(&m, 1, &[(16, 48)]).is_err());
    }

    #[test]
    fn q8_slices_keep_whole_blocks() {
        let values: Vec<f32> = (0..2 * 64).map(|i| i as f32 / 7.0).collect();
        let w = crate::q8::quantize_q8_0(&values, &[2, 64]).unwrap();
        let right = take_q8(&w, 1, &[(32, 64)]).unwrap();
        assert_eq!(right.shape, vec![2, 32]);
        assert_eq!(right.blocks, vec![w.blocks[1], w.blocks[3]]);
        assert!(take_q8(&w, 1, &[(16, 48)]).is_err());
        assert_eq!(take_q8(&w, 0, &[(1, 2)]).unwrap().blocks, w.blocks[2..].to_vec());
    }
}
