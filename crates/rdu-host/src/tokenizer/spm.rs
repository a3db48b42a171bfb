//! GGUF `llama` tokenizer: SentencePiece BPE by piece score with `<0xXX>` byte fallback, as llama.cpp's SPM tokenizer.

use super::vocab::{parse_byte_token, Fragment, TokenType, Vocab};
use crate::error::Result;
use rdu_checkpoint::Gguf;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The SentencePiece whitespace mark, U+2581.
pub const SPACE_MARK: char = '\u{2581}';

/// SentencePiece BPE over a GGUF vocabulary with scores.
pub struct Spm {
    pub vocab: Vocab,
    /// `tokenizer.ggml.add_space_prefix` (default true; Gemma files set it false).
    pub add_space_prefix: bool,
}

/// A span of the escaped text; merged symbols stay contiguous.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of two adjacent symbols: highest score first, then leftmost.
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

impl Spm {
    pub fn from_gguf(gguf: &Gguf) -> Result<Spm> {
        let vocab = Vocab::from_gguf(gguf, true)?;
        let add_space_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
        Ok(Spm { vocab, add_space_prefix })
    }

    /// Token ids of `text`; with `controls`, control tokens written in it are matched too.
    pub fn encode(&self, text: &str, add_bos: bool, controls: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        if add_bos {
            out.push(self.vocab.require_bos()?);
        }
        let mut prev_special = true;
        for frag in self.vocab.split_specials(text, controls) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(s) => {
                    let mut t = String::with_capacity(s.len() + 3);
                    if self.add_space_prefix && prev_special {
                        t.push(SPACE_MARK);
                    }
                    t.extend(s.chars().map(|c| if c == ' ' { SPACE_MARK } else { c }));
                    self.encode_escaped(&t, &mut out)?;
                    prev_special = false;
                }
            }
        }
        Ok(out)
    }

    /// Merges the characters of `text` (spaces already escaped) and appends the ids.
    fn encode_escaped(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut symbols: Vec<Symbol> = Vec::new();
        for (start, c) in text.char_indices() {
            let i = symbols.len();
            symbols.push(Symbol { start, len: c.len_utf8(), prev: i.checked_sub(1), next: None });
            if i > 0 {
                symbols[i - 1].next = Some(i);
            }
        }
        let mut heap = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.push_bigram(text, &symbols, i - 1, i, &mut heap);
        }
        while let Some(b) = heap.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            // Stale: one side was merged away or grew since the bigram was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != Some(b.right) {
                continue;
            }
            symbols[b.left].len += r.len;
            symbols[b.left].next = r.next;
            symbols[b.right].len = 0;
            if let Some(n) = r.next {
                symbols[n].prev = Some(b.left);
            }
            if let Some(p) = l.prev {
                self.push_bigram(text, &symbols, p, b.left, &mut heap);
            }
            if let Some(n) = r.next {
                self.push_bigram(text, &symbols, b.left, n, &mut heap);
            }
        }
        let mut at = if symbols.is_empty() { None } else { Some(0) };
        while let Some(i) = at {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.vocab.text_token(piece) {
                Some(id) => out.push(id),
                None => self.byte_fallback(piece, out)?,
            }
            at = s.next;
        }
        Ok(())
    }

    fn push_bigram(&self, text: &str, symbols: &[Symbol], left: usize, right: usize, heap: &mut BinaryHeap<Bigram>) {
        let (l, r) = (symbols[left], symbols[right]);
        let len = l.len + r.len;
        if let Some(id) = self.vocab.text_token(&text[l.start..l.start + len]) {
            heap.push(Bigram { left, right, score: self.vocab.scores[id as usize], len });
        }
    }

    /// Emits `<0xXX>` tokens for each byte of a piece that is not in the vocabulary.
    fn byte_fallback(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        for &b in piece.as_bytes() {
            let id = self
                .vocab
                .id(&format!("<0x{b:02X}>"))
                .or_else(|| self.vocab.id(std::str::from_utf8(&[b]).unwrap_or("\u{0}")))
                .or(self.vocab.unk);
            match id {
                Some(id) => out.push(id),
                None => {
                    return Err(self.vocab.err(format!(
                        "{piece:?} is not in the vocabulary, which has neither a byte token <0x{b:02X}> nor an unknown token"
                    )))
                }
            }
        }
        Ok(())
    }

    /// The bytes one token stands for: `▁` → space, `<0xXX>` → that byte, control tokens → nothing.
    pub fn piece_bytes(&self, id: u32) -> Vec<u8> {
        let Some(text) = self.vocab.check_id(id) else { return Vec::new() };
        match self.vocab.types[id as usize] {
            TokenType::Normal | TokenType::UserDefined => text.replace(SPACE_MARK, " ").into_bytes(),
            TokenType::Byte => parse_byte_token(text).map(|b| vec![b]).unwrap_or_default(),
            TokenType::Unknown => "\u{2585}".as_bytes().to_vec(),
            TokenType::Control | TokenType::Unused => Vec::new(),
        }
    }

    /// Concatenated bytes of `ids`; with a space prefix, the space the encoder added is dropped.
    pub fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at_start = true;
        for &id in ids {
            let piece = self.piece_bytes(id);
            if piece.is_empty() {
                continue;
            }
            let skip = usize::from(at_start && self.add_space_prefix && piece.first() == Some(&b' '));
            out.extend_from_slice(&piece[skip..]);
            at_start = false;
        }
        out
    }
}
