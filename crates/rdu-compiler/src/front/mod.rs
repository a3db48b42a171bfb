//! Whole-program front end: [`lift`] turns a parsed program into a typed [`Graph`], or
//! refuses it with a [`Refusal`] listing every statement it could not lift and every
//! composition fault — never only the first.
//!
//! Statement faults carry the statement's index (among statements, 0-based) and first
//! binder; composition faults carry no index and the tensor's name as binder. Codes:
//!
//! | code | fault |
//! |---|---|
//! | E0201 | unknown op |
//! | E0202 | wrong number of operands, or of binders |
//! | E0203 | shape mismatch |
//! | E0204 | dtype mismatch (also: a literal where a tensor is expected, `q8` on a non-weight) |
//! | E0205 | a name used before its definition, or never defined |
//! | E0206 | a name bound twice, `=` binding a declared name, or `<-` to a name that is not a declared state |
//! | E0207 | a bad, missing or unknown attribute (also: a seed that does not fit its declaration) |
//! | E0208 | a statement reading the value it defines |
//! | E0210 | an `output` never produced |
//! | E0211 | a state read but never written back, or written back with another shape or dtype |
//! | E0212 | a declared tensor never used |
//! | E0213 | a name declared twice |
//!
//! [`Graph`]: crate::graph::Graph

mod attrs;
mod decls;
mod lift;
mod ops;
mod statement;

pub use lift::lift;

use crate::lang::Diagnostic;
use std::fmt;

/// The stable codes of lift diagnostics.
pub mod codes {
    pub const UNKNOWN_OP: &str = "E0201";
    pub const ARITY: &str = "E0202";
    pub const SHAPE: &str = "E0203";
    pub const DTYPE: &str = "E0204";
    pub const UNDEFINED: &str = "E0205";
    pub const REBOUND: &str = "E0206";
    pub const ATTRIBUTE: &str = "E0207";
    pub const SELF_READ: &str = "E0208";
    pub const OUTPUT_NOT_PRODUCED: &str = "E0210";
    pub const STATE_NOT_WRITTEN_BACK: &str = "E0211";
    pub const UNUSED: &str = "E0212";
    pub const DUPLICATE_DECL: &str = "E0213";
}

/// Why a program was not lifted: every fault found, declarations first, then statements in
/// order, then composition faults.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for Refusal {
    /// One line per diagnostic.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

/// The typed op a lowered kernel op stands for, read exactly as the language reads a
/// statement's op name, attributes and literal arguments (`reshape`'s shape), or every fault
/// on one line. Certification compares it with the lifted source's node.
pub fn kernel_op(op: &rdu_spatial::program::KernelOp) -> Result<crate::graph::Op, String> {
    use crate::lang::ast::{Arg, Attr, Literal, Name, Span, Stmt};
    use rdu_spatial::program::{Arg as KArg, Lit};
    fn literal(l: &Lit) -> Literal {
        match l {
            Lit::Int(v) => Literal::Int(*v),
            Lit::Float(v) => Literal::Float(*v),
            Lit::Word(w) => Literal::Word(w.clone()),
            Lit::List(items) => Literal::List(items.iter().map(literal).collect()),
        }
    }
    if !op.op.in_language() {
        return Err(format!("`{}` is not an op of the language", op.op));
    }
    let stmt = Stmt {
        binders: op.outs.iter().map(Name::new).collect(),
        update: op.update,
        op: Name::new(op.op.name()),
        args: op
            .args
            .iter()
            .map(|a| match a {
                KArg::Tensor(n) => Arg::Name(Name::new(n.clone())),
                KArg::Lit(l) => Arg::Lit(literal(l), Span::default()),
            })
            .collect(),
        attrs: op
            .attrs
            .iter()
            .map(|(k, v)| Attr { key: Name::new(k.clone()), value: literal(v), span: Span::default() })
            .collect(),
        span: Span::default(),
    };
    attrs::op_of(&stmt, op.op).map_err(|faults| faults.into_iter().map(|f| f.message).collect::<Vec<_>>().join("; "))
}
