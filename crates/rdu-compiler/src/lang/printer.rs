//! TODO(helper): canonical printer.
use super::ast::Program;

/// Prints a program in canonical form; `parse(print(p)) == p`.
pub fn print(_p: &Program) -> String {
    todo!()
}
