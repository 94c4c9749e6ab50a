//! The embedded etcd of a restartable control plane, reached over its HTTP gateway on loopback:
//! compaction, so a watch that resumes from an older revision is answered 410 Gone and relists.

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::Value;

use super::ControlPlane;

/// The embedded etcd's client URL (`http://127.0.0.1:PORT`) of a restartable plane, from the
/// `endpoints.json` it keeps in its data directory, beside its kubeconfig.
pub fn etcd_client_url(plane: &ControlPlane) -> Option<String> {
    let saved = std::fs::read_to_string(plane.kubeconfig.parent()?.join("endpoints.json")).ok()?;
    let saved: Value = serde_json::from_str(&saved).ok()?;
    saved["etcdClientURL"].as_str().map(str::to_owned)
}

/// A POST of JSON to etcd's HTTP gateway at `url` (loopback only); the response body as JSON.
fn etcd_post(url: &str, path: &str, body: &str) -> Result<Value, String> {
    let host = url
        .strip_prefix("http://")
        .ok_or("etcd is not served over plain http")?;
    if !host.starts_with("127.0.0.1:") {
        return Err(format!("{host} is not a loopback address"));
    }
    let mut stream = std::net::TcpStream::connect(host).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| e.to_string())?;
    let (head, rest) = response.split_once("\r\n\r\n").ok_or("no HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(head.lines().next().unwrap_or_default().to_owned());
    }
    // The JSON object, whether or not the body came chunked.
    let json = rest
        .find('{')
        .zip(rest.rfind('}'))
        .map(|(a, b)| &rest[a..=b])
        .ok_or("no JSON in the response")?;
    serde_json::from_str(json).map_err(|e| e.to_string())
}

/// Compacts etcd to its current revision (physically), so older revisions are gone and a
/// watch that resumes from one of them is answered 410 Gone. Returns the revision.
pub fn compact_etcd(url: &str) -> Result<i64, String> {
    // The key "/" (base64 "Lw=="): any range answers with the store's current revision.
    let range = etcd_post(url, "/v3/kv/range", r#"{"key":"Lw==","limit":1}"#)?;
    let revision: i64 = range["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| format!("no revision in {range}"))?;
    etcd_post(
        url,
        "/v3/kv/compaction",
        &format!(r#"{{"revision":"{revision}","physical":true}}"#),
    )?;
    Ok(revision)
}
