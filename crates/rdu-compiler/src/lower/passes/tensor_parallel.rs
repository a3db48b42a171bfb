//! `tensor_parallel`: records how a tensor-parallel program runs over its chips — the number
//! of chips, every chip's slices of each split tensor (from the authored source), and the
//! stages that all-reduce. The program itself is already one chip's share (SPMD: every chip
//! runs it on its own slices), so no op changes; the simulator and the cost model read this.

use crate::lang::Slices;
use rdu_spatial::program::{Op, SpatialProgram, TpInfo, TpSplit};
use std::collections::BTreeMap;

/// Fills `program.tp` for `chips` chips with the source's `slices`; a one-chip program without
/// slices is left alone.
pub fn tensor_parallel(program: &mut SpatialProgram, chips: usize, slices: &BTreeMap<String, Slices>) {
    let all_reduce: Vec<String> = program
        .sections
        .iter()
        .flat_map(|s| &s.stages)
        .filter(|st| st.ops.iter().any(|op| op.op == Op::AllReduce))
        .map(|st| st.name.clone())
        .collect();
    if chips <= 1 && slices.is_empty() && all_reduce.is_empty() {
        return;
    }
    // In declaration order, so the text form follows the program.
    let splits = program
        .tensors
        .iter()
        .filter_map(|t| {
            slices.get(&t.name).map(|s| TpSplit { tensor: t.name.clone(), axis: s.axis, parts: s.parts.clone() })
        })
        .collect();
    program.tp = Some(TpInfo { chips: u32::try_from(chips).unwrap_or(u32::MAX), splits, all_reduce });
}
