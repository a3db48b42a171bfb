//! The program language (`docs/LANGUAGE.md`): syntax tree, lexer, parser, printer,
//! diagnostics, and the shape digest and renaming that decide layer kinds.

pub mod ast;
mod cursor;
pub mod diag;
pub mod digest;
pub mod lexer;
pub mod parser;
pub mod printer;

pub use ast::Program;
pub use diag::Diagnostic;
pub use digest::{renaming, shape_digest, Digest};
pub use parser::parse;
pub use printer::print;

use std::collections::{BTreeMap, BTreeSet};

/// A program as authored: its text, the weights it reads as stored Q8_0, and — for a
/// tensor-parallel program — every chip's slices of each split tensor it declares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Source {
    pub text: String,
    pub q8: BTreeSet<String>,
    /// Split tensor (weight or state) → every chip's slices of the full (one-chip) tensor.
    /// Empty for a program that runs on one chip; a declared tensor absent here is replicated.
    pub slices: BTreeMap<String, Slices>,
}

impl Source {
    /// A one-chip program: no slices.
    pub fn new(text: String, q8: BTreeSet<String>) -> Source {
        Source { text, q8, slices: BTreeMap::new() }
    }
}

/// Which part of a full tensor every chip holds: chip `c` holds the half-open ranges
/// `parts[c]` of axis `axis`, concatenated in order; every other axis whole.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slices {
    pub axis: usize,
    pub parts: Vec<Vec<(usize, usize)>>,
}

impl Slices {
    /// The extent of `axis` one chip holds (chip 0's; every chip holds the same).
    pub fn local_extent(&self) -> usize {
        self.parts.first().map_or(0, |p| p.iter().map(|(a, b)| b - a).sum())
    }
}
