//! What the simulator reads while one program runs: its kind names translated to bundle names and looked up in the host's stores.

use std::borrow::Cow;
use std::collections::BTreeMap;

use rdu_checkpoint::Fp8Weight;
use rdu_spatial::blocks::BlockWeight;
use rdu_spatial::sim::PackedWeight;
use rdu_spatial::{Q8Weight, SimBindings, SimTensor};

use crate::weights::Weights;

/// One program's view of the host: this step's inputs and activations, the weights, the shared
/// tables. States are not here — they travel through `simulate_in_place`'s state map.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    /// Kind tensor name → bundle tensor name.
    pub bind: &'a BTreeMap<String, String>,
    /// This step's runtime inputs and the activations earlier programs produced.
    pub step: &'a BTreeMap<String, SimTensor>,
    pub weights: &'a Weights,
    /// A chip's own slices of the split weights (tensor-parallel kind programs), read first.
    pub local: Option<&'a Weights>,
    pub shared: &'a BTreeMap<String, SimTensor>,
}

impl<'a> Env<'a> {
    fn target<'n>(&'n self, name: &'n str) -> &'n str {
        self.bind.get(name).map_or(name, String::as_str)
    }

    /// The FP8 or MXFP4 weight `name` (a bundle name): the chip's slice, else the whole.
    fn blocks(&self, name: &str) -> Option<&'a BlockWeight> {
        self.local.and_then(|w| w.blocks.get(name)).or_else(|| self.weights.blocks.get(name))
    }
}

impl SimBindings for Env<'_> {
    fn tensor(&self, name: &str) -> Option<Cow<'_, SimTensor>> {
        let name = self.target(name);
        let local = || self.local.and_then(|w| w.dense.get(name));
        let found = self
            .step
            .get(name)
            .or_else(local)
            .or_else(|| self.weights.dense.get(name))
            .or_else(|| self.shared.get(name));
        found.map(Cow::Borrowed)
    }

    fn packed(&self, name: &str) -> Option<PackedWeight<'_>> {
        let name = self.target(name);
        if let Some(p) = self.weights.packed.get(name) {
            return Some(p.weight());
        }
        self.blocks(name)?.packed()
    }

    fn fp8(&self, name: &str) -> Option<Cow<'_, Fp8Weight>> {
        let name = self.target(name);
        self.blocks(name)?.fp8().map(Cow::Borrowed)
    }

    fn q8(&self, name: &str) -> Option<Cow<'_, Q8Weight>> {
        let name = self.target(name);
        self.local.and_then(|w| w.q8.get(name)).or_else(|| self.weights.q8.get(name)).map(Cow::Borrowed)
    }
}
