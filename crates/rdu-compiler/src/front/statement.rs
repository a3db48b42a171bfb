//! One statement: its binders, op, operands and attributes are checked independently (so a
//! statement reports all of its faults), then, if all is well, its node is typed and added.
//! A failed statement poisons its fresh binders so that later readers stay quiet.

use super::attrs::op_of;
use super::codes;
use super::lift::{diagnostic, Bound, Ctx};
use super::ops::language_op;
use crate::graph::{Fault, Site, TypeError, ValueId};
use crate::lang::ast::{Arg, DeclKind, Name, Span, Stmt};
use crate::lang::Diagnostic;
use rdu_spatial::op::Key;
use rdu_spatial::Op;
use std::collections::BTreeSet;

/// The faults of one statement, each with its index and first binder.
struct Faults<'s> {
    index: usize,
    binder: Option<&'s str>,
    list: Vec<Diagnostic>,
}

impl Faults<'_> {
    fn add(&mut self, code: &'static str, message: String, span: Span) {
        self.list.push(diagnostic(code, message, span, Some(self.index), self.binder));
    }
}

impl Ctx {
    pub(super) fn statement(&mut self, index: usize, stmt: &Stmt) {
        let binder = stmt.binders.first().map(|b| b.text.as_str());
        let mut f = Faults { index, binder, list: Vec::new() };
        let target = self.check_binders(stmt, &mut f);
        let proto = language_op(&stmt.op.text);
        if proto.is_none() {
            f.add(codes::UNKNOWN_OP, unknown_op(&stmt.op.text), stmt.op.span);
        }
        let shape_literal = proto.is_some_and(Op::takes_shape_literal);
        let mut operands: Vec<&Name> = Vec::new();
        for (k, arg) in stmt.args.iter().enumerate() {
            match arg {
                Arg::Name(n) => operands.push(n),
                Arg::Lit(..) if shape_literal && k == 1 => {}
                Arg::Lit(_, span) => {
                    let message = format!("`{}` expects a tensor here, not a literal; bind it first", stmt.op.text);
                    f.add(codes::DTYPE, message, *span);
                }
            }
        }
        if let Some(proto) = proto {
            self.check_counts(stmt, proto, &operands, &mut f);
        }
        let mut inputs = Vec::with_capacity(operands.len());
        let mut poisoned = false;
        for name in &operands {
            match self.resolve(name, stmt, &mut f) {
                Some(Bound::Value(v)) => inputs.push(v),
                Some(Bound::Poisoned) => poisoned = true,
                None => {}
            }
        }
        let op = proto.and_then(|kind| match op_of(stmt, kind) {
            Ok(op) => Some(op),
            Err(faults) => {
                faults.into_iter().for_each(|a| f.add(codes::ATTRIBUTE, a.message, a.span));
                None
            }
        });
        let lifted = match op {
            Some(op) if f.list.is_empty() && !poisoned => {
                let names: Vec<&str> = stmt.binders.iter().map(|b| b.text.as_str()).collect();
                match self.graph.push(op, &inputs, &names, index, stmt.span) {
                    Ok(outs) => {
                        let before = f.list.len();
                        for (&v, b) in outs.iter().zip(&stmt.binders) {
                            let shape = &self.graph.ty(v).shape;
                            if super::decls::checked_numel(shape).is_none() {
                                let message = format!(
                                    "`{}` would hold {} elements, more than a 64-bit count holds",
                                    b.text,
                                    super::decls::shape_product(shape)
                                );
                                f.add(codes::SHAPE, message, b.span);
                            }
                        }
                        // An overflowing result poisons its binders (no further faults from it).
                        (f.list.len() == before).then_some(outs)
                    }
                    Err(e) => {
                        let span = site_span(stmt, &operands, &e);
                        f.add(code_of(&e), e.message, span);
                        None
                    }
                }
            }
            _ => None,
        };
        self.diags.append(&mut f.list);
        match lifted {
            Some(outs) => self.bind(stmt, target, &outs),
            None => {
                for b in &stmt.binders {
                    self.scope.entry(b.text.clone()).or_insert(Bound::Poisoned);
                }
            }
        }
    }

    /// Checks the binders; returns the declared state a valid `<-` updates.
    fn check_binders(&mut self, stmt: &Stmt, f: &mut Faults<'_>) -> Option<ValueId> {
        let (fresh, target) = match (stmt.update, stmt.binders.split_last()) {
            (true, Some((last, rest))) => (rest, Some(last)),
            _ => (&stmt.binders[..], None),
        };
        let mut state = None;
        if let Some(t) = target {
            match self.decls.get_mut(&t.text) {
                Some(d) if d.kind == DeclKind::State => {
                    d.written = true;
                    state = Some(d.value);
                }
                Some(d) => {
                    let kind = d.kind.keyword();
                    let message = format!(
                        "`<-` updates a state, but `{}` is declared as {kind}; use `=` with a fresh name",
                        t.text
                    );
                    f.add(codes::REBOUND, message, t.span);
                }
                None => {
                    let message = format!(
                        "`<-` updates a state, but `{}` is not a declared state; declare it or use `=`",
                        t.text
                    );
                    f.add(codes::REBOUND, message, t.span);
                }
            }
        }
        let mut seen = BTreeSet::new();
        target.map(|t| seen.insert(t.text.as_str()));
        for b in fresh {
            let message = if !seen.insert(b.text.as_str()) {
                format!("`{}` is bound twice in this statement; give each value its own name", b.text)
            } else if let Some(d) = self.decls.get(&b.text) {
                let hint =
                    if d.kind == DeclKind::State { "update it with `<-`" } else { "give this value a fresh name" };
                format!("`{}` is declared as {}; `=` binds a fresh name, so {hint}", b.text, d.kind.keyword())
            } else if self.scope.contains_key(&b.text) {
                let at = self.bound_at.get(&b.text).map_or(String::new(), |i| format!(" by statement {i}"));
                format!("`{}` is already bound{at}; give this value a fresh name", b.text)
            } else {
                continue;
            };
            f.add(codes::REBOUND, message, b.span);
        }
        state
    }

