//! Chat templates: the checkpoint's own Jinja template (GGUF `tokenizer.chat_template`, or
//! `chat_template` in a HF directory's `tokenizer_config.json` / `chat_template.jinja`),
//! rendered by `minijinja` with Python's string methods (`pycompat`) and `raise_exception`, as
//! transformers' `apply_chat_template` renders it.

use std::path::Path;

use minijinja::{Environment, Error, ErrorKind, Value};
use rdu_checkpoint::Gguf;
use serde_json::Value as Json;

/// A chat template and the special tokens' texts it is rendered with.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    pub source: String,
    pub bos_token: String,
    pub eos_token: String,
}

impl ChatTemplate {
    /// The template a checkpoint carries: a GGUF file's `tokenizer.chat_template`, or a HF
    /// directory's `chat_template.jinja` or `tokenizer_config.json` `chat_template` (the one
    /// named `default` when it lists several). `None` when it has none.
    pub fn of_checkpoint(path: &Path) -> Result<Option<ChatTemplate>, String> {
        let is_gguf = path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        if is_gguf {
            let gguf = Gguf::open(path).map_err(|e| e.to_string())?;
            return of_gguf(&gguf);
        }
        if path.is_dir() {
            return of_hf_dir(path);
        }
        Ok(None)
    }

    /// `source` rendered with the checkpoint's BOS and EOS texts (a GGUF vocabulary's, or a HF
    /// directory's `tokenizer_config.json`'s): a template given apart from the checkpoint.
    pub fn with_checkpoint_specials(source: String, path: &Path) -> Result<ChatTemplate, String> {
        let is_gguf = path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        let (bos_token, eos_token) = if is_gguf {
            gguf_specials(&Gguf::open(path).map_err(|e| e.to_string())?)?
        } else {
            let config = std::fs::read_to_string(path.join("tokenizer_config.json")).unwrap_or_default();
            let config: Json = serde_json::from_str(&config).unwrap_or(Json::Null);
            (special(&config, "bos_token"), special(&config, "eos_token"))
        };
        Ok(ChatTemplate { source, bos_token, eos_token })
    }

    /// Checks that the template parses, so that a broken one is refused at start-up.
    pub fn check(&self) -> Result<(), String> {
        let mut env = environment();
        env.add_template("chat", &self.source).map_err(|e| format!("the chat template does not parse: {e:#}"))
    }

    /// The prompt text for `messages` (each `{"role", "content"}`), with the generation prompt.
    pub fn render(&self, messages: &[Json]) -> Result<String, String> {
        let mut env = environment();
        env.add_template("chat", &self.source).map_err(|e| format!("the chat template does not parse: {e:#}"))?;
        let template = env.get_template("chat").map_err(|e| e.to_string())?;
        let ctx = minijinja::context! {
            messages => Value::from_serialize(messages),
            add_generation_prompt => true,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        template.render(ctx).map_err(|e| match e.kind() {
            ErrorKind::InvalidOperation => {
                format!("the chat template refused the messages: {}", e.detail().unwrap_or(""))
            }
            _ => format!("rendering the chat template: {e}"),
        })
    }
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> Result<Value, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, message))
    });
    env.add_function("strftime_now", strftime_now);
    env
}

/// Today's date (UTC) for templates that print it: `%Y`, `%m`, `%d`, `%b`, `%B` supported.
fn strftime_now(format: String) -> String {
    let days =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400) as i64;
    let (y, m, d) = civil_from_days(days);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let month = MONTHS[(m - 1) as usize];
    format
        .replace("%Y", &y.to_string())
        .replace("%m", &format!("{m:02}"))
        .replace("%d", &format!("{d:02}"))
        .replace("%B", month)
        .replace("%b", &month[..3])
}

/// Year, month, day of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn of_gguf(gguf: &Gguf) -> Result<Option<ChatTemplate>, String> {
    let Some(source) = gguf.get_str("tokenizer.chat_template").map_err(|e| e.to_string())? else { return Ok(None) };
    let (bos_token, eos_token) = gguf_specials(gguf)?;
    Ok(Some(ChatTemplate { source: source.to_string(), bos_token, eos_token }))
}

/// The BOS and EOS tokens' texts of a GGUF vocabulary (empty where there is none).
fn gguf_specials(gguf: &Gguf) -> Result<(String, String), String> {
    let tokens = gguf.get_str_array("tokenizer.ggml.tokens").map_err(|e| e.to_string())?.unwrap_or_default();
    let text = |key: &str| -> Result<String, String> {
        let id = gguf.get_i64(key).map_err(|e| e.to_string())?;
        Ok(id.and_then(|i| usize::try_from(i).ok()).and_then(|i| tokens.get(i)).map_or("", |t| t).to_string())
    };
    Ok((text("tokenizer.ggml.bos_token_id")?, text("tokenizer.ggml.eos_token_id")?))
}

fn of_hf_dir(dir: &Path) -> Result<Option<ChatTemplate>, String> {
    let config_path = dir.join("tokenizer_config.json");
    let config: Json = match std::fs::read_to_string(&config_path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| format!("{}: {e}", config_path.display()))?,
        Err(_) => Json::Null,
    };
    let jinja = dir.join("chat_template.jinja");
    let source = match std::fs::read_to_string(&jinja) {
        Ok(text) => Some(text),
        Err(_) => match &config["chat_template"] {
            Json::String(s) => Some(s.clone()),
            Json::Array(list) => list
                .iter()
                .find(|t| t["name"] == "default")
                .or(list.first())
                .and_then(|t| t["template"].as_str())
                .map(str::to_string),
            _ => None,
        },
    };
    let (bos_token, eos_token) = (special(&config, "bos_token"), special(&config, "eos_token"));
    Ok(source.map(|source| ChatTemplate { source, bos_token, eos_token }))
}

/// A special token of `tokenizer_config.json`: a string or `{"content": ...}`.
fn special(config: &Json, key: &str) -> String {
    match &config[key] {
        Json::String(s) => s.clone(),
        v => v["content"].as_str().unwrap_or_default().to_string(),
    }
}

/// Chat messages as templates expect them: `content` a string, or the text parts of a list
/// joined (images and audio are refused).
pub fn normalise(messages: &[Json]) -> Result<Vec<Json>, String> {
    if messages.is_empty() {
        return Err("messages is empty".into());
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m["role"].as_str().ok_or_else(|| format!("messages[{i}] has no string `role`"))?;
            let content = match &m["content"] {
                Json::String(s) => s.clone(),
                Json::Null => String::new(),
                Json::Array(parts) => parts
                    .iter()
                    .map(|p| match (p["type"].as_str(), p["text"].as_str()) {
                        (Some("text"), Some(t)) => Ok(t),
                        _ => Err(format!("messages[{i}].content: only text parts are supported")),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .concat(),
                _ => return Err(format!("messages[{i}].content must be a string or a list of text parts")),
            };
            let mut out = m.clone();
            out["role"] = Json::String(role.to_string());
            out["content"] = Json::String(content);
            Ok(out)
        })
        .collect()
}
