//! The report page: one HTML document, CSS and SVG inline, no script, nothing fetched.

use super::svg::{bar, chip_map, colour, esc, layer_strip, plain_bar};
use super::{Breakdown, ProgramView, Report};
use crate::program_cmds::ranges;
use crate::show_cmd::cut_text;
use rdu_spatial::manifest::Manifest;
use std::fmt::Write as _;

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d1d1b;max-width:1200px}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccc}\
h3{font-size:15px;margin:18px 0 6px}table{border-collapse:collapse;margin:6px 0}\
td,th{padding:2px 10px 2px 0;text-align:left;vertical-align:top}th{font-weight:600;border-bottom:1px solid #ccc}\
td.num,th.num{text-align:right}.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}\
.muted{color:#666}.maps{display:flex;flex-wrap:wrap;gap:16px}.map{break-inside:avoid}\
svg{display:block}code{font:12px ui-monospace,monospace}.program{break-inside:avoid-page}\
@media print{body{margin:0}h2{break-after:avoid}}";

/// The whole page.
pub fn page(r: &Report) -> String {
    let m = &r.manifest;
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>rdu report: {}</title><style>{STYLE}</style></head><body>",
        esc(&m.model)
    );
    out.push_str(&summary(r));
    out.push_str(&strip(m));
    out.push_str(&step(r));
    if m.cut.tp.is_some_and(|t| t > 1) {
        out.push_str(&tp_share(m));
    }
    for p in &r.programs {
        out.push_str(&program(r, p));
    }
    out.push_str("</body></html>\n");
    out
}

/// Rows a step serves: tokens of every sequence (batch), or the chunk's / sequence's rows.
fn rows(m: &Manifest) -> usize {
    m.cut.batch.or(m.cut.chunk).or(m.cut.seq).unwrap_or(1)
}

fn summary(r: &Report) -> String {
    let m = &r.manifest;
    let seconds = r.step.seconds;
    let fraction = if seconds > 0.0 { r.roofline_seconds / seconds } else { 0.0 };
    format!(
        "<h1>{}</h1><p class=\"muted\">an rdu bundle: one certified program per layer kind</p><table>\
         <tr><th>cut</th><td>{}</td></tr><tr><th>chip</th><td>{} <span class=\"muted\">({} × {} tile mesh, {} PCUs, {} PMUs)</span></td></tr>\
         <tr><th>storage</th><td>{}</td></tr><tr><th>layers</th><td>{} in {} kind{}</td></tr>\
         <tr><th>step</th><td><span class=\"step\" data-seconds=\"{:e}\">{:.1} µs</span>, {:.1} tokens/s</td></tr>\
         <tr><th>model roofline</th><td>{:.1} µs ({:.2} GB of floor bytes): the step reaches {:.0}% of it</td></tr></table>",
        esc(&m.model),
        esc(&cut_text(m)),
        esc(&m.chip),
        r.chip.mesh_rows,
        r.chip.mesh_cols,
        r.chip.pcus,
        r.chip.pmus,
        esc(&m.storage),
        m.layers.len(),
        m.programs.kinds.len(),
        if m.programs.kinds.len() == 1 { "" } else { "s" },
        seconds,
        seconds * 1e6,
        if seconds > 0.0 { rows(m) as f64 / seconds } else { 0.0 },
        r.roofline_seconds * 1e6,
        r.floor_bytes / 1e9,
        fraction * 100.0
    )
}

fn strip(m: &Manifest) -> String {
    let kinds: Vec<&str> = m.programs.kinds.iter().map(|k| k.name.as_str()).collect();
    let layer_kinds: Vec<&str> = m.layers.iter().map(|l| l.kind.as_str()).collect();
    let mut out = String::from("<h2>Layers by kind</h2>");
    out.push_str(&layer_strip(&layer_kinds, &kinds));
    out.push_str("<table><tr><th>kind</th><th class=\"num\">layers it serves</th><th>which</th></tr>");
    for (i, k) in m.programs.kinds.iter().enumerate() {
        let _ = write!(
            out,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            colour(i, kinds.len()),
            esc(&k.name),
            k.layers.len(),
            esc(&ranges(&k.layers))
        );
    }
    out.push_str("</table>");
    out
}

fn legend() -> String {
    let parts = Breakdown::default().parts();
    let mut out = String::from("<p>");
    for (i, (name, _)) in parts.iter().enumerate() {
        let _ =
            write!(out, "<span class=\"swatch\" style=\"background:{}\"></span>{name} &nbsp; ", colour(i, parts.len()));
    }
    out.push_str("<span class=\"swatch\" style=\"background:#222\"></span>model roofline</p>");
    out
}

