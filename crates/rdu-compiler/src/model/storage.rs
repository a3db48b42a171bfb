//! `Storage`: which of the weights the author declares `q8` the checkpoint stores as Q8_0.

use std::collections::BTreeSet;

/// Which of the weights the author declares Q8_0 the checkpoint stores Q8_0.
///
/// Names are program tensor names (`Wq3`, `E`, `Wout`): per-layer names carry their layer's
/// index, so one set describes a whole model.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Storage {
    /// None stored Q8_0: every weight is read dense.
    #[default]
    Dense,
    /// Every weight the author declares `q8` is stored Q8_0.
    AllQ8,
    /// Exactly these weights are stored Q8_0 (those the author declares `q8`; others are ignored).
    Exactly(BTreeSet<String>),
}

impl Storage {
    /// Is the weight `name` (declared `q8` by the author) stored as Q8_0 blocks?
    pub fn stores_q8(&self, name: &str) -> bool {
        match self {
            Storage::Dense => false,
            Storage::AllQ8 => true,
            Storage::Exactly(set) => set.contains(name),
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
