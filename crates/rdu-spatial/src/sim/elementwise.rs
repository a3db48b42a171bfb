//! Elementwise ops: numpy-broadcasting `add`/`sub`/`mul` and the unary activations; tileable
//! along any axis of the output.

use super::call::{kernels, Call, Outs};
use super::mathf;
use super::region::{region, Axes};
use super::tensor::{strides, SimTensor};
use super::{invalid, SimError};

kernels! {
    Add(call, _) => binary(call, |a, b| a + b),
    Sub(call, _) => binary(call, |a, b| a - b),
    Mul(call, _) => binary(call, |a, b| a * b),
    Scale(call, a) => {
        let by = a.by as f32;
        unary(call, move |x| x * by)
    },
    Neg(call, _) => unary(call, |x| -x),
    Exp(call, _) => unary(call, f32::exp),
    Sigmoid(call, _) => unary(call, sigmoid),
    Silu(call, _) => unary(call, |x| x * sigmoid(x)),
    Softplus(call, _) => unary(call, softplus),
    GeluTanh(call, _) => unary(call, gelu_tanh),
}

/// `a ∘ b` with numpy broadcasting.
pub(super) fn binary(call: &Call<'_>, f: impl Fn(f32, f32) -> f32) -> Outs {
    let (ta, a) = call.f32(0)?;
    let (tb, b) = call.f32(1)?;
    let shape = broadcast(&ta.shape, &tb.shape)?;
    let reg = region(call.tiling(), &shape, Axes::Any, 0)?;
    let n: usize = shape.iter().product();
    let mut out = vec![0.0f32; n];
    let same = |s: &[usize]| s == shape.as_slice();
    for seg in reg.segments(&shape) {
        if same(&ta.shape) && same(&tb.shape) {
            for i in seg {
                out[i] = f(a[i], b[i]);
            }
        } else if same(&ta.shape) && b.len() == 1 {
            for i in seg {
                out[i] = f(a[i], b[0]);
            }
        } else {
            let (sa, sb) = (bcast_strides(&ta.shape, &shape), bcast_strides(&tb.shape, &shape));
            let so = strides(&shape);
            for i in seg {
                out[i] = f(a[offset(i, &so, &sa)], b[offset(i, &so, &sb)]);
            }
        }
    }
    Ok(vec![SimTensor::f32(shape, out)])
}

/// `f(x)` elementwise.
pub(super) fn unary(call: &Call<'_>, f: impl Fn(f32) -> f32) -> Outs {
    let (t, x) = call.f32(0)?;
    let reg = region(call.tiling(), &t.shape, Axes::Any, 0)?;
    let mut out = vec![0.0f32; x.len()];
    for seg in reg.segments(&t.shape) {
        map(&mut out[seg.clone()], &x[seg], &f);
    }
    Ok(vec![SimTensor::f32(t.shape.clone(), out)])
}

/// `out[i] = f(x[i])`, compiled for AVX2 as well and chosen at run time: the same operations
/// on each value (Rust does not fuse a multiply and an add, so no result changes), eight
/// lanes a vector where the portable build has four — GELU's `tanh` over a decode step's
/// 2048 features ran at ~6 ns a value.
pub(super) fn map(out: &mut [f32], x: &[f32], f: &impl Fn(f32) -> f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked above.
        return unsafe { map_avx2(out, x, f) };
    }
    map_plain(out, x, f)
}

#[inline(always)]
fn map_plain(out: &mut [f32], x: &[f32], f: &impl Fn(f32) -> f32) {
    for (o, v) in out.iter_mut().zip(x) {
        *o = f(*v);
    }
}

/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_avx2(out: &mut [f32], x: &[f32], f: &impl Fn(f32) -> f32) {
    map_plain(out, x, f)
}

#[inline]
pub(super) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + mathf::exp(-x))
}

/// `ln(1 + eˣ)`, and `x` itself above 20 (torch's threshold).
pub(super) fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

#[inline]
pub(super) fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + mathf::tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
}

/// numpy's broadcast of two shapes.
pub(super) fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, SimError> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return invalid(format!("shapes {a:?} and {b:?} do not broadcast")),
        };
    }
    Ok(out)
}

/// Strides of `shape` as seen from the broadcast `out` shape (0 along stretched axes).
fn bcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(shape);
    let lead = out.len() - shape.len();
    (0..out.len()).map(|i| if i < lead || shape[i - lead] == 1 { 0 } else { own[i - lead] }).collect()
}

fn offset(mut flat: usize, out_strides: &[usize], in_strides: &[usize]) -> usize {
    let mut off = 0;
    for (os, is) in out_strides.iter().zip(in_strides) {
        let idx = flat / os;
        flat %= os;
        off += idx * is;
    }
    off
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 build of the elementwise loop gives the portable build's bits, for GELU and
    /// SiLU over inputs from −12 to 12 (both branches of `tanh`, `exp`'s clamps unreached and
    /// reached) and a length that is not a multiple of any vector.
    #[test]
    fn the_avx2_loop_is_the_portable_loop_bit_for_bit() {
        let x: Vec<f32> = (0..4099).map(|i| (i as f32 - 2049.0) / 170.0).chain([-100.0, 100.0, 0.0, -0.0]).collect();
        // Each function its own instance of both loops, as `unary` compiles them.
        fn agree(name: &str, x: &[f32], f: impl Fn(f32) -> f32) {
            let (mut plain, mut fast) = (vec![0.0f32; x.len()], vec![0.0f32; x.len()]);
            map_plain(&mut plain, x, &f);
            map(&mut fast, x, &f);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast), bits(&plain), "{name}");
        }
        agree("gelu", &x, gelu_tanh);
        agree("silu", &x, |v| v * sigmoid(v));
        // Attention's softmax: shifted scores, down to far below exp's clamp.
        let shifted: Vec<f32> = x.iter().map(|v| v - 60.0).chain([-200.0, -1e30, f32::NEG_INFINITY]).collect();
        agree("exp", &shifted, mathf::exp);
    }
}
