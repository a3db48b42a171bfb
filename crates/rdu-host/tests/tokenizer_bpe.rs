//! GGUF `gpt2` (byte-level BPE) tokenizer and HF `tokenizer.json`, which must agree on the same vocabulary and merges.

use rdu_checkpoint::GgufValue;
use rdu_host::tokenizer::byte_to_char;
use rdu_host::{StreamDecoder, Tokenizer};
use rdu_testkit::gguf_writer::{gguf_with, i32s, string, strings};

const CONTROL: i32 = 3;

/// A GPT-2 style vocabulary: the 256 byte characters, then merged tokens, then `<|endoftext|>`.
fn gpt2(pre: Option<&str>) -> (Tokenizer, Vec<String>) {
    let mut tokens: Vec<String> = byte_to_char().iter().map(|c| c.to_string()).collect();
    let merges = ["Ġ t", "h e", "Ġt he", "Ġ c", "a t", "Ġc at"];
    tokens.extend(["Ġt", "he", "Ġthe", "Ġc", "at", "Ġcat", "<|endoftext|>"].map(String::from));
    let mut types = vec![1; tokens.len()];
    *types.last_mut().unwrap() = CONTROL;
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut kvs = vec![
        ("tokenizer.ggml.model", string("gpt2")),
        ("tokenizer.ggml.tokens", strings(&refs)),
        ("tokenizer.ggml.token_type", i32s(&types)),
        ("tokenizer.ggml.merges", strings(&merges)),
        ("tokenizer.ggml.bos_token_id", GgufValue::U32(tokens.len() as u32 - 1)),
        ("tokenizer.ggml.eos_token_id", GgufValue::U32(tokens.len() as u32 - 1)),
    ];
    if let Some(pre) = pre {
        kvs.push(("tokenizer.ggml.pre", string(pre)));
    }
    (Tokenizer::from_gguf(&gguf_with(&kvs)).unwrap(), tokens)
}

fn tid(tokens: &[String], text: &str) -> u32 {
    tokens.iter().position(|t| t == text).unwrap() as u32
}

#[test]
fn gpt2_merges_by_rank_and_round_trips() {
    let (tok, tokens) = gpt2(None);
    let ids = tok.encode("the cat sat", false).unwrap();
    let want: Vec<u32> = ["t", "he", "Ġcat", "Ġ", "s", "at"].iter().map(|t| tid(&tokens, t)).collect();
    assert_eq!(ids, want);
    assert_eq!(tok.decode(&ids), "the cat sat");
    assert!(!tok.add_bos_default());
    let with_bos = tok.encode("the", true).unwrap();
    assert_eq!(with_bos[0], tid(&tokens, "<|endoftext|>"));
    assert_eq!(tok.decode(&with_bos), "the", "control tokens decode to nothing");
}

#[test]
fn gpt2_round_trips_non_ascii_and_whitespace() {
    for pre in [
        None,
        Some("default"),
        Some("gpt-2"),
        Some("llama-bpe"),
        Some("llama3"),
        Some("qwen2"),
        Some("qwen35"),
        Some("deepseek-llm"),
        Some("deepseek-v3"),
    ] {
        let (tok, _) = gpt2(pre);
        for text in ["héllo wörld ✓ 東京", "  two  spaces\n\n\ttab 12345 it's", "", "🦀 crab"] {
            let ids = tok.encode(text, false).unwrap();
            assert_eq!(tok.decode(&ids), text, "pre {pre:?}");
            let mut stream = StreamDecoder::new();
            let streamed: String = ids.iter().map(|&i| stream.push(&tok, i)).collect();
            assert_eq!(streamed + &stream.finish(), text, "streamed, pre {pre:?}");
        }
    }
    // Bytes that are no token of their own still round trip: "é" is two byte characters.
    let (tok, _) = gpt2(None);
    assert_eq!(tok.encode("é", false).unwrap().len(), 2);
}

#[test]
fn gpt2_unknown_pre_tokenizer_is_named() {
    let tokens: Vec<String> = byte_to_char().iter().map(|c| c.to_string()).collect();
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let gguf = gguf_with(&[
        ("tokenizer.ggml.model", string("gpt2")),
        ("tokenizer.ggml.pre", string("falcon")),
        ("tokenizer.ggml.tokens", strings(&refs)),
        ("tokenizer.ggml.merges", strings(&[])),
    ]);
    let err = Tokenizer::from_gguf(&gguf).err().expect("an unsupported pre-tokeniser").to_string();
    assert!(err.contains("tokenizer.ggml.pre") && err.contains("falcon"), "{err}");
    let gguf = gguf_with(&[("tokenizer.ggml.model", string("gpt2")), ("tokenizer.ggml.tokens", strings(&refs))]);
    let err = Tokenizer::from_gguf(&gguf).err().expect("merges are required").to_string();
    assert!(err.contains("tokenizer.ggml.merges"), "{err}");
}

