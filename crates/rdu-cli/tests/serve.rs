//! `rdu serve` as a client sees it: a child process on an ephemeral loopback port, driven over
//! HTTP. At temperature 0 every request's tokens are `rdu run`'s greedy tokens for its prompt
//! (the same chunk and ctx) whatever shares the batch; bad input gets a 4xx with an OpenAI-style
//! error body and the server goes on; a full queue gets 429 with Retry-After; a client that hangs
//! up frees its slot; SIGTERM finishes the requests in flight, then the server exits (with
//! `--profile`, printing where its time went).

use crate::common::http::{hang_up_after, open_stream, raw, read_rest, request, Server};
use crate::common::ok;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// `rdu run`'s greedy tokens for `prompt` alone: prefill chunks of `chunk`, then decode.
fn solo(model: &str, prompt: &[u32], n: usize, chunk: usize, ctx: usize) -> Vec<u32> {
    let tokens: Vec<String> = prompt.iter().map(u32::to_string).collect();
    let out = ok(&[
        "run",
        model,
        "--tokens",
        &tokens.join(","),
        "-n",
        &n.to_string(),
        "--chunk",
        &chunk.to_string(),
        "--ctx",
        &ctx.to_string(),
        "--json",
    ]);
    let v: Value = serde_json::from_str(out.trim()).expect("json");
    v["generated"].as_array().expect("generated").iter().map(|t| t.as_u64().expect("id") as u32).collect()
}

/// A completion request's body for `prompt` (token ids), greedy, with its token ids returned.
fn greedy_body(prompt: &[u32], max_tokens: usize, stream: bool) -> String {
    json!({"model": null, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream, "return_token_ids": true})
        .to_string()
}

/// The token ids and finish reason of a completion response, streamed or not; panics on an
/// incomplete one (no finish reason, or a stream without `[DONE]`).
fn answer(status: u16, body: &str, events: Vec<String>, stream: bool) -> (Vec<u32>, String) {
    assert_eq!(status, 200, "{body}");
    let ids = |c: &Value| -> Vec<u32> {
        c["token_ids"].as_array().expect("token_ids").iter().map(|t| t.as_u64().expect("id") as u32).collect()
    };
    if !stream {
        let v: Value = serde_json::from_str(body).expect("json");
        let c = &v["choices"][0];
        assert_eq!(v["usage"]["completion_tokens"].as_u64(), Some(ids(c).len() as u64));
        return (ids(c), c["finish_reason"].as_str().expect("a finish reason").to_string());
    }
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "the stream ended without [DONE]: {body}");
    let (mut tokens, mut finish) = (Vec::new(), None);
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).expect("json event");
        let c = &v["choices"][0];
        tokens.extend(ids(c));
        if let Some(f) = c["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    (tokens, finish.expect("a finish reason"))
}

fn complete(port: u16, prompt: &[u32], max_tokens: usize, stream: bool) -> (Vec<u32>, String) {
    let r = request(port, "POST", "/v1/completions", Some(&greedy_body(prompt, max_tokens, stream)));
    let events = r.events();
    answer(r.status, &r.body, events, stream)
}

/// Prompts of every shape a slot meets with chunks of 8: shorter than a chunk, exactly one,
/// a chunk and a tail, exactly two, two and a tail.
fn prompts() -> Vec<Vec<u32>> {
    let p = |n: usize, salt: u32| (0..n as u32).map(|i| (i * 37 + salt * 11 + 1) % 250).collect::<Vec<u32>>();
    vec![p(3, 1), p(8, 2), p(11, 3), p(16, 4), p(21, 5), p(1, 6), p(13, 7), p(5, 8)]
}

