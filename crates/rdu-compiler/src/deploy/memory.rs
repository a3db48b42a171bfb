//! Whether a deployment fits where it must before anything is lowered: its weights and states
//! in the chip's memory (HBM, then DDR), and the seeded tensors of certifying its largest kind
//! at real shapes in this machine's memory. A deployment refused for either is refused in one
//! line naming the ctx and the largest that fits — never an allocation that fails half-way.
//!
//! KV caches live in HBM and stream through the chip (`attend` reads them, `cache_put` writes
//! its rows in place), so on-chip SRAM does not bound the context: memory does.

use super::programs::layer_sources;
use crate::deploy::model::StreamedReject;
use crate::fit::{Part, Tally};
use crate::lang::ast::DeclKind;
use crate::lang::Source;
use crate::model::author::{embed_source, head_source};
use crate::model::kinds::Storage;
use crate::model::spec::{Cut, ModelSpec};
use rdu_spatial::chip::Chip;

const GB: f64 = 1e9;

/// Bytes one chip of `cut` holds: every weight (as stored), state and shared table of the
/// embedding, every layer (`layers`, authored at `cut`) and the head, each name once
/// (`fit::Tally`, as `rdu fit` counts).
fn chip_bytes(spec: &ModelSpec, cut: Cut, storage: &Storage, layers: &[Source]) -> Result<u64, StreamedReject> {
    let (mut tally, mut part) = (Tally::default(), Part::default());
    let mut add = |source: &Source, what: &str| {
        tally.add(&mut part, source, what).map_err(|e| StreamedReject::Invalid(e.to_string()))
    };
    add(&embed_source(spec, cut.unsplit(), storage), "embedding")?;
    for (l, source) in layers.iter().enumerate() {
        add(source, &format!("layer {l}"))?;
    }
    add(&head_source(spec, cut, storage), "head")?;
    Ok(part.weight_bytes + part.state_bytes + part.shared_bytes)
}

/// Host bytes that grow with the ctx when one program of `source` is certified numerically:
/// its states three times as f32 (the seeded value, the simulator's and the reference's final
/// ones) and its shared tables (the RoPE tables) once. Weights do not grow with the ctx and are
/// drawn per tile or per selected expert (`certify::Inputs`), so they are not counted: this
/// bounds the context, not the model.
fn certify_bytes(source: &Source) -> u64 {
    let Ok(program) = source.program() else { return 0 };
    let mut bytes = 0u64;
    for decl in program.decls() {
        let elems = decl.ty.shape.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
        let copies = match decl.kind {
            DeclKind::State => 3,
            DeclKind::Shared => 1,
            _ => 0,
        };
        bytes = bytes.saturating_add(elems.saturating_mul(4 * copies));
    }
    bytes
}

/// The most host memory certifying any layer of `cut` (`layers`, authored at `cut`) takes:
/// the largest layer program, and under tensor parallelism its unsplit counterpart beside
/// every chip's share.
fn host_bytes(spec: &ModelSpec, cut: Cut, storage: &Storage, layers: &[Source]) -> u64 {
    let most = |sources: &[Source]| sources.iter().map(certify_bytes).max().unwrap_or(0);
    match cut.is_split() {
        true => most(&layer_sources(spec, cut.unsplit(), storage)).saturating_mul(2),
        false => most(layers),
    }
}

