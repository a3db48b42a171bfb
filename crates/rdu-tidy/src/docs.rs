//! The budgets of the two documents a newcomer reads first.

/// The README's budget: a guide, not a notebook.
pub const README_MAX_LINES: usize = 200;
/// No README line (a paragraph is one line in Markdown source only when it is written so)
/// longer than this.
pub const README_MAX_LINE_CHARS: usize = 240;
/// A codemap row of ARCHITECTURE.md: at most two lines of the house's width (rustfmt's 120).
pub const CODEMAP_ROW_MAX_CHARS: usize = 240;

/// What is over the README's budget, one line each.
pub fn readme_over(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lines = text.lines().count();
    if lines > README_MAX_LINES {
        out.push(format!("README.md has {lines} lines, over its budget of {README_MAX_LINES}: move measurements and derivations to docs/"));
    }
    for (i, l) in text.lines().enumerate() {
        let n = l.chars().count();
        if n > README_MAX_LINE_CHARS {
            out.push(format!("README.md:{}: {n} characters on one line, over {README_MAX_LINE_CHARS}", i + 1));
        }
    }
    out
}

/// The codemap rows of ARCHITECTURE.md (the table under `## Codemap`) over their budget.
pub fn codemap_over(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for (i, l) in text.lines().enumerate() {
        if l.starts_with("## ") {
            inside = l.trim() == "## Codemap";
            continue;
        }
        let n = l.chars().count();
        if inside && l.starts_with('|') && n > CODEMAP_ROW_MAX_CHARS {
            out.push(format!(
                "ARCHITECTURE.md:{}: a codemap row of {n} characters, over {CODEMAP_ROW_MAX_CHARS}",
                i + 1
            ));
        }
    }
    if !text.lines().any(|l| l.trim() == "## Codemap") {
        out.push("ARCHITECTURE.md has no `## Codemap` section".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_held() {
        let long = "x".repeat(README_MAX_LINE_CHARS + 1);
        assert!(readme_over("# rdu\n\nshort\n").is_empty());
        assert_eq!(readme_over(&format!("a\n{long}\n")).len(), 1);
        assert_eq!(readme_over(&"l\n".repeat(README_MAX_LINES + 1)).len(), 1);
        let row = format!("| `a` | {} |", "y".repeat(CODEMAP_ROW_MAX_CHARS));
        let arch = format!("# A\n\n## Codemap\n\n| where | what |\n{row}\n\n## Invariants\n\n{row}\n");
        assert_eq!(
            codemap_over(&arch),
            vec![format!(
                "ARCHITECTURE.md:6: a codemap row of {} characters, over {CODEMAP_ROW_MAX_CHARS}",
                row.chars().count()
            )]
        );
    }
}
