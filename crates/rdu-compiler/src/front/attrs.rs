//! From a statement's op, attributes and literal arguments to a typed [`Op`]: which of its
//! attributes (the op table's keys) are required and what values they accept. Operand names
//! and types are not looked at here.

use crate::graph::{Act, GroupScore, KMap, Op, RopeStyle, Score};
use crate::lang::ast::{Arg, Attr, Literal, Span, Stmt};
use rdu_spatial::Op as Kind;

/// A problem with an attribute (or `reshape`'s shape literal): where, and why.
pub(super) struct AttrFault {
    pub span: Span,
    pub message: String,
}

/// Reads a statement's attributes (the keys its op takes in the op table) and every fault.
struct Attrs<'s> {
    stmt: &'s Stmt,
    kind: Kind,
    faults: Vec<AttrFault>,
}

impl<'s> Attrs<'s> {
    fn fault(&mut self, span: Span, message: String) {
        self.faults.push(AttrFault { span, message });
    }

    /// The attribute `key`, if given; a missing required one is a fault at the op name.
    fn get(&mut self, key: &'static str, required: bool) -> Option<&'s Attr> {
        debug_assert!(self.kind.attrs().contains(&key), "`{key}` is not in the table's row of `{}`", self.kind);
        let found = self.stmt.attrs.iter().find(|a| a.key.text == key);
        if found.is_none() && required {
            let message = format!("`{}` needs the attribute `{key}=...`", self.stmt.op.text);
            self.fault(self.stmt.op.span, message);
        }
        found
    }

    /// Converts a present attribute with `read`, or records a fault describing `want`.
    fn read<T>(
        &mut self,
        key: &'static str,
        required: bool,
        want: &str,
        read: impl Fn(&Literal) -> Option<T>,
    ) -> Option<Option<T>> {
        let Some(attr) = self.get(key, required) else {
            return if required { None } else { Some(None) };
        };
        match read(&attr.value) {
            Some(v) => Some(Some(v)),
            None => {
                self.fault(attr.span, format!("attribute `{key}` must be {want}, found {}", show(&attr.value)));
                None
            }
        }
    }

    fn float(&mut self, key: &'static str) -> Option<f64> {
        self.read(key, true, "a finite number", |l| l.as_f64().filter(|v| v.is_finite())).flatten()
    }

    fn eps(&mut self, key: &'static str) -> Option<f64> {
        self.read(key, true, "a non-negative number", |l| l.as_f64().filter(|v| v.is_finite() && *v >= 0.0)).flatten()
    }

    fn count(&mut self, key: &'static str) -> Option<usize> {
        self.read(key, true, "a non-negative integer", |l| l.as_i64().and_then(|v| usize::try_from(v).ok())).flatten()
    }

    fn positive(&mut self, key: &'static str, required: bool) -> Option<Option<usize>> {
        let want = "a positive integer";
        self.read(key, required, want, |l| l.as_i64().and_then(|v| usize::try_from(v).ok()).filter(|&v| v > 0))
    }

    /// `0` or `1` (as an int, or a float equal to one of them).
    fn flag(&mut self, key: &'static str) -> Option<bool> {
        let read = |l: &Literal| match l.as_f64() {
            Some(0.0) => Some(false),
            Some(1.0) => Some(true),
            _ => None,
        };
        self.read(key, true, "0 or 1", read).flatten()
    }

    fn word<T: Copy>(&mut self, key: &'static str, required: bool, choices: &[(&str, T)]) -> Option<Option<T>> {
        let want: Vec<&str> = choices.iter().map(|(w, _)| *w).collect();
        let want = want.join(" or ");
        self.read(key, required, &want, |l| {
            l.as_word().and_then(|w| choices.iter().find(|(c, _)| *c == w).map(|(_, v)| *v))
        })
    }

    /// Faults for every attribute the op does not take (and repeated keys).
    fn finish(mut self) -> Vec<AttrFault> {
        let takes = self.kind.attrs();
        for (i, a) in self.stmt.attrs.iter().enumerate() {
            let key = a.key.text.as_str();
            if !takes.contains(&key) {
                let takes = if takes.is_empty() { "no attributes".to_string() } else { takes.join(", ") };
                self.fault(a.span, format!("`{}` has no attribute `{key}`; it takes {takes}", self.stmt.op.text));
            } else if self.stmt.attrs[..i].iter().any(|b| b.key.text == key) {
                self.fault(a.span, format!("attribute `{key}` is given twice; keep one"));
            }
        }
        self.faults
    }
}

/// A literal as written, for messages.
fn show(l: &Literal) -> String {
    match l {
        Literal::Int(v) => v.to_string(),
        Literal::Float(v) => format!("{v:?}"),
        Literal::Word(w) => w.clone(),
        Literal::List(items) => format!("[{}]", items.iter().map(show).collect::<Vec<_>>().join(", ")),
    }
}

/// The op of `stmt` (of kind `kind`, its op name's) with its attributes, or every attribute
/// fault. The caller has checked that `reshape` has its shape literal (its second positional
/// argument).
pub(super) fn op_of(stmt: &Stmt, kind: Kind) -> Result<Op, Vec<AttrFault>> {
    let mut a = Attrs { stmt, kind, faults: Vec::new() };
    let op = build(stmt, kind, &mut a);
    let faults = a.finish();
    match op {
        Some(op) if faults.is_empty() => Ok(op),
        _ => Err(faults),
    }
}

fn build(stmt: &Stmt, kind: Kind, a: &mut Attrs<'_>) -> Option<Op> {
    let styles = [("neox", RopeStyle::Neox), ("interleaved", RopeStyle::Interleaved)];
    let acts = [Act::Silu, Act::GeluTanh].map(|act| (act.word(), act));
    let kmaps = [("grouped", KMap::Grouped), ("tiled", KMap::Tiled)];
    Some(match kind {
        Kind::Add => Op::Add,
        Kind::Sub => Op::Sub,
        Kind::Mul => Op::Mul,
        Kind::Scale => Op::Scale { by: a.float("by")? },
        Kind::Neg => Op::Neg,
        Kind::AllReduce => Op::AllReduce,
        Kind::Exp => Op::Exp,
        Kind::Sigmoid => Op::Sigmoid,
        Kind::Silu => Op::Silu,
        Kind::Softplus => Op::Softplus,
        Kind::GeluTanh => Op::GeluTanh,
        Kind::RmsNorm => {
            let (eps, offset) = (a.eps("eps"), a.flag("offset"));
            Op::RmsNorm { eps: eps?, offset: f64::from(u8::from(offset?)) }
        }
        Kind::L2Norm => Op::L2Norm { eps: a.eps("eps")? },
        Kind::Linear => Op::Linear,
        Kind::LinearHeads => Op::LinearHeads,
        Kind::Embed => Op::Embed,
        Kind::Argmax => Op::Argmax,
        Kind::Reshape => Op::Reshape { shape: reshape_shape(stmt, a)? },
        Kind::Slice => {
            let (axis, start, len) = (a.count("axis"), a.count("start"), a.count("len"));
            Op::Slice { axis: axis?, start: start?, len: len? }
        }
        Kind::Shard => {
            let (axis, chips) = (a.count("axis"), a.positive("chips", true).flatten());
            Op::Shard { axis: axis?, chips: chips? }
        }
        Kind::Concat => Op::Concat { axis: a.count("axis")? },
        Kind::Transpose => {
            let perm = a.read("perm", true, "a list of axes", Literal::as_usize_list).flatten();
            Op::Transpose { perm: perm? }
        }
        Kind::Rope => {
            let dim = a.read("dim", true, "a positive even integer", |l| {
                l.as_i64().and_then(|v| usize::try_from(v).ok()).filter(|&v| v > 0 && v % 2 == 0)
            });
            let style = a.word("style", true, &styles);
            Op::Rope { dim: dim.flatten()?, style: style.flatten()? }
        }
        Kind::CachePut => Op::CachePut,
        Kind::Attend => {
            let (scale, window) = (a.float("scale"), a.positive("window", false));
            Op::Attend { scale: scale?, window: window? }
        }
        Kind::AttendMla => {
            let (scale, latent, window) = (a.float("scale"), a.positive("latent", true), a.positive("window", false));
            Op::AttendMla { scale: scale?, latent: latent.flatten()?, window: window? }
        }
        Kind::AttendMlaUp => {
            let (scale, latent, window) = (a.float("scale"), a.positive("latent", true), a.positive("window", false));
            Op::AttendMlaUp { scale: scale?, latent: latent.flatten()?, window: window? }
        }
        Kind::ConvStep => Op::ConvStep,
        Kind::ConvShift => Op::ConvShift,
        Kind::DeltaScan => Op::DeltaScan { kmap: a.word("kmap", false, &kmaps)?.unwrap_or(KMap::Grouped) },
        Kind::DeltaStep => Op::DeltaStep { kmap: a.word("kmap", false, &kmaps)?.unwrap_or(KMap::Grouped) },
        Kind::Route => {
            let k = a.positive("k", true);
            let norm = a.flag("norm");
            let scale = a.float("scale");
            let (groups, topk_groups) = (a.positive("groups", true), a.positive("topk_groups", true));
            let scores = [("softmax", Score::Softmax), ("sigmoid", Score::Sigmoid)];
            let score = a.word("score", false, &scores);
            let group_score = a.word("group_score", false, &[("max", GroupScore::Max), ("top2", GroupScore::Top2)]);
            Op::Route {
                k: k.flatten()?,
                norm: norm?,
                scale: scale?,
                groups: groups.flatten()?,
                topk_groups: topk_groups.flatten()?,
                score: score?.unwrap_or(Score::Softmax),
                group_score: group_score?.unwrap_or(GroupScore::Max),
            }
        }
        Kind::Experts => Op::Experts { act: a.word("act", true, &acts).flatten()? },
        Kind::Dequant => return None,
    })
}

/// `reshape(x, [d0, d1, ...])`: the list literal in second position (the caller reports a
/// missing one as an arity fault).
fn reshape_shape(stmt: &Stmt, a: &mut Attrs<'_>) -> Option<Vec<usize>> {
    match stmt.args.get(1)? {
        Arg::Lit(lit, span) => {
            let shape = lit.as_usize_list();
            if shape.is_none() {
                a.fault(
                    *span,
                    format!("the shape of `reshape` must be a list of non-negative integers, found {}", show(lit)),
                );
            }
            shape
        }
        Arg::Name(_) => None,
    }
}
