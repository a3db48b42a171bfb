//! The OpenAI request bodies this server takes, how they are checked, and the error body every
//! refusal carries (`{"error": {"message", "type", "param", "code"}}`).

use rdu_host::{Sampling, Tokenizer};
use serde::Deserialize;
use serde_json::{json, Value};

/// A refusal: HTTP status and OpenAI-style error fields.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    /// `invalid_request_error`, `not_found_error`, `rate_limit_error`, `server_error`.
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds a client should wait before retrying (`Retry-After`).
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_string),
            code: None,
            retry_after: None,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError { status: 500, kind: "server_error", ..ApiError::invalid(None, message) }
    }

    /// 429 (the queue is full) or 503 (shutting down), with `Retry-After`.
    pub fn busy(status: u16, message: impl Into<String>) -> ApiError {
        let kind = if status == 429 { "rate_limit_error" } else { "server_error" };
        ApiError { status, kind, retry_after: Some(1), ..ApiError::invalid(None, message) }
    }

    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

/// `prompt`: one text or one list of token ids (a batch of prompts is refused: send one request
/// each).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Ids(Vec<i64>),
    Many(Vec<Value>),
}

/// `stop`: one string or up to four.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// The generation fields both endpoints share.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Params {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub n: Option<i64>,
    /// Not OpenAI's: each choice also carries its generated token ids (`token_ids`) and the
    /// prompt's (`prompt_token_ids`, in a stream's first chunk), as vLLM's `return_token_ids` does.
    pub return_token_ids: Option<bool>,
}

/// `POST /v1/completions`.
#[derive(Clone, Debug)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    pub params: Params,
}

/// `POST /v1/chat/completions`: the messages go to the chat template as they are.
#[derive(Clone, Debug)]
pub struct ChatRequest {
    pub messages: Vec<Value>,
    pub params: Params,
}

impl CompletionRequest {
    pub fn parse(body: &[u8]) -> Result<CompletionRequest, ApiError> {
        let v = json_object(body)?;
        Ok(CompletionRequest { prompt: field(&v, "prompt")?, params: params(&v)? })
    }
}

impl ChatRequest {
    pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
        let v = json_object(body)?;
        Ok(ChatRequest { messages: field(&v, "messages")?, params: params(&v)? })
    }
}

/// The body as a JSON object, or a refusal saying why it is not one.
fn json_object(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(None, format!("the body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::invalid(None, "the body must be a JSON object"));
    }
    Ok(v)
}

/// The required field `name` of `v`.
fn field<T: serde::de::DeserializeOwned>(v: &Value, name: &str) -> Result<T, ApiError> {
    let value = v.get(name).ok_or_else(|| ApiError::invalid(Some(name), format!("`{name}` is required")))?;
    T::deserialize(value).map_err(|e| ApiError::invalid(Some(name), format!("`{name}`: {e}")))
}

/// The generation fields of `v`, a wrong type named by its path.
fn params(v: &Value) -> Result<Params, ApiError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        ApiError::invalid(Some(&path), format!("`{path}`: {}", e.into_inner()))
    })
}

/// What a checked request asks the worker for.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// `None`: until an end-of-sequence token or the context is full.
    pub max_tokens: Option<usize>,
    pub sampling: Sampling,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub return_token_ids: bool,
}

/// The served model's name; refuses another (404, as OpenAI does for an unknown model).
pub fn check_model(params: &Params, served: &str) -> Result<(), ApiError> {
    match &params.model {
        Some(m) if m != served => Err(ApiError {
            status: 404,
            kind: "not_found_error",
            ..ApiError::invalid(Some("model"), format!("the model `{m}` does not exist; this server serves `{served}`"))
        }
        .with_code("model_not_found")),
        _ => Ok(()),
    }
}

