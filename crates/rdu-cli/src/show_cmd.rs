//! `rdu show`: what a bundle holds — its programs, their certificates and costs, which kind
//! runs at each layer — or one program's spatial text, or a Graphviz view of its stages.
//! It reads the bundle only (and refuses one `rdu run` would refuse: `bundle_arg::open`); it
//! never lowers or certifies anything.

use crate::program_cmds::ranges;
use anyhow::{anyhow, Context, Result};
use clap::Args;
use rdu_spatial::bundle::Bundle;
use rdu_spatial::manifest::{CertificateEntry, CostEntry, Manifest, ProgramEntry};
use rdu_spatial::program::{Role, SpatialProgram};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct ShowArgs {
    /// A bundle directory written by `rdu lower -o`
    bundle: PathBuf,
    /// Print this program's spatial text (`embed`, `head`, or a kind name)
    #[arg(long, value_name = "NAME")]
    program: Option<String>,
    /// Write a Graphviz digraph of the sections, stages and the tensors between them
    /// (of `--program`, or of every program)
    #[arg(long, value_name = "FILE")]
    dot: Option<PathBuf>,
}

/// One program of the manifest, whichever part it is.
struct Entry<'m> {
    name: &'m str,
    file_spatial: &'m str,
    layers: Option<&'m [usize]>,
    certificate: &'m CertificateEntry,
    cost: &'m CostEntry,
}

pub fn run(args: &ShowArgs) -> Result<()> {
    let dir = &args.bundle;
    let bundle = crate::bundle_arg::open(dir)?;
    let entries = entries(&bundle.manifest);
    let chosen: Vec<&Entry> = match &args.program {
        Some(name) => vec![entries.iter().find(|e| e.name == name).ok_or_else(|| {
            let names: Vec<&str> = entries.iter().map(|e| e.name).collect();
            anyhow!("{} has no program `{name}`; its programs are {}", dir.display(), names.join(", "))
        })?],
        None => entries.iter().collect(),
    };
    if let Some(path) = &args.dot {
        let mut programs = Vec::new();
        for e in &chosen {
            programs.push(spatial(&bundle, e)?);
        }
        std::fs::write(path, dot(&programs)).with_context(|| format!("cannot write {}", path.display()))?;
    }
    match &args.program {
        Some(_) => print!("{}", text(&bundle, chosen[0])?),
        None => print_summary(dir, &bundle.manifest, &entries),
    }
    if let Some(path) = &args.dot {
        // stdout holds the program's text with --program: say it on stderr then.
        let note = format!("Graphviz view of {} program(s) written to {}", chosen.len(), path.display());
        match &args.program {
            Some(_) => eprintln!("{note}"),
            None => println!("\n  {note}"),
        }
    }
    Ok(())
}

fn entries(m: &Manifest) -> Vec<Entry<'_>> {
    let p = &m.programs;
    let mut out = vec![part(&p.embed)];
    out.extend(p.kinds.iter().map(|k| Entry {
        name: &k.name,
        file_spatial: &k.file_spatial,
        layers: Some(&k.layers),
        certificate: &k.certificate,
        cost: &k.cost,
    }));
    out.push(part(&p.head));
    out
}

fn part(e: &ProgramEntry) -> Entry<'_> {
    Entry { name: &e.name, file_spatial: &e.file_spatial, layers: None, certificate: &e.certificate, cost: &e.cost }
}

fn text<'b>(bundle: &'b Bundle, e: &Entry) -> Result<&'b str> {
    // `Bundle::open` has checked that every referenced file is present.
    bundle.files.get(e.file_spatial).map(String::as_str).ok_or_else(|| anyhow!("the bundle lacks {}", e.file_spatial))
}

fn spatial(bundle: &Bundle, e: &Entry) -> Result<SpatialProgram> {
    rdu_spatial::text::parse(text(bundle, e)?).with_context(|| format!("{} is not a spatial program", e.file_spatial))
}

