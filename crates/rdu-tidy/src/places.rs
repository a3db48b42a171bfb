//! Things that are said in one place only.
//!
//! - The model's roofline floor (issue 11's floor bytes of a step) is computed by
//!   `crates/rdu-compiler/src/deploy/roofline.rs` alone: no other library or binary source
//!   defines a function named for a floor or a roofline, or writes Q8_0's bytes an element
//!   (`34.0 / 32.0`) again. Tests may recompute it independently, as an oracle.
//! - Op names are spelled only in the op table, `crates/rdu-spatial/src/op/mod.rs`: no other
//!   library or binary source writes an op's name as a string literal on a line about an op
//!   (one that names `op`, `Op` or `ops`; the same words are also program names, attribute
//!   keys and values — `embed`, `scale`, `silu` — and those are not op names).

use crate::lex::{lex, tokens, Lexed, Token};
use crate::modules::non_test;

/// Where the roofline floor is computed.
pub const ROOFLINE: &str = "crates/rdu-compiler/src/deploy/roofline.rs";
/// The op table: one row an op, `Variant = "name" [operands] …;`.
pub const OP_TABLE: &str = "crates/rdu-spatial/src/op/mod.rs";

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

/// The op names of the op table's source: the string literal of each row
/// `Variant = "name" [operands] …`.
pub fn op_names(op_table: &str) -> Vec<String> {
    let lexed = lex(op_table);
    let toks = tokens(&lexed.lines);
    // A literal is two quote tokens here (its contents are dropped); the row's is the string
    // literal on that line.
    let rows = toks.windows(5).filter(|w| {
        let is_variant = w[0].text.starts_with(|c: char| c.is_ascii_uppercase());
        is_variant && w[1].text == "=" && w[2].text == "\"" && w[3].text == "\"" && w[4].text == "["
    });
    rows.filter_map(|w| lexed.strings.iter().find(|s| s.line == w[2].line).map(|s| s.text.clone())).collect()
}

/// Where `src` (the file `file`) spells an op's name outside the op table: one line each.
pub fn op_names_elsewhere(file: &str, src: &str, names: &[String]) -> Vec<String> {
    if file == OP_TABLE {
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
        let table = "op_table! {\n    Add = \"add\" [a, b] (2, 2);\n    Rope = \"rope\" [x, cos, sin, pos] (4, 4) { dim: EvenPositive };\n    x = \"y\" [z];\n}";
        let names = op_names(table);
        assert_eq!(names, vec!["add".to_string(), "rope".to_string()]);
        let src = "if s.op.text == \"rope\" {}\nlet b = op == \"ropes\";\nlet a = attr(\"add\");\n#[cfg(test)]\nmod tests { fn t() { op == \"add\"; } }\n";
        let found = op_names_elsewhere("crates/x/src/a.rs", src, &names);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("crates/x/src/a.rs:1:"));
    }
}
