//! GGUF `llama` (SentencePiece) tokenizer: a tiny vocabulary built in memory, the fixture GGUFs, the real Gemma 3 270M, and errors.
//!
//! One test is gated on the environment: set `RDU_GEMMA3_270M_GGUF` to the path of the real
//! Gemma 3 270M Q4_K_M GGUF (see shared/fixtures/README.md) to check its tokenizer against
//! llama.cpp's ids; without it that test prints that it was skipped and returns.

use rdu_checkpoint::{Gguf, GgufValue};
use rdu_host::{StreamDecoder, Tokenizer};
use rdu_testkit::gguf_writer::{f32s, gguf_with, i32s, string, strings};

const UNK: i32 = 2;
const CONTROL: i32 = 3;
const USER: i32 = 4;
const BYTE: i32 = 6;

/// A small SentencePiece vocabulary: (text, score, type).
const SPM: &[(&str, f32, i32)] = &[
    ("<unk>", 0.0, UNK),
    ("<s>", 0.0, CONTROL),
    ("</s>", 0.0, CONTROL),
    ("▁", -1.0, 1),
    ("t", -2.0, 1),
    ("h", -2.0, 1),
    ("e", -2.0, 1),
    ("c", -2.0, 1),
    ("a", -2.0, 1),
    ("▁t", -3.0, 1),
    ("th", -1.5, 1),
    ("▁th", -4.0, 1),
    ("▁the", -1.0, 1),
    ("at", -5.0, 1),
    ("▁c", -3.0, 1),
    ("▁cat", -2.0, 1),
    ("ha", -1.0, 1),
    ("<0x41>", 0.0, BYTE),
    ("<0xC3>", 0.0, BYTE),
    ("<0xA9>", 0.0, BYTE),
    ("<|x|>", 0.0, USER),
    ("<end_of_turn>", 0.0, CONTROL),
];

fn id(vocab: &[(&str, f32, i32)], text: &str) -> u32 {
    vocab.iter().position(|(t, _, _)| *t == text).unwrap_or_else(|| panic!("{text} in the vocabulary")) as u32
}

fn spm_gguf(vocab: &[(&str, f32, i32)], extra: &[(&str, GgufValue)]) -> Gguf {
    let texts: Vec<&str> = vocab.iter().map(|v| v.0).collect();
    let scores: Vec<f32> = vocab.iter().map(|v| v.1).collect();
    let types: Vec<i32> = vocab.iter().map(|v| v.2).collect();
    let mut kvs = vec![
        ("tokenizer.ggml.model", string("llama")),
        ("tokenizer.ggml.tokens", strings(&texts)),
        ("tokenizer.ggml.scores", f32s(&scores)),
        ("tokenizer.ggml.token_type", i32s(&types)),
        ("tokenizer.ggml.unknown_token_id", GgufValue::U32(0)),
        ("tokenizer.ggml.bos_token_id", GgufValue::U32(1)),
        ("tokenizer.ggml.eos_token_id", GgufValue::U32(2)),
    ];
    kvs.extend(extra.iter().cloned());
    gguf_with(&kvs)
}

fn spm(extra: &[(&str, GgufValue)]) -> Tokenizer {
    Tokenizer::from_gguf(&spm_gguf(SPM, extra)).unwrap()
}

#[test]
fn spm_encodes_with_space_prefix_and_bos_and_round_trips() {
    let tok = spm(&[]);
    let ids = tok.encode("the cat", true).unwrap();
    assert_eq!(ids, vec![1, id(SPM, "▁the"), id(SPM, "▁cat")]);
    assert_eq!(tok.decode(&ids), "the cat");
    assert_eq!(tok.encode("the cat", false).unwrap(), ids[1..]);
    assert_eq!(tok.bos(), Some(1));
    assert_eq!(tok.eos(), vec![2]);
    assert_eq!(tok.vocab_size(), SPM.len());
    assert!(tok.add_bos_default(), "llama SPM adds BOS unless the file says otherwise");
    assert_eq!(tok.decode_piece(id(SPM, "▁cat")), " cat");
}

