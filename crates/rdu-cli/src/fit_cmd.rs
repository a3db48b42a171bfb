//! `rdu fit`: the memory a decode deployment holds on one chip — weights as stored, KV caches
//! and carried state — placed in the chip's HBM and then its DDR; with `--tp T`, on each of T
//! chips (its slices of every layer; the embedding and head replicated), after checking that
//! the model admits T (`fit::admits_tp`). It does not lower anything: the compiler's `fit`
//! tallies the declarations of every authored program (`fit::decode_parts`, where the
//! counting is stated); this module prints the tally.

use crate::model_arg::{check_size, resolve_with_weights, storage_of, with_state, TargetArgs};
use anyhow::{bail, Result};
use clap::Args;
use rdu_compiler::fit::{admits_tp, admitted_widths, decode_parts, Part};
use rdu_spatial::chip::Chip;
use rdu_spatial::memory::{place, MemoryFit};
use serde_json::json;

#[derive(Args)]
pub struct FitArgs {
    /// A preset name, a config.json, or a directory holding one
    model: String,
    /// KV-cache positions of the decode cut
    #[arg(long, default_value_t = 4096)]
    ctx: usize,
    /// Sequences decoded together (each holds its own KV cache and state)
    #[arg(long, default_value_t = 1)]
    batch: usize,
    #[command(flatten)]
    target: TargetArgs,
    /// Print one JSON object: {"model", "chip", "ctx", "storage", "state", "parts", "weight_bytes", "state_bytes", ...}
    #[arg(long)]
    json: bool,
    /// Tensor-parallel width: whether the model admits T chips (the reason if not), and the
    /// memory each chip holds (its slices of every layer, the replicated embedding and head)
    #[arg(long, value_name = "T")]
    tp: Option<usize>,
}

/// Widths `rdu fit` lists as admitted.
const MAX_LISTED_TP: usize = 64;

pub fn run(args: &FitArgs) -> Result<()> {
    if args.ctx == 0 {
        bail!("--ctx must be at least 1");
    }
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    check_size("--ctx", args.ctx)?;
    check_size("--batch", args.batch)?;
    let (spec, weights) = resolve_with_weights(&args.model)?;
    let spec = with_state(spec, args.target.state);
    let chip = Chip::resolve(&args.target.chip)?;
    // `auto` is as the checkpoint stores its weights, as `rdu lower` reads it.
    let storage = storage_of(args.target.storage, &spec, &weights);
    if let Some(tp) = args.tp {
        admits_tp(&spec, tp, &storage)?;
    }
    let (parts, demand) = decode_parts(&spec, &storage, args.ctx, args.batch, args.tp)?;
    let report = Report {
        model: &spec.name,
        chip: &chip,
        ctx: args.ctx,
        batch: args.batch,
        storage: storage.label(),
        state: spec.state.as_str(),
        tied: spec.head.tied,
        fit: place(&chip, demand),
        parts,
        chips: args.tp.unwrap_or(1),
        admitted: admitted_widths(&spec, MAX_LISTED_TP, &storage),
    };
    if args.json {
        print_json(&report);
    } else {
        print_text(&report);
    }
    Ok(())
}

struct Report<'a> {
    model: &'a str,
    chip: &'a Chip,
    ctx: usize,
    batch: usize,
    storage: &'static str,
    /// How states are stored: `bf16` or `f32`.
    state: &'static str,
    /// The head reads the embedding table `E` (counted under `embed`).
    tied: bool,
    parts: Vec<Part>,
    fit: MemoryFit,
    /// Chips the demand is per (tensor parallel), 1 otherwise.
    chips: usize,
    /// Tensor-parallel widths up to `MAX_LISTED_TP` the model admits.
    admitted: Vec<usize>,
}

impl Report<'_> {
    fn params(&self) -> u64 {
        self.parts.iter().map(|p| p.params).sum()
    }
}

