//! `rdu serve`'s server: an OpenAI-compatible HTTP API over the continuous-batching scheduler
//! (`rdu_host::schedule`) run on the host engine in real time.
//!
//! Two threads: the caller's runs the engine loop ([`worker`]: scheduler, host steps,
//! sampling, stops); a tokio runtime on its own thread serves HTTP ([`http`]: axum routes, SSE
//! streams) and hands each checked request to the worker over a channel, with a channel of its
//! own for the tokens coming back. [`api`] checks request bodies, [`chat`] renders chat
//! templates, [`text`] streams text and finds stop strings, [`metrics`] is `/metrics`.
//!
//! Like `rdu-host`, this crate never depends on the compiler: a loaded engine is enough.

pub mod api;
pub mod chat;
mod http;
pub mod metrics;
pub mod text;
mod worker;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use rdu_host::schedule::{HostEngine, Scheduler};
use rdu_host::Tokenizer;

pub use chat::ChatTemplate;

/// How the server runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to listen (`127.0.0.1:8080`; port 0 picks a free one).
    pub addr: SocketAddr,
    /// The model name `/v1/models` lists and requests must name (or leave out).
    pub name: String,
    /// Requests that may wait for a slot; beyond them a request gets 429.
    pub queue: usize,
    /// Tokens a step may process (default: a chunk beside every decoding row).
    pub budget: Option<usize>,
}

/// The served model: its engine, tokenizer, chat template and end-of-sequence ids.
pub struct Model {
    pub engine: HostEngine,
    pub tokenizer: Option<Tokenizer>,
    pub template: Option<ChatTemplate>,
    pub eos: Vec<u32>,
}

/// What the HTTP side and the worker share.
pub struct Shared {
    pub epoch: Instant,
    /// Requests accepted but not yet in a slot (the channel's and the scheduler's queue).
    pub queued: AtomicUsize,
    pub draining: AtomicBool,
    pub next_id: AtomicU64,
    metrics: Mutex<metrics::Metrics>,
}

impl Shared {
    /// Seconds since the server started: the scheduler's clock.
    pub fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// The metrics, even if a thread panicked holding them.
    pub fn metrics(&self) -> MutexGuard<'_, metrics::Metrics> {
        self.metrics.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("{0}")]
    Config(String),
    #[error("the HTTP server failed: {0}")]
    Http(String),
}

/// Serves `model` until SIGTERM or SIGINT: new connections stop, the requests in flight
/// finish, then it returns. Prints `listening on http://ADDR` on stderr once it accepts.
pub fn serve(model: Model, opts: Options) -> Result<(), ServeError> {
    ignore_sigpipe();
    let cfg = model.engine.config(opts.budget, opts.queue.max(1));
    let sched = Scheduler::new(cfg).map_err(ServeError::Config)?;
    if let Some(t) = &model.template {
        t.check().map_err(ServeError::Config)?;
    }
    let listener = TcpListener::bind(opts.addr).map_err(|source| ServeError::Bind { addr: opts.addr, source })?;
    let local = listener.local_addr().map_err(|source| ServeError::Bind { addr: opts.addr, source })?;
    listener.set_nonblocking(true).map_err(|source| ServeError::Bind { addr: opts.addr, source })?;
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        queued: AtomicUsize::new(0),
        draining: AtomicBool::new(false),
        next_id: AtomicU64::new(1),
        metrics: Mutex::new(metrics::Metrics::default()),
    });
    let tokenizer = model.tokenizer.map(Arc::new);
    let (jobs, rx) = std::sync::mpsc::channel();
    let app = http::App {
        jobs,
        shared: shared.clone(),
        name: opts.name.clone(),
        tokenizer: tokenizer.clone(),
        template: model.template,
        ctx: cfg.ctx,
        vocab: model.engine.vocab(),
        queue: cfg.queue,
    };
    let server = std::thread::Builder::new()
        .name("rdu-serve-http".into())
        .spawn(move || http::run(listener, app))
        .map_err(|e| ServeError::Http(e.to_string()))?;
    eprintln!("rdu serve: {} on {} slot(s), ctx {}, listening on http://{local}", opts.name, cfg.slots, cfg.ctx);
    let worker = worker::Worker { engine: model.engine, sched, tokenizer, eos: model.eos, shared };
    worker.run(rx);
    match server.join() {
        Ok(result) => result,
        Err(_) => Err(ServeError::Http("the HTTP thread panicked".into())),
    }
}

/// A client that hangs up makes the next write to its socket raise SIGPIPE; with the default
/// disposition (which `rdu` restores so that `rdu presets | head` ends quietly) that would end
/// the server. Ignored, the write fails with EPIPE and only that request ends.
fn ignore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: setting SIGPIPE's disposition to SIG_IGN; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}