/// The GPT-2 test vocabulary as a byte-level BPE `tokenizer.json`, with a `tokenizer_config.json`.
fn write_tokenizer_json(dir: &std::path::Path, tokens: &[String]) -> std::path::PathBuf {
    use serde_json::json;
    let vocab: serde_json::Map<String, serde_json::Value> =
        tokens.iter().enumerate().map(|(i, t)| (t.clone(), json!(i))).collect();
    let eot = tokens.len() - 1;
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let doc = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": byte_level, "post_processor": null, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": ["Ġ t", "h e", "Ġt he", "Ġ c", "a t", "Ġc at"]}
    });
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}"#,
    )
    .unwrap();
    path
}

#[test]
fn tokenizer_json_agrees_with_the_gguf_gpt2_tokenizer() {
    let (gguf_tok, tokens) = gpt2(Some("gpt-2"));
    let dir = tempfile::tempdir().unwrap();
    let hf = Tokenizer::from_tokenizer_json(write_tokenizer_json(dir.path(), &tokens)).unwrap();
    let eot = tokens.len() as u32 - 1;
    assert_eq!(hf.bos(), Some(eot));
    assert_eq!(hf.eos(), vec![eot]);
    assert_eq!(hf.vocab_size(), tokens.len());
    for text in ["the cat sat", "héllo wörld ✓ 東京", "  two  spaces\n\n\ttab 12345 it's", "🦀 the  cat"] {
        let ids = hf.encode(text, false).unwrap();
        assert_eq!(ids, gguf_tok.encode(text, false).unwrap(), "{text:?}");
        assert_eq!(hf.decode(&ids), text);
        let mut stream = StreamDecoder::new();
        let streamed: String = ids.iter().map(|&i| stream.push(&hf, i)).collect();
        assert_eq!(streamed + &stream.finish(), text);
    }
    let ids = hf.encode("the", true).unwrap();
    assert_eq!(ids[0], eot);
    assert_eq!(hf.decode(&ids), "the");
    assert_eq!(hf.decode_piece(eot), "", "special tokens stream as nothing");
    assert_eq!(hf.decode_piece(tid(&tokens, "Ġcat")), " cat");
}

#[test]
fn tokenizer_json_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("tokenizer.json");
    let err = Tokenizer::from_tokenizer_json(&missing).err().unwrap().to_string();
    assert!(err.contains("tokenizer.json") && err.contains("cannot read"), "{err}");
    std::fs::write(&missing, "{\"model\": 3}").unwrap();
    let err = Tokenizer::from_tokenizer_json(&missing).err().unwrap().to_string();
    assert!(err.contains("tokenizers crate cannot load it"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn tokenizer_json_sentencepiece_style_with_byte_fallback() {
    use serde_json::json;
    let tokens = [
        "<unk>", "<s>", "</s>", "▁", "t", "h", "e", "c", "a", "▁t", "he", "▁the", "▁c", "at", "▁cat", "<0xC3>",
        "<0xA9>",
    ];
    let vocab: serde_json::Map<String, serde_json::Value> =
        tokens.iter().enumerate().map(|(i, t)| (t.to_string(), json!(i))).collect();
    let added: Vec<serde_json::Value> = (0..3)
        .map(|i| {
            json!({"id": i, "content": tokens[i], "single_word": false, "lstrip": false, "rstrip": false,
                        "normalized": false, "special": true})
        })
        .collect();
    let doc = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added, "normalizer": null,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                  "vocab": vocab, "merges": ["▁ t", "h e", "▁t he", "▁ c", "a t", "▁c at"]}
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"bos_token_id": 1, "eos_token_id": [2]}"#).unwrap();
    let tok = Tokenizer::from_tokenizer_json(&path).unwrap();
    assert_eq!((tok.bos(), tok.eos()), (Some(1), vec![2]));
    let ids = tok.encode("the cat é", true).unwrap();
    assert_eq!(ids, vec![1, 11, 14, 3, 15, 16]);
    assert_eq!(tok.decode(&ids), "the cat é");
    assert_eq!(tok.decode_piece(14), " cat");
    let mut stream = StreamDecoder::new();
    let streamed: String = ids.iter().map(|&i| stream.push(&tok, i)).collect();
    assert_eq!(streamed, " the cat é", "pieces keep their spaces; the byte pair streams as one character");
}
