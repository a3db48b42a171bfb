//! A model as a family builder leaves it, before its rotations are deduplicated into
//! [`ModelSpec::rotations`].

use super::fields::Core;
use crate::model::spec::{Dialect, Embed, Family, Ffn, Head, Layer, Mixer, ModelSpec, Norms, Rotation, StateDtype};

/// A model before its rotations are deduplicated into [`ModelSpec::rotations`].
pub(super) struct Draft {
    pub family: Family,
    pub vocab: usize,
    pub d_model: usize,
    pub layers: Vec<LayerDraft>,
    pub embed: Embed,
    pub head: Head,
    pub max_ctx: usize,
    pub prefix: &'static str,
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
    /// Multi-token-prediction layers the checkpoint holds beyond the decoder's (never read).
    pub mtp_layers: usize,
}

impl Draft {
    /// A model around its layers with the usual `model.` prefix and no embedding scale;
    /// `unit_offset` is the `(1 + w)` convention of the final norm.
    pub(super) fn new(family: Family, core: &Core, layers: Vec<LayerDraft>, unit_offset: bool) -> Draft {
        Draft {
            family,
            vocab: core.vocab,
            d_model: core.d_model,
            layers,
            embed: Embed { scale: None },
            head: Head { tied: core.tied, norm_eps: core.eps, norm_unit_offset: unit_offset, hidden: false },
            max_ctx: core.max_ctx,
            prefix: "model.",
            bos: core.bos,
            eos: core.eos.clone(),
            mtp_layers: 0,
        }
    }
}

/// A [`Layer`] that still holds its rotation by value.
pub(super) struct LayerDraft {
    pub mixer: Mixer,
    pub rotation: Option<Rotation>,
    pub window: Option<usize>,
    pub ffn: Ffn,
    pub norms: Norms,
}

impl Draft {
    /// The spec named `name`, its rotations deduplicated in order of first appearance over
    /// the layers.
    pub(super) fn assemble(self, name: &str) -> ModelSpec {
        let mut rotations: Vec<Rotation> = Vec::new();
        let layers = self
            .layers
            .into_iter()
            .map(|layer| {
                let rotation = layer.rotation.map(|r| match rotations.iter().position(|x| *x == r) {
                    Some(idx) => idx,
                    None => {
                        rotations.push(r);
                        rotations.len() - 1
                    }
                });
                Layer { mixer: layer.mixer, rotation, window: layer.window, ffn: layer.ffn, norms: layer.norms }
            })
            .collect();
        ModelSpec {
            name: name.to_string(),
            family: self.family,
            vocab: self.vocab,
            d_model: self.d_model,
            layers,
            rotations,
            embed: self.embed,
            head: self.head,
            max_ctx: self.max_ctx,
            dialect: Dialect::Hf { prefix: self.prefix.to_string() },
            bos: self.bos,
            eos: self.eos,
            state: StateDtype::default(),
            mtp_layers: self.mtp_layers,
            quantization: None,
            mtp: None,
        }
    }
}
