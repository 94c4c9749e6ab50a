//! Where an `http` action may connect: the rule's `allowedHosts` against the rendered URL, then
//! every address its host resolves to. Pure: the sender resolves and connects, this decides.
//!
//! The URL is rendered from parent fields, which tenants write, so nothing in it is trusted: the
//! scheme, host and port must match an `allowedHosts` entry, userinfo is refused (it is how
//! `https://hooks.example.com{{ spec.path }}` with `@127.0.0.1:8080` moves the host), and a
//! name entry never reaches loopback, link-local, metadata, unspecified or operator-refused
//! (`--egress-deny-cidr`, the API server) addresses. Only an entry that names the address itself
//! (`http://127.0.0.1:8080`) or `localhost` reaches such an address, and only that one.
//!
//! Entries: `host` (https on 443), `host:port` (https on that port), `*.suffix` (any name
//! ending in `.suffix`, not `suffix` itself), `http://host[:port]` (plain http, default port
//! 80), an IP address in place of `host` (`[::1]` for IPv6), or `localhost` (loopback only).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ipnet::IpNet;
use url::{Host, Url};

/// The reason (condition, Event, metric) of a request refused by this policy.
pub(crate) const EGRESS_DENIED: &str = "EgressDenied";

/// The longest an `http` action may wait for its answer.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// A URL scheme an entry allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// `http://` (only when the entry says so).
    Http,
    /// `https://` (the default).
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The host part of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// Exactly this DNS name (lower case, no trailing dot).
    Name(String),
    /// Any name ending in `.` + this suffix.
    Wildcard(String),
    /// Exactly this address: the operator named it, so it may be loopback or refused.
    Ip(IpAddr),
    /// `localhost`: connects to loopback addresses only.
    Localhost,
}

/// One parsed `allowedHosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllowedHost {
    /// Scheme it allows.
    pub scheme: Scheme,
    /// Host it allows.
    pub host: HostPattern,
    /// Port it allows (the scheme's default when the entry names none).
    pub port: u16,
}

impl AllowedHost {
    /// Parses an entry; the error says what is wrong with it.
    pub(crate) fn parse(entry: &str) -> Result<Self, String> {
        let entry = entry.trim();
        let (scheme, authority) = match entry.split_once("://") {
            Some(("http", rest)) => (Scheme::Http, rest),
            Some(("https", rest)) => (Scheme::Https, rest),
            Some((other, _)) => return Err(format!("scheme {other:?} is not http or https")),
            None => (Scheme::Https, entry),
        };
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        if authority.is_empty() {
            return Err("no host".to_owned());
        }
        if authority.contains(['/', '?', '#', '@', '\\']) || authority.contains(char::is_whitespace) {
            return Err("an entry is [http://]host[:port]: no path, query, userinfo or spaces".to_owned());
        }
        let (wildcard, authority) = match authority.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, authority),
        };
        if authority.contains('*') {
            return Err("a wildcard is only `*.` in front of a domain, e.g. *.hooks.example.com".to_owned());
        }
        let url = Url::parse(&format!("{}://{authority}/", scheme.as_str())).map_err(|e| e.to_string())?;
        let port = url.port_or_known_default().ok_or("no port")?;
        let host = match url.host() {
            Some(Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_owned();
                if name.is_empty() {
                    return Err("no host".to_owned());
                }
                if wildcard {
                    if !name.contains('.') {
                        return Err(format!("*.{name} is too broad: name at least two labels after `*.`"));
                    }
                    HostPattern::Wildcard(name)
                } else if name == "localhost" {
                    HostPattern::Localhost
                } else {
                    HostPattern::Name(name)
                }
            }
            Some(_) if wildcard => return Err("a wildcard needs a domain, not an address".to_owned()),
            Some(Host::Ipv4(ip)) => HostPattern::Ip(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => HostPattern::Ip(IpAddr::V6(ip)),
            None => return Err("no host".to_owned()),
        };
        Ok(AllowedHost { scheme, host, port })
    }

    fn matches(&self, scheme: Scheme, host: &Host<&str>, port: u16) -> Option<Permit> {
        if self.scheme != scheme || self.port != port {
            return None;
        }
        match (&self.host, host) {
            (HostPattern::Name(name), Host::Domain(d)) => (d.trim_end_matches('.') == name).then_some(Permit::Public),
            (HostPattern::Wildcard(suffix), Host::Domain(d)) => d
                .trim_end_matches('.')
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
                .then_some(Permit::Public),
            (HostPattern::Localhost, Host::Domain(d)) => {
                (d.trim_end_matches('.') == "localhost").then_some(Permit::Loopback)
            }
            (HostPattern::Ip(ip), Host::Ipv4(v4)) => (*ip == IpAddr::V4(*v4)).then_some(Permit::Exactly(*ip)),
            (HostPattern::Ip(ip), Host::Ipv6(v6)) => (*ip == IpAddr::V6(*v6)).then_some(Permit::Exactly(*ip)),
            _ => None,
        }
    }
}

