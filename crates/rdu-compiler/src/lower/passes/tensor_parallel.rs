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
            slices.get(&t.name).map(|s| TpSplit {
                tensor: t.name.clone(),
                axis: s.axis,
                parts: s.parts.clone(),
                stored: s.stored,
            })
        })
        .collect();
    program.tp = Some(TpInfo { chips: u32::try_from(chips).unwrap_or(u32::MAX), splits, all_reduce });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-chip embedding program as `rdu lower` writes it (the golden file).
    const EMBED: &str = include_str!("../../../../../tests/golden/tiny-qwen3-next/decode/programs/embed.spatial");

    #[test]
    fn a_program_over_several_chips_records_them_even_without_slices_or_all_reduces() {
        let mut program = rdu_spatial::text::parse(EMBED).expect("the golden program parses");
        assert!(program.tp.is_none());
        tensor_parallel(&mut program, 1, &BTreeMap::new());
        assert!(program.tp.is_none(), "one chip, nothing split: left alone");
        tensor_parallel(&mut program, 2, &BTreeMap::new());
        let tp = program.tp.expect("two chips are recorded");
        assert_eq!((tp.chips, tp.splits.len(), tp.all_reduce.len()), (2, 0, 0));
    }
}
