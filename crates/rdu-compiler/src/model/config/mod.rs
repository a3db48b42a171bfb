//! Import of a Hugging Face `config.json` into a [`ModelSpec`]; reads no weights and never
//! guesses a family that `model_type` does not name.
//!
//! Both layouts of a config are read and give equal specs:
//! - the hub layout: top-level `rope_theta`, `rope_scaling` (`type` or `rope_type`),
//!   `partial_rotary_factor`, and Gemma's `rope_local_base_freq`;
//! - the transformers-5 layout: `rope_parameters` (per layer type for Gemma 3) and explicit
//!   `layer_types`.
//!
//! What is required and what is defaulted: the shape of the model (`hidden_size`,
//! `num_hidden_layers`, `num_attention_heads`, `vocab_size`, `intermediate_size` where a dense
//! layer uses it, and the expert count, top-k and expert size where a MoE layer exists) must
//! be in the config, except where the transformers config class of a multimodal text config
//! gives a default that released configs rely on (Gemma 3 `vocab_size` 262208, Qwen3.5
//! `vocab_size` 248320, the Qwen3.5-MoE expert sizes). Every other field takes the default of
//! that family's transformers config class, written next to the serde struct that reads it.
//!
//! Every failure is an [`Error::Config`] naming the field (`text_config.` prefixed inside a
//! multimodal wrapper; `$` for the document as a whole); no JSON makes this module panic.

mod compressed;
mod deepseek;
mod draft;
mod experts;
mod fields;
pub(crate) use fields::MAX_LAYERS;
mod gemma;
mod glm;
mod gpt_oss;
mod hybrid;
mod minimax;
mod quant;
mod qwen_moe;
mod rope;
mod standard;

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::model::spec::{Family, ModelSpec};
use draft::{Draft, LayerDraft};

/// The `model_type` values [`from_config_json`] understands.
pub const MODEL_TYPES: &[&str] = &[
    "llama",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_5_text",
    "qwen3_5_moe_text",
    "gemma3",
    "gemma3_text",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "glm4_moe",
    "minimax_m2",
    "mistral",
    "mixtral",
    "gpt_oss",
];

/// Builds the spec of the model a config.json describes; `name` becomes [`ModelSpec::name`]
/// and the origin named in errors.
pub fn from_config_json(text: &str, name: &str) -> Result<ModelSpec> {
    import(text, name, name)
}

/// Reads `path` (a config.json, or a directory holding one) and builds its spec. The name
/// is the directory's name, or the file's stem (its directory's name when the stem is
/// `config`); errors name the file.
pub fn from_config_path(path: &Path) -> Result<ModelSpec> {
    let file = if path.is_dir() { path.join("config.json") } else { path.to_path_buf() };
    let origin = file.display().to_string();
    let text = std::fs::read_to_string(&file).map_err(|source| Error::Io { path: origin.clone(), source })?;
    import(&text, &model_name(path, &file), &origin)
}

fn model_name(arg: &Path, file: &Path) -> String {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
    let dir = |p: &Path| p.file_name().and_then(|s| s.to_str()).map(str::to_string);
    if arg.is_dir() {
        return dir(arg).unwrap_or_else(|| stem.to_string());
    }
    match file.parent().and_then(dir) {
        Some(parent) if stem == "config" => parent,
        _ => stem.to_string(),
    }
}

