//! Chat templates: read from a GGUF file's metadata (with the BOS and EOS texts) or a HF
//! directory, rendered with the generation prompt, Python string methods, `raise_exception`.

use rdu_serve::chat::{normalise, ChatTemplate};
use rdu_testkit::gguf_writer::{string, strings, GgufWriter};
use serde_json::json;

const GEMMA: &str = "{{ bos_token }}{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

fn template(source: &str) -> ChatTemplate {
    ChatTemplate { source: source.into(), bos_token: "<bos>".into(), eos_token: "<eos>".into() }
}

#[test]
fn renders_turns_with_the_generation_prompt() {
    let messages = normalise(&[
        json!({"role": "user", "content": " Hi "}),
        json!({"role": "assistant", "content": "Hello."}),
        json!({"role": "user", "content": [{"type": "text", "text": "More"}, {"type": "text", "text": "!"}]}),
    ])
    .expect("messages");
    let text = template(GEMMA).render(&messages).expect("render");
    assert_eq!(
        text,
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>user\nMore!<end_of_turn>\n<start_of_turn>model\n"
    );
}

#[test]
fn the_template_refusing_the_messages_is_an_error_naming_why() {
    let messages = normalise(&[json!({"role": "assistant", "content": "first"})]).expect("messages");
    let err = template(GEMMA).render(&messages).expect_err("roles do not alternate");
    assert!(err.contains("Conversation roles must alternate"), "{err}");
    assert!(normalise(&[]).expect_err("empty").contains("empty"));
    assert!(normalise(&[json!({"content": "x"})]).expect_err("no role").contains("role"));
    assert!(normalise(&[json!({"role": "user", "content": [{"type": "image_url"}]})])
        .expect_err("image")
        .contains("text parts"));
    assert!(template("{% for %}").check().expect_err("bad syntax").contains("does not parse"));
}

#[test]
fn python_string_methods_work_as_in_transformers() {
    let t = template("{{ messages[0]['content'].strip().upper() }}|{{ 'x' if messages[0]['content'].startswith(' a') else 'y' }}|{{ strftime_now('%Y') | length }}");
    let messages = vec![json!({"role": "user", "content": " abc "})];
    assert_eq!(t.render(&messages).expect("render"), "ABC|x|4");
}

#[test]
fn read_from_a_gguf_file_and_a_hf_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("m.gguf");
    let bytes = GgufWriter::new()
        .kv("tokenizer.chat_template", string(GEMMA))
        .kv("tokenizer.ggml.tokens", strings(&["<pad>", "<s>", "</s>"]))
        .kv("tokenizer.ggml.bos_token_id", rdu_checkpoint::GgufValue::U32(1))
        .kv("tokenizer.ggml.eos_token_id", rdu_checkpoint::GgufValue::U32(2))
        .build();
    std::fs::write(&file, bytes).expect("write");
    let t = ChatTemplate::of_checkpoint(&file).expect("read").expect("a template");
    assert_eq!((t.source.as_str(), t.bos_token.as_str(), t.eos_token.as_str()), (GEMMA, "<s>", "</s>"));
    // Without one: none.
    let bare = dir.path().join("bare.gguf");
    std::fs::write(&bare, GgufWriter::new().kv("general.name", string("x")).build()).expect("write");
    assert!(ChatTemplate::of_checkpoint(&bare).expect("read").is_none());
    // A HF directory: tokenizer_config.json's template and special tokens (a string or {"content"}).
    let hf = dir.path().join("hf");
    std::fs::create_dir(&hf).expect("dir");
    let config = json!({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}], "bos_token": {"content": "<|b|>"}, "eos_token": "<|e|>"});
    std::fs::write(hf.join("tokenizer_config.json"), config.to_string()).expect("write");
    let t = ChatTemplate::of_checkpoint(&hf).expect("read").expect("a template");
    assert_eq!((t.source.as_str(), t.bos_token.as_str(), t.eos_token.as_str()), ("D", "<|b|>", "<|e|>"));
    // chat_template.jinja beside it wins, as in transformers 5.
    std::fs::write(hf.join("chat_template.jinja"), "J").expect("write");
    assert_eq!(ChatTemplate::of_checkpoint(&hf).expect("read").expect("a template").source, "J");
}
