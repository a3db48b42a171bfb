//! `Op`: one variant per op of `docs/LANGUAGE.md`, with its attributes typed inside the
//! variant. Operands are the node's input values, in the order the language lists them.

use std::fmt;

/// Which pairs of a head's first `dim` values RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeStyle {
    /// Pairs `(j, j + dim/2)` ("rotate_half": HF Llama, Qwen, Gemma).
    Neox,
    /// Pairs `(2j, 2j + 1)` (llama.cpp NORM, DeepSeek-V2).
    Interleaved,
}

/// The activation of a gated expert MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Act {
    Silu,
    GeluTanh,
}

/// Which key head a value head of the delta rule reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KMap {
    /// Value head `h` uses key head `h / (hv/hk)` (`repeat_interleave`).
    Grouped,
    /// Value head `h` uses key head `h mod hk` (`repeat`).
    Tiled,
}

impl RopeStyle {
    pub fn word(self) -> &'static str {
        match self {
            RopeStyle::Neox => "neox",
            RopeStyle::Interleaved => "interleaved",
        }
    }
}

impl Act {
    pub fn word(self) -> &'static str {
        match self {
            Act::Silu => "silu",
            Act::GeluTanh => "gelu_tanh",
        }
    }
}

impl KMap {
    pub fn word(self) -> &'static str {
        match self {
            KMap::Grouped => "grouped",
            KMap::Tiled => "tiled",
        }
    }
}

/// An operation of the language. Optional operands (`linear`'s bias, `conv_step`'s state)
/// are present when the node has the extra input.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Scale {
        by: f64,
    },
    Neg,
    Exp,
    Sigmoid,
    Silu,
    Softplus,
    GeluTanh,
    /// `x / √(mean(x²) + eps) · (w + offset)` over the last axis.
    RmsNorm {
        eps: f64,
        offset: f64,
    },
    /// `x / √(Σx² + eps)` over the last axis.
    L2Norm {
        eps: f64,
    },
    /// `x Wᵀ (+ b)`; inputs `x, W` or `x, W, b`.
    Linear,
    LinearHeads,
    Embed,
    Argmax,
    Reshape {
        shape: Vec<usize>,
    },
    Slice {
        axis: usize,
        start: usize,
        len: usize,
    },
    Concat {
        axis: usize,
    },
    Transpose {
        perm: Vec<usize>,
    },
    Rope {
        dim: usize,
        style: RopeStyle,
    },
    CachePut,
    Attend {
        scale: f64,
        window: Option<usize>,
    },
    AttendMla {
        scale: f64,
        latent: usize,
        window: Option<usize>,
    },
    /// Inputs `x, w` or `x, w, state`.
    ConvStep,
    ConvShift,
    DeltaScan {
        kmap: KMap,
    },
    /// Inputs `S, q, k, v, g, beta`; outputs `o, S'`.
    DeltaStep {
        kmap: KMap,
    },
    /// Outputs `w, idx`.
    Route {
        k: usize,
        norm: bool,
        scale: f64,
        groups: usize,
        topk_groups: usize,
    },
    Experts {
        act: Act,
    },
    /// The sum of the operand over the chips of a tensor-parallel program (identity on one chip).
    AllReduce,
}

impl Op {
    /// The op's name in program text.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Sub => "sub",
            Op::Mul => "mul",
            Op::Scale { .. } => "scale",
            Op::Neg => "neg",
            Op::Exp => "exp",
            Op::Sigmoid => "sigmoid",
            Op::Silu => "silu",
            Op::Softplus => "softplus",
            Op::GeluTanh => "gelu_tanh",
            Op::RmsNorm { .. } => "rms_norm",
            Op::L2Norm { .. } => "l2_norm",
            Op::Linear => "linear",
            Op::LinearHeads => "linear_heads",
            Op::Embed => "embed",
            Op::Argmax => "argmax",
            Op::Reshape { .. } => "reshape",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Transpose { .. } => "transpose",
            Op::Rope { .. } => "rope",
            Op::CachePut => "cache_put",
            Op::Attend { .. } => "attend",
            Op::AttendMla { .. } => "attend_mla",
            Op::ConvStep => "conv_step",
            Op::ConvShift => "conv_shift",
            Op::DeltaScan { .. } => "delta_scan",
            Op::DeltaStep { .. } => "delta_step",
            Op::Route { .. } => "route",
            Op::Experts { .. } => "experts",
            Op::AllReduce => "all_reduce",
        }
    }

    /// The least and the most tensor operands the op takes (`concat` takes at least two).
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Op::Add | Op::Sub | Op::Mul => (2, 2),
            Op::Scale { .. }
            | Op::Neg
            | Op::Exp
            | Op::Sigmoid
            | Op::Silu
            | Op::Softplus
            | Op::GeluTanh
            | Op::L2Norm { .. }
            | Op::Argmax
            | Op::Reshape { .. }
            | Op::Slice { .. }
            | Op::Transpose { .. }
            | Op::Route { .. }
            | Op::AllReduce => (1, 1),
            Op::RmsNorm { .. } | Op::LinearHeads | Op::Embed | Op::ConvShift => (2, 2),
            Op::Linear | Op::ConvStep => (2, 3),
            Op::Concat { .. } => (2, usize::MAX),
            Op::Rope { .. } => (4, 4),
            // A prefill chunk passes its own keys and values after `pos` (see docs/LANGUAGE.md).
            Op::Attend { .. } => (4, 6),
            Op::AttendMla { .. } => (3, 4),
            Op::CachePut => (3, 3),
            Op::DeltaScan { .. } => (5, 5),
            Op::DeltaStep { .. } | Op::Experts { .. } => (6, 6),
        }
    }

    /// How many values the op produces.
    pub fn n_outputs(&self) -> usize {
        match self {
            Op::DeltaStep { .. } | Op::Route { .. } => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Op {
    /// The name and the attributes as program text: `rope dim=16 style=neox`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            Op::Scale { by } => write!(f, " by={by:?}"),
            Op::RmsNorm { eps, offset } => write!(f, " eps={eps:?} offset={offset:?}"),
            Op::L2Norm { eps } => write!(f, " eps={eps:?}"),
            Op::Reshape { shape } => write!(f, " shape={shape:?}"),
            Op::Slice { axis, start, len } => write!(f, " axis={axis} start={start} len={len}"),
            Op::Concat { axis } => write!(f, " axis={axis}"),
            Op::Transpose { perm } => write!(f, " perm={perm:?}"),
            Op::Rope { dim, style } => write!(f, " dim={dim} style={}", style.word()),
            Op::Attend { scale, window } => {
                write!(f, " scale={scale:?}")?;
                window.map_or(Ok(()), |w| write!(f, " window={w}"))
            }
            Op::AttendMla { scale, latent, window } => {
                write!(f, " scale={scale:?} latent={latent}")?;
                window.map_or(Ok(()), |w| write!(f, " window={w}"))
            }
            Op::DeltaScan { kmap } | Op::DeltaStep { kmap } => write!(f, " kmap={}", kmap.word()),
            Op::Route { k, norm, scale, groups, topk_groups } => {
                write!(f, " k={k} norm={} scale={scale:?} groups={groups} topk_groups={topk_groups}", u8::from(*norm))
            }
            Op::Experts { act } => write!(f, " act={}", act.word()),
            _ => Ok(()),
        }
    }
}
