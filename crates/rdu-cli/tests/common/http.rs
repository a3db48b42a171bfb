//! `rdu serve` as a child process on an ephemeral loopback port, and a small HTTP/1.1 client
//! over `TcpStream` (requests, server-sent events, a client that hangs up mid-stream). Every
//! socket has a timeout, and the child is killed when the test drops it: nothing hangs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any one socket read or write may wait.
const IO_TIMEOUT: Duration = Duration::from_secs(120);

/// A running `rdu serve`.
pub struct Server {
    child: Child,
    pub port: u16,
    /// Everything the server printed on stderr so far.
    pub stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `rdu serve ARGS --port 0` and waits (at most 10 minutes: it lowers first) until it
    /// listens.
    pub fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rdu"))
            .arg("serve")
            .args(args)
            .args(["--port", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rdu serve starts");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().expect("stderr piped");
        let log = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("listening on http://").nth(1) {
                    let _ = tx.send(addr.to_string());
                }
                let mut log = log.lock().expect("log");
                log.push_str(&line);
                log.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(600)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!("rdu serve {args:?} never listened:\n{}", stderr.lock().expect("log"));
            }
        };
        assert!(addr.starts_with("127.0.0.1:"), "rdu serve listens on loopback by default, not {addr}");
        let port = addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
        Server { child, port, stderr }
    }

    /// The server's resident set, KiB (`VmRSS` of `/proc/PID/status`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("/proc status");
        let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).expect("VmRSS");
        line.trim().trim_end_matches("kB").trim().parse().expect("a number of kB")
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        // SAFETY: kill(2) on our own child's pid with a valid signal number.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0, "SIGTERM sent");
    }

    /// Waits (at most `limit`) for the server to exit.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(start.elapsed() < limit, "rdu serve did not exit within {limit:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn get(&self, path: &str) -> Response {
        request(self.port, "GET", path, None)
    }

    pub fn post(&self, path: &str, body: &str) -> Response {
        request(self.port, "POST", path, Some(body))
    }

    /// The value of a metric line (`name{labels}`), 0 when absent.
    pub fn metric(&self, line: &str) -> f64 {
        let text = self.get("/metrics").body;
        text.lines()
            .find_map(|l| l.strip_prefix(line).and_then(|rest| rest.strip_prefix(' ')))
            .map_or(0.0, |v| v.trim().parse().expect("a metric value"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let status = self.child.try_wait().ok().flatten();
            eprintln!(
                "rdu serve (exit: {status:?}) said:\n{}",
                self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response: status, headers (names lowercased), body (de-chunked).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `data:` payloads of a server-sent-events body.
    pub fn events(&self) -> Vec<String> {
        self.body.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect()
    }
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    s.set_write_timeout(Some(IO_TIMEOUT)).expect("timeout");
    s
}

/// Sends raw request bytes and reads the whole response (the server closes the connection).
pub fn raw(port: u16, bytes: &[u8]) -> Response {
    let mut s = connect(port);
    s.write_all(bytes).expect("send");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).expect("read the response");
    parse(&buf)
}

/// One request (`Connection: close`).
pub fn request(port: u16, method: &str, path: &str, body: Option<&str>) -> Response {
    let body = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    raw(port, [head.as_bytes(), body.as_bytes()].concat().as_slice())
}

/// Posts a streaming `body` to `path` and reads until `events` `data:` lines have arrived;
/// returns the open connection and those payloads (the caller hangs up by dropping it).
pub fn open_stream(port: u16, path: &str, body: &str, events: usize) -> (TcpStream, Vec<String>) {
    let mut s = connect(port);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("send");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while String::from_utf8_lossy(&seen).matches("data: ").count() < events {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "the stream ended before {events} events: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    (s, parse_partial(&seen))
}

/// Reads the rest of an open stream until the server ends it; every `data:` payload.
pub fn read_rest(mut s: TcpStream) -> Vec<String> {
    let mut seen = Vec::new();
    let _ = s.read_to_end(&mut seen);
    parse_partial(&seen)
}

/// [`open_stream`], then hangs up.
pub fn hang_up_after(port: u16, path: &str, body: &str, events: usize) -> Vec<String> {
    let (s, seen) = open_stream(port, path, body, events);
    let _ = s.shutdown(std::net::Shutdown::Both);
    seen
}

fn parse_partial(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    text.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect()
}

fn parse(buf: &[u8]) -> Response {
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let raw_body = &buf[split + 4..];
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(raw_body) } else { raw_body.to_vec() };
    Response { status, headers, body: String::from_utf8(body).expect("a UTF-8 body") }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).expect("a chunk size");
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
    out
}
