//! Mutations: byte-level (flips, inserts, deletes, duplicated ranges, splices of other seeds,
//! interesting integers), token-level for text (tokens and lines replaced, dropped, repeated,
//! swapped, numbers made extreme), and structural for JSON (a node of the parsed document
//! replaced, removed, duplicated, grown, emptied — so a mutant stays JSON and reaches the
//! importer behind the JSON parser). The same [`Op`] list drives the fuzzer (drawn from its
//! RNG) and the property tests (drawn, and shrunk, by proptest).

use crate::rng::Rng;
use serde_json::Value;

/// One change to an input. `kind` picks the operation ([`KIND_NAMES`]); `a`, `b`, `c` are its
/// parameters (positions wrap around the input, choices wrap around their lists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub kind: u8,
    pub a: u64,
    pub b: u64,
    pub c: u64,
}

/// Every operation, by `Op::kind`.
pub const KIND_NAMES: [&str; 16] = [
    "flip-bit",
    "set-byte",
    "insert-bytes",
    "delete-range",
    "duplicate-range",
    "splice-seed",
    "write-int",
    "truncate",
    "token-replace",
    "token-delete",
    "token-repeat",
    "token-swap",
    "line-delete",
    "line-repeat",
    "line-splice",
    "json-node",
];

/// How a target's inputs are laid out, which decides the mix of operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Line-oriented text (program text, spatial text, TOML).
    Text,
    /// A JSON document.
    Json,
    /// A binary file whose first `Seed::hot` bytes (the header) matter most.
    Binary,
    /// safetensors: a little-endian u64 length, a JSON header, then data.
    Safetensors,
}

impl Format {
    /// The kinds a fuzzer draws for this format, with repeats as weights.
    pub fn kinds(self) -> &'static [u8] {
        match self {
            Format::Text => &[0, 1, 2, 3, 4, 5, 7, 8, 8, 8, 8, 9, 9, 10, 11, 12, 13, 14, 14],
            Format::Json => &[0, 2, 3, 4, 5, 7, 8, 8, 9, 10, 11, 15, 15, 15, 15, 15, 15, 15],
            Format::Binary => &[0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 6, 6, 6, 7],
            Format::Safetensors => &[0, 1, 2, 3, 4, 6, 6, 7, 8, 9, 15, 15, 15, 15, 15, 15],
        }
    }
}

/// A corpus file: its bytes and the length of its header region (mutations favour it).
#[derive(Clone, Debug)]
pub struct Seed {
    pub name: String,
    pub bytes: Vec<u8>,
    pub hot: usize,
}

/// Integers worth writing over a length, count, dimension or offset.
pub const INTERESTING: [u64; 18] = [
    0,
    1,
    2,
    7,
    32,
    255,
    256,
    1 << 16,
    (1 << 31) - 1,
    1 << 31,
    u32::MAX as u64,
    1 << 32,
    1 << 40,
    1 << 60,
    i64::MAX as u64,
    1 << 63,
    u64::MAX - 1,
    u64::MAX,
];

/// Numbers worth writing into text: overflows of every integer width, extreme and special floats.
pub const NUMBERS: [&str; 30] = [
    "0",
    "-0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "64",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "1e308",
    "1e309",
    "-1e309",
    "1e-320",
    "0.0",
    "-0.0",
    "0.5",
    "NaN",
    "inf",
    "-inf",
    "1e5",
];

/// What mutations may draw on besides the input itself.
pub struct Context<'a> {
    pub format: Format,
    pub seeds: &'a [Seed],
    /// Distinct tokens of every seed (identifiers, keywords, numbers, punctuation).
    pub tokens: &'a [String],
    /// Words the target's grammar knows that the seeds may not show.
    pub dictionary: &'a [&'a str],
}

