//! Mutation testing of certification: every tiny preset lowered in every cut, every program's
//! `.spatial` text mutated by semantic operators. With stale hashes, reading the bundle (the
//! `rdu run --bundle` / `rdu show` path) refuses every mutant naming the file; with the hashes
//! recomputed, only re-certification (`rdu verify`) can tell — and it must refuse every one.

use rdu_compiler::deploy::{
    lower_batched_decode_streamed, lower_batched_tp_decode_streamed, lower_decode_streamed, lower_forward_streamed,
    lower_prefill_streamed, lower_tp_decode_streamed, lower_verify_streamed, LowerOptions, Storage, StreamedModel,
};
use rdu_compiler::fit::admits_tp;
use rdu_compiler::model::presets;
use rdu_compiler::verify::{verify_bundle, verify_one};
use rdu_spatial::bundle::{Bundle, BundleError};
use rdu_spatial::chip::Chip;
use std::collections::BTreeMap;

fn opts<'a>(progress: &'a mut dyn FnMut(rdu_compiler::deploy::Progress<'_>)) -> LowerOptions<'a> {
    LowerOptions { chip: Chip::builtin("sn50").unwrap(), storage: Storage::AllQ8, seed: 5, progress }
}

/// Every cut of `name` (small sizes), with its label.
fn cuts(name: &str) -> Vec<(String, StreamedModel)> {
    let spec = presets::resolve(name).unwrap();
    let (ctx, mut out) = (16, Vec::new());
    let mut add = |label: &str, m: Result<StreamedModel, _>| {
        out.push((label.to_string(), m.unwrap_or_else(|e| panic!("{name} {label}: {e}"))));
    };
    add("forward", lower_forward_streamed(&spec, 3, opts(&mut |_| {})));
    add("decode", lower_decode_streamed(&spec, ctx, opts(&mut |_| {})));
    add("batched", lower_batched_decode_streamed(&spec, 2, ctx, opts(&mut |_| {})));
    add("prefill", lower_prefill_streamed(&spec, 3, ctx, opts(&mut |_| {})));
    // A context past the tiny presets' 16-slot windows: the rings keep drafted rows pending.
    add("verify", lower_verify_streamed(&spec, 2, None, 1, 24, opts(&mut |_| {})));
    if admits_tp(&spec, 2, &Storage::AllQ8).is_ok() {
        add("tp", lower_tp_decode_streamed(&spec, 2, ctx, opts(&mut |_| {})));
        add("batched-tp", lower_batched_tp_decode_streamed(&spec, 2, 2, ctx, opts(&mut |_| {})));
    }
    out
}

/// The op lines of a spatial text (indented), by line index.
fn op_lines(text: &str) -> Vec<usize> {
    text.lines().enumerate().filter(|(_, l)| l.starts_with("  ")).map(|(i, _)| i).collect()
}

fn with_line(text: &str, i: usize, new: Option<String>, dup: bool) -> String {
    let mut out = String::new();
    for (k, line) in text.lines().enumerate() {
        if k == i {
            if dup {
                out.push_str(line);
                out.push('\n');
                out.push_str(line);
                out.push('\n');
            }
            if let Some(n) = &new {
                out.push_str(n);
                out.push('\n');
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The first line containing `pat`, rewritten by `f`.
fn first(text: &str, pat: &str, f: impl Fn(&str) -> Option<String>) -> Option<String> {
    let (i, line) = text.lines().enumerate().find(|(_, l)| l.contains(pat))?;
    let new = f(line)?;
    (new != line).then(|| with_line(text, i, Some(new), false))
}

/// `key=VALUE` in `line` with VALUE replaced by `f(VALUE)`.
fn attr(line: &str, key: &str, f: impl Fn(&str) -> String) -> Option<String> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    let end = line[at..].find([',', ')', ' ']).map_or(line.len(), |e| at + e);
    Some(format!("{}{}{}", &line[..at], f(&line[at..end]), &line[end..]))
}

fn num(v: &str, float: impl Fn(f64) -> f64, int: impl Fn(i64) -> i64) -> String {
    match v.parse::<i64>() {
        Ok(i) => int(i).to_string(),
        Err(_) => format!("{:?}", float(v.parse::<f64>().unwrap_or(1.0))),
    }
}

/// Every mutant of one spatial text: (operator, mutated text).
fn mutants(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for key in ["scale", "eps", "by", "window", "k", "groups", "topk_groups", "latent", "dim"] {
        let pat = format!(" {key}=");
        out.push((format!("{key} changed"), first(text, &pat, |l| attr(l, key, |v| num(v, |f| f * 2.0, |i| i + 1)))));
    }
    out.push((
        "eps nudged by 1e-9 relative".into(),
        first(text, " eps=", |l| attr(l, "eps", |v| num(v, |f| f * (1.0 + 1e-9), |i| i + 1))),
    ));
    out.push((
        "norm offset flipped".into(),
        first(text, " offset=", |l| attr(l, "offset", |v| if v == "0" { "1".into() } else { "0".into() })),
    ));
    out.push((
        "norm flag flipped".into(),
        first(text, " norm=", |l| attr(l, "norm", |v| if v == "0" { "1".into() } else { "0".into() })),
    ));
    out.push(("silu -> gelu_tanh".into(), first(text, "= silu(", |l| Some(l.replace("= silu(", "= gelu_tanh(")))));
    out.push(("gelu_tanh -> silu".into(), first(text, "= gelu_tanh(", |l| Some(l.replace("= gelu_tanh(", "= silu(")))));
    out.push((
        "experts act swapped".into(),
        first(text, "act=", |l| attr(l, "act", |v| if v == "silu" { "gelu_tanh".into() } else { "silu".into() })),
    ));
    out.push((
        "rope style swapped".into(),
        first(text, "style=", |l| attr(l, "style", |v| if v == "neox" { "interleaved".into() } else { "neox".into() })),
    ));
    out.push((
        "kmap swapped".into(),
        first(text, "kmap=", |l| attr(l, "kmap", |v| if v == "grouped" { "tiled".into() } else { "grouped".into() })),
    ));
    out.push((
        "window dropped".into(),
        first(text, " window=", |l| {
            let at = l.find(", window=")?;
            let end = l[at + 2..].find([',', ')']).map(|e| at + 2 + e)?;
            Some(format!("{}{}", &l[..at], &l[end..]))
        }),
    ));
    out.push((
        "tile short of its output".into(),
        first(text, " tile(", |l| {
            let at = l.rfind("..")?;
            let end = l[at + 2..].find(']').map(|e| at + 2 + e)?;
            let v: usize = l[at + 2..end].parse().ok()?;
            Some(format!("{}..{}{}", &l[..at], v.checked_sub(1)?, &l[end..]))
        }),
    ));
    out.push(("fold=q8 dropped".into(), first(text, " fold=q8", |l| Some(l.replace(" fold=q8", "")))));
    out.push(("stage beyond the chip".into(), first(text, "stage ", |l| attr(l, "pcus", |_| "999999".into()))));
    out.push(("stage SRAM beyond the chip".into(), first(text, "stage ", |l| attr(l, "pmus", |_| "999999".into()))));
    out.push((
        "tp slice of chips swapped".into(),
        first(text, "split ", |l| {
            // `split T axis=A [[..], [..]]` or the flat form: swap the first two chips' parts.
            let open = l.find('[')?;
            let body = &l[open + 1..l.len() - 1];
            let parts: Vec<&str> =
                if body.starts_with('[') { body.split("], [").collect() } else { body.split(", ").collect() };
            if parts.len() < 2 || parts[0].trim_matches(['[', ']']) == parts[1].trim_matches(['[', ']']) {
                return None;
            }
            let (a, b) = (parts[0].trim_matches(['[', ']']), parts[1].trim_matches(['[', ']']));
            Some(l.replacen(a, "\u{0}", 1).replacen(b, a, 1).replacen('\u{0}', b, 1))
        }),
    ));
    // Swapped operands: the first op with two different tensor operands.
    let swapped = op_lines(text).into_iter().find_map(|i| {
        let line = text.lines().nth(i)?;
        let open = line.find('(')?;
        let close = line[open..].find([',', ')']).map(|e| open + e)?;
        let a = &line[open + 1..close];
        let rest = &line[close + 2..];
        let end = rest.find([',', ')'])?;
        let b = &rest[..end];
        let ident = |s: &str| {
            !s.is_empty()
                && s.chars().all(|c| c.is_alphanumeric() || c == '_')
                && !s.starts_with(|c: char| c.is_ascii_digit())
        };
        (line[close..].starts_with(", ") && a != b && ident(a) && ident(b))
            .then(|| with_line(text, i, Some(format!("{}{b}, {a}{}", &line[..open + 1], &rest[end..])), false))
    });
    out.push(("operands swapped".into(), swapped));
    let ops = op_lines(text);
    for (label, at) in [("first", 0), ("middle", ops.len() / 2), ("last", ops.len().saturating_sub(1))] {
        if let Some(&i) = ops.get(at) {
            out.push((format!("{label} statement dropped"), Some(with_line(text, i, None, false))));
            out.push((format!("{label} statement duplicated"), Some(with_line(text, i, None, true))));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    out.into_iter()
        .filter_map(|(op, t)| t.filter(|t| t != text).map(|t| (op, t)))
        .filter(|(_, t)| seen.insert(t.clone()))
        .collect()
}

/// Mutants that change nothing a run computes, with why (none so far: the exact kernel check
/// compares every attribute, operand and statement with the source).
const EQUIVALENT: &[(&str, &str)] = &[];

#[test]
fn every_semantic_mutant_of_every_tiny_bundle_is_refused() {
    let chip = Chip::builtin("sn50").unwrap();
    let (mut total, mut killed) = (0usize, 0usize);
    let mut by_check: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_operator: BTreeMap<String, usize> = BTreeMap::new();
    let mut survivors = Vec::new();
    let tmp = tempfile::tempdir().unwrap();
    for name in presets::names().into_iter().filter(|n| n.starts_with("tiny-")) {
        for (cut, model) in cuts(name) {
            let bundle = model.bundle().unwrap();
            let lines = verify_bundle(&bundle, &chip, &mut |_| {}).unwrap_or_else(|f| panic!("{name} {cut}: {f}"));
            assert_eq!(lines.len(), bundle.manifest.programs.kinds.len() + 2, "one line per program");
            let programs: Vec<(String, String)> = std::iter::once(&bundle.manifest.programs.embed)
                .chain(std::iter::once(&bundle.manifest.programs.head))
                .map(|p| (p.name.clone(), p.file_spatial.clone()))
                .chain(bundle.manifest.programs.kinds.iter().map(|k| (k.name.clone(), k.file_spatial.clone())))
                .collect();
            let mut on_disk = false;
            for (program, path) in programs {
                let text = bundle.files[&path].clone();
                for (op, mutant) in mutants(&text) {
                    total += 1;
                    *by_operator.entry(op.clone()).or_default() += 1;
                    let mut b = bundle.clone();
                    b.files.insert(path.clone(), mutant.clone());
                    // Stale hashes: refused on reading, naming the file.
                    let stale = b.hash_problems();
                    assert!(
                        matches!(stale.as_slice(), [BundleError::Tampered { path: p, .. }] if *p == path),
                        "{name} {cut} {program} {op}: {stale:?}"
                    );
                    if !on_disk {
                        // Once per bundle through the files: what `rdu run --bundle` and `rdu show` open.
                        let dir = tmp.path().join(format!("{name}-{cut}"));
                        bundle.write(&dir, true).unwrap();
                        std::fs::write(dir.join(&path), &mutant).unwrap();
                        let err = Bundle::open(&dir).unwrap_err();
                        assert!(err.to_string().contains(&path), "{err}");
                        on_disk = true;
                    }
                    b.rehash();
                    match verify_one(&b, &program, &chip) {
                        Err(f) => {
                            killed += 1;
                            *by_check.entry(f.check).or_default() += 1;
                        }
                        Ok(_) => {
                            if !EQUIVALENT.iter().any(|(o, _)| *o == op) {
                                survivors.push(format!("{name} {cut} {program}: {op}"));
                            }
                        }
                    }
                }
            }
        }
    }
    println!(
        "mutants: {total}, refused by verify: {killed} ({:.1}%), refused on reading with stale hashes: {total}",
        100.0 * killed as f64 / total.max(1) as f64
    );
    println!("refused by check: {by_check:?}");
    println!("mutants by operator: {by_operator:?}");
    assert!(total > 500, "only {total} mutants");
    assert!(survivors.is_empty(), "{} mutants verified:\n{}", survivors.len(), survivors.join("\n"));
}
