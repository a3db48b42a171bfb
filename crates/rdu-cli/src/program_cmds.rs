//! `rdu presets`, `rdu kinds` and `rdu source`: what the author writes and how it groups.

use crate::model_arg::{resolve, resolve_with_weights, storage_of, with_state, CutArg, CutSizes, StateArg, StorageArg};
use anyhow::{bail, Result};
use clap::Args;
use rdu_compiler::deploy::layer_kinds;
use rdu_compiler::model::author::{embed_source, head_source, source_of};
use rdu_compiler::model::presets;
use serde_json::json;

#[derive(Args)]
pub struct KindsArgs {
    /// A preset name, a config.json, or a directory holding one
    model: String,
    /// Which weights are stored Q8_0 (a layer stored differently is its own kind)
    #[arg(long, value_enum, default_value = "auto")]
    storage: StorageArg,
    /// Print one JSON object: {"model", "n_layers", "kinds": [{"name", "digest", "layers", "mixer", "ffn"}],
    /// "unused_mtp_layers"}
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct SourceArgs {
    /// A preset name, a config.json, or a directory holding one
    model: String,
    /// The layer to print (0-based)
    #[arg(long, required_unless_present = "part")]
    layer: Option<usize>,
    /// Print the embedding or head program instead of a layer
    #[arg(long, value_parser = ["embed", "head"], conflicts_with = "layer")]
    part: Option<String>,
    #[arg(long, value_enum, default_value = "decode")]
    cut: CutArg,
    #[command(flatten)]
    sizes: CutSizes,
    #[arg(long, value_enum, default_value = "auto")]
    storage: StorageArg,
    /// How carried state is stored: the element type of the `state` declarations (bf16 by
    /// default, as `rdu lower` lowers)
    #[arg(long, value_enum, default_value = "bf16")]
    state: StateArg,
}

pub fn presets() -> Result<()> {
    for name in presets::names() {
        let spec = resolve(name)?;
        let kinds = layer_kinds(&spec, &StorageArg::Auto.storage());
        println!(
            "{name:<24} {:<12} {:>3} layer{}  d_model {:<5}  {} kind{}",
            spec.family.as_str(),
            spec.n_layers(),
            if spec.n_layers() == 1 { " " } else { "s" },
            spec.d_model,
            kinds.len(),
            if kinds.len() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

pub fn kinds(args: &KindsArgs) -> Result<()> {
    // `auto` is as the checkpoint stores its weights, as `rdu lower` and `rdu fit` read it.
    let (spec, weights) = resolve_with_weights(&args.model)?;
    let storage = storage_of(args.storage, &spec, &weights);
    let kinds = layer_kinds(&spec, &storage);
    // The model's own multi-token-prediction block: a kind of its own, drafting (`--draft mtp`),
    // stored as `--draft mtp` stores it.
    let mtp = crate::model_arg::mtp_of(&spec, &weights, &args.model).ok().and_then(|m| {
        let stored = crate::model_arg::mtp_storage(&storage, &m).ok()?;
        Some(layer_kinds(&m, &stored).remove(0))
    });
    if args.json {
        let kind = |k: &rdu_compiler::deploy::KindGroup| json!({"name": k.name, "digest": k.digest.hex(), "layers": k.layers, "mixer": k.mixer, "ffn": k.ffn});
        let kinds_json: Vec<_> = kinds.iter().map(kind).collect();
        let mut out = json!({
            "model": spec.name,
            "n_layers": spec.n_layers(),
            "storage": storage.label(),
            "kinds": kinds_json,
            "unused_mtp_layers": spec.mtp_layers,
        });
        if let Some(k) = &mtp {
            out["mtp"] = json!({"drafts_with": "--draft mtp", "kind": kind(k)});
        }
        println!("{out}");
        return Ok(());
    }
    println!(
        "{}: {} layer{}, {} kind{} (storage {})",
        spec.name,
        spec.n_layers(),
        if spec.n_layers() == 1 { "" } else { "s" },
        kinds.len(),
        if kinds.len() == 1 { "" } else { "s" },
        storage.label()
    );
    for k in &kinds {
        println!(
            "  {:<34} {:>3} layer{}  {}  digest {}",
            k.name,
            k.layers.len(),
            if k.layers.len() == 1 { " " } else { "s" },
            ranges(&k.layers),
            &k.digest.hex()[..12]
        );
    }
    if spec.mtp_layers > 0 {
        // Present in the checkpoint, read by no program of the decoder: the first drafts
        // (`--draft mtp`) where rdu lowers the family's block.
        let (n, first) = (spec.mtp_layers, spec.n_layers());
        println!(
            "  multi-token prediction: {n} layer{} after the decoder (checkpoint layer{} {}), {}",
            if n == 1 { "" } else { "s" },
            if n == 1 { "" } else { "s" },
            ranges(&(first..first + n).collect::<Vec<_>>()),
            if mtp.is_some() { "not in the decoder's step" } else { "present but unused" }
        );
    }
    if let Some(k) = mtp {
        println!(
            "  + its multi-token-prediction block, a kind of its own drafting with --draft mtp: {} (1 layer)  digest {}",
            k.name,
            &k.digest.hex()[..12]
        );
    }
    Ok(())
}

pub fn source(args: &SourceArgs) -> Result<()> {
    let (spec, weights) = resolve_with_weights(&args.model)?;
    let spec = with_state(spec, args.state);
    let cut = args.cut.cut(&args.sizes)?;
    let storage = storage_of(args.storage, &spec, &weights);
    if cut.is_split() {
        rdu_compiler::fit::admits_tp(&spec, cut.tp(), &storage)?;
    }
    let src = match (args.layer, args.part.as_deref()) {
        (_, Some("embed")) => embed_source(&spec, cut, &storage),
        (_, Some(_)) => head_source(&spec, cut, &storage),
        (Some(l), None) if l < spec.n_layers() => source_of(&spec, l, cut, &storage),
        (Some(l), None) => bail!("--layer {l} is out of range: {} has layers 0..{}", spec.name, spec.n_layers() - 1),
        (None, None) => bail!("give --layer N or --part embed|head"),
    };
    print!("{}", src.text());
    let mut by_format: std::collections::BTreeMap<String, Vec<&str>> = std::collections::BTreeMap::new();
    for (name, storage) in &src.stored {
        by_format.entry(storage.word()).or_default().push(name);
    }
    for (word, names) in by_format {
        let label = if word == "q8_0" { "Q8_0".to_string() } else { word };
        println!("# stored {label}: {}", names.join(" "));
    }
    Ok(())
}

/// `0-2, 4-6, 8` for [0, 1, 2, 4, 5, 6, 8].
pub(crate) fn ranges(layers: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut j = i;
        while j + 1 < layers.len() && layers[j + 1] == layers[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { layers[i].to_string() } else { format!("{}-{}", layers[i], layers[j]) });
        i = j + 1;
    }
    parts.join(", ")
}
