//! `rdu plan`: how many chips and what batch — every tensor-parallel width the model admits (up
//! to 16) × batch 1, 4, 8, 16, 32, 64, each cell the step estimate of that deployment lowered
//! exactly as `rdu lower` lowers its cut (tp 1 batch 1: `decode`; batch > 1: `batched`; tp > 1:
//! `tp` / `batched-tp`) and its memory per chip as `rdu fit` counts it.
//!
//! Planning is estimation: the cells are lowered with `estimate_streamed` — structure and
//! resources checked, numbers not certified — and every cell's embedding and head are lowered
//! once per batch and shared by its widths (a tensor-parallel cut runs its one-chip
//! counterpart's); the cells run in parallel. The estimates are the lowering's:
//! `tests/plan.rs` holds cells to `rdu lower --json`'s step and `rdu fit --json`'s bytes exactly.

mod load;
mod spec;

use crate::fit_cmd::gb;
use crate::model_arg::check_size;
use crate::model_arg::{resolve_with_weights, storage_of, with_state, TargetArgs};
use crate::report::svg::{colour, esc};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use rdu_compiler::deploy::{Estimator, Spine};
use rdu_compiler::fit::admits_tp;
use rdu_compiler::fit::per_chip;
use rdu_compiler::model::spec::Cut;
use rdu_spatial::chip::Chip;
use serde_json::json;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct PlanArgs {
    /// A preset name, a config.json, or a directory holding one
    pub(crate) model: String,
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// KV-cache positions of every sequence
    #[arg(long, default_value_t = 4096)]
    pub(crate) ctx: usize,
    /// Print one JSON object: {"model", "chip", "rows": [{"tp", "batch", "tokens_per_second_per_sequence",
    /// "tokens_per_second", "model_roofline_fraction", "bytes_per_chip", "fits"}], "refused": [{"tp", "reason"}]}
    #[arg(long)]
    pub(crate) json: bool,
    /// Draw the throughput-versus-latency frontier: a self-contained HTML page (inline SVG and
    /// the table), or the bare SVG when FILE ends in .svg
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// Plan speculative deployments instead: DRAFT (a model with the target's vocabulary)
    /// drafting for MODEL's verify step, swept over the widths both admit, --draft-tokens and
    /// --acceptance
    #[arg(long, value_name = "DRAFT")]
    draft: Option<String>,
    /// With --draft: the drafted tokens swept (default 1,2,3,4,6,8)
    #[arg(long, value_name = "K", value_delimiter = ',', requires = "draft")]
    pub(crate) draft_tokens: Vec<usize>,
    /// With --draft: the acceptance rates swept (default 0.6,0.7,0.8,0.9)
    #[arg(long, value_name = "A", value_delimiter = ',', requires = "draft")]
    pub(crate) acceptance: Vec<f64>,
    #[command(flatten)]
    load: load::LoadArgs,
}

/// The widths swept: every one up to this the model admits.
pub const MAX_TP: usize = 16;
/// The batch sizes swept.
pub const BATCHES: [usize; 6] = [1, 4, 8, 16, 32, 64];

/// One deployment: `tp` chips, `batch` sequences a step.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub tp: usize,
    pub batch: usize,
    pub step_seconds: f64,
    pub tokens_per_second_per_sequence: f64,
    pub tokens_per_second: f64,
    pub model_roofline_fraction: f64,
    pub bytes_per_chip: u64,
    /// Everything each chip holds (weights, caches, states) fits in its HBM.
    pub fits: bool,
}

/// The plan: the cells of every admitted width, and the widths refused with their reasons.
pub struct Plan {
    pub model: String,
    pub chip: Chip,
    pub ctx: usize,
    pub storage: &'static str,
    pub state: &'static str,
    pub cells: Vec<Cell>,
    pub refused: Vec<(usize, String)>,
    /// `--workload` / `--rate`: how every cell serves it.
    pub serving: Option<Serving>,
}

/// The simulated serving of a workload: its description, the target, each cell's figures
/// (`None` for a cell that does not fit).
pub struct Serving {
    pub described: String,
    pub target_ms: Option<f64>,
    pub loads: Vec<Option<load::Load>>,
}

