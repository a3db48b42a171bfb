//! Tokenizers: GGUF `llama` (SentencePiece) and `gpt2` (byte-level BPE), and HF `tokenizer.json`.

mod bpe;
mod hf;
mod spm;
mod vocab;

pub use bpe::{byte_to_char, SUPPORTED_PRE};
pub use vocab::TokenType;

use crate::error::{HostError, Result};
use rdu_checkpoint::Gguf;
use std::path::Path;

/// A text ↔ token-id mapping loaded from a checkpoint.
pub enum Tokenizer {
    /// GGUF `tokenizer.ggml.model = llama`.
    Spm(Box<spm::Spm>),
    /// GGUF `tokenizer.ggml.model = gpt2`.
    Bpe(Box<bpe::Bpe>),
    /// A HF `tokenizer.json`.
    Hf(Box<hf::HfTokenizer>),
}

impl Tokenizer {
    /// The tokenizer stored in a GGUF file's `tokenizer.ggml.*` metadata.
    pub fn from_gguf(gguf: &Gguf) -> Result<Tokenizer> {
        let err = |problem: String| HostError::Tokenizer { file: gguf.file().to_string(), problem };
        let model = gguf.get_str("tokenizer.ggml.model")?.ok_or_else(|| {
            err("no `tokenizer.ggml.model`; the file carries no tokenizer, pass a tokenizer.json".into())
        })?;
        match model {
            "llama" => Ok(Tokenizer::Spm(Box::new(spm::Spm::from_gguf(gguf)?))),
            "gpt2" => Ok(Tokenizer::Bpe(Box::new(bpe::Bpe::from_gguf(gguf)?))),
            other => Err(err(format!("tokenizer.ggml.model `{other}` is not supported; supported: llama, gpt2"))),
        }
    }

    /// Whether rdu can build the tokenizer a GGUF file carries, read off its metadata without
    /// building it: `Ok(())`, or the one-line reason [`Tokenizer::from_gguf`] would refuse it.
    pub fn check_gguf(gguf: &Gguf) -> Result<()> {
        let err = |problem: String| HostError::Tokenizer { file: gguf.file().to_string(), problem };
        match gguf.get_str("tokenizer.ggml.model")? {
            None => Err(err("no `tokenizer.ggml.model`; the file carries no tokenizer".into())),
            Some("llama") => Ok(()),
            Some("gpt2") => bpe::check_pre(gguf.get_str("tokenizer.ggml.pre")?).map_err(err),
            Some(other) => Err(err(format!("tokenizer.ggml.model `{other}` is not supported; supported: llama, gpt2"))),
        }
    }

    /// The ids that end generation in a GGUF file (EOS, end-of-turn, end-of-message), read off
    /// its metadata without building its tokenizer; empty when it carries no vocabulary.
    pub fn gguf_end_ids(gguf: &Gguf) -> Result<Vec<u32>> {
        match gguf.get_array("tokenizer.ggml.tokens")? {
            Some(tokens) => vocab::end_ids(gguf, tokens.len()),
            None => Ok(Vec::new()),
        }
    }

    /// A HF `tokenizer.json`; BOS/EOS come from `tokenizer_config.json` or `config.json` beside it.
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Tokenizer> {
        Ok(Tokenizer::Hf(Box::new(hf::HfTokenizer::open(path.as_ref())?)))
    }

    /// A HF `tokenizer.json` from its contents (`label` names it in errors), with nothing beside
    /// it: BOS/EOS are the usual names the vocabulary has. For callers that hold the text.
    pub fn from_tokenizer_json_text(text: &str, label: &str) -> Result<Tokenizer> {
        let beside = hf::Beside::default();
        Ok(Tokenizer::Hf(Box::new(hf::HfTokenizer::from_text(text, label.to_string(), &beside)?)))
    }

    /// The ids that end generation for a HF `tokenizer.json`, as [`Tokenizer::from_tokenizer_json`]
    /// finds them, without building the tokenizer.
    pub fn tokenizer_json_end_ids(path: impl AsRef<Path>) -> Result<Vec<u32>> {
        hf::HfTokenizer::end_ids(path.as_ref())
    }

