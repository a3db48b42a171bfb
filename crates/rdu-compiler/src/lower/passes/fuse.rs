//! Fusion: elementwise ops, norms and views join the stage of the product before them (its
//! epilogue), so every stage is one heavy kernel with its cheap neighbours. It never reorders
//! ops and never fuses two heavy kernels.

use rdu_spatial::program::{KernelOp, Section, SpatialProgram, Stage};

/// Regroups every section's ops into stages anchored on heavy kernels.
pub fn fuse(program: &mut SpatialProgram) {
    for section in &mut program.sections {
        let ops: Vec<KernelOp> = section.stages.drain(..).flat_map(|s| s.ops).collect();
        *section = Section { stages: group(ops) };
    }
}

fn group(ops: Vec<KernelOp>) -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    let mut current: Vec<KernelOp> = Vec::new();
    let mut has_heavy = false;
    for op in ops {
        // Kernels that stream weights, caches or states (`Op::is_heavy`) anchor a stage each.
        let heavy = op.op.is_heavy();
        if heavy && has_heavy {
            stages.push(stage(stages.len(), std::mem::take(&mut current)));
            has_heavy = false;
        }
        has_heavy |= heavy;
        current.push(op);
    }
    if !current.is_empty() {
        stages.push(stage(stages.len(), current));
    }
    stages
}

fn stage(index: usize, ops: Vec<KernelOp>) -> Stage {
    Stage { name: format!("s{index}"), ops, pcus: 1, pmus: 1, prefetch: false, region: None }
}
