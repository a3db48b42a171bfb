//! The shape digest of a program up to the names it binds, and the renaming between two
//! programs with one digest; neither judges whether the program is meaningful.
//!
//! A *bound* name is one declared `input`, `weight` or `state`, or bound by a statement.
//! Its occurrences in name positions (declared name, binder, positional argument, output)
//! are replaced by the index of the name's first occurrence among bound names in token
//! order. Every other token — keywords, op names, attribute keys, words, numbers as
//! written, dtypes, punctuation, line breaks (those ending a line that holds tokens), names of `shared` tensors and names bound
//! nowhere — is kept exactly. Comments and blanks are not tokens.
use super::ast::{Arg, DeclKind, Item, Program};
use super::lexer::{lex, Token, TokenKind};
use super::{Source, Storage};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// A blake3 digest of a program up to the names it binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Hashes the canonical token stream, then the Q8_0 set: the sorted indices of its bound
/// members, then its other members verbatim; then, for each other block format that stores
/// a weight (by its word, `fp8_128x128`, `mxfp4`), the word and its set alike — nothing
/// when there is none, so a program with only Q8_0 weights keeps its digest. A text that does
/// not parse is hashed raw (under a different domain tag), so it never shares a digest with
/// one that does.
pub fn shape_digest(source: &Source) -> Digest {
    let mut h = blake3::Hasher::new();
    let canon = Canon::of(source);
    match &canon {
        Some(canon) => {
            h.update(b"rdu-lang-digest-v1/program\0");
            canon.hash_into(&mut h);
        }
        None => {
            h.update(b"rdu-lang-digest-v1/raw\0");
            frame(&mut h, source.text().as_bytes());
        }
    }
    let mut sets: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for (name, storage) in &source.stored {
        sets.entry(storage.word()).or_default().insert(name.as_str());
    }
    let q8 = sets.remove(&Storage::Q8_0.word()).unwrap_or_default();
    let others = sets.into_iter().map(|(word, set)| (Some(word), set));
    for (word, set) in std::iter::once((None, q8)).chain(others) {
        let (indices, verbatim) = match &canon {
            Some(canon) => canon.set_parts(&set),
            None => (Vec::new(), set.iter().copied().collect()),
        };
        match word {
            None => h.update(b"q8"),
            Some(word) => {
                h.update(b"stored");
                frame(&mut h, word.as_bytes());
                &mut h
            }
        };
        h.update(&(indices.len() as u64).to_le_bytes());
        for i in indices {
            h.update(&(i as u64).to_le_bytes());
        }
        h.update(&(verbatim.len() as u64).to_le_bytes());
        for name in verbatim {
            frame(&mut h, name.as_bytes());
        }
    }
    if !source.slices.is_empty() {
        // Tensor-parallel slices: which chip loads which rows is part of the program.
        h.update(b"slices");
        h.update(&(source.slices.len() as u64).to_le_bytes());
        let mut keyed: Vec<(Option<usize>, &str, &super::Slices)> = source
            .slices
            .iter()
            .map(|(n, s)| (canon.as_ref().and_then(|c| c.bound.get(n.as_str()).copied()), n.as_str(), s))
            .collect();
        // Bound names by canonical index (their spelling differs between layers), others by name.
        keyed.sort_by_key(|&(i, n, _)| (i.unwrap_or(usize::MAX), if i.is_some() { "" } else { n }));
        for (index, name, s) in keyed {
            match index {
                Some(i) => {
                    h.update(&(i as u64).to_le_bytes());
                }
                None => frame(&mut h, name.as_bytes()),
            }
            h.update(&(s.axis as u64).to_le_bytes());
            if let Some(stored) = s.stored {
                // Zero-padded beyond the stored values (absent otherwise: older digests hold).
                h.update(b"stored");
                h.update(&(stored as u64).to_le_bytes());
            }
            h.update(&(s.parts.len() as u64).to_le_bytes());
            for chip in &s.parts {
                h.update(&(chip.len() as u64).to_le_bytes());
                for (a, b) in chip {
                    h.update(&(*a as u64).to_le_bytes());
                    h.update(&(*b as u64).to_le_bytes());
                }
            }
        }
    }
    Digest(*h.finalize().as_bytes())
}

/// The name-by-name bijection that turns `from` into `to`, if the two are one program up to
/// the names they bind (and their storage sets correspond); `None` otherwise, or if either does
/// not parse. The map holds every bound name of `from`, identities included.
pub fn renaming(from: &Source, to: &Source) -> Option<BTreeMap<String, String>> {
    Renamer::new(from)?.to(to)
}

/// [`renaming`] from one program to many: `from`'s canonical stream is built once (binding
/// every layer of a kind to its program reads the kind's program once, not once a layer).
pub struct Renamer<'s> {
    from: &'s Source,
    canon: Canon<'s>,
}

