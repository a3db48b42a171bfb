//! Rust source seen line by line, its code apart from its comments and string literals.
//!
//! Not a parser: enough to count a function's lines, follow `crate::`/`super::` paths and find
//! `unsafe` — comments and the contents of string and character literals never look like
//! code here, and lifetimes are not mistaken for characters.

/// One line of a source file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Line {
    /// The line's code: comments dropped, every literal's contents dropped (its quotes kept).
    pub code: String,
    /// The text of the comments on the line (`//`, `///`, `//!`, `/* */`), markers included.
    pub comment: String,
}

/// A string literal: the line it starts on and its contents as written (escapes not undone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Literal {
    pub line: usize,
    pub text: String,
}

/// A source file lexed: its lines (index 0 is line 1) and its string literals.
#[derive(Clone, Debug, Default)]
pub struct Lexed {
    pub lines: Vec<Line>,
    pub strings: Vec<Literal>,
}

/// A token of code: an identifier or keyword, or one punctuation character, with its line
/// (1-based). Numbers are identifiers here; literals are their opening quote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub text: String,
    pub line: usize,
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    out: Lexed,
    line: Line,
}

/// Splits `src` into its lines of code and comment, and its string literals.
pub fn lex(src: &str) -> Lexed {
    let mut l = Lexer { chars: src.chars().collect(), at: 0, out: Lexed::default(), line: Line::default() };
    l.run();
    l.out
}

impl Lexer {
    fn peek(&self, k: usize) -> Option<char> {
        self.chars.get(self.at + k).copied()
    }

    fn newline(&mut self) {
        self.out.lines.push(std::mem::take(&mut self.line));
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            match c {
                '\n' => {
                    self.at += 1;
                    self.newline();
                }
                '/' if self.peek(1) == Some('/') => self.line_comment(),
                '/' if self.peek(1) == Some('*') => self.block_comment(),
                '"' => self.string(),
                'r' | 'b' | 'c' if self.raw_or_prefixed_string() => {}
                '\'' => self.quote(),
                _ => {
                    // An identifier is taken whole, so that the `r` of `for` never opens a raw string.
                    if c.is_alphanumeric() || c == '_' {
                        while let Some(d) = self.peek(0).filter(|d| d.is_alphanumeric() || *d == '_') {
                            self.line.code.push(d);
                            self.at += 1;
                        }
                    } else {
                        self.line.code.push(c);
                        self.at += 1;
                    }
                }
            }
        }
        self.newline();
    }

    fn line_comment(&mut self) {
        while let Some(c) = self.peek(0).filter(|&c| c != '\n') {
            self.line.comment.push(c);
            self.at += 1;
        }
    }

    fn block_comment(&mut self) {
        let mut depth = 0;
        while let Some(c) = self.peek(0) {
            if c == '/' && self.peek(1) == Some('*') {
                depth += 1;
                self.line.comment.push_str("/*");
                self.at += 2;
            } else if c == '*' && self.peek(1) == Some('/') {
                depth -= 1;
                self.line.comment.push_str("*/");
                self.at += 2;
                if depth == 0 {
                    return;
                }
            } else if c == '\n' {
                self.at += 1;
                self.newline();
            } else {
                self.line.comment.push(c);
                self.at += 1;
            }
        }
    }

    /// `r"…"`, `r#"…"#`, `b"…"`, `br"…"`, `c"…"`, `b'…'`: consumed and true; anything else
    /// (an identifier starting with r, b or c) untouched and false.
    fn raw_or_prefixed_string(&mut self) -> bool {
        let mut k = 0;
        if matches!(self.peek(0), Some('b') | Some('c')) {
            k = 1;
        }
        if self.peek(0) == Some('b') && self.peek(1) == Some('\'') {
            self.line.code.push('b');
            self.at += 1;
            self.quote();
            return true;
        }
        let raw = self.peek(k) == Some('r');
        if raw {
            k += 1;
        }
        let mut hashes = 0;
        if raw {
            while self.peek(k + hashes) == Some('#') {
                hashes += 1;
            }
        }
        if self.peek(k + hashes) != Some('"') || (!raw && k == 0) {
            return false;
        }
        for _ in 0..k {
            let c = self.chars[self.at];
            self.line.code.push(c);
            self.at += 1;
        }
        if raw {
            self.at += hashes;
            self.raw_string(hashes);
        } else {
            self.string();
        }
        true
    }

    /// A `"…"` string at the cursor, with escapes.
    fn string(&mut self) {
        let start = self.out.lines.len() + 1;
        let mut text = String::new();
        self.line.code.push('"');
        self.at += 1;
        while let Some(c) = self.peek(0) {
            self.at += 1;
            match c {
                '\\' => {
                    text.push(c);
                    if let Some(d) = self.peek(0) {
                        self.at += 1;
                        text.push(d);
                        if d == '\n' {
                            self.newline();
                        }
                    }
                }
                '"' => break,
                '\n' => {
                    text.push(c);
                    self.newline();
                }
                _ => text.push(c),
            }
        }
        self.line.code.push('"');
        self.out.strings.push(Literal { line: start, text });
    }

    /// A raw string's body after its opening `#`s, up to `"` and as many `#`s.
    fn raw_string(&mut self, hashes: usize) {
        let start = self.out.lines.len() + 1;
        let mut text = String::new();
        self.line.code.push('"');
        self.at += 1;
        while let Some(c) = self.peek(0) {
            if c == '"' && (0..hashes).all(|h| self.peek(1 + h) == Some('#')) {
                self.at += 1 + hashes;
                break;
            }
            self.at += 1;
            text.push(c);
            if c == '\n' {
                self.newline();
            }
        }
        self.line.code.push('"');
        self.out.strings.push(Literal { line: start, text });
    }

    /// A `'` at the cursor: a character literal (consumed, contents dropped) or a lifetime or
    /// label (the quote kept as code).
    fn quote(&mut self) {
        let is_char = matches!((self.peek(1), self.peek(2)), (Some('\\'), _) | (Some(_), Some('\'')));
        self.line.code.push('\'');
        self.at += 1;
        if !is_char {
            return;
        }
        while let Some(c) = self.peek(0) {
            self.at += 1;
            match c {
                '\\' => self.at += 1,
                '\'' => break,
                _ => {}
            }
        }
        self.line.code.push('\'');
    }
}