impl Context<'_> {
    /// A random op for this format, positions biased to the first `hot` bytes.
    pub fn draw(&self, rng: &mut Rng, hot: usize) -> Op {
        let kinds = self.format.kinds();
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        let a = if hot > 0 && !rng.one_in(4) { rng.below(hot as u64) } else { rng.next_u64() };
        let b = if rng.one_in(2) { rng.below(64) } else { rng.next_u64() };
        let c = if rng.one_in(2) { rng.below(64) } else { rng.next_u64() };
        Op { kind, a, b, c }
    }

    /// `input` with `op` applied (an op that does not apply leaves it unchanged).
    pub fn apply(&self, input: &mut Vec<u8>, op: Op) {
        let Op { kind, a, b, c } = op;
        let at = |len: usize| if len == 0 { 0 } else { (a % len as u64) as usize };
        match kind % KIND_NAMES.len() as u8 {
            0 => {
                if !input.is_empty() {
                    let i = at(input.len());
                    input[i] ^= 1 << (b % 8);
                }
            }
            1 => {
                if !input.is_empty() {
                    let i = at(input.len());
                    input[i] = [0u8, 1, 0x7f, 0x80, 0xff, b'"', b'\n', b'0', b'9', b'{', b']', b'-'][(b % 12) as usize];
                }
            }
            2 => {
                let i = at(input.len() + 1);
                let mut r = Rng::new(c);
                let n = 1 + (b % 16) as usize;
                let bytes: Vec<u8> = (0..n).map(|_| r.next_u64() as u8).collect();
                input.splice(i..i, bytes);
            }
            3 => {
                if !input.is_empty() {
                    let i = at(input.len());
                    let end = (i + 1 + (b % 64) as usize).min(input.len());
                    input.drain(i..end);
                }
            }
            4 => {
                if !input.is_empty() {
                    let i = at(input.len());
                    let end = (i + 1 + (b % 128) as usize).min(input.len());
                    let chunk = input[i..end].to_vec();
                    let to = (c % (input.len() as u64 + 1)) as usize;
                    input.splice(to..to, chunk);
                }
            }
            5 => {
                let other = &self.seeds[(b % self.seeds.len().max(1) as u64) as usize].bytes;
                if !other.is_empty() {
                    let from = (c % other.len() as u64) as usize;
                    let end = (from + 1 + ((c >> 32) % 256) as usize).min(other.len());
                    let i = at(input.len() + 1);
                    if b & (1 << 40) == 0 {
                        input.splice(i..i, other[from..end].iter().copied());
                    } else {
                        let stop = (i + end - from).min(input.len());
                        input.splice(i..stop, other[from..end].iter().copied());
                    }
                }
            }
            6 => {
                if !input.is_empty() {
                    let value = if c % 3 == 0 { c } else { INTERESTING[(c % INTERESTING.len() as u64) as usize] };
                    let bytes = value.to_le_bytes();
                    let width = [1usize, 2, 4, 8][(b % 4) as usize];
                    let i = at(input.len());
                    let end = (i + width).min(input.len());
                    input[i..end].copy_from_slice(&bytes[..end - i]);
                }
            }
            7 => {
                let len = at(input.len() + 1);
                input.truncate(len);
            }
            8..=11 => self.token_op(input, op),
            12..=14 => self.line_op(input, op),
            _ => self.json_op(input, op),
        }
    }

    fn replacement(&self, b: u64, c: u64) -> Vec<u8> {
        let pick = |n: usize| (c % n.max(1) as u64) as usize;
        match b % 4 {
            0 | 1 if !self.tokens.is_empty() => self.tokens[pick(self.tokens.len())].as_bytes().to_vec(),
            2 if !self.dictionary.is_empty() => self.dictionary[pick(self.dictionary.len())].as_bytes().to_vec(),
            _ => NUMBERS[pick(NUMBERS.len())].as_bytes().to_vec(),
        }
    }

    fn token_op(&self, input: &mut Vec<u8>, Op { kind, a, b, c }: Op) {
        let tokens = tokens(input);
        if tokens.is_empty() {
            if kind == 8 {
                *input = self.replacement(b, c);
            }
            return;
        }
        let (s, e) = tokens[(a % tokens.len() as u64) as usize];
        match kind {
            8 => {
                let new = self.replacement(b, c);
                input.splice(s..e, new);
            }
            9 => {
                input.drain(s..e);
            }
            10 => {
                let chunk = input[s..e].repeat(1 + (b % 4) as usize);
                input.splice(s..s, chunk);
            }
            _ => {
                let (s2, e2) = tokens[(b % tokens.len() as u64) as usize];
                if e <= s2 {
                    let (first, second) = (input[s..e].to_vec(), input[s2..e2].to_vec());
                    input.splice(s2..e2, first);
                    input.splice(s..e, second);
                }
            }
        }
    }

    fn line_op(&self, input: &mut Vec<u8>, Op { kind, a, b, c }: Op) {
        let lines = lines(input);
        let (s, e) = lines[(a % lines.len() as u64) as usize];
        match kind {
            12 => {
                input.drain(s..e);
            }
            13 => {
                let line = input[s..e].to_vec();
                let (to, _) = lines[(b % lines.len() as u64) as usize];
                input.splice(to..to, line);
            }
            _ => {
                let other = &self.seeds[(b % self.seeds.len().max(1) as u64) as usize].bytes;
                let other_lines = lines_of(other);
                let (os, oe) = other_lines[(c % other_lines.len() as u64) as usize];
                input.splice(s..s, other[os..oe].iter().copied());
            }
        }
    }

    fn json_op(&self, input: &mut Vec<u8>, op: Op) {
        match self.format {
            Format::Safetensors => {
                let Some(len) = input.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap())) else { return };
                let end = usize::try_from(len).ok().and_then(|l| l.checked_add(8)).filter(|&e| e <= input.len());
                let Some(end) = end else { return };
                let Some(header) = mutate_json(&input[8..end], op, self) else { return };
                let mut out = if op.c & 7 == 7 { len } else { header.len() as u64 }.to_le_bytes().to_vec();
                out.extend_from_slice(&header);
                out.extend_from_slice(&input[end..]);
                *input = out;
            }
            _ => {
                if let Some(out) = mutate_json(input, op, self) {
                    *input = out;
                }
            }
        }
    }
}

