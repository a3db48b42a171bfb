//! Helpers shared by the CLI crate's tests: running the `rdu` binary and reading what it says.
//! Fixture paths, npy readers and the tolerance are `rdu_testkit`'s.

pub mod http;

use std::process::{Command, Output};

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

/// `spec` with its states stored f32: what transformers' own float32 cache holds, so that the
/// fixtures' f32 files (`logits_step.npy`, ...) are the reference within 1e-4.
pub fn f32_states(mut spec: rdu_compiler::model::spec::ModelSpec) -> rdu_compiler::model::spec::ModelSpec {
    spec.state = rdu_compiler::model::spec::StateDtype::F32;
    spec
}
