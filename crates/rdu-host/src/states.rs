//! Carried state (KV caches, recurrent and conv state) by layer tensor name: zero at a sequence's start, updated in place.

use std::collections::BTreeMap;

use rdu_spatial::manifest::{StateDtype, StateEntry};
use rdu_spatial::names::TensorName;
use rdu_spatial::{Dtype, SimData, SimTensor};

/// Every state a manifest declares, held between steps.
#[derive(Clone, Debug, PartialEq)]
pub struct States {
    tensors: BTreeMap<String, SimTensor>,
    shapes: BTreeMap<String, Vec<usize>>,
    /// How each state is stored. A bf16 state is held as f32 values that bf16 represents
    /// exactly (the simulator rounds what a step writes into it).
    dtypes: BTreeMap<String, StateDtype>,
}

impl States {
    /// Zero-filled f32 states of the declared shapes.
    pub fn new(entries: &[StateEntry]) -> States {
        let shapes: BTreeMap<String, Vec<usize>> = entries.iter().map(|e| (e.name.clone(), e.shape.clone())).collect();
        let tensors = shapes.iter().map(|(n, s)| (n.clone(), SimTensor::zeros(Dtype::F32, s.clone()))).collect();
        let dtypes = entries.iter().map(|e| (e.name.clone(), e.dtype)).collect();
        States { tensors, shapes, dtypes }
    }

    /// Zeroes every state, reusing its memory: the next step starts a new sequence.
    pub fn reset(&mut self) {
        self.reset_where(|_| true);
    }

