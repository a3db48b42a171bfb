//! `rdu-tidy`: the house rules of this repository, checked by its test `tidy` (run by
//! `cargo test --workspace`; alone, `cargo test -p rdu-tidy`). It reads the source as text —
//! nothing of the project is built or run — and says where a rule is broken, file and line.
//!
//! The rules: no function over 100 lines ([`functions`]), no import loop between modules
//! ([`modules`]), every `unsafe` with its SAFETY comment ([`unsafety`]), the README and the
//! codemap within their budgets ([`docs`]), the model's roofline floor computed in one place,
//! op names spelled only in the op table and every op costed by its row's cost class
//! ([`places`]).

pub mod docs;
pub mod functions;
pub mod lex;
pub mod modules;
pub mod places;
pub mod unsafety;

use std::path::{Path, PathBuf};

/// The repository's root (this package is `crates/rdu-tidy`).
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, sorted, skipping `target` directories.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    todo.push(path);
                }
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The workspace's crates: every directory under `crates/` with a `Cargo.toml`, sorted.
pub fn crates(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.join("Cargo.toml").is_file()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// `path` relative to `root`, with forward slashes, for messages and comparisons.
pub fn relative(root: &Path, path: &Path) -> String {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(&root).unwrap_or(&path).to_string_lossy().replace('\\', "/")
}
