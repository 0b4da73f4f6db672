//! The transport: the HTTPS webhook listener and the plain-HTTP admin listener.
//!
//! ```text
//! TCP (≤ max_connections open) ─► TLS handshake (≤ tls_handshake_timeout; TLS 1.3/1.2,
//!        ALPN h2 + http/1.1, optional client-certificate check)
//!     ─► HTTP/1.1 or HTTP/2 (first request ≤ header_read_timeout, idle ≤ idle_timeout,
//!        writes progress within write_timeout)
//!     ─► axum router: POST /mutate | POST /validate  (path only; ?timeout= sets the deadline)
//!     ─► body budget (≤ max_inflight_body_bytes read or evaluated at once, by the deadline)
//!     ─► body (≤ max_body_bytes, by the deadline) ─► permit (≤ max_concurrency, by the deadline)
//!     ─► AppState::answer (cancelled at the deadline) ─► admission::handle(engine snapshot)
//! admin (plain HTTP): GET /healthz, /readyz, /metrics
//! ```
//!
//! Behaviour worth knowing (details in the submodules):
//! - **Overload** (no evaluation slot before the deadline): a review with a readable uid
//!   gets HTTP 200; mutate admits unchanged with a warning (fails open), validate denies
//!   with code 429 (fails closed). See [`overload_reply`]. No body budget before the
//!   deadline: 503 without reading the body (the apiserver applies the failure policy).
//! - **Deadline** (evaluation not done by the deadline): answered at the deadline, mutate
//!   admits unchanged with a warning, validate denies with code 504; the evaluation is
//!   cancelled and keeps its slot until it returns. See [`deadline_reply`].
//! - **Where evaluation runs**: inline on the async worker for bodies up to
//!   [`INLINE_MAX_BYTES`], on the blocking pool above that.
//! - **Certificates** are polled every `tls_reload_interval` through symlinks (kubelet
//!   `..data` swaps work), validated before use, and a broken update keeps the old
//!   certificate in service.
//! - **Shutdown**: readiness turns false at once; for `shutdown_delay` the webhook keeps
//!   accepting and answering (HTTP/1.1 answers carry `Connection: close`) while endpoints
//!   stop routing to this pod; then every connection is told to finish gracefully and the
//!   listener closes, in-flight requests get `shutdown_grace`, what is left is dropped
//!   (cancelling its evaluation), then the admin listener stops.

mod admin;
mod error;
mod serve;
mod state;
mod tls;
mod webhook;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

pub use error::ServerError;
pub use state::{AppState, Readiness, ReadinessGate, ReviewFn};
pub use tls::ServingCert;
pub use webhook::{
    APISERVER_TIMEOUT_MARGIN, BODY_BUDGET_UNAVAILABLE, DEADLINE_DENIAL, DEADLINE_WARNING,
    INLINE_MAX_BYTES, OVERLOAD_DENIAL, OVERLOAD_WARNING, deadline_reply, overload_reply,
};

