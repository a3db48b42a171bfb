//! Things that are said in one place only.
//!
//! - The model's roofline floor (issue 11's floor bytes of a step) is computed by
//!   `crates/rdu-compiler/src/deploy/roofline.rs` alone: no other library or binary source
//!   defines a function named for a floor or a roofline, or writes Q8_0's bytes an element
//!   (`34.0 / 32.0`) again. Tests may recompute it independently, as an oracle.
//! - Op names are spelled only in the op table's rows, `crates/rdu-spatial/src/op/mod.rs`: no
//!   other library or binary source writes an op's name as a string literal on a line about
//!   an op (one that names `op`, `Op` or `ops`; the same words are also program names,
//!   attribute keys and values — `embed`, `scale`, `silu` — and those are not op names).
//! - Attribute keys are spelled only in `keys!` of `crates/rdu-spatial/src/op/attr.rs` (each
//!   the name of the op table fields holding it): no other library or binary source writes a
//!   key as a string literal on a line about attributes (one that names `attr`, `attrs`,
//!   `Attr` or `Key`) or as the first of a pair, `("eps", …)`. Keys of the spatial text's own
//!   syntax (`tile(axis=…)`, `tp chips=…`) and JSON fields are not attribute keys.

use crate::lex::{closing, lex, tokens, Lexed, Literal, Token};
use crate::modules::non_test;

/// Where the roofline floor is computed.
pub const ROOFLINE: &str = "crates/rdu-compiler/src/deploy/roofline.rs";
/// The op table's rows.
pub const OP_TABLE: &str = "crates/rdu-spatial/src/op/mod.rs";
/// The attribute keys (`keys!`).
pub const ATTR_KEYS: &str = "crates/rdu-spatial/src/op/attr.rs";
/// The op table's module: its rows, its keys and the generator, which spell what they must.
const OP_MODULE: &str = "crates/rdu-spatial/src/op/";

/// The lines of `lexed` outside `#[cfg(test)]` items (1-based line numbers).
fn non_test_lines(lexed: &Lexed) -> std::collections::BTreeSet<usize> {
    non_test(&tokens(&lexed.lines)).iter().map(|t| t.line).collect()
}

/// Where `src` (the file `file`, relative to the repository) computes a roofline floor
/// outside [`ROOFLINE`]: one line each.
pub fn roofline_elsewhere(file: &str, src: &str) -> Vec<String> {
    if file == ROOFLINE {
        return Vec::new();
    }
    let lexed = lex(src);
    let toks: Vec<Token> = non_test(&tokens(&lexed.lines));
    let mut out = Vec::new();
    for w in toks.windows(2) {
        let named = w[1].text.contains("floor") || w[1].text.contains("roofline");
        if w[0].text == "fn" && named {
            out.push(format!("{file}:{}: fn {} — the roofline floor is computed in {ROOFLINE}", w[1].line, w[1].text));
        }
    }
    let code = non_test_lines(&lexed);
    for (i, line) in lexed.lines.iter().enumerate() {
        let squeezed: String = line.code.chars().filter(|c| !c.is_whitespace()).collect();
        if code.contains(&(i + 1)) && squeezed.contains("34.0/32.0") {
            out.push(format!("{file}:{}: Q8_0's bytes an element written again — use {ROOFLINE}", i + 1));
        }
    }
    out
}

/// The op names of the op table's source (each row's `Variant = "name"`).
pub fn op_names(op_table: &str) -> Vec<String> {
    let lexed = lex(op_table);
    let toks = tokens(&lexed.lines);
    let upper = |t: &Token| t.text.starts_with(|c: char| c.is_ascii_uppercase());
    (toks.windows(3))
        .filter(|w| upper(&w[0]) && w[1].text == "=" && w[2].text == "\"")
        .filter_map(|w| lexed.strings.iter().find(|s| s.line == w[2].line))
        .map(|s| s.text.clone())
        .collect()
}

/// The attribute keys declared in `keys! { Variant = key, … }` of `attr_src`.
pub fn attr_keys(attr_src: &str) -> Vec<String> {
    let toks = tokens(&lex(attr_src).lines);
    let keys_at = |w: &[Token]| w[0].text == "keys" && w[1].text == "!" && w[2].text == "{";
    let Some(open) = toks.windows(3).position(keys_at) else {
        return Vec::new();
    };
    let body = &toks[open + 2..=closing(&toks, open + 2)];
    (body.windows(4))
        .filter(|w| w[1].text == "=" && matches!(w[3].text.as_str(), "," | "}"))
        .map(|w| w[2].text.clone())
        .collect()
}

