//! The HTTP side: axum routes on a tokio runtime of one worker thread (the engine loop has the
//! cores), server-sent events for streams, graceful shutdown on SIGTERM / SIGINT.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rdu_host::Tokenizer;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::api::{self, ApiError, ChatRequest, CompletionRequest, Generation};
use crate::chat::{self, ChatTemplate};
use crate::worker::{Job, Out};
use crate::{ServeError, Shared};

/// What every handler reads.
pub struct App {
    pub jobs: Sender<Job>,
    pub shared: Arc<Shared>,
    pub name: String,
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub template: Option<ChatTemplate>,
    pub ctx: usize,
    pub vocab: usize,
    pub queue: usize,
}

type AppState = State<Arc<App>>;

/// Serves `listener` until a shutdown signal, then until every request in flight is done.
pub fn run(listener: std::net::TcpListener, app: App) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("rdu-serve-io")
        .enable_all()
        .build()
        .map_err(|e| ServeError::Http(e.to_string()))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| ServeError::Http(e.to_string()))?;
        let app = Arc::new(app);
        let router = Router::new()
            .route("/v1/completions", post(completions))
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/models", get(models))
            .route("/health", get(health))
            .route("/metrics", get(metrics))
            .fallback(not_found)
            .with_state(app.clone());
        let result = axum::serve(listener, router).with_graceful_shutdown(shutdown(app)).await;
        result.map_err(|e| ServeError::Http(e.to_string()))
    })
}

/// Waits for SIGTERM or SIGINT, then refuses new requests (503) while the rest finish.
async fn shutdown(app: Arc<App>) {
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    app.shared.draining.store(true, Ordering::SeqCst);
    eprintln!("rdu serve: shutting down; finishing the requests in flight");
}

/// An error response: the OpenAI error body, `Retry-After` when there is one.
fn error(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, Json(e.body())).into_response();
    if let Some(s) = e.retry_after {
        if let Ok(v) = s.to_string().parse() {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    response
}

impl App {
    /// Counts a refusal and answers it.
    fn refuse(&self, reason: &'static str, e: &ApiError) -> Response {
        *self.shared.metrics().refused.entry(reason).or_default() += 1;
        error(e)
    }

    fn seed(&self, id: u64) -> u64 {
        id.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// Hands a checked request to the worker: 503 while shutting down, 429 when the queue is
    /// full; then the stream, or the whole answer.
    async fn submit(&self, kind: Kind, prompt: Vec<u32>, generation: Generation, id: u64) -> Response {
        if self.shared.draining.load(Ordering::SeqCst) {
            return self.refuse("shutting_down", &ApiError::busy(503, "the server is shutting down"));
        }
        let reserved =
            self.shared.queued.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| (q < self.queue).then_some(q + 1));
        if reserved.is_err() {
            let message = format!("every slot is busy and {} requests wait; retry later", self.queue);
            return self.refuse("queue_full", &ApiError::busy(429, message));
        }
        let (out, rx) = unbounded_channel();
        let frames = Frames::new(kind, id, &self.name, &prompt, &generation);
        let job = Job { id, prompt, generation: generation.clone(), arrived: self.shared.now(), out };
        if self.jobs.send(job).is_err() {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            return self.refuse("shutting_down", &ApiError::busy(503, "the server is shutting down"));
        }
        if generation.stream {
            stream(rx, frames).into_response()
        } else {
            whole(rx, frames).await
        }
    }
}

async fn completions(State(app): AppState, body: Bytes) -> Response {
    let id = app.shared.next_id.fetch_add(1, Ordering::SeqCst);
    let checked = (|| -> Result<(Vec<u32>, Generation), ApiError> {
        let req = CompletionRequest::parse(&body)?;
        api::check_model(&req.params, &app.name)?;
        let generation = api::generation(&req.params, Some(16), app.seed(id))?;
        check_stops(&generation, app.tokenizer.is_some())?;
        let ids = api::prompt_ids(&req.prompt, app.vocab, app.tokenizer.as_deref())?;
        api::check_length(ids.len(), app.ctx)?;
        Ok((ids, generation))
    })();
    match checked {
        Ok((ids, generation)) => app.submit(Kind::Completion, ids, generation, id).await,
        Err(e) => app.refuse(refusal_reason(&e), &e),
    }
}

async fn chat_completions(State(app): AppState, body: Bytes) -> Response {
    let id = app.shared.next_id.fetch_add(1, Ordering::SeqCst);
    let checked = (|| -> Result<(Vec<u32>, Generation), ApiError> {
        let req = ChatRequest::parse(&body)?;
        api::check_model(&req.params, &app.name)?;
        let generation = api::generation(&req.params, None, app.seed(id))?;
        let (Some(template), Some(tokenizer)) = (&app.template, &app.tokenizer) else {
            let why = "this model has no chat template (and tokenizer); use /v1/completions, or start rdu serve with --chat-template FILE";
            return Err(ApiError::invalid(Some("messages"), why));
        };
        let messages = chat::normalise(&req.messages).map_err(|e| ApiError::invalid(Some("messages"), e))?;
        let text = template.render(&messages).map_err(|e| ApiError::invalid(Some("messages"), e))?;
        let ids = tokenizer.encode_chat(&text).map_err(|e| ApiError::invalid(Some("messages"), e.to_string()))?;
        if ids.is_empty() {
            return Err(ApiError::invalid(Some("messages"), "the rendered chat prompt has no tokens"));
        }
        api::check_length(ids.len(), app.ctx)?;
        Ok((ids, generation))
    })();
    match checked {
        Ok((ids, generation)) => app.submit(Kind::Chat, ids, generation, id).await,
        Err(e) => app.refuse(refusal_reason(&e), &e),
    }
}

fn refusal_reason(e: &ApiError) -> &'static str {
    match e.status {
        404 => "unknown_model",
        _ => "bad_request",
    }
}

