//! Prints a program in canonical form (one item per line, single spaces); no comments.
//!
//! `parse(print(p)) == p` for every program `parse` can produce: names and words are
//! identifiers, floats are finite, and no positional argument is an `Arg::Lit` of a bare
//! word (that prints as a name and reads back as `Arg::Name`).
use super::ast::{Arg, Decl, Item, Literal, Program, Stmt};
use std::fmt::Write;

/// Prints a program in canonical form; `parse(print(p)) == p`.
pub fn print(p: &Program) -> String {
    let mut out = String::new();
    for item in &p.items {
        match item {
            Item::Decl(d) => decl(&mut out, d),
            Item::Stmt(s) => stmt(&mut out, s),
            Item::Output(n) => out.push_str(&format!("output {n}")),
        }
        out.push('\n');
    }
    out
}

/// A literal in canonical form: ints as ints, floats in shortest round-trip form that always
/// holds a '.' or an exponent (`1e-6`, `0.25`, `8.0`), lists as `[4, 16]`.
pub fn literal(lit: &Literal) -> String {
    let mut out = String::new();
    push_literal(&mut out, lit);
    out
}

fn decl(out: &mut String, d: &Decl) {
    let dims: Vec<String> = d.ty.shape.iter().map(|v| v.to_string()).collect();
    let _ = write!(out, "{} {} : {}[{}]", d.kind.keyword(), d.name, d.ty.dtype.keyword(), dims.join(", "));
    if let Some(init) = &d.init {
        out.push_str(" = ");
        push_literal(out, init);
    }
}

fn stmt(out: &mut String, s: &Stmt) {
    let binders: Vec<&str> = s.binders.iter().map(|b| b.text.as_str()).collect();
    let arrow = if s.update { "<-" } else { "=" };
    let _ = write!(out, "{} {arrow} {}(", binders.join(", "), s.op);
    let mut first = true;
    let mut sep = |out: &mut String| {
        if !std::mem::take(&mut first) {
            out.push_str(", ");
        }
    };
    for arg in &s.args {
        sep(out);
        match arg {
            Arg::Name(n) => out.push_str(&n.text),
            Arg::Lit(lit, _) => push_literal(out, lit),
        }
    }
    for attr in &s.attrs {
        sep(out);
        let _ = write!(out, "{}=", attr.key);
        push_literal(out, &attr.value);
    }
    out.push(')');
}

fn push_literal(out: &mut String, lit: &Literal) {
    match lit {
        Literal::Int(v) => {
            let _ = write!(out, "{v}");
        }
        // `{:?}` is the shortest text that reads back as the same f64; it switches to
        // exponent form for very small and large magnitudes and keeps ".0" on whole numbers.
        Literal::Float(v) => {
            let _ = write!(out, "{v:?}");
        }
        Literal::Word(w) => out.push_str(w),
        Literal::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_literal(out, item);
            }
            out.push(']');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_shortest_and_relex_as_floats() {
        let cases =
            [(1e-6, "1e-6"), (0.25, "0.25"), (8.0, "8.0"), (-0.0, "-0.0"), (1e300, "1e300"), (1.5e-7, "1.5e-7")];
        for (v, want) in cases {
            assert_eq!(literal(&Literal::Float(v)), want);
        }
        let nested = Literal::List(vec![Literal::Int(4), Literal::List(vec![Literal::Word("neox".into())])]);
        assert_eq!(literal(&nested), "[4, [neox]]");
    }
}
