//! Helpers shared by the CLI crate's fixture tests: reading the transformers fixtures and
//! comparing logits within the float32 tolerance.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Max absolute difference allowed against transformers on float32 paths.
pub const TOL: f32 = 1e-4;

/// The fixtures of every HF model in `tests/data/fixtures/hf`.
pub const FIXTURES: [&str; 8] = [
    "llama",
    "qwen3",
    "qwen3_next",
    "qwen3_next_T80",
    "gemma3_text",
    "gemma3_text_T80",
    "deepseek_v2",
    "deepseek_v2_noqlora",
];

pub fn fixture(arch: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fixtures/hf").join(arch)
}

pub fn npy_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npyz::NpyFile::new(&bytes[..]).expect("npy").into_vec::<f32>().expect("f32 npy")
}

pub fn npy_ids(path: &Path) -> Vec<u32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npyz::NpyFile::new(&bytes[..])
        .expect("npy")
        .into_vec::<i64>()
        .expect("i64 npy")
        .into_iter()
        .map(|v| v as u32)
        .collect()
}

/// Panics with the worst element when `got` and `want` differ by more than [`TOL`]; returns
/// the worst absolute difference.
pub fn assert_close(what: &str, got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    let (mut worst, mut at) = (0f32, 0);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        if d > worst || d.is_nan() {
            (worst, at) = (d, i);
        }
    }
    assert!(worst <= TOL, "{what}: max |diff| {worst:e} at {at} (got {}, want {})", got[at], want[at]);
    worst
}

pub fn argmax(row: &[f32]) -> u32 {
    (0..row.len()).fold(0, |b, i| if row[i] > row[b] { i } else { b }) as u32
}

/// Runs the `rdu` binary with `args`.
pub fn rdu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdu"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("the rdu binary runs")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("stderr is UTF-8")
}

/// Runs `args`, asserts success, returns stdout.
pub fn ok(args: &[&str]) -> String {
    let out = rdu(args);
    assert!(out.status.success(), "rdu {args:?} failed:\n{}", stderr(&out));
    stdout(&out)
}

/// Runs `args`, asserts exit code 1 with one `error: ...` line on stderr and no panic; returns that line.
pub fn user_error(args: &[&str]) -> String {
    let out = rdu(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "rdu {args:?} should exit 1; stderr:\n{err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "rdu {args:?} panicked:\n{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "rdu {args:?} should print one line on stderr, got:\n{err}");
    assert!(lines[0].starts_with("error: "), "rdu {args:?}: {err}");
    lines[0].to_string()
}

/// The repository root (tests run in the crate's directory).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `spec` with its states stored f32: what transformers' own float32 cache holds, so that the
/// fixtures' f32 files (`logits_step.npy`, ...) are the reference within 1e-4.
pub fn f32_states(mut spec: rdu_compiler::model::spec::ModelSpec) -> rdu_compiler::model::spec::ModelSpec {
    spec.state = rdu_compiler::model::spec::StateDtype::F32;
    spec
}