fn import(text: &str, name: &str, origin: &str) -> Result<ModelSpec> {
    let top = Ctx { origin, prefix: "" };
    let root: Value = serde_json::from_str(text).map_err(|e| top.err("$", format!("not valid JSON: {e}")))?;
    if !root.is_object() {
        return Err(top.err("$", "expected a JSON object with a `model_type`"));
    }
    let supported = MODEL_TYPES.join(", ");
    let model_type = match root.get("model_type") {
        Some(Value::String(s)) => s.as_str(),
        None | Some(Value::Null) => return Err(top.err("model_type", format!("missing; set one of: {supported}"))),
        Some(other) => return Err(top.err("model_type", format!("expected a string, found {other}"))),
    };
    let draft = match model_type {
        "llama" => standard::build(&top, &root, Family::Llama)?,
        "qwen2" => standard::build(&top, &root, Family::Qwen2)?,
        "qwen3" => standard::build(&top, &root, Family::Qwen3)?,
        "qwen3_moe" => standard::build(&top, &root, Family::Qwen3Moe)?,
        "qwen3_next" => hybrid::build(&top, &root, None, hybrid::Kind::Next)?,
        "qwen3_5" | "qwen3_5_moe" => {
            let kind = if model_type == "qwen3_5" { hybrid::Kind::Dense } else { hybrid::Kind::Moe };
            let (ctx, text) = text_config(&top, &root)?;
            hybrid::build(&ctx, text, Some(&top.parse(&root)?), kind)?
        }
        // Text-only configs as transformers 5 saves a `*ForCausalLM`: the wrapper's
        // `text_config` at the top level.
        "qwen3_5_text" => hybrid::build(&top, &root, None, hybrid::Kind::Dense)?,
        "qwen3_5_moe_text" => hybrid::build(&top, &root, None, hybrid::Kind::Moe)?,
        "gemma3_text" => gemma::build(&top, &root, None)?,
        "gemma3" => {
            let (ctx, text) = text_config(&top, &root)?;
            gemma::build(&ctx, text, Some(&top.parse(&root)?))?
        }
        "deepseek_v2" => deepseek::build(&top, &root, deepseek::Version::V2)?,
        // Kimi K2 is DeepSeek-V3's architecture under its own name.
        "deepseek_v3" | "kimi_k2" => deepseek::build(&top, &root, deepseek::Version::V3)?,
        "glm4_moe" => glm::build(&top, &root)?,
        "minimax_m2" => minimax::build(&top, &root)?,
        "mistral" => standard::build(&top, &root, Family::Mistral)?,
        "mixtral" => standard::build(&top, &root, Family::Mixtral)?,
        "gpt_oss" => gpt_oss::build(&top, &root)?,
        other => return Err(top.err("model_type", format!("unknown model_type `{other}`; supported: {supported}"))),
    };
    let mut spec = draft.assemble(name);
    spec.quantization = quant::quantization(&top, &root)?;
    Ok(spec)
}

/// The `text_config` object of a multimodal wrapper, and the context naming its fields.
fn text_config<'a>(top: &Ctx<'a>, root: &'a Value) -> Result<(Ctx<'a>, &'a Value)> {
    match root.get("text_config") {
        Some(text @ Value::Object(_)) => Ok((Ctx { origin: top.origin, prefix: "text_config." }, text)),
        None | Some(Value::Null) => {
            Err(top.err("text_config", "missing; a multimodal config keeps the language model here"))
        }
        Some(other) => Err(top.err("text_config", format!("expected an object, found {other}"))),
    }
}

/// Where a field comes from: the origin named in errors and the prefix of field names.
#[derive(Clone, Copy)]
pub(super) struct Ctx<'a> {
    origin: &'a str,
    prefix: &'static str,
}

impl Ctx<'_> {
    pub fn err(&self, field: &str, message: impl Into<String>) -> Error {
        let field = match (field, self.prefix) {
            ("$", "") => "$".to_string(),
            ("$", prefix) => prefix.trim_end_matches('.').to_string(),
            (field, prefix) => format!("{prefix}{field}"),
        };
        Error::Config { origin: self.origin.to_string(), field, message: message.into() }
    }

    /// Reads a typed struct from `value`; a type error names the path of the bad field.
    pub fn parse<T: DeserializeOwned>(&self, value: &Value) -> Result<T> {
        self.parse_at(value, "")
    }

    /// [`Ctx::parse`] for an object found at `at` (e.g. `rope_scaling`).
    pub fn parse_at<T: DeserializeOwned>(&self, value: &Value, at: &str) -> Result<T> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let field = match (at.is_empty(), path == ".") {
                (true, true) => "$".to_string(),
                (true, false) => path,
                (false, true) => at.to_string(),
                (false, false) => format!("{at}.{path}"),
            };
            self.err(&field, e.into_inner().to_string())
        })
    }

    pub fn require<T>(&self, value: Option<T>, field: &str) -> Result<T> {
        value.ok_or_else(|| self.err(field, "required field is missing; add it to the config"))
    }

    /// A count that must be at least 1.
    pub fn positive(&self, value: usize, field: &str) -> Result<usize> {
        if value == 0 {
            return Err(self.err(field, "must be at least 1"));
        }
        Ok(value)
    }

    /// A real number that must be finite and greater than 0.
    pub fn positive_f64(&self, value: f64, field: &str) -> Result<f64> {
        if !(value.is_finite() && value > 0.0) {
            return Err(self.err(field, format!("must be a finite number greater than 0, found {value}")));
        }
        Ok(value)
    }
}
