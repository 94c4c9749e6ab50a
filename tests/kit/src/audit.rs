//! The control plane's audit log of write requests (tests/apiserver writes it beside the
//! kubeconfig): who sent which write, so a test counts ruleop's own writes and not those of the
//! cluster's controllers (a StatefulSet's status, a PersistentVolumeClaim's protection finalizer).

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// The user agent ruleop sends (`src/apply/client.rs`), without its version.
const RULEOP_USER_AGENT_PREFIX: &str = "ruleop/";

/// One audited write request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedWrite {
    /// `create`, `update`, `patch` (server-side apply is a `patch`), `delete`.
    pub verb: String,
    /// `resource[/subresource]`, e.g. `databases/status`.
    pub resource: String,
    /// The API group (`""` for the core group).
    pub group: String,
    /// `namespace/name`, or the name alone for cluster-scoped objects.
    pub object: String,
    /// The response code.
    pub code: u64,
    /// Whether it was a dry run (`dryRun=All`), which persists nothing.
    pub dry_run: bool,
    /// The client's user agent.
    pub user_agent: String,
}

impl AuditedWrite {
    /// Whether ruleop (any of its processes) sent it.
    pub fn by_ruleop(&self) -> bool {
        self.user_agent.starts_with(RULEOP_USER_AGENT_PREFIX)
    }

    /// Whether a test sent it with kubectl.
    pub fn by_kubectl(&self) -> bool {
        self.user_agent.starts_with("kubectl")
    }
}

impl std::fmt::Display for AuditedWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dry = if self.dry_run { " (dry run)" } else { "" };
        write!(
            f,
            "{} {} {} → {}{dry}",
            self.verb, self.resource, self.object, self.code
        )
    }
}

/// A point in the audit log: [`AuditMark::since`] reads the writes audited after it.
pub struct AuditMark {
    path: PathBuf,
    offset: u64,
}

impl AuditMark {
    /// The end of the log now.
    pub fn now() -> Self {
        let path = audit_log();
        let offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Self { path, offset }
    }

    /// Every write audited since the mark.
    pub fn since(&self) -> Vec<AuditedWrite> {
        let mut file =
            std::fs::File::open(&self.path).unwrap_or_else(|e| panic!("the audit log {}: {e}", self.path.display()));
        let length = file.metadata().map(|m| m.len()).unwrap_or(0);
        assert!(
            length >= self.offset,
            "the audit log {} rotated since the mark",
            self.path.display()
        );
        file.seek(SeekFrom::Start(self.offset)).expect("seek in the audit log");
        let mut text = String::new();
        file.read_to_string(&mut text).expect("the audit log is UTF-8");
        // The last line may still be being written: only whole lines count.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole.lines().filter(|l| !l.is_empty()).map(parse).collect()
    }

    /// Every write request ruleop sent since the mark, in any namespace, dry runs included.
    pub fn ruleop_requests(&self) -> Vec<AuditedWrite> {
        self.since().into_iter().filter(AuditedWrite::by_ruleop).collect()
    }

    /// The writes ruleop sent since the mark to `resources` (their subresources included) in
    /// `namespace`, dry runs left out. Every ruleop process counts, so a test names its own
    /// namespace: tests of one binary run side by side.
    pub fn ruleop_writes(&self, namespace: &str, resources: &[&str]) -> Vec<AuditedWrite> {
        self.ruleop_requests()
            .into_iter()
            .filter(|w| !w.dry_run)
            .filter(|w| w.object.split_once('/').is_some_and(|(ns, _)| ns == namespace))
            .filter(|w| resources.contains(&w.resource.split('/').next().unwrap_or_default()))
            .collect()
    }
}

/// The writes of `writes`, one per line, for an assertion message.
pub fn listing(writes: &[AuditedWrite]) -> String {
    writes.iter().map(|w| format!("\n  {w}")).collect()
}

fn audit_log() -> PathBuf {
    let kubeconfig = &super::control_plane().kubeconfig;
    kubeconfig
        .parent()
        .expect("the kubeconfig is in a directory")
        .join("audit-writes.log")
}

fn parse(line: &str) -> AuditedWrite {
    let event: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("an audit event is JSON ({e}): {line}"));
    let text = |pointer: &str| event.pointer(pointer).and_then(|v| v.as_str()).unwrap_or_default();
    let mut resource = text("/objectRef/resource").to_owned();
    if !text("/objectRef/subresource").is_empty() {
        resource = format!("{resource}/{}", text("/objectRef/subresource"));
    }
    let object = match text("/objectRef/namespace") {
        "" => text("/objectRef/name").to_owned(),
        namespace => format!("{namespace}/{}", text("/objectRef/name")),
    };
    let uri = text("/requestURI");
    AuditedWrite {
        verb: text("/verb").to_owned(),
        resource,
        group: text("/objectRef/apiGroup").to_owned(),
        object,
        code: event
            .pointer("/responseStatus/code")
            .and_then(|v| v.as_u64())
            .unwrap_or(0),
        dry_run: uri.contains("dryRun=All"),
        user_agent: text("/userAgent").to_owned(),
    }
}
