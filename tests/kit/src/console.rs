//! `ruleop console` for tests and the console benchmark: start it with the shipped rules, send
//! it raw HTTP requests, and load its pages in headless chromium (`scripts/chromium.sh`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{binary, control_plane, free_port, root, templates, text};

/// A running `ruleop console` with the shipped rules, stopped when dropped.
pub struct Console {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Console {
    /// Starts it and waits for its first line (it is listening then).
    pub fn start() -> Self {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut child = Command::new(binary())
            .args(["console", "--addr", &addr, "--rules"])
            .arg(root().join("rules"))
            .arg("--templates")
            .arg(templates())
            .env("KUBECONFIG", &control_plane().kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start ruleop console");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the console's first line");
        assert!(line.starts_with("console: http://"), "{line:?}");
        Console {
            child,
            url: format!("http://{addr}"),
        }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's chromium, installed when missing.
pub fn chromium() -> PathBuf {
    let out = Command::new(root().join("scripts/chromium.sh"))
        .output()
        .expect("scripts/chromium.sh runs");
    assert!(out.status.success(), "scripts/chromium.sh: {}", text(&out.stderr));
    PathBuf::from(text(&out.stdout).trim())
}

/// Headless chromium flags: as root it needs --no-sandbox; no GPU, no first-run UI.
pub fn headless(profile: &Path) -> Vec<String> {
    vec![
        "--headless".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--no-first-run".to_owned(),
        format!("--user-data-dir={}", profile.display()),
    ]
}

/// The DOM chromium builds from `url`, serialized (`--dump-dom`).
pub fn dom(url: &str) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let out = Command::new(chromium())
        .args(headless(profile.path()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium --dump-dom {url}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// One raw HTTP/1.1 request; the status code and body.
pub fn request(url: &str, method: &str, path: &str) -> (u16, String) {
    request_for_host(url, method, path, url.trim_start_matches("http://"))
}

/// One raw HTTP/1.1 request to `url` naming `host` in its `Host` header (what a browser sends
/// for a page on that host, even when the name resolves to the console's address).
pub fn request_for_host(url: &str, method: &str, path: &str, host: &str) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).expect("connect to the console");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}
