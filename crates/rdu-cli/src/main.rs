//! `rdu`: lower large language models to SN50 dataflow deployments, one program per layer
//! kind, and prove them. This file parses the command line and dispatches; each command
//! lives in its own module and only renders what the libraries compute.

mod batch_run;
mod bundle_arg;
mod check_cmd;
mod fit_cmd;
mod lower_cmd;
mod model_arg;
mod plan_cmd;
mod program_cmds;
mod progress;
mod report;
mod run_args;
mod run_cmd;
mod run_engine;
mod serve_cmd;
mod show_cmd;
mod spec_lower;
mod usage;
mod verify_cmd;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rdu",
    version,
    about = "Compile large language models into SN50 dataflow deployments: one certified program per layer kind",
    long_about = "rdu writes every layer of a model as a small program, groups layers whose programs are equal \
                  up to the names they bind into layer KINDS, and lowers, certifies and runs one program per kind.\n\n\
                  MODEL is a built-in preset (see `rdu presets`), a config.json, or a directory holding one."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the built-in models (real configs and tiny test models)
    Presets,
    /// Group a model's layers into kinds: layers whose programs are one program up to names
    Kinds(program_cmds::KindsArgs),
    /// Print the authored program of one layer (or the embedding / head)
    Source(program_cmds::SourceArgs),
    /// Lower every layer kind once, certify it, and write the bundle a vendor ingests
    Lower(lower_cmd::LowerArgs),
    /// Run a model: prompt tokens in, greedy tokens and logits out
    Run(run_args::RunArgs),
    /// Parse and lift a program file; print every diagnostic with its source line
    Check(check_cmd::CheckArgs),
    /// Summarise a bundle, or print one of its spatial programs
    Show(show_cmd::ShowArgs),
    /// Re-certify a bundle from its own files: structure, resources and numbers of every program
    Verify(verify_cmd::VerifyArgs),
    /// Write one self-contained HTML page showing a bundle: chip maps, layers by kind, where a step goes
    Report(report::ReportArgs),
    /// Memory of a decode deployment on one chip: weights and KV/state against HBM and DDR
    Fit(fit_cmd::FitArgs),
    /// Chips × batch: the estimated tokens/s, model roofline and memory of every admitted width and batch
    Plan(plan_cmd::PlanArgs),
    /// Serve a model over an OpenAI-compatible HTTP API, requests batched continuously
    Serve(serve_cmd::ServeArgs),
}

/// Runs `f` on a worker of a rayon pool (as many threads as the global pool would have:
/// `RAYON_NUM_THREADS` or one a core), so the simulator's parallel products fork from a worker
/// — the other workers steal their pieces — instead of each being injected into the pool from
/// outside and waited for on a lock (Q8_0 Gemma 3 270M decode, 2 threads: 50–57 → 56–62 tok/s).
fn in_pool<T>(f: impl FnOnce() -> anyhow::Result<T> + Send) -> anyhow::Result<T>
where
    T: Send,
{
    match rayon::ThreadPoolBuilder::new().build() {
        Ok(pool) => pool.install(f),
        Err(_) => f(),
    }
}

/// Runs `f`; with `--profile`, times every op the simulator runs meanwhile and prints where the
/// time went on stderr afterwards (also when `f` fails).
fn profiled(on: bool, f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    use rdu_spatial::sim::profile;
    if on {
        profile::enable();
    }
    let result = f();
    if on {
        eprintln!("rdu: where the host's time went, op by op (--profile)\n{}", profile::table(&profile::take(), 30));
    }
    result
}

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    one_heap();
    // Negative numbers reach the value parsers (and their one-line refusal) instead of
    // being taken for flags.
    let command = Cli::command().mut_subcommands(|sub| {
        sub.mut_args(|a| if a.get_action().takes_values() { a.allow_negative_numbers(true) } else { a })
    });
    let parsed = command.try_get_matches().and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {}", usage::one_line(&e, &std::env::args().collect::<Vec<_>>()));
            return ExitCode::from(1);
        }
    };
    let result = in_pool(move || match cli.command {
        Command::Presets => program_cmds::presets(),
        Command::Kinds(args) => program_cmds::kinds(&args),
        Command::Source(args) => program_cmds::source(&args),
        Command::Run(args) => {
            if args.profile && args.engine == run_args::Engine::Reference {
                anyhow::bail!("--profile times the spatial engine's ops; --engine reference runs none");
            }
            profiled(args.profile, || match &args.batch_prompts {
                Some(file) => batch_run::run(&args, file),
                None => run_cmd::run(&args),
            })
        }
        Command::Lower(args) => lower_cmd::run(&args),
        Command::Check(args) => check_cmd::run(&args),
        Command::Show(args) => show_cmd::run(&args),
        Command::Fit(args) => fit_cmd::run(&args),
        Command::Verify(args) => verify_cmd::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Plan(args) => plan_cmd::run(&args),
        Command::Serve(args) => profiled(args.profile, || serve_cmd::run(&args)),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// One glibc heap for every thread, kept. The work runs on pool workers (`in_pool`), and with a
/// heap per thread the memory one worker frees (lowering's certification, an op's buffers) is not
/// reused by the other, so `rdu run`'s peak resident size on the Gemma 3 270M Q4_K_M file rose
/// from 313–323 MiB to 325–360 MiB; with one heap it is 318–329 MiB, decode speed unchanged.
///
/// No allocation is a private mapping and the heap is not trimmed as it goes: certification
/// draws each kind's seeded weights (hundreds of MB for DeepSeek-V3's dense and MLA weights)
/// and frees them, and as fresh mappings every page was faulted in and zeroed again — `rdu lower
/// deepseek-v3` took 0.9 s user and 1.3 s system time (676k page faults), 0.9 s and 0.5 s (232k)
/// with the heap kept (the same settings as the test binaries' `keep_freed_memory!`). `rdu run`
/// hands what lowering freed back to the system itself (`release_freed_memory`).
fn one_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc allocator parameters; it runs before any other thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_MAX, 0);
        // -1 (as glibc's size_t: the largest) turns automatic trimming off.
        libc::mallopt(libc::M_TRIM_THRESHOLD, -1);
    }
}

/// A closed stdout (`rdu presets | head -1`) ends the process the way it ends `cat`: by the
/// default SIGPIPE action, quietly, instead of a panic in `println!`.
fn quiet_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts; no
    // handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
