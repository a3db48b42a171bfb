//! Function length: from the line of its `fn` keyword to the line of its closing brace, both
//! counted (doc comments and attributes above it are not), as `shared/tools/fnlen.py` counts.
//! A function nested in another counts on its own and as part of the outer one.

use crate::lex::{closing, tokens, Line};

/// A function and its length in lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    /// Line of its `fn` keyword (1-based).
    pub line: usize,
    pub lines: usize,
}

/// Every function with a body in `lines`, in order.
pub fn functions(lines: &[Line]) -> Vec<Function> {
    let toks = tokens(lines);
    let mut out = Vec::new();
    for (k, t) in toks.iter().enumerate() {
        if t.text != "fn" {
            continue;
        }
        // `fn(…)` is a function pointer type, not a function.
        let Some(name) = toks.get(k + 1).filter(|n| n.text.chars().all(|c| c.is_alphanumeric() || c == '_')) else {
            continue;
        };
        // The body is the first `{` outside the signature's brackets; a `;` first means none.
        let mut depth = 0i64;
        let mut body = None;
        for (j, s) in toks.iter().enumerate().skip(k + 2) {
            match s.text.as_str() {
                "(" | "[" => depth += 1,
                ")" | "]" => depth -= 1,
                ";" if depth == 0 => break,
                "{" if depth == 0 => {
                    body = Some(j);
                    break;
                }
                _ => {}
            }
        }
        if let Some(open) = body {
            let end = toks[closing(&toks, open)].line;
            out.push(Function { name: name.text.clone(), line: t.line, lines: end + 1 - t.line });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lex::lex;

    #[test]
    fn a_function_runs_from_its_keyword_to_its_closing_brace() {
        let src = "/// doc\n#[inline]\npub fn outer(a: [u8; 4], f: fn(u8) -> u8) -> u8 {\n    fn inner() {\n        let s = \"}\";\n    }\n    a[0]\n}\ntrait T { fn decl(&self); fn body(&self) { } }\n";
        let fs = functions(&lex(src).lines);
        let got: Vec<(&str, usize, usize)> = fs.iter().map(|f| (f.name.as_str(), f.line, f.lines)).collect();
        assert_eq!(got, vec![("outer", 3, 6), ("inner", 4, 3), ("body", 9, 1)]);
    }
}
