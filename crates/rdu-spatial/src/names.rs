//! The naming convention of a bundle's tensors, typed: what a name's suffixes mean, parsed in one
//! place and written back in one place.
//!
//! A program tensor's name is `{base}{layer}{_s{seq}}`:
//! - `base` says what it is (`Wq`, `Kc`, `x2n`, `pos`);
//! - `layer` is the layer it belongs to, absent for a tensor every layer shares (`E`, `pos`);
//! - `seq` is the sequence of a batched step whose part it is (`Kc3_s1`, `pos_s2`).
//!
//! Two kinds of name are read differently:
//! - the shared RoPE tables `cos{r}`/`sin{r}`: their digits are a rotation, not a layer, and
//!   stay in the base;
//! - the hidden state between layers ([`HiddenNames`]): `x` into layer 0 and `xo{l}` out of
//!   layer `l` (`X` and `bxo{l}` for a batch of sequences stacked).
//!
//! Parsing is total (every string is some name) and exact: `TensorName::parse(s).to_string()`
//! is `s` for every `s`, so a digit run that does not read back as itself (`Wq03`) stays in
//! the base.

use std::fmt;

use crate::manifest::{InputRole, RopeTable};

/// A program tensor's name, split into its parts.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TensorName {
    pub base: String,
    pub layer: Option<usize>,
    pub seq: Option<usize>,
}

/// Bases of shared tensors whose digit suffix is a rotation index, never a layer's.
pub const SHARED_BASES: [&str; 2] = ["cos", "sin"];

impl TensorName {
    /// The name of `base` in `layer` (no sequence).
    pub fn layer(base: &str, layer: usize) -> TensorName {
        TensorName { base: base.to_string(), layer: Some(layer), seq: None }
    }

    /// A name with no layer and no sequence (`E`, `pos`).
    pub fn shared(base: &str) -> TensorName {
        TensorName { base: base.to_string(), layer: None, seq: None }
    }

    /// The same name in sequence `seq` of a batched step (`None`: the whole step).
    pub fn in_sequence(mut self, seq: Option<usize>) -> TensorName {
        self.seq = seq;
        self
    }

    /// `Kc3_s1` → base `Kc`, layer 3, sequence 1; `cos0` → base `cos0`; `Wq03` → base `Wq03`.
    pub fn parse(name: &str) -> TensorName {
        let (stem, seq) = split_number(name, "_s");
        let (base, layer) = match split_number(stem, "") {
            (base, Some(_)) if SHARED_BASES.contains(&base) => (stem, None),
            split => split,
        };
        TensorName { base: base.to_string(), layer, seq }
    }
}

impl fmt::Display for TensorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.base)?;
        if let Some(l) = self.layer {
            write!(f, "{l}")?;
        }
        if let Some(b) = self.seq {
            write!(f, "_s{b}")?;
        }
        Ok(())
    }
}

/// `name` = `{head}{marker}{n}` with `n` a canonical decimal (no leading zero unless it is
/// `0`) and `head` non-empty → (`head`, `Some(n)`); otherwise (`name`, `None`).
fn split_number<'a>(name: &'a str, marker: &str) -> (&'a str, Option<usize>) {
    let head = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let digits = &name[head.len()..];
    let Some(head) = head.strip_suffix(marker) else { return (name, None) };
    let canonical = !digits.is_empty() && (digits == "0" || !digits.starts_with('0'));
    match digits.parse::<usize>() {
        Ok(n) if canonical && !head.is_empty() => (head, Some(n)),
        _ => (name, None),
    }
}

/// How a bundle names its layers' hidden-state inputs: `first` in layer 0, `{prefix}{l-1}`
/// in layer `l` (and `{prefix}{l}` is layer `l`'s output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HiddenNames {
    pub first: &'static str,
    pub prefix: &'static str,
}

/// One sequence: `x`, `xo0`, `xo1`, …
pub const SINGLE: HiddenNames = HiddenNames { first: "x", prefix: "xo" };
/// A batch of sequences stacked: `X`, `bxo0`, `bxo1`, …
pub const STACKED: HiddenNames = HiddenNames { first: "X", prefix: "bxo" };

impl HiddenNames {
    /// The hidden state layer `l` reads.
    pub fn input_of(self, l: usize) -> TensorName {
        match l.checked_sub(1) {
            None => TensorName::shared(self.first),
            Some(prev) => TensorName::layer(self.prefix, prev),
        }
    }

    /// The hidden state layer `l` writes.
    pub fn output_of(self, l: usize) -> TensorName {
        TensorName::layer(self.prefix, l)
    }
}

/// The runtime input that carries a step's token ids: `toks` for a batched step, `tok` otherwise.
pub fn token_input(batched: bool) -> TensorName {
    TensorName::shared(if batched { "toks" } else { "tok" })
}

/// The position input of sequence `b` of a batched step (`pos_s{b}`); `pos` when the step is
/// one sequence.
pub fn position_input(b: Option<usize>) -> TensorName {
    TensorName::shared("pos").in_sequence(b)
}

/// The shared RoPE table of rotation `r`: `cos{r}` or `sin{r}`.
pub fn rope_table(table: RopeTable, r: usize) -> String {
    let word = match table {
        RopeTable::Cos => "cos",
        RopeTable::Sin => "sin",
    };
    format!("{word}{r}")
}

/// `cos2` → (cos, rotation 2); `None` for a name that is not a shared RoPE table.
pub fn parse_rope_table(name: &str) -> Option<(RopeTable, usize)> {
    match split_number(name, "") {
        ("cos", Some(r)) => Some((RopeTable::Cos, r)),
        ("sin", Some(r)) => Some((RopeTable::Sin, r)),
        _ => None,
    }
}

