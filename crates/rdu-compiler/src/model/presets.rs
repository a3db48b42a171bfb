//! Built-in models: the real config.json files in `presets/` and the tiny configs in
//! `presets/tiny/`, compiled into the binary and imported through the same
//! [`config::from_config_json`] as any user file.

use std::path::Path;

use crate::error::{Error, Result};
use crate::model::config;
use crate::model::spec::ModelSpec;

/// Every preset, by name: a file's name without `.json`. Sorted by name.
///
/// The tiny presets have d_model 64, vocab 256, 4096 positions and 4–6 layers, and every
/// projection's input dim is a multiple of 32 (one Q8_0 block). Each holds at least two
/// distinct layers where its family allows: Gemma sliding/full; Qwen3-Next/3.5 deltanet/full
/// attention; DeepSeek-V2/V3 and GLM-4.5 a dense first layer then MoE; MiniMax-M2 is MoE in
/// every layer; Qwen3-MoE a dense `mlp_only_layers` entry; Qwen2/3 sliding layers from
/// `max_window_layers` on; gpt-oss sliding and full layers as `layer_types` says. Llama,
/// Mistral and Mixtral layers are uniform by construction: their configs have no per-layer
/// setting.
const PRESETS: &[(&str, &str)] = &[
    ("deepseek-v2", include_str!("../../presets/deepseek-v2.json")),
    ("deepseek-v2-lite", include_str!("../../presets/deepseek-v2-lite.json")),
    ("deepseek-v3", include_str!("../../presets/deepseek-v3.json")),
    ("gemma-3-270m", include_str!("../../presets/gemma-3-270m.json")),
    ("gemma-3-27b-it", include_str!("../../presets/gemma-3-27b-it.json")),
    ("glm-4.5", include_str!("../../presets/glm-4.5.json")),
    ("glm-4.5-air", include_str!("../../presets/glm-4.5-air.json")),
    ("glm-4.5-fp8", include_str!("../../presets/glm-4.5-fp8.json")),
    ("gpt-oss-120b", include_str!("../../presets/gpt-oss-120b.json")),
    ("gpt-oss-20b", include_str!("../../presets/gpt-oss-20b.json")),
    ("kimi-k2", include_str!("../../presets/kimi-k2.json")),
    ("llama-3.1-405b", include_str!("../../presets/llama-3.1-405b.json")),
    ("llama-3.1-70b", include_str!("../../presets/llama-3.1-70b.json")),
    ("llama-3.1-8b", include_str!("../../presets/llama-3.1-8b.json")),
    ("llama-3.2-1b", include_str!("../../presets/llama-3.2-1b.json")),
    ("minimax-m2", include_str!("../../presets/minimax-m2.json")),
    ("mistral-7b", include_str!("../../presets/mistral-7b.json")),
    ("mixtral-8x7b", include_str!("../../presets/mixtral-8x7b.json")),
    ("qwen3-0.6b", include_str!("../../presets/qwen3-0.6b.json")),
    ("qwen3-8b", include_str!("../../presets/qwen3-8b.json")),
    ("qwen3-next-80b-a3b", include_str!("../../presets/qwen3-next-80b-a3b.json")),
    ("qwen3.5-27b", include_str!("../../presets/qwen3.5-27b.json")),
    ("qwen3.6-27b", include_str!("../../presets/qwen3.6-27b.json")),
    ("qwen3.6-35b-a3b", include_str!("../../presets/qwen3.6-35b-a3b.json")),
    ("tiny-deepseek-v2", include_str!("../../presets/tiny/tiny-deepseek-v2.json")),
    ("tiny-deepseek-v2-lite", include_str!("../../presets/tiny/tiny-deepseek-v2-lite.json")),
    ("tiny-deepseek-v3", include_str!("../../presets/tiny/tiny-deepseek-v3.json")),
    ("tiny-gemma3", include_str!("../../presets/tiny/tiny-gemma3.json")),
    ("tiny-glm4-moe", include_str!("../../presets/tiny/tiny-glm4-moe.json")),
    ("tiny-gpt-oss", include_str!("../../presets/tiny/tiny-gpt-oss.json")),
    ("tiny-llama", include_str!("../../presets/tiny/tiny-llama.json")),
    ("tiny-minimax-m2", include_str!("../../presets/tiny/tiny-minimax-m2.json")),
    ("tiny-mistral", include_str!("../../presets/tiny/tiny-mistral.json")),
    ("tiny-mixtral", include_str!("../../presets/tiny/tiny-mixtral.json")),
    ("tiny-qwen2", include_str!("../../presets/tiny/tiny-qwen2.json")),
    ("tiny-qwen3", include_str!("../../presets/tiny/tiny-qwen3.json")),
    ("tiny-qwen3-moe", include_str!("../../presets/tiny/tiny-qwen3-moe.json")),
    ("tiny-qwen3-next", include_str!("../../presets/tiny/tiny-qwen3-next.json")),
    ("tiny-qwen3.5", include_str!("../../presets/tiny/tiny-qwen3.5.json")),
    ("tiny-qwen3.5-moe", include_str!("../../presets/tiny/tiny-qwen3.5-moe.json")),
];

/// The preset names, sorted.
pub fn names() -> Vec<&'static str> {
    PRESETS.iter().map(|(name, _)| *name).collect()
}

/// The spec of a preset, or `None` when no preset has that name.
pub fn get(name: &str) -> Option<ModelSpec> {
    load(name).and_then(Result::ok)
}

/// The config.json text a preset was built from.
pub fn config_text(name: &str) -> Option<&'static str> {
    PRESETS.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}

/// What a `--model` argument names: a preset, a config.json, a directory holding one, or a
/// `.gguf` file.
pub fn resolve(model_arg: &str) -> Result<ModelSpec> {
    if let Some(spec) = load(model_arg) {
        return spec;
    }
    let path = Path::new(model_arg);
    if path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        return crate::model::gguf::from_gguf_path(path);
    }
    if path.is_file() || path.join("config.json").is_file() {
        return config::from_config_path(path);
    }
    Err(Error::UnknownModel(model_arg.to_string()))
}

fn load(name: &str) -> Option<Result<ModelSpec>> {
    config_text(name).map(|text| config::from_config_json(text, name))
}
