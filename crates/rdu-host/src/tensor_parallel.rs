//! Tensor-parallel runs: a bundle whose kind programs run over `cut.tp` chips. Every chip
//! holds its slices of each split weight (cut once, at load, from the checkpoint tensor — a
//! Q8_0, FP8 or MXFP4 tensor keeps whole blocks) and its share of each layer's state; a kind program runs on
//! one thread per chip, `all_reduce` summing over them through a shared buffer and barrier
//! (`rdu_spatial::sim::AllReduce`). The head runs the same way, vocabulary-parallel: each chip
//! computes its run of the logits and the host joins them in chip order
//! (`rdu_spatial::tensor_parallel::join`). The embedding runs once, on the replicated spine.

use std::collections::{BTreeMap, BTreeSet};

use rdu_spatial::blocks::BlockWeight;
use rdu_spatial::manifest::{chip_ranges, chip_shape, Manifest, StateEntry};
use rdu_spatial::sim::{simulate_chip, AllReduce, SimError};
use rdu_spatial::tensor_parallel::{join, pad, take, take_q8};
use rdu_spatial::{SimTensor, SpatialProgram};

use crate::env::Env;
use crate::error::{HostError, Result};
use crate::states::States;
use crate::weights::Weights;

/// The whole tensor `name` out of `store`: moved out, or copied when the spine reads it too.
fn whole<T: Clone>(store: &mut BTreeMap<String, T>, name: &str, spine: &BTreeSet<String>) -> Option<T> {
    if spine.contains(name) {
        store.get(name).cloned()
    } else {
        store.remove(name)
    }
}

/// Every chip's own tensors.
pub(crate) struct Chips {
    /// Per chip: its slices of every split weight (replicated weights stay in the host's store).
    pub weights: Vec<Weights>,
    /// Per chip: its share of every state (a replicated state, e.g. an MLA latent cache, whole).
    pub states: Vec<States>,
}

impl Chips {
    /// The chips of a tensor-parallel manifest (`None` for any other cut). Split weights move
    /// out of `weights` into each chip's slices — but for those in `spine`, which a program on
    /// the replicated spine reads whole (a tied embedding table the head reads split), and
    /// which stay there too.
    pub fn new(m: &Manifest, weights: &mut Weights, spine: &BTreeSet<String>) -> Result<Option<Chips>> {
        let tensor_parallel = m.cut.is_split();
        let Some(n) = m.cut.tp.filter(|_| tensor_parallel) else { return Ok(None) };
        let mut chips: Vec<Weights> = (0..n).map(|_| Weights::default()).collect();
        for (name, entry) in m.tensors.iter().filter(|(_, e)| !e.slices.is_empty()) {
            let fail = |problem: String| HostError::Slice { tensor: name.clone(), problem };
            // A zero-padded tensor: zeros (whole zero blocks) appended to the stored values.
            let pad_dense = |t: SimTensor| -> Result<SimTensor> {
                let Some(p) = entry.pad else { return Ok(t) };
                let values = t.as_f32().ok_or_else(|| fail("is not f32".into()))?;
                let (shape, v) = pad(&t.shape, values, p.axis, p.to).map_err(fail)?;
                Ok(SimTensor::f32(shape, v))
            };
            let pad_blocks = |w: BlockWeight| match entry.pad {
                Some(p) => w.pad(p.axis, p.to).map_err(fail),
                None => Ok(w),
            };
            if entry.pad.is_some() && weights.q8.contains_key(name) {
                return Err(fail("is held Q8_0, which is never zero-padded".into()));
            }
            if let Some(full) = whole(&mut weights.dense, name, spine).map(pad_dense).transpose()? {
                let values = full.as_f32().ok_or_else(|| fail("is not f32".into()))?;
                for (c, chip) in chips.iter_mut().enumerate() {
                    let (axis, ranges) =
                        chip_ranges(&entry.slices, c).ok_or_else(|| fail(format!("no slice for chip {c}")))?;
                    let (shape, v) = take(&full.shape, values, axis, &ranges).map_err(fail)?;
                    chip.dense.insert(name.clone(), SimTensor::f32(shape, v));
                }
            } else if let Some(full) = whole(&mut weights.q8, name, spine) {
                for (c, chip) in chips.iter_mut().enumerate() {
                    let (axis, ranges) =
                        chip_ranges(&entry.slices, c).ok_or_else(|| fail(format!("no slice for chip {c}")))?;
                    chip.q8.insert(name.clone(), take_q8(&full, axis, &ranges).map_err(fail)?);
                }
            } else if let Some(full) = whole(&mut weights.blocks, name, spine).map(pad_blocks).transpose()? {
                for (c, chip) in chips.iter_mut().enumerate() {
                    let (axis, ranges) =
                        chip_ranges(&entry.slices, c).ok_or_else(|| fail(format!("no slice for chip {c}")))?;
                    chip.blocks.insert(name.clone(), full.take(axis, &ranges).map_err(fail)?);
                }
            }
        }
        let local: Vec<StateEntry> = m
            .states
            .iter()
            .map(|s| StateEntry {
                name: s.name.clone(),
                dtype: s.dtype,
                shape: chip_shape(&s.shape, &s.slices),
                slices: Vec::new(),
            })
            .collect();
        let states = (0..n).map(|_| States::new(&local)).collect();
        Ok(Some(Chips { weights: chips, states }))
    }