    /// The number of operands (and `reshape`'s shape literal) and of binders.
    fn check_counts(&mut self, stmt: &Stmt, proto: Op, operands: &[&Name], f: &mut Faults<'_>) {
        let (least, most) = proto.arity();
        let op = &stmt.op.text;
        if operands.len() < least {
            let want = if most == usize::MAX { format!("at least {least}") } else { least.to_string() };
            f.add(codes::ARITY, format!("`{op}` takes {want} tensor operands, found {}", operands.len()), stmt.op.span);
        } else if operands.len() > most {
            let message =
                format!("`{op}` takes at most {most} tensor operands, found {}; remove the extra ones", operands.len());
            f.add(codes::ARITY, message, operands[most].span);
        }
        if proto.takes_shape_literal() && !matches!(stmt.args.get(1), Some(Arg::Lit(..))) {
            let message = format!("`{op}` takes a tensor and a shape list: `{op}(x, [d0, d1])`");
            f.add(codes::ARITY, message, stmt.op.span);
        }
        let n = proto.n_outputs();
        if stmt.binders.len() != n {
            let span = match (stmt.binders.first(), stmt.binders.last()) {
                (Some(a), Some(b)) => Span { start: a.span.start, end: b.span.end },
                _ => stmt.span,
            };
            let message = format!("`{op}` binds {n} value(s), but {} binder(s) are given", stmt.binders.len());
            f.add(codes::ARITY, message, span);
        }
    }

    /// The current binding of an operand name, or a fault.
    fn resolve(&mut self, name: &Name, stmt: &Stmt, f: &mut Faults<'_>) -> Option<Bound> {
        if let Some(d) = self.decls.get_mut(&name.text) {
            d.read = true;
        }
        if let Some(b) = self.scope.get(&name.text) {
            return Some(*b);
        }
        let n = &name.text;
        if stmt.binders.iter().any(|b| b.text == *n) {
            let message = format!("`{n}` reads itself: a statement cannot use the value it defines");
            f.add(codes::SELF_READ, message, name.span);
        } else if let Some(at) = self.bound_at.get(n) {
            let message = format!("`{n}` is used before its definition in statement {at}; move that statement up");
            f.add(codes::UNDEFINED, message, name.span);
        } else {
            let message = format!("`{n}` is not defined; declare it or bind it in an earlier statement");
            f.add(codes::UNDEFINED, message, name.span);
        }
        None
    }

    /// Binds a lifted statement's outputs; the last one updates the state of a `<-`.
    fn bind(&mut self, stmt: &Stmt, state: Option<ValueId>, outs: &[ValueId]) {
        let n_fresh = if stmt.update { stmt.binders.len().saturating_sub(1) } else { stmt.binders.len() };
        for (b, &v) in stmt.binders[..n_fresh].iter().zip(outs) {
            self.scope.insert(b.text.clone(), Bound::Value(v));
        }
        let (Some(initial), Some(&last), Some(target)) = (state, outs.last(), stmt.binders.last()) else { return };
        if self.graph.write_back(initial, last) {
            self.scope.insert(target.text.clone(), Bound::Value(last));
        } else {
            let (declared, written) = (self.graph.ty(initial).clone(), self.graph.ty(last).clone());
            let message = format!(
                "state `{}` is declared {declared} but is written back as {written}; write back a value of its declared type",
                target.text
            );
            self.composition_fault(codes::STATE_NOT_WRITTEN_BACK, message, target.span, &target.text);
        }
    }
}

fn code_of(e: &TypeError) -> &'static str {
    match e.fault {
        Fault::Arity => codes::ARITY,
        Fault::Shape => codes::SHAPE,
        Fault::DType => codes::DTYPE,
        Fault::Attr => codes::ATTRIBUTE,
    }
}

/// The span a type error points at: the operand, the attribute, or the op name.
fn site_span(stmt: &Stmt, operands: &[&Name], e: &TypeError) -> Span {
    match e.site {
        Site::Arg(i) => operands.get(i).map_or(stmt.op.span, |n| n.span),
        Site::Attr(Key::Shape) if language_op(&stmt.op.text).is_some_and(Op::takes_shape_literal) => {
            match stmt.args.get(1) {
                Some(Arg::Lit(_, span)) => *span,
                _ => stmt.op.span,
            }
        }
        Site::Attr(key) => stmt.attrs.iter().find(|a| a.key.text == key.name()).map_or(stmt.op.span, |a| a.span),
        Site::Op => stmt.op.span,
    }
}

/// "unknown op" with the nearest op name when one is close.
fn unknown_op(name: &str) -> String {
    let nearest = Op::language().map(|op| (distance(name, op.name()), op.name())).min();
    match nearest {
        Some((d, op)) if d <= 2 => format!("unknown op `{name}`; did you mean `{op}`?"),
        _ => format!("unknown op `{name}`; the ops are listed in docs/LANGUAGE.md"),
    }
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(prev + usize::from(ca != cb));
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}
