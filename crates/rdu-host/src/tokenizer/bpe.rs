//! GGUF `gpt2` tokenizer: regex pre-tokenisation, byte→unicode mapping and BPE merges by rank.

use super::vocab::{parse_byte_token, Fragment, TokenType, Vocab};
use crate::error::Result;
use fancy_regex::Regex;
use rdu_checkpoint::Gguf;
use std::collections::HashMap;

// The pre-tokenisers of llama.cpp's vocabulary code (`llm_tokenizer_bpe`), as data: the
// regexes of each `tokenizer.ggml.pre` type, applied in turn (each one splits the pieces the
// previous one left, and what it does not match stays a piece of its own).

/// GPT-2's split (llama.cpp's `gpt-2`; the second step of `default`).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's split (`llama3`, `llama-v3`, `llama-bpe`).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's split (`qwen2`, `deepseek-r1-qwen`): Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 3.5's split (`qwen35`): Qwen 2's with combining marks joining letters.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// llama.cpp's `default`: punctuation runs, then GPT-2's split, then digit runs, then three ASCII digits.
const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"];
/// DeepSeek LLM (`deepseek-llm`, DeepSeek-V2): newlines, then runs of letters of the cased
/// scripts (an explicit class), runs of ASCII and full-width punctuation, trailing whitespace,
/// CJK and Hangul runs, digit runs.
const DEEPSEEK_LLM: &[&str] = &[
    "[\r\n]",
    "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+",
    "\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+",
    "\\s+$",
    "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+",
    "\\p{N}+",
];
/// DeepSeek V3 (`deepseek-v3`): runs of up to three digits, CJK and kana runs, then a split
/// keeping an ASCII punctuation mark before a Latin word and marks with their letters.
const DEEPSEEK_V3: &[&str] = &[
    r"\p{N}{1,3}",
    "[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];

/// The `tokenizer.ggml.pre` values rdu tokenises, as llama.cpp names them.
pub const SUPPORTED_PRE: &str =
    "default, gpt-2, llama3, llama-v3, llama-bpe, qwen2, deepseek-r1-qwen, qwen35, deepseek-llm, deepseek-v3";

/// The regexes of `pre`, and whether a piece that is a token skips the merges (llama.cpp's
/// `ignore_merges`); `None` for a type rdu does not know.
fn pre_tokenizer(pre: &str) -> Option<(&'static [&'static str], bool)> {
    Some(match pre {
        "default" => (DEFAULT, false),
        "gpt-2" => (&[GPT2], false),
        "llama3" | "llama-v3" | "llama-bpe" => (&[LLAMA3], true),
        "qwen2" | "deepseek-r1-qwen" => (&[QWEN2], false),
        "qwen35" => (&[QWEN35], false),
        "deepseek-llm" => (DEEPSEEK_LLM, false),
        "deepseek-v3" => (DEEPSEEK_V3, false),
        _ => return None,
    })
}

/// Whether rdu can pre-tokenise `pre` (a file without `tokenizer.ggml.pre` is `default`):
/// the one-line reason when not.
pub fn check_pre(pre: Option<&str>) -> std::result::Result<(), String> {
    let pre = pre.unwrap_or("default");
    match pre_tokenizer(pre) {
        Some(_) => Ok(()),
        None => Err(format!("`tokenizer.ggml.pre` `{pre}` is not supported; supported: {SUPPORTED_PRE}")),
    }
}

/// Splits `text` into the pieces BPE merges within, as llama.cpp's `unicode_regex_split` does:
/// each regex in turn over each piece so far, unmatched stretches kept as pieces.
/// llama.cpp reads every non-ASCII whitespace character as U+000B, so the regexes run over
/// that reading (a character class naming U+3000 does not match it; `\s` does).
fn split<'t>(steps: &[Regex], text: &'t str) -> std::result::Result<Vec<&'t str>, fancy_regex::Error> {
    let wide_space = |c: char| !c.is_ascii() && c.is_whitespace();
    let (scan, back): (std::borrow::Cow<'_, str>, Option<Vec<usize>>) = if text.chars().any(wide_space) {
        // `back[i]`: the byte of `text` at byte `i` of the reading (at character starts).
        let mut scan = String::with_capacity(text.len());
        let mut back = vec![0; text.len() + 1];
        for (at, c) in text.char_indices() {
            back[scan.len()] = at;
            scan.push(if wide_space(c) { '\u{B}' } else { c });
        }
        back[scan.len()] = text.len();
        (scan.into(), Some(back))
    } else {
        (text.into(), None)
    };
    let mut pieces = vec![(0, scan.len())];
    for re in steps {
        let mut next = Vec::with_capacity(pieces.len());
        for (a, b) in pieces {
            let mut last = a;
            for m in re.find_iter(&scan[a..b]) {
                let m = m?;
                let (start, end) = (a + m.start(), a + m.end());
                if start > last {
                    next.push((last, start));
                }
                if end > start {
                    next.push((start, end));
                }
                last = end;
            }
            if last < b {
                next.push((last, b));
            }
        }
        pieces = next;
    }
    Ok(pieces
        .into_iter()
        .map(|(a, b)| match &back {
            Some(back) => &text[back[a]..back[b]],
            None => &text[a..b],
        })
        .collect())
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
    steps: Vec<Regex>,
    ignore_merges: bool,
    ranks: HashMap<(String, String), u32>,
    to_char: [char; 256],
    to_byte: HashMap<char, u8>,
}

impl Bpe {
    pub fn from_gguf(gguf: &Gguf) -> Result<Bpe> {
        let vocab = Vocab::from_gguf(gguf, false)?;
        let pre = gguf.get_str("tokenizer.ggml.pre")?;
        check_pre(pre).map_err(|e| vocab.err(e))?;
        let (patterns, ignore_merges) = pre_tokenizer(pre.unwrap_or("default")).expect("checked");
        let steps = patterns
            .iter()
            .map(|p| Regex::new(p).map_err(|e| vocab.err(format!("pre-tokeniser regex: {e}"))))
            .collect::<Result<Vec<_>>>()?;
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
        Ok(Bpe { vocab, steps, ignore_merges, ranks, to_char, to_byte })
    }

    /// Token ids of `text`; with `controls`, control tokens written in it are matched too.
    pub fn encode(&self, text: &str, add_bos: bool, controls: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        if add_bos {
            out.push(self.vocab.require_bos()?);
        }
        for frag in self.vocab.split_specials(text, controls) {
            match frag {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(s) => {
                    let words = split(&self.steps, s).map_err(|e| self.vocab.err(format!("pre-tokeniser: {e}")))?;
                    for word in words {
                        self.encode_word(word, &mut out)?;
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
