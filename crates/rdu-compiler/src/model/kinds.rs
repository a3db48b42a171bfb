//! Layer kinds: the grouping of layers into kinds by digest, and the naming convention that
//! binds a kind's program to each of its layers.
//! It does not lower anything itself.

use crate::lang::{shape_digest, Digest, Source};
use crate::model::author::source_of;
use crate::model::spec::{Cut, ModelSpec};
use std::collections::{BTreeMap, BTreeSet};

pub use crate::lang::renaming;
pub use crate::model::storage::Storage;
use rdu_spatial::names::TensorName;
pub use rdu_spatial::names::{HiddenNames, SINGLE, STACKED};

/// One layer kind before lowering: its name, digest and layers (ascending).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindGroup {
    pub name: String,
    pub digest: Digest,
    pub layers: Vec<usize>,
    /// The representative (first) layer's mixer and feed-forward labels.
    pub mixer: &'static str,
    pub ffn: &'static str,
}

impl KindGroup {
    /// The layer whose program stands for the kind.
    pub fn representative(&self) -> usize {
        self.layers[0]
    }
}

/// The context `layer_kinds` authors decode programs at when no cut is given.
pub const KINDS_CTX: usize = 4096;

/// The model's layer kinds, in the order their first layer appears: two layers are of one
/// kind when their authored decode programs (text and storage set) share a `shape_digest`.
pub fn layer_kinds(spec: &ModelSpec, storage: &Storage) -> Vec<KindGroup> {
    layer_kinds_for(spec, Cut::Decode { ctx: KINDS_CTX.min(spec.max_ctx.max(1)) }, storage)
}

/// `layer_kinds` for the programs of a given cut.
pub fn layer_kinds_for(spec: &ModelSpec, cut: Cut, storage: &Storage) -> Vec<KindGroup> {
    let sources: Vec<Source> = (0..spec.n_layers()).map(|l| source_of(spec, l, cut, storage)).collect();
    kinds_of_sources(spec, &sources)
}

/// The kinds of a model whose layers' programs are `sources` (one per layer, in order).
///
/// A kind is named `{mixer}[_sliding]_{ffn}`. Kinds that share such a name differ in what
/// the checkpoint stores in a block format (a GGUF's mixed quantisation, an FP8 checkpoint's
/// unquantised layers) or in their shapes: the first shows in the name, `_{format}_{weights}`
/// listing, for each format (`q8`, `fp8`, `mxfp4`, in that order), the weights this kind
/// stores so beyond those every kind of the name stores (`attention_sliding_dense_q8_wv_wdown`,
/// `mla_moe_fp8_wo`); any other difference is numbered (`_v2`).
pub(crate) fn kinds_of_sources(spec: &ModelSpec, sources: &[Source]) -> Vec<KindGroup> {
    let mut kinds: Vec<KindGroup> = Vec::new();
    // Per kind: the weights stored in each block format, by fold word and base name (`Wv3` → `wv`).
    let mut stored_sets: Vec<BTreeMap<&'static str, BTreeSet<String>>> = Vec::new();
    let mut by_digest: BTreeMap<Digest, usize> = BTreeMap::new();
    for ((l, layer), source) in spec.layers.iter().enumerate().zip(sources) {
        let digest = shape_digest(source);
        match by_digest.get(&digest) {
            Some(&k) => kinds[k].layers.push(l),
            None => {
                by_digest.insert(digest, kinds.len());
                let name = format!(
                    "{}{}_{}",
                    layer.mixer.label(),
                    if layer.window.is_some() { "_sliding" } else { "" },
                    layer.ffn.label()
                );
                let mut sets: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
                for (n, storage) in &source.stored {
                    let Some(fold) = storage.fold() else { continue };
                    sets.entry(fold.word()).or_default().insert(TensorName::parse(n).base.to_lowercase());
                }
                stored_sets.push(sets);
                kinds.push(KindGroup {
                    name,
                    digest,
                    layers: vec![l],
                    mixer: layer.mixer.label(),
                    ffn: layer.ffn.label(),
                });
            }
        }
    }
    let bases: Vec<String> = kinds.iter().map(|k| k.name.clone()).collect();
    for (k, base) in bases.iter().enumerate() {
        let same: Vec<usize> = (0..kinds.len()).filter(|&j| &bases[j] == base).collect();
        if same.len() < 2 {
            continue;
        }
        let mut name = base.clone();
        for fold in rdu_spatial::program::Fold::ALL.map(|f| f.word()) {
            let empty = BTreeSet::new();
            let of = |j: usize| stored_sets[j].get(fold).unwrap_or(&empty);
            let extra: Vec<&str> =
                of(k).iter().filter(|w| !same.iter().all(|&j| of(j).contains(*w))).map(String::as_str).collect();
            if !extra.is_empty() {
                name = format!("{name}_{fold}_{}", extra.join("_"));
            }
        }
        kinds[k].name = name;
    }
    // Kinds whose names still agree (same storage, other shapes): numbered in order.
    for k in 0..kinds.len() {
        let earlier = (0..k)
            .filter(|&j| kinds[j].name == kinds[k].name || kinds[j].name.starts_with(&format!("{}_v", kinds[k].name)))
            .count();
        if earlier > 0 && (0..k).any(|j| kinds[j].name == kinds[k].name) {
            kinds[k].name = format!("{}_v{}", kinds[k].name, earlier + 1);
        }
    }
    kinds
}

