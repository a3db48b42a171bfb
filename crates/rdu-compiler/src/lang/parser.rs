//! Recursive-descent parser over the lexer, line by line; it checks syntax only, not meaning.
//!
//! A faulty line yields one diagnostic and parsing resumes at the next line, so every syntax
//! error of a file is reported. Codes:
//! - E0101 text that starts no token (from the lexer; the line is not parsed further)
//! - E0102 unexpected token: something else was expected here
//! - E0103 bad type: unknown dtype, or a dimension that is not a non-negative integer
//! - E0104 number out of range: an int that overflows i64 (or a dimension usize), a float
//!   that is not finite
//! - E0105 seed value (`= literal`) on a declaration that is not an `input`
//! - E0106 positional argument after an attribute
//! - E0107 attribute given twice in one statement
//! - E0108 literal lists nested more than 32 deep
use super::ast::{Arg, Attr, Decl, DeclKind, Item, Program, Span, Stmt};
use super::cursor::{literal, tensor_type, Cursor, Parsed};
use super::diag::Diagnostic;
use super::lexer::{lex, TokenKind};
use std::collections::BTreeSet;

/// Parses a whole program; on failure returns every syntax error found (E01xx), in order.
pub fn parse(text: &str) -> Result<Program, Vec<Diagnostic>> {
    let (tokens, mut diags) = lex(text);
    let breaks: Vec<u32> = tokens.iter().filter(|t| t.kind == TokenKind::Newline).map(|t| t.span.start).collect();
    let bad_lines: BTreeSet<usize> = diags.iter().map(|d| breaks.partition_point(|&b| b < d.span.start)).collect();
    let mut items = Vec::new();
    let lines = tokens.split(|t| t.kind == TokenKind::Newline);
    for (line_idx, line) in lines.enumerate() {
        if line.is_empty() || bad_lines.contains(&line_idx) {
            continue;
        }
        let eol = breaks.get(line_idx).map_or(text.len() as u32, |&b| b);
        let mut cursor = Cursor { toks: line, pos: 0, eol: Span { start: eol, end: eol } };
        match item(&mut cursor) {
            Ok(it) => items.push(it),
            Err(d) => diags.push(d),
        }
    }
    if diags.is_empty() {
        Ok(Program { items })
    } else {
        diags.sort_by_key(|d| d.span.start);
        Err(diags)
    }
}

fn item(c: &mut Cursor) -> Parsed<Item> {
    let first = c.toks[0];
    let binds = matches!(c.toks.get(1).map(|t| t.kind), Some(TokenKind::Eq | TokenKind::Comma | TokenKind::Arrow));
    if first.kind == TokenKind::Ident && !binds {
        let kind = match first.text {
            "input" => Some(DeclKind::Input),
            "weight" => Some(DeclKind::Weight),
            "shared" => Some(DeclKind::Shared),
            "state" => Some(DeclKind::State),
            _ => None,
        };
        if let Some(kind) = kind {
            return decl(c, kind).map(Item::Decl);
        }
        if first.text == "output" {
            c.bump();
            let name = c.name("the name of an output after `output`")?;
            c.end_of_line()?;
            return Ok(Item::Output(name));
        }
    }
    stmt(c).map(Item::Stmt)
}

fn decl(c: &mut Cursor, kind: DeclKind) -> Parsed<Decl> {
    let start = c.bump().expect("a keyword starts the line").span.start;
    let name = c.name(&format!("the declared name after `{}`", kind.keyword()))?;
    c.expect(TokenKind::Colon, "`:` after the declared name")?;
    let ty = tensor_type(c)?;
    let mut init = None;
    if c.eat(TokenKind::Eq) {
        let (lit, span) = literal(c, 0)?;
        if kind != DeclKind::Input {
            let msg = format!(
                "a seed value is allowed only on `input` declarations, not on `{}`; remove `= ...`",
                kind.keyword()
            );
            return Err(Diagnostic::new("E0105", msg, span));
        }
        init = Some(lit);
    }
    c.end_of_line()?;
    Ok(Decl { kind, name, ty, init, span: Span { start, end: c.prev_end() } })
}

