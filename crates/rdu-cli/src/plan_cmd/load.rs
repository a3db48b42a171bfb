//! `rdu plan --workload FILE` / `--rate R`: every deployment of the plan serving a workload in
//! simulated time — `rdu serve`'s scheduler (`rdu_host::schedule`), each step taking the cost
//! model's time for what it runs (its prefill chunks through the prefill cut of that width, then
//! the batched decode step of that cell) — with throughput, time to first token and time per
//! output token at p50/p99, and whether a p99 time-per-token target holds. The workload is also
//! run at a quarter, half, twice and four times its rate for the latency–throughput curves.

use super::Cell;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rayon::prelude::*;
use rdu_host::schedule::{percentile, poisson, simulate, Arrival, Config, Simulated, Step, PREFILLING};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The rates the curves run the workload at, as multiples of its own.
pub const SCALES: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 4.0];

#[derive(Args, Clone, Debug)]
pub struct LoadArgs {
    /// Simulate serving this workload on every deployment: JSON Lines, one request a line,
    /// {"at": seconds, "prompt_tokens": P, "output_tokens": O}
    #[arg(long, value_name = "FILE", conflicts_with = "rate")]
    pub workload: Option<PathBuf>,
    /// Simulate a Poisson stream of R requests a second instead (--prompt-tokens, --output-tokens)
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// Prompt tokens of each request of the --rate stream
    #[arg(long, value_name = "P", default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Output tokens of each request of the --rate stream
    #[arg(long, value_name = "O", default_value_t = 128)]
    pub output_tokens: usize,
    /// Requests of the --rate stream
    #[arg(long, default_value_t = 1000)]
    pub requests: usize,
    /// Rows of a prefill chunk in the simulated deployments, as `rdu serve --chunk` (default:
    /// 512, or --ctx when smaller)
    #[arg(long, value_name = "C")]
    pub chunk: Option<usize>,
    /// The target: p99 time per output token in milliseconds; each deployment says whether it
    /// holds it (and keeps up with the workload)
    #[arg(long, value_name = "MS")]
    pub p99_tpot: Option<f64>,
}

impl LoadArgs {
    /// Whether a workload is asked for.
    pub fn wanted(&self) -> bool {
        self.workload.is_some() || self.rate.is_some()
    }

    /// The workload's requests, sorted by arrival; refuses bad values naming the flag or line.
    pub fn arrivals(&self, ctx: usize) -> Result<Vec<Arrival>> {
        if !self.wanted() {
            return Ok(Vec::new());
        }
        let chunk = self.chunk(ctx);
        if chunk == 0 || chunk > ctx {
            bail!("--chunk {chunk} must be between 1 and --ctx {ctx}");
        }
        if let Some(ms) = self.p99_tpot {
            if !(ms.is_finite() && ms > 0.0) {
                bail!("--p99-tpot {ms} must be a positive number of milliseconds");
            }
        }
        let mut arrivals = match (&self.workload, self.rate) {
            (Some(file), _) => read_workload(file)?,
            (None, Some(rate)) => {
                if !(rate.is_finite() && rate > 0.0) {
                    bail!("--rate {rate} must be a positive number of requests a second");
                }
                for (flag, v) in [
                    ("--prompt-tokens", self.prompt_tokens),
                    ("--output-tokens", self.output_tokens),
                    ("--requests", self.requests),
                ] {
                    if v == 0 {
                        bail!("{flag} must be at least 1");
                    }
                }
                poisson(rate, self.requests, self.prompt_tokens, self.output_tokens, 0)
            }
            (None, None) => Vec::new(),
        };
        arrivals.sort_by(|a, b| a.at.total_cmp(&b.at));
        Ok(arrivals)
    }

    /// The prefill chunk of the simulated deployments.
    pub fn chunk(&self, ctx: usize) -> usize {
        self.chunk.unwrap_or(512.min(ctx))
    }

    /// The workload in words.
    pub fn describe(&self, arrivals: &[Arrival]) -> String {
        match (&self.workload, self.rate) {
            (Some(file), _) => format!("{} ({} requests)", file.display(), arrivals.len()),
            (None, Some(rate)) => format!(
                "{rate} requests/s (Poisson), {} prompt and {} output tokens each, {} requests",
                self.prompt_tokens, self.output_tokens, self.requests
            ),
            (None, None) => String::new(),
        }
    }
}