/// Each string literal of `lexed` with the indices among `toks` of its quotes (a literal is
/// its two quotes there, its contents dropped).
fn literals_in_place<'l>(lexed: &'l Lexed, toks: &[Token]) -> Vec<(&'l Literal, usize, usize)> {
    let mut seen: std::collections::BTreeMap<usize, usize> = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        if toks[k].text == "\"" {
            let close = (k + 1..toks.len()).find(|&j| toks[j].text == "\"").unwrap_or(k);
            let nth = seen.entry(toks[k].line).or_insert(0);
            if let Some(s) = lexed.strings.iter().filter(|s| s.line == toks[k].line).nth(*nth) {
                out.push((s, k, close));
            }
            *nth += 1;
            k = close;
        }
        k += 1;
    }
    out
}

/// Where `src` (the file `file`) spells an attribute key outside the op table: one line each.
pub fn attr_keys_elsewhere(file: &str, src: &str, keys: &[String]) -> Vec<String> {
    if file.starts_with(OP_MODULE) {
        return Vec::new();
    }
    let lexed = lex(src);
    let code = non_test_lines(&lexed);
    let toks = tokens(&lexed.lines);
    let about_attrs = |line: usize| {
        let toks = tokens(&lexed.lines[line - 1..line]);
        toks.iter().any(|t| matches!(t.text.as_str(), "attr" | "attrs" | "Attr" | "Key"))
    };
    let text = |k: usize| toks.get(k).map_or("", |t: &Token| t.text.as_str());
    let paired =
        |open: usize, close: usize| open.checked_sub(1).is_some_and(|p| text(p) == "(") && text(close + 1) == ",";
    (literals_in_place(&lexed, &toks).into_iter())
        .filter(|(s, open, close)| {
            code.contains(&s.line) && keys.contains(&s.text) && (about_attrs(s.line) || paired(*open, *close))
        })
        .map(|(s, _, _)| {
            format!("{file}:{}: the attribute key \"{}\" — use the op table's typed attributes", s.line, s.text)
        })
        .collect()
}

/// Where `src` (the file `file`) spells an op's name outside the op table: one line each.
pub fn op_names_elsewhere(file: &str, src: &str, names: &[String]) -> Vec<String> {
    if file.starts_with(OP_MODULE) {
        return Vec::new();
    }
    let lexed = lex(src);
    let code = non_test_lines(&lexed);
    let about_an_op = |line: usize| {
        let toks = tokens(&lexed.lines[line - 1..line]);
        toks.iter().any(|t| matches!(t.text.as_str(), "op" | "Op" | "ops"))
    };
    (lexed.strings.iter())
        .filter(|s| code.contains(&s.line) && names.contains(&s.text) && about_an_op(s.line))
        .map(|s| format!("{file}:{}: the op name \"{}\" — spell it as `Op::…` from {OP_TABLE}", s.line, s.text))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_floor_is_found_and_a_test_oracle_is_not() {
        let src =
            "pub fn floor_bytes() -> f64 { 34.0 / 32.0 }\n#[cfg(test)]\nmod tests { fn floor_of() { 34.0/32.0; } }\n";
        let found = roofline_elsewhere("crates/rdu-cli/src/report/mod.rs", src);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains(":1: fn floor_bytes"));
        assert!(roofline_elsewhere(ROOFLINE, src).is_empty());
    }

    #[test]
    fn op_names_come_from_the_table_and_are_found_elsewhere() {
        let table =
            "op_table! {\n    Add = \"add\" [a, b] (2, 2);\n    Rope = \"rope\" [x] (4, 4) { dim: EvenPositive };\n}";
        let names = op_names(table);
        assert_eq!(names, vec!["add".to_string(), "rope".to_string()]);
        let src = "if s.op.text == \"rope\" {}\nlet b = op == \"ropes\";\nlet a = attr(\"add\");\n#[cfg(test)]\nmod tests { fn t() { op == \"add\"; } }\n";
        let found = op_names_elsewhere("crates/x/src/a.rs", src, &names);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("crates/x/src/a.rs:1:"));
    }

    #[test]
    fn attribute_keys_come_from_keys_and_are_found_elsewhere() {
        let attr = "keys! {\n    By = by,\n    TopkGroups = topk_groups,\n}\nlet x = Key::By;";
        let keys = attr_keys(attr);
        assert_eq!(keys, vec!["by".to_string(), "topk_groups".to_string()]);
        let src = "let a = op.attr(\"by\");\nlet b = [(\"topk_groups\", 2)];\nlet c = cur.key(\"by\");\nlet d = f(x, \"by\", 1);\n";
        let found = attr_keys_elsewhere("crates/x/src/a.rs", src, &keys);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("crates/x/src/a.rs:1:") && found[1].starts_with("crates/x/src/a.rs:2:"));
        assert!(attr_keys_elsewhere(ATTR_KEYS, src, &keys).is_empty());
    }
}