    /// Runs one call of a kind or head program on every chip; returns its outputs: chip 0's
    /// (every chip's are the same: the program's results are all-reduced), but a result the
    /// program splits (a vocabulary-parallel head's logits) joined from every chip's runs.
    pub fn run(
        &mut self,
        program: &SpatialProgram,
        env: &Env<'_>,
        states: &[(String, String)],
    ) -> std::result::Result<BTreeMap<String, SimTensor>, SimError> {
        let group = AllReduce::new(self.weights.len());
        let results: Vec<std::result::Result<BTreeMap<String, SimTensor>, SimError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .weights
                .iter()
                .zip(self.states.iter_mut())
                .enumerate()
                .map(|(c, (local, store))| {
                    let group = &group;
                    scope.spawn(move || {
                        let mut taken = BTreeMap::new();
                        for (kind, layer) in states {
                            if let Some(t) = store.take(layer) {
                                taken.insert(kind.clone(), t);
                            }
                        }
                        let env = Env { local: Some(local), ..*env };
                        let result = simulate_chip(program, &env, &mut taken, true, group, c, None);
                        for (kind, layer) in states {
                            store.put(layer, taken.remove(kind));
                        }
                        result
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| Err(SimError::Invalid { message: "a chip's thread panicked".into() }))
                })
                .collect()
        });
        // The cause, not the other chips' "another chip failed".
        let failed = |e: &SimError| e.to_string().contains("another chip failed");
        if let Some(e) = results.iter().filter_map(|r| r.as_ref().err()).find(|e| !failed(e)) {
            return Err(e.clone());
        }
        let chips = results.into_iter().collect::<std::result::Result<Vec<_>, _>>()?;
        let mut outputs = chips.first().cloned().ok_or_else(|| SimError::Invalid { message: "no chips".into() })?;
        let gathered = program.tp.iter().flat_map(|tp| &tp.splits).filter(|s| program.outputs.contains(&s.tensor));
        for split in gathered {
            let invalid =
                |message: String| SimError::Invalid { message: format!("joining `{}`: {message}", split.tensor) };
            let pieces = chips
                .iter()
                .map(|o| {
                    let t = o.get(&split.tensor).ok_or_else(|| invalid("a chip produced none".into()))?;
                    let values = t.as_f32().ok_or_else(|| invalid("not f32".into()))?;
                    Ok((t.shape.as_slice(), values))
                })
                .collect::<std::result::Result<Vec<_>, SimError>>()?;
            let extent = split.parts.iter().flatten().map(|&(_, e)| e).max().unwrap_or(0);
            let (shape, values) = join(&pieces, split.axis, &split.parts, extent).map_err(invalid)?;
            outputs.insert(split.tensor.clone(), SimTensor::f32(shape, values));
        }
        Ok(outputs)
    }

    /// Zeroes every chip's states.
    pub fn reset(&mut self) {
        self.states.iter_mut().for_each(States::reset);
    }
}
