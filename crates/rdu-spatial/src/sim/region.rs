//! Which part of an op's output to compute: its tiles along one axis, checked against the
//! axes the op can be tiled on, or the whole output when the op is not tiled.

use std::ops::Range;

use super::{invalid, SimError};
use crate::program::Tiling;

/// The axes of an op's output it may be tiled along.
#[derive(Clone, Copy, Debug)]
pub(super) enum Axes {
    /// Any axis (elementwise ops).
    Any,
    /// Any axis but the last (row-wise ops: norms).
    AllButLast,
    /// Exactly this axis.
    Only(usize),
}

/// The tiles to compute along `axis` of the output, in order.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Region {
    pub axis: usize,
    pub tiles: Vec<(usize, usize)>,
}

/// The region an op computes: its tiling (checked) or all of `shape` along `default_axis`.
pub(super) fn region(
    tiling: Option<&Tiling>,
    shape: &[usize],
    axes: Axes,
    default_axis: usize,
) -> Result<Region, SimError> {
    let Some(t) = tiling else {
        let len = shape.get(default_axis).copied().unwrap_or(1);
        return Ok(Region { axis: default_axis, tiles: vec![(0, len)] });
    };
    let rank = shape.len();
    let allowed = match axes {
        Axes::Any => t.axis < rank,
        Axes::AllButLast => t.axis + 1 < rank,
        Axes::Only(a) => t.axis == a && a < rank,
    };
    if !allowed {
        return invalid(format!("cannot tile axis {} of an output of rank {rank} ({axes:?})", t.axis));
    }
    let len = shape[t.axis];
    if let Some((s, e)) = t.tiles.iter().find(|(s, e)| s > e || *e > len) {
        return invalid(format!("tile {s}..{e} is out of bounds for axis {} of size {len}", t.axis));
    }
    Ok(Region { axis: t.axis, tiles: t.tiles.clone() })
}

/// Checks the op is not tiled.
pub(super) fn untiled(tiling: Option<&Tiling>) -> Result<(), SimError> {
    match tiling {
        Some(_) => invalid("this op cannot be tiled"),
        None => Ok(()),
    }
}

impl Region {
    /// The flat (row-major) index ranges of `shape` the region covers: for each index of the
    /// axes before `axis`, one contiguous run per tile.
    pub(super) fn segments(&self, shape: &[usize]) -> Vec<Range<usize>> {
        let outer: usize = shape.iter().take(self.axis).product();
        let mid = shape.get(self.axis).copied().unwrap_or(1);
        let inner: usize = shape.iter().skip(self.axis + 1).product();
        let mut out = Vec::with_capacity(outer * self.tiles.len());
        for o in 0..outer {
            for &(s, e) in &self.tiles {
                if s < e {
                    out.push((o * mid + s) * inner..(o * mid + e) * inner);
                }
            }
        }
        out
    }
}
