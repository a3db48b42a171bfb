//! Diagnostics as plain data: a stable code, a message, the primary span and secondary
//! labels. Only the CLI renders them.

use super::ast::Span;

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    /// Stable code: E01xx syntax, E02xx lift, E03xx kinds, E04xx lowering, E05xx certification.
    pub code: &'static str,
    pub message: String,
    pub span: Span,
    pub labels: Vec<(Span, String)>,
    /// For statement-level faults: the statement's index among the program's statements.
    pub index: Option<usize>,
    /// For statement-level faults: the statement's first binder.
    pub binder: Option<String>,
}

impl Diagnostic {
    pub fn new(code: &'static str, message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic { code, message: message.into(), span, labels: Vec::new(), index: None, binder: None }
    }
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error[{}]: {}", self.code, self.message)?;
        if let Some(i) = self.index {
            write!(f, " (statement {i}")?;
            if let Some(b) = &self.binder {
                write!(f, ", `{b}`")?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}