/// Stop strings are matched in text: a model without a tokenizer has none.
fn check_stops(g: &Generation, has_tokenizer: bool) -> Result<(), ApiError> {
    if !g.stop.is_empty() && !has_tokenizer {
        return Err(ApiError::invalid(Some("stop"), "this model has no tokenizer, so no text to find stop strings in"));
    }
    Ok(())
}

async fn models(State(app): AppState) -> Response {
    let model = json!({"id": app.name, "object": "model", "created": 0, "owned_by": "rdu", "max_model_len": app.ctx});
    Json(json!({"object": "list", "data": [model]})).into_response()
}

async fn health(State(app): AppState) -> Response {
    if app.shared.draining.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "shutting down"}))).into_response();
    }
    Json(json!({"status": "ok"})).into_response()
}

async fn metrics(State(app): AppState) -> Response {
    let mut m = app.shared.metrics().clone();
    m.waiting = app.shared.queued.load(Ordering::SeqCst);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], m.render()).into_response()
}

async fn not_found() -> Response {
    let e = ApiError { status: 404, kind: "not_found_error", ..ApiError::invalid(None, "no such route") };
    error(&e)
}

/// Which endpoint a request came through: it shapes the response objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Completion,
    Chat,
}

/// The response objects of one request.
#[derive(Clone, Debug)]
struct Frames {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
    prompt_tokens: usize,
    include_usage: bool,
    /// With `return_token_ids`: the prompt's ids (each choice's generated ids too).
    prompt_ids: Option<Vec<u32>>,
}

impl Frames {
    fn new(kind: Kind, id: u64, model: &str, prompt: &[u32], g: &Generation) -> Frames {
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let id = match kind {
            Kind::Completion => format!("cmpl-{id}"),
            Kind::Chat => format!("chatcmpl-{id}"),
        };
        let prompt_ids = g.return_token_ids.then(|| prompt.to_vec());
        let (model, prompt_tokens, include_usage) = (model.to_string(), prompt.len(), g.include_usage);
        Frames { kind, id, created, model, prompt_tokens, include_usage, prompt_ids }
    }