impl<'s> Renamer<'s> {
    /// `None` when `from` does not parse.
    pub fn new(from: &'s Source) -> Option<Renamer<'s>> {
        Some(Renamer { from, canon: Canon::of(from)? })
    }

    /// The bijection from this program to `to`, as [`renaming`].
    pub fn to(&self, to: &Source) -> Option<BTreeMap<String, String>> {
        let (from, a) = (self.from, &self.canon);
        let b = Canon::of(to)?;
        if a.stream.len() != b.stream.len() {
            return None;
        }
        let mut forth: HashMap<&str, &str> = HashMap::new();
        let mut back: HashMap<&str, &str> = HashMap::new();
        for (x, y) in a.stream.iter().zip(&b.stream) {
            match (x, y) {
                (Tok::Bound(i, p), Tok::Bound(j, q)) => {
                    if i != j {
                        return None;
                    }
                    let seen = forth.entry(*p).or_insert(*q);
                    let seen_back = back.entry(*q).or_insert(*p);
                    if seen != q || seen_back != p {
                        return None;
                    }
                }
                (Tok::Kept(x), Tok::Kept(y)) if x.kind == y.kind && x.text == y.text => {}
                _ => return None,
            }
        }
        let map: BTreeMap<String, String> = forth.into_iter().map(|(p, q)| (p.to_string(), q.to_string())).collect();
        let mapped: BTreeMap<String, Storage> =
            from.stored.iter().map(|(n, s)| (map.get(n).unwrap_or(n).clone(), *s)).collect();
        let unbound_agree =
            from.stored.keys().all(|n| a.bound.contains_key(n.as_str()) || !b.bound.contains_key(n.as_str()));
        let slices_agree = from.slices.len() == to.slices.len()
            && from.slices.iter().all(|(n, s)| to.slices.get(map.get(n).unwrap_or(n)) == Some(s));
        (mapped == to.stored && unbound_agree && slices_agree).then_some(map)
    }
}

/// One token of the canonical stream.
enum Tok<'s> {
    /// A bound name in a name position: its canonical index and its text.
    Bound(usize, &'s str),
    Kept(Token<'s>),
}

/// The canonical token stream of a program that parses.
struct Canon<'s> {
    stream: Vec<Tok<'s>>,
    /// Bound name → canonical index.
    bound: HashMap<&'s str, usize>,
}

impl<'s> Canon<'s> {
    const BOUND_MARK: u8 = 0xff;

    fn of(source: &'s Source) -> Option<Canon<'s>> {
        let program = source.program().ok()?;
        let (tokens, _) = lex(source.text());
        let (names, bound_set) = name_positions(program);
        // The name positions in text order, walked alongside the tokens (a hashed set of them
        // was a cache miss a token on a batched program's million tokens).
        let mut names = names.into_iter().peekable();
        let mut bound = HashMap::new();
        let mut stream = Vec::with_capacity(tokens.len());
        for t in tokens {
            // A line break only separates lines that hold tokens: blank and comment lines do not count.
            let after_break = matches!(stream.last(), None | Some(Tok::Kept(Token { kind: TokenKind::Newline, .. })));
            if t.kind == TokenKind::Newline && after_break {
                continue;
            }
            while names.next_if(|&at| at < t.span.start).is_some() {}
            let named = names.next_if_eq(&t.span.start).is_some();
            if named && bound_set.contains(t.text) {
                let next = bound.len();
                stream.push(Tok::Bound(*bound.entry(t.text).or_insert(next), t.text));
            } else {
                stream.push(Tok::Kept(t));
            }
        }
        Some(Canon { stream, bound })
    }

    fn hash_into(&self, h: &mut blake3::Hasher) {
        h.update(&(self.stream.len() as u64).to_le_bytes());
        for tok in &self.stream {
            match tok {
                Tok::Bound(i, _) => {
                    h.update(&[Self::BOUND_MARK]);
                    h.update(&(*i as u64).to_le_bytes());
                }
                Tok::Kept(t) => {
                    h.update(&[t.kind.tag()]);
                    frame(h, t.text.as_bytes());
                }
            }
        }
    }

    /// A storage set split into the sorted indices of its bound members and its other members.
    fn set_parts<'q>(&self, set: &BTreeSet<&'q str>) -> (Vec<usize>, Vec<&'q str>) {
        let mut indices: Vec<usize> = set.iter().filter_map(|n| self.bound.get(n).copied()).collect();
        indices.sort_unstable();
        let verbatim = set.iter().copied().filter(|n| !self.bound.contains_key(n)).collect();
        (indices, verbatim)
    }
}

/// The start offsets of the tokens in name positions, in text order, and the set of bound names.
fn name_positions(p: &Program) -> (Vec<u32>, HashSet<&str>) {
    let (mut at, mut bound) = (Vec::new(), HashSet::new());
    for item in &p.items {
        match item {
            Item::Decl(d) => {
                at.push(d.name.span.start);
                if d.kind != DeclKind::Shared {
                    bound.insert(d.name.text.as_str());
                }
            }
            Item::Stmt(s) => {
                for b in &s.binders {
                    at.push(b.span.start);
                    bound.insert(b.text.as_str());
                }
                for a in &s.args {
                    if let Arg::Name(n) = a {
                        at.push(n.span.start);
                    }
                }
            }
            Item::Output(n) => {
                at.push(n.span.start);
            }
        }
    }
    // Items and their names come in text order already; sorting keeps the walk right regardless.
    at.sort_unstable();
    at.dedup();
    (at, bound)
}

/// Length-prefixed bytes, so that adjacent fields cannot run into each other.
fn frame(h: &mut blake3::Hasher, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}
