//! Helpers shared by the integration tests: one-op programs written in the text form,
//! deterministic pseudo-random data, and tolerance checks that name the worst element.

use std::fmt::Write;

use rdu_spatial::q8::{quantize_q8_0, Q8Weight};
use rdu_spatial::{simulate, text, MapBindings, SimError, SimOut, SimTensor, SpatialProgram};

/// A program declaring each binding (`q8` ones as `storage=q8_0` weights, `fp8` ones as
/// `storage=fp8_RxC`, `packed` MXFP4 ones as `storage=mxfp4`) and running `ops`
/// (indented op lines, one per line) in one stage; its outputs are `outputs`.
pub fn program(bind: &MapBindings, ops: &str, outputs: &[&str]) -> SpatialProgram {
    let mut t = String::from("program t chip=sn50\n");
    for (name, v) in &bind.tensors {
        let role = if name.starts_with('S') || name.starts_with('C') { "state" } else { "input" };
        let dims: Vec<String> = v.shape.iter().map(|d| d.to_string()).collect();
        let _ = writeln!(t, "tensor {name} : {}[{}] role={role} home=hbm", v.dtype().as_str(), dims.join(", "));
    }
    for (name, w) in &bind.q8 {
        let dims: Vec<String> = w.shape.iter().map(|d| d.to_string()).collect();
        let _ = writeln!(t, "tensor {name} : f32[{}] storage=q8_0 role=weight home=hbm", dims.join(", "));
    }
    for (name, w) in &bind.fp8 {
        let dims: Vec<String> = w.shape.iter().map(|d| d.to_string()).collect();
        let [r, c] = w.block;
        let _ = writeln!(t, "tensor {name} : f32[{}] storage=fp8_{r}x{c} role=weight home=hbm", dims.join(", "));
    }
    for (name, w) in &bind.packed {
        let dims: Vec<String> = w.shape.iter().map(|d| d.to_string()).collect();
        let storage = if w.format == rdu_checkpoint::GgmlType::MXFP4 { " storage=mxfp4" } else { "" };
        let _ = writeln!(t, "tensor {name} : f32[{}]{storage} role=weight home=hbm", dims.join(", "));
    }
    t.push_str("section 0\nstage s0 pcus=1 pmus=1\n");
    for line in ops.lines().filter(|l| !l.trim().is_empty()) {
        let _ = writeln!(t, "  {}", line.trim());
    }
    for o in outputs {
        let _ = writeln!(t, "output {o}");
    }
    text::parse(&t).unwrap_or_else(|e| panic!("test program does not parse: {e}\n{t}"))
}

/// Runs `ops` over `bind`; the outputs are the op lines' first binders.
pub fn run(bind: &MapBindings, ops: &str, outputs: &[&str]) -> Result<SimOut, SimError> {
    simulate(&program(bind, ops, outputs), bind)
}

/// The f32 data of output `name`.
pub fn out(res: &SimOut, name: &str) -> Vec<f32> {
    res.outputs[name].as_f32().expect("f32 output").to_vec()
}

pub fn f(shape: &[usize], data: &[f32]) -> SimTensor {
    SimTensor::f32(shape.to_vec(), data.to_vec())
}

pub fn i(shape: &[usize], data: &[i32]) -> SimTensor {
    SimTensor::i32(shape.to_vec(), data.to_vec())
}

/// Deterministic values in [-1, 1) from a seed (xorshift).
pub fn rand(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

pub fn rt(shape: &[usize], seed: u64) -> SimTensor {
    SimTensor::f32(shape.to_vec(), rand(shape.iter().product(), seed))
}

pub fn q8(shape: &[usize], seed: u64) -> Q8Weight {
    quantize_q8_0(&rand(shape.iter().product(), seed), shape).expect("quantisable")
}

/// Asserts `got ≈ want` elementwise within `abs + rel·|want|`, naming the worst element.
#[track_caller]
pub fn close(got: &[f32], want: &[f32], abs: f32, rel: f32) {
    rdu_testkit::Tolerance::new(abs, rel).assert("output", got, want);
}

/// Asserts `got ≈ want` within `rel` of the largest `|want|` (relative to the output's scale,
/// so that a near-cancelling element is not held to a bound tighter than f32 sums reach).
#[track_caller]
pub fn close_scaled(got: &[f32], want: &[f32], rel: f32) {
    rdu_testkit::Tolerance::scaled(want, rel).assert("output", got, want);
}
