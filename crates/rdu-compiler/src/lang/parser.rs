//! TODO(helper): recursive-descent parser over the lexer.
use super::ast::Program;
use super::diag::Diagnostic;

/// Parses a whole program; on failure returns every syntax error found (E01xx).
pub fn parse(_text: &str) -> Result<Program, Vec<Diagnostic>> {
    todo!()
}
