//! What the simulator reads from outside: every input, weight, shared and state tensor by name.

use std::borrow::Cow;
use std::collections::BTreeMap;

use rdu_checkpoint::{Fp8Weight, GgmlType, GgmlWeight};

use super::packed::PackedWeight;
use super::tensor::SimTensor;
use crate::q8::{Q8Block, Q8Weight};

/// Supplies the tensors a program declares as input, weight, shared or state.
///
/// A weight declared `storage=q8_0` is looked up with [`SimBindings::q8`] (or
/// [`SimBindings::packed`]), one declared `storage=fp8_RxC` with [`SimBindings::fp8`], one
/// declared `storage=mxfp4` with [`SimBindings::packed`], every other tensor with
/// [`SimBindings::tensor`]. `experts` reads its stacked weights one expert at a time
/// through [`SimBindings::expert`], so an implementation can materialise only the experts a
/// step selects; the default slices the whole tensor.
///
/// `Sync`: independent ops of a program run on several threads at once, reading the same
/// bindings.
pub trait SimBindings: Sync {
    /// A dense tensor by name.
    fn tensor(&self, name: &str) -> Option<Cow<'_, SimTensor>>;

    /// A weight stored as Q8_0 blocks by name.
    fn q8(&self, name: &str) -> Option<Cow<'_, Q8Weight>>;

    /// A weight kept in its checkpoint's block format, read in place (looked up before
    /// [`SimBindings::tensor`] and [`SimBindings::q8`] for a declared weight): a Q8_0-declared
    /// weight as file Q8_0 blocks, a dense-declared one in any format [`super::can_pack`]
    /// accepts, widened per row inside the product to exactly the values the file holds.
    fn packed(&self, _name: &str) -> Option<PackedWeight<'_>> {
        None
    }

    /// A weight stored FP8 with its block scales, by name.
    fn fp8(&self, _name: &str) -> Option<Cow<'_, Fp8Weight>> {
        None
    }

    /// Expert `expert` of the stacked weight `name` (`[E, ...]`): its row-major slab, as stored.
    fn expert(&self, name: &str, expert: usize) -> Option<WeightSlab<'_>> {
        if let Some(w) = self.q8(name) {
            let n_experts = *w.shape.first()?;
            let per = w.blocks.len().checked_div(n_experts)?;
            let range = expert.checked_mul(per)?..expert.checked_add(1)?.checked_mul(per)?;
            return match w {
                Cow::Borrowed(w) => Some(WeightSlab::Q8(Cow::Borrowed(w.blocks.get(range)?))),
                Cow::Owned(w) => Some(WeightSlab::Q8(Cow::Owned(w.blocks.get(range)?.to_vec()))),
            };
        }
        if let Some(w) = self.fp8(name) {
            return fp8_expert(w, expert);
        }
        if let Some(w) = self.packed(name) {
            let bytes = w.expert_bytes(expert)?;
            return Some(WeightSlab::Packed { format: w.format, bytes: Cow::Borrowed(bytes) });
        }
        let t = self.tensor(name)?;
        let n_experts = *t.shape.first()?;
        let per = t.len().checked_div(n_experts)?;
        let range = expert.checked_mul(per)?..expert.checked_add(1)?.checked_mul(per)?;
        match t {
            Cow::Borrowed(t) => Some(WeightSlab::Dense(Cow::Borrowed(t.as_f32()?.get(range)?))),
            Cow::Owned(t) => Some(WeightSlab::Dense(Cow::Owned(t.as_f32()?.get(range)?.to_vec()))),
        }
    }
}

/// Expert `expert` of a stacked FP8 weight: its values and its grid of scales.
pub fn fp8_expert(w: Cow<'_, Fp8Weight>, expert: usize) -> Option<WeightSlab<'_>> {
    let block = w.block;
    match w {
        Cow::Borrowed(w) => {
            let m = w.view().matrix(expert)?;
            Some(WeightSlab::Fp8 { block, values: Cow::Borrowed(m.values), scales: Cow::Borrowed(m.scales) })
        }
        Cow::Owned(w) => {
            let m = w.view().matrix(expert)?;
            let (values, scales) = (Cow::Owned(m.values.to_vec()), Cow::Owned(m.scales.to_vec()));
            Some(WeightSlab::Fp8 { block, values, scales })
        }
    }
}

/// One expert's slab of a stacked weight, as stored: dense, Q8_0 blocks, FP8 values with
/// their block scales, or bytes of a ggml block format (MXFP4).
#[derive(Clone, Debug, PartialEq)]
pub enum WeightSlab<'a> {
    Dense(Cow<'a, [f32]>),
    Q8(Cow<'a, [Q8Block]>),
    /// FP8 values row-major and the expert's grid of scales, one per `block` (`[rows, cols]`).
    Fp8 {
        block: [usize; 2],
        values: Cow<'a, [u8]>,
        scales: Cow<'a, [f32]>,
    },
    /// The expert's bytes in a ggml block format.
    Packed {
        format: GgmlType,
        bytes: Cow<'a, [u8]>,
    },
}

/// Bindings held in maps: dense tensors, Q8_0 weights, FP8 weights and weights in a ggml
/// block format (MXFP4).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MapBindings {
    pub tensors: BTreeMap<String, SimTensor>,
    pub q8: BTreeMap<String, Q8Weight>,
    pub fp8: BTreeMap<String, Fp8Weight>,
    pub packed: BTreeMap<String, GgmlWeight>,
}

impl MapBindings {
    pub fn new() -> MapBindings {
        MapBindings::default()
    }

    /// Binds a dense tensor (builder style).
    pub fn with(mut self, name: &str, tensor: SimTensor) -> MapBindings {
        self.tensors.insert(name.to_string(), tensor);
        self
    }

    /// Binds a Q8_0 weight (builder style).
    pub fn with_q8(mut self, name: &str, weight: Q8Weight) -> MapBindings {
        self.q8.insert(name.to_string(), weight);
        self
    }

    /// Binds an FP8 weight (builder style).
    pub fn with_fp8(mut self, name: &str, weight: Fp8Weight) -> MapBindings {
        self.fp8.insert(name.to_string(), weight);
        self
    }

    /// Binds a weight in a ggml block format (builder style).
    pub fn with_packed(mut self, name: &str, weight: GgmlWeight) -> MapBindings {
        self.packed.insert(name.to_string(), weight);
        self
    }
}

impl SimBindings for MapBindings {
    fn tensor(&self, name: &str) -> Option<Cow<'_, SimTensor>> {
        self.tensors.get(name).map(Cow::Borrowed)
    }

    fn q8(&self, name: &str) -> Option<Cow<'_, Q8Weight>> {
        self.q8.get(name).map(Cow::Borrowed)
    }

    fn fp8(&self, name: &str) -> Option<Cow<'_, Fp8Weight>> {
        self.fp8.get(name).map(Cow::Borrowed)
    }

    fn packed(&self, name: &str) -> Option<PackedWeight<'_>> {
        self.packed.get(name).map(PackedWeight::of)
    }
}
