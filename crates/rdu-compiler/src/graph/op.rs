//! `Op`: one variant per op of `docs/LANGUAGE.md`, with its attributes typed inside the
//! variant. Operands are the node's input values, in the order the language lists them. The
//! facts shared with lowering and the simulator (name, operands, outputs, …) are the op
//! table's, `rdu_spatial::op`, reached through [`Op::kind`].

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

/// How `route` scores each expert.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Score {
    /// `softmax` over the row's experts (DeepSeek-V2, Qwen).
    Softmax,
    /// `sigmoid` of each expert's logit (DeepSeek-V3, GLM-4.5, MiniMax-M2).
    Sigmoid,
}

/// How `route` scores a group of experts from its experts' (biased) scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupScore {
    /// The largest (DeepSeek-V2's `group_limited_greedy`).
    Max,
    /// The sum of the two largest (DeepSeek-V3's `noaux_tc`).
    Top2,
}

impl Score {
    pub fn word(self) -> &'static str {
        match self {
            Score::Softmax => "softmax",
            Score::Sigmoid => "sigmoid",
        }
    }
}

impl GroupScore {
    pub fn word(self) -> &'static str {
        match self {
            GroupScore::Max => "max",
            GroupScore::Top2 => "top2",
        }
    }
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
            // The activation's word is the name of its op.
            Act::Silu => rdu_spatial::Op::Silu.name(),
            Act::GeluTanh => rdu_spatial::Op::GeluTanh.name(),
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
    /// Inputs `q, C, Wk, Wv, pos` (and a prefill chunk's own latents `c`).
    AttendMlaUp {
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
    /// Inputs `logits` or `logits, bias` (the bias only chooses); outputs `w, idx`.
    Route {
        k: usize,
        norm: bool,
        scale: f64,
        groups: usize,
        topk_groups: usize,
        score: Score,
        group_score: GroupScore,
    },
    Experts {
        act: Act,
    },
    /// The sum of the operand over the chips of a tensor-parallel program (identity on one chip).
    AllReduce,
    /// This chip's part of a value every chip holds: of `chips` equal parts of `axis`, chip `c`
    /// takes the `c`-th.
    Shard {
        axis: usize,
        chips: usize,
    },
}

impl Op {
    /// The op's row of the op table (`rdu_spatial::op`): its name, operands, outputs, ….
    pub fn kind(&self) -> rdu_spatial::Op {
        use rdu_spatial::Op as K;
        match self {
            Op::Add => K::Add,
            Op::Sub => K::Sub,
            Op::Mul => K::Mul,
            Op::Scale { .. } => K::Scale,
            Op::Neg => K::Neg,
            Op::Exp => K::Exp,
            Op::Sigmoid => K::Sigmoid,
            Op::Silu => K::Silu,
            Op::Softplus => K::Softplus,
            Op::GeluTanh => K::GeluTanh,
            Op::RmsNorm { .. } => K::RmsNorm,
            Op::L2Norm { .. } => K::L2Norm,
            Op::Linear => K::Linear,
            Op::LinearHeads => K::LinearHeads,
            Op::Embed => K::Embed,
            Op::Argmax => K::Argmax,
            Op::Reshape { .. } => K::Reshape,
            Op::Slice { .. } => K::Slice,
            Op::Concat { .. } => K::Concat,
            Op::Transpose { .. } => K::Transpose,
            Op::Rope { .. } => K::Rope,
            Op::CachePut => K::CachePut,
            Op::Attend { .. } => K::Attend,
            Op::AttendMla { .. } => K::AttendMla,
            Op::AttendMlaUp { .. } => K::AttendMlaUp,
            Op::ConvStep => K::ConvStep,
            Op::ConvShift => K::ConvShift,
            Op::DeltaScan { .. } => K::DeltaScan,
            Op::DeltaStep { .. } => K::DeltaStep,
            Op::Route { .. } => K::Route,
            Op::Experts { .. } => K::Experts,
            Op::AllReduce => K::AllReduce,
            Op::Shard { .. } => K::Shard,
        }
    }

    /// The op's name in program text.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The least and the most tensor operands the op takes (`concat` takes at least two).
    pub fn arity(&self) -> (usize, usize) {
        self.kind().arity()
    }

    /// How many values the op produces.
    pub fn n_outputs(&self) -> usize {
        self.kind().n_outputs()
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
            Op::Shard { axis, chips } => write!(f, " axis={axis} chips={chips}"),
            Op::Concat { axis } => write!(f, " axis={axis}"),
            Op::Transpose { perm } => write!(f, " perm={perm:?}"),
            Op::Rope { dim, style } => write!(f, " dim={dim} style={}", style.word()),
            Op::Attend { scale, window } => {
                write!(f, " scale={scale:?}")?;
                window.map_or(Ok(()), |w| write!(f, " window={w}"))
            }
            Op::AttendMla { scale, latent, window } | Op::AttendMlaUp { scale, latent, window } => {
                write!(f, " scale={scale:?} latent={latent}")?;
                window.map_or(Ok(()), |w| write!(f, " window={w}"))
            }
            Op::DeltaScan { kmap } | Op::DeltaStep { kmap } => write!(f, " kmap={}", kmap.word()),
            Op::Route { k, norm, scale, groups, topk_groups, score, group_score } => {
                write!(f, " k={k} norm={} scale={scale:?} groups={groups} topk_groups={topk_groups}", u8::from(*norm))?;
                // The defaults (DeepSeek-V2's and Qwen's routing) are not written.
                if *score != Score::Softmax {
                    write!(f, " score={}", score.word())?;
                }
                if *group_score != GroupScore::Max {
                    write!(f, " group_score={}", group_score.word())?;
                }
                Ok(())
            }
            Op::Experts { act } => write!(f, " act={}", act.word()),
            _ => Ok(()),
        }
    }
}
