//! From a statement's op, attributes and literal arguments to a typed [`Op`]: the op table
//! reads them (`rdu_spatial::op`: which are required, which values they take); here its
//! faults become located messages. Operand names and types are not looked at here.

use crate::graph::Op;
use crate::lang::ast::{Arg, Literal, Span, Stmt};
use rdu_spatial::op::{AttrFault, AttrLit, Given};
use rdu_spatial::Op as Kind;

/// A problem with an attribute (or `reshape`'s shape literal): where, and why.
pub(super) struct AttrFaultAt {
    pub span: Span,
    pub message: String,
}

impl AttrLit for Literal {
    fn int(&self) -> Option<i64> {
        self.as_i64()
    }
    fn float(&self) -> Option<f64> {
        self.as_f64()
    }
    fn word(&self) -> Option<&str> {
        self.as_word()
    }
    fn counts(&self) -> Option<Vec<usize>> {
        self.as_usize_list()
    }
}

/// A literal as written, for messages.
fn show(l: &Literal) -> String {
    match l {
        Literal::Int(v) => v.to_string(),
        Literal::Float(v) => format!("{v:?}"),
        Literal::Word(w) => w.clone(),
        Literal::List(items) => format!("[{}]", items.iter().map(show).collect::<Vec<_>>().join(", ")),
    }
}

/// The op of `stmt` (of kind `kind`, its op name's) with its attributes, or every attribute
/// fault. The caller has checked that `reshape` has its shape literal (its second positional
/// argument).
pub(super) fn op_of(stmt: &Stmt, kind: Kind) -> Result<Op, Vec<AttrFaultAt>> {
    let literal = match stmt.args.get(1) {
        Some(Arg::Lit(lit, span)) if kind.takes_shape_literal() => Some((lit, *span)),
        _ => None,
    };
    let attrs = stmt.attrs.iter().map(|a| (a.key.text.as_str(), &a.value)).collect();
    let given = Given { attrs, literal: literal.map(|(lit, _)| lit) };
    Op::language(kind, &given).map_err(|faults| {
        let op = &stmt.op.text;
        let at = |i: usize| &stmt.attrs[i];
        let located = |fault: AttrFault| match fault {
            AttrFault::Missing(key) => Some((stmt.op.span, format!("`{op}` needs the attribute `{key}=...`"))),
            AttrFault::Bad { at: i, key, want } => {
                Some((at(i).span, format!("attribute `{key}` must be {want}, found {}", show(&at(i).value))))
            }
            AttrFault::Unknown { at: i } => {
                let takes: Vec<&str> = kind.attrs().iter().map(|k| k.name()).collect();
                let takes = if takes.is_empty() { "no attributes".to_string() } else { takes.join(", ") };
                Some((at(i).span, format!("`{op}` has no attribute `{}`; it takes {takes}", at(i).key.text)))
            }
            AttrFault::Twice { at: i, key } => {
                Some((at(i).span, format!("attribute `{key}` is given twice; keep one")))
            }
            AttrFault::BadLiteral { key, want } => {
                literal.map(|(lit, span)| (span, format!("the {key} of `{op}` must be {want}, found {}", show(lit))))
            }
            // The operand count reports a missing literal.
            AttrFault::MissingLiteral(_) => None,
        };
        faults.into_iter().filter_map(located).map(|(span, message)| AttrFaultAt { span, message }).collect()
    })
}