fn print_json(r: &Report) {
    let fit = &r.fit;
    let parts: Vec<_> = r
        .parts
        .iter()
        .map(|p| {
            json!({"name": p.name, "layers": p.layers, "params": p.params, "weight_bytes": p.weight_bytes,
                   "q8_bytes": p.stored_bytes.get("q8_0").copied().unwrap_or(0), "stored_bytes": p.stored_bytes,
                   "state_bytes": p.state_bytes, "shared_bytes": p.shared_bytes})
        })
        .collect();
    let out = json!({
        "model": r.model,
        "chip": r.chip.name,
        "chips": r.chips,
        "tp_admitted": r.admitted,
        "ctx": r.ctx,
        "batch": r.batch,
        "storage": r.storage,
        "state": r.state,
        "tied_head": r.tied,
        "parts": parts,
        "params": r.params(),
        "weight_bytes": fit.demand.weight_bytes,
        "state_bytes": fit.demand.state_bytes,
        "total_bytes": fit.demand.total(),
        "hbm_capacity": fit.hbm_capacity,
        "ddr_capacity": fit.ddr_capacity,
        "hbm_bytes": fit.hbm_bytes,
        "ddr_bytes": fit.ddr_bytes,
        "spills_to_ddr": fit.spills_to_ddr,
        "fits_hbm": !fit.spills_to_ddr && fit.fits,
        "fits": fit.fits,
        "shortfall_bytes": fit.shortfall,
    });
    println!("{out}");
}

fn print_text(r: &Report) {
    let (fit, parts) = (&r.fit, &r.parts);
    let on = match r.chips {
        1 => format!("one {}", r.chip.name),
        n => format!("each of {n} {} chips (tensor parallel)", r.chip.name),
    };
    println!(
        "{} on {on}: decode of {} sequence(s), ctx {}, storage {}, states {}, {} parameters",
        r.model,
        r.batch,
        r.ctx,
        r.storage,
        r.state,
        count(r.params())
    );
    println!("  {:<34} {:>6} {:>10} {:>12} {:>12}", "program", "layers", "params", "weights", "state");
    for p in parts {
        let layers = if p.layers == 0 { "-".to_string() } else { p.layers.to_string() };
        let name = if p.name == "head" && r.tied { "head (tied: E under embed)" } else { &p.name };
        let row = (count(p.params), gb(p.weight_bytes), gb(p.state_bytes));
        println!("  {name:<34} {layers:>6} {:>10} {:>12} {:>12}", row.0, row.1, row.2);
    }
    let shared: u64 = parts.iter().map(|p| p.shared_bytes).sum();
    let mut stored: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for (format, b) in parts.iter().flat_map(|p| &p.stored_bytes) {
        *stored.entry(format).or_default() += b;
    }
    let q8 = stored.remove("q8_0").unwrap_or(0);
    let others: String = stored.iter().map(|(f, b)| format!(", {} as {}", gb(*b), f.to_uppercase())).collect();
    let d = &fit.demand;
    println!(
        "  weights {} ({} as Q8_0{others}, the rest bf16; shared tables {}), state {} ({}), total {}",
        gb(d.weight_bytes),
        gb(q8),
        gb(shared),
        gb(d.state_bytes),
        r.state,
        gb(d.total())
    );
    println!("  HBM {:>10} of {:>10}", gb(fit.hbm_bytes), gb(fit.hbm_capacity));
    println!("  DDR {:>10} of {:>10}", gb(fit.ddr_bytes), gb(fit.ddr_capacity));
    let verdict = if !fit.fits {
        format!("does not fit: {} more than HBM and DDR hold", gb(fit.shortfall))
    } else if fit.spills_to_ddr {
        format!("fits with a spill: {} beyond HBM lives in DDR and streams at DDR bandwidth", gb(fit.ddr_bytes))
    } else {
        format!("fits in HBM with {} to spare", gb(fit.hbm_capacity - fit.hbm_bytes))
    };
    println!("  {verdict}");
    let widths: Vec<String> = r.admitted.iter().map(usize::to_string).collect();
    println!("  tensor-parallel widths admitted (up to {MAX_LISTED_TP}): {}", widths.join(", "));
}

/// Decimal gigabytes, as chip vendors state capacities.
pub(crate) fn gb(bytes: u64) -> String {
    if bytes == 0 {
        "0".to_string()
    } else if bytes >= 10_000_000 {
        format!("{:.2} GB", bytes as f64 / 1e9)
    } else {
        format!("{:.2} MB", bytes as f64 / 1e6)
    }
}

/// `1.20 T`, `80.10 B`, `3.20 M`, `1234`; `2.83e15` beyond.
fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000_000_000 => format!("{:.2e}", n as f64),
        n if n >= 1_000_000_000_000 => format!("{:.2} T", n as f64 / 1e12),
        n if n >= 1_000_000_000 => format!("{:.2} B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.2} M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} K", n as f64 / 1e3),
        n => n.to_string(),
    }
}
