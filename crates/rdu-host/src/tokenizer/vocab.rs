//! The GGUF vocabulary shared by the SPM and BPE tokenizers: tokens, types, scores, special ids and the split on special tokens.

use crate::error::{HostError, Result};
use rdu_checkpoint::Gguf;

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    fn from_gguf(value: i64) -> Option<TokenType> {
        Some(match value {
            0 | 1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }
}

/// A piece of input text after splitting on user-defined tokens.
#[derive(Debug, PartialEq)]
pub enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// Tokens, their types and scores, the text → id index and the special ids of a GGUF file.
pub struct Vocab {
    pub file: String,
    tokens: Pieces,
    pub types: Vec<TokenType>,
    pub scores: Vec<f32>,
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
    pub unk: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`: whether the model expects a BOS (the caller decides).
    pub add_bos: bool,
    /// User-defined tokens, longest text first: matched verbatim in the input before splitting.
    specials: Vec<u32>,
    /// User-defined and control tokens, longest text first: what a chat prompt's text matches
    /// verbatim (its template writes control tokens such as `<start_of_turn>`).
    specials_and_controls: Vec<u32>,
}

impl Vocab {
    /// Reads `tokenizer.ggml.{tokens,token_type,scores,*_token_id,add_bos_token}`.
    pub fn from_gguf(gguf: &Gguf, add_bos_default: bool) -> Result<Vocab> {
        let file = gguf.file().to_string();
        let err = |problem: String| HostError::Tokenizer { file: file.clone(), problem };
        let tokens =
            Pieces::new(&gguf.get_str_array("tokenizer.ggml.tokens")?.ok_or_else(|| {
                err("no `tokenizer.ggml.tokens` array; use a GGUF converted with its tokenizer".into())
            })?);
        if tokens.ends.is_empty() {
            return Err(err("`tokenizer.ggml.tokens` is empty".into()));
        }
        let n = tokens.ends.len();
        let types = match gguf.get_i64_array("tokenizer.ggml.token_type")? {
            None => vec![TokenType::Normal; n],
            Some(raw) if raw.len() == n => raw
                .iter()
                .map(|&t| TokenType::from_gguf(t).ok_or_else(|| err(format!("token type {t} is not one of 0..=6"))))
                .collect::<Result<_>>()?,
            Some(raw) => {
                return Err(err(format!("`tokenizer.ggml.token_type` has {} entries for {n} tokens", raw.len())))
            }
        };
        let scores = match gguf.get_f32_array("tokenizer.ggml.scores")? {
            None => vec![0.0; n],
            Some(s) if s.len() == n => s,
            Some(s) => return Err(err(format!("`tokenizer.ggml.scores` has {} entries for {n} tokens", s.len()))),
        };
        let bos = special_id(gguf, "tokenizer.ggml.bos_token_id", n)?;
        let unk = special_id(gguf, "tokenizer.ggml.unknown_token_id", n)?;
        let eos = end_ids(gguf, n)?;
        let add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token")?.unwrap_or(add_bos_default);
        let mut specials: Vec<u32> = (0..n as u32)
            .filter(|&i| types[i as usize] == TokenType::UserDefined && !tokens.get(i).is_empty())
            .collect();
        specials.sort_by_key(|&i| std::cmp::Reverse(tokens.get(i).len()));
        let mut specials_and_controls: Vec<u32> = (0..n as u32)
            .filter(|&i| matches!(types[i as usize], TokenType::UserDefined | TokenType::Control))
            .filter(|&i| !tokens.get(i).is_empty())
            .collect();
        specials_and_controls.sort_by_key(|&i| std::cmp::Reverse(tokens.get(i).len()));
        Ok(Vocab { file, tokens, types, scores, bos, eos, unk, add_bos, specials, specials_and_controls })
    }

    pub fn len(&self) -> usize {
        self.tokens.ends.len()
    }

    pub fn err(&self, problem: String) -> HostError {
        HostError::Tokenizer { file: self.file.clone(), problem }
    }

    /// The id of `text` if it is a token that plain text may produce (normal or user-defined).
    pub fn text_token(&self, text: &str) -> Option<u32> {
        let id = self.id(text)?;
        matches!(self.types[id as usize], TokenType::Normal | TokenType::UserDefined).then_some(id)
    }

    /// The BOS id, or an error saying the file has none.
    pub fn require_bos(&self) -> Result<u32> {
        self.bos.ok_or_else(|| self.err("BOS requested but `tokenizer.ggml.bos_token_id` is absent".into()))
    }

    /// Splits `text` on every occurrence of a user-defined token (and, with `controls`, of a
    /// control token), longest tokens first.
    pub fn split_specials<'a>(&self, text: &'a str, controls: bool) -> Vec<Fragment<'a>> {
        let mut frags = vec![Fragment::Text(text)];
        let specials = if controls { &self.specials_and_controls } else { &self.specials };
        for &id in specials {
            let pat = self.tokens.get(id);
            if !text.contains(pat) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len());
            for frag in frags {
                let Fragment::Text(mut rest) = frag else {
                    next.push(frag);
                    continue;
                };
                while let Some(at) = rest.find(pat) {
                    if at > 0 {
                        next.push(Fragment::Text(&rest[..at]));
                    }
                    next.push(Fragment::Token(id));
                    rest = &rest[at + pat.len()..];
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            frags = next;
        }
        frags
    }

    /// The text of token `id`, or `None` outside the vocabulary.
    pub fn check_id(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.len()).then(|| self.tokens.get(id))
    }

    /// The id of the token whose text is `text` (the first of duplicate texts, as in
    /// llama.cpp's `token_to_id`).
    pub fn id(&self, text: &str) -> Option<u32> {
        self.tokens.id(text)
    }
}

/// Every token's text in one buffer, and the ids ordered by text for lookups: a few bytes a
/// token (a 262,144-token vocabulary takes about 5 MB, where a `String` a token and a hash map
/// from text to id took about 36 MB).
struct Pieces {
    text: String,
    /// Where each token's text ends in `text` (it starts where the one before ends).
    ends: Vec<usize>,
    /// Ids in the order of their texts (bytewise), only the first id of duplicate texts.
    by_text: Vec<u32>,
}

impl Pieces {
    fn new(tokens: &[&str]) -> Pieces {
        let mut text = String::with_capacity(tokens.iter().map(|t| t.len()).sum());
        let ends = tokens
            .iter()
            .map(|t| {
                text.push_str(t);
                text.len()
            })
            .collect();
        let mut pieces = Pieces { text, ends, by_text: Vec::new() };
        let mut by_text: Vec<u32> = (0..tokens.len() as u32).collect();
        // Stable: equal texts stay in id order, so the first of them is kept.
        by_text.sort_by(|&a, &b| pieces.get(a).cmp(pieces.get(b)));
        by_text.dedup_by(|later, first| pieces.get(*later) == pieces.get(*first));
        pieces.by_text = by_text;
        pieces
    }

    /// The text of token `id` (which must be in the vocabulary).
    fn get(&self, id: u32) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }

    fn id(&self, text: &str) -> Option<u32> {
        self.by_text.binary_search_by(|&id| self.get(id).cmp(text)).ok().map(|at| self.by_text[at])
    }
}

/// A special token id named by `key`, if set (-1 is unset); an error outside the vocabulary of `n`.
fn special_id(gguf: &Gguf, key: &str, n: usize) -> Result<Option<u32>> {
    match gguf.get_i64(key)? {
        None | Some(-1) => Ok(None),
        Some(v) if v >= 0 && (v as usize) < n => Ok(Some(v as u32)),
        Some(v) => Err(HostError::Tokenizer {
            file: gguf.file().to_string(),
            problem: format!("`{key}` is {v}, outside the vocabulary of {n} tokens"),
        }),
    }
}

/// The ids that end generation, EOS then end-of-turn and end-of-message, for a vocabulary of `n`.
pub fn end_ids(gguf: &Gguf, n: usize) -> Result<Vec<u32>> {
    let mut eos = Vec::new();
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        if let Some(t) = special_id(gguf, key, n)? {
            if !eos.contains(&t) {
                eos.push(t);
            }
        }
    }
    Ok(eos)
}

/// Parses a `<0xXX>` byte token.
pub fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}