/// Default `--listen`: the webhook's HTTPS port on every interface.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8443));
/// Default `--admin-listen`: the plain-HTTP admin port on every interface.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8080));
/// Default `--tls-reload-interval`.
pub const DEFAULT_TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(10);
/// Default `--max-body-bytes` (6 MiB: the apiserver's own request limit is 3 MiB per
/// object, and a review carries `object` and `oldObject`).
pub const DEFAULT_MAX_BODY_BYTES: usize = 6 * 1024 * 1024;
/// Default `--max-concurrency`.
pub const DEFAULT_MAX_CONCURRENCY: usize = 256;
/// Default `--header-read-timeout`.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Default TLS handshake timeout.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default `--request-timeout`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Default `--shutdown-grace`.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Default `--shutdown-delay`: after SIGTERM, keep serving (readiness already failing) for
/// this long before closing connections, so that endpoints and the apiserver stop routing
/// to this pod first. The image is distroless (no `sleep` for a `preStop` hook), so the
/// delay lives in the process.
pub const DEFAULT_SHUTDOWN_DELAY: Duration = Duration::from_secs(5);
/// Default `--max-connections` of the webhook listener: open connections beyond it are
/// closed at once. The apiserver needs one per review in flight over HTTP/1.1, far fewer
/// over HTTP/2.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default `--admin-max-connections`: probes and scrapes need a handful.
pub const DEFAULT_ADMIN_MAX_CONNECTIONS: usize = 64;
/// Default `--idle-timeout`: a connection with no request in flight for this long is
/// closed gracefully (HTTP/2 GOAWAY; HTTP/1.1 keep-alive connections already close after
/// `--header-read-timeout`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `--write-timeout`: a socket write that makes no progress for this long (the
/// client stopped reading) fails the connection.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `--max-inflight-body-bytes`: request bodies being read or evaluated at once, in
/// bytes. Decoding costs a multiple of the body size, so this, not `--max-concurrency`,
/// bounds the memory of concurrent large reviews: 16 MiB admits two 6 MiB bodies, five
/// 3 MiB bodies or hundreds of ordinary 5–20 KiB reviews at once; the rest wait (until
/// their deadline, then the overload answer).
pub const DEFAULT_MAX_INFLIGHT_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Default `--max-evaluation-memory`: 32 MiB per review, held by its decoding, evaluation and
/// encoding together (the counting allocator's account, [`crate::budget::MemoryScope`]).
/// Evaluations run synchronously, so at most the runtime's worker threads (one per core)
/// plus `--max-large-evaluations` (one per core) run at once: 4 on 2 cores, so budgets
/// account for at most 128 MiB, and 16 MiB of bodies in flight and about 15 MiB of idle
/// process on top keep 16 concurrent 3 MiB reviews under 200 MiB (docs/limits.md, "Memory
/// per review"). Ordinary reviews hold well under 1 MiB. The audit uses the same budget per
/// object.
pub use crate::budget::DEFAULT_MAX_EVALUATION_MEMORY;
/// Default `--max-large-evaluations`: 0, one per CPU core the process may use (see
/// [`ServerConfig::max_large_evaluations`]).
pub const DEFAULT_MAX_LARGE_EVALUATIONS: usize = 0;

/// Default `--generated-ca-out`: `stackgate-ca.pem` in the temporary directory (`$TMPDIR`),
/// which is only known at run time.
pub fn default_generated_ca_out() -> PathBuf {
    std::env::temp_dir().join("stackgate-ca.pem")
}

/// How long the admin listener's connections (a scrape, a probe) may take to finish once the
/// webhook listener has drained; short, so that the process is gone within
/// `shutdown_grace` plus about a second.
const ADMIN_GRACE: Duration = Duration::from_millis(500);

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsSource {
    /// PEM files (`--tls-cert`, `--tls-key`), re-read every `tls_reload_interval`. The
    /// certificate file may hold a chain (leaf first); the key may be PKCS#8, PKCS#1 or SEC1.
    Files {
        /// Certificate chain.
        cert: PathBuf,
        /// Private key.
        key: PathBuf,
    },
    /// Generate a CA and a serving certificate for `localhost`, `127.0.0.1` and `::1` at
    /// start (development), and write the CA certificate to `ca_out`.
    Generated {
        /// Where the CA certificate (PEM) is written (`--generated-ca-out`).
        ca_out: PathBuf,
    },
    /// `--tls-mode self-managed`: the certificate the Secret watch installs into this handle
    /// ([`crate::certs`]). Until one is installed, and whenever the one installed is past its
    /// end, handshakes fail and /readyz says not ready (the `certificates` condition).
    SelfManaged(ServingCert),
}