#[test]
fn spm_without_space_prefix_as_gemma() {
    let tok = spm(&[("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false))]);
    let ids = tok.encode("the cat", false).unwrap();
    // No ▁ before "the": t+h merges first (score -1.5), "the" is no token, so th · e.
    assert_eq!(ids, vec![id(SPM, "th"), id(SPM, "e"), id(SPM, "▁cat")]);
    assert_eq!(tok.decode(&ids), "the cat");
}

#[test]
fn spm_merges_the_highest_scoring_pair_first() {
    // "hat": ha (-1) beats at (-5), so ha · t.
    let tok = spm(&[("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false))]);
    assert_eq!(tok.encode("hat", false).unwrap(), vec![id(SPM, "ha"), id(SPM, "t")]);
    // With "at" scored above "ha", h · at.
    let mut vocab = SPM.to_vec();
    let at = id(SPM, "at") as usize;
    vocab[at].1 = 0.5;
    let tok = Tokenizer::from_gguf(&spm_gguf(&vocab, &[("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false))]))
        .unwrap();
    assert_eq!(tok.encode("hat", false).unwrap(), vec![id(SPM, "h"), id(SPM, "at")]);
}

#[test]
fn spm_byte_fallback_and_unknown() {
    let tok = spm(&[]);
    let ids = tok.encode("Aé", false).unwrap();
    assert_eq!(ids, vec![id(SPM, "▁"), id(SPM, "<0x41>"), id(SPM, "<0xC3>"), id(SPM, "<0xA9>")]);
    assert_eq!(tok.decode(&ids), "Aé");
    // "Z" has neither a piece nor a byte token: the unknown id.
    assert_eq!(tok.encode("Z", false).unwrap(), vec![id(SPM, "▁"), 0]);
    // A byte token alone is half a character; the stream decoder waits for the rest.
    let mut stream = StreamDecoder::new();
    let text: String = ids.iter().map(|&i| stream.push(&tok, i)).collect::<Vec<_>>().concat();
    assert_eq!(stream.push(&tok, id(SPM, "<0xC3>")), "", "an incomplete character is held back");
    assert_eq!(text, " Aé");
    assert_eq!(stream.finish(), "\u{FFFD}");
}

#[test]
fn spm_user_defined_tokens_match_verbatim_and_control_tokens_do_not() {
    let tok = spm(&[("tokenizer.ggml.eot_token_id", GgufValue::U32(id(SPM, "<end_of_turn>")))]);
    let ids = tok.encode("the<|x|>cat", false).unwrap();
    assert_eq!(ids, vec![id(SPM, "▁the"), id(SPM, "<|x|>"), id(SPM, "▁cat")]);
    assert_eq!(tok.decode(&ids), "the<|x|> cat");
    // Control tokens in text are plain text; in ids they decode to nothing.
    assert!(!tok.encode("<s>", false).unwrap().contains(&1));
    assert_eq!(tok.decode(&[1, id(SPM, "▁the"), 2]), "the");
    assert_eq!(tok.eos(), vec![2, id(SPM, "<end_of_turn>")]);
}

#[test]
fn spm_bos_requested_but_absent_is_an_error() {
    let texts: Vec<&str> = SPM.iter().map(|v| v.0).collect();
    let gguf = gguf_with(&[("tokenizer.ggml.model", string("llama")), ("tokenizer.ggml.tokens", strings(&texts))]);
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let err = tok.encode("the", true).unwrap_err().to_string();
    assert!(err.contains("bos_token_id"), "{err}");
    assert!(!err.contains('\n'));
}

#[test]
fn unsupported_or_missing_tokenizer_errors() {
    let err = Tokenizer::from_gguf(&gguf_with(&[("tokenizer.ggml.model", string("bert"))])).err().unwrap().to_string();
    assert_eq!(err, "test.gguf: tokenizer: tokenizer.ggml.model `bert` is not supported; supported: llama, gpt2");
    let err = Tokenizer::from_gguf(&gguf_with(&[("tokenizer.ggml.model", string("llama"))])).err().unwrap().to_string();
    assert!(err.contains("no `tokenizer.ggml.tokens`"), "{err}");
    let err = Tokenizer::from_gguf(&gguf_with(&[])).err().unwrap().to_string();
    assert!(err.contains("no `tokenizer.ggml.model`"), "{err}");
    let gguf = gguf_with(&[
        ("tokenizer.ggml.model", string("llama")),
        ("tokenizer.ggml.tokens", strings(&["a", "b"])),
        ("tokenizer.ggml.scores", f32s(&[0.0])),
    ]);
    let err = Tokenizer::from_gguf(&gguf).err().unwrap().to_string();
    assert!(err.contains("1 entries for 2 tokens"), "{err}");
    let gguf = gguf_with(&[
        ("tokenizer.ggml.model", string("llama")),
        ("tokenizer.ggml.tokens", strings(&["a", "b"])),
        ("tokenizer.ggml.bos_token_id", GgufValue::U32(7)),
    ]);
    let err = Tokenizer::from_gguf(&gguf).err().unwrap().to_string();
    assert!(err.contains("outside the vocabulary of 2 tokens"), "{err}");
}

fn fixture(arch: &str) -> Gguf {
    let path = format!("{}/../../tests/data/fixtures/gguf/{arch}/tiny-{arch}-f32.gguf", env!("CARGO_MANIFEST_DIR"));
    Gguf::open(&path).unwrap()
}

#[test]
fn fixture_byte_vocabularies_round_trip() {
    for (arch, bos) in [("llama", 1), ("gemma3", 1)] {
        let tok = Tokenizer::from_gguf(&fixture(arch)).unwrap();
        assert_eq!(tok.vocab_size(), 256);
        assert_eq!(tok.bos(), Some(bos));
        for text in ["The capital of France is", "héllo wörld ✓", "a\nb"] {
            let ids = tok.encode(text, true).unwrap();
            assert_eq!(ids[0], bos);
            // These vocabularies have byte tokens only, so even the `▁` marks (a space prefix,
            // then one per space) fall back to bytes and decode as `▁`, as in llama.cpp.
            let escaped = format!("▁{}", text.replace(' ', "▁"));
            assert_eq!(ids.len(), 1 + escaped.len(), "one byte token per byte");
            assert!(ids[1..].iter().all(|&i| tok.token_type(i) == Some(rdu_host::tokenizer::TokenType::Byte)));
            assert_eq!(tok.decode(&ids), escaped, "{arch}");
        }
    }
}

/// Env-gated: `RDU_GEMMA3_270M_GGUF` = path of the real Gemma 3 270M Q4_K_M GGUF.
#[test]
fn real_gemma3_270m_matches_llama_cpp() {
    let Ok(path) = std::env::var("RDU_GEMMA3_270M_GGUF") else {
        println!("skipped: set RDU_GEMMA3_270M_GGUF to the Gemma 3 270M GGUF to run this check");
        return;
    };
    let tok = Tokenizer::from_gguf(&Gguf::open(&path).unwrap()).unwrap();
    let ids = tok.encode("The capital of France is", true).unwrap();
    assert_eq!(ids, vec![2, 818, 5279, 529, 7001, 563]);
    assert_eq!(tok.decode(&ids), "The capital of France is");
    assert_eq!(tok.bos(), Some(2));
    assert!(tok.eos().contains(&1));
    let text = "Grüße aus Köln!\n\n  def f(x):\n\treturn x ✓ 東京";
    assert_eq!(tok.decode(&tok.encode(text, false).unwrap()), text);
}

#[test]
fn spm_duplicate_texts_resolve_to_the_first_id_as_in_llama_cpp() {
    // A second "▁cat" after the first: text → id takes the first (llama.cpp's `token_to_id`),
    // and the later id still decodes to its text.
    let mut vocab = SPM.to_vec();
    vocab.push(("▁cat", 5.0, 1));
    let later = (vocab.len() - 1) as u32;
    let tok = Tokenizer::from_gguf(&spm_gguf(&vocab, &[])).unwrap();
    assert_eq!(tok.encode("the cat", false).unwrap(), vec![id(SPM, "▁the"), id(SPM, "▁cat")]);
    assert_eq!(tok.decode_piece(later), " cat");
    assert_eq!(tok.vocab_size(), vocab.len());
}
