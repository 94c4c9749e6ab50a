//! Logs (text or JSON on stderr) and, with the `otlp` cargo feature and `--otlp-endpoint`, the
//! same spans exported as OpenTelemetry traces over OTLP/HTTP (protobuf): one trace per
//! reconcile, its `reconcile` span carrying `rule`, `namespace`, `parent`, `generation` and
//! `trigger`, inside kube's `reconciling object` span (which logs leave out by default).

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Keeps the trace exporter running; dropping it flushes the spans not sent yet.
#[derive(Default)]
pub(crate) struct Telemetry {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        #[cfg(feature = "otlp")]
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: flushing the OTLP trace exporter failed: {e}");
        }
    }
}

/// What is logged when `RUST_LOG` does not say.
const DEFAULT_FILTER: &str = "info,kube=warn";
/// The same with kube's `reconciling object` span, the parent of each reconcile's span, for trace
/// export. Logs leave it out: each `reconcile` span carries the same fields, and kube enters and
/// leaves its span on every poll of a reconcile, 7% of the operator's CPU in a profile of 1,000
/// Databases converging (bench/history/2026-12-07.md).
const DEFAULT_FILTER_TRACES: &str = "info,kube=warn,kube_runtime::controller=info";

/// Installs the global subscriber: logs (JSON lines when `json`, else text) filtered by `RUST_LOG`
/// (default [`DEFAULT_FILTER`], or [`DEFAULT_FILTER_TRACES`] when exporting traces) and, given an
/// endpoint, OTLP trace export. Fails (before anything is installed) when an endpoint is given to
/// a build without the `otlp` feature, or when the exporter cannot be built.
pub(crate) fn init(json: bool, otlp_endpoint: Option<&str>) -> Result<Telemetry, String> {
    let default = if otlp_endpoint.is_some() {
        DEFAULT_FILTER_TRACES
    } else {
        DEFAULT_FILTER
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let logs: Box<dyn Layer<Registry> + Send + Sync> = if json {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer().with_writer(std::io::stderr).boxed()
    };
    let (telemetry, traces) = match otlp_endpoint {
        None => (Telemetry::default(), None),
        #[cfg(feature = "otlp")]
        Some(endpoint) => {
            let (layer, provider) = otlp::layer(endpoint)?;
            let telemetry = Telemetry {
                provider: Some(provider),
            };
            (telemetry, Some(layer))
        }
        #[cfg(not(feature = "otlp"))]
        Some(_) => {
            return Err(
                "error: --otlp-endpoint needs a build with the `otlp` feature (cargo build --features otlp)".to_owned(),
            );
        }
    };
    let layers: Vec<_> = std::iter::once(logs).chain(traces).collect();
    tracing_subscriber::registry().with(layers).with(filter).init();
    Ok(telemetry)
}

#[cfg(feature = "otlp")]
mod otlp {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::{SpanExporter, WithExportConfig};
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::{Layer, Registry};

    /// The tracing layer exporting spans to `endpoint` (a collector's OTLP/HTTP base URL such
    /// as `http://127.0.0.1:4318`, or its full `/v1/traces` URL) and its provider.
    pub fn layer(endpoint: &str) -> Result<(Box<dyn Layer<Registry> + Send + Sync>, SdkTracerProvider), String> {
        let endpoint = endpoint.trim_end_matches('/');
        let url = if endpoint.ends_with("/v1/traces") {
            endpoint.to_owned()
        } else {
            format!("{endpoint}/v1/traces")
        };
        let exporter = SpanExporter::builder()
            .with_http()
            .with_endpoint(url.clone())
            .build()
            .map_err(|e| format!("error: --otlp-endpoint {url}: {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name("ruleop").build())
            .build();
        let tracer = provider.tracer("ruleop");
        let layer = tracing_opentelemetry::layer().with_tracer(tracer).boxed();
        Ok((layer, provider))
    }
}
