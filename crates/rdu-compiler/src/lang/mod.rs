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
use std::sync::{Arc, OnceLock};

/// A program as authored: its text, the weights it reads as stored Q8_0, and — for a
/// tensor-parallel program — every chip's slices of each split tensor it declares.
///
/// The text is parsed once, the first time it is asked for ([`Source::program`]), and the
/// parsed form travels with the source (clones share it); the text cannot change after.
#[derive(Clone, Debug, Default)]
pub struct Source {
    text: String,
    pub q8: BTreeSet<String>,
    /// Split tensor (weight or state) → every chip's slices of the full (one-chip) tensor.
    /// Empty for a program that runs on one chip; a declared tensor absent here is replicated.
    pub slices: BTreeMap<String, Slices>,
    parsed: Arc<OnceLock<Result<Program, Vec<Diagnostic>>>>,
}

impl Source {
    /// A one-chip program: no slices.
    pub fn new(text: String, q8: BTreeSet<String>) -> Source {
        Source::split(text, q8, BTreeMap::new())
    }

    /// A program whose split tensors have `slices` (empty: one chip).
    pub fn split(text: String, q8: BTreeSet<String>, slices: BTreeMap<String, Slices>) -> Source {
        Source { text, q8, slices, parsed: Arc::default() }
    }

    /// The same text (and parsed form) with another Q8_0 set and slices.
    pub fn with_storage(self, q8: BTreeSet<String>, slices: BTreeMap<String, Slices>) -> Source {
        Source { q8, slices, ..self }
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

/// Two sources are equal when their text, Q8_0 set and slices are (parsed or not).
impl PartialEq for Source {
    fn eq(&self, other: &Source) -> bool {
        (&self.text, &self.q8, &self.slices) == (&other.text, &other.q8, &other.slices)
    }
}

impl Eq for Source {}

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