/// A verify step's row to resume a recurrent state from, of sequence `b` (`resume_s{b}`);
/// `resume` when the step is one sequence.
pub fn resume_input(b: Option<usize>) -> TensorName {
    TensorName::shared("resume").in_sequence(b)
}

/// A verify step's positions for the previous step's drafted rows of a ring cache, of
/// sequence `b` (`pend_s{b}`); `pend` when the step is one sequence.
pub fn pending_input(b: Option<usize>) -> TensorName {
    TensorName::shared("pend").in_sequence(b)
}

/// A multi-token-prediction block's input of the hidden state of the row before each of its
/// rows (`f32[rows, d_model]`): the target's exported rows, or the block's own.
pub const HIDDEN_INPUT: &str = "hprev";

/// The head's output of the rows a multi-token-prediction draft reads next: its normed rows
/// (the output projection's input), or — a DeepSeek-V3-style block's own head — its rows before
/// the norm (vLLM's `deepseek_mtp` chains those).
pub const HIDDEN_OUTPUT: &str = "hn";

/// The role of a runtime input the host fills, by its name: the token ids (`tok`, `toks`), a
/// position (`pos`, or `pos_s{b}` with its sequence), a verify step's resume row (`resume`,
/// `resume_s{b}`) or pending positions (`pend`, `pend_s{b}`). `None` for any other name (the
/// hidden state, which a program reads from the one before it).
pub fn runtime_input(name: &str) -> Option<(InputRole, Option<usize>)> {
    let name = TensorName::parse(name);
    match (name.base.as_str(), name.layer, name.seq) {
        ("tok" | "toks", None, None) => Some((InputRole::Tokens, None)),
        ("pos", None, seq) => Some((InputRole::Position, seq)),
        ("resume", None, seq) => Some((InputRole::Resume, seq)),
        ("pend", None, seq) => Some((InputRole::Pending, seq)),
        (HIDDEN_INPUT, None, None) => Some((InputRole::Hidden, None)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(name: &str) -> (String, Option<usize>, Option<usize>) {
        let n = TensorName::parse(name);
        (n.base, n.layer, n.seq)
    }

    #[test]
    fn names_split_into_base_layer_and_sequence() {
        assert_eq!(parts("Wq3"), ("Wq".into(), Some(3), None));
        assert_eq!(parts("Kc3_s1"), ("Kc".into(), Some(3), Some(1)));
        assert_eq!(parts("x2n10"), ("x2n".into(), Some(10), None));
        assert_eq!(parts("pos_s2"), ("pos".into(), None, Some(2)));
        assert_eq!(parts("pos"), ("pos".into(), None, None));
        assert_eq!(parts("xo0"), ("xo".into(), Some(0), None));
        assert_eq!(parts("cos1"), ("cos1".into(), None, None), "a rotation, not a layer");
        assert_eq!(parts("sin0_s1"), ("sin0".into(), None, Some(1)));
        assert_eq!(parts("Wq03"), ("Wq03".into(), None, None), "digits that do not read back stay in the base");
        assert_eq!(parts("7"), ("7".into(), None, None), "a name is never all layer");
        assert_eq!(parts("_s1"), ("_s".into(), Some(1), None), "a sequence suffix needs a name before it");
        assert_eq!(parts("a_s"), ("a_s".into(), None, None));
        assert_eq!(parts("a_s01"), ("a_s01".into(), None, None));
        assert_eq!(parts("W99999999999999999999999"), ("W99999999999999999999999".into(), None, None));
    }

    #[test]
    fn every_name_reads_back_as_itself() {
        for name in ["Wq3", "Kc3_s1", "pos_s2", "cos0", "Wq03", "", "_", "_s", "a_s_s1", "7_s3", "x2n3", "é9_s0"] {
            assert_eq!(TensorName::parse(name).to_string(), name);
        }
    }

    #[test]
    fn hidden_names_and_runtime_inputs() {
        assert_eq!(SINGLE.input_of(0).to_string(), "x");
        assert_eq!(SINGLE.input_of(4).to_string(), "xo3");
        assert_eq!(STACKED.output_of(2).to_string(), "bxo2");
        assert_eq!(token_input(true).to_string(), "toks");
        assert_eq!(position_input(Some(1)).to_string(), "pos_s1");
        assert_eq!(position_input(None).to_string(), "pos");
        assert_eq!(runtime_input("toks"), Some((InputRole::Tokens, None)));
        assert_eq!(runtime_input("pos_s3"), Some((InputRole::Position, Some(3))));
        assert_eq!(runtime_input("pos"), Some((InputRole::Position, None)));
        assert_eq!(runtime_input("resume_s1"), Some((InputRole::Resume, Some(1))));
        assert_eq!(runtime_input("pend"), Some((InputRole::Pending, None)));
        for other in ["x", "X", "xo0", "tok_s1", "pos0", "pos_s03"] {
            assert_eq!(runtime_input(other), None, "{other}");
        }
    }

    #[test]
    fn rope_tables_name_their_rotation() {
        assert_eq!(rope_table(RopeTable::Sin, 1), "sin1");
        assert_eq!(parse_rope_table("cos12"), Some((RopeTable::Cos, 12)));
        for other in ["cos", "cos01", "tan1", "cos1_s0", "Wcos1"] {
            assert_eq!(parse_rope_table(other), None, "{other}");
        }
    }
}
