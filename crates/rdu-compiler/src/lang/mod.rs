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

pub use rdu_spatial::program::Storage;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

/// A program as authored: its text, the weights it reads as stored in a block format (Q8_0,
/// FP8, MXFP4) with each one's format, and — for a tensor-parallel program — every chip's
/// slices of each split tensor it declares.
///
/// The text is parsed once, the first time it is asked for ([`Source::program`]), and the
/// parsed form travels with the source (clones share it); the text cannot change after.
#[derive(Clone, Debug, Default)]
pub struct Source {
    text: String,
    /// Weight → its block format (`Storage::Q8_0`, `Fp8 { .. }`, `Mxfp4`): the storage set.
    /// A declared weight absent here is read dense.
    pub stored: BTreeMap<String, Storage>,
    /// Split tensor (weight or state) → every chip's slices of the full (one-chip) tensor.
    /// Empty for a program that runs on one chip; a declared tensor absent here is replicated.
    pub slices: BTreeMap<String, Slices>,
    parsed: Arc<OnceLock<Result<Program, Vec<Diagnostic>>>>,
}

impl Source {
    /// A one-chip program: no slices.
    pub fn new(text: String, stored: BTreeMap<String, Storage>) -> Source {
        Source::split(text, stored, BTreeMap::new())
    }

    /// A one-chip program whose `q8` weights are stored Q8_0 (and no other in a block format).
    pub fn with_q8(text: String, q8: &BTreeSet<String>) -> Source {
        Source::new(text, q8.iter().map(|n| (n.clone(), Storage::Q8_0)).collect())
    }

    /// A program whose split tensors have `slices` (empty: one chip).
    pub fn split(text: String, stored: BTreeMap<String, Storage>, slices: BTreeMap<String, Slices>) -> Source {
        Source { text, stored, slices, parsed: Arc::default() }
    }

    /// The same text (and parsed form) with another storage set and slices.
    pub fn with_storage(self, stored: BTreeMap<String, Storage>, slices: BTreeMap<String, Slices>) -> Source {
        Source { stored, slices, ..self }
    }

    /// The weights stored Q8_0.
    pub fn q8(&self) -> BTreeSet<String> {
        self.stored.iter().filter(|(_, s)| **s == Storage::Q8_0).map(|(n, _)| n.clone()).collect()
    }

    /// The program text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The parsed program, or the parser's diagnostics; parsed on the first call only.
    pub fn program(&self) -> Result<&Program, &[Diagnostic]> {
        self.parsed.get_or_init(|| parse(&self.text)).as_ref().map_err(Vec::as_slice)
    }
}

/// Two sources are equal when their text, storage set and slices are (parsed or not).
impl PartialEq for Source {
    fn eq(&self, other: &Source) -> bool {
        (&self.text, &self.stored, &self.slices) == (&other.text, &other.stored, &other.slices)
    }
}

impl Eq for Source {}

/// Which part of a full tensor every chip holds: chip `c` holds the half-open ranges
/// `parts[c]` of axis `axis`, concatenated in order; every other axis whole. `stored`: the
/// full tensor holds only that many values of the axis (as the checkpoint stores them), the
/// deployment zero-pads it to the end of the last range (`rdu_spatial::program::TpSplit::stored`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slices {
    pub axis: usize,
    pub parts: Vec<Vec<(usize, usize)>>,
    pub stored: Option<usize>,
}

impl Slices {
    /// The extent of `axis` one chip holds (chip 0's; every chip holds the same).
    pub fn local_extent(&self) -> usize {
        self.parts.first().map_or(0, |p| p.iter().map(|(a, b)| b - a).sum())
    }

    /// Unpadded slices: chip `c` the ranges `parts[c]` of `axis`.
    pub fn new(axis: usize, parts: Vec<Vec<(usize, usize)>>) -> Slices {
        Slices { axis, parts, stored: None }
    }

    /// The end of the last range: the extent of the (padded) axis the ranges lie in.
    pub fn end(&self) -> usize {
        self.parts.iter().flatten().map(|r| r.1).max().unwrap_or(0)
    }
}
