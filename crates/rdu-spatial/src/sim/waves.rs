//! Which of a program's ops may run at once: its ops, in program order, grouped into waves.
//! An op joins the first wave after every op whose value it reads (the producer of each
//! operand), after the last op that wrote what it writes, and after every op that read what it
//! overwrites (an update's state); an op that meets other chips (`all_reduce`) stands alone in
//! a wave of its own, every op before it in earlier waves and every op after it in later ones.
//!
//! Running the waves in order, and each wave's ops in any order or at once, computes exactly
//! what running the ops one after another does: every op reads the same values. A 16-sequence
//! decode step's per-sequence ops (slices, rotations, cache writes, attention) fall into a few
//! waves of sixteen or more.

use std::collections::HashMap;

use crate::op::Cost;
use crate::program::{Arg, KernelOp};

/// The waves of `ops`: indices into `ops`, each wave in program order.
pub(super) fn waves(ops: &[&KernelOp]) -> Vec<Vec<usize>> {
    // A name's current value: the first wave that may read it, and the last wave reading it.
    let mut ready: HashMap<&str, usize> = HashMap::new();
    let mut read_in: HashMap<&str, usize> = HashMap::new();
    let mut waves: Vec<Vec<usize>> = Vec::new();
    // The first wave an op may join (past the last op that meets other chips).
    let mut floor = 0;
    for (i, op) in ops.iter().enumerate() {
        let reads = op.args.iter().filter_map(|a| match a {
            Arg::Tensor(name) => Some(name.as_str()),
            Arg::Lit(_) => None,
        });
        let mut wave = floor;
        for name in reads.clone() {
            wave = wave.max(ready.get(name).copied().unwrap_or(0));
        }
        for name in op.outs.iter().map(String::as_str) {
            wave = wave.max(ready.get(name).copied().unwrap_or(0));
            wave = wave.max(read_in.get(name).map_or(0, |&w| w + 1));
        }
        if op.op.cost() == Cost::Collective {
            wave = wave.max(waves.len());
            floor = wave + 1;
        }
        for name in reads {
            let last = read_in.entry(name).or_insert(wave);
            *last = (*last).max(wave);
        }
        for name in op.outs.iter().map(String::as_str) {
            ready.insert(name, wave + 1);
            read_in.remove(name);
        }
        if waves.len() <= wave {
            waves.resize(wave + 1, Vec::new());
        }
        waves[wave].push(i);
    }
    waves
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The waves of the ops of `text`, a program in the spatial format, as their outputs' names.
    fn named(text: &str) -> Vec<Vec<String>> {
        let program = crate::text::parse(text).expect("a program");
        let ops: Vec<&KernelOp> = program.sections.iter().flat_map(|s| &s.stages).flat_map(|s| &s.ops).collect();
        waves(&ops).iter().map(|w| w.iter().map(|&i| ops[i].outs.join(",")).collect()).collect()
    }

    const HEAD: &str = "program p chip=sn50
tensor x : f32[2, 4] role=input home=hbm
tensor W : f32[4, 4] role=weight home=hbm
tensor K0 : f32[8, 1, 4] role=state home=hbm
tensor K1 : f32[8, 1, 4] role=state home=hbm
tensor p0 : i32[] role=input home=host
tensor p1 : i32[] role=input home=host
tensor k1 : f32[1, 1, 4] role=input home=hbm
section 0
stage s0 pcus=1 pmus=1 pcu=0..1 pmu=0..1
";

    /// Two sequences' chains run side by side; a value is read only in a wave after the one
    /// that made it; an update of a state comes after every read of the value it replaces,
    /// (`c` reads `K1` in wave 3, so `K1`'s update, whose operands are ready from wave 0, runs
    /// in wave 4), and a read of the updated state after it.
    #[test]
    fn independent_chains_share_waves_and_dependences_keep_their_order() {
        let body = "  y = linear(x, W)
  y0 = slice(y, axis=0, start=0, len=1)
  y1 = slice(y, axis=0, start=1, len=1)
  k0 = reshape(y0, [1, 1, 4])
  c = concat(K1, k0, axis=0)
  K0 <- cache_put(K0, k0, p0)
  K1 <- cache_put(K1, k1, p1)
  a0 = mul(K0, K0)
  a1 = mul(K1, K1)
";
        let got = named(&format!("{HEAD}{body}"));
        let want: Vec<Vec<&str>> =
            vec![vec!["y"], vec!["y0", "y1"], vec!["k0"], vec!["c", "K0"], vec!["K1", "a0"], vec!["a1"]];
        assert_eq!(got, want);
    }

    /// An all-reduce stands alone: nothing before it runs after it, nothing after it before.
    #[test]
    fn a_collective_is_a_wave_of_its_own() {
        let body = "  y = linear(x, W)
  z = add(x, x)
  r = all_reduce(y)
  u = mul(x, x)
";
        let got = named(&format!("{HEAD}{body}"));
        let want: Vec<Vec<&str>> = vec![vec!["y", "z"], vec!["r"], vec!["u"]];
        assert_eq!(got, want);
    }
}
