//! The report's pictures as inline SVG: a chip map (the unit mesh with every stage's region),
//! the layer strip, and stacked time bars. Every element a test counts carries a class:
//! `region` (one per stage), `layer` (one per layer), `part` (one per bar segment).

use super::Breakdown;
use rdu_spatial::chip::Chip;
use rdu_spatial::cost::SectionCost;
use rdu_spatial::program::{Region, Section};
use std::fmt::Write as _;

/// A tile's side in the chip map, in pixels.
const TILE: u32 = 10;

/// Escape text for HTML and SVG.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The colour of item `i` of `n`: hues spread around the wheel, deterministic.
pub fn colour(i: usize, n: usize) -> String {
    let hue = (i * 360 / n.max(1) + (i % 2) * 17) % 360;
    format!("hsl({hue}, 62%, {}%)", if i.is_multiple_of(2) { 55 } else { 42 })
}

/// The row segments `(row, first column, last column)` of the serpentine run `start..end`.
fn segments(run: (u32, u32), cols: u32) -> Vec<(u32, u32, u32)> {
    let mut out: Vec<(u32, u32, u32)> = Vec::new();
    for i in run.0..run.1 {
        let (row, col) = Region::tile(i, cols);
        match out.last_mut() {
            Some((r, lo, hi)) if *r == row => {
                *lo = (*lo).min(col);
                *hi = (*hi).max(col);
            }
            _ => out.push((row, col, col)),
        }
    }
    out
}

/// One section's chip map: the mesh, and per stage a `region` group (its PCU run in the upper
/// half of each tile, its PMU run in the lower half) with a tooltip of its ops and figures.
pub fn chip_map(section: &Section, cost: &SectionCost, chip: &Chip, id: &str) -> String {
    let (w, h) = (chip.mesh_cols * TILE, chip.mesh_rows * TILE);
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"chipmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         role=\"img\" aria-label=\"chip map {}\">\
         <defs><pattern id=\"grid-{id}\" width=\"{TILE}\" height=\"{TILE}\" patternUnits=\"userSpaceOnUse\">\
         <rect width=\"{TILE}\" height=\"{TILE}\" fill=\"#f4f4f2\" stroke=\"#d8d8d4\" stroke-width=\"0.5\"/></pattern></defs>\
         <rect class=\"mesh\" width=\"{w}\" height=\"{h}\" fill=\"url(#grid-{id})\"/>",
        esc(id)
    );
    let n = section.stages.len();
    for (i, stage) in section.stages.iter().enumerate() {
        let Some(region) = &stage.region else { continue };
        let ops: Vec<&str> = stage.ops.iter().map(|o| o.op.name()).collect();
        let tiles: usize = stage.ops.iter().map(|o| o.tiling.as_ref().map_or(1, |t| t.tiles.len())).max().unwrap_or(1);
        let secs = cost.stages.get(i).map_or(0.0, |c| c.seconds);
        let _ = write!(
            out,
            "<g class=\"region\" data-stage=\"{}\" fill=\"{}\"><title>{}: {} | {} tiles | {} PCUs ({}..{}), {} PMUs ({}..{}) | {:.2} µs</title>",
            esc(&stage.name),
            colour(i, n),
            esc(&stage.name),
            esc(&ops.join(", ")),
            tiles,
            stage.pcus,
            region.pcu.0,
            region.pcu.1,
            stage.pmus,
            region.pmu.0,
            region.pmu.1,
            secs * 1e6
        );
        for (run, dy) in [(region.pcu, 0), (region.pmu, TILE / 2)] {
            for (row, lo, hi) in segments(run, chip.mesh_cols) {
                let _ = write!(
                    out,
                    "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
                    lo * TILE,
                    row * TILE + dy,
                    (hi - lo + 1) * TILE,
                    TILE / 2
                );
            }
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

/// The layer strip: one cell per layer, coloured by its kind (`kinds` in legend order).
pub fn layer_strip(layer_kinds: &[&str], kinds: &[&str]) -> String {
    let cell = 14u32;
    let per_row = 64usize;
    let rows = layer_kinds.len().div_ceil(per_row).max(1) as u32;
    let w = (layer_kinds.len().min(per_row) as u32).max(1) * cell;
    let h = rows * cell;
    let mut out = format!(
        "<svg class=\"strip\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"layers by kind\">"
    );
    for (l, kind) in layer_kinds.iter().enumerate() {
        let k = kinds.iter().position(|n| n == kind).unwrap_or(0);
        let (x, y) = ((l % per_row) as u32 * cell, (l / per_row) as u32 * cell);
        let _ = write!(
            out,
            "<rect class=\"layer\" data-layer=\"{l}\" data-kind=\"{}\" x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>layer {l}: {}</title></rect>",
            esc(kind),
            cell - 2,
            cell - 2,
            colour(k, kinds.len()),
            esc(kind)
        );
    }
    out.push_str("</svg>");
    out
}

/// A horizontal bar of `parts` (seconds), `scale` pixels a second, with its label.
pub fn bar(label: &str, parts: &Breakdown, scale: f64) -> String {
    let mut out = String::new();
    let mut x = 0.0;
    let items = parts.parts();
    let segments: Vec<String> = items
        .iter()
        .enumerate()
        .filter(|(_, (_, s))| *s > 0.0)
        .map(|(i, (name, s))| {
            let w = s * scale;
            let seg = format!(
                "<rect class=\"part\" x=\"{x:.2}\" y=\"0\" width=\"{w:.2}\" height=\"18\" fill=\"{}\"><title>{}: {name} {:.2} µs</title></rect>",
                colour(i, items.len()),
                esc(label),
                s * 1e6
            );
            x += w;
            seg
        })
        .collect();
    let width = x.max(1.0).ceil();
    let _ = write!(
        out,
        "<svg class=\"bar\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"18\" viewBox=\"0 0 {width} 18\" role=\"img\" aria-label=\"{}\">{}</svg>",
        esc(label),
        segments.concat()
    );
    out
}

/// A single-colour bar `seconds` long (the roofline).
pub fn plain_bar(label: &str, seconds: f64, scale: f64) -> String {
    let w = (seconds * scale).max(1.0);
    format!(
        "<svg class=\"bar\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"18\" viewBox=\"0 0 {w:.2} 18\" role=\"img\" aria-label=\"{}\"><rect class=\"roofline\" width=\"{w:.2}\" height=\"18\" fill=\"#222\"><title>{}: {:.2} µs</title></rect></svg>",
        w.ceil(),
        esc(label),
        esc(label),
        seconds * 1e6
    )
}
