//! The campaign: N inputs, each a seed with 1–8 mutations, run under `catch_unwind` with the
//! allocation guard armed and a watchdog for hangs. Every distinct panic (by location) writes
//! its first input to the failure directory; a hang or an allocation failure writes the input
//! and ends the process (it cannot be recovered from in-process).

use crate::guard;
use crate::mutate::{Context, Op};
use crate::rng::Rng;
use crate::targets::{Outcome, Target};
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to run a campaign.
#[derive(Clone, Debug)]
pub struct Options {
    pub inputs: u64,
    pub seed: u64,
    /// An input running longer than this is a hang.
    pub timeout: Duration,
    /// Where failing inputs are written.
    pub out: PathBuf,
    /// Progress lines on stderr every this many inputs (0: none).
    pub progress: u64,
}

/// What a campaign found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub target: String,
    pub inputs: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub panics: u64,
    /// Panic location → (message, file holding the first input that reached it).
    pub distinct: BTreeMap<String, (String, PathBuf)>,
    /// Inputs where a panic happened and was caught inside rdu (a third-party crate's panic
    /// turned into an error): not failures, but listed by location.
    pub contained: u64,
    pub contained_at: BTreeMap<String, String>,
    pub elapsed: Duration,
    /// The slowest input's time.
    pub slowest: Duration,
}

impl Report {
    pub fn line(&self) -> String {
        let secs = self.elapsed.as_secs_f64();
        format!(
            "{:<12} {:>9} inputs  {:>9} accepted  {:>9} rejected  {:>3} panics ({} distinct, {} contained)  {:>8.1} s  {:>8.0} inputs/s  slowest {:.1} ms",
            self.target,
            self.inputs,
            self.accepted,
            self.rejected,
            self.panics,
            self.distinct.len(),
            self.contained,
            secs,
            self.inputs as f64 / secs.max(1e-9),
            self.slowest.as_secs_f64() * 1e3,
        )
    }
}

static PANIC: Mutex<Option<(String, String)>> = Mutex::new(None);

/// The input the harness builds for iteration `i`: a seed index and the ops applied to it.
pub fn draw(target: &Target, rng: &mut Rng) -> (usize, Vec<Op>) {
    let seeds = target.seeds();
    let which = rng.below(seeds.len() as u64) as usize;
    let n = 1 + (rng.below(8) * rng.below(8)) / 7;
    let ctx = target.context();
    let ops = (0..n).map(|_| ctx.draw(rng, seeds[which].hot)).collect();
    (which, ops)
}

/// Seed `which` with `ops` applied.
pub fn build(ctx: &Context, which: usize, ops: &[Op]) -> Vec<u8> {
    let mut bytes = ctx.seeds[which].bytes.clone();
    for &op in ops {
        ctx.apply(&mut bytes, op);
    }
    bytes
}

