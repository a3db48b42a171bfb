//! Every `unsafe` block, function, impl or trait says why it is sound: a `// SAFETY:` comment
//! (the word `SAFETY`, as in `// SAFETY (the whole body): …`) on its line or in the comment
//! lines right above it (attributes may stand between; a blank or code line ends the search). An `unsafe fn` may say it as its doc's `# Safety` section
//! instead, the rustdoc convention for what its callers must guarantee. `unsafe fn(…)` is a
//! function pointer type, not a definition, and needs nothing.

use crate::lex::{tokens, Line};

/// The lines (1-based) of every `unsafe` in `lines` without its SAFETY comment, with what it is.
pub fn unexplained(lines: &[Line]) -> Vec<(usize, &'static str)> {
    let toks = tokens(lines);
    let mut out = Vec::new();
    for (k, t) in toks.iter().enumerate() {
        if t.text != "unsafe" {
            continue;
        }
        let next = |j: usize| toks.get(k + j).map(|t| t.text.as_str());
        let what = match (next(1), next(2)) {
            (Some("fn"), Some("(")) => continue,
            (Some("fn"), _) => "fn",
            (Some("impl"), _) => "impl",
            (Some("trait"), _) => "trait",
            (Some("extern"), _) => {
                // `unsafe extern "C" fn` (the ABI is two quotes here: literals are emptied).
                let after_abi = if next(2) == Some("\"") { next(4) } else { next(2) };
                if after_abi == Some("fn") {
                    "fn"
                } else {
                    "extern block"
                }
            }
            _ => "block",
        };
        if !explained(lines, t.line, what == "fn") {
            out.push((t.line, what));
        }
    }
    out.dedup();
    out
}

/// Whether line `line` (1-based) or the comment block above it says SAFETY (or, for a
/// function, has a `# Safety` section).
fn explained(lines: &[Line], line: usize, function: bool) -> bool {
    let says = |l: &Line| l.comment.contains("SAFETY") || (function && l.comment.contains("# Safety"));
    if says(&lines[line - 1]) {
        return true;
    }
    for l in lines[..line - 1].iter().rev() {
        let code = l.code.trim();
        let attribute = code.starts_with("#[") && code.ends_with(']');
        if says(l) {
            return true;
        }
        if l.comment.is_empty() && !attribute {
            return false;
        }
        if !code.is_empty() && !attribute {
            return false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lex::lex;

    #[test]
    fn every_unsafe_needs_its_reason() {
        let src = "\
// SAFETY: the CPU has AVX2, checked above.
let a = unsafe { f() };
let b = unsafe { g() };
/// Adds.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = \"avx2\")]
unsafe fn h(k: unsafe fn(u8)) {}
/// The CPU must support AVX2.
unsafe fn i() {}
// SAFETY: Send: the pointer is never shared.
unsafe impl Send for X {}
unsafe impl Sync for X {} // SAFETY: as Send.

// SAFETY: a blank line stands between.

let c = unsafe { j() };
";
        assert_eq!(unexplained(&lex(src).lines), vec![(3, "block"), (11, "fn"), (18, "block")]);
    }
}