/// Which addresses a matched entry lets the request reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    /// A name entry: any address that is not refused.
    Public,
    /// `localhost`: loopback addresses only.
    Loopback,
    /// An address entry: exactly that address.
    Exactly(IpAddr),
}

/// A URL that passed the host check, waiting for its addresses to be checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The parsed URL, sent as is (never re-parsed from text, so what was checked is what goes).
    pub url: Url,
    /// `scheme://host`: all that status, Events and logs may show of the URL.
    pub origin: String,
    /// The DNS name to resolve, or `None` when the host is an address.
    pub name: Option<String>,
    /// The port to connect to.
    pub port: u16,
    /// What the matched entry allows.
    pub permit: Permit,
}

impl Target {
    /// The address to connect to when the host is one (no resolution).
    pub(crate) fn literal(&self) -> Option<IpAddr> {
        match self.url.host()? {
            Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
            Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
            Host::Domain(_) => None,
        }
    }
}

/// Why a request is refused before any connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Denied {
    /// The rule declares no `allowedHosts` (or one does not parse).
    NoAllowedHosts,
    /// The rendered URL does not parse.
    InvalidUrl,
    /// Not `http` or `https`.
    Scheme(String),
    /// `user[:password]@` in the URL.
    Userinfo {
        /// `scheme://host`.
        origin: String,
    },
    /// No entry matches scheme, host and port.
    HostNotAllowed {
        /// `scheme://host`.
        origin: String,
        /// The port the URL would connect to.
        port: u16,
    },
    /// The host resolves to an address the entry does not reach.
    RefusedAddress {
        /// `scheme://host`.
        origin: String,
    },
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::NoAllowedHosts => write!(f, "request refused: the rule declares no valid http.allowedHosts"),
            Denied::InvalidUrl => write!(f, "request refused: the rendered url is not a valid absolute URL"),
            Denied::Scheme(scheme) => write!(f, "request refused: scheme {scheme:?} is not http or https"),
            Denied::Userinfo { origin } => {
                write!(
                    f,
                    "request to {origin} refused: the url carries userinfo (`user@` before the host)"
                )
            }
            // The port stays out too: the tenant chose it.
            Denied::HostNotAllowed { origin, .. } => write!(
                f,
                "request to {origin} refused: no http.allowedHosts entry matches its scheme, host and port"
            ),
            Denied::RefusedAddress { origin } => write!(
                f,
                "request to {origin} refused: its host resolves to a refused address (loopback, link-local, metadata, unspecified or an operator-refused range)"
            ),
        }
    }
}

impl std::error::Error for Denied {}

/// `scheme://host` of a URL, or a placeholder when it does not parse: what may be shown.
pub(crate) fn origin(url: &str) -> String {
    match Url::parse(url) {
        Ok(url) => origin_of(&url),
        Err(_) => "(an invalid url)".to_owned(),
    }
}

fn origin_of(url: &Url) -> String {
    format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default())
}

