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
        let err = |problem: String| HostError::Tokenizer { file: file.clone(), problem };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let json: Value = serde_json::from_str(&text).map_err(|e| err(format!("not JSON: {e}")))?;
        let inner = tokenizers::Tokenizer::from_bytes(text.as_bytes())
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
        let dir = path.parent().unwrap_or(Path::new("."));
        let config = read_json(&dir.join("tokenizer_config.json"));
        let model_config = read_json(&dir.join("config.json"));
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
        let bos = by_name(&config["bos_token"])
            .or_else(|| ids(&model_config["bos_token_id"]).first().copied())
            .or_else(|| BOS_NAMES.iter().find_map(|n| inner.token_to_id(n)));
        let eos = end_ids_by(dir, &|name| inner.token_to_id(name));
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
        Ok(end_ids_by(path.parent().unwrap_or(Path::new(".")), &lookup))
    }

    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
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
        self.inner.decode(ids, true).unwrap_or_else(|_| {
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
fn end_ids_by(dir: &Path, id_of: &dyn Fn(&str) -> Option<u32>) -> Vec<u32> {
    let config = read_json(&dir.join("tokenizer_config.json"));
    let model_config = read_json(&dir.join("config.json"));
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

fn read_json(path: &Path) -> Value {
    std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null)
}