/// One line of a workload file per request.
fn read_workload(file: &std::path::Path) -> Result<Vec<Arrival>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading --workload {}", file.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = || format!("{}:{}", file.display(), i + 1);
        let v: Value = serde_json::from_str(line).map_err(|e| anyhow!("{}: not JSON: {e}", at()))?;
        let num = |key: &str| v[key].as_f64().ok_or_else(|| anyhow!("{}: `{key}` must be a number", at()));
        let (t, p, o) = (num("at")?, num("prompt_tokens")?, num("output_tokens")?);
        if !(t.is_finite() && t >= 0.0) {
            bail!("{}: `at` {t} must be a time in seconds, at least 0", at());
        }
        if p < 1.0 || o < 1.0 || p.fract() != 0.0 || o.fract() != 0.0 {
            bail!("{}: `prompt_tokens` and `output_tokens` must be whole numbers, at least 1", at());
        }
        out.push(Arrival { at: t, prompt: p as usize, output: o as usize });
    }
    if out.is_empty() {
        bail!("--workload {} holds no requests: write one JSON object a line", file.display());
    }
    Ok(out)
}

/// How one deployment served the workload at one rate.
#[derive(Clone, Debug, PartialEq)]
pub struct Served {
    /// The rate as a multiple of the workload's own.
    pub scale: f64,
    pub throughput: f64,
    /// Output tokens a second the workload asks for.
    pub offered: f64,
    pub ttft: (f64, f64),
    pub tpot: (f64, f64),
    pub completed: usize,
    pub refused: usize,
    pub max_waiting: usize,
}

impl Served {
    /// Generation keeps up with what arrives (at least 95% of the offered token rate).
    pub fn keeps_up(&self) -> bool {
        self.refused == 0 && self.throughput >= 0.95 * self.offered
    }
}

/// A deployment's serving figures: its step times and the workload at every scale.
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    pub decode_step: f64,
    pub chunk_step: f64,
    /// At [`SCALES`], in order.
    pub curve: Vec<Served>,
}

impl Load {
    /// The workload at its own rate.
    pub fn at_rate(&self) -> &Served {
        &self.curve[SCALES.iter().position(|&s| s == 1.0).unwrap_or(0)]
    }

    /// Whether it holds `target_ms` of p99 time per output token and keeps up.
    pub fn holds(&self, target_ms: f64) -> bool {
        let s = self.at_rate();
        s.keeps_up() && s.tpot.1 * 1e3 <= target_ms
    }
}

/// Every fitting cell serving `arrivals` (cells that do not fit get `None`), in parallel;
/// `chunk_step[tp]` is the cost model's time of one prefill chunk on `tp` chips.
pub fn serve_all(
    cells: &[Cell],
    chunk_step: &(dyn Fn(usize) -> Option<f64> + Sync),
    arrivals: &[Arrival],
    chunk: usize,
    ctx: usize,
) -> Result<Vec<Option<Load>>> {
    cells
        .par_iter()
        .map(|c| {
            let Some(chunk_step) = chunk_step(c.tp).filter(|_| c.fits) else { return Ok(None) };
            let cfg = Config {
                slots: c.batch,
                ctx,
                chunk: Some(chunk),
                budget: c.batch + chunk,
                queue: arrivals.len().max(1),
                prefilling: PREFILLING,
            };
            let decode_step = c.step_seconds;
            let step_time =
                |s: &Step| if s.rows.is_empty() { 0.0 } else { decode_step } + s.chunks.len() as f64 * chunk_step;
            let curve = SCALES
                .iter()
                .map(|&scale| {
                    let scaled: Vec<Arrival> = arrivals.iter().map(|a| Arrival { at: a.at / scale, ..*a }).collect();
                    let sim = simulate(cfg, &scaled, &step_time)
                        .map_err(|e| anyhow!("tp {} batch {}: {e}", c.tp, c.batch))?;
                    Ok(served(scale, &scaled, &sim))
                })
                .collect::<Result<_>>()?;
            Ok(Some(Load { decode_step, chunk_step, curve }))
        })
        .collect()
}