#[test]
fn serve_greedy_tokens_equal_rdu_run_whatever_shares_the_batch() {
    // qwen3-next: DeltaNet (recurrent and conv states), full attention and experts, so a slot's
    // states moving between the prefill and the batched bundle are all exercised.
    let model = "tiny-qwen3-next";
    let server = Server::start(&[model, "--batch", "4", "--ctx", "64", "--chunk", "8"]);
    let prompts = prompts();
    let want: Vec<Vec<u32>> = prompts.iter().map(|p| solo(model, p, 10, 8, 64)).collect();
    // All at once (more requests than slots), half streamed; then each alone in an idle server.
    let port = server.port;
    let handles: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let p = p.clone();
            std::thread::spawn(move || complete(port, &p, 10, i % 2 == 0))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let (got, finish) = h.join().expect("a client thread");
        assert_eq!(got, want[i], "prompt {i} ({} tokens) in a shared batch", prompts[i].len());
        assert_eq!(finish, "length");
    }
    let smaller_steps = || {
        let m = request(port, "GET", "/metrics", None).body;
        let line = m.lines().find(|l| l.starts_with("rdu_smaller_steps_total ")).expect("the counter").to_string();
        line.split(' ').nth(1).and_then(|v| v.parse::<u64>().ok()).expect("a count")
    };
    let before = smaller_steps();
    for (i, p) in prompts.iter().enumerate() {
        assert_eq!(complete(port, p, 10, i % 2 == 1).0, want[i], "prompt {i} alone");
    }
    // Alone, each request's rows ran on the one-sequence batched bundle: at least its 9 steps
    // after the first token.
    assert!(smaller_steps() >= before + 9 * prompts.len() as u64, "{} → {}", before, smaller_steps());
}

/// The CI load test: 64 requests over 16 connections on a tiny preset, streamed and whole,
/// with hang-ups and malformed requests mixed in. Every complete response equals its prompt's
/// solo greedy run, every hang-up is cancelled, every malformed request gets a 400, and the
/// server's resident set after all of them is within 10% of what it was after the first.
#[test]
fn serve_load_64_requests_over_16_connections() {
    let model = "tiny-llama";
    // A long context, so that a hung-up request would run for hundreds of steps if its hang-up
    // went unnoticed.
    let (ctx, chunk, n) = (1024, 8, 12);
    let mut server = Server::start(&[model, "--batch", "4", "--ctx", "1024", "--chunk", "8", "--queue", "64"]);
    let prompts = prompts();
    let want: Vec<Vec<u32>> = prompts.iter().map(|p| solo(model, p, n, chunk, ctx)).collect();
    assert_eq!(complete(server.port, &prompts[0], n, false).0, want[0], "the first request");
    let rss_first = server.rss_kib();
    let port = server.port;
    let clients: Vec<_> = (0..16)
        .map(|c| {
            let (prompts, want) = (prompts.clone(), want.clone());
            std::thread::spawn(move || {
                let mut tally = BTreeMap::<&str, usize>::new();
                for r in 0..4 {
                    let i = c * 4 + r;
                    let p = &prompts[i % prompts.len()];
                    match i % 8 {
                        3 => {
                            let bad = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\nConnection: close\r\n\r\n{\"prompt\"");
                            assert_eq!(bad.status, 400, "{}", bad.body);
                            assert_eq!(bad.json()["error"]["type"], "invalid_request_error");
                            *tally.entry("malformed").or_default() += 1;
                        }
                        6 => {
                            // Generates until the context is full unless its hang-up is noticed.
                            let body = json!({"prompt": p, "temperature": 0, "stream": true, "max_tokens": ctx}).to_string();
                            hang_up_after(port, "/v1/completions", &body, 2);
                            *tally.entry("hung_up").or_default() += 1;
                        }
                        _ => {
                            let (got, finish) = complete(port, p, n, i % 2 == 0);
                            assert_eq!(got, want[i % prompts.len()], "request {i}");
                            assert_eq!(finish, "length");
                            *tally.entry("complete").or_default() += 1;
                        }
                    }
                }
                tally
            })
        })
        .collect();
    let mut tally = BTreeMap::<&str, usize>::new();
    for c in clients {
        for (k, v) in c.join().expect("a client") {
            *tally.entry(k).or_default() += v;
        }
    }
    assert_eq!(tally.values().sum::<usize>(), 64);
    assert_eq!((tally["malformed"], tally["hung_up"], tally["complete"]), (8, 8, 48));
    // Every hang-up was noticed and cancelled (their slots freed) once the server is idle.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while server.metric("rdu_running_sequences") > 0.0 {
        assert!(std::time::Instant::now() < deadline, "the server never went idle");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(server.metric("rdu_requests_finished_total{finish=\"cancelled\"}"), 8.0);
    assert_eq!(server.metric("rdu_requests_finished_total{finish=\"length\"}"), 49.0);
    assert_eq!(server.metric("rdu_requests_refused_total{reason=\"bad_request\"}"), 8.0);
    let rss_after = server.rss_kib();
    eprintln!("RSS after the first request {rss_first} KiB, after 64 more {rss_after} KiB");
    assert!(
        (rss_after as f64) <= rss_first as f64 * 1.10,
        "RSS grew from {rss_first} KiB after the first request to {rss_after} KiB after 64"
    );
    server.terminate();
    assert!(server.wait(Duration::from_secs(60)).success());
}

