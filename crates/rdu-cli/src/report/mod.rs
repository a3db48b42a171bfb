//! `rdu report`: one self-contained HTML page that shows a bundle — a chip map per program
//! and section, a strip of every layer coloured by its kind, where a step's time goes next to
//! the model's roofline, every certificate, and a tensor-parallel bundle's slices. It reads
//! the bundle only (and the chip it names); it never lowers or certifies anything.

mod html;
pub(crate) mod svg;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rdu_compiler::deploy::{bundle_floor, schedule_cost, Scheduled};
use rdu_compiler::lower::cost::program_cost;
use rdu_spatial::bundle::Bundle;
use rdu_spatial::chip::Chip;
use rdu_spatial::cost::{Bound, StepCost};
use rdu_spatial::manifest::{CertificateEntry, Manifest};
use rdu_spatial::program::SpatialProgram;
use std::path::PathBuf;

#[derive(Args)]
pub struct ReportArgs {
    /// A bundle directory written by `rdu lower -o`
    bundle: PathBuf,
    /// The HTML file to write (one file: inline SVG and CSS, nothing loaded from the network)
    #[arg(short = 'o', long = "out", value_name = "FILE.html")]
    out: PathBuf,
    /// The chip description, when the bundle's chip is not built in (a TOML file)
    #[arg(long, value_name = "FILE")]
    chip: Option<PathBuf>,
}

/// One program of the bundle with everything the page shows of it.
pub struct ProgramView {
    pub name: String,
    /// The layers it serves (a kind), or `None` (the embedding, the head).
    pub layers: Option<Vec<usize>>,
    pub spatial: SpatialProgram,
    pub cost: StepCost,
    pub certificate: CertificateEntry,
}

/// Where one invocation of a program, or a whole step, spends its seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Breakdown {
    /// Steady-state time bound by HBM or DDR: streaming weights, caches and activations.
    pub streaming: f64,
    /// Steady-state time bound by the PCUs or the PMUs' SRAM.
    pub compute: f64,
    /// The first tiles, per-stage fill cycles and mesh hops.
    pub fill: f64,
    /// End-of-section barriers.
    pub synchronisation: f64,
    /// Section switches.
    pub reconfiguration: f64,
    /// All-reduce latency and link-bound steady time.
    pub collectives: f64,
}

/// Everything the page shows.
pub struct Report {
    pub manifest: Manifest,
    pub chip: Chip,
    pub programs: Vec<ProgramView>,
    /// The step as the manifest's schedule runs it.
    pub step: StepView,
    /// The model's floor bytes a step and its roofline seconds (`rdu_compiler::deploy::bundle_floor`).
    pub floor_bytes: f64,
    pub roofline_seconds: f64,
}

pub fn run(args: &ReportArgs) -> Result<()> {
    let dir = &args.bundle;
    let bundle = crate::bundle_arg::open(dir)?;
    let chip = match &args.chip {
        Some(path) => Chip::from_file(path)?,
        None => Chip::builtin(&bundle.manifest.chip).map_err(|_| {
            anyhow!(
                "the bundle was lowered for chip `{}`, which is not built in; pass its file with --chip",
                bundle.manifest.chip
            )
        })?,
    };
    if chip.name != bundle.manifest.chip {
        bail!("--chip describes `{}` but the bundle was lowered for `{}`", chip.name, bundle.manifest.chip);
    }
    let report = gather(&bundle, chip)?;
    let page = html::page(&report);
    write_atomically(&args.out, &page)?;
    eprintln!(
        "report of {} ({} programs, {} layers) written to {}",
        report.manifest.model,
        report.programs.len(),
        report.manifest.layers.len(),
        args.out.display()
    );
    Ok(())
}

/// Write `text` to `path` through a temporary sibling, so a failed write leaves nothing half-written.
pub(crate) fn write_atomically(path: &std::path::Path, text: &str) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(&parent)
        .with_context(|| format!("cannot write {}: its folder {} is not writable", path.display(), parent.display()))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    let file = tmp.persist(path).map_err(|e| anyhow!("cannot write {}: {}", path.display(), e.error))?;
    // A temporary file is private; the page is for reading.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    drop(file);
    Ok(())
}

