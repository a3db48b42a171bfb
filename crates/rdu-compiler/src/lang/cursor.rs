//! A cursor over the tokens of one line, and the parsers of the smallest pieces: types and
//! literals. Statements and declarations are in `parser`.
use super::ast::{DType, Literal, Name, Span, TensorType};
use super::diag::Diagnostic;
use super::lexer::{Token, TokenKind};

/// How deeply literal lists may nest (`[[1]]` is depth 2).
pub(super) const MAX_DEPTH: usize = 32;

pub(super) type Parsed<T> = Result<T, Diagnostic>;

/// The tokens of one line (without its line break) and a position in them.
pub(super) struct Cursor<'t, 's> {
    pub(super) toks: &'t [Token<'s>],
    pub(super) pos: usize,
    /// An empty span where the line ends (at its line break, or at the end of the text).
    pub(super) eol: Span,
}

impl<'s> Cursor<'_, 's> {
    pub(super) fn peek(&self) -> Option<&Token<'s>> {
        self.toks.get(self.pos)
    }
    pub(super) fn at(&self, kind: TokenKind) -> bool {
        self.peek().is_some_and(|t| t.kind == kind)
    }
    pub(super) fn eat(&mut self, kind: TokenKind) -> bool {
        let hit = self.at(kind);
        self.pos += usize::from(hit);
        hit
    }
    pub(super) fn bump(&mut self) -> Option<Token<'s>> {
        let t = self.peek().copied();
        self.pos += usize::from(t.is_some());
        t
    }
    /// The end of the last token taken.
    pub(super) fn prev_end(&self) -> u32 {
        self.toks[..self.pos].last().map_or(self.eol.start, |t| t.span.end)
    }
    pub(super) fn here(&self) -> Span {
        self.peek().map_or(self.eol, |t| t.span)
    }
    /// E0102 at the current token: `what` was expected.
    pub(super) fn unexpected(&self, what: &str) -> Diagnostic {
        let found = match self.peek() {
            None => "end of line".to_string(),
            Some(t) => format!("`{}`", t.text),
        };
        Diagnostic::new("E0102", format!("expected {what}, found {found}"), self.here())
    }
    pub(super) fn expect(&mut self, kind: TokenKind, what: &str) -> Parsed<Token<'s>> {
        if self.at(kind) {
            Ok(self.bump().expect("checked by at"))
        } else {
            Err(self.unexpected(what))
        }
    }
    pub(super) fn name(&mut self, what: &str) -> Parsed<Name> {
        let t = self.expect(TokenKind::Ident, what)?;
        Ok(Name { text: t.text.to_string(), span: t.span })
    }
    pub(super) fn end_of_line(&mut self) -> Parsed<()> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.unexpected("the end of the line")),
        }
    }
}

pub(super) fn tensor_type(c: &mut Cursor) -> Parsed<TensorType> {
    let t = c.expect(TokenKind::Ident, "a dtype (`f32`, `i32` or `q8`)")?;
    let Some(dtype) = DType::from_keyword(t.text) else {
        let msg = format!("unknown dtype `{}`: use `f32`, `i32` or `q8`", t.text);
        return Err(Diagnostic::new("E0103", msg, t.span));
    };
    c.expect(TokenKind::LBracket, "`[` after the dtype")?;
    let mut shape = Vec::new();
    if c.eat(TokenKind::RBracket) {
        return Ok(TensorType { dtype, shape });
    }
    loop {
        shape.push(dim(c)?);
        if !c.eat(TokenKind::Comma) {
            c.expect(TokenKind::RBracket, "`,` or `]` in the shape")?;
            return Ok(TensorType { dtype, shape });
        }
    }
}

fn dim(c: &mut Cursor) -> Parsed<usize> {
    let Some(t) = c.peek().copied() else {
        return Err(c.unexpected("a dimension"));
    };
    let bad = |why: &str| {
        Diagnostic::new("E0103", format!("dimension `{}` {why}: write a non-negative integer", t.text), t.span)
    };
    match t.kind {
        TokenKind::Int => {
            c.bump();
            let v = int(t)?;
            usize::try_from(v).map_err(|_| bad("is negative"))
        }
        TokenKind::Float | TokenKind::Ident => Err(bad("is not an integer")),
        _ => Err(c.unexpected("a dimension")),
    }
}

fn int(t: Token) -> Parsed<i64> {
    t.text.parse::<i64>().map_err(|_| {
        let msg = format!("integer `{}` is out of range: it must fit in 64 signed bits", t.text);
        Diagnostic::new("E0104", msg, t.span)
    })
}

/// A literal and its span; `depth` counts the enclosing lists.
pub(super) fn literal(c: &mut Cursor, depth: usize) -> Parsed<(Literal, Span)> {
    let Some(t) = c.peek().copied() else {
        return Err(c.unexpected("a literal (a number, a word or a list)"));
    };
    let lit = match t.kind {
        TokenKind::Int => Literal::Int(int(t)?),
        TokenKind::Float => match t.text.parse::<f64>() {
            Ok(v) if v.is_finite() => Literal::Float(v),
            _ => {
                let msg = format!("float `{}` is out of range: it must be finite as an f64", t.text);
                return Err(Diagnostic::new("E0104", msg, t.span));
            }
        },
        TokenKind::Ident => Literal::Word(t.text.to_string()),
        TokenKind::LBracket if depth >= MAX_DEPTH => {
            let msg = format!("lists nest more than {MAX_DEPTH} deep here: flatten the literal");
            return Err(Diagnostic::new("E0108", msg, t.span));
        }
        TokenKind::LBracket => return list(c, depth),
        _ => return Err(c.unexpected("a literal (a number, a word or a list)")),
    };
    c.bump();
    Ok((lit, t.span))
}

fn list(c: &mut Cursor, depth: usize) -> Parsed<(Literal, Span)> {
    let start = c.bump().expect("at `[`").span.start;
    let mut items = Vec::new();
    if !c.eat(TokenKind::RBracket) {
        loop {
            items.push(literal(c, depth + 1)?.0);
            if !c.eat(TokenKind::Comma) {
                c.expect(TokenKind::RBracket, "`,` or `]` in the list")?;
                break;
            }
        }
    }
    Ok((Literal::List(items), Span { start, end: c.prev_end() }))
}
