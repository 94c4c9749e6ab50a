//! Which `Host` a console request may name. A page on another site can make an operator's browser
//! send requests to the console's address (DNS rebinding: `rebind.attacker.example` resolving to
//! 127.0.0.1), and read the answers as its own origin's; such a request names the attacker's host,
//! so the console answers only the names it is reached by: loopback, the address it is bound to,
//! and the `--allowed-host` names.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The host names a request's `Host` header may carry (lowercase; an IPv6 address in brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllowedHosts(Vec<String>);

impl AllowedHosts {
    /// `localhost`, `127.0.0.1`, `[::1]`, the bound address (unless it is 0.0.0.0 or `::`), and
    /// `extra` (names or addresses, as a browser writes them in the address bar).
    pub(crate) fn new(bound: SocketAddr, extra: &[String]) -> Self {
        let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "[::1]".to_owned()];
        if !bound.ip().is_unspecified() {
            names.push(host_of_ip(bound.ip()));
        }
        for name in extra {
            let name = name.trim().to_ascii_lowercase();
            let name = match name.parse::<IpAddr>() {
                Ok(ip) => host_of_ip(ip),
                Err(_) => name,
            };
            if !name.is_empty() && !names.contains(&name) {
                names.push(name);
            }
        }
        AllowedHosts(names)
    }

    /// Whether a `Host` header value (`name`, `name:port`, `[v6]:port`) names an allowed host.
    pub(crate) fn allows(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let name = match host.rfind(':') {
            Some(colon) if !host[..colon].is_empty() && host[colon + 1..].bytes().all(|b| b.is_ascii_digit()) => {
                // `[::1]:8081` and `localhost:8081` lose their port; a bare `::1` is no Host.
                if host.starts_with('[') == host[..colon].ends_with(']') {
                    &host[..colon]
                } else {
                    host.as_str()
                }
            }
            _ => host.as_str(),
        };
        self.0.iter().any(|allowed| allowed == name)
    }

    /// The names, for the refusal's message and the start-up line.
    pub(crate) fn names(&self) -> &[String] {
        &self.0
    }
}

fn host_of_ip(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// Answers `421 Misdirected Request` to a request whose `Host` is missing or not allowed.
pub(crate) async fn only_allowed_hosts(
    State(hosts): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if hosts.allows(host) {
        return next.run(request).await;
    }
    (
        StatusCode::MISDIRECTED_REQUEST,
        format!(
            "the console answers requests for {} only (start it with --allowed-host NAME to add one)\n",
            hosts.names().join(", ")
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> AllowedHosts {
        AllowedHosts::new("127.0.0.1:8081".parse().expect("addr"), &[])
    }

    #[test]
    fn loopback_names_with_or_without_a_port_are_allowed() {
        let hosts = loopback();
        for host in [
            "localhost",
            "LOCALHOST:8081",
            "127.0.0.1:8081",
            "127.0.0.1",
            "[::1]:8081",
            "[::1]",
        ] {
            assert!(hosts.allows(host), "{host}");
        }
    }

    #[test]
    fn other_names_and_tricks_are_refused() {
        let hosts = loopback();
        for host in [
            "",
            "rebind.attacker.example",
            "rebind.attacker.example:8081",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "::1",
            "[::1",
            "localhost:80:80",
            "evil@localhost",
        ] {
            assert!(!hosts.allows(host), "{host:?}");
        }
    }

    #[test]
    fn the_bound_address_and_extra_names_are_allowed_but_not_any_address() {
        let hosts = AllowedHosts::new(
            "10.0.0.5:8081".parse().expect("addr"),
            &["Console.Example.com".to_owned(), "fd00::1".to_owned()],
        );
        for host in ["10.0.0.5:8081", "console.example.com", "[fd00::1]:8081"] {
            assert!(hosts.allows(host), "{host}");
        }
        let any = AllowedHosts::new("0.0.0.0:8081".parse().expect("addr"), &[]);
        assert!(!any.allows("0.0.0.0:8081"));
        assert!(!any.allows("10.0.0.5:8081"));
    }
}