impl Plan {
    /// The fitting cell of batch 1 with the most tokens/s: the fastest single-sequence deployment.
    pub fn fastest_single(&self) -> Option<&Cell> {
        best(self.cells.iter().filter(|c| c.fits && c.batch == 1), |c| c.tokens_per_second_per_sequence)
    }

    /// The fitting cell on `tp` chips with the most aggregate tokens/s.
    pub fn highest_throughput(&self, tp: usize) -> Option<&Cell> {
        best(self.cells.iter().filter(|c| c.fits && c.tp == tp), |c| c.tokens_per_second)
    }

    /// The widths swept, in order.
    pub fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.cells.iter().map(|c| c.tp).collect();
        w.dedup();
        w
    }

    /// The cells no other fitting cell beats on both tokens/s per sequence and aggregate
    /// tokens/s, by tokens/s per sequence: the throughput-versus-latency frontier.
    pub fn frontier(&self) -> Vec<&Cell> {
        let fitting: Vec<&Cell> = self.cells.iter().filter(|c| c.fits).collect();
        let beaten = |c: &Cell| {
            fitting.iter().any(|o| {
                o.tokens_per_second_per_sequence >= c.tokens_per_second_per_sequence
                    && o.tokens_per_second >= c.tokens_per_second
                    && (o.tokens_per_second_per_sequence > c.tokens_per_second_per_sequence
                        || o.tokens_per_second > c.tokens_per_second)
            })
        };
        let mut front: Vec<&Cell> = fitting.iter().copied().filter(|c| !beaten(c)).collect();
        front.sort_by(|a, b| a.tokens_per_second_per_sequence.total_cmp(&b.tokens_per_second_per_sequence));
        front
    }
}

/// The first element with the largest `key` (ties to the earlier one).
fn best<'c>(cells: impl Iterator<Item = &'c Cell>, key: impl Fn(&Cell) -> f64) -> Option<&'c Cell> {
    cells.fold(None, |b: Option<&Cell>, c| match b {
        Some(b) if key(b) >= key(c) => Some(b),
        _ => Some(c),
    })
}

/// The cut `rdu lower` lowers for `tp` chips and `batch` sequences.
pub fn cut_of(tp: usize, batch: usize, ctx: usize) -> Cut {
    match (tp, batch) {
        (1, 1) => Cut::Decode { ctx },
        (1, batch) => Cut::Batched { batch, ctx },
        (tp, 1) => Cut::Tp { tp, ctx },
        (tp, batch) => Cut::BatchedTp { batch, tp, ctx },
    }
}

pub fn run(args: &PlanArgs) -> Result<()> {
    if args.ctx == 0 {
        bail!("--ctx must be at least 1");
    }
    check_size("--ctx", args.ctx)?;
    if let Some(draft) = &args.draft {
        return spec::run(args, draft);
    }
    if let Some(out) = &args.out {
        check_out(out)?;
    }
    let (spec, weights) = resolve_with_weights(&args.model)?;
    let spec = with_state(spec, args.target.state);
    let chip = Chip::resolve(&args.target.chip)?;
    let storage = storage_of(args.target.storage, &spec, &weights);
    let mut widths = Vec::new();
    let mut refused = Vec::new();
    for tp in 1..=MAX_TP {
        match admits_tp(&spec, tp, &storage) {
            Ok(()) => widths.push(tp),
            Err(r) => refused.push((tp, r.reason)),
        }
    }
    let arrivals = args.load.arrivals(args.ctx)?;
    let estimator = Estimator::new(&spec, chip.clone(), storage.clone(), 0);
    let cells = sweep(&estimator, &widths, args.ctx)?;
    let serving = if args.load.wanted() {
        let chunk = args.load.chunk(args.ctx);
        let steps = chunk_steps(&estimator, &widths, chunk, args.ctx)?;
        let step_of = |tp: usize| widths.iter().position(|&w| w == tp).map(|i| steps[i]);
        let loads = load::serve_all(&cells, &step_of, &arrivals, chunk, args.ctx)?;
        Some(Serving { described: args.load.describe(&arrivals), target_ms: args.load.p99_tpot, loads })
    } else {
        None
    };
    let plan = Plan {
        model: spec.name.clone(),
        chip,
        ctx: args.ctx,
        storage: storage.label(),
        state: spec.state.as_str(),
        cells,
        refused,
        serving,
    };
    if let Some(out) = &args.out {
        let svg_only = out.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg"));
        let text = if svg_only { frontier_svg(&plan) } else { page(&plan) };
        crate::report::write_atomically(out, &text)?;
    }
    if args.json {
        println!("{}", plan_json(&plan));
        eprintln!("{NOTE}");
    } else {
        print!("{}", table(&plan));
        if let Some(sv) = &plan.serving {
            print!("{}", load::table(&plan.cells, &sv.loads, &sv.described, sv.target_ms));
        }
    }
    if let Some(out) = &args.out {
        eprintln!("plan of {} written to {}", plan.model, out.display());
    }
    Ok(())
}

