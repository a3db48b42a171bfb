//! rdu's byte-level BPE tokenizer against llama.cpp's own tokenisation, for every
//! `tokenizer.ggml.pre` rdu supports. `tests/data/fixtures/tokenizers/<pre>.gguf` is a
//! vocabulary-only GGUF (the 256 byte characters, merges learned from a mixed text, whole-word
//! tokens no merge makes, a control token); `<pre>.json` holds the ids llama.cpp
//! (llama-cpp-python 0.3.36, `tokenize(text, add_bos=False, special=False)`) gives for texts of
//! digits, punctuation, contractions, CJK, emoji, combining marks and whitespace runs
//! (`tests/data/fixtures/tools/make_tokenizer_fixtures.py`). rdu must give the same ids.

use rdu_checkpoint::Gguf;
use rdu_host::tokenizer::SUPPORTED_PRE;
use rdu_host::Tokenizer;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/fixtures/tokenizers")
}

fn check(pre: &str) {
    let dir = fixtures();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{pre}.json"))).expect("fixture json"))
            .expect("json");
    assert_eq!(doc["pre"], pre);
    let gguf = Gguf::open(dir.join(format!("{pre}.gguf"))).expect("vocabulary gguf");
    let tok = Tokenizer::from_gguf(&gguf).expect("tokenizer");
    let texts = doc["texts"].as_array().expect("texts");
    assert!(texts.len() >= 10, "{pre}: the fixture holds {} texts", texts.len());
    for case in texts {
        let text = case["text"].as_str().expect("text");
        let want: Vec<u32> =
            case["ids"].as_array().expect("ids").iter().map(|v| v.as_u64().expect("id") as u32).collect();
        let got = tok.encode(text, false).expect("encode");
        assert_eq!(got, want, "{pre}: {text:?}");
    }
}

#[test]
fn every_supported_pre_tokenizer_has_a_llamacpp_fixture() {
    let mut have: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixtures dir")
        .filter_map(|e| {
            let p = e.expect("entry").path();
            (p.extension()? == "json").then(|| p.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    have.sort();
    let mut supported: Vec<String> = SUPPORTED_PRE.split(", ").map(String::from).collect();
    supported.sort();
    assert_eq!(have, supported);
}

/// The fixtures differ between pre-tokenisers, so the comparison can tell them apart.
#[test]
fn the_pre_tokenizers_split_the_texts_differently() {
    let ids = |pre: &str| -> String { std::fs::read_to_string(fixtures().join(format!("{pre}.json"))).expect("json") };
    let strip = |s: String, pre: &str| s.replacen(&format!("\"pre\": \"{pre}\""), "", 1);
    // (`llama3`, `llama-v3` and `llama-bpe` are one pre-tokeniser in llama.cpp, as are `qwen2`
    // and `deepseek-r1-qwen`; `qwen35` differs from `qwen2` only on marks these texts lack.)
    let groups = [
        ("default", "gpt-2"),
        ("gpt-2", "llama3"),
        ("llama3", "qwen2"),
        ("qwen2", "deepseek-llm"),
        ("deepseek-llm", "deepseek-v3"),
        ("deepseek-v3", "default"),
    ];
    for (a, b) in groups {
        assert_ne!(strip(ids(a), a), strip(ids(b), b), "{a} and {b} give the same ids on every text");
    }
}

macro_rules! pre {
    ($($test:ident: $pre:literal,)*) => {$(
        #[test]
        fn $test() {
            check($pre);
        }
    )*};
}

pre! {
    default: "default",
    gpt_2: "gpt-2",
    llama3: "llama3",
    llama_v3: "llama-v3",
    llama_bpe: "llama-bpe",
    qwen2: "qwen2",
    deepseek_r1_qwen: "deepseek-r1-qwen",
    qwen35: "qwen35",
    deepseek_llm: "deepseek-llm",
    deepseek_v3: "deepseek-v3",
}