    /// Token ids of `text`, with the BOS id first when `add_bos` (an error if there is none).
    /// User-defined tokens in the text are matched verbatim; control tokens are not parsed.
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Spm(t) => t.encode(text, add_bos, false),
            Tokenizer::Bpe(t) => t.encode(text, add_bos, false),
            Tokenizer::Hf(t) => t.encode(text, add_bos),
        }
    }

    /// Token ids of a rendered chat prompt: as [`Tokenizer::encode`] without a BOS (the
    /// template writes its own), control tokens written in the text (`<start_of_turn>`,
    /// `<|im_start|>`) matched as tokens, as llama.cpp's server tokenizes a templated prompt.
    /// A `tokenizer.json` matches its added tokens in any text already.
    pub fn encode_chat(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Spm(t) => t.encode(text, false, true),
            Tokenizer::Bpe(t) => t.encode(text, false, true),
            Tokenizer::Hf(t) => t.encode(text, false),
        }
    }

    /// The text of `ids`: control/special tokens skipped, byte tokens assembled into UTF-8
    /// (invalid sequences become U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Tokenizer::Spm(t) => String::from_utf8_lossy(&t.decode_bytes(ids)).into_owned(),
            Tokenizer::Bpe(_) => {
                String::from_utf8_lossy(&ids.iter().flat_map(|&id| self.piece_bytes(id)).collect::<Vec<u8>>())
                    .into_owned()
            }
            Tokenizer::Hf(t) => t.decode(ids),
        }
    }

    /// The raw bytes one token stands for (a byte token may be part of a UTF-8 character);
    /// empty for control tokens and ids outside the vocabulary.
    pub fn piece_bytes(&self, id: u32) -> Vec<u8> {
        match self {
            Tokenizer::Spm(t) => t.piece_bytes(id),
            Tokenizer::Bpe(t) => t.piece_bytes(id),
            Tokenizer::Hf(t) => t.piece_bytes(id),
        }
    }

    /// The text of one token, lossily; for streaming whole characters use [`StreamDecoder`].
    pub fn decode_piece(&self, id: u32) -> String {
        String::from_utf8_lossy(&self.piece_bytes(id)).into_owned()
    }

    pub fn bos(&self) -> Option<u32> {
        match self {
            Tokenizer::Spm(t) => t.vocab.bos,
            Tokenizer::Bpe(t) => t.vocab.bos,
            Tokenizer::Hf(t) => t.bos,
        }
    }

    /// Ids that end generation: EOS, then end-of-turn/end-of-message when the file names them.
    pub fn eos(&self) -> Vec<u32> {
        match self {
            Tokenizer::Spm(t) => t.vocab.eos.clone(),
            Tokenizer::Bpe(t) => t.vocab.eos.clone(),
            Tokenizer::Hf(t) => t.eos.clone(),
        }
    }

    /// Whether the model expects a BOS before a prompt (`tokenizer.ggml.add_bos_token`, default
    /// true for `llama`, false for `gpt2`; true for `tokenizer.json` when it has a BOS).
    pub fn add_bos_default(&self) -> bool {
        match self {
            Tokenizer::Spm(t) => t.vocab.add_bos,
            Tokenizer::Bpe(t) => t.vocab.add_bos,
            Tokenizer::Hf(t) => t.bos.is_some(),
        }
    }

    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Spm(t) => t.vocab.len(),
            Tokenizer::Bpe(t) => t.vocab.len(),
            Tokenizer::Hf(t) => t.vocab_size(),
        }
    }

    /// The type of a GGUF token (`None` for `tokenizer.json` or an id outside the vocabulary).
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        match self {
            Tokenizer::Spm(t) => t.vocab.types.get(id as usize).copied(),
            Tokenizer::Bpe(t) => t.vocab.types.get(id as usize).copied(),
            Tokenizer::Hf(_) => None,
        }
    }
}

/// Turns a stream of ids into text, holding back bytes until they form whole UTF-8 characters.
#[derive(Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// The text that `id` completes (possibly empty while a character is incomplete).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        self.pending.extend(tokenizer.piece_bytes(id));
        match std::str::from_utf8(&self.pending) {
            Ok(s) => {
                let s = s.to_string();
                self.pending.clear();
                s
            }
            Err(e) if e.error_len().is_none() => {
                // An incomplete character at the end: emit what is whole, keep the rest.
                let valid = e.valid_up_to();
                let s = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
                self.pending.drain(..valid);
                s
            }
            Err(_) => self.finish(),
        }
    }

    /// Whatever is still held back, lossily.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}
