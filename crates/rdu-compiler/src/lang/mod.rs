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

use std::collections::BTreeSet;

/// A program as authored: its text, and the weights it reads as stored Q8_0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub text: String,
    pub q8: BTreeSet<String>,
}
