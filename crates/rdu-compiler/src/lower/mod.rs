//! Lowering: a lifted layer program becomes a `SpatialProgram` for a chip, through one
//! pipeline of named passes (`lower`). A model's deployment is built from it in `crate::deploy`.

pub mod cost;
pub mod passes;
pub mod work;

use crate::graph::Graph;
use crate::lang::ast::Program;
use crate::lang::Slices;
use rdu_spatial::chip::Chip;
use rdu_spatial::program::{SpatialProgram, Storage};
use std::collections::BTreeMap;

/// The passes of `lower`, in order; `--dump-after` takes one of these names.
pub const PASSES: [&str; 7] = ["select", "from_stored", "fuse", "tile", "section", "place", "tensor_parallel"];

/// How a program is split over chips: their number and every chip's slices of each split
/// tensor (`lang::Source::slices`). One chip, nothing split, for every cut but tensor-parallel.
#[derive(Clone, Copy, Debug)]
pub struct Split<'s> {
    pub chips: usize,
    pub slices: &'s BTreeMap<String, Slices>,
}

/// Lowers one lifted program for `chip`. `stored` is the program's storage set (each weight
/// stored in a block format, and its format: `Source::stored`); `dump` is
/// called after every pass with its name and the program so far (for `--dump-after`).
pub fn lower(
    name: &str,
    program: &Program,
    graph: &Graph,
    stored: &BTreeMap<String, Storage>,
    chip: &Chip,
    dump: &mut dyn FnMut(&str, &SpatialProgram),
) -> SpatialProgram {
    let none = BTreeMap::new();
    lower_split(name, program, graph, stored, Split { chips: 1, slices: &none }, chip, dump)
}

/// `lower` for a program that runs over `split.chips` chips, each on its slices.
///
/// In tests and debug builds (`cfg!(debug_assertions)`) the structure check runs after every
/// pass (`after_pass`), so a pass that breaks the program is named where it does.
pub fn lower_split(
    name: &str,
    program: &Program,
    graph: &Graph,
    stored: &BTreeMap<String, Storage>,
    split: Split<'_>,
    chip: &Chip,
    dump: &mut dyn FnMut(&str, &SpatialProgram),
) -> SpatialProgram {
    let mut dump = |pass: &str, p: &SpatialProgram| {
        after_pass(name, pass, p, graph);
        dump(pass, p)
    };
    let mut p = passes::select::select(name, &chip.name, program, graph);
    dump("select", &p);
    passes::from_stored(&mut p, stored);
    dump("from_stored", &p);
    passes::fuse::fuse(&mut p);
    dump("fuse", &p);
    passes::tile::tile(&mut p, chip);
    dump("tile", &p);
    passes::section::section(&mut p, chip);
    dump("section", &p);
    passes::place::place(&mut p, chip);
    dump("place", &p);
    passes::tensor_parallel::tensor_parallel(&mut p, split.chips, split.slices);
    dump("tensor_parallel", &p);
    p
}

/// In tests and debug builds, the structure check of `program` after `pass` (every fault, not
/// only the first): a pass must leave a program whose kernel ops are its source statements and
/// whose reads, folds, tiles and states are sound. A fault here is a bug of the pass, never of
/// the input (which lifted), so it panics naming the pass; release builds skip the check and
/// leave its faults to certification.
fn after_pass(name: &str, pass: &str, program: &SpatialProgram, graph: &Graph) {
    if !cfg!(debug_assertions) {
        return;
    }
    let faults = crate::certify::structure_faults(program, graph);
    assert!(faults.is_empty(), "program `{name}` after pass `{pass}`: {}", faults.join("; "));
}