/// Token boundaries: runs of identifier characters (`[A-Za-z0-9_.]`, and any non-ASCII byte),
/// every other byte alone.
pub fn tokens(input: &[u8]) -> Vec<(usize, usize)> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b >= 0x80;
    let mut out = Vec::new();
    let mut i = 0;
    while i < input.len() {
        let start = i;
        if word(input[i]) {
            while i < input.len() && word(input[i]) {
                i += 1;
            }
        } else {
            i += 1;
        }
        out.push((start, i));
    }
    out
}

/// Line boundaries, each line with its newline; an empty input is one empty line.
fn lines(input: &[u8]) -> Vec<(usize, usize)> {
    lines_of(input)
}

fn lines_of(input: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in input.iter().enumerate() {
        if b == b'\n' {
            out.push((start, i + 1));
            start = i + 1;
        }
    }
    if start < input.len() || out.is_empty() {
        out.push((start, input.len()));
    }
    out
}

/// `bytes` parsed as JSON, one node changed, written back; `None` when `bytes` is not JSON.
fn mutate_json(bytes: &[u8], Op { a, b, c, .. }: Op, ctx: &Context) -> Option<Vec<u8>> {
    let mut doc: Value = serde_json::from_slice(bytes).ok()?;
    let n = count(&doc);
    let donor = nth_mut(&mut doc, (c % n as u64) as usize).cloned().unwrap_or(Value::Null);
    let node = nth_mut(&mut doc, (a % n as u64) as usize)?;
    match b % 10 {
        0 => *node = scalar(c, ctx),
        1 => match node {
            Value::Array(items) if !items.is_empty() => {
                items.remove((c % items.len() as u64) as usize);
            }
            Value::Object(map) if !map.is_empty() => {
                let key = map.keys().nth((c % map.len() as u64) as usize).cloned().unwrap_or_default();
                map.shift_remove(&key);
            }
            _ => *node = Value::Null,
        },
        2 => match node {
            Value::Array(items) if !items.is_empty() => {
                let item = items[(c % items.len() as u64) as usize].clone();
                items.push(item);
            }
            Value::Object(map) if !map.is_empty() => {
                let (_, value) = map.iter().nth((c % map.len() as u64) as usize)?;
                let value = value.clone();
                map.insert(format!("k{}", c % 7), value);
            }
            _ => *node = Value::Array(vec![node.clone(), node.clone()]),
        },
        3 => *node = donor,
        4 => *node = Value::Array(vec![node.take()]),
        5 => {
            if let Some(x) = node.as_f64() {
                let v = [x + 1.0, x - 1.0, x * 2.0, -x, x * 1e6, 0.0, x / 3.0, x.trunc() + 0.5][(c % 8) as usize];
                *node = if x.fract() == 0.0 && v.fract() == 0.0 && v.abs() < 9e18 {
                    Value::from(v as i64)
                } else {
                    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
                };
            } else {
                *node = scalar(c, ctx);
            }
        }
        6 => {
            *node = match node {
                Value::Object(_) => Value::Array(Vec::new()),
                _ => Value::Object(Default::default()),
            }
        }
        7 => {
            *node = match node {
                Value::String(s) if c & 1 == 0 => {
                    let mut s = s.clone();
                    s.push_str(["x", "0", ".", "/", "..", "\u{0}", "é", "▁", "Ġ", " "][(c / 2 % 10) as usize]);
                    Value::String(s)
                }
                _ => Value::String(String::from_utf8_lossy(&ctx.replacement(c >> 8, c)).into_owned()),
            }
        }
        8 => {
            if let Value::Array(items) = node {
                if let Some(first) = items.first().cloned() {
                    let times = 1usize << (c % 10);
                    items.extend(std::iter::repeat_n(first, times));
                }
            } else {
                *node = Value::Array(vec![node.clone(); 1 + (c % 5) as usize]);
            }
        }
        _ => match node {
            Value::Array(items) if items.len() > 1 => {
                let (i, j) = ((c % items.len() as u64) as usize, ((c >> 16) % items.len() as u64) as usize);
                items.swap(i, j);
            }
            Value::Object(map) if map.len() > 1 => {
                let entries: Vec<(String, Value)> = std::mem::take(map).into_iter().rev().collect();
                map.extend(entries);
            }
            _ => *node = scalar(c, ctx),
        },
    }
    if c & (1 << 20) == 0 { serde_json::to_vec(&doc) } else { serde_json::to_vec_pretty(&doc) }.ok()
}

