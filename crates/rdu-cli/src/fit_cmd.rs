//! `rdu fit`: the memory a decode deployment holds on one chip — weights as stored, KV caches
//! and carried state — placed in the chip's HBM and then its DDR; with `--tp T`, on each of T
//! chips (its slices of every layer; the embedding and head replicated), after checking that
//! the model admits T (`fit::admits_tp`). It does not lower anything: it reads the
//! declarations of every authored program.
//!
//! Counting, stated once: a weight in the program's Q8_0 set is held as Q8_0 blocks (34
//! bytes per 32 elements), any other weight as bf16; carried state as f32 (as the programs
//! declare it and `rdu_spatial::memory` counts it), once per sequence of a batch; a shared table
//! (RoPE) once, as f32. A tensor named by several programs (the embedding table `E` of a
//! tied head) is counted once.

use crate::model_arg::{resolve_with_weights, storage_of, with_state, StateArg, StorageArg};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use rdu_compiler::fit::{admits_tp, admitted_widths};
use rdu_compiler::lang::ast::{DType, DeclKind};
use rdu_compiler::lang::{parse, Source};
use rdu_compiler::lower::streamed::layer_kinds_for;
use rdu_compiler::model::author::{embed_source, head_source, source_of};
use rdu_compiler::model::spec::Cut;
use rdu_spatial::chip::Chip;
use rdu_spatial::memory::{place, tensor_bytes, MemoryDemand, MemoryFit, TensorFormat};
use serde_json::json;
use std::collections::BTreeSet;

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
    /// Target chip: sn50, sn40l, or a chip description file (TOML)
    #[arg(long, default_value = "sn50")]
    chip: String,
    /// Which weights are stored Q8_0
    #[arg(long, value_enum, default_value = "auto")]
    storage: StorageArg,
    /// How carried state (KV caches, latent caches, recurrent state) is stored: 2 or 4 bytes an element
    #[arg(long, value_enum, default_value = "f32")]
    state: StateArg,
    /// Print one JSON object: {"model", "chip", "ctx", "storage", "state", "parts", "weight_bytes", "state_bytes", ...}
    #[arg(long)]
    json: bool,
    /// Tensor-parallel width: whether the model admits T chips (the reason if not), and the
    /// memory each chip holds (its slices of every layer, the replicated embedding and head)
    #[arg(long, value_name = "T")]
    tp: Option<usize>,
}

/// The largest `--ctx`, `--batch`, `--seq` or `--chunk` rdu authors: sizes are written into
/// program text and multiplied into element counts, which must stay far inside 64 bits.
pub const MAX_SIZE: usize = 1 << 32;

/// Refuses a size beyond [`MAX_SIZE`], naming the flag, the number and the limit.
pub fn check_size(flag: &str, value: usize) -> Result<()> {
    if value > MAX_SIZE {
        bail!("{flag} {value} is too large: rdu lowers at most {MAX_SIZE} (2^32)");
    }
    Ok(())
}

/// The parameters and the state bytes (f32) of a decode deployment of `ctx` positions: what
/// the reference engine holds (weights as f32, caches and states as f32).
pub fn decode_demand(
    spec: &rdu_compiler::model::spec::ModelSpec,
    ctx: usize,
    storage: &rdu_compiler::lower::streamed::Storage,
) -> Result<(u64, u64)> {
    let cut = Cut::Decode { ctx };
    let mut tally = Tally::default();
    let mut part = Part::default();
    tally.add(&mut part, &embed_source(spec, cut, storage), "embedding")?;
    for l in 0..spec.n_layers() {
        tally.add(&mut part, &source_of(spec, l, cut, storage), &format!("layer {l}"))?;
    }
    tally.add(&mut part, &head_source(spec, cut, storage), "head")?;
    Ok((part.params, part.state_bytes + part.shared_bytes))
}

/// Widths `rdu fit` lists as admitted.
const MAX_LISTED_TP: usize = 64;

/// What one program (or all layers of one kind) adds to the demand.
#[derive(Default)]
struct Part {
    name: String,
    layers: usize,
    params: u64,
    weight_bytes: u64,
    q8_bytes: u64,
    state_bytes: u64,
    shared_bytes: u64,
}

/// Sums declarations across programs, counting each tensor name once.
#[derive(Default)]
struct Tally {
    seen: BTreeSet<String>,
}

