//! HF `tokenizer.json` through the `tokenizers` crate, with BOS/EOS from `tokenizer_config.json`/`config.json` beside it.

use super::bpe::byte_to_char;
use super::spm::SPACE_MARK;
use super::vocab::parse_byte_token;
use crate::error::{HostError, Result};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// How a token's text maps back to bytes, read from the `decoder` of `tokenizer.json`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PieceStyle {
    /// GPT-2 byte-level: each character stands for one byte.
    ByteLevel,
    /// SentencePiece: `▁` is a space and `<0xXX>` a byte.
    Metaspace,
}

/// The JSON files beside a `tokenizer.json` that name its BOS/EOS (`Value::Null` when absent
/// or unreadable).
#[derive(Clone, Debug, Default)]
pub struct Beside {
    /// `tokenizer_config.json`.
    pub config: Value,
    /// `config.json`.
    pub model_config: Value,
}

/// A `tokenizer.json` tokenizer.
pub struct HfTokenizer {
    file: String,
    inner: tokenizers::Tokenizer,
    style: PieceStyle,
    special: HashSet<u32>,
    to_byte: HashMap<char, u8>,
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
}

const BOS_NAMES: &[&str] = &["<bos>", "<s>", "<|begin_of_text|>", "<｜begin▁of▁sentence｜>"];
const EOS_NAMES: &[&str] = &["<eos>", "</s>", "<|end_of_text|>", "<|endoftext|>", "<｜end▁of▁sentence｜>"];

impl HfTokenizer {
    pub fn open(path: &Path) -> Result<HfTokenizer> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| HostError::Tokenizer { file: file.clone(), problem: format!("cannot read: {e}") })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let beside = Beside {
            config: read_json(&dir.join("tokenizer_config.json")),
            model_config: read_json(&dir.join("config.json")),
        };
        HfTokenizer::from_text(&text, file, &beside)
    }

    /// The tokenizer in `text` (a `tokenizer.json`'s contents, `file` naming it in errors), with
    /// BOS/EOS from the JSON files that would sit beside it.
    pub fn from_text(text: &str, file: String, beside: &Beside) -> Result<HfTokenizer> {
        let err = |problem: String| HostError::Tokenizer { file: file.clone(), problem };
        let json: Value = serde_json::from_str(text).map_err(|e| err(format!("not JSON: {e}")))?;
        check_bpe_merges(&json["model"]).map_err(err)?;
        let inner = guarded(|| tokenizers::Tokenizer::from_bytes(text.as_bytes()))
            .map_err(|e| err(format!("the tokenizers crate cannot load it: {e}")))?;
        let style = if json["decoder"].to_string().contains("ByteLevel")
            || json["pre_tokenizer"].to_string().contains("ByteLevel")
        {
            PieceStyle::ByteLevel
        } else {
            PieceStyle::Metaspace
        };
        let special =
            inner.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect();
        let to_byte = byte_to_char().iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        let by_name = |v: &Value| -> Option<u32> {
            let name = v.as_str().or_else(|| v["content"].as_str())?;
            inner.token_to_id(name)
        };
        let ids = |v: &Value| -> Vec<u32> {
            match v {
                Value::Number(n) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
                Value::Array(a) => a.iter().filter_map(|n| n.as_u64().map(|n| n as u32)).collect(),
                _ => Vec::new(),
            }
        };
        let bos = by_name(&beside.config["bos_token"])
            .or_else(|| ids(&beside.model_config["bos_token_id"]).first().copied())
            .or_else(|| BOS_NAMES.iter().find_map(|n| inner.token_to_id(n)));
        let eos = end_ids_by(beside, &|name| inner.token_to_id(name));
        Ok(HfTokenizer { file, inner, style, special, to_byte, bos, eos })
    }

    /// The ids that end generation, as [`HfTokenizer::open`] finds them, without building the
    /// tokenizer: token names are looked up in the `added_tokens` and `model.vocab` of the file.
    pub fn end_ids(path: &Path) -> Result<Vec<u32>> {
        let file = path.display().to_string();
        let err = |problem: String| HostError::Tokenizer { file: file.clone(), problem };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let json: Value = serde_json::from_str(&text).map_err(|e| err(format!("not JSON: {e}")))?;
        let lookup = |name: &str| -> Option<u32> {
            let added = json["added_tokens"].as_array().into_iter().flatten();
            let id = added.clone().find(|t| t["content"].as_str() == Some(name)).and_then(|t| t["id"].as_u64());
            let id = id.or_else(|| match &json["model"]["vocab"] {
                Value::Object(vocab) => vocab.get(name).and_then(Value::as_u64),
                // Unigram: [[piece, score], ...], the id is the index.
                Value::Array(pieces) => pieces.iter().position(|p| p[0].as_str() == Some(name)).map(|i| i as u64),
                _ => None,
            });
            id.map(|id| id as u32)
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let beside = Beside {
            config: read_json(&dir.join("tokenizer_config.json")),
            model_config: read_json(&dir.join("config.json")),
        };
        Ok(end_ids_by(&beside, &lookup))
    }

    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let enc = guarded(|| self.inner.encode(text, false))
            .map_err(|e| HostError::Tokenizer { file: self.file.clone(), problem: format!("encode: {e}") })?;
        let mut out = Vec::with_capacity(enc.len() + 1);
        if add_bos {
            out.push(self.bos.ok_or_else(|| HostError::Tokenizer {
                file: self.file.clone(),
                problem: "BOS requested but no bos_token in tokenizer_config.json or config.json beside it".into(),
            })?);
        }
        out.extend_from_slice(enc.get_ids());
        Ok(out)
    }

    /// The whole text, through the tokenizer's own decoder (special tokens skipped).
    pub fn decode(&self, ids: &[u32]) -> String {
        guarded(|| self.inner.decode(ids, true)).unwrap_or_else(|_| {
            String::from_utf8_lossy(&ids.iter().flat_map(|&id| self.piece_bytes(id)).collect::<Vec<u8>>()).into_owned()
        })
    }

    /// The bytes one token stands for, for streaming; special tokens give nothing.
    pub fn piece_bytes(&self, id: u32) -> Vec<u8> {
        if self.special.contains(&id) {
            return Vec::new();
        }
        let Some(text) = self.inner.id_to_token(id) else { return Vec::new() };
        match self.style {
            PieceStyle::ByteLevel => super::bpe::unmap_bytes(&text, &self.to_byte),
            PieceStyle::Metaspace => match parse_byte_token(&text) {
                Some(b) => vec![b],
                None => text.replace(SPACE_MARK, " ").into_bytes(),
            },
        }
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// EOS ids: `eos_token` of `tokenizer_config.json` (by name), then `eos_token_id` of
/// `config.json`; if neither names one, the first of the usual EOS names the vocabulary has.
fn end_ids_by(beside: &Beside, id_of: &dyn Fn(&str) -> Option<u32>) -> Vec<u32> {
    let (config, model_config) = (&beside.config, &beside.model_config);
    let v = &config["eos_token"];
    let mut eos: Vec<u32> = v.as_str().or_else(|| v["content"].as_str()).and_then(id_of).into_iter().collect();
    let listed: Vec<u32> = match &model_config["eos_token_id"] {
        Value::Number(n) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
        Value::Array(a) => a.iter().filter_map(|n| n.as_u64().map(|n| n as u32)).collect(),
        _ => Vec::new(),
    };
    for id in listed {
        if !eos.contains(&id) {
            eos.push(id);
        }
    }
    if eos.is_empty() {
        eos.extend(EOS_NAMES.iter().find_map(|n| id_of(n)));
    }
    eos
}

/// A call into the tokenizers crate, its panics (a malformed file can reach some: see
/// [`check_bpe_merges`]) turned into errors: user input never panics rdu.
fn guarded<T>(call: impl FnOnce() -> tokenizers::Result<T>) -> std::result::Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("the tokenizers crate panicked on it".into()),
    }
}