fn served(scale: f64, arrivals: &[Arrival], sim: &Simulated) -> Served {
    let start = arrivals.first().map_or(0.0, |a| a.at);
    let span = arrivals.last().map_or(0.0, |a| a.at) - start;
    let tokens: usize = arrivals.iter().map(|a| a.output).sum();
    // A single burst offers everything at once: what it asks for is then as fast as possible.
    let offered = if span > 0.0 { tokens as f64 / span } else { 0.0 };
    let ttfts: Vec<f64> = sim.done.iter().filter_map(|t| t.ttft()).collect();
    let tpots: Vec<f64> = sim.done.iter().filter_map(|t| t.tpot()).collect();
    let p = |v: &[f64], q: f64| percentile(v, q).unwrap_or(0.0);
    Served {
        scale,
        throughput: sim.throughput(start),
        offered,
        ttft: (p(&ttfts, 50.0), p(&ttfts, 99.0)),
        tpot: (p(&tpots, 50.0), p(&tpots, 99.0)),
        completed: sim.done.len(),
        refused: sim.refused,
        max_waiting: sim.max_waiting,
    }
}

/// A cell's `serving` object in `--json`.
pub fn load_json(load: &Load, target_ms: Option<f64>) -> Value {
    let one = |s: &Served| {
        json!({
            "rate_scale": s.scale,
            "throughput_tokens_per_second": s.throughput,
            "offered_tokens_per_second": s.offered,
            "ttft_p50_s": s.ttft.0, "ttft_p99_s": s.ttft.1,
            "tpot_p50_s": s.tpot.0, "tpot_p99_s": s.tpot.1,
            "completed": s.completed, "refused": s.refused, "max_waiting": s.max_waiting,
            "keeps_up": s.keeps_up(),
        })
    };
    let mut v = one(load.at_rate());
    v["decode_step_s"] = json!(load.decode_step);
    v["chunk_step_s"] = json!(load.chunk_step);
    v["holds_target"] = json!(target_ms.map(|t| load.holds(t)));
    v["curve"] = Value::Array(load.curve.iter().map(one).collect());
    v
}

/// The serving table under the plan's.
pub fn table(cells: &[Cell], loads: &[Option<Load>], described: &str, target_ms: Option<f64>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "serving {described} (simulated: rdu serve's scheduler over the cost model's step times)");
    let _ = writeln!(
        out,
        "  {:>3} {:>5} {:>12} {:>10} {:>10} {:>10} {:>10} {:>8} {:>6}",
        "tp", "batch", "tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "keeps up", "holds"
    );
    for (c, l) in cells.iter().zip(loads) {
        let Some(l) = l else { continue };
        let s = l.at_rate();
        let holds = target_ms.map_or("-", |t| if l.holds(t) { "yes" } else { "no" });
        let _ = writeln!(
            out,
            "  {:>3} {:>5} {:>12.1} {:>8.2}ms {:>8.2}ms {:>8.3}ms {:>8.3}ms {:>8} {:>6}",
            c.tp,
            c.batch,
            s.throughput,
            s.ttft.0 * 1e3,
            s.ttft.1 * 1e3,
            s.tpot.0 * 1e3,
            s.tpot.1 * 1e3,
            if s.keeps_up() { "yes" } else { "no" },
            holds
        );
    }
    if let Some(t) = target_ms {
        let _ =
            writeln!(out, "  holds: p99 time per output token at most {t} ms, and generation keeps up with arrivals");
    }
    out
}

/// The latency–throughput curves: for every fitting deployment, the workload run at each of
/// [`SCALES`] of its rate, as p99 time per output token and p99 time to first token against the
/// throughput reached (both axes logarithmic), one line per deployment coloured by its width; the
/// target as a dashed line. Every point carries class `served`.
pub fn curves_svg(cells: &[Cell], loads: &[Option<Load>], target_ms: Option<f64>) -> String {
    let widths: Vec<usize> = {
        let mut w: Vec<usize> = cells.iter().map(|c| c.tp).collect();
        w.dedup();
        w
    };
    let lines: Vec<(&Cell, &Load)> = cells.iter().zip(loads).filter_map(|(c, l)| l.as_ref().map(|l| (c, l))).collect();
    let tpot = |s: &Served| s.tpot.1 * 1e3;
    let ttft = |s: &Served| s.ttft.1 * 1e3;
    let mut out = String::from(
        "<svg class=\"curves\" xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"420\" viewBox=\"0 0 1000 420\" \
         font-family=\"sans-serif\" font-size=\"12\" role=\"img\" aria-label=\"latency against throughput\"><rect width=\"1000\" height=\"420\" fill=\"#fff\"/>",
    );
    panel(&mut out, 0.0, &lines, &widths, ("p99 time per output token (ms)", &tpot), target_ms);
    panel(&mut out, 500.0, &lines, &widths, ("p99 time to first token (ms)", &ttft), None);
    out.push_str("</svg>");
    out
}

