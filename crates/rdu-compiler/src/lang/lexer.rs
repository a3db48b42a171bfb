//! Splits program text into tokens with byte spans (logos); it does not parse.
//!
//! Comments and blanks other than line breaks are skipped; a line break is a token. Text
//! that starts no token is reported as E0101 and left out of the token stream.
use super::ast::Span;
use super::diag::Diagnostic;
use logos::Logos;

/// The kinds of token of the program language.
#[derive(Logos, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[logos(skip r"[ \t\r\f]+")]
#[logos(skip r"#[^\n]*")]
pub enum TokenKind {
    #[regex(r"[A-Za-z_][A-Za-z0-9_]*")]
    Ident,
    /// A number without '.' and without exponent.
    #[regex(r"-?[0-9]+")]
    Int,
    /// A number with a '.' or an exponent.
    #[regex(r"-?[0-9]+\.[0-9]+([eE][+-]?[0-9]+)?")]
    #[regex(r"-?[0-9]+[eE][+-]?[0-9]+")]
    Float,
    #[token(":")]
    Colon,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token(",")]
    Comma,
    #[token("=")]
    Eq,
    #[token("<-")]
    Arrow,
    #[token("\n")]
    Newline,
}

impl TokenKind {
    /// A one-byte tag for the digest; fixed here so that reordering the variants does not
    /// change any digest.
    pub fn tag(self) -> u8 {
        match self {
            TokenKind::Ident => 1,
            TokenKind::Int => 2,
            TokenKind::Float => 3,
            TokenKind::Colon => 4,
            TokenKind::LBracket => 5,
            TokenKind::RBracket => 6,
            TokenKind::LParen => 7,
            TokenKind::RParen => 8,
            TokenKind::Comma => 9,
            TokenKind::Eq => 10,
            TokenKind::Arrow => 11,
            TokenKind::Newline => 12,
        }
    }
}

/// One token: its kind, its byte span, and the text it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token<'s> {
    pub kind: TokenKind,
    pub span: Span,
    pub text: &'s str,
}

/// Lexes a whole text. Never panics: text that starts no token becomes an E0101
/// diagnostic (adjacent bad bytes are reported once) and lexing goes on after it.
pub fn lex(text: &str) -> (Vec<Token<'_>>, Vec<Diagnostic>) {
    let mut tokens = Vec::new();
    let mut bad: Vec<std::ops::Range<usize>> = Vec::new();
    let mut lexer = TokenKind::lexer(text);
    while let Some(result) = lexer.next() {
        let range = lexer.span();
        match result {
            Ok(kind) => tokens.push(Token { kind, span: Span::new(range.start, range.end), text: lexer.slice() }),
            Err(()) => match bad.last_mut() {
                Some(last) if last.end == range.start => last.end = range.end,
                _ => bad.push(range),
            },
        }
    }
    let diags = bad.into_iter().map(|range| bad_text(text, range)).collect();
    (tokens, diags)
}

fn bad_text(text: &str, range: std::ops::Range<usize>) -> Diagnostic {
    let shown = text.get(range.clone()).unwrap_or("?");
    let message = format!("unexpected `{}`: not part of any token; remove it", shown.escape_debug());
    Diagnostic::new("E0101", message, Span::new(range.start, range.end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(TokenKind, &str)> {
        let (tokens, diags) = lex(text);
        assert!(diags.is_empty(), "{diags:?}");
        tokens.iter().map(|t| (t.kind, t.text)).collect()
    }

    #[test]
    fn numbers_are_int_or_float() {
        use TokenKind::*;
        let got = kinds("1 -2 1.5 1e-06 -3E+2 0.25e3 x1");
        let want = [(Int, "1"), (Int, "-2"), (Float, "1.5"), (Float, "1e-06")];
        assert_eq!(got[..4], want);
        assert_eq!(got[4..], [(Float, "-3E+2"), (Float, "0.25e3"), (Ident, "x1")]);
    }

    #[test]
    fn punctuation_newlines_and_comments() {
        use TokenKind::*;
        let got = kinds("S <- op(a, [1]) # c = d\r\n: =");
        let want = [
            (Ident, "S"),
            (Arrow, "<-"),
            (Ident, "op"),
            (LParen, "("),
            (Ident, "a"),
            (Comma, ","),
            (LBracket, "["),
            (Int, "1"),
            (RBracket, "]"),
            (RParen, ")"),
            (Newline, "\n"),
            (Colon, ":"),
            (Eq, "="),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn bad_characters_are_e0101_and_lexing_goes_on() {
        let (tokens, diags) = lex("a = b % c\nd €€ e < f");
        let texts: Vec<&str> = tokens.iter().map(|t| t.text).collect();
        assert_eq!(texts, ["a", "=", "b", "c", "\n", "d", "e", "f"]);
        let codes: Vec<(&str, std::ops::Range<usize>)> = diags.iter().map(|d| (d.code, d.span.range())).collect();
        assert_eq!(codes, [("E0101", 6..7), ("E0101", 12..18), ("E0101", 21..22)]);
    }
}
