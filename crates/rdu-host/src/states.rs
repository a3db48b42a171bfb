//! Carried state (KV caches, recurrent and conv state) by layer tensor name: zero at a sequence's start, updated in place.

use std::collections::BTreeMap;

use rdu_spatial::manifest::StateEntry;
use rdu_spatial::{Dtype, SimData, SimTensor};

/// Every state a manifest declares, held between steps.
#[derive(Clone, Debug, PartialEq)]
pub struct States {
    tensors: BTreeMap<String, SimTensor>,
    shapes: BTreeMap<String, Vec<usize>>,
}

impl States {
    /// Zero-filled f32 states of the declared shapes.
    pub fn new(entries: &[StateEntry]) -> States {
        let shapes: BTreeMap<String, Vec<usize>> = entries.iter().map(|e| (e.name.clone(), e.shape.clone())).collect();
        let tensors = shapes.iter().map(|(n, s)| (n.clone(), SimTensor::zeros(Dtype::F32, s.clone()))).collect();
        States { tensors, shapes }
    }

    /// Zeroes every state, reusing its memory: the next step starts a new sequence.
    pub fn reset(&mut self) {
        self.reset_where(|_| true);
    }

    /// Zeroes the states of sequence `b` of a batched bundle (`..._s{b}`): its slot starts a
    /// new sequence while the others go on.
    pub fn reset_sequence(&mut self, b: usize) {
        let suffix = format!("_s{b}");
        self.reset_where(|name| name.ends_with(&suffix));
    }

    fn reset_where(&mut self, pick: impl Fn(&str) -> bool) {
        for (name, shape) in self.shapes.iter().filter(|(n, _)| pick(n)) {
            match self.tensors.get_mut(name).map(|t| &mut t.data) {
                Some(SimData::F32(v)) => v.fill(0.0),
                _ => {
                    self.tensors.insert(name.clone(), SimTensor::zeros(Dtype::F32, shape.clone()));
                }
            }
        }
    }

    /// The state `name` (a layer tensor name).
    pub fn get(&self, name: &str) -> Option<&SimTensor> {
        self.tensors.get(name)
    }

    /// State names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.shapes.keys().map(String::as_str)
    }

    /// Moves the state out for an in-place update; [`States::put`] returns it.
    pub(crate) fn take(&mut self, name: &str) -> Option<SimTensor> {
        self.tensors.remove(name)
    }

    /// Puts a state back after a step; a state the step lost comes back as zeros.
    pub(crate) fn put(&mut self, name: &str, tensor: Option<SimTensor>) {
        let Some(shape) = self.shapes.get(name) else { return };
        let tensor = tensor.unwrap_or_else(|| SimTensor::zeros(Dtype::F32, shape.clone()));
        self.tensors.insert(name.to_string(), tensor);
    }
}