    /// Zeroes the states of sequence `b` of a batched bundle (`..._s{b}`): its slot starts a
    /// new sequence while the others go on.
    pub fn reset_sequence(&mut self, b: usize) {
        self.reset_where(|name| TensorName::parse(name).seq == Some(b));
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

    /// The states' names and shapes, sorted by name.
    pub fn shapes(&self) -> &BTreeMap<String, Vec<usize>> {
        &self.shapes
    }

    /// Whether every declared state is held (false after [`States::take_all`]).
    pub fn is_held(&self) -> bool {
        self.tensors.len() == self.shapes.len()
    }

    /// Moves every state out, leaving this store empty (declared, but holding nothing) until
    /// [`States::put_all`] hands a store back: nothing is copied.
    pub(crate) fn take_all(&mut self) -> States {
        States { tensors: std::mem::take(&mut self.tensors), shapes: self.shapes.clone(), dtypes: self.dtypes.clone() }
    }

    /// How each state is stored (`f32` or `bf16`), by name.
    pub fn dtypes(&self) -> &BTreeMap<String, StateDtype> {
        &self.dtypes
    }

    /// Replaces this store's states by `other`'s (moved), which must declare the same names,
    /// shapes and storage (and, the caller checks, hold every one of them); otherwise says
    /// which differs.
    pub(crate) fn put_all(&mut self, other: States) -> Result<(), String> {
        if let Some(problem) = mismatch(&self.shapes, &other.shapes) {
            return Err(problem);
        }
        if let Some(problem) = dtype_mismatch(&self.dtypes, &other.dtypes) {
            return Err(problem);
        }
        self.tensors = other.tensors;
        Ok(())
    }

    /// Moves sequence `b`'s states out of a batched store, named as a one-sequence bundle names
    /// them (`Kc3_s1` → `Kc3`), leaving their places empty until [`States::put_sequence`]
    /// hands a store back: nothing is copied.
    pub(crate) fn take_sequence(&mut self, b: usize) -> States {
        let mut out = States { tensors: BTreeMap::new(), shapes: BTreeMap::new(), dtypes: BTreeMap::new() };
        for (name, shape) in self.shapes.iter().filter(|(n, _)| TensorName::parse(n).seq == Some(b)) {
            let single = TensorName::parse(name).in_sequence(None).to_string();
            if let Some(t) = self.tensors.remove(name) {
                out.tensors.insert(single.clone(), t);
            }
            if let Some(d) = self.dtypes.get(name) {
                out.dtypes.insert(single.clone(), *d);
            }
            out.shapes.insert(single, shape.clone());
        }
        out
    }

    /// Moves `other` (one sequence's states, named as [`States::take_sequence`] names them) into
    /// sequence `b`'s places; they must be exactly that sequence's names, shapes and storage,
    /// every one held.
    pub(crate) fn put_sequence(&mut self, b: usize, other: States) -> Result<(), String> {
        let ours: BTreeMap<String, Vec<usize>> = self
            .shapes
            .iter()
            .filter(|(n, _)| TensorName::parse(n).seq == Some(b))
            .map(|(n, s)| (TensorName::parse(n).in_sequence(None).to_string(), s.clone()))
            .collect();
        if ours.is_empty() {
            return Err(format!("this store holds no states of sequence {b}"));
        }
        if let Some(problem) = mismatch(&ours, &other.shapes) {
            return Err(problem);
        }
        let dtypes =
            ours.keys().map(|n| (n.clone(), self.dtypes[&TensorName::parse(n).in_sequence(Some(b)).to_string()]));
        if let Some(problem) = dtype_mismatch(&dtypes.collect(), &other.dtypes) {
            return Err(problem);
        }
        if !other.is_held() {
            return Err("the states given hold nothing: they were already handed to another host".into());
        }
        for (name, t) in other.tensors {
            self.tensors.insert(TensorName::parse(&name).in_sequence(Some(b)).to_string(), t);
        }
        Ok(())
    }

    /// A store of the same names, shapes and storage as `self`, every state zero.
    pub(crate) fn zeros_like(&self) -> States {
        let tensors = self.shapes.iter().map(|(n, s)| (n.clone(), SimTensor::zeros(Dtype::F32, s.clone()))).collect();
        States { tensors, shapes: self.shapes.clone(), dtypes: self.dtypes.clone() }
    }

    /// Copies the states `pick` names into `into` (for [`States::restore`]), reusing the
    /// buffers `into` already holds.
    pub(crate) fn copy_into(&self, pick: &[String], into: &mut BTreeMap<String, SimTensor>) {
        for (name, t) in pick.iter().filter_map(|n| self.tensors.get(n).map(|t| (n, t))) {
            match into.get_mut(name) {
                Some(held) => held.clone_from(t),
                None => {
                    into.insert(name.clone(), t.clone());
                }
            }
        }
    }

    /// Copies back states [`States::copy_into`] copied (names this store declares, shapes as
    /// declared); refuses anything else, changing nothing.
    pub(crate) fn restore(&mut self, copy: &BTreeMap<String, SimTensor>) -> Result<(), String> {
        if let Some((name, t)) = copy.iter().find(|(n, t)| self.shapes.get(*n) != Some(&t.shape)) {
            return Err(format!("state `{name}` is not declared with shape {:?}", t.shape));
        }
        for (name, t) in copy {
            match self.tensors.get_mut(name) {
                Some(held) => held.clone_from(t),
                None => {
                    self.tensors.insert(name.clone(), t.clone());
                }
            }
        }
        Ok(())
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

/// The first difference between two stores' declared states: names and shapes, then how each
/// is stored.
pub(crate) fn differ(ours: &States, theirs: &States) -> Option<String> {
    mismatch(ours.shapes(), theirs.shapes()).or_else(|| dtype_mismatch(ours.dtypes(), theirs.dtypes()))
}

/// The first difference between two stores' declared states (names and shapes), if any.
pub(crate) fn mismatch(ours: &BTreeMap<String, Vec<usize>>, theirs: &BTreeMap<String, Vec<usize>>) -> Option<String> {
    if let Some(name) = theirs.keys().find(|n| !ours.contains_key(*n)) {
        return Some(format!("state `{name}` is not a state of this bundle"));
    }
    if let Some(name) = ours.keys().find(|n| !theirs.contains_key(*n)) {
        return Some(format!("state `{name}` of this bundle is missing"));
    }
    ours.iter()
        .find(|(n, s)| theirs[*n] != **s)
        .map(|(n, s)| format!("state `{n}` has the shape {:?} here but {:?} in the states given", s, theirs[n]))
}

/// The first state stored differently in two stores of the same names (f32 here, bf16 there).
pub(crate) fn dtype_mismatch(
    ours: &BTreeMap<String, StateDtype>,
    theirs: &BTreeMap<String, StateDtype>,
) -> Option<String> {
    ours.iter().find(|(n, d)| theirs.get(*n).is_some_and(|t| t != *d)).map(|(n, d)| {
        let theirs = theirs[n].as_str();
        format!("state `{n}` is stored {} here but {theirs} in the states given", d.as_str())
    })
}
