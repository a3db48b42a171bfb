//! Tiling: every product and attention is split along its output's parallel axis into tiles
//! whose slice of weights fits the PMUs a tile streams through. Elementwise epilogues stay
//! whole; ops that cannot be tiled are left alone.

use rdu_spatial::chip::Chip;
use rdu_spatial::op::Cost;
use rdu_spatial::program::{Arg, SpatialProgram, Tiling};
use std::collections::HashMap;

/// At most this many tiles per op: beyond it a tile spans several PMUs' worth of weights.
pub const MAX_TILES: usize = 256;

/// PMUs whose SRAM one tile's weight slice may fill.
const PMUS_PER_TILE: u64 = 4;

/// Chooses the tiling of every tileable heavy op: which ops tile, and how, is their cost class's
/// (the op table's `.cost(…)`), never an op's name.
pub fn tile(program: &mut SpatialProgram, chip: &Chip) {
    let shapes: HashMap<String, Vec<usize>> =
        program.tensors.iter().map(|t| (t.name.clone(), t.shape.clone())).collect();
    let shape_of = |name: &str| shapes.get(name).cloned();
    let budget = chip.pmu_sram_bytes * PMUS_PER_TILE;
    for section in &mut program.sections {
        for stage in &mut section.stages {
            for op in &mut stage.ops {
                let Some(out) = op.outs.first().and_then(|o| shape_of(o)) else { continue };
                let arg_shape = |i: usize| match op.args.get(i) {
                    Some(Arg::Tensor(n)) => shape_of(n),
                    _ => None,
                };
                // (axis, bytes one output index along it needs to stream)
                let plan = match op.op.cost() {
                    Cost::Product => arg_shape(1).map(|w| (1, 2 * w.last().copied().unwrap_or(1) as u64)),
                    Cost::HeadProduct => arg_shape(1).map(|w| (1, 2 * (w[1] * w[2]) as u64)),
                    Cost::Attention(_) => {
                        arg_shape(1).map(|k| (1, 2 * k.iter().product::<usize>() as u64 / out[1].max(1) as u64))
                    }
                    // A head's share of the cached latents and its rows of both up-projections.
                    Cost::AttentionUp(_) => match (arg_shape(1), arg_shape(2), arg_shape(3)) {
                        (Some(c), Some(k), Some(v)) => {
                            let cache = c.iter().product::<usize>() / out[1].max(1);
                            Some((1, 2 * (cache + k[1] * k[2] + v[1] * v[2]) as u64))
                        }
                        _ => None,
                    },
                    // Every expert a step's rows select streams through each tile:
                    // `min(rows · top_k, n_experts)` experts' three matrices (`work::op_work`).
                    Cost::Experts => arg_shape(3).map(|w| {
                        let top_k = arg_shape(1).and_then(|r| r.last().copied()).unwrap_or(1);
                        let rows = arg_shape(0).and_then(|x| x.first().copied()).unwrap_or(1);
                        let touched = (rows * top_k).clamp(1, w[0].max(1));
                        (1, 2 * 3 * (w[1] * touched) as u64)
                    }),
                    Cost::Elementwise | Cost::Lookup | Cost::Collective | Cost::CacheWrite | Cost::Recurrent => None,
                };
                let Some((axis, per_index)) = plan else { continue };
                let extent = out[axis];
                let mut size = ((budget / per_index.max(1)) as usize).clamp(1, extent);
                size = size.max(extent.div_ceil(MAX_TILES));
                op.tiling = Some(Tiling { axis, tiles: ranges(extent, size) });
            }
        }
    }
}

/// `0..size, size..2·size, …` covering `0..extent` exactly once.
pub fn ranges(extent: usize, size: usize) -> Vec<(usize, usize)> {
    (0..extent).step_by(size.max(1)).map(|s| (s, (s + size).min(extent))).collect()
}