#[test]
fn serve_refuses_bad_input_with_openai_errors_and_goes_on() {
    let server = Server::start(&["tiny-llama", "--batch", "2", "--ctx", "32", "--chunk", "8"]);
    let bad = |path: &str, body: &str, status: u16, param: Option<&str>, code: Option<&str>| {
        let r = server.post(path, body);
        assert_eq!(r.status, status, "{body}: {}", r.body);
        let e = &r.json()["error"];
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}: {}", r.body);
        assert!(e["type"].as_str().is_some(), "{}", r.body);
        assert_eq!(e["param"].as_str(), param, "{body}: {}", r.body);
        assert_eq!(e["code"].as_str(), code, "{body}: {}", r.body);
    };
    let c = "/v1/completions";
    bad(c, "{\"prompt\": [1, 2", 400, None, None);
    bad(c, "not json at all", 400, None, None);
    bad(c, r#"{"prompt": [1, 2], "temperature": "hot"}"#, 400, Some("temperature"), None);
    bad(c, r#"{"model": "gpt-4", "prompt": [1, 2]}"#, 404, Some("model"), Some("model_not_found"));
    let long: Vec<u32> = (0..40).collect();
    bad(c, &json!({"prompt": long}).to_string(), 400, Some("prompt"), Some("context_length_exceeded"));
    bad(c, r#"{"prompt": [1, 2], "temperature": 3}"#, 400, Some("temperature"), None);
    bad(c, r#"{"prompt": [1, 2], "top_p": 0}"#, 400, Some("top_p"), None);
    bad(c, r#"{"prompt": [1, 2], "top_k": -5}"#, 400, Some("top_k"), None);
    bad(c, r#"{"prompt": [1, 2], "n": 2}"#, 400, Some("n"), None);
    bad(c, r#"{"prompt": [1, 2], "max_tokens": 0}"#, 400, Some("max_tokens"), None);
    bad(c, r#"{"prompt": [1, 100000]}"#, 400, Some("prompt"), None);
    bad(c, r#"{"prompt": []}"#, 400, Some("prompt"), None);
    bad(c, r#"{"prompt": [[1, 2], [3]]}"#, 400, Some("prompt"), None);
    bad(c, r#"{"prompt": "text needs a tokenizer"}"#, 400, Some("prompt"), None);
    bad(c, r#"{"prompt": [1, 2], "stop": ["a"]}"#, 400, Some("stop"), None);
    bad("/v1/chat/completions", r#"{"messages": [{"role": "user", "content": "hi"}]}"#, 400, Some("messages"), None);
    bad("/v1/nothing", "{}", 404, None, None);
    // The server goes on.
    let (tokens, finish) = complete(server.port, &[1, 2, 3], 4, false);
    assert_eq!((tokens.len(), finish.as_str()), (4, "length"));
    assert_eq!(server.get("/health").status, 200);
    assert_eq!(server.get("/v1/models").json()["data"][0]["id"], "tiny-llama");
    assert_eq!(server.metric("rdu_requests_refused_total{reason=\"bad_request\"}"), 15.0);
    assert_eq!(server.metric("rdu_requests_refused_total{reason=\"unknown_model\"}"), 1.0);
}

#[test]
fn serve_full_queue_gets_429_and_a_hang_up_frees_its_slot() {
    // One slot, one waiting place; each request would run 8000 steps unless hung up.
    let server = Server::start(&["tiny-llama", "--batch", "1", "--queue", "1", "--ctx", "8192", "--chunk", "8"]);
    let long = json!({"prompt": [1, 2, 3], "max_tokens": 8000, "temperature": 0, "stream": true}).to_string();
    let (a, _) = open_stream(server.port, "/v1/completions", &long, 1);
    let (b, seen) = open_stream(server.port, "/v1/completions", &long, 0);
    assert!(seen.is_empty());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while server.metric("rdu_queue_depth") < 1.0 {
        assert!(std::time::Instant::now() < deadline, "the second request never queued");
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused = server.post("/v1/completions", &long);
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.json()["error"]["type"], "rate_limit_error");
    // The first hangs up: the second takes its slot and streams.
    drop(a);
    let (mut b, mut seen) = (b, Vec::new());
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("data: ") {
        let n = std::io::Read::read(&mut b, &mut buf).expect("the second request streams");
        assert!(n > 0, "the second request's stream ended");
        seen.extend_from_slice(&buf[..n]);
    }
    assert_eq!(server.metric("rdu_requests_finished_total{finish=\"cancelled\"}"), 1.0);
    assert!(server.metric("rdu_generation_tokens_total") < 8000.0, "the hung-up request did not run to its end");
    drop(b);
    while server.metric("rdu_running_sequences") > 0.0 {
        assert!(std::time::Instant::now() < deadline, "the second hang-up was never noticed");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(server.metric("rdu_requests_finished_total{finish=\"cancelled\"}"), 2.0);
    assert_eq!(server.metric("rdu_requests_refused_total{reason=\"queue_full\"}"), 1.0);
}

#[test]
fn serve_sigterm_finishes_the_requests_in_flight_then_exits() {
    let mut server = Server::start(&["tiny-llama", "--batch", "2", "--ctx", "4096", "--chunk", "8", "--profile"]);
    let body = json!({"prompt": [5, 6, 7], "max_tokens": 3000, "temperature": 0, "stream": true}).to_string();
    let (s, first) = open_stream(server.port, "/v1/completions", &body, 1);
    server.terminate();
    // No new work is taken: the listener is closed or the request is refused with 503.
    std::thread::sleep(Duration::from_millis(200));
    if let Ok(mut late) = std::net::TcpStream::connect(("127.0.0.1", server.port)) {
        use std::io::{Read, Write};
        let _ = late.set_read_timeout(Some(Duration::from_secs(30)));
        let req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        if late.write_all(req.as_bytes()).is_ok() {
            let mut text = String::new();
            let _ = late.read_to_string(&mut text);
            assert!(text.is_empty() || text.starts_with("HTTP/1.1 503"), "a request after SIGTERM: {text}");
        }
    }
    let events: Vec<String> = first.into_iter().chain(read_rest(s)).collect();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "the stream in flight was finished");
    let finishes: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .map(|v| v["choices"][0]["finish_reason"].clone())
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, vec![json!("length")]);
    // One chunk per token, then the finish chunk and [DONE].
    assert_eq!(events.len(), 3000 + 2);
    assert!(server.wait(Duration::from_secs(120)).success(), "rdu serve exits 0 after SIGTERM");
    // With --profile, where the time went is printed as it stops: the 3,000 decode steps'
    // linears among the rows.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let log = loop {
        let log = server.stderr.lock().expect("log").clone();
        if log.lines().any(|l| l.starts_with("total")) || std::time::Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let table: Vec<&str> = log.lines().skip_while(|l| !l.contains("(--profile)")).collect();
    let linear = table.iter().find(|l| l.starts_with("linear ")).unwrap_or_else(|| panic!("no linear row:\n{log}"));
    let calls: u64 = linear.split_whitespace().rev().nth(3).and_then(|c| c.parse().ok()).expect("calls");
    assert!(calls >= 3000, "a linear of every step: {linear}");
}

/// A Gemma-style chat template (the real one's structure: BOS, alternating turns, a refusal
/// otherwise).
const TEMPLATE: &str = "{{ bos_token }}{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

#[test]
fn serve_chat_template_sampling_and_stop_strings() {
    let dir = tempfile::tempdir().expect("temp dir");
    let template = dir.path().join("chat.jinja");
    std::fs::write(&template, TEMPLATE).expect("write the template");
    let gguf = rdu_testkit::fixtures::gguf_file("gemma3", "f32");
    let gguf = gguf.to_str().expect("a UTF-8 path");
    let server = Server::start(&[
        gguf,
        "--batch",
        "2",
        "--ctx",
        "128",
        "--chunk",
        "8",
        "--chat-template",
        template.to_str().expect("path"),
    ]);
    let chat = |body: Value| server.post("/v1/chat/completions", &body.to_string());
    let r = chat(json!({"messages": [{"role": "user", "content": " Hello "}], "max_tokens": 6, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert!(v["choices"][0]["message"]["content"].is_string());
    // The rendered prompt is "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    // the "<bos>" the template writes read as the BOS control token: the same ids, and so the
    // same greedy tokens, as the text after it completed with the BOS the tokenizer adds.
    let rendered = "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n";
    let body = json!({"prompt": rendered, "max_tokens": 6, "temperature": 0});
    let plain = server.post("/v1/completions", &body.to_string()).json();
    assert_eq!(v["usage"], plain["usage"]);
    assert_eq!(v["choices"][0]["message"]["content"], plain["choices"][0]["text"]);
    // Roles that do not alternate: the template's own refusal, as a 400.
    let r = chat(json!({"messages": [{"role": "assistant", "content": "hi"}]}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["error"]["message"].as_str().expect("message").contains("alternate"), "{}", r.body);
    // Streamed, with usage: a role delta first, then content, the finish, the usage, [DONE].
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let events = chat(body).events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let first: Value = serde_json::from_str(&events[0]).expect("json");
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).expect("json");
    assert_eq!(usage["usage"]["completion_tokens"].as_u64().map(|n| n <= 4), Some(true));
    // The same seed samples the same tokens.
    let sampled = |seed: u64| {
        let body = json!({"prompt": "abc", "max_tokens": 8, "temperature": 1.0, "top_k": 40, "top_p": 0.9, "seed": seed, "return_token_ids": true});
        server.post("/v1/completions", &body.to_string()).json()["choices"][0]["token_ids"].clone()
    };
    assert_eq!(sampled(7), sampled(7));
    // A stop string: the text ends before its first occurrence, and the finish reason says so.
    let plain = server
        .post("/v1/completions", &json!({"prompt": "abc", "max_tokens": 16, "temperature": 0}).to_string())
        .json();
    let text = plain["choices"][0]["text"].as_str().expect("text").to_string();
    let stop: String = text.chars().skip(text.chars().count() / 2).take(1).collect();
    assert!(!stop.is_empty(), "the model generated text: {text:?}");
    let stopped = server
        .post(
            "/v1/completions",
            &json!({"prompt": "abc", "max_tokens": 16, "temperature": 0, "stop": [stop.clone(), "\u{2603}\u{2603}"]})
                .to_string(),
        )
        .json();
    let want = &text[..text.find(&stop).expect("in the text")];
    assert_eq!(stopped["choices"][0]["text"], json!(want), "stop {stop:?} in {text:?}");
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
}
