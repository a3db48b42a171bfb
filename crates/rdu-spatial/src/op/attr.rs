//! Attribute keys and values: [`Key`], every key any op takes (spelled here once, as the
//! name of the op table fields that hold it), and the
//! value kinds an attribute holds ([`AttrValue`]: how a literal reads as one, what a wrong
//! literal is told it must be, how a value is written back). The op table
//! ([`super::op_table`]) gives each op's attributes as typed fields of these kinds; reading
//! and writing them is generated from it, for the language and for spatial programs alike.

use super::Op;
use std::fmt;

macro_rules! keys {
    ($($variant:ident = $key:ident),* $(,)?) => {
        /// An attribute key.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Key {
            $($variant,)*
        }

        impl Key {
            /// Every key.
            pub const ALL: &'static [Key] = &[$(Key::$variant),*];

            /// The key as written in program text.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Key::$variant => stringify!($key),)*
                }
            }
        }

        /// Each key by its name as written, for the op table, whose attribute fields are named
        /// as their keys.
        #[allow(non_upper_case_globals)]
        pub(super) mod key {
            use super::Key;
            $(pub const $key: Key = Key::$variant;)*
        }
    };
}

keys! {
    By = by,
    Eps = eps,
    Offset = offset,
    Shape = shape,
    Axis = axis,
    Start = start,
    Len = len,
    Perm = perm,
    Dim = dim,
    Style = style,
    Scale = scale,
    Window = window,
    Latent = latent,
    KMap = kmap,
    K = k,
    Norm = norm,
    Groups = groups,
    TopkGroups = topk_groups,
    Score = score,
    GroupScore = group_score,
    Act = act,
    Limit = limit,
    Chips = chips,
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Key {
    /// The key spelled `name`, if any.
    pub fn named(name: &str) -> Option<Key> {
        Key::ALL.iter().copied().find(|k| k.name() == name)
    }
}

/// A literal as a front end holds it: the program language's or a spatial program's.
pub trait AttrLit {
    /// An integer literal (a float is not one, whatever its value).
    fn int(&self) -> Option<i64>;
    /// A number: a float, or an integer converted.
    fn float(&self) -> Option<f64>;
    fn word(&self) -> Option<&str>;
    /// A list of non-negative integers.
    fn counts(&self) -> Option<Vec<usize>>;
}

/// A kind of attribute value: how a literal reads as one and how one is written.
pub trait AttrValue {
    type Value: Clone + fmt::Debug + PartialEq;
    /// What a literal must be to read as one ("a positive integer"), for messages.
    fn want() -> String;
    fn read<L: AttrLit + ?Sized>(lit: &L) -> Option<Self::Value>;
    /// The value as program text, which reads back as the same value.
    fn text(value: &Self::Value) -> String;
    /// The value as a typed op shows it (`Display`; the program text by default).
    fn show(value: &Self::Value) -> String {
        Self::text(value)
    }
}

fn count<L: AttrLit + ?Sized>(lit: &L) -> Option<usize> {
    lit.int().and_then(|v| usize::try_from(v).ok())
}

macro_rules! value_kind {
    ($(#[doc = $doc:literal])* $kind:ident: $value:ty, $want:literal, |$l:ident| $read:expr, |$v:ident| $text:expr) => {
        $(#[doc = $doc])*
        pub struct $kind;

        impl AttrValue for $kind {
            type Value = $value;
            fn want() -> String {
                $want.to_string()
            }
            fn read<L: AttrLit + ?Sized>($l: &L) -> Option<$value> {
                $read
            }
            fn text($v: &$value) -> String {
                $text
            }
        }
    };
}

value_kind!(
    /// A finite number.
    Float: f64, "a finite number", |l| l.float().filter(|v| v.is_finite()), |v| format!("{v:?}")
);
value_kind!(
    /// A finite number `>= 0` (an epsilon).
    NonNegative: f64,
    "a non-negative number",
    |l| l.float().filter(|v| v.is_finite() && *v >= 0.0),
    |v| format!("{v:?}")
);
value_kind!(
    /// An integer `>= 0` (an axis, an offset, a length).
    Count: usize, "a non-negative integer", |l| count(l), |v| v.to_string()
);
value_kind!(
    /// An integer `>= 1`.
    Positive: usize, "a positive integer", |l| count(l).filter(|&v| v > 0), |v| v.to_string()
);
value_kind!(
    /// A positive even integer (RoPE's rotated dims).
    EvenPositive: usize,
    "a positive even integer",
    |l| count(l).filter(|&v| v > 0 && v % 2 == 0),
    |v| v.to_string()
);
value_kind!(
    /// `0` or `1` (an integer, or a float equal to one of them).
    Flag: bool,
    "0 or 1",
    |l| match l.float() {
        Some(0.0) => Some(false),
        Some(1.0) => Some(true),
        _ => None,
    },
    |v| u8::from(*v).to_string()
);
/// `rms_norm`'s `offset`: `0` or `1` as written, the number added to the weight as held
/// (and shown: `offset=1.0`).
pub struct UnitOffset;

impl AttrValue for UnitOffset {
    type Value = f64;
    fn want() -> String {
        Flag::want()
    }
    fn read<L: AttrLit + ?Sized>(lit: &L) -> Option<f64> {
        Flag::read(lit).map(|on| f64::from(u8::from(on)))
    }
    fn text(value: &f64) -> String {
        u8::from(*value != 0.0).to_string()
    }
    fn show(value: &f64) -> String {
        format!("{value:?}")
    }
}

value_kind!(
    /// A list of axes (a permutation).
    Axes: Vec<usize>, "a list of axes", |l| l.counts(), |v| counts_text(v)
);
value_kind!(
    /// A list of non-negative integers (a shape).
    Dims: Vec<usize>, "a list of non-negative integers", |l| l.counts(), |v| counts_text(v)
);

/// `[1, 4, 16]`.
fn counts_text(items: &[usize]) -> String {
    let items: Vec<String> = items.iter().map(usize::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// An attribute whose value is one of a few words.
macro_rules! word_kind {
    ($(#[doc = $doc:literal])* $kind:ident { $($(#[doc = $vdoc:literal])* $variant:ident = $word:expr),+ $(,)? }) => {
        $(#[doc = $doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $kind {
            $($(#[doc = $vdoc])* $variant,)+
        }

        impl $kind {
            /// Every value.
            pub const ALL: &'static [$kind] = &[$($kind::$variant),+];

            /// The value as written.
            pub fn word(self) -> &'static str {
                match self {
                    $($kind::$variant => $word,)+
                }
            }
        }

        impl AttrValue for $kind {
            type Value = $kind;
            fn want() -> String {
                $kind::ALL.iter().map(|v| v.word()).collect::<Vec<_>>().join(" or ")
            }
            fn read<L: AttrLit + ?Sized>(lit: &L) -> Option<$kind> {
                let word = lit.word()?;
                $kind::ALL.iter().copied().find(|v| v.word() == word)
            }
            fn text(value: &$kind) -> String {
                value.word().to_string()
            }
        }
    };
}

word_kind!(
    /// Which pairs of a head's first `dim` values RoPE rotates together.
    RopeStyle {
        /// Pairs `(j, j + dim/2)` ("rotate_half": HF Llama, Qwen, Gemma).
        Neox = "neox",
        /// Pairs `(2j, 2j + 1)` (llama.cpp NORM, DeepSeek-V2).
        Interleaved = "interleaved",
    }
);
word_kind!(
    /// Which key head a value head of the delta rule reads.
    KMap {
        /// Value head `h` uses key head `h / (hv/hk)` (`repeat_interleave`).
        Grouped = "grouped",
        /// Value head `h` uses key head `h mod hk` (`repeat`).
        Tiled = "tiled",
    }
);
word_kind!(
    /// How `route` scores each expert.
    Score {
        /// `softmax` over the row's experts (DeepSeek-V2, Qwen).
        Softmax = "softmax",
        /// `sigmoid` of each expert's logit (DeepSeek-V3, GLM-4.5, MiniMax-M2).
        Sigmoid = "sigmoid",
    }
);
word_kind!(
    /// How `route` scores a group of experts from its experts' (biased) scores.
    GroupScore {
        /// The largest (DeepSeek-V2's `group_limited_greedy`).
        Max = "max",
        /// The sum of the two largest (DeepSeek-V3's `noaux_tc`).
        Top2 = "top2",
    }
);
word_kind!(
    /// The activation of a gated expert MLP: its word is the name of its op, or gpt-oss's
    /// clamped SwiGLU (`limit=L`): `(clamp(u, −L, L) + 1) · g′ σ(1.702 g′)` with `g′ = min(g, L)`.
    Act {
        Silu = Op::Silu.name(),
        GeluTanh = Op::GeluTanh.name(),
        SwigluOai = "swiglu_oai",
    }
);

/// What is wrong with an op's attributes (or its positional literal, `reshape`'s shape).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttrFault {
    /// A required attribute is not given.
    Missing(Key),
    /// The attribute at `at` (among those given, in order) has a value the op does not take.
    Bad { at: usize, key: Key, want: String },
    /// The attribute at `at` is not one the op takes.
    Unknown { at: usize },
    /// The attribute at `at` repeats an earlier one.
    Twice { at: usize, key: Key },
    /// The positional literal is not what the op takes.
    BadLiteral { key: Key, want: String },
    /// The op takes a positional literal and none is given.
    MissingLiteral(Key),
}

impl AttrFault {
    /// The fault as a spatial program's simulator says it (attributes by key, not place).
    /// `keys`: the keys given, in order.
    pub fn spatial_message(&self, keys: &[&str]) -> String {
        let key_at = |at: usize| keys.get(at).copied().unwrap_or("?");
        match self {
            AttrFault::Missing(key) => format!("missing attribute `{key}`"),
            AttrFault::Bad { key, want, .. } => format!("attribute `{key}` must be {want}"),
            AttrFault::Unknown { at } => format!("unknown attribute `{}`", key_at(*at)),
            AttrFault::Twice { key, .. } => format!("attribute `{key}` is given twice"),
            AttrFault::BadLiteral { key, want } => format!("the {key} must be {want}"),
            AttrFault::MissingLiteral(key) => format!("the {key} must be a literal argument"),
        }
    }
}

/// The attributes given to one op (key as written, value) in order, and its positional
/// literal if it has one: what the generated readers read.
pub struct Given<'a, L: ?Sized> {
    pub attrs: Vec<(&'a str, &'a L)>,
    pub literal: Option<&'a L>,
}

impl<'a, L: AttrLit + ?Sized> Given<'a, L> {
    /// The keys given, in order.
    pub fn keys(&self) -> Vec<&'a str> {
        self.attrs.iter().map(|(k, _)| *k).collect()
    }

    fn find(&self, key: Key) -> Option<(usize, &'a L)> {
        self.attrs.iter().position(|(k, _)| *k == key.name()).map(|at| (at, self.attrs[at].1))
    }

    fn value<T: AttrValue>(at: usize, key: Key, lit: &L) -> Result<T::Value, AttrFault> {
        T::read(lit).ok_or_else(|| AttrFault::Bad { at, key, want: T::want() })
    }

    /// A required attribute; a missing or bad one is a fault.
    pub fn required<T: AttrValue>(&self, key: Key, faults: &mut Vec<AttrFault>) -> Option<T::Value> {
        match self.find(key) {
            None => {
                faults.push(AttrFault::Missing(key));
                None
            }
            Some((at, lit)) => Self::value::<T>(at, key, lit).map_err(|f| faults.push(f)).ok(),
        }
    }

    /// An optional attribute: `Some(None)` when absent, `None` when bad (a fault).
    pub fn optional<T: AttrValue>(&self, key: Key, faults: &mut Vec<AttrFault>) -> Option<Option<T::Value>> {
        match self.find(key) {
            None => Some(None),
            Some((at, lit)) => Self::value::<T>(at, key, lit).map(Some).map_err(|f| faults.push(f)).ok(),
        }
    }

    /// The positional literal; a missing one is no fault here (the operand count reports it).
    pub fn literal<T: AttrValue>(&self, key: Key, faults: &mut Vec<AttrFault>) -> Option<T::Value> {
        let lit = self.literal?;
        let fault = || AttrFault::BadLiteral { key, want: T::want() };
        T::read(lit).ok_or_else(fault).map_err(|f| faults.push(f)).ok()
    }

    /// The attribute if given, or the first fault.
    pub fn first<T: AttrValue>(&self, key: Key) -> Result<Option<T::Value>, AttrFault> {
        self.find(key).map(|(at, lit)| Self::value::<T>(at, key, lit)).transpose()
    }

    /// The positional literal, or the first fault.
    pub fn literal_first<T: AttrValue>(&self, key: Key) -> Result<T::Value, AttrFault> {
        let lit = self.literal.ok_or(AttrFault::MissingLiteral(key))?;
        T::read(lit).ok_or_else(|| AttrFault::BadLiteral { key, want: T::want() })
    }

    /// Faults for every attribute `takes` does not hold and, where `repeats` is a fault,
    /// every key given twice.
    pub fn check_keys(&self, takes: &[Key], repeats: bool, faults: &mut Vec<AttrFault>) {
        for (at, (key, _)) in self.attrs.iter().enumerate() {
            match Key::named(key).filter(|k| takes.contains(k)) {
                None => faults.push(AttrFault::Unknown { at }),
                Some(k) if repeats && self.attrs[..at].iter().any(|(b, _)| b == key) => {
                    faults.push(AttrFault::Twice { at, key: k })
                }
                Some(_) => {}
            }
        }
    }
}

/// One op's attributes as a typed struct (generated for every op by the op table).
pub trait OpAttrs: Sized {
    /// The op these are the attributes of.
    const OP: Op;
    /// Read as the program language reads them: every required attribute given, every
    /// fault found (the attribute keys are checked by the caller).
    fn language<L: AttrLit + ?Sized>(given: &Given<'_, L>, faults: &mut Vec<AttrFault>) -> Option<Self>;
    /// Read as a spatial program's simulator reads them: an attribute the language requires
    /// may be left out where the table gives it a value in spatial programs; the first fault.
    fn spatial<L: AttrLit + ?Sized>(given: &Given<'_, L>) -> Result<Self, AttrFault>;
    /// The attributes as `key=value` in table order, absent optional ones left out; not the
    /// positional literal. In program text (`shown` false) a default is left out too; shown
    /// (`Display`), each value is as its kind shows it ([`AttrValue::show`]).
    fn texts(&self, shown: bool) -> Vec<(Key, String)>;
    /// The positional literal as written, with its field's key, if the op takes one.
    fn literal_text(&self) -> Option<(Key, String)>;
}

/// What runs or checks an op given its typed attributes: the simulator's kernels, the
/// reference interpreter's, its shape rules. One `impl Visit<attrs::X>` per op, beside the
/// kernel; [`super::TypedOp::visit`] and [`Op::visit_spatial`] need one for every op.
pub trait Visitor {
    type Out;
}

/// How a [`Visitor`] handles the op whose attributes are `A`.
pub trait Visit<A>: Visitor {
    fn visit(self, attrs: &A) -> Self::Out;
}
