//! New vectors written once: each value produced straight into the vector's memory, which is
//! never zeroed first.
//!
//! `vec![0.0; n]` then overwritten writes every byte twice. For the gigabytes of seeded weights
//! certification draws, the first pass was 7% of a 27B preset's decode certification: a
//! process that keeps freed memory (the test binaries do) gets it back from `calloc`, which
//! must clear it. Here each run of values is written into a small buffer on the stack, then
//! copied once into the vector.

use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Values written through the stack buffer at a time: a whole number of Q8_0 blocks, so that a
/// writer of a weight's values starts each run at a block.
pub const RUN: usize = 1024;

const _: () = assert!(RUN.is_multiple_of(crate::q8::QK8_0), "a run of values is a whole number of Q8_0 blocks");

/// `n` values, written by `write(i, out)`: values `i..i + out.len()`, every one of them. Runs
/// start at multiples of [`RUN`] and are at most `RUN` long.
pub fn filled<T: Copy + Default>(n: usize, write: impl Fn(usize, &mut [T])) -> Vec<T> {
    let mut out = Vec::with_capacity(n);
    write_runs(0, &mut out.spare_capacity_mut()[..n], &write);
    // SAFETY: `write_runs` initialised all of the first `n` values (a panic in `write` unwinds
    // past this, and the vector is dropped with length 0).
    unsafe { out.set_len(n) };
    out
}

/// [`filled`], tasks of `task` values in parallel: runs start at multiples of `task`, and at
/// multiples of [`RUN`] past those.
pub fn par_filled<T: Copy + Default + Send + Sync>(
    n: usize,
    task: usize,
    write: impl Fn(usize, &mut [T]) + Sync,
) -> Vec<T> {
    assert!(task > 0, "tasks of no values");
    let mut out = Vec::with_capacity(n);
    out.spare_capacity_mut()[..n]
        .par_chunks_mut(task)
        .enumerate()
        .for_each(|(t, part)| write_runs(t * task, part, &write));
    // SAFETY: every task initialised its part, and the parts cover the first `n` values (a
    // panic in `write` propagates out of `for_each`, and the vector is dropped with length 0).
    unsafe { out.set_len(n) };
    out
}

fn write_runs<T: Copy + Default>(first: usize, out: &mut [MaybeUninit<T>], write: &impl Fn(usize, &mut [T])) {
    let mut buf = [T::default(); RUN];
    for (r, run) in out.chunks_mut(RUN).enumerate() {
        let buf = &mut buf[..run.len()];
        write(first + r * RUN, buf);
        for (o, &v) in run.iter_mut().zip(buf.iter()) {
            o.write(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value is the writer's, at its index, whatever the length against the runs and
    /// tasks (shorter than a run, a run and one more, several tasks and a partial one).
    #[test]
    fn every_value_is_written_at_its_index() {
        for n in [0, 1, RUN - 1, RUN, RUN + 1, 5 * RUN + 17] {
            let want: Vec<u64> = (0..n as u64).map(|i| i * i + 3).collect();
            let write = |task: usize| {
                move |i: usize, out: &mut [u64]| {
                    assert!((i % task).is_multiple_of(RUN) && out.len() <= RUN, "run at {i} of {}", out.len());
                    out.iter_mut().zip(i as u64..).for_each(|(o, j)| *o = j * j + 3);
                }
            };
            assert_eq!(filled(n, write(usize::MAX)), want, "filled {n}");
            for task in [2 * RUN, RUN + 100, 7] {
                assert_eq!(par_filled(n, task, write(task)), want, "par_filled {n}, tasks of {task}");
            }
        }
    }
}
