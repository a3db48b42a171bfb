//! A cursor over one line's tokens, with the expect-this-or-say-what-was-found helpers.

use super::lex::Tok;

pub(super) struct Cursor<'a> {
    pub toks: &'a [Tok],
    pub at: usize,
}

pub(super) type Res<T> = Result<T, String>;

impl Cursor<'_> {
    pub(super) fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    pub(super) fn peek2(&self) -> Option<&Tok> {
        self.toks.get(self.at + 1)
    }

    pub(super) fn next(&mut self) -> Option<&Tok> {
        self.at += 1;
        self.toks.get(self.at - 1)
    }

    pub(super) fn ident(&mut self, what: &str) -> Res<String> {
        match self.next() {
            Some(Tok::Ident(s)) => Ok(s.clone()),
            other => Err(format!("expected {what}, found {}", show(other))),
        }
    }

    pub(super) fn punct(&mut self, c: char) -> Res<()> {
        match self.next() {
            Some(Tok::Punct(p)) if *p == c => Ok(()),
            other => Err(format!("expected `{c}`, found {}", show(other))),
        }
    }

    pub(super) fn eat(&mut self, c: char) -> bool {
        let hit = self.peek() == Some(&Tok::Punct(c));
        self.at += usize::from(hit);
        hit
    }

    /// `key=` with the given key.
    pub(super) fn key(&mut self, key: &str) -> Res<()> {
        match self.next() {
            Some(Tok::Ident(k)) if k == key => self.punct('='),
            other => Err(format!("expected `{key}=`, found {}", show(other))),
        }
    }

    pub(super) fn int(&mut self, what: &str) -> Res<i64> {
        match self.next() {
            Some(Tok::Int(s)) => s.parse().map_err(|_| format!("{what} {s} is out of range")),
            other => Err(format!("expected {what}, found {}", show(other))),
        }
    }

    pub(super) fn count<T: TryFrom<i64>>(&mut self, what: &str) -> Res<T> {
        let v = self.int(what)?;
        T::try_from(v).map_err(|_| format!("{what} {v} is out of range"))
    }

    pub(super) fn end(&self) -> Res<()> {
        match self.peek() {
            None => Ok(()),
            tok => Err(format!("unexpected {} at the end of the line", show(tok))),
        }
    }
}

pub(super) fn show(tok: Option<&Tok>) -> String {
    match tok {
        None => "the end of the line".into(),
        Some(Tok::Ident(s)) => format!("`{s}`"),
        Some(Tok::Str(s)) => format!("{s:?}"),
        Some(Tok::Int(s)) => format!("`{s}`"),
        Some(Tok::Float(f)) => format!("`{f:?}`"),
        Some(Tok::Arrow) => "`<-`".into(),
        Some(Tok::DotDot) => "`..`".into(),
        Some(Tok::Punct(c)) => format!("`{c}`"),
    }
}