fn stmt(c: &mut Cursor) -> Parsed<Stmt> {
    let mut binders = vec![c.name("a declaration, a statement or `output`")?];
    let update = loop {
        match c.peek().map(|t| t.kind) {
            Some(TokenKind::Comma) => {
                c.bump();
                binders.push(c.name("a binder after `,`")?);
            }
            Some(TokenKind::Eq) => break false,
            Some(TokenKind::Arrow) => break true,
            _ => return Err(c.unexpected("`=`, `<-` or `,` after a binder")),
        }
    };
    c.bump();
    let op = c.name("an op name")?;
    c.expect(TokenKind::LParen, "`(` after the op name")?;
    let (mut args, mut attrs) = (Vec::new(), Vec::<Attr>::new());
    if !c.eat(TokenKind::RParen) {
        loop {
            if c.at(TokenKind::Ident) && c.toks.get(c.pos + 1).is_some_and(|t| t.kind == TokenKind::Eq) {
                let a = attr(c)?;
                if let Some(first) = attrs.iter().find(|b| b.key.text == a.key.text) {
                    return Err(duplicate(first, &a));
                }
                attrs.push(a);
            } else {
                let arg = if c.at(TokenKind::Ident) {
                    Arg::Name(c.name("an argument")?)
                } else {
                    let (lit, span) = literal(c, 0)?;
                    Arg::Lit(lit, span)
                };
                if let Some(last) = attrs.last() {
                    return Err(positional_after_attr(&arg, last));
                }
                args.push(arg);
            }
            if !c.eat(TokenKind::Comma) {
                c.expect(TokenKind::RParen, "`,` or `)` after an argument")?;
                break;
            }
        }
    }
    let span = Span { start: binders[0].span.start, end: c.prev_end() };
    c.end_of_line()?;
    Ok(Stmt { binders, update, op, args, attrs, span })
}

fn attr(c: &mut Cursor) -> Parsed<Attr> {
    let key = c.name("an attribute key")?;
    c.expect(TokenKind::Eq, "`=` after the attribute key")?;
    let (value, vspan) = literal(c, 0)?;
    let span = Span { start: key.span.start, end: vspan.end };
    Ok(Attr { key, value, span })
}

fn duplicate(first: &Attr, again: &Attr) -> Diagnostic {
    let msg = format!("attribute `{}` is given twice: keep one", again.key.text);
    let mut d = Diagnostic::new("E0107", msg, again.key.span);
    d.labels.push((first.key.span, "first given here".to_string()));
    d
}

fn positional_after_attr(arg: &Arg, last: &Attr) -> Diagnostic {
    let span = match arg {
        Arg::Name(n) => n.span,
        Arg::Lit(_, s) => *s,
    };
    let msg = "positional argument after an attribute: move it before the `key=value` attributes";
    let mut d = Diagnostic::new("E0106", msg, span);
    d.labels.push((last.span, "attribute given here".to_string()));
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::ast::Literal;

    #[test]
    fn spans_cover_what_they_name() {
        let text = "weight W0 : q8[4, 8]\n  o0, S0 <- op(x0, [1, 2], k=neox)  # c\n";
        let p = parse(text).expect("parses");
        let at = |s: Span| &text[s.range()];
        let Item::Decl(d) = &p.items[0] else { panic!("a decl first") };
        assert_eq!((at(d.span), at(d.name.span)), ("weight W0 : q8[4, 8]", "W0"));
        let Item::Stmt(s) = &p.items[1] else { panic!("a statement second") };
        assert_eq!(at(s.span), "o0, S0 <- op(x0, [1, 2], k=neox)");
        assert_eq!((at(s.binders[1].span), at(s.op.span)), ("S0", "op"));
        assert!(s.update);
        let Arg::Lit(lit, span) = &s.args[1] else { panic!("a literal argument") };
        assert_eq!((lit, at(*span)), (&Literal::List(vec![Literal::Int(1), Literal::Int(2)]), "[1, 2]"));
        assert_eq!((at(s.attrs[0].span), at(s.attrs[0].key.span)), ("k=neox", "k"));
    }
}