/// Server settings. The `stackgate serve` flags fill it (the command line converts its
/// arguments, so the server does not depend on clap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// HTTPS address of the webhook (`--listen`). Ignored by [`run_with_listeners`].
    pub listen: SocketAddr,
    /// Plain-HTTP admin address (`--admin-listen`). Ignored by [`run_with_listeners`].
    pub admin_listen: SocketAddr,
    /// Serving certificate.
    pub tls: TlsSource,
    /// When set, clients must present a certificate signed by this CA (`--client-ca`).
    pub client_ca: Option<PathBuf>,
    /// How often certificate files are re-read.
    pub tls_reload_interval: Duration,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Reviews evaluated at once.
    pub max_concurrency: usize,
    /// Time a client has to send request headers; also the idle keep-alive timeout.
    pub header_read_timeout: Duration,
    /// Time a client has to complete the TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Per-request deadline, further capped by the apiserver's `?timeout=` minus
    /// [`APISERVER_TIMEOUT_MARGIN`].
    pub request_timeout: Duration,
    /// How long in-flight requests may take to finish after the listener closes.
    pub shutdown_grace: Duration,
    /// How long to keep serving after shutdown is requested (readiness already off) before
    /// the listener closes.
    pub shutdown_delay: Duration,
    /// Open connections on the webhook listener; more are closed at once.
    pub max_connections: usize,
    /// Open connections on the admin listener; more are closed at once.
    pub admin_max_connections: usize,
    /// A connection with no request in flight for this long is closed gracefully.
    pub idle_timeout: Duration,
    /// A socket write that makes no progress for this long fails its connection; a request
    /// whose response is not written `request_timeout + write_timeout` after it started
    /// closes its connection.
    pub write_timeout: Duration,
    /// Request body bytes read or evaluated at once (reserved before reading, by
    /// `Content-Length` or as chunks arrive; released when the evaluation returns).
    pub max_inflight_body_bytes: usize,
    /// Evaluations of bodies over [`INLINE_MAX_BYTES`] running at once; 0 = one per core the
    /// process may use. They are CPU-bound: more would only hold more decoded objects.
    pub max_large_evaluations: usize,
    /// Bytes one review's decoding, evaluation and encoding may hold (peak of the counting
    /// allocator's account on its thread); past it the evaluation stops at its next check and
    /// the review gets the "over stackgate's limit" answer.
    pub max_evaluation_memory: usize,
}

impl Default for ServerConfig {
    /// The `DEFAULT_*` addresses and limits, a generated certificate with its CA written to
    /// [`default_generated_ca_out`], and no client certificates: what `stackgate serve`
    /// runs with when no flag is given.
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN,
            admin_listen: DEFAULT_ADMIN_LISTEN,
            tls: TlsSource::Generated {
                ca_out: default_generated_ca_out(),
            },
            client_ca: None,
            tls_reload_interval: DEFAULT_TLS_RELOAD_INTERVAL,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            tls_handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            shutdown_delay: DEFAULT_SHUTDOWN_DELAY,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            admin_max_connections: DEFAULT_ADMIN_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            max_inflight_body_bytes: DEFAULT_MAX_INFLIGHT_BODY_BYTES,
            max_large_evaluations: DEFAULT_MAX_LARGE_EVALUATIONS,
            max_evaluation_memory: DEFAULT_MAX_EVALUATION_MEMORY,
        }
    }
}

/// The two listeners, bound by the caller (tests bind `127.0.0.1:0` and pass them in, so
/// there is no window in which another process can take the port).
#[derive(Debug)]
pub struct Listeners {
    /// HTTPS webhook listener.
    pub webhook: TcpListener,
    /// Plain-HTTP admin listener.
    pub admin: TcpListener,
}

impl Listeners {
    /// Binds `config.listen` and `config.admin_listen`.
    pub async fn bind(config: &ServerConfig) -> Result<Self, ServerError> {
        let bind = |flag: &'static str, addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Bind { flag, addr, source })
        };
        Ok(Self {
            webhook: bind("listen", config.listen).await?,
            admin: bind("admin-listen", config.admin_listen).await?,
        })
    }
}