/// Refuses `-o` naming a directory or a file in a missing folder, before the sweep, not after it.
fn check_out(out: &std::path::Path) -> Result<()> {
    if out.is_dir() {
        bail!("-o {}: is a directory; name the file to write (plan.html or plan.svg)", out.display());
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if !parent.is_dir() {
        bail!("cannot write {}: its folder {} does not exist", out.display(), parent.display());
    }
    Ok(())
}

/// Every cell of `widths` × [`BATCHES`], in parallel and sorted: first every batch's embedding
/// and head (shared by its widths), then every (width, batch) layer kind. Progress on stderr
/// once the sweep has taken more than a second.
fn sweep(estimator: &Estimator, widths: &[usize], ctx: usize) -> Result<Vec<Cell>> {
    let started = Instant::now();
    let bar = ProgressBar::with_draw_target(
        Some((BATCHES.len() + widths.len() * BATCHES.len()) as u64),
        ProgressDrawTarget::hidden(),
    );
    bar.set_style(
        ProgressStyle::with_template("{spinner} planning: {pos}/{len} lowered {msg} [{elapsed}]").expect("template"),
    );
    let shown = AtomicBool::new(false);
    let tick = |msg: String| {
        if started.elapsed() > Duration::from_secs(1) && !shown.swap(true, Ordering::Relaxed) {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        bar.set_message(msg);
    };
    let spines: Vec<Spine> = BATCHES
        .par_iter()
        .map(|&batch| {
            tick(format!("(embedding and head, batch {batch})"));
            let spine = estimator.spine(cut_of(1, batch, ctx), &mut |_| {});
            bar.inc(1);
            spine.map_err(|e| anyhow!("batch {batch}: {e}"))
        })
        .collect::<Result<_>>()?;
    let grid: Vec<(usize, usize)> = widths.iter().flat_map(|&tp| BATCHES.iter().map(move |&b| (tp, b))).collect();
    let mut cells: Vec<Cell> = grid
        .par_iter()
        .map(|&(tp, batch)| -> Result<Cell> {
            tick(format!("(tp {tp}, batch {batch})"));
            let spine = &spines[BATCHES.iter().position(|&b| b == batch).expect("a swept batch")];
            let cell = cell(estimator, spine, tp, batch, ctx);
            bar.inc(1);
            cell
        })
        .collect::<Result<_>>()?;
    bar.finish_and_clear();
    cells.sort_by_key(|c| (c.tp, c.batch));
    Ok(cells)
}

/// The cost model's time of one prefill chunk of `chunk` rows on each of `widths` (the prefill
/// cut on one chip, prefill-tp over more), in parallel.
fn chunk_steps(estimator: &Estimator, widths: &[usize], chunk: usize, ctx: usize) -> Result<Vec<f64>> {
    let one = Cut::Prefill { chunk, ctx };
    let spine = estimator.spine(one, &mut |_| {}).map_err(|e| anyhow!("prefill chunk {chunk}: {e}"))?;
    widths
        .par_iter()
        .map(|&tp| {
            let cut = if tp == 1 { one } else { Cut::PrefillTp { chunk, tp, ctx } };
            let model = estimator
                .estimate(cut, &spine, &mut |_| {})
                .map_err(|e| anyhow!("tp {tp}, prefill chunk {chunk}: {e}"))?;
            Ok(model.step_estimate().seconds)
        })
        .collect()
}

/// The cell of `tp` chips and `batch` sequences: its layer kinds estimated over `spine`.
fn cell(estimator: &Estimator, spine: &Spine, tp: usize, batch: usize, ctx: usize) -> Result<Cell> {
    let cut = cut_of(tp, batch, ctx);
    let model = estimator.estimate(cut, spine, &mut |_| {}).map_err(|e| anyhow!("tp {tp}, batch {batch}: {e}"))?;
    let step = model.step_estimate();
    let fit = per_chip(&model.chip, &model.embed.source, &model.layer_sources, &model.head.source)?;
    Ok(Cell {
        tp,
        batch,
        step_seconds: step.seconds,
        tokens_per_second_per_sequence: if step.seconds > 0.0 { 1.0 / step.seconds } else { 0.0 },
        tokens_per_second: step.tokens_per_second,
        model_roofline_fraction: step.model_roofline_fraction,
        bytes_per_chip: fit.demand.total(),
        fits: fit.fits && !fit.spills_to_ddr,
    })
}

/// What every output says of its numbers.
pub const NOTE: &str = "estimates: every deployment lowered as `rdu lower` lowers it, structure and resources \
                        checked, numbers not certified (planning is estimation)";

fn plan_json(p: &Plan) -> serde_json::Value {
    let rows: Vec<_> = p
        .cells
        .iter()
        .map(|c| {
            json!({
                "tp": c.tp,
                "batch": c.batch,
                "tokens_per_second_per_sequence": c.tokens_per_second_per_sequence,
                "tokens_per_second": c.tokens_per_second,
                "model_roofline_fraction": c.model_roofline_fraction,
                "bytes_per_chip": c.bytes_per_chip,
                "fits": c.fits,
            })
        })
        .collect();
    let refused: Vec<_> = p.refused.iter().map(|(tp, reason)| json!({"tp": tp, "reason": reason})).collect();
    let mut v = json!({"model": p.model, "chip": p.chip.name, "rows": rows, "refused": refused});
    if let Some(sv) = &p.serving {
        v["workload"] = json!({"described": sv.described, "target_p99_tpot_ms": sv.target_ms});
        for (row, load) in v["rows"].as_array_mut().into_iter().flatten().zip(&sv.loads) {
            row["serving"] = load.as_ref().map_or(serde_json::Value::Null, |l| load::load_json(l, sv.target_ms));
        }
    }
    v
}

/// The marks of a cell: `*` the fastest single sequence, `+` the highest throughput on its chips.
fn marks(p: &Plan, c: &Cell) -> String {
    let mut m = String::new();
    if p.fastest_single() == Some(c) {
        m.push('*');
    }
    if p.highest_throughput(c.tp) == Some(c) {
        m.push('+');
    }
    m
}

/// The plan as text: a header, one line per cell, the refused widths.
pub fn table(p: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} on {} (ctx {}, storage {}, states {}): {} deployments",
        p.model,
        p.chip.name,
        p.ctx,
        p.storage,
        p.state,
        p.cells.len()
    );
    let _ = writeln!(out, "  {NOTE}");
    let _ = writeln!(
        out,
        "  {:>3} {:>5} {:>12} {:>12} {:>9} {:>12} {:>7}",
        "tp", "batch", "tok/s/seq", "tok/s", "roofline", "per chip", "in HBM"
    );
    for c in &p.cells {
        let line = format!(
            "  {:>3} {:>5} {:>12.1} {:>12.1} {:>8.1}% {:>12} {:>7} {}",
            c.tp,
            c.batch,
            c.tokens_per_second_per_sequence,
            c.tokens_per_second,
            c.model_roofline_fraction * 100.0,
            gb(c.bytes_per_chip),
            if c.fits { "yes" } else { "no" },
            marks(p, c)
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let _ = writeln!(
        out,
        "  * fastest single sequence   + highest throughput on that many chips (deployments that fit in HBM)"
    );
    let _ = writeln!(
        out,
        "  roofline: the share of the model's roofline (floor bytes over the chips' HBM bandwidth) reached"
    );
    if !p.refused.is_empty() {
        let _ = writeln!(out, "  widths not admitted:");
        for (tp, reason) in &p.refused {
            let _ = writeln!(out, "    --tp {tp} {reason}");
        }
    }
    out
}

/// The frontier picture: every fitting deployment as a point (tokens/s per sequence across,
/// aggregate tokens/s up, both logarithmic), coloured by its width, the frontier as a line.
/// Every point carries class `cell`; the frontier's points also `frontier`.
pub fn frontier_svg(p: &Plan) -> String {
    let fitting: Vec<&Cell> = p.cells.iter().filter(|c| c.fits && c.tokens_per_second > 0.0).collect();
    let f = Frame::new(&fitting);
    let (w, h) = (f.w, f.h);
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"frontier\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         font-family=\"sans-serif\" font-size=\"12\" role=\"img\" aria-label=\"throughput versus latency of {}\">\
         <rect width=\"{w}\" height=\"{h}\" fill=\"#fff\"/>",
        esc(&p.model)
    );
    f.axes(&mut out);
    let widths = p.widths();
    // Each width's batches joined in order, thin, in its colour.
    for (i, tp) in widths.iter().enumerate() {
        let pts: Vec<String> = fitting.iter().filter(|c| c.tp == *tp).map(|c| f.point(c)).collect();
        if pts.len() > 1 {
            let _ = write!(
                out,
                "<polyline class=\"width\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1\" stroke-opacity=\"0.6\"/>",
                pts.join(" "),
                colour(i, widths.len())
            );
        }
    }
    let front = p.frontier();
    let path: Vec<String> = front.iter().map(|c| f.point(c)).collect();
    if path.len() > 1 {
        let _ =
            write!(out, "<polyline points=\"{}\" fill=\"none\" stroke=\"#222\" stroke-width=\"1.5\"/>", path.join(" "));
    }
    for c in &fitting {
        let i = widths.iter().position(|&t| t == c.tp).unwrap_or(0);
        f.cell(&mut out, c, colour(i, widths.len()), front.iter().any(|o| std::ptr::eq(*o, *c)));
    }
    f.legend(&mut out, &widths);
    out.push_str("</svg>");
    out
}

/// The frontier picture's frame: its size and margins, and the decades (powers of ten) its
/// logarithmic axes span — tokens/s per sequence across, aggregate tokens/s up.
struct Frame {
    w: f64,
    h: f64,
    left: f64,
    bottom: f64,
    top: f64,
    right: f64,
    xs: (f64, f64),
    ys: (f64, f64),
}

impl Frame {
    /// The frame that holds every cell of `fitting`.
    fn new(fitting: &[&Cell]) -> Frame {
        let span = |f: &dyn Fn(&Cell) -> f64| {
            let lo = fitting.iter().map(|c| f(c)).fold(f64::INFINITY, f64::min);
            let hi = fitting.iter().map(|c| f(c)).fold(0.0, f64::max);
            if fitting.is_empty() {
                (0.0, 1.0)
            } else {
                let (lo, hi) = (lo.log10().floor(), hi.log10().ceil());
                (lo, if hi > lo { hi } else { lo + 1.0 })
            }
        };
        let xs = span(&|c| c.tokens_per_second_per_sequence);
        let ys = span(&|c| c.tokens_per_second);
        Frame { w: 760.0, h: 440.0, left: 70.0, bottom: 50.0, top: 20.0, right: 150.0, xs, ys }
    }

    fn x(&self, v: f64) -> f64 {
        self.left + (v.log10() - self.xs.0) / (self.xs.1 - self.xs.0) * (self.w - self.left - self.right)
    }

    fn y(&self, v: f64) -> f64 {
        self.h - self.bottom - (v.log10() - self.ys.0) / (self.ys.1 - self.ys.0) * (self.h - self.top - self.bottom)
    }

    /// Where `c` is drawn, as `x,y`.
    fn point(&self, c: &Cell) -> String {
        format!("{:.1},{:.1}", self.x(c.tokens_per_second_per_sequence), self.y(c.tokens_per_second))
    }

    /// The axes with a grid line and a label at every power of ten, and their titles.
    fn axes(&self, out: &mut String) {
        let Frame { w, h, left, bottom, top, right, .. } = *self;
        let _ = write!(
            out,
            "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/><line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"#333\"/>",
            h - bottom,
            w - right,
            h - bottom,
            h - bottom
        );
        for e in self.xs.0 as i32..=self.xs.1 as i32 {
            let v = 10f64.powi(e);
            let x = format!("{:.1}", self.x(v));
            let line = [&x, &top.to_string(), &x, &(h - bottom).to_string()];
            grid_line(out, line, [&x, &(h - bottom + 16.0).to_string()], "middle", &number(v));
        }
        for e in self.ys.0 as i32..=self.ys.1 as i32 {
            let v = 10f64.powi(e);
            let y = format!("{:.1}", self.y(v));
            let line = [&left.to_string(), &y, &(w - right).to_string(), &y];
            grid_line(out, line, [&(left - 6.0).to_string(), &format!("{:.1}", self.y(v) + 4.0)], "end", &number(v));
        }
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">tokens/s per sequence (1 / latency of a token)</text>\
             <text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">aggregate tokens/s</text>",
            (left + w - right) / 2.0,
            h - 10.0,
            (top + h - bottom) / 2.0
        );
    }

    /// One deployment as a point (class `cell`, and `frontier` on the frontier) with its figures as a tooltip.
    fn cell(&self, out: &mut String, c: &Cell, colour: String, on_front: bool) {
        let _ = write!(
            out,
            "<circle class=\"cell{}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"{}\" fill=\"{}\" fill-opacity=\"0.85\" stroke=\"#222\" stroke-width=\"{}\">\
             <title>tp {} batch {}: {:.1} tok/s per sequence, {:.1} tok/s, {:.0}% of the model roofline, {:.2} GB a chip</title></circle>",
            if on_front { " frontier" } else { "" },
            self.x(c.tokens_per_second_per_sequence),
            self.y(c.tokens_per_second),
            if on_front { 6 } else { 4 },
            colour,
            if on_front { 1.5 } else { 0.5 },
            c.tp,
            c.batch,
            c.tokens_per_second_per_sequence,
            c.tokens_per_second,
            c.model_roofline_fraction * 100.0,
            c.bytes_per_chip as f64 / 1e9
        );
    }

    /// The legend: one swatch per width.
    fn legend(&self, out: &mut String, widths: &[usize]) {
        for (i, tp) in widths.iter().enumerate() {
            let ly = self.top + 10.0 + i as f64 * 18.0;
            let _ = write!(
                out,
                "<circle cx=\"{}\" cy=\"{ly}\" r=\"5\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{tp} chip{}</text>",
                self.w - self.right + 20.0,
                colour(i, widths.len()),
                self.w - self.right + 32.0,
                ly + 4.0,
                if *tp == 1 { "" } else { "s" }
            );
        }
    }
}

