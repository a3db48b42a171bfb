//! Streaming text: whole characters only, stop strings found across token boundaries and never
//! sent, text that may begin a stop string held back until it cannot.

use rdu_host::Tokenizer;
use rdu_serve::text::TextStream;

/// The tiny Gemma 3 fixture's tokenizer: its vocabulary is the control tokens and one token per
/// byte (`<0xNN>`), so any text is its bytes.
fn tokenizer() -> Tokenizer {
    let file = rdu_testkit::fixtures::gguf_file("gemma3", "f32");
    Tokenizer::from_gguf(&rdu_checkpoint::Gguf::open(&file).expect("fixture")).expect("tokenizer")
}

/// The ids of `text`'s bytes: `<0xNN>` is token 4 + NN (after `<pad>`, `<bos>`, `<eos>`, `<unk>`).
fn ids(t: &Tokenizer, text: &str) -> Vec<u32> {
    let ids: Vec<u32> = text.bytes().map(|b| 4 + u32::from(b)).collect();
    assert_eq!(t.decode(&ids), text, "the fixture's byte tokens");
    ids
}

/// Pushes `text`'s tokens one at a time: what was sent after each, and whether it stopped.
fn feed(t: &Tokenizer, stream: &mut TextStream, text: &str) -> (Vec<String>, bool) {
    let mut sent = Vec::new();
    for id in ids(t, text) {
        let (s, stopped) = stream.push(Some(t), id);
        sent.push(s);
        if stopped {
            return (sent, true);
        }
    }
    (sent, false)
}

#[test]
fn a_stop_string_across_tokens_ends_the_text_before_it() {
    let t = tokenizer();
    let mut s = TextStream::new(vec!["lo w".into()]);
    let (sent, stopped) = feed(&t, &mut s, "hello world");
    assert!(stopped);
    assert_eq!(sent.concat(), "hel");
    assert_eq!(s.finish(), "", "nothing after a stop");
}

#[test]
fn text_that_may_begin_a_stop_is_held_back_until_it_cannot() {
    let t = tokenizer();
    let mut s = TextStream::new(vec!["xyz".into()]);
    let (sent, stopped) = feed(&t, &mut s, "ab xy");
    assert!(!stopped);
    // "xy" could begin "xyz": held back.
    assert_eq!(sent.concat(), "ab ");
    let (more, stopped) = feed(&t, &mut s, "q");
    assert!(!stopped);
    assert_eq!(more.concat(), "xyq");
    // At the end whatever is held back is sent.
    let (more, _) = feed(&t, &mut s, "x");
    assert_eq!(more.concat(), "");
    assert_eq!(s.finish(), "x");
}

#[test]
fn a_character_of_several_bytes_is_sent_whole() {
    let t = tokenizer();
    let mut s = TextStream::new(Vec::new());
    let (sent, _) = feed(&t, &mut s, "é!");
    // Two byte tokens for "é", then "!".
    assert_eq!(sent, vec!["".to_string(), "é".into(), "!".into()]);
    // Without a tokenizer there is no text, and no stop.
    let mut s = TextStream::new(vec!["a".into()]);
    assert_eq!(s.push(None, 5), (String::new(), false));
}
