//! GGUF `gpt2` tokenizer: regex pre-tokenisation, byte→unicode mapping and BPE merges by rank.

use super::vocab::{parse_byte_token, Fragment, TokenType, Vocab};
use crate::error::Result;
use fancy_regex::Regex;
use rdu_checkpoint::Gguf;
use std::collections::HashMap;

/// GPT-2's pre-tokeniser (llama.cpp `default`, `gpt-2`).
const GPT2_SPLIT: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3's pre-tokeniser (`llama-bpe`, `llama3`).
const LLAMA3_SPLIT: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's pre-tokeniser (`qwen2`): Llama 3's with single digits.
const QWEN2_SPLIT: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The `tokenizer.ggml.pre` values handled, with their split regex and whether a whole word
/// that is a token skips the merges (llama.cpp's `ignore_merges`).
fn pre_tokenizer(pre: &str) -> Option<(&'static str, bool)> {
    Some(match pre {
        "default" | "gpt-2" | "gpt2" => (GPT2_SPLIT, false),
        "llama-bpe" | "llama3" => (LLAMA3_SPLIT, true),
        "qwen2" => (QWEN2_SPLIT, false),
        _ => return None,
    })
}

/// GPT-2's byte → printable character table.
/// A byte-level piece back to its bytes: each mapped character to its byte, any other
/// character as its own UTF-8.
pub fn unmap_bytes(text: &str, to_byte: &HashMap<char, u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match to_byte.get(&c) {
            Some(&b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

pub fn byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            char::from(b)
        } else {
            extra += 1;
            char::from_u32(255 + extra).expect("below the surrogates")
        };
    }
    table
}

/// Byte-level BPE over a GGUF vocabulary with merges.
pub struct Bpe {
    pub vocab: Vocab,
    split: Regex,
    ignore_merges: bool,
    ranks: HashMap<(String, String), u32>,
    to_char: [char; 256],
    to_byte: HashMap<char, u8>,
}

impl Bpe {
    pub fn from_gguf(gguf: &Gguf) -> Result<Bpe> {
        let vocab = Vocab::from_gguf(gguf, false)?;
        let pre = gguf.get_str("tokenizer.ggml.pre")?.unwrap_or("default");
        let (pattern, ignore_merges) = pre_tokenizer(pre).ok_or_else(|| {
            vocab.err(format!(
                "`tokenizer.ggml.pre` `{pre}` is not supported; supported: default, gpt-2, llama-bpe, llama3, qwen2"
            ))
        })?;
        let split = Regex::new(pattern).map_err(|e| vocab.err(format!("pre-tokeniser regex: {e}")))?;
        let merges = gguf
            .get_str_array("tokenizer.ggml.merges")?
            .ok_or_else(|| vocab.err("no `tokenizer.ggml.merges` array, which a `gpt2` tokenizer needs".into()))?;
        let mut ranks = HashMap::with_capacity(merges.len());
        for (rank, m) in merges.iter().enumerate() {
            // The first token is at least one character, so a merge of " " with " " splits right.
            let first = m.chars().next().map_or(0, char::len_utf8);
            let (a, b) = m[first..]
                .find(' ')
                .map(|at| (&m[..first + at], &m[first + at + 1..]))
                .filter(|(_, b)| !b.is_empty())
                .ok_or_else(|| vocab.err(format!("merge {rank} {m:?} is not two tokens separated by a space")))?;
            ranks.entry((a.to_string(), b.to_string())).or_insert(rank as u32);
        }
        let to_char = byte_to_char();
        let to_byte = to_char.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        Ok(Bpe { vocab, split, ignore_merges, ranks, to_char, to_byte })
    }

    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        if add_bos {
            out.push(self.vocab.require_bos()?);
        }
        for frag in self.vocab.split_specials(text) {
            match frag {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(s) => {
                    let mut last = 0;
                    for m in self.split.find_iter(s) {
                        let m = m.map_err(|e| self.vocab.err(format!("pre-tokeniser: {e}")))?;
                        if m.start() > last {
                            self.encode_word(&s[last..m.start()], &mut out)?;
                        }
                        self.encode_word(m.as_str(), &mut out)?;
                        last = m.end();
                    }
                    if last < s.len() {
                        self.encode_word(&s[last..], &mut out)?;
                    }
                }
            }
        }
        Ok(out)
    }

    fn encode_word(&self, word: &str, out: &mut Vec<u32>) -> Result<()> {
        let mapped: String = word.bytes().map(|b| self.to_char[b as usize]).collect();
        if self.ignore_merges {
            if let Some(id) = self.vocab.text_token(&mapped) {
                out.push(id);
                return Ok(());
            }
        }
        let mut parts: Vec<String> = mapped.chars().map(String::from).collect();
        // Merge the lowest-ranked adjacent pair (leftmost on ties) until none is in the merges.
        let rank = |parts: &[String], i: usize| self.ranks.get(&(parts[i].clone(), parts[i + 1].clone())).copied();
        while let Some((_, i)) = (0..parts.len().saturating_sub(1)).filter_map(|i| Some((rank(&parts, i)?, i))).min() {
            let right = parts.remove(i + 1);
            parts[i].push_str(&right);
        }
        for part in parts {
            match self.vocab.text_token(&part) {
                Some(id) => out.push(id),
                None => {
                    for c in part.chars() {
                        let id =
                            self.vocab.text_token(c.encode_utf8(&mut [0; 4])).or(self.vocab.unk).ok_or_else(|| {
                                self.vocab.err(format!(
                                    "{word:?}: {c:?} is not in the vocabulary and there is no unknown token"
                                ))
                            })?;
                        out.push(id);
                    }
                }
            }
        }
        Ok(())
    }

    /// The bytes one token stands for: mapped characters back to bytes, control tokens → nothing.
    pub fn piece_bytes(&self, id: u32) -> Vec<u8> {
        let Some(text) = self.vocab.check_id(id) else { return Vec::new() };
        match self.vocab.types[id as usize] {
            TokenType::Normal => unmap_bytes(text, &self.to_byte),
            TokenType::UserDefined | TokenType::Unknown => text.as_bytes().to_vec(),
            TokenType::Byte => parse_byte_token(text).map(|b| vec![b]).unwrap_or_default(),
            TokenType::Control | TokenType::Unused => Vec::new(),
        }
    }
}
