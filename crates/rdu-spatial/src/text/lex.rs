//! Splits one line of the text form into tokens; comments (`#` to the end) are dropped.

/// One token of a line.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    Ident(String),
    /// A quoted string, unescaped.
    Str(String),
    /// An integer literal, as written (no `.`, no exponent).
    Int(String),
    Float(f64),
    Arrow,
    DotDot,
    Punct(char),
}

/// The tokens of `line`, or what is wrong with it.
pub(super) fn tokens(line: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = line.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '#' => break,
            c if c.is_whitespace() => i += 1,
            '"' => {
                let (s, next) = string(&chars, i + 1)?;
                toks.push(Tok::Str(s));
                i = next;
            }
            '<' if chars.get(i + 1) == Some(&'-') => {
                toks.push(Tok::Arrow);
                i += 2;
            }
            '.' if chars.get(i + 1) == Some(&'.') => {
                toks.push(Tok::DotDot);
                i += 2;
            }
            ':' | '[' | ']' | '(' | ')' | ',' | '=' => {
                toks.push(Tok::Punct(c));
                i += 1;
            }
            '-' if chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()) => i = number(&chars, i, &mut toks)?,
            '-' if word_at(&chars, i + 1) == "inf" => {
                toks.push(Tok::Float(f64::NEG_INFINITY));
                i += 4;
            }
            c if c.is_ascii_digit() => i = number(&chars, i, &mut toks)?,
            c if c.is_ascii_alphabetic() || c == '_' => {
                let word = word_at(&chars, i);
                i += word.len();
                toks.push(match word.as_str() {
                    "inf" => Tok::Float(f64::INFINITY),
                    "nan" => Tok::Float(f64::NAN),
                    _ => Tok::Ident(word),
                });
            }
            c => return Err(format!("unexpected character {c:?}")),
        }
    }
    Ok(toks)
}

/// Whether `s` is an identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub(super) fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether the identifier `w` is a float spelling (and so never a bare word or name).
pub(super) fn is_float_word(w: &str) -> bool {
    w == "inf" || w == "nan"
}

fn word_at(chars: &[char], start: usize) -> String {
    chars[start.min(chars.len())..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_').collect()
}

fn number(chars: &[char], start: usize, toks: &mut Vec<Tok>) -> Result<usize, String> {
    let mut i = start;
    if chars[i] == '-' {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let from = *i;
        while *i < chars.len() && chars[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > from
    };
    digits(&mut i);
    let mut float = false;
    if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
        i += 1;
        digits(&mut i);
        float = true;
    }
    if matches!(chars.get(i), Some('e' | 'E')) {
        let mut j = i + 1;
        if matches!(chars.get(j), Some('+' | '-')) {
            j += 1;
        }
        if !digits(&mut j) {
            return Err("malformed exponent".into());
        }
        i = j;
        float = true;
    }
    if chars.get(i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_') {
        return Err(format!("malformed number starting {:?}", chars[start..=i].iter().collect::<String>()));
    }
    let text: String = chars[start..i].iter().collect();
    if float {
        let value = text.parse::<f64>().map_err(|_| format!("malformed number {text}"))?;
        toks.push(Tok::Float(value));
    } else {
        toks.push(Tok::Int(text));
    }
    Ok(i)
}

fn string(chars: &[char], start: usize) -> Result<(String, usize), String> {
    let mut out = String::new();
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok((out, i + 1)),
            '\\' => {
                let esc = chars.get(i + 1).ok_or("unterminated escape")?;
                i += 2;
                match esc {
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    '"' => out.push('"'),
                    '\\' => out.push('\\'),
                    'u' => {
                        let (c, next) = unicode_escape(chars, i)?;
                        out.push(c);
                        i = next;
                    }
                    c => return Err(format!("unknown escape \\{c}")),
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err("unterminated string".into())
}

fn unicode_escape(chars: &[char], start: usize) -> Result<(char, usize), String> {
    if chars.get(start) != Some(&'{') {
        return Err("expected `{` after \\u".into());
    }
    let hex: String = chars[start + 1..].iter().take_while(|c| **c != '}').collect();
    let end = start + 1 + hex.len();
    if chars.get(end) != Some(&'}') || hex.is_empty() || hex.len() > 6 {
        return Err("malformed \\u{...} escape".into());
    }
    let code = u32::from_str_radix(&hex, 16).map_err(|_| "malformed \\u{...} escape".to_string())?;
    let c = char::from_u32(code).ok_or("\\u{...} escape is not a character")?;
    Ok((c, end + 1))
}