/// A scalar worth putting where something else was.
fn scalar(c: u64, ctx: &Context) -> Value {
    match c % 6 {
        0 => Value::from(INTERESTING[((c >> 3) % INTERESTING.len() as u64) as usize]),
        1 => Value::from(-((c >> 3) as i64 % 3) - 1),
        2 => serde_json::Number::from_f64([0.5, 1e-9, 1e300, -1e300, 3.5, 0.0][((c >> 3) % 6) as usize])
            .map_or(Value::Null, Value::Number),
        3 => Value::String(String::from_utf8_lossy(&ctx.replacement(c >> 3, c >> 7)).into_owned()),
        4 => Value::Bool(c & 8 == 0),
        _ => Value::Null,
    }
}

fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Object(map) => map.values().map(count).sum(),
        _ => 0,
    }
}

/// The `k`-th node in preorder.
fn nth_mut(v: &mut Value, k: usize) -> Option<&mut Value> {
    fn go<'a>(v: &'a mut Value, k: &mut usize) -> Option<&'a mut Value> {
        if *k == 0 {
            return Some(v);
        }
        *k -= 1;
        let children: Box<dyn Iterator<Item = &mut Value>> = match v {
            Value::Array(items) => Box::new(items.iter_mut()),
            Value::Object(map) => Box::new(map.values_mut()),
            _ => return None,
        };
        for child in children {
            if let Some(found) = go(child, k) {
                return Some(found);
            }
        }
        None
    }
    go(v, &mut { k })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(format: Format, seeds: &[Seed]) -> Context<'_> {
        Context { format, seeds, tokens: &[], dictionary: &["dict"] }
    }

    #[test]
    fn every_op_applies_to_empty_and_tiny_inputs_without_panicking() {
        let seeds = [Seed { name: "s".into(), bytes: b"{\"a\":[1,2]}\n".to_vec(), hot: 4 }];
        for format in [Format::Text, Format::Json, Format::Binary, Format::Safetensors] {
            let ctx = ctx(format, &seeds);
            for kind in 0..KIND_NAMES.len() as u8 {
                for input in [&b""[..], b"x", b"{\"a\":1}", b"\x05\0\0\0\0\0\0\0[1,2]zz"] {
                    for (a, b, c) in [(0, 0, 0), (u64::MAX, u64::MAX, u64::MAX), (3, 17, 1 << 40)] {
                        let mut bytes = input.to_vec();
                        ctx.apply(&mut bytes, Op { kind, a, b, c });
                    }
                }
            }
        }
    }

    #[test]
    fn json_ops_keep_a_json_document_json() {
        let seeds = [Seed { name: "s".into(), bytes: b"{\"a\":[1,{\"b\":\"c\"}],\"d\":2.5}".to_vec(), hot: 0 }];
        let ctx = ctx(Format::Json, &seeds);
        let mut rng = Rng::new(7);
        for _ in 0..500 {
            let mut bytes = seeds[0].bytes.clone();
            let op = Op { kind: 15, a: rng.next_u64(), b: rng.next_u64(), c: rng.next_u64() };
            ctx.apply(&mut bytes, op);
            assert!(serde_json::from_slice::<Value>(&bytes).is_ok(), "{op:?}: {}", String::from_utf8_lossy(&bytes));
        }
    }

    #[test]
    fn tokens_split_words_from_punctuation() {
        let t = tokens(b"x1 = f(a.b, 2)");
        let words: Vec<&[u8]> = t.iter().map(|&(s, e)| &b"x1 = f(a.b, 2)"[s..e]).collect();
        assert_eq!(words, [&b"x1"[..], b" ", b"=", b" ", b"f", b"(", b"a.b", b",", b" ", b"2", b")"]);
    }
}
