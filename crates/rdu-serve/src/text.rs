//! A request's generated text as it streams: ids turned into whole characters, stop strings
//! found across token boundaries, and text that might begin a stop string held back until it
//! is known not to (a stop string is never sent, as OpenAI has it).

use rdu_host::{StreamDecoder, Tokenizer};

/// The text of one request's tokens so far.
pub struct TextStream {
    decoder: StreamDecoder,
    stops: Vec<String>,
    /// Every whole character decoded.
    text: String,
    /// Bytes of `text` already handed out.
    sent: usize,
    /// A stop string ended the text at this byte.
    stopped_at: Option<usize>,
}

impl TextStream {
    pub fn new(stops: Vec<String>) -> TextStream {
        TextStream { decoder: StreamDecoder::new(), stops, text: String::new(), sent: 0, stopped_at: None }
    }

    /// Takes `token`: the text now safe to send, and whether a stop string ended the text.
    pub fn push(&mut self, tokenizer: Option<&Tokenizer>, token: u32) -> (String, bool) {
        if self.stopped_at.is_some() {
            return (String::new(), true);
        }
        let Some(tokenizer) = tokenizer else { return (String::new(), false) };
        let from = self.text.len();
        self.text.push_str(&self.decoder.push(tokenizer, token));
        // A stop string may have begun up to its length minus one bytes before the new text.
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let mut search = from.saturating_sub(longest);
        while !self.text.is_char_boundary(search) {
            search -= 1;
        }
        let found = self.stops.iter().filter_map(|s| self.text[search..].find(s.as_str()).map(|i| search + i)).min();
        if let Some(at) = found {
            self.stopped_at = Some(at);
            return (self.take(at), true);
        }
        let hold = self.held_back();
        (self.take(self.text.len() - hold), false)
    }

    /// Whatever is left once the request ends (nothing after a stop string).
    pub fn finish(&mut self) -> String {
        if self.stopped_at.is_some() {
            return String::new();
        }
        self.text.push_str(&self.decoder.finish());
        self.take(self.text.len())
    }

    /// The text up to byte `end` not yet sent.
    fn take(&mut self, end: usize) -> String {
        let end = end.max(self.sent);
        let out = self.text[self.sent..end].to_string();
        self.sent = end;
        out
    }

    /// Bytes at the end of the text that are the start of some stop string.
    fn held_back(&self) -> usize {
        let unsent = &self.text[self.sent..];
        let mut hold = 0;
        for stop in &self.stops {
            for (i, _) in stop.char_indices().skip(1) {
                if i > hold && unsent.ends_with(&stop[..i]) {
                    hold = i;
                }
            }
        }
        hold
    }
}