impl Tally {
    fn add(&mut self, part: &mut Part, source: &Source, what: &str) -> Result<()> {
        let program = parse(&source.text).map_err(|d| {
            anyhow!(
                "the authored {what} program does not parse: {}",
                d.first().map_or(String::new(), |d| d.to_string())
            )
        })?;
        for decl in program.decls() {
            if decl.kind == DeclKind::Input || !self.seen.insert(decl.name.text.clone()) {
                continue;
            }
            let shape: Vec<u64> = decl.ty.shape.iter().map(|&d| d as u64).collect();
            let bytes = |format| tensor_bytes(&shape, format).map_err(|e| anyhow!("{what}: `{}`: {e}", decl.name));
            match decl.kind {
                DeclKind::Weight if source.q8.contains(&decl.name.text) => {
                    let b = bytes(TensorFormat::Q8_0)?;
                    part.weight_bytes += b;
                    part.q8_bytes += b;
                    part.params += shape.iter().product::<u64>();
                }
                DeclKind::Weight => {
                    part.weight_bytes += bytes(TensorFormat::DenseBf16)?;
                    part.params += shape.iter().product::<u64>();
                }
                DeclKind::State if decl.ty.dtype == DType::Bf16 => part.state_bytes += bytes(TensorFormat::DenseBf16)?,
                DeclKind::State => part.state_bytes += bytes(TensorFormat::F32)?,
                DeclKind::Shared => part.shared_bytes += bytes(TensorFormat::F32)?,
                DeclKind::Input => {}
            }
        }
        Ok(())
    }
}

/// What each chip of a decode deployment of `batch` sequences over `tp` chips (one chip when
/// `None`) holds, program by program, and in all: its slices of every layer, the embedding and
/// the head replicated. `tp` must be admitted (`admits_tp`).
fn parts_and_demand(
    spec: &rdu_compiler::model::spec::ModelSpec,
    storage: &rdu_compiler::lower::streamed::Storage,
    ctx: usize,
    batch: usize,
    tp: Option<usize>,
) -> Result<(Vec<Part>, MemoryDemand)> {
    let cut = match batch {
        1 => Cut::Decode { ctx },
        batch => Cut::Batched { batch, ctx },
    };
    // Each chip holds its share of every layer and of the head; the embedding is replicated.
    let layer_cut = match (tp, batch) {
        (Some(tp), 1) => Cut::Tp { tp, ctx },
        (Some(tp), batch) => Cut::BatchedTp { batch, tp, ctx },
        (None, _) => cut,
    };
    let mut tally = Tally::default();

    let mut parts = Vec::new();
    let mut embed = Part { name: "embed".into(), ..Part::default() };
    tally.add(&mut embed, &embed_source(spec, cut, storage), "embedding")?;
    parts.push(embed);
    for kind in layer_kinds_for(spec, layer_cut, storage) {
        let mut part = Part { name: kind.name.clone(), layers: kind.layers.len(), ..Part::default() };
        for &l in &kind.layers {
            tally.add(&mut part, &source_of(spec, l, layer_cut, storage), &format!("layer {l}"))?;
        }
        parts.push(part);
    }
    let mut head = Part { name: "head".into(), ..Part::default() };
    // The head is vocabulary-parallel under tensor parallelism: each chip its run of the rows.
    tally.add(&mut head, &head_source(spec, layer_cut, storage), "head")?;
    parts.push(head);

    let sum = |f: fn(&Part) -> u64| parts.iter().map(f).sum::<u64>();
    let demand = MemoryDemand {
        weight_bytes: sum(|p| p.weight_bytes) + sum(|p| p.shared_bytes),
        state_bytes: sum(|p| p.state_bytes),
    };
    Ok((parts, demand))
}

/// The bytes each chip of a lowered decode deployment holds, counted as `rdu fit --batch B
/// --tp T` counts them — from the programs it lowered: the embedding and head (replicated) and
/// every layer's own source (one chip's slices of it) — and where they land on its chip.
/// `rdu plan` uses it so that a cell authors its layers once; `tests/plan.rs` holds it equal to
/// `rdu fit`.
pub fn per_chip(model: &rdu_compiler::lower::streamed::StreamedModel) -> Result<MemoryFit> {
    let mut tally = Tally::default();
    let mut all = Part::default();
    tally.add(&mut all, &model.embed.source, "embedding")?;
    for (l, source) in model.layer_sources.iter().enumerate() {
        tally.add(&mut all, source, &format!("layer {l}"))?;
    }
    tally.add(&mut all, &model.head.source, "head")?;
    let demand = MemoryDemand { weight_bytes: all.weight_bytes + all.shared_bytes, state_bytes: all.state_bytes };
    Ok(place(&model.chip, demand))
}

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
    let spec = with_state(spec, args.state);
    let chip = Chip::resolve(&args.chip)?;
    // `auto` is as the checkpoint stores its weights, as `rdu lower` reads it.
    let storage = storage_of(args.storage, &weights);
    if let Some(tp) = args.tp {
        admits_tp(&spec, tp, &storage)?;
    }
    let (parts, demand) = parts_and_demand(&spec, &storage, args.ctx, args.batch, args.tp)?;
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
                   "q8_bytes": p.q8_bytes, "state_bytes": p.state_bytes, "shared_bytes": p.shared_bytes})
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
    let q8: u64 = parts.iter().map(|p| p.q8_bytes).sum();
    let d = &fit.demand;
    println!(
        "  weights {} ({} as Q8_0, the rest bf16; shared tables {}), state {} ({}), total {}",
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
