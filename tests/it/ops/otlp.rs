//! OpenTelemetry export: with the `otlp` feature, `--otlp-endpoint` sends the reconcile spans
//! over OTLP/HTTP (here to a collector stand-in that records what it is sent); without the
//! feature the flag is refused. `cargo test --features otlp --test it ops::otlp` runs the first.

use crate::support::*;

#[cfg(feature = "otlp")]
#[test]
fn reconcile_spans_reach_an_otlp_collector_with_their_fields() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// (path, body) of every request the stand-in received.
    type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;
    let received: Received = Arc::default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("address").port();
    let sink = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let sink = sink.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut request = String::new();
                    if reader.read_line(&mut request).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = request.split_whitespace().nth(1).unwrap_or_default().to_owned();
                    let mut length = 0;
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        if header.trim().is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    sink.lock().expect("lock").push((path, body));
                    let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if reader.get_mut().write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });

    install_crds();
    let ns = Namespace::new("otlp");
    let endpoint = format!("http://127.0.0.1:{port}");
    let operator = Operator::start_with(
        &root().join("rules"),
        &templates(),
        &ns.0,
        &["--otlp-endpoint", &endpoint],
    );
    apply_yaml(&ns.0, &database("orders", 1, ""));
    let has = |body: &[u8], text: &str| body.windows(text.len()).any(|w| w == text.as_bytes());
    // The batch exporter sends every 5 s; a protobuf body holds the span names and attribute
    // keys and string values as they are.
    wait_until(Duration::from_secs(60), "the reconcile span exported", || {
        received.lock().expect("lock").iter().any(|(path, body)| {
            path == "/v1/traces"
                && [
                    "reconcile",
                    "reconciling object",
                    "trigger",
                    "parent_event",
                    "database",
                    "orders",
                    "ruleop",
                ]
                .iter()
                .all(|text| has(body, text))
        })
    });
    drop(operator);
}

#[cfg(not(feature = "otlp"))]
#[test]
fn the_otlp_endpoint_flag_is_refused_by_a_build_without_the_feature() {
    let out = std::process::Command::new(binary())
        .args(["run", "--otlp-endpoint", "http://127.0.0.1:4318"])
        .output()
        .expect("ruleop runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--otlp-endpoint needs a build with the `otlp` feature"),
        "{stderr}"
    );
}