/// The merges of a BPE `model` checked before the tokenizers crate builds them: it copies each
/// merge's pair into a buffer as long as the longest vocabulary entry and strips the
/// `continuing_subword_prefix` off the second token unchecked, so a merge whose result is not
/// in the vocabulary, or whose second token lacks the prefix, panics it (or, cutting a
/// character, breaks its UTF-8 invariant). Found by fuzzing (`rdu-fuzz tokenizer`).
fn check_bpe_merges(model: &Value) -> std::result::Result<(), String> {
    let (Some(vocab), Some(merges)) = (model["vocab"].as_object(), model["merges"].as_array()) else {
        return Ok(());
    };
    let prefix = model["continuing_subword_prefix"].as_str().unwrap_or("");
    let pairs = merges.iter().filter(|m| !m.as_str().is_some_and(|s| s.starts_with("#version")));
    for (rank, merge) in pairs.enumerate() {
        let (a, b) = match merge {
            Value::String(line) => match line.split(' ').collect::<Vec<_>>()[..] {
                [a, b] => (a, b),
                _ => continue,
            },
            Value::Array(pair) => match (pair.first().and_then(Value::as_str), pair.get(1).and_then(Value::as_str)) {
                (Some(a), Some(b)) if pair.len() == 2 => (a, b),
                _ => continue,
            },
            _ => continue,
        };
        if !vocab.contains_key(a) || !vocab.contains_key(b) {
            continue;
        }
        let Some(rest) = b.strip_prefix(prefix) else {
            return Err(format!(
                "model.merges[{rank}]: `{b}` does not start with the continuing_subword_prefix `{prefix}`"
            ));
        };
        if !vocab.contains_key(&format!("{a}{rest}")) {
            return Err(format!("model.merges[{rank}]: `{a}` + `{b}` makes `{a}{rest}`, which model.vocab lacks"));
        }
    }
    Ok(())
}

fn read_json(path: &Path) -> Value {
    std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null)
}