/// Parses every entry; the first that does not parse is the error.
pub(crate) fn parse_allowed(entries: &[String]) -> Result<Vec<AllowedHost>, Denied> {
    let parsed: Vec<AllowedHost> = entries
        .iter()
        .map(|e| AllowedHost::parse(e))
        .collect::<Result<_, _>>()
        .map_err(|_| Denied::NoAllowedHosts)?;
    if parsed.is_empty() {
        return Err(Denied::NoAllowedHosts);
    }
    Ok(parsed)
}

/// The first check: the rendered URL against the entries, before any name is resolved.
pub(crate) fn check_url(text: &str, allowed: &[AllowedHost]) -> Result<Target, Denied> {
    let url = Url::parse(text.trim()).map_err(|_| Denied::InvalidUrl)?;
    let scheme = match url.scheme() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => return Err(Denied::Scheme(other.to_owned())),
    };
    let origin = origin_of(&url);
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Denied::Userinfo { origin });
    }
    let (Some(host), Some(port)) = (url.host(), url.port_or_known_default()) else {
        return Err(Denied::InvalidUrl);
    };
    let Some(permit) = allowed.iter().find_map(|a| a.matches(scheme, &host, port)) else {
        return Err(Denied::HostNotAllowed { origin, port });
    };
    let name = match host {
        Host::Domain(d) => Some(d.to_owned()),
        Host::Ipv4(_) | Host::Ipv6(_) => None,
    };
    Ok(Target {
        url,
        origin,
        name,
        port,
        permit,
    })
}

/// The second check: every address the host resolved to (or its literal address) must be one
/// the entry reaches; a single refused address refuses the request.
pub(crate) fn check_addrs(target: &Target, addrs: &[IpAddr], refused: &[IpNet]) -> Result<(), Denied> {
    let denied = || Denied::RefusedAddress {
        origin: target.origin.clone(),
    };
    if addrs.is_empty() {
        return Err(denied());
    }
    for addr in addrs {
        let addr = addr.to_canonical();
        let ok = match target.permit {
            Permit::Exactly(ip) => addr == ip.to_canonical(),
            Permit::Loopback => addr.is_loopback(),
            Permit::Public => !always_refused(addr) && !refused.iter().any(|net| net.contains(&addr)),
        };
        if !ok {
            return Err(denied());
        }
    }
    Ok(())
}

/// Both checks in one: the policy as a function of what the sender knows (the sender runs them
/// apart, resolving between; the tests state the policy through this).
#[cfg(test)]
pub(crate) fn decide(
    url: &str,
    allowed: &[AllowedHost],
    resolved: &[IpAddr],
    refused: &[IpNet],
) -> Result<Target, Denied> {
    let target = check_url(url, allowed)?;
    match target.literal() {
        Some(ip) => check_addrs(&target, &[ip], refused)?,
        None => check_addrs(&target, resolved, refused)?,
    }
    Ok(target)
}

/// Addresses no name entry reaches, whatever the operator configured: this host, the link
/// (and the cloud metadata service on it), "any", broadcast and multicast, and the special ranges
/// of RFC 6890 and its successors that are not globally reachable or that carry an IPv4 address
/// to a gateway or tunnel (where the IPv4 address could be one of the above).
pub(crate) fn always_refused(addr: IpAddr) -> bool {
    match addr.to_canonical() {
        IpAddr::V4(v4) => v4_refused(v4),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6 == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)
                || V6_REFUSED.iter().any(|(bits, prefix)| in_v6_range(v6, *bits, *prefix))
        }
    }
}

/// IPv6 ranges refused whatever they carry, as (network, prefix length).
const V6_REFUSED: &[(u128, u8)] = &[
    // IPv4-compatible addresses (deprecated; `::127.0.0.1` reaches 127.0.0.1 on some stacks).
    (0, 96),
    // NAT64, well-known and local-use prefixes: the gateway connects to the IPv4 address inside.
    (0x0064_ff9b << 96, 96),
    (0x0064_ff9b_0001 << 80, 48),
    // Discard-only.
    (0x0100 << 112, 64),
    // Teredo (tunnels to an IPv4 address), benchmarking, ORCHID, documentation.
    (0x2001_0000 << 96, 32),
    (0x2001_0002_0000 << 80, 48),
    (0x2001_0010 << 96, 28),
    (0x2001_0db8 << 96, 32),
    (0x3fff << 112, 20),
    // 6to4 (tunnels to the IPv4 address in bits 16-48).
    (0x2002 << 112, 16),
    // Link-local and the deprecated site-local.
    (0xfe80 << 112, 10),
    (0xfec0 << 112, 10),
];

