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
//! - An op's cost is said in its row of the op table, as its cost class (`.cost(…)`, which the
//!   row's grammar requires): the cost code ([`COST_CODE`]: FLOPs and bytes, tiling) names no op
//!   (`Op::Linear`), and no library or binary source matches over a cost class (`….cost()`)
//!   with a catch-all arm (`_ =>`, `other =>`), so a new class is counted everywhere or the
//!   build fails.

use crate::lex::{lex, tokens, Lexed, Token};
use crate::modules::non_test;

/// Where the roofline floor is computed.
pub const ROOFLINE: &str = "crates/rdu-compiler/src/deploy/roofline.rs";
/// The op table: one row an op, `Variant = "name" [operands] …;`.
pub const OP_TABLE: &str = "crates/rdu-spatial/src/op/mod.rs";

/// The cost code: what an op's work is (`op_work`) and how it is tiled, by cost class.
pub const COST_CODE: &[&str] =
    &["crates/rdu-compiler/src/lower/work.rs", "crates/rdu-compiler/src/lower/passes/tile.rs"];

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

/// Where `src` (the file `file`) costs an op by name or a cost class by default: an op variant
/// named in [`COST_CODE`], a catch-all arm in a `match` over a cost class anywhere. One line each.
pub fn costs_by_default(file: &str, src: &str) -> Vec<String> {
    let toks: Vec<Token> = non_test(&tokens(&lex(src).lines));
    let mut out = Vec::new();
    if COST_CODE.contains(&file) {
        for w in toks.windows(4) {
            let variant = w[3].text.starts_with(|c: char| c.is_ascii_uppercase());
            if w[0].text == "Op" && w[1].text == ":" && w[2].text == ":" && variant {
                let at = w[0].line;
                out.push(format!("{file}:{at}: Op::{} — cost an op by its row's cost class", w[3].text));
            }
        }
    }
    for (k, t) in toks.iter().enumerate() {
        if t.text != "match" {
            continue;
        }
        let Some(open) = (k + 1..toks.len()).find(|&j| toks[j].text == "{") else { break };
        if !over_cost(&toks[k + 1..open]) {
            continue;
        }
        for (line, pattern) in catch_all_arms(&toks[open..=crate::lex::closing(&toks, open)]) {
            out.push(format!("{file}:{line}: `{pattern} =>` over a cost class — give every class its arm"));
        }
    }
    out
}

/// Whether a `match`'s scrutinee is a cost class: it ends in `cost()` or is named `cost`.
fn over_cost(scrutinee: &[Token]) -> bool {
    let texts: Vec<&str> = scrutinee.iter().map(|t| t.text.as_str()).collect();
    texts.ends_with(&["cost", "(", ")"]) || texts == ["cost"]
}

/// The catch-all arms of a `match` body (`{` to `}`): a pattern that is `_` or a lone binding,
/// with or without a guard. Each arm's line and pattern.
fn catch_all_arms(body: &[Token]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut k = 1;
    while k + 1 < body.len() {
        // The pattern: up to `=>` (`=` then `>`) at this depth.
        let start = k;
        while k + 1 < body.len() && !(body[k].text == "=" && body[k + 1].text == ">") {
            k = if matches!(body[k].text.as_str(), "(" | "[" | "{") { crate::lex::closing(body, k) + 1 } else { k + 1 };
        }
        let pattern = &body[start..k.min(body.len())];
        let lone = pattern.first().is_some_and(|t| t.text == "_" || t.text.starts_with(|c: char| c.is_lowercase()));
        if lone && (pattern.len() == 1 || pattern[1].text == "if") {
            out.push((pattern[0].line, pattern[0].text.clone()));
        }
        // The arm's expression: a block (and its comma), or up to the comma at this depth.
        k += 2;
        if body.get(k).is_some_and(|t| t.text == "{") {
            k = crate::lex::closing(body, k) + 1;
            k += usize::from(body.get(k).is_some_and(|t| t.text == ","));
        } else {
            while k + 1 < body.len() && body[k].text != "," {
                k = if matches!(body[k].text.as_str(), "(" | "[" | "{") {
                    crate::lex::closing(body, k) + 1
                } else {
                    k + 1
                };
            }
            k += 1;
        }
    }
    out
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
    fn a_cost_by_op_or_by_default_is_found() {
        let work = COST_CODE[0];
        let src = "fn w(op: &KernelOp) -> u64 {\n    match op.op.cost() {\n        Cost::Attention(_) => { 1 }\n        Cost::Product => if op.op == Op::Linear { 2 } else { 3 },\n        _ => 0,\n    }\n}\nfn t(c: Cost) -> u8 { let cost = c; match cost { Cost::Lookup => 1, other if true => 2, x => 3 } }\nfn n(a: Option<u8>) -> u8 { match a { Some(b) => b, _ => 0 } }\n#[cfg(test)]\nmod tests { fn t() { match op.cost() { _ => 0 }; Op::Add; } }\n";
        let found = costs_by_default(work, src);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found[0].contains(":4: Op::Linear"), "{found:?}");
        assert!(found[1].contains(":5: `_ =>`"), "{found:?}");
        assert!(found[2].contains(":8: `other =>`") && found[3].contains(":8: `x =>`"), "{found:?}");
        // Outside the cost code an op may be named; a catch-all over a cost class may not.
        let found = costs_by_default("crates/x/src/a.rs", src);
        assert_eq!(found.len(), 3, "{found:?}");
        let exhaustive = "fn p(c: Cost) -> u8 { match c.cost() { Cost::Attention(_) | Cost::AttentionUp(_) => 1, Cost::Lookup => { 2 } } }";
        assert!(costs_by_default(work, exhaustive).is_empty());
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