/// Binds the listeners from `config` and serves until `shutdown` completes, then drains.
/// See [`run_with_listeners`].
pub async fn run(
    config: ServerConfig,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let listeners = Listeners::bind(&config).await?;
    run_with_listeners(config, listeners, state, shutdown).await
}

/// How often readiness follows a self-managed certificate (loaded, not past its end).
const SERVING_CHECK: Duration = Duration::from_secs(1);

/// Keeps readiness's `certificates` condition equal to whether the self-managed certificate
/// serves, until aborted.
async fn track_serving(serving: ServingCert, state: Arc<AppState>) {
    let mut ticker = tokio::time::interval(SERVING_CHECK);
    loop {
        ticker.tick().await;
        state.set_certs_loaded(serving.serving());
    }
}

/// Serves on pre-bound listeners until `shutdown` completes, then drains.
///
/// Start-up loads (or generates) the certificate first and fails fast with an error
/// naming the flag to fix; only then is readiness's `certificates` condition met and are
/// connections accepted (clients that connect earlier wait in the listen backlog). Errors
/// after start-up (failed handshakes, bad requests, failed reloads) are logged and
/// counted, never returned. Returns `Ok(())` once both listeners have drained.
pub async fn run_with_listeners(
    config: ServerConfig,
    listeners: Listeners,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let webhook_addr = local_addr("webhook", &listeners.webhook)?;
    let admin_addr = local_addr("admin", &listeners.admin)?;
    let tls = tls::setup(
        &config.tls,
        config.client_ca.as_deref(),
        webhook_addr.port(),
        &state.metrics,
    )?;
    let reload = match &config.tls {
        TlsSource::SelfManaged(serving) => Some(tokio::spawn(track_serving(
            serving.clone(),
            Arc::clone(&state),
        ))),
        _ => {
            state.set_certs_loaded(true);
            tls.reloader
                .map(|r| tokio::spawn(r.run(config.tls_reload_interval, Arc::clone(&state))))
        }
    };

    let http = Arc::new(serve::Http::new(config.header_read_timeout));
    let webhook_router = webhook::router(webhook::Webhooks {
        state: Arc::clone(&state),
        permits: Arc::new(Semaphore::new(
            config.max_concurrency.min(Semaphore::MAX_PERMITS),
        )),
        body_budget: webhook::BodyBudget::new(config.max_inflight_body_bytes),
        large_evaluations: Arc::new(Semaphore::new(webhook::large_evaluation_slots(
            config.max_large_evaluations,
        ))),
        max_body_bytes: config.max_body_bytes,
        request_timeout: config.request_timeout,
        max_evaluation_memory: config.max_evaluation_memory,
    });
    let limits = |max_connections| serve::ConnectionLimits {
        max_connections,
        first_request: config.header_read_timeout,
        idle: config.idle_timeout,
        write: config.write_timeout,
        stall: config.request_timeout + config.write_timeout,
    };
    let (stop_webhook, webhook_stopped) = watch::channel(false);
    let (stop_admin, admin_stopped) = watch::channel(false);
    let webhook_task = tokio::spawn(serve::serve(
        serve::Endpoint {
            name: "webhook",
            listener: listeners.webhook,
            transport: serve::Transport::Tls {
                acceptor: tokio_rustls::TlsAcceptor::from(tls.config),
                handshake_timeout: config.tls_handshake_timeout,
            },
            router: webhook_router,
            limits: limits(config.max_connections),
        },
        Arc::clone(&http),
        Arc::clone(&state),
        webhook_stopped,
        config.shutdown_grace,
    ));
    let admin_task = tokio::spawn(serve::serve(
        serve::Endpoint {
            name: "admin",
            listener: listeners.admin,
            transport: serve::Transport::Plain,
            router: admin::router(Arc::clone(&state)),
            limits: limits(config.admin_max_connections),
        },
        http,
        Arc::clone(&state),
        admin_stopped,
        ADMIN_GRACE.min(config.shutdown_grace),
    ));
    state.metrics.set_ready(state.readiness().is_ready());
    tracing::info!(
        webhook = %webhook_addr,
        admin = %admin_addr,
        client_certificates = config.client_ca.is_some(),
        "serving"
    );

    shutdown.await;
    state.begin_drain();
    tracing::info!(
        delay_seconds = config.shutdown_delay.as_secs_f64(),
        "shutdown requested: readiness off; still serving until the delay has passed"
    );
    // Endpoints and the apiserver need a moment to stop routing here; requests that arrive
    // meanwhile (also on keep-alive connections) are answered, not cut.
    tokio::time::sleep(config.shutdown_delay).await;
    tracing::info!("draining the webhook listener");
    // The admin listener keeps answering (/readyz 503, /metrics) while the webhook drains.
    let _ = stop_webhook.send(true);
    if let Err(error) = webhook_task.await {
        tracing::error!(%error, "webhook listener task failed");
    }
    let _ = stop_admin.send(true);
    if let Err(error) = admin_task.await {
        tracing::error!(%error, "admin listener task failed");
    }
    if let Some(reload) = reload {
        reload.abort();
    }
    tracing::info!("server stopped");
    Ok(())
}

