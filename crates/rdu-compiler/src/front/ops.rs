//! The op table of the language: every op name, and each op with placeholder attributes
//! (its arity and number of outputs are known before its attributes are read).

use crate::graph::{Act, KMap, Op, RopeStyle};

/// Every op of the language, by name.
pub const OPS: &[&str] = &[
    "add",
    "sub",
    "mul",
    "scale",
    "neg",
    "exp",
    "sigmoid",
    "silu",
    "softplus",
    "gelu_tanh",
    "rms_norm",
    "l2_norm",
    "linear",
    "linear_heads",
    "embed",
    "argmax",
    "reshape",
    "slice",
    "concat",
    "transpose",
    "rope",
    "cache_put",
    "attend",
    "attend_mla",
    "conv_step",
    "conv_shift",
    "delta_scan",
    "delta_step",
    "route",
    "experts",
    "all_reduce",
];

/// The op named `name` with placeholder attributes (for its arity and outputs), if it exists.
pub(super) fn prototype(name: &str) -> Option<Op> {
    let (f, n) = (0.0, 0);
    Some(match name {
        "add" => Op::Add,
        "sub" => Op::Sub,
        "mul" => Op::Mul,
        "scale" => Op::Scale { by: f },
        "neg" => Op::Neg,
        "exp" => Op::Exp,
        "sigmoid" => Op::Sigmoid,
        "silu" => Op::Silu,
        "softplus" => Op::Softplus,
        "gelu_tanh" => Op::GeluTanh,
        "rms_norm" => Op::RmsNorm { eps: f, offset: f },
        "l2_norm" => Op::L2Norm { eps: f },
        "linear" => Op::Linear,
        "linear_heads" => Op::LinearHeads,
        "embed" => Op::Embed,
        "argmax" => Op::Argmax,
        "reshape" => Op::Reshape { shape: Vec::new() },
        "slice" => Op::Slice { axis: n, start: n, len: n },
        "concat" => Op::Concat { axis: n },
        "transpose" => Op::Transpose { perm: Vec::new() },
        "rope" => Op::Rope { dim: n, style: RopeStyle::Neox },
        "cache_put" => Op::CachePut,
        "attend" => Op::Attend { scale: f, window: None },
        "attend_mla" => Op::AttendMla { scale: f, latent: n, window: None },
        "conv_step" => Op::ConvStep,
        "conv_shift" => Op::ConvShift,
        "delta_scan" => Op::DeltaScan { kmap: KMap::Grouped },
        "delta_step" => Op::DeltaStep { kmap: KMap::Grouped },
        "route" => Op::Route { k: n, norm: false, scale: f, groups: n, topk_groups: n },
        "experts" => Op::Experts { act: Act::Silu },
        "all_reduce" => Op::AllReduce,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::{prototype, OPS};

    #[test]
    fn every_op_name_has_a_prototype_of_that_name() {
        for name in OPS {
            assert_eq!(prototype(name).map(|op| op.name()), Some(*name));
        }
        assert!(prototype("matmul").is_none());
    }
}