fn in_v6_range(addr: Ipv6Addr, network: u128, prefix: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
    addr.to_bits() & mask == network & mask
}

/// IPv4 addresses refused whatever the operator configured: this host, the link, "this network",
/// broadcast, multicast, and ranges that are never a public host (the IETF protocol block, the
/// 6to4 relay, benchmarking, documentation, reserved).
fn v4_refused(v4: Ipv4Addr) -> bool {
    const SPECIAL: &[(u32, u8)] = &[
        (0xc000_0000, 24), // 192.0.0.0/24
        (0xc000_0200, 24), // 192.0.2.0/24
        (0xc058_6300, 24), // 192.88.99.0/24
        (0xc612_0000, 15), // 198.18.0.0/15
        (0xc633_6400, 24), // 198.51.100.0/24
        (0xcb00_7100, 24), // 203.0.113.0/24
        (0xf000_0000, 4),  // 240.0.0.0/4
    ];
    let bits = v4.to_bits();
    v4.is_loopback()
        || v4.is_link_local()
        || v4.octets()[0] == 0
        || v4.is_broadcast()
        || v4.is_multicast()
        || SPECIAL.iter().any(|(network, prefix)| {
            let mask = u32::MAX.checked_shl(32 - u32::from(*prefix)).unwrap_or(0);
            bits & mask == network & mask
        })
}

