//! `lift`: declarations, then every statement in order, then the composition checks
//! (outputs produced, states written back, declarations used). Collects every fault.

use super::codes;
use super::Refusal;
use crate::graph::{Graph, ValueId};
use crate::lang::ast::{DeclKind, Item, Program, Span};
use crate::lang::Diagnostic;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Lifts `program` to a typed graph, or refuses it with every fault it found.
///
/// Declarations are taken first wherever they appear, and `output` lines last: only the
/// order of statements matters.
pub fn lift(program: &Program) -> Result<Graph, Refusal> {
    let mut ctx = Ctx::default();
    ctx.declare_all(program);
    let stmts: Vec<_> = program.stmts().collect();
    for (index, stmt) in stmts.iter().enumerate() {
        for b in &stmt.binders {
            ctx.bound_at.entry(b.text.clone()).or_insert(index);
        }
    }
    for (index, stmt) in stmts.into_iter().enumerate() {
        ctx.statement(index, stmt);
    }
    ctx.outputs(program);
    ctx.composition();
    if ctx.diags.is_empty() {
        Ok(ctx.graph)
    } else {
        Err(Refusal { diagnostics: ctx.diags })
    }
}

/// What a name currently stands for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Bound {
    Value(ValueId),
    /// Bound by a statement that failed: defined, of unknown type. Readers fail silently.
    Poisoned,
}

/// How a declared tensor is used.
pub(super) struct DeclUse {
    pub value: ValueId,
    pub kind: DeclKind,
    pub span: Span,
    /// Read by a statement or named by an `output`.
    pub read: bool,
    /// The target of a `<-` (states only).
    pub written: bool,
}

#[derive(Default)]
pub(super) struct Ctx {
    pub graph: Graph,
    /// Lookups only (never iterated), so hashed: a batched program binds names per sequence.
    pub scope: HashMap<String, Bound>,
    /// Declared tensors by name (the first declaration of a name).
    pub decls: BTreeMap<String, DeclUse>,
    /// The first statement binding each name, for "used before its definition" messages.
    pub bound_at: HashMap<String, usize>,
    pub diags: Vec<Diagnostic>,
}

/// A diagnostic with its statement index (if any) and binder.
pub(super) fn diagnostic(
    code: &'static str,
    message: String,
    span: Span,
    index: Option<usize>,
    binder: Option<&str>,
) -> Diagnostic {
    let mut d = Diagnostic::new(code, message, span);
    d.index = index;
    d.binder = binder.map(str::to_string);
    d
}

impl Ctx {
    /// A composition fault about the tensor `name`.
    pub(super) fn composition_fault(&mut self, code: &'static str, message: String, span: Span, name: &str) {
        self.diags.push(diagnostic(code, message, span, None, Some(name)));
    }

    /// Resolves every `output` (after all statements; each name once).
    fn outputs(&mut self, program: &Program) {
        let mut seen = BTreeSet::new();
        for item in &program.items {
            let Item::Output(name) = item else { continue };
            if !seen.insert(name.text.clone()) {
                continue;
            }
            if let Some(d) = self.decls.get_mut(&name.text) {
                d.read = true;
            }
            match self.scope.get(&name.text) {
                Some(Bound::Value(v)) => self.graph.output(&name.text, *v),
                Some(Bound::Poisoned) => {}
                None => {
                    let message = format!("output `{}` is never produced; bind it or remove the output", name.text);
                    self.composition_fault(codes::OUTPUT_NOT_PRODUCED, message, name.span, &name.text);
                }
            }
        }
    }

    /// States read but never written back; declarations never used.
    fn composition(&mut self) {
        let mut faults = Vec::new();
        for (name, d) in &self.decls {
            if d.kind == DeclKind::State && d.read && !d.written {
                let message = format!("state `{name}` is read but never written back; update it with `{name} <- ...`");
                faults.push((codes::STATE_NOT_WRITTEN_BACK, message, d.span, name.clone()));
            } else if !d.read && !d.written {
                let message = format!("{} `{name}` is declared but never used; remove it", d.kind.keyword());
                faults.push((codes::UNUSED, message, d.span, name.clone()));
            }
        }
        // In source order, not name order.
        faults.sort_by_key(|f| f.2.start);
        for (code, message, span, name) in faults {
            self.composition_fault(code, message, span, &name);
        }
    }
}