/// The largest ctx up to the cut's at which `fits` holds (it holds less as the ctx grows), by
/// bisection; `None` when not even the smallest ctx (one position, or the chunk) fits.
fn largest_fitting(cut: Cut, fits: impl Fn(Cut) -> bool) -> Option<usize> {
    let smallest = cut.chunk().unwrap_or(1);
    if !cut.with_ctx(smallest).is_some_and(&fits) {
        return None;
    }
    let (mut lo, mut hi) = (smallest, cut.ctx().unwrap_or(smallest));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if cut.with_ctx(mid).is_some_and(&fits) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// Refuses a cut (its layers' programs `layers`) whose weights and states do not fit the
/// chip's HBM and DDR together, naming the largest ctx that does (or saying no ctx does, when
/// the weights alone do not fit).
pub(super) fn check_chip(
    spec: &ModelSpec,
    cut: Cut,
    storage: &Storage,
    chip: &Chip,
    layers: &[Source],
) -> Result<(), StreamedReject> {
    let capacity = chip.hbm_bytes.saturating_add(chip.ddr_bytes);
    let need = chip_bytes(spec, cut, storage, layers)?;
    if need <= capacity {
        return Ok(());
    }
    let Some(ctx) = cut.ctx() else {
        return Err(StreamedReject::Invalid(format!(
            "{} needs {:.1} GB for its weights, more than the {} holds in HBM and DDR ({:.1} GB)",
            spec.name,
            need as f64 / GB,
            chip.name,
            capacity as f64 / GB
        )));
    };
    let fits = |at: Cut| chip_bytes(spec, at, storage, &layer_sources(spec, at, storage)).is_ok_and(|b| b <= capacity);
    let advice = match largest_fitting(cut, fits) {
        Some(most) => format!("pass --ctx {most} or less"),
        None => "no ctx fits: its weights alone are too large".to_string(),
    };
    Err(StreamedReject::Invalid(format!(
        "ctx {ctx} is too large for the {}: its weights and the states of {ctx} positions need {:.1} GB, more than its HBM and DDR hold ({:.1} GB); {advice}",
        chip.name,
        need as f64 / GB,
        capacity as f64 / GB
    )))
}

/// Refuses a cut (its layers' programs `layers`) whose largest kind cannot be certified at real
/// shapes in `free` bytes of this machine's memory, naming the largest ctx that can. `free:
/// None` (not known) admits it.
pub(super) fn check_host(
    spec: &ModelSpec,
    cut: Cut,
    storage: &Storage,
    layers: &[Source],
    free: Option<u64>,
) -> Result<(), StreamedReject> {
    let Some(free) = free else { return Ok(()) };
    let need = host_bytes(spec, cut, storage, layers);
    if need <= free {
        return Ok(());
    }
    let Some(ctx) = cut.ctx() else {
        return Err(StreamedReject::Invalid(format!(
            "certifying {} at real shapes holds about {:.1} GB of states and tables, more than the {:.1} GB of this machine's memory free",
            spec.name,
            need as f64 / GB,
            free as f64 / GB
        )));
    };
    let fits = |at: Cut| host_bytes(spec, at, storage, &layer_sources(spec, at, storage)) <= free;
    let advice = match largest_fitting(cut, fits) {
        Some(most) => format!("pass --ctx {most} or less, or lower on a machine with more memory"),
        None => "lower on a machine with more memory".to_string(),
    };
    Err(StreamedReject::Invalid(format!(
        "ctx {ctx} is too large to certify here: certifying a layer of {} at real shapes holds its caches and tables over {ctx} positions, about {:.1} GB, more than the {:.1} GB of this machine's memory free; {advice}",
        spec.name,
        need as f64 / GB,
        free as f64 / GB
    )))
}

/// Bytes of memory this machine has free (`MemAvailable` of `/proc/meminfo`), when it says.
pub fn free_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets;

    /// The checks and counts with the layers authored at the cut, as `deploy` passes them.
    fn chip_at(spec: &ModelSpec, cut: Cut, storage: &Storage) -> u64 {
        chip_bytes(spec, cut, storage, &layer_sources(spec, cut, storage)).unwrap()
    }
    fn host_at(spec: &ModelSpec, cut: Cut, storage: &Storage) -> u64 {
        host_bytes(spec, cut, storage, &layer_sources(spec, cut, storage))
    }
    fn check_chip_at(spec: &ModelSpec, cut: Cut, chip: &Chip) -> Result<(), StreamedReject> {
        check_chip(spec, cut, &Storage::AllQ8, chip, &layer_sources(spec, cut, &Storage::AllQ8))
    }
    fn check_host_at(spec: &ModelSpec, cut: Cut, free: Option<u64>) -> Result<(), StreamedReject> {
        check_host(spec, cut, &Storage::AllQ8, &layer_sources(spec, cut, &Storage::AllQ8), free)
    }

    #[test]
    fn a_ctx_whose_states_overflow_the_chip_is_refused_with_the_largest_that_fits() {
        let spec = presets::resolve("tiny-llama").unwrap();
        let chip = Chip::builtin("sn50").unwrap();
        let cut = Cut::Decode { ctx: 4_000_000_000 };
        let e = check_chip_at(&spec, cut, &chip).unwrap_err().to_string();
        assert!(e.starts_with("ctx 4000000000 is too large for the sn50: its weights and the states"), "{e}");
        let limit: usize = e.rsplit("--ctx ").next().and_then(|r| r.split(' ').next()).unwrap().parse().unwrap();
        let capacity = chip.hbm_bytes + chip.ddr_bytes;
        assert!(chip_at(&spec, Cut::Decode { ctx: limit }, &Storage::AllQ8) <= capacity);
        assert!(chip_at(&spec, Cut::Decode { ctx: limit + 1 }, &Storage::AllQ8) > capacity);
        assert!(check_chip_at(&spec, Cut::Decode { ctx: limit }, &chip).is_ok());
    }

    #[test]
    fn a_ctx_too_large_to_certify_on_this_machine_is_refused_with_the_largest_that_can_be() {
        let spec = presets::resolve("tiny-llama").unwrap();
        let cut = Cut::Decode { ctx: 1_000_000 };
        let need = host_at(&spec, cut, &Storage::AllQ8);
        assert!(check_host_at(&spec, cut, Some(need)).is_ok());
        assert!(check_host_at(&spec, cut, None).is_ok(), "unknown free memory admits");
        let free = need / 3;
        let e = check_host_at(&spec, cut, Some(free)).unwrap_err().to_string();
        assert!(e.starts_with("ctx 1000000 is too large to certify here"), "{e}");
        let limit: usize = e.rsplit("--ctx ").next().and_then(|r| r.split(' ').next()).unwrap().parse().unwrap();
        assert!(host_at(&spec, Cut::Decode { ctx: limit }, &Storage::AllQ8) <= free);
        assert!(host_at(&spec, Cut::Decode { ctx: limit + 1 }, &Storage::AllQ8) > free);
        // Split over two chips, each chip's share is certified beside the unsplit program.
        let tp = Cut::Tp { tp: 2, ctx: 1_000_000 };
        assert_eq!(host_at(&spec, tp, &Storage::Dense), 2 * host_at(&spec, cut, &Storage::Dense));
    }
}
