//! `rdu-fuzz TARGET|all [N] [SEED]`: N mutated inputs per target (default 100000), seeded (default
//! 1); `rdu-fuzz replay TARGET FILE` runs one input. Options: `--timeout-ms MS` (default 5000),
//! `--out DIR` (failing inputs; default target/fuzz-failures), `--progress K`.
//! Exit status 1 if any input panicked; a hang (3) or an allocation failure (abort) ends the run
//! at once, its input written to DIR.

use rdu_fuzz::harness::{self, Options};
use rdu_fuzz::targets;
use std::path::PathBuf;
use std::time::Duration;

#[global_allocator]
static GUARD: rdu_fuzz::guard::Guard = rdu_fuzz::guard::Guard;

fn main() {
    if let Err(e) = run() {
        eprintln!("rdu-fuzz: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let mut positional = Vec::new();
    let mut opts = Options {
        inputs: 100_000,
        seed: 1,
        timeout: Duration::from_millis(5000),
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-failures"),
        progress: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--timeout-ms" => opts.timeout = Duration::from_millis(number(&value("--timeout-ms")?)?),
            "--out" => opts.out = PathBuf::from(value("--out")?),
            "--progress" => opts.progress = number(&value("--progress")?)?,
            "-h" | "--help" => {
                println!("usage: rdu-fuzz TARGET|all [N] [SEED] [--timeout-ms MS] [--out DIR] [--progress K]\n       rdu-fuzz replay TARGET FILE\ntargets: {}", targets::NAMES.join(", "));
                return Ok(());
            }
            _ => positional.push(arg),
        }
    }
    let Some(which) = positional.first() else {
        return Err(format!("usage: rdu-fuzz TARGET|all [N] [SEED]; targets: {}", targets::NAMES.join(", ")));
    };
    if which == "replay" {
        let (Some(name), Some(file)) = (positional.get(1), positional.get(2)) else {
            return Err("usage: rdu-fuzz replay TARGET FILE".into());
        };
        let target = targets::target(name)?;
        for line in harness::replay(&target, file.as_ref()).map_err(|e| format!("{file}: {e}"))? {
            println!("{line}");
        }
        return Ok(());
    }
    if let Some(n) = positional.get(1) {
        opts.inputs = number(n)?;
    }
    if let Some(s) = positional.get(2) {
        opts.seed = number(s)?;
    }
    let chosen = if which == "all" { targets::all()? } else { vec![targets::target(which)?] };
    let mut failed = false;
    for target in &chosen {
        eprintln!("{}: {} ({} seeds)", target.name, target.what, target.seeds().len());
        let report = harness::run(target, &opts).map_err(|e| format!("{}: {e}", opts.out.display()))?;
        println!("{}", report.line());
        failed |= report.panics > 0;
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

fn number(s: &str) -> Result<u64, String> {
    s.replace('_', "").parse().map_err(|_| format!("`{s}` is not a number"))
}