/// Runs a campaign on `target`. Returns the report; panics are counted, hangs and allocation
/// failures end the process after writing the input.
pub fn run(target: &Target, opts: &Options) -> std::io::Result<Report> {
    std::fs::create_dir_all(&opts.out)?;
    let dump_name = opts.out.join(format!("{}-alloc.bin", target.name));
    let dump = File::create(&dump_name)?;
    *guard::DUMP.lock().unwrap_or_else(|e| e.into_inner()) = Some((dump, dump_name.display().to_string()));
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map_or("?".into(), |l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        *PANIC.lock().unwrap_or_else(|e| e.into_inner()) = Some((location, message));
    }));

    let started = Instant::now();
    let running_since = Arc::new(AtomicU64::new(0));
    let watchdog = spawn_watchdog(target.name, running_since.clone(), started, opts);

    let ctx = target.context();
    let mut rng = Rng::new(opts.seed);
    let mut report = Report { target: target.name.to_string(), ..Default::default() };
    for i in 0..opts.inputs {
        let (which, ops) = draw(target, &mut rng);
        let input = build(&ctx, which, &ops);
        guard::CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone_from(&input);
        let t0 = Instant::now();
        running_since.store(t0.duration_since(started).as_nanos() as u64 + 1, Ordering::SeqCst);
        guard::arm(true);
        let result = catch_unwind(AssertUnwindSafe(|| target.exercise(&input, which)));
        guard::arm(false);
        running_since.store(0, Ordering::SeqCst);
        report.slowest = report.slowest.max(t0.elapsed());
        report.inputs += 1;
        if result.is_ok() {
            if let Some((location, message)) = PANIC.lock().unwrap_or_else(|e| e.into_inner()).take() {
                report.contained += 1;
                if let Entry::Vacant(slot) = report.contained_at.entry(location) {
                    eprintln!("{}: contained panic at {}: {message}", target.name, slot.key());
                    slot.insert(message);
                }
            }
        }
        match result {
            Ok(Outcome::Accepted) => report.accepted += 1,
            Ok(Outcome::Rejected) => report.rejected += 1,
            Err(_) => {
                report.panics += 1;
                let (location, message) =
                    PANIC.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or(("?".into(), String::new()));
                let k = report.distinct.len();
                if let Entry::Vacant(slot) = report.distinct.entry(location.clone()) {
                    let file = opts.out.join(format!("{}-panic-{k}.bin", target.name));
                    std::fs::write(&file, &input)?;
                    let note = format!(
                        "{location}: {message}\ninput {i} of seed {} ({}), ops {ops:?}\n",
                        opts.seed,
                        target.seeds()[which].name
                    );
                    std::fs::write(file.with_extension("txt"), note)?;
                    eprintln!("{}: PANIC at {location}: {message} (input in {})", target.name, file.display());
                    slot.insert((message, file));
                }
            }
        }
        if opts.progress > 0 && (i + 1) % opts.progress == 0 {
            report.elapsed = started.elapsed();
            eprintln!("{}", report.line());
        }
    }
    report.elapsed = started.elapsed();
    drop(watchdog);
    std::panic::set_hook(previous_hook);
    *guard::DUMP.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let _ = std::fs::remove_file(&dump_name);
    Ok(report)
}

/// Stops its watchdog thread when dropped.
struct Watchdog(Arc<AtomicU64>);

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(u64::MAX, Ordering::SeqCst);
    }
}

fn spawn_watchdog(name: &'static str, since: Arc<AtomicU64>, started: Instant, opts: &Options) -> Watchdog {
    let stop = Arc::new(AtomicU64::new(0));
    let (timeout, out) = (opts.timeout, opts.out.clone());
    let flag = stop.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(50));
        if flag.load(Ordering::SeqCst) == u64::MAX {
            return;
        }
        let t = since.load(Ordering::SeqCst);
        if t == 0 {
            continue;
        }
        let running = started.elapsed().saturating_sub(Duration::from_nanos(t - 1));
        if running > timeout && since.load(Ordering::SeqCst) == t {
            let file = out.join(format!("{name}-hang.bin"));
            let input = guard::CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let _ = File::create(&file).and_then(|mut f| f.write_all(&input));
            eprintln!(
                "\n{name}: HANG: an input ran over {} ms; the input is in {}",
                timeout.as_millis(),
                file.display()
            );
            std::process::exit(3);
        }
    });
    Watchdog(stop)
}

/// Runs one input file through a target against every seed's context (to reproduce a
/// failure): one line per seed, its outcome or the panic (printed by the default hook).
pub fn replay(target: &Target, path: &Path) -> std::io::Result<Vec<String>> {
    let input = std::fs::read(path)?;
    Ok((0..target.seeds().len())
        .map(|which| {
            let seed = &target.seeds()[which].name;
            guard::CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone_from(&input);
            guard::arm(true);
            let result = catch_unwind(AssertUnwindSafe(|| target.exercise(&input, which)));
            guard::arm(false);
            match result {
                Ok(outcome) => format!("{} (beside {seed}): {outcome:?}", path.display()),
                Err(_) => format!("{} (beside {seed}): PANICKED", path.display()),
            }
        })
        .collect())
}