fn step(r: &Report) -> String {
    let s = &r.step;
    let total = s.step.total().max(r.roofline_seconds).max(1e-12);
    let scale = 900.0 / total;
    let mut out = String::from("<h2>Where a step goes</h2>");
    out.push_str(&legend());
    out.push_str(
        "<table><tr><th>program</th><th class=\"num\">runs a step</th><th class=\"num\">µs a step</th><th></th></tr>",
    );
    for (p, (times, b)) in r.programs.iter().zip(&s.per_program) {
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"num\">{times}</td><td class=\"num\">{:.1}</td><td>{}</td></tr>",
            esc(&p.name),
            b.total() * 1e6,
            bar(&p.name, b, scale)
        );
    }
    let _ = write!(
        out,
        "<tr><td><b>step</b></td><td class=\"num\"></td><td class=\"num\"><b class=\"step-total\" data-seconds=\"{:e}\">{:.1}</b></td><td>{}</td></tr>\
         <tr><td>model roofline</td><td class=\"num\"></td><td class=\"num\">{:.1}</td><td>{}</td></tr></table>\
         <p class=\"muted\">The step runs as the bundle's schedule says ({} looped invocation{} of the layers, kernel \
         looping): a loop iteration's weight stream overlapping the previous iteration's tail is taken off weight \
         streaming; the step adds {} reconfiguration{} between programs not resident together. The model roofline is the floor bytes \
         (every weight once over all chips at its stored width, the embedding one row a sequence, routed experts as \
         the share a step can touch, every carried state once in bf16) over the chips' HBM bandwidth.</p>",
        s.step.total(),
        s.step.total() * 1e6,
        bar("step", &s.step, scale),
        r.roofline_seconds * 1e6,
        plain_bar("model roofline", r.roofline_seconds, scale),
        s.loops,
        if s.loops == 1 { "" } else { "s" },
        s.reconfigurations,
        if s.reconfigurations == 1 { "" } else { "s" }
    );
    out
}

fn tp_share(m: &Manifest) -> String {
    let chips = m.cut.tp.unwrap_or(1);
    let mut out = format!(
        "<h2>One chip's share (of {chips})</h2><p class=\"muted\">Every split tensor and state: the ranges chip 0 holds \
         (axis start..end), then every chip's.</p><table><tr><th>tensor</th><th>shape</th><th>chip 0</th><th>all chips</th></tr>"
    );
    let states = m.states.iter().map(|s| (&s.name, &s.shape, &s.slices));
    let tensors = m.tensors.iter().map(|(n, t)| (n, &t.shape, &t.slices));
    for (name, shape, slices) in tensors.chain(states).filter(|(_, _, s)| !s.is_empty()) {
        let show = |chip: &[rdu_spatial::manifest::Slice]| {
            chip.iter().map(|s| format!("{}:{}..{}", s.axis, s.start, s.start + s.len)).collect::<Vec<_>>().join(" ")
        };
        let all: Vec<String> = slices.iter().map(|c| show(c)).collect();
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{:?}</td><td>{}</td><td class=\"muted\">{}</td></tr>",
            esc(name),
            shape,
            esc(&slices.first().map(|c| show(c)).unwrap_or_default()),
            esc(&all.join(" | "))
        );
    }
    out.push_str("</table>");
    out
}

fn program(r: &Report, p: &ProgramView) -> String {
    let c = &p.certificate;
    let mut out = format!(
        "<div class=\"program\"><h2>Program <code>{}</code></h2><table><tr><th>serves</th><td>{}</td></tr>\
         <tr><th>certificate</th><td>{}</td></tr><tr><th></th><td>seed {}, tolerance {:.0e}, worst error {:.1e}</td></tr>\
         <tr><th>one run</th><td>{:.2} µs, {} section{}, {:.2} MB from HBM, {:.3} GFLOP</td></tr></table>",
        esc(&p.name),
        p.layers.as_ref().map_or_else(|| "every step, once".to_string(), |l| format!("layers {}", esc(&ranges(l)))),
        esc(&c.checks.join("; ")),
        c.seed,
        c.tolerance,
        c.max_abs_err,
        p.cost.seconds * 1e6,
        p.cost.sections.len(),
        if p.cost.sections.len() == 1 { "" } else { "s" },
        p.cost.hbm_bytes as f64 / 1e6,
        p.cost.flops as f64 / 1e9
    );
    for (s, (section, cost)) in p.spatial.sections.iter().zip(&p.cost.sections).enumerate() {
        let id = format!("{}-{s}", p.name);
        let _ = write!(
            out,
            "<div class=\"map\"><h3>section {s}: {} stages, {} PCUs, {} PMUs, {:.2} µs ({:?}-bound)</h3><div class=\"maps\">{}<table>\
             <tr><th>stage</th><th>ops</th><th class=\"num\">tiles</th><th class=\"num\">PCUs</th><th class=\"num\">PMUs</th><th class=\"num\">µs</th></tr>",
            section.stages.len(),
            cost.pcus,
            cost.pmus,
            cost.seconds * 1e6,
            cost.bound,
            chip_map(section, cost, &r.chip, &id)
        );
        for (i, st) in section.stages.iter().enumerate() {
            let ops: Vec<&str> = st.ops.iter().map(|o| o.op.name()).collect();
            let tiles = st.ops.iter().map(|o| o.tiling.as_ref().map_or(1, |t| t.tiles.len())).max().unwrap_or(1);
            let _ = write!(
                out,
                "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td><code>{}</code></td>\
                 <td class=\"num\">{tiles}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2}</td></tr>",
                colour(i, section.stages.len()),
                esc(&st.name),
                esc(&ops.join(", ")),
                st.pcus,
                st.pmus,
                cost.stages.get(i).map_or(0.0, |c| c.seconds) * 1e6
            );
        }
        out.push_str("</table></div></div>");
    }
    out.push_str("</div>");
    out
}
