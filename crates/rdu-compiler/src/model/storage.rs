//! `Storage`: which of the weights the author declares `q8` the checkpoint stores in a block
//! format — Q8_0, FP8 block-scaled, MXFP4 — and in which.

use std::collections::{BTreeMap, BTreeSet};

/// One weight's block format (`Q8_0`, `Fp8 { rows, cols }`, `Mxfp4`): the spatial program's
/// storage of a weight a product folds.
pub use rdu_spatial::program::Storage as Format;

/// Which of the weights the author declares `q8` (may be stored in a block format: a
/// projection whose `in` axis holds whole blocks of 32) the checkpoint stores so, and how.
///
/// Names are program tensor names (`Wq3`, `E`, `Wout`): per-layer names carry their layer's
/// index, so one value describes a whole model.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Storage {
    /// None stored in a block format: every weight is read dense.
    #[default]
    Dense,
    /// Every weight the author declares `q8` is stored Q8_0.
    AllQ8,
    /// Exactly these weights, each in its block format (those the author declares `q8`;
    /// others are ignored): what a checkpoint stores, weight by weight.
    Exactly(BTreeMap<String, Format>),
}

impl Storage {
    /// Exactly the weights of `q8` stored Q8_0.
    pub fn q8(q8: impl IntoIterator<Item = String>) -> Storage {
        Storage::Exactly(q8.into_iter().map(|n| (n, Format::Q8_0)).collect())
    }

    /// The block format the weight `name` (declared `q8` by the author) is stored in, if any.
    pub fn format_of(&self, name: &str) -> Option<Format> {
        match self {
            Storage::Dense => None,
            Storage::AllQ8 => Some(Format::Q8_0),
            Storage::Exactly(map) => map.get(name).copied(),
        }
    }

    /// Is the weight `name` (declared `q8` by the author) stored as Q8_0 blocks?
    pub fn stores_q8(&self, name: &str) -> bool {
        self.format_of(name) == Some(Format::Q8_0)
    }

    /// The weights stored in `format`.
    pub fn stored_in(&self, format: Format) -> BTreeSet<String> {
        match self {
            Storage::Exactly(map) => map.iter().filter(|(_, f)| **f == format).map(|(n, _)| n.clone()).collect(),
            _ => BTreeSet::new(),
        }
    }

    /// A short word for messages and manifests.
    pub fn label(&self) -> &'static str {
        match self {
            Storage::Dense => "dense",
            Storage::AllQ8 => "q8",
            Storage::Exactly(_) => "as-stored",
        }
    }
}