/// A grid line from `(x1, y1)` to `(x2, y2)` with its label at `at`, coordinates as written.
fn grid_line(out: &mut String, [x1, y1, x2, y2]: [&String; 4], [tx, ty]: [&String; 2], anchor: &str, label: &str) {
    let _ = write!(
        out,
        "<line x1=\"{x1}\" y1=\"{y1}\" x2=\"{x2}\" y2=\"{y2}\" stroke=\"#ddd\"/><text x=\"{tx}\" y=\"{ty}\" text-anchor=\"{anchor}\">{label}</text>"
    );
}

/// `1`, `10`, `1k`, `10k`, `1M`.
fn number(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v => format!("{v}"),
    }
}

/// The page `-o plan.html` writes: the frontier and the table, nothing fetched.
fn page(p: &Plan) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>rdu plan: {0}</title>\
         <style>body{{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d1d1b}}pre{{font:12px ui-monospace,monospace}}</style>\
         </head><body><h1>{0} on {1}</h1><p>Throughput against latency of every deployment that fits in HBM; \
         thin lines join each chip count's batches (64 on the left, 1 on the right), the black line the deployments no other beats on both.</p>{2}{4}<pre>{3}</pre></body></html>\n",
        esc(&p.model),
        esc(&p.chip.name),
        frontier_svg(p),
        esc(&table(p)),
        serving_section(p)
    )
}

/// The page's serving section: the latency–throughput curves and the serving table.
fn serving_section(p: &Plan) -> String {
    let Some(sv) = &p.serving else { return String::new() };
    format!(
        "<h2>Serving {0}</h2><p>rdu serve's scheduler in simulated time over the cost model's step times: each deployment \
         runs the workload at ¼, ½, 1, 2 and 4 times its rate (one line each, coloured by chip count).</p>{1}<pre>{2}</pre>",
        esc(&sv.described),
        load::curves_svg(&p.cells, &sv.loads, sv.target_ms),
        esc(&load::table(&p.cells, &sv.loads, &sv.described, sv.target_ms))
    )
}