/// Read every program of `bundle`, cost it on `chip`, and add up a step.
pub fn gather(bundle: &Bundle, chip: Chip) -> Result<Report> {
    let m = &bundle.manifest;
    let p = &m.programs;
    let mut entries = vec![(&p.embed.name, &p.embed.file_spatial, None, &p.embed.certificate)];
    entries.extend(p.kinds.iter().map(|k| (&k.name, &k.file_spatial, Some(k.layers.clone()), &k.certificate)));
    entries.push((&p.head.name, &p.head.file_spatial, None, &p.head.certificate));
    let mut programs = Vec::new();
    for (name, file, layers, certificate) in entries {
        let text = bundle.files.get(file.as_str()).ok_or_else(|| anyhow!("the bundle lacks {file}"))?;
        let spatial = rdu_spatial::text::parse(text).map_err(|e| anyhow!("{file}: {e}"))?;
        let cost = program_cost(&spatial, &chip).map_err(|e| anyhow!("{file}: cost model: {e}"))?;
        programs.push(ProgramView { name: name.clone(), layers, spatial, cost, certificate: certificate.clone() });
    }
    let step = step_breakdown(m, &programs, &chip)?;
    let program = |name: &str| programs.iter().find(|p| p.name == name).map(|p| &p.spatial);
    let floor = bundle_floor(m, &program, &chip);
    Ok(Report { manifest: m.clone(), chip, programs, step, floor_bytes: floor.bytes, roofline_seconds: floor.seconds })
}

/// Where one invocation of a program spends its time.
pub fn breakdown(cost: &StepCost) -> Breakdown {
    let mut b = Breakdown { reconfiguration: cost.reconfiguration_seconds, ..Breakdown::default() };
    for s in &cost.sections {
        match s.bound {
            Bound::Hbm | Bound::Ddr => b.streaming += s.steady_seconds,
            Bound::Compute | Bound::Sram => b.compute += s.steady_seconds,
            Bound::Link => b.collectives += s.steady_seconds,
        }
        b.collectives += s.latency_seconds;
        b.fill += s.fill_seconds - s.latency_seconds;
        b.synchronisation += s.synchronisation_seconds;
    }
    b
}

impl Breakdown {
    pub fn total(&self) -> f64 {
        self.streaming + self.compute + self.fill + self.synchronisation + self.reconfiguration + self.collectives
    }

    pub fn add(&mut self, other: &Breakdown, times: f64) {
        self.streaming += other.streaming * times;
        self.compute += other.compute * times;
        self.fill += other.fill * times;
        self.synchronisation += other.synchronisation * times;
        self.reconfiguration += other.reconfiguration * times;
        self.collectives += other.collectives * times;
    }

    /// The parts in drawing order, with their labels.
    pub fn parts(&self) -> [(&'static str, f64); 6] {
        [
            ("weight streaming", self.streaming),
            ("compute", self.compute),
            ("pipeline fill", self.fill),
            ("synchronisation", self.synchronisation),
            ("reconfiguration", self.reconfiguration),
            ("collectives", self.collectives),
        ]
    }
}

/// One step as the manifest's `schedule` runs it, costed exactly as `rdu lower` estimates it
/// (`schedule_cost`: kernel looping's prefetch overlap, reconfigurations between programs not
/// resident together): every call's breakdown, less the seconds its weight stream overlapped
/// the previous loop iteration's tail (taken from weight streaming, the time it hides), plus
/// the reconfigurations. Also each program's share of the step (its calls, less their
/// overlap), the number of reconfigurations, and the step's seconds as `schedule_cost` sums them.
fn step_breakdown(m: &Manifest, programs: &[ProgramView], chip: &Chip) -> Result<StepView> {
    let program = |name: &str| {
        programs.iter().find(|p| p.name == name).map(|p| Scheduled {
            name: &p.name,
            spatial: &p.spatial,
            cost: &p.cost,
        })
    };
    let spine = (m.programs.embed.name.as_str(), m.programs.head.name.as_str());
    let cost =
        schedule_cost(&m.schedule, spine, &program, chip, true).map_err(|e| anyhow!("the manifest's schedule: {e}"))?;
    let mut step = Breakdown::default();
    let mut per_program = vec![(0usize, Breakdown::default()); programs.len()];
    for (name, overlap) in &cost.calls {
        let i = programs.iter().position(|p| &p.name == name).expect("schedule_cost found it");
        let mut b = breakdown(&programs[i].cost);
        b.streaming -= overlap;
        step.add(&b, 1.0);
        per_program[i].0 += 1;
        per_program[i].1.add(&b, 1.0);
    }
    step.reconfiguration += cost.reconfigurations as f64 * chip.reconfiguration;
    Ok(StepView {
        step,
        per_program,
        reconfigurations: cost.reconfigurations,
        seconds: cost.seconds,
        loops: cost.loops,
    })
}

/// A step by the manifest's schedule ([`step_breakdown`]).
pub struct StepView {
    pub step: Breakdown,
    /// Per program (in `Report::programs` order): its calls a step and their breakdown.
    pub per_program: Vec<(usize, Breakdown)>,
    pub reconfigurations: usize,
    /// The step's seconds as `rdu lower` sums them (equal to `step.total()` up to rounding).
    pub seconds: f64,
    /// Looped invocations.
    pub loops: usize,
}