/// The code of `lines` as tokens.
pub fn tokens(lines: &[Line]) -> Vec<Token> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let chars: Vec<char> = line.code.chars().collect();
        let mut k = 0;
        while k < chars.len() {
            let c = chars[k];
            if c.is_alphanumeric() || c == '_' {
                let start = k;
                while k < chars.len() && (chars[k].is_alphanumeric() || chars[k] == '_') {
                    k += 1;
                }
                out.push(Token { text: chars[start..k].iter().collect(), line: i + 1 });
            } else {
                if !c.is_whitespace() {
                    out.push(Token { text: c.to_string(), line: i + 1 });
                }
                k += 1;
            }
        }
    }
    out
}

/// The index of the token that closes the bracket opened at `open` (`{`, `(` or `[`), or the
/// last token when it is never closed.
pub fn closing(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0i64;
    for (k, t) in tokens.iter().enumerate().skip(open) {
        match t.text.as_str() {
            "{" | "(" | "[" => depth += 1,
            "}" | ")" | "]" => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    tokens.len().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_strings_and_characters_are_not_code() {
        let src = "let s = \"fn x() { // }\"; // fn y() {\nlet c = '{'; let l: &'a str = r#\"}\"#; /* unsafe\n { */ x";
        let lexed = lex(src);
        assert_eq!(lexed.lines.len(), 3);
        assert_eq!(lexed.lines[0].code, "let s = \"\"; ");
        assert_eq!(lexed.lines[0].comment, "// fn y() {");
        assert_eq!(lexed.lines[1].code, "let c = ''; let l: &'a str = r\"\"; ");
        assert_eq!(lexed.lines[1].comment, "/* unsafe");
        assert_eq!((lexed.lines[2].code.as_str(), lexed.lines[2].comment.as_str()), (" x", " { */"));
        assert_eq!(lexed.strings[0].text, "fn x() { // }");
        assert_eq!(lexed.strings[1].text, "}");
        let lexed = lex("/* a\n b */ x\nfor_each(b'\\'', br\"q\")");
        assert_eq!(lexed.lines[1].code, " x");
        assert_eq!(lexed.lines[2].code, "for_each(b'', br\"\")");
    }

    #[test]
    fn a_multi_line_string_keeps_the_line_count() {
        let lexed = lex("let a = \"one\ntwo\";\nfn f() {}");
        assert_eq!(lexed.lines.len(), 3);
        assert_eq!(lexed.lines[2].code, "fn f() {}");
        assert_eq!(lexed.strings[0], Literal { line: 1, text: "one\ntwo".into() });
    }
}