/// One log–log panel at `x0`: throughput across, `y` up.
fn panel(
    out: &mut String,
    x0: f64,
    lines: &[(&Cell, &Load)],
    widths: &[usize],
    (title, y): (&str, &dyn Fn(&Served) -> f64),
    target: Option<f64>,
) {
    let pts: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|(_, l)| l.curve.iter().map(|s| (s.throughput, y(s))))
        .filter(|&(a, b)| a > 0.0 && b > 0.0)
        .collect();
    let decades = |v: &mut dyn Iterator<Item = f64>| {
        let (lo, hi) = v.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        if hi <= 0.0 {
            return (0.0, 1.0);
        }
        let (lo, hi) = (lo.log10().floor(), hi.log10().ceil());
        (lo, if hi > lo { hi } else { lo + 1.0 })
    };
    let xs = decades(&mut pts.iter().map(|p| p.0));
    let ys = decades(&mut pts.iter().map(|p| p.1).chain(target));
    let (left, right, top, bottom) = (x0 + 70.0, x0 + 480.0, 20.0, 360.0);
    let px = |v: f64| left + (v.log10() - xs.0) / (xs.1 - xs.0) * (right - left);
    let py = |v: f64| bottom - (v.log10() - ys.0) / (ys.1 - ys.0) * (bottom - top);
    let _ = write!(out, "<line x1=\"{left}\" y1=\"{bottom}\" x2=\"{right}\" y2=\"{bottom}\" stroke=\"#333\"/><line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"#333\"/>");
    for e in xs.0 as i32..=xs.1 as i32 {
        let x = px(10f64.powi(e));
        let _ = write!(out, "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{bottom}\" stroke=\"#eee\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", bottom + 16.0, 10f64.powi(e));
    }
    for e in ys.0 as i32..=ys.1 as i32 {
        let yv = py(10f64.powi(e));
        let _ = write!(out, "<line x1=\"{left}\" y1=\"{yv:.1}\" x2=\"{right}\" y2=\"{yv:.1}\" stroke=\"#eee\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>", left - 6.0, yv + 4.0, 10f64.powi(e));
    }
    if let Some(t) = target {
        let ty = py(t);
        let _ = write!(out, "<line class=\"target\" x1=\"{left}\" y1=\"{ty:.1}\" x2=\"{right}\" y2=\"{ty:.1}\" stroke=\"#c00\" stroke-dasharray=\"6 4\"/>");
    }
    for (c, l) in lines {
        let i = widths.iter().position(|&w| w == c.tp).unwrap_or(0);
        let colour = crate::report::svg::colour(i, widths.len());
        let p: Vec<String> = l
            .curve
            .iter()
            .filter(|s| s.throughput > 0.0 && y(s) > 0.0)
            .map(|s| format!("{:.1},{:.1}", px(s.throughput), py(y(s))))
            .collect();
        let _ = write!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.2\"/>",
            p.join(" ")
        );
        for s in l.curve.iter().filter(|s| s.throughput > 0.0 && y(s) > 0.0) {
            let _ = write!(
                out,
                "<circle class=\"served\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"><title>tp {} batch {} at {}× the rate: {:.1} tok/s, {title} {:.2}</title></circle>",
                px(s.throughput), py(y(s)), c.tp, c.batch, s.scale, s.throughput, y(s)
            );
        }
    }
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">aggregate tokens/s reached</text><text transform=\"translate({} {}) rotate(-90)\" text-anchor=\"middle\">{title}</text>",
        (left + right) / 2.0, bottom + 40.0, x0 + 16.0, (top + bottom) / 2.0
    );
}
