//! `rdu lower`: lower every layer kind once, certify it, and write the bundle.

use crate::model_arg::{resolve_with_weights, storage_of, with_state, CutArg, CutSizes, TargetArgs};
use crate::spec_lower;
use anyhow::{bail, Result};
use clap::Args;
use rdu_compiler::deploy::deploy;
use rdu_compiler::deploy::speculative::{check_acceptance, SpeculativeEstimate};
use rdu_compiler::deploy::{LowerOptions, ProgramPart, Progress, StreamedModel};
use rdu_compiler::lower::PASSES;
use rdu_spatial::chip::Chip;
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(Args)]
pub struct LowerArgs {
    /// A preset name, a config.json, or a directory holding one
    model: String,
    /// What one step processes
    #[arg(long, value_enum, default_value = "decode")]
    cut: CutArg,
    #[command(flatten)]
    sizes: CutSizes,
    #[command(flatten)]
    target: TargetArgs,
    /// Write the bundle to this directory (atomically; an existing bundle is replaced)
    #[arg(short = 'o', long = "out")]
    out: Option<PathBuf>,
    /// Replace an existing directory that is not a bundle
    #[arg(long)]
    force: bool,
    /// Print one JSON object summarising the lowering
    #[arg(long)]
    json: bool,
    /// Print every program's spatial form after this pass (select, from_stored, fuse, tile, section, place, tensor_parallel)
    #[arg(long, value_name = "PASS")]
    dump_after: Option<String>,
    /// Seed of the certification inputs
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// With --cut verify: a speculative deployment, DRAFT's decode bundle (over the same
    /// sequences and chips) beside the verify bundle, or `lookup` (drafted on the host); -o then
    /// writes DIR/verify, DIR/draft and DIR/speculative.json (their schedule and estimate)
    #[arg(long, value_name = "DRAFT")]
    draft: Option<String>,
    /// The rate at which a drafted token stands (the workload's): the estimate's expected
    /// tokens a step, (1 - A^(K+1)) / (1 - A), with the draft's steps and the verify step charged
    #[arg(long, value_name = "A", requires = "draft")]
    acceptance: Option<f64>,
}

pub fn run(args: &LowerArgs) -> Result<()> {
    if let Some(pass) = &args.dump_after {
        if !PASSES.contains(&pass.as_str()) {
            bail!("unknown pass `{pass}` for --dump-after: choose one of {}", PASSES.join(", "));
        }
    }
    let (spec, weights) = resolve_with_weights(&args.model)?;
    let spec = with_state(spec, args.target.state);
    let storage = storage_of(args.target.storage, &spec, &weights);
    let chip = Chip::resolve(&args.target.chip)?;
    let cut = args.cut.cut(&args.sizes)?;
    let bar = crate::progress::lowering_bar(args.json);
    let mut dumps = Vec::new();
    let mut progress = |p: Progress<'_>| {
        crate::progress::show(&bar, &p);
        if let Progress::Pass { program, pass, spatial } = p {
            if Some(pass) == args.dump_after.as_deref() {
                dumps.push(format!("# {program} after {pass}\n{}", rdu_spatial::text::print(spatial)));
            }
        }
    };
    if args.draft.is_some() && cut.draft().is_none() {
        bail!("--draft makes a speculative deployment of a verify step: add --cut verify");
    }
    if let Some(a) = args.acceptance {
        check_acceptance(a).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    // A target drafted by its own MTP block exports the hidden rows the block reads.
    let (spec, mtp) = match args.draft.as_deref() {
        Some(rdu_compiler::model::mtp::MTP_DRAFT) => {
            let mtp = crate::model_arg::mtp_of(&spec, &weights, &args.model)?;
            crate::model_arg::mtp_storage(&storage, &mtp)?;
            (rdu_compiler::model::mtp::exporting_hidden(&spec), Some(mtp))
        }
        _ => (spec, None),
    };
    let opts = LowerOptions { chip, storage, seed: args.seed, progress: &mut progress };
    let model = deploy(&spec, &cut, opts);
    let model = model.map_err(|e| anyhow::anyhow!("{e}"))?;
    let draft = match &args.draft {
        Some(word) => {
            let how = (args.target.storage, args.seed);
            Some(spec_lower::lower_draft(word, &model, mtp.as_ref(), how, &mut progress)?)
        }
        None => None,
    };
    drop(bar);
    for d in &dumps {
        print!("{d}");
    }
    let estimate = match (&draft, args.acceptance) {
        (Some(d), Some(a)) => Some(SpeculativeEstimate::new(&model, d.model(), a).map_err(|e| anyhow::anyhow!("{e}"))?),
        _ => None,
    };
    match (&args.out, &draft) {
        (Some(dir), Some(d)) => spec_lower::write(dir, args.force, &model, d, estimate.as_ref())?,
        (Some(dir), None) => {
            let bundle = model.bundle().map_err(anyhow::Error::msg)?;
            // A `BundleError` names its file and cause in one message.
            bundle
                .write(dir, args.force)
                .map_err(|e| anyhow::anyhow!("writing the bundle to {}: {e}", dir.display()))?;
        }
        (None, _) => {}
    }
    if args.json {
        let mut summary = summary_json(&model);
        if let Some(d) = &draft {
            summary["speculation"] = spec_lower::speculation_json(&model, d, estimate.as_ref());
        }
        if let Some(e) = &estimate {
            summary["step"]["tokens_per_second"] = json!(e.tokens_per_second);
            summary["step"]["verify_tokens_per_second"] = json!(model.step_estimate().tokens_per_second);
        }
        println!("{summary}");
    } else if args.dump_after.is_none() {
        print_summary(&model, args.out.as_ref());
        if let Some(d) = &draft {
            print_speculation(&model, d, estimate.as_ref());
        }
    }
    Ok(())
}