/// Parses a `--egress-deny-cidr` value: a CIDR (`10.96.0.0/12`) or a single address.
pub(crate) fn parse_cidr(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    text.parse::<IpAddr>()
        .map(IpNet::from)
        .map_err(|_| format!("{text:?} is not a CIDR (10.96.0.0/12) or an address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(entries: &[&str]) -> Vec<AllowedHost> {
        entries
            .iter()
            .map(|e| AllowedHost::parse(e).expect("entry parses"))
            .collect()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    const PUBLIC: &str = "93.184.215.14";

    #[test]
    fn entries_default_to_https_on_443_and_keep_an_explicit_port_or_scheme() {
        let plain = AllowedHost::parse("hooks.example.com").expect("parses");
        assert_eq!(
            plain,
            AllowedHost {
                scheme: Scheme::Https,
                host: HostPattern::Name("hooks.example.com".into()),
                port: 443
            }
        );
        assert_eq!(AllowedHost::parse("Hooks.Example.com:8443").expect("parses").port, 8443);
        let http = AllowedHost::parse("http://localhost:8080").expect("parses");
        assert_eq!(
            (http.scheme, http.host, http.port),
            (Scheme::Http, HostPattern::Localhost, 8080)
        );
        assert_eq!(AllowedHost::parse("http://hooks.example.com").expect("parses").port, 80);
        assert_eq!(
            AllowedHost::parse("*.internal.example.com").expect("parses").host,
            HostPattern::Wildcard("internal.example.com".into())
        );
        assert_eq!(
            AllowedHost::parse("http://[::1]:9000").expect("parses").host,
            HostPattern::Ip(ip("::1"))
        );
    }

    #[test]
    fn malformed_entries_are_errors() {
        for entry in [
            "",
            "ftp://hooks.example.com",
            "hooks.example.com/path",
            "user@hooks.example.com",
            "*.com",
            "*",
            "a.*.example.com",
            "*.10.0.0.1",
            "hooks.example.com:99999",
            "hooks.example.com?x=1",
        ] {
            assert!(AllowedHost::parse(entry).is_err(), "{entry:?} should not parse");
        }
    }

    #[test]
    fn a_listed_https_host_on_its_default_port_is_allowed() {
        let target = decide(
            "https://hooks.example.com/notify?db=orders",
            &allowed(&["hooks.example.com"]),
            &[ip(PUBLIC)],
            &[],
        )
        .expect("allowed");
        assert_eq!(target.origin, "https://hooks.example.com");
        assert_eq!((target.name.as_deref(), target.port), (Some("hooks.example.com"), 443));
    }

    #[test]
    fn host_scheme_and_port_must_all_match_an_entry() {
        let list = allowed(&[
            "hooks.example.com",
            "*.internal.example.com",
            "http://plain.example.com:8080",
        ]);
        let check = |url: &str| decide(url, &list, &[ip(PUBLIC)], &[]);
        assert!(check("https://a.internal.example.com/x").is_ok());
        assert!(check("https://a.b.internal.example.com/x").is_ok());
        assert!(check("http://plain.example.com:8080/x").is_ok());
        for url in [
            "https://evil.example.com/",
            "https://internal.example.com/",
            "https://xinternal.example.com/",
            "https://hooks.example.com.evil.com/",
            "http://hooks.example.com/",
            "https://hooks.example.com:8443/",
            "https://plain.example.com:8080/",
            "http://plain.example.com/",
            "https://93.184.215.14/",
        ] {
            assert!(
                matches!(check(url), Err(Denied::HostNotAllowed { .. })),
                "{url} should be refused: {:?}",
                check(url)
            );
        }
    }

    #[test]
    fn userinfo_is_refused_even_when_the_real_host_is_listed() {
        let list = allowed(&["hooks.example.com", "http://127.0.0.1:8080"]);
        // `https://hooks.example.com{{ spec.path }}` with path `@127.0.0.1:8080`.
        let moved = decide("https://hooks.example.com@127.0.0.1:8080/", &list, &[], &[]);
        assert_eq!(
            moved,
            Err(Denied::Userinfo {
                origin: "https://127.0.0.1".into()
            })
        );
        let login = decide("https://user:pw@hooks.example.com/", &list, &[ip(PUBLIC)], &[]);
        assert!(matches!(login, Err(Denied::Userinfo { .. })), "{login:?}");
    }

    #[test]
    fn an_at_sign_in_the_path_stays_in_the_path() {
        let target = decide(
            "https://hooks.example.com/@127.0.0.1:8080",
            &allowed(&["hooks.example.com"]),
            &[ip(PUBLIC)],
            &[],
        )
        .expect("allowed");
        assert_eq!(target.url.host_str(), Some("hooks.example.com"));
    }

    #[test]
    fn names_resolving_to_loopback_link_local_metadata_or_unspecified_are_refused() {
        let list = allowed(&["hooks.example.com"]);
        for addr in [
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "169.254.169.254",
            "169.254.1.1",
            "fe80::1",
            "fd00:ec2::254",
            "0.0.0.0",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::7f00:1",
            "224.0.0.1",
            // Ranges that map or tunnel to IPv4, or are not globally reachable (issue 48, item 11).
            "::127.0.0.1",
            "::a00:1",
            "64:ff9b::808:808",
            "64:ff9b:1::7f00:1",
            "64:ff9b:1:ffff::1",
            "fec0::1",
            "feff::1",
            "2002:7f00:1::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:db8::1",
            "100::1",
            "3fff::1",
            "192.0.2.1",
            "198.18.0.1",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            let result = decide("https://hooks.example.com/", &list, &[ip(addr)], &[]);
            assert!(
                matches!(result, Err(Denied::RefusedAddress { .. })),
                "{addr} should be refused: {result:?}"
            );
        }
    }

    #[test]
    fn public_addresses_next_to_the_refused_ranges_are_reached() {
        let list = allowed(&["hooks.example.com"]);
        for addr in [
            "8.8.8.8",
            "2606:4700::1111",
            "2001:4860:4860::8888",
            "2003::1",
            "fe00::1",
            "1::1",
            "192.0.3.1",
            "198.20.0.1",
            "223.255.255.254",
            "::1:0:0:1",
        ] {
            let result = decide("https://hooks.example.com/", &list, &[ip(addr)], &[]);
            assert!(result.is_ok(), "{addr} should be reached: {result:?}");
        }
    }

    #[test]
    fn one_refused_address_among_many_refuses_the_request() {
        let result = decide(
            "https://hooks.example.com/",
            &allowed(&["hooks.example.com"]),
            &[ip(PUBLIC), ip("127.0.0.1")],
            &[],
        );
        assert!(matches!(result, Err(Denied::RefusedAddress { .. })), "{result:?}");
        let nothing = decide("https://hooks.example.com/", &allowed(&["hooks.example.com"]), &[], &[]);
        assert!(matches!(nothing, Err(Denied::RefusedAddress { .. })), "{nothing:?}");
    }

    #[test]
    fn operator_refused_ranges_apply_to_name_entries() {
        let refused = [
            parse_cidr("10.96.0.0/12").expect("cidr"),
            parse_cidr("10.0.0.1").expect("ip"),
        ];
        let list = allowed(&["hooks.example.com"]);
        for addr in ["10.96.0.10", "10.111.255.255", "10.0.0.1", "::ffff:10.96.0.1"] {
            let result = decide("https://hooks.example.com/", &list, &[ip(addr)], &refused);
            assert!(
                matches!(result, Err(Denied::RefusedAddress { .. })),
                "{addr}: {result:?}"
            );
        }
        assert!(decide("https://hooks.example.com/", &list, &[ip("10.0.0.2")], &refused).is_ok());
    }

    #[test]
    fn an_address_entry_reaches_exactly_that_address_even_if_refused() {
        let refused = [parse_cidr("127.0.0.0/8").expect("cidr")];
        let list = allowed(&["http://127.0.0.1:8080", "https://[fd00:ec2::254]"]);
        assert!(decide("http://127.0.0.1:8080/hook", &list, &[], &refused).is_ok());
        assert!(decide("https://[fd00:ec2::254]/", &list, &[], &refused).is_ok());
        for url in [
            "http://127.0.0.1:8081/",
            "http://127.0.0.2:8080/",
            "http://localhost:8080/",
        ] {
            let result = decide(url, &list, &[ip("127.0.0.1")], &refused);
            assert!(
                matches!(result, Err(Denied::HostNotAllowed { .. })),
                "{url}: {result:?}"
            );
        }
        // Other spellings of the address are the same address once parsed.
        assert!(decide("http://0x7f.0.0.1:8080/", &list, &[], &refused).is_ok());
    }

    #[test]
    fn localhost_reaches_loopback_only() {
        let list = allowed(&["http://localhost:8080"]);
        assert!(decide("http://localhost:8080/", &list, &[ip("127.0.0.1"), ip("::1")], &[]).is_ok());
        let result = decide("http://localhost:8080/", &list, &[ip("10.0.0.1")], &[]);
        assert!(matches!(result, Err(Denied::RefusedAddress { .. })), "{result:?}");
    }

    #[test]
    fn unparseable_urls_and_other_schemes_are_refused() {
        let list = allowed(&["hooks.example.com"]);
        assert_eq!(decide("hooks.example.com/x", &list, &[], &[]), Err(Denied::InvalidUrl));
        assert_eq!(
            decide("file:///etc/passwd", &list, &[], &[]),
            Err(Denied::Scheme("file".into()))
        );
        assert_eq!(parse_allowed(&[]), Err(Denied::NoAllowedHosts));
    }

    #[test]
    fn messages_show_scheme_and_host_only() {
        let result = decide(
            "https://evil.example.com:8443/secret/path?token=abc",
            &allowed(&["hooks.example.com"]),
            &[],
            &[],
        );
        let message = result.expect_err("refused").to_string();
        assert!(message.contains("https://evil.example.com"), "{message}");
        assert!(!message.contains("secret") && !message.contains("token"), "{message}");
        assert_eq!(origin("https://u:p@h.example.com:1/p?q"), "https://h.example.com");
    }
}