/// Checks the sampling and stopping fields. `default_max` is the endpoint's default
/// `max_tokens` (16 for completions, none for chat, as OpenAI has them); `seed` seeds sampling
/// when the request gives none.
pub fn generation(p: &Params, default_max: Option<usize>, seed: u64) -> Result<Generation, ApiError> {
    let bad = |param: &str, problem: String| Err(ApiError::invalid(Some(param), problem));
    let max = match (p.max_completion_tokens, p.max_tokens) {
        (Some(m), _) => Some(("max_completion_tokens", m)),
        (None, Some(m)) => Some(("max_tokens", m)),
        (None, None) => None,
    };
    let max_tokens = match max {
        Some((param, m)) if m < 1 => return bad(param, format!("{param} {m} must be at least 1")),
        Some((_, m)) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
        None => default_max,
    };
    let temperature = p.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return bad("temperature", format!("temperature {temperature} must be between 0 and 2"));
    }
    let top_p = p.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return bad("top_p", format!("top_p {top_p} must be in (0, 1]"));
    }
    let top_k = match p.top_k.unwrap_or(0) {
        // -1 is vLLM's "every token".
        -1 | 0 => 0,
        k if k < 0 => return bad("top_k", format!("top_k {k} must be at least 0 (0 or -1: every token)")),
        k => usize::try_from(k).unwrap_or(usize::MAX),
    };
    if let Some(n) = p.n.filter(|&n| n != 1) {
        return bad("n", format!("n {n} is not supported: this server returns one choice, send n = 1"));
    }
    let stop = match &p.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) if v.len() > 4 => return bad("stop", format!("stop holds {} strings; at most 4", v.len())),
        Some(Stop::Many(v)) => v.clone(),
    };
    if stop.iter().any(String::is_empty) {
        return bad("stop", "a stop string is empty".into());
    }
    let seed = p.seed.map_or(seed, |s| s as u64);
    Ok(Generation {
        max_tokens,
        sampling: Sampling { temperature: temperature as f32, top_k, top_p: top_p as f32, seed },
        stop,
        stream: p.stream.unwrap_or(false),
        include_usage: p.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false),
        return_token_ids: p.return_token_ids.unwrap_or(false),
    })
}

/// A completion prompt's ids: the text tokenized (with a BOS where the model expects one), or
/// the ids given, each below `vocab`.
pub fn prompt_ids(prompt: &Prompt, vocab: usize, tokenizer: Option<&Tokenizer>) -> Result<Vec<u32>, ApiError> {
    let ids = match prompt {
        Prompt::Text(text) => match tokenizer {
            Some(t) => {
                t.encode(text, t.add_bos_default()).map_err(|e| ApiError::invalid(Some("prompt"), e.to_string()))?
            }
            None => {
                return Err(ApiError::invalid(
                    Some("prompt"),
                    "this model has no tokenizer: give the prompt as a list of token ids",
                ))
            }
        },
        Prompt::Ids(ids) => ids
            .iter()
            .map(|&t| {
                u32::try_from(t).ok().filter(|&t| (t as usize) < vocab).ok_or_else(|| {
                    ApiError::invalid(
                        Some("prompt"),
                        format!("token id {t} is out of range for a vocabulary of {vocab}"),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
        Prompt::Many(_) => {
            return Err(ApiError::invalid(
                Some("prompt"),
                "a list of prompts is not supported: send one request per prompt",
            ))
        }
    };
    if ids.is_empty() {
        return Err(ApiError::invalid(Some("prompt"), "the prompt has no tokens"));
    }
    Ok(ids)
}

/// Refuses a prompt that does not fit in the context (`context_length_exceeded`, as OpenAI names it).
pub fn check_length(prompt: usize, ctx: usize) -> Result<(), ApiError> {
    if prompt > ctx {
        let message = format!("the prompt has {prompt} tokens but this server's context holds {ctx}; shorten it");
        return Err(ApiError::invalid(Some("prompt"), message).with_code("context_length_exceeded"));
    }
    Ok(())
}