fn local_addr(which: &'static str, listener: &TcpListener) -> Result<SocketAddr, ServerError> {
    listener
        .local_addr()
        .map_err(|source| ServerError::LocalAddr { which, source })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// The apiserver's `?timeout=` is read with Go's grammar (the cloud-config parser) since
    /// the webhook's own float-based parser was folded into it. This table holds that old
    /// parser's answers; the rows marked "Go" are the only places the two differ, none of
    /// which the apiserver writes (it writes Go's `Duration.String()`).
    #[test]
    fn apiserver_timeout_keeps_the_old_answers() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        let table: &[(&str, Option<Duration>)] = &[
            ("10s", Some(s(10))),
            ("1m30s", Some(s(90))),
            ("1.5s", Some(ms(1500))),
            ("500ms", Some(ms(500))),
            (".5s", Some(ms(500))),
            ("5.s", Some(s(5))),
            ("0.1s", Some(ms(100))),
            ("1s500ms", Some(ms(1500))),
            ("1h1h", Some(s(7200))),
            ("00010s", Some(s(10))),
            ("0s", Some(Duration::ZERO)),
            ("1h2m3s4ms5us6ns", Some(Duration::new(3723, 4_005_006))),
            ("1.000000001s", Some(Duration::new(1, 1))),
            ("1µs", Some(Duration::from_micros(1))),
            ("1us", Some(Duration::from_micros(1))),
            ("1ns", Some(Duration::from_nanos(1))),
            ("2562047h", Some(s(2_562_047 * 3600))),
            // Unreadable: no timeout from the apiserver, `--request-timeout` alone applies.
            ("", None),
            ("10", None),
            ("0", None),
            ("s", None),
            ("10x", None),
            ("10S", None),
            ("10ss", None),
            ("10s10", None),
            (".s", None),
            ("1.5.5s", None),
            (" 10s", None),
            ("10s ", None),
            ("1e3s", None),
            ("infs", None),
            ("9999999999999999h", None),
            // Signed, negative zero included: refused, never a zero or negative budget.
            ("-5s", None),
            ("-1.5s", None),
            ("-0s", None),
            ("-0", None),
            ("+0", None),
            ("+5s", None),
            // Go: U+03BC (Greek mu) is a microsecond like U+00B5; the old parser refused it.
            ("1\u{3bc}s", Some(Duration::from_micros(1))),
            // Go: fractions below a nanosecond are cut; the old parser rounded 0.5ns to 1ns.
            ("0.5ns", Some(Duration::ZERO)),
            // Go: past i64 nanoseconds (about 292 years) is an error; the old parser took it.
            // Either way the budget is `--request-timeout`.
            ("2562048h", None),
        ];
        for &(input, expected) in table {
            assert_eq!(
                super::webhook::parse_go_duration(input),
                expected,
                "{input:?}"
            );
        }
    }
}