/// The speculative deployment's lines of the summary: the draft, and the estimate at `--acceptance`.
fn print_speculation(model: &StreamedModel, draft: &spec_lower::Draft, estimate: Option<&SpeculativeEstimate>) {
    let k = model.cut.draft().unwrap_or(0);
    match draft.model() {
        Some(m) => println!(
            "  draft: {} ({} kind{}), {:.1} µs a step, on the same {} chip{}",
            m.spec.name,
            m.kinds.len(),
            if m.kinds.len() == 1 { "" } else { "s" },
            m.step_estimate().seconds * 1e6,
            m.cut.tp(),
            if m.cut.tp() == 1 { "" } else { "s" }
        ),
        None => println!("  draft: prompt lookup on the host (no draft steps charged)"),
    }
    match estimate {
        Some(e) => println!(
            "  speculative step: K = {k}, acceptance {}: {:.3} tokens a step expected; {:.1} µs (verify {:.1} + {:.3} draft steps × {:.1}): {:.1} tokens/s",
            e.acceptance,
            e.expected_tokens_per_step,
            e.seconds_per_step * 1e6,
            e.verify_step_seconds * 1e6,
            e.draft_steps_per_step,
            e.draft_step_seconds * 1e6,
            e.tokens_per_second
        ),
        None => println!("  speculative step: K = {k}; pass --acceptance A for its tokens/s"),
    }
}

fn part_json(p: &ProgramPart) -> Value {
    json!({
        "name": p.name,
        "digest": p.digest,
        "certified": true,
        "certificate": {"checks": p.certificate.checks, "seed": p.certificate.seed, "tolerance": p.certificate.tolerance, "max_abs_err": p.certificate.max_abs_err},
        "cost": {"seconds": p.cost.seconds, "hbm_bytes": p.cost.hbm_bytes, "flops": p.cost.flops, "pcus": p.cost.pcus, "pmus": p.cost.pmus, "sections": p.cost.sections.len(), "link_bytes": p.cost.link_bytes},
    })
}