/// The name layer `to` gives the tensor that layer `from` calls `name`: the hidden-state
/// input is named by position (`x` for the first layer, `xo{l-1}` after); every per-layer
/// tensor carries its layer's index as a suffix (`Wq0`, `x2n3`); anything else — the shared
/// RoPE tables, runtime inputs such as `pos` — is the same tensor in every layer.
pub fn rebind(name: &str, from: usize, to: usize) -> String {
    rebind_via(name, from, to, SINGLE)
}

/// `rebind` for a bundle whose layers name their hidden-state input with `hidden` — the
/// stacked `X`/`bxo{l-1}` of a batch. A per-sequence tensor keeps its sequence suffix
/// (`Kc3_s1` at layer 7 is `Kc7_s1`).
pub fn rebind_via(name: &str, from: usize, to: usize, hidden: HiddenNames) -> String {
    let name = TensorName::parse(name);
    if name == hidden.input_of(from) {
        return hidden.input_of(to).to_string();
    }
    match name.layer {
        Some(l) if l == from => TensorName { layer: Some(to), ..name }.to_string(),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebind_follows_the_naming_convention() {
        assert_eq!(rebind("x", 0, 5), "xo4");
        assert_eq!(rebind("xo4", 5, 0), "x");
        assert_eq!(rebind("xo2", 3, 7), "xo6");
        assert_eq!(rebind("xo3", 3, 7), "xo7");
        assert_eq!(rebind("Wq3", 3, 11), "Wq11");
        assert_eq!(rebind("x2n3", 3, 4), "x2n4");
        assert_eq!(rebind("cos0", 0, 4), "cos0");
        assert_eq!(rebind("sin1", 1, 4), "sin1");
        assert_eq!(rebind("pos", 1, 4), "pos");
        assert_eq!(rebind("Wq30", 3, 4), "Wq30", "suffix must equal the layer exactly");
    }

    #[test]
    fn rebind_via_keeps_sequence_suffixes() {
        assert_eq!(rebind_via("Kc3_s1", 3, 7, STACKED), "Kc7_s1");
        assert_eq!(rebind_via("X", 0, 2, STACKED), "bxo1");
        assert_eq!(rebind_via("bxo2", 3, 0, STACKED), "X");
        assert_eq!(rebind_via("pos_s2", 3, 7, STACKED), "pos_s2");
    }
}