fn print_summary(dir: &Path, m: &Manifest, entries: &[Entry]) {
    println!("bundle {}: {}", dir.display(), m.model);
    println!("  cut      {}", cut_text(m));
    println!("  chip     {}", m.chip);
    println!("  storage  {}", m.storage);
    println!(
        "  {} layer{}, {} kind{}, {} checkpoint tensors, {} states, inputs {}",
        m.layers.len(),
        if m.layers.len() == 1 { "" } else { "s" },
        m.programs.kinds.len(),
        if m.programs.kinds.len() == 1 { "" } else { "s" },
        m.tensors.len(),
        m.states.len(),
        m.inputs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ")
    );
    println!();
    println!(
        "  {:<34} {:<14} {:>8} {:>9} {:>9} {:>10}  certificate",
        "program", "layers", "sections", "peak PCUs", "peak PMUs", "µs/step"
    );
    for e in entries {
        let c = e.certificate;
        println!(
            "  {:<34} {:<14} {:>8} {:>9} {:>9} {:>10.2}  {}; seed {}, tolerance {:.1e}, max err {:.1e}",
            e.name,
            e.layers.map_or_else(|| "-".to_string(), ranges),
            e.cost.sections,
            e.cost.pcus,
            e.cost.pmus,
            e.cost.seconds * 1e6,
            c.checks.join(", "),
            c.seed,
            c.tolerance,
            c.max_abs_err
        );
    }
    println!();
    println!("  {:<14} kind", "layers");
    let mut i = 0;
    while i < m.layers.len() {
        let mut j = i;
        while j + 1 < m.layers.len() && m.layers[j + 1].kind == m.layers[i].kind {
            j += 1;
        }
        let span: Vec<usize> = m.layers[i..=j].iter().map(|l| l.layer).collect();
        println!("  {:<14} {}", ranges(&span), m.layers[i].kind);
        i = j + 1;
    }
}

/// The cut as `mode (ctx 4096, batch 8)`, as `rdu show` and `rdu report` print it.
pub(crate) fn cut_text(m: &Manifest) -> String {
    let c = &m.cut;
    let mode = crate::model_arg::mode_word(c.mode);
    let figures = [("ctx", c.ctx), ("seq", c.seq), ("batch", c.batch), ("tp", c.tp), ("chunk", c.chunk)];
    let given: Vec<String> = figures.iter().filter_map(|(k, v)| v.map(|v| format!("{k} {v}"))).collect();
    if given.is_empty() {
        mode.to_string()
    } else {
        format!("{mode} ({})", given.join(", "))
    }
}

/// A digraph with one cluster per program and per section; a node per stage, an edge per
/// tensor a later stage reads, and the program's inputs and outputs as ellipses.
fn dot(programs: &[SpatialProgram]) -> String {
    let mut out = String::from("digraph bundle {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n");
    for p in programs {
        let id = |name: &str| format!("\"{}/{}\"", p.name, name);
        let _ = writeln!(out, "  subgraph \"cluster_{}\" {{\n    label=\"{}\";", p.name, p.name);
        let mut producer: BTreeMap<&str, &str> = BTreeMap::new();
        let mut edges: Vec<(String, String, &str)> = Vec::new();
        for t in p.tensors.iter().filter(|t| t.role == Role::Input) {
            let _ = writeln!(out, "    {} [shape=ellipse, label=\"{}\"];", id(&format!("in:{}", t.name)), t.name);
            producer.insert(&t.name, "");
        }
        for (s, section) in p.sections.iter().enumerate() {
            let _ = writeln!(out, "    subgraph \"cluster_{}_{s}\" {{\n      label=\"section {s}\";", p.name);
            for stage in &section.stages {
                let ops: Vec<&str> = stage.ops.iter().map(|o| o.op.name()).collect();
                let _ = writeln!(
                    out,
                    "      {} [label=\"{}\\n{}\\npcus={} pmus={}\"];",
                    id(&stage.name),
                    stage.name,
                    ops.join(", "),
                    stage.pcus,
                    stage.pmus
                );
                let mut seen = Vec::new();
                for op in &stage.ops {
                    for read in op.reads() {
                        let Some(&from) = producer.get(read) else { continue };
                        if from != stage.name && !seen.contains(&read) {
                            seen.push(read);
                            let from = if from.is_empty() { format!("in:{read}") } else { from.to_string() };
                            edges.push((id(&from), id(&stage.name), read));
                        }
                    }
                    for o in &op.outs {
                        producer.insert(o, &stage.name);
                    }
                }
            }
            out.push_str("    }\n");
        }
        for o in &p.outputs {
            let _ = writeln!(out, "    {} [shape=ellipse, label=\"{o}\"];", id(&format!("out:{o}")));
            if let Some(&from) = producer.get(o.as_str()) {
                let from = if from.is_empty() { format!("in:{o}") } else { from.to_string() };
                edges.push((id(&from), id(&format!("out:{o}")), o));
            }
        }
        for (from, to, tensor) in edges {
            let _ = writeln!(out, "    {from} -> {to} [label=\"{tensor}\"];");
        }
        out.push_str("  }\n");
    }
    out.push_str("}\n");
    out
}