fn summary_json(model: &StreamedModel) -> Value {
    let cut = match model.cut {
        rdu_compiler::model::spec::Cut::Forward { seq } => json!({"mode": "forward", "seq": seq}),
        rdu_compiler::model::spec::Cut::Decode { ctx } => json!({"mode": "decode", "ctx": ctx}),
        other => {
            let mut cut = json!({"mode": other.word(), "ctx": other.ctx(), "batch": other.batch(), "tp": other.tp(), "chunk": other.chunk()});
            if let Some(k) = other.draft() {
                cut["draft_tokens"] = json!(k);
            }
            cut
        }
    };
    let kinds: Vec<Value> = model
        .kinds
        .iter()
        .map(|k| {
            let mut v = part_json(&k.program);
            v.as_object_mut().expect("object").insert("layers".into(), json!(k.layers));
            v
        })
        .collect();
    let step = model.step_estimate();
    let serial = model.serial_step_estimate();
    let (ddr_classes, ddr_bytes) = model.ddr_classes();
    json!({
        "model": model.spec.name,
        "cut": cut,
        "chip": model.chip.name,
        "storage": model.storage.label(),
        "state": model.spec.state.as_str(),
        "lowering_seconds": model.lowering_seconds,
        "kinds": kinds,
        "embed": part_json(&model.embed),
        "head": part_json(&model.head),
        "step": {
            "seconds": step.seconds,
            "roofline_seconds": step.roofline_seconds,
            "roofline_fraction": step.roofline_fraction,
            "tokens_per_second": step.tokens_per_second,
            "hbm_bytes": step.hbm_bytes,
            "ddr_bytes": ddr_bytes,
            "ddr_classes": ddr_classes,
            "flops": step.flops,
            "reconfigurations": step.reconfigurations,
            "loops": step.loops,
            "floor_bytes": step.floor_bytes,
            "model_roofline_seconds": step.model_roofline_seconds,
            "model_roofline_fraction": step.model_roofline_fraction,
            "model_flops": step.model_flops,
            "model_flop_utilisation": step.model_flop_utilisation,
            "serial_seconds": serial.seconds,
            "serial_reconfigurations": serial.reconfigurations,
        },
    })
}

fn print_summary(model: &StreamedModel, out: Option<&PathBuf>) {
    println!(
        "{} → {} ({} layer{}, {} kind{}, storage {}, states {}), lowered and certified in {:.2}s",
        model.spec.name,
        model.chip.name,
        model.spec.n_layers(),
        if model.spec.n_layers() == 1 { "" } else { "s" },
        model.kinds.len(),
        if model.kinds.len() == 1 { "" } else { "s" },
        model.storage.label(),
        model.spec.state.as_str(),
        model.lowering_seconds
    );
    println!(
        "  {:<34} {:>6} {:>8} {:>9} {:>9} {:>11} {:>10}",
        "program", "layers", "sections", "peak PCUs", "peak PMUs", "µs/step", "max err"
    );
    let row = |p: &ProgramPart, layers: usize| {
        println!(
            "  {:<34} {:>6} {:>8} {:>9} {:>9} {:>11.2} {:>10.1e}",
            p.name,
            layers,
            p.cost.sections.len(),
            p.cost.pcus,
            p.cost.pmus,
            p.cost.seconds * 1e6,
            p.certificate.max_abs_err
        );
    };
    row(&model.embed, 0);
    for k in &model.kinds {
        row(&k.program, k.layers.len());
    }
    row(&model.head, 0);
    let step = model.step_estimate();
    println!(
        "  step: {:.1} µs ({:.1} tokens/s), {} reconfigurations, {} loop{} (unlooped {:.1} µs)",
        step.seconds * 1e6,
        step.tokens_per_second,
        step.reconfigurations,
        step.loops,
        if step.loops == 1 { "" } else { "s" },
        model.serial_step_estimate().seconds * 1e6
    );
    let (ddr_classes, ddr_bytes) = model.ddr_classes();
    if !ddr_classes.is_empty() {
        println!(
            "  beyond HBM: {} live in DDR; a step reads {:.2} GB of them a chip at DDR bandwidth",
            ddr_classes.join(", "),
            ddr_bytes as f64 / 1e9
        );
    }
    println!(
        "  model roofline: {:.1} µs ({:.2} GB floor over {} chip{}), {:.0}% of it reached",
        step.model_roofline_seconds * 1e6,
        step.floor_bytes as f64 / 1e9,
        model.cut.tp(),
        if model.cut.tp() == 1 { "" } else { "s" },
        step.model_roofline_fraction * 100.0
    );
    println!(
        "  model FLOP utilisation: {:.0}% ({:.2} TFLOP a step at the model's count over {} × {:.0} TFLOP/s bf16 peak)",
        step.model_flop_utilisation * 100.0,
        step.model_flops / 1e12,
        model.cut.tp(),
        model.chip.peak_flops_bf16 / 1e12
    );
    println!(
        "  HBM roofline of rdu's own bytes: {:.1} µs ({:.0}% of it)",
        step.roofline_seconds * 1e6,
        step.roofline_fraction * 100.0
    );
    println!(
        "  peak PCUs/PMUs: the most any one section of a program places (the {} has {} PCUs and {} PMUs)",
        model.chip.name, model.chip.pcus, model.chip.pmus
    );
    if let Some(dir) = out {
        println!("  bundle written to {}", dir.display());
    }
}