    fn object(&self, stream: bool) -> &'static str {
        match (self.kind, stream) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    /// One choice: the text (as `text` or a message / delta) and its finish reason.
    fn choice(&self, text: &str, tokens: &[u32], finish: Option<&str>, stream: bool, first: bool) -> Value {
        let mut c = match (self.kind, stream) {
            (Kind::Completion, _) => json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish}),
            (Kind::Chat, false) => {
                json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": finish})
            }
            (Kind::Chat, true) if first => {
                json!({"index": 0, "delta": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": finish})
            }
            (Kind::Chat, true) if finish.is_some() => {
                json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish})
            }
            (Kind::Chat, true) => {
                json!({"index": 0, "delta": {"content": text}, "logprobs": null, "finish_reason": finish})
            }
        };
        if let Some(ids) = &self.prompt_ids {
            c["token_ids"] = json!(tokens);
            if first {
                c["prompt_token_ids"] = json!(ids);
            }
        }
        c
    }

    fn object_with(&self, choices: Value, stream: bool, usage: Option<Value>) -> Value {
        let mut v = json!({"id": self.id, "object": self.object(stream), "created": self.created, "model": self.model, "choices": choices});
        if let Some(u) = usage {
            v["usage"] = u;
        }
        v
    }

    fn usage(&self, completion_tokens: usize) -> Value {
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": self.prompt_tokens + completion_tokens})
    }
}

/// Collects the whole answer of a request that does not stream.
async fn whole(mut rx: UnboundedReceiver<Out>, frames: Frames) -> Response {
    let (mut text, mut tokens) = (String::new(), Vec::new());
    while let Some(out) = rx.recv().await {
        match out {
            Out::Delta { text: t, token } => {
                text.push_str(&t);
                tokens.extend(token);
            }
            Out::Done { finish, completion_tokens, .. } => {
                let choice = frames.choice(&text, &tokens, Some(finish), false, true);
                let body = frames.object_with(json!([choice]), false, Some(frames.usage(completion_tokens)));
                return Json(body).into_response();
            }
            Out::Failed(e) => return error(&e),
        }
    }
    error(&ApiError::server("the request ended without an answer"))
}

/// A request's answer as server-sent events: a chunk per token, the finish reason, the usage
/// when asked (`stream_options.include_usage`), then `[DONE]`; an error as an `error` object.
fn stream(
    rx: UnboundedReceiver<Out>,
    frames: Frames,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    struct St {
        rx: UnboundedReceiver<Out>,
        frames: Frames,
        pending: VecDeque<Event>,
        first: bool,
        ended: bool,
    }
    let st = St { rx, frames, pending: VecDeque::new(), first: true, ended: false };
    let events = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(e) = st.pending.pop_front() {
                return Some((Ok(e), st));
            }
            if st.ended {
                return None;
            }
            let data = |v: Value| Event::default().data(v.to_string());
            match st.rx.recv().await {
                Some(Out::Delta { text, token }) => {
                    let tokens: Vec<u32> = token.into_iter().collect();
                    let choice = st.frames.choice(&text, &tokens, None, true, st.first);
                    st.first = false;
                    st.pending.push_back(data(st.frames.object_with(json!([choice]), true, None)));
                }
                Some(Out::Done { finish, completion_tokens, .. }) => {
                    let choice = st.frames.choice("", &[], Some(finish), true, st.first);
                    st.pending.push_back(data(st.frames.object_with(json!([choice]), true, None)));
                    if st.frames.include_usage {
                        let usage = Some(st.frames.usage(completion_tokens));
                        st.pending.push_back(data(st.frames.object_with(json!([]), true, usage)));
                    }
                    st.pending.push_back(Event::default().data("[DONE]"));
                    st.ended = true;
                }
                Some(Out::Failed(e)) => {
                    st.pending.push_back(data(e.body()));
                    st.ended = true;
                }
                None => st.ended = true,
            }
        }
    });
    Sse::new(events)
}
