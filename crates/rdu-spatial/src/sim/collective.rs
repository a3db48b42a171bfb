//! The chip-to-chip collective of a tensor-parallel program: `all_reduce` sums a tensor over
//! the chips. Each chip runs the same program on its own thread; `AllReduce` is the shared
//! buffer and barrier between them. Every chip writes its contribution to its own slot, waits
//! for all, and sums the slots in chip order — so every chip gets the same bits, run after run.
//! A chip that fails aborts the group, so that the others stop waiting instead of hanging.

use super::tensor::SimTensor;
use super::SimError;
use std::sync::{Condvar, Mutex};

/// What an op needs to sum a tensor over the chips.
pub trait Collective: Sync {
    /// Chips in the group.
    fn chips(&self) -> usize;
    /// Replaces `x` (chip `chip`'s partial value) by the sum over every chip.
    fn all_reduce(&self, chip: usize, x: &mut SimTensor) -> Result<(), SimError>;
    /// Stops the group after a chip failed: every chip waiting (or arriving later) gets an error.
    fn abort(&self, why: &str);
}

/// A group of `chips` threads summing tensors: slots and a reusable barrier that can be aborted.
pub struct AllReduce {
    chips: usize,
    slots: Vec<Mutex<Vec<f32>>>,
    barrier: Mutex<BarrierState>,
    turn: Condvar,
}

struct BarrierState {
    waiting: usize,
    generation: u64,
    aborted: Option<String>,
}

impl AllReduce {
    pub fn new(chips: usize) -> AllReduce {
        AllReduce {
            chips: chips.max(1),
            slots: (0..chips.max(1)).map(|_| Mutex::new(Vec::new())).collect(),
            barrier: Mutex::new(BarrierState { waiting: 0, generation: 0, aborted: None }),
            turn: Condvar::new(),
        }
    }

    fn stop(&self, why: &str) {
        let mut st = self.barrier.lock().unwrap_or_else(|e| e.into_inner());
        if st.aborted.is_none() {
            st.aborted = Some(why.to_string());
        }
        self.turn.notify_all();
    }

    fn wait(&self) -> Result<(), SimError> {
        let mut st = self.barrier.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = &st.aborted {
            return super::invalid(format!("all_reduce: another chip failed: {why}"));
        }
        st.waiting += 1;
        if st.waiting == self.chips {
            st.waiting = 0;
            st.generation += 1;
            self.turn.notify_all();
            return Ok(());
        }
        let generation = st.generation;
        while st.generation == generation && st.aborted.is_none() {
            st = self.turn.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        match &st.aborted {
            Some(why) if st.generation == generation => {
                super::invalid(format!("all_reduce: another chip failed: {why}"))
            }
            _ => Ok(()),
        }
    }
}

impl Collective for AllReduce {
    fn chips(&self) -> usize {
        self.chips
    }

    fn abort(&self, why: &str) {
        self.stop(why);
    }

    fn all_reduce(&self, chip: usize, x: &mut SimTensor) -> Result<(), SimError> {
        let Some(slot) = self.slots.get(chip) else {
            return super::invalid(format!("all_reduce: chip {chip} of a group of {}", self.chips));
        };
        let Some(values) = x.as_f32_mut() else { return super::invalid("all_reduce sums f32 tensors") };
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = values.to_vec();
        self.wait()?;
        let mut sum = vec![0f32; values.len()];
        for (c, s) in self.slots.iter().enumerate() {
            let part = s.lock().unwrap_or_else(|e| e.into_inner());
            if part.len() != sum.len() {
                let n = part.len();
                drop(part);
                self.stop("chips disagree on an all_reduce's size");
                return super::invalid(format!("all_reduce: chip {c} holds {n} values, chip {chip} {}", sum.len()));
            }
            sum.iter_mut().zip(part.iter()).for_each(|(a, b)| *a += b);
        }
        // Nobody overwrites a slot before every chip has read them all.
        self.wait()?;
        values.copy_from_slice(&sum);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chip_gets_the_same_sum_again_and_again() {
        let group = AllReduce::new(3);
        let sums: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|c| {
                    let group = &group;
                    s.spawn(move || {
                        (0..4)
                            .map(|round| {
                                let mut x = SimTensor::f32(vec![2], vec![c as f32 + round as f32, 1.0]);
                                group.all_reduce(c, &mut x).unwrap();
                                x.as_f32().unwrap().to_vec()
                            })
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for chip in &sums {
            for (round, sum) in chip.iter().enumerate() {
                assert_eq!(sum, &vec![3.0 + 3.0 * round as f32, 3.0]);
            }
        }
    }

    #[test]
    fn a_failed_chip_releases_the_others() {
        let group = AllReduce::new(2);
        let results: Vec<Result<(), SimError>> = std::thread::scope(|s| {
            let waiting = s.spawn(|| group.all_reduce(0, &mut SimTensor::f32(vec![1], vec![1.0])));
            let failing = s.spawn(|| {
                group.abort("chip 1 could not bind a weight");
                Err(SimError::Invalid { message: "failed".into() })
            });
            vec![waiting.join().unwrap(), failing.join().unwrap()]
        });
        let err = results[0].as_ref().unwrap_err().to_string();
        assert!(err.contains("another chip failed: chip 1 could not bind a weight"), "{err}");
    }
}
