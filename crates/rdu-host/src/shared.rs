//! The shared tensors every layer reads, computed once from the manifest: RoPE tables at their declared shape.

use std::collections::BTreeMap;

use rdu_spatial::manifest::{Manifest, RopeTable};
use rdu_spatial::rope::tables;
use rdu_spatial::SimTensor;

use crate::error::{HostError, Result};

/// Every `manifest.shared` entry as a dense tensor, by name. An entry without a `rope`
/// description is an error: RoPE tables are the only shared tensors a manifest describes.
pub fn compute(manifest: &Manifest, dir: &str) -> Result<BTreeMap<String, SimTensor>> {
    let mut out = BTreeMap::new();
    for entry in &manifest.shared {
        let fail = |problem: String| HostError::Shared { dir: dir.to_string(), name: entry.name.clone(), problem };
        let Some(rope) = &entry.rope else {
            return Err(fail("it has no `rope` description, and RoPE tables are all this host can compute".into()));
        };
        let &[rows, half] = entry.shape.as_slice() else {
            return Err(fail(format!("shape {:?} is not [rows, dim/2]", entry.shape)));
        };
        if half * 2 != rope.spec.dim {
            return Err(fail(format!("shape {:?} does not hold rotary dim {}", entry.shape, rope.spec.dim)));
        }
        let (cos, sin) = tables(&rope.spec, rows);
        let data = match rope.table {
            RopeTable::Cos => cos,
            RopeTable::Sin => sin,
        };
        out.insert(entry.name.clone(), SimTensor::f32(entry.shape.clone(), data));
    }
    Ok(out)
}
