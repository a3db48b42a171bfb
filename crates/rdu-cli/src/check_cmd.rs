//! `rdu check`: parse and lift a program file and render its diagnostics with their source lines
//! (at most `MAX_SHOWN`; a file that is no program at all is said to be so in one line).
//! It renders only; what is wrong is decided by `lang::parse` and `front::lift`.

use anyhow::{bail, Context, Result};
use clap::Args;
use codespan_reporting::diagnostic::{Diagnostic as Report, Label};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::{self, termcolor::ColorChoice, termcolor::StandardStream, Config};
use rdu_compiler::front::lift;
use rdu_compiler::lang::{parse, Diagnostic};
use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Args)]
pub struct CheckArgs {
    /// A program file in the rdu language (`docs/LANGUAGE.md`), e.g. the output of `rdu source`
    file: PathBuf,
}

pub fn run(args: &CheckArgs) -> Result<()> {
    let shown = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file).with_context(|| format!("cannot read {shown}"))?;
    if text.trim().is_empty() {
        bail!("{shown} is empty: a program declares its tensors, computes and names its outputs (docs/LANGUAGE.md)");
    }
    let (diagnostics, stage) = match parse(&text) {
        Err(syntax) => (syntax, "parse"),
        Ok(program) => match lift(&program) {
            Ok(_) => {
                let (decls, stmts, outs) =
                    (program.decls().count(), program.stmts().count(), program.outputs().count());
                if decls + stmts == 0 {
                    bail!("{shown} holds no declarations or statements: it is not a program");
                }
                println!(
                    "{shown}: parses and lifts: {decls} declarations, {stmts} statements, {outs} output{}, no errors",
                    if outs == 1 { "" } else { "s" }
                );
                return Ok(());
            }
            Err(refusal) => (refusal.diagnostics, "lift"),
        },
    };
    if stage == "parse" {
        if let Some(line) = not_a_program(&shown, &text, &diagnostics) {
            bail!("{line}");
        }
    }
    render(&shown, &text, &diagnostics[..diagnostics.len().min(MAX_SHOWN)]);
    let n = diagnostics.len();
    let more =
        if n > MAX_SHOWN { format!(" ({} shown, {} more not)", MAX_SHOWN, n - MAX_SHOWN) } else { String::new() };
    bail!("{shown}: {n} error{} found{more}; the program does not {stage}", if n == 1 { "" } else { "s" })
}

/// Diagnostics rendered at most (a program with that many faults, or more, has a pattern of
/// them: the first few show it).
const MAX_SHOWN: usize = 20;

/// A file with more syntax errors than this, on at least half of the lines that hold anything,
/// is not a program with typos but no program at all (a bundle's `manifest.json`, a README).
const TYPOS: usize = 5;

/// One line saying that `text` (shown as `shown`), whose parse found `syntax`, does not look
/// like a program, with how much of it does not parse, from which line — or `None` when it
/// looks like a program with errors, whose diagnostics say more.
fn not_a_program(shown: &str, text: &str, syntax: &[Diagnostic]) -> Option<String> {
    let starts: Vec<usize> = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
    let faulty: BTreeSet<usize> =
        syntax.iter().map(|d| starts.partition_point(|&s| s <= d.span.range().start).saturating_sub(1)).collect();
    let held = text.lines().filter(|l| !l.trim().is_empty() && !l.trim().starts_with('#')).count();
    if syntax.len() <= TYPOS || faulty.len() * 2 < held {
        return None;
    }
    let first = *faulty.first()?;
    let line: String = text.lines().nth(first).unwrap_or_default().trim().chars().take(40).collect();
    let json = if serde_json::from_str::<serde_json::Value>(text).is_ok() {
        " (it is JSON: `rdu show DIR` reads a bundle and its manifest.json)"
    } else {
        ""
    };
    Some(format!(
        "{shown} does not look like a program{json}: {} of its {held} lines do not parse, from line {} (`{line}`); a program declares its tensors, computes and names its outputs (docs/LANGUAGE.md)",
        faulty.len(),
        first + 1
    ))
}

/// Every diagnostic on stderr with its source snippet; coloured only on a terminal.
fn render(name: &str, text: &str, diagnostics: &[Diagnostic]) {
    let color = if std::io::stderr().is_terminal() { ColorChoice::Auto } else { ColorChoice::Never };
    let stderr = StandardStream::stderr(color);
    let mut out = stderr.lock();
    let file = SimpleFile::new(name, text);
    let config = Config::default();
    for d in diagnostics {
        if term::emit(&mut out, &config, &file, &report(d, text.len())).is_err() {
            // A span outside the file: still say what is wrong, without the snippet.
            let _ = writeln!(out, "{d}");
        }
    }
}

fn report(d: &Diagnostic, len: usize) -> Report<()> {
    let clamp = |r: std::ops::Range<usize>| r.start.min(len)..r.end.min(len);
    let mut labels = vec![Label::primary((), clamp(d.span.range()))];
    labels.extend(d.labels.iter().map(|(span, msg)| Label::secondary((), clamp(span.range())).with_message(msg)));
    let note = match (d.index, &d.binder) {
        (Some(i), Some(b)) => Some(format!("in statement {i} (binding `{b}`)")),
        (Some(i), None) => Some(format!("in statement {i}")),
        (None, Some(b)) => Some(format!("concerns `{b}`")),
        (None, None) => None,
    };
    Report::error()
        .with_code(d.code)
        .with_message(&d.message)
        .with_labels(labels)
        .with_notes(note.into_iter().collect())
}
