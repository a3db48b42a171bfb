//! `rdu verify`: re-certify a bundle from its own files (`rdu_compiler::verify`), one line per
//! program; exit 1 naming the program and the check that fails.

use crate::model_arg::resolve;
use anyhow::{anyhow, Result};
use clap::Args;
use rdu_compiler::verify::{verify_bundle, verify_model};
use rdu_spatial::chip::Chip;
use std::path::PathBuf;

#[derive(Args, Clone)]
pub struct VerifyArgs {
    /// A bundle directory (written by `rdu lower -o`, by anyone), or a speculative deployment
    /// (`rdu lower --cut verify --draft`: its verify and draft bundles)
    bundle: PathBuf,
    /// Also re-author this model and check every layer's program is its kind's under the
    /// manifest's binding (a preset, a config.json or a directory holding one, a .gguf)
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// The chip description, when the bundle's chip is not built in (sn50, sn40l)
    #[arg(long, value_name = "FILE")]
    chip: Option<String>,
}

pub fn run(args: &VerifyArgs) -> Result<()> {
    if crate::spec_lower::is_speculative(&args.bundle) {
        // A speculative deployment: its verify bundle (of MODEL) and its draft's decode bundle.
        let verify = VerifyArgs { bundle: args.bundle.join("verify"), ..args.clone() };
        run(&verify)?;
        let draft = args.bundle.join("draft");
        if draft.exists() {
            run(&VerifyArgs { bundle: draft, model: None, ..args.clone() })?;
        }
        println!("{}: a speculative deployment, every bundle re-certified", args.bundle.display());
        return Ok(());
    }
    let dir = &args.bundle;
    let bundle = crate::bundle_arg::open(dir)?;
    let chip = match &args.chip {
        Some(c) => Chip::resolve(c)?,
        None => Chip::builtin(&bundle.manifest.chip).map_err(|e| {
            anyhow!("{e}; the bundle is for chip `{}`: pass its description with --chip FILE", bundle.manifest.chip)
        })?,
    };
    let width = bundle.manifest.programs.kinds.iter().map(|k| k.name.len()).max().unwrap_or(0).max(5);
    let reports = verify_bundle(&bundle, &chip, &mut |r| {
        println!("{:<width$}  ok  {}  max |err| {:.3e}", r.name, r.checks.join(", "), r.max_abs_err);
    })
    .map_err(|f| anyhow!("verify {}: {f}", dir.display()))?;
    if let Some(model) = &args.model {
        let spec = resolve(model)?;
        verify_model(&bundle, &spec).map_err(|f| anyhow!("verify {} against {model}: {f}", dir.display()))?;
        println!(
            "model  ok  every layer's program is its kind's under the manifest's binding ({} layers)",
            bundle.manifest.layers.len()
        );
    }
    println!("{}: {} programs re-certified from the bundle's files", dir.display(), reports.len());
    Ok(())
}
