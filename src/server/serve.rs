//! The accept loop shared by both listeners: TLS handshake (webhook) or plain TCP (admin),
//! HTTP/1.1 or HTTP/2 by ALPN, and graceful drain on stop.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::AppState;

/// Pause after a failed `accept` (e.g. out of file descriptors) instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// HTTP/2 keep-alive ping interval and timeout: detect dead peers on idle connections.
const H2_PING_INTERVAL: Duration = Duration::from_secs(20);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// How a listener's connections are set up before HTTP.
#[derive(Clone)]
pub(crate) enum Transport {
    /// Plain TCP, HTTP/1.1 only (the admin listener: probes and Prometheus).
    Plain,
    /// TLS, then HTTP/2 if ALPN chose `h2`, HTTP/1.1 otherwise.
    Tls {
        acceptor: TlsAcceptor,
        handshake_timeout: Duration,
    },
}

/// One listener and what it serves.
pub(crate) struct Endpoint {
    /// `webhook` or `admin`, for logs.
    pub(crate) name: &'static str,
    pub(crate) listener: TcpListener,
    pub(crate) transport: Transport,
    pub(crate) router: Router,
}

/// Connection builders, one per protocol. The protocol is fixed per connection (by ALPN
/// on TLS, HTTP/1.1 on plain TCP) rather than sniffed: sniffing waits for the first bytes
/// with no timeout, which would let an idle client hold a connection forever.
pub(crate) struct Http {
    h1: auto::Builder<TokioExecutor>,
    h2: auto::Builder<TokioExecutor>,
}

impl Http {
    pub(crate) fn new(header_read_timeout: Duration) -> Self {
        let mut h1 = auto::Builder::new(TokioExecutor::new()).http1_only();
        h1.http1()
            .timer(TokioTimer::new())
            .keep_alive(true)
            // Also closes keep-alive connections idle for this long (hyper restarts the
            // timer when it waits for the next request head).
            .header_read_timeout(header_read_timeout);
        let mut h2 = auto::Builder::new(TokioExecutor::new()).http2_only();
        h2.http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(H2_PING_INTERVAL)
            .keep_alive_timeout(H2_PING_TIMEOUT);
        Self { h1, h2 }
    }
}

/// Accepts and serves connections until `stop` turns true, then drains: every connection
/// is told to shut down gracefully (HTTP/1 finishes the request in flight and closes,
/// idle keep-alive connections close at once; HTTP/2 sends GOAWAY) **before** the
/// listener closes, in-flight requests get up to `grace`, and what is still open after
/// that is closed.
pub(crate) async fn serve(
    endpoint: Endpoint,
    http: Arc<Http>,
    state: Arc<AppState>,
    stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let Endpoint {
        name,
        listener,
        transport,
        router,
    } = endpoint;
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut stopped = std::pin::pin!(stopped(stop));
    loop {
        tokio::select! {
            () = &mut stopped => break,
            // Reap finished connection tasks so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    connections.spawn(connection(
                        tcp,
                        peer,
                        transport.clone(),
                        router.clone(),
                        Arc::clone(&http),
                        graceful.watcher(),
                        Arc::clone(&state),
                    ));
                }
                Err(error) => {
                    tracing::warn!(%error, listener = name, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    }

    let open = graceful.count();
    let mut drained = std::pin::pin!(graceful.shutdown());
    // The first poll sends the shutdown signal to every connection; only then close the
    // listener, so a client that sees "connection refused" knows draining has begun.
    let done = std::future::poll_fn(|cx| Poll::Ready(drained.as_mut().poll(cx).is_ready())).await;
    drop(listener);
    tracing::info!(
        listener = name,
        connections = open,
        "stopped accepting; draining"
    );
    if !done && tokio::time::timeout(grace, drained).await.is_err() {
        tracing::warn!(
            listener = name,
            grace_seconds = grace.as_secs_f64(),
            "connections still open after the shutdown grace period; closing them"
        );
        connections.abort_all();
    }
    while connections.join_next().await.is_some() {}
    tracing::info!(listener = name, "drained");
}

/// Completes when `stop` turns true or its sender is gone.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    transport: Transport,
    router: Router,
    http: Arc<Http>,
    watcher: Watcher,
    state: Arc<AppState>,
) {
    // Small request/response exchanges: don't let Nagle delay them.
    let _ = tcp.set_nodelay(true);
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let router = router.clone();
        async move { Ok::<_, Infallible>(router.oneshot(request).await.infallible()) }
    });
    let result = match transport {
        Transport::Plain => {
            watcher
                .watch(http.h1.serve_connection(TokioIo::new(tcp), service))
                .await
        }
        Transport::Tls {
            acceptor,
            handshake_timeout,
        } => {
            let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    // Port scanners, plaintext clients, clients that distrust our CA or
                    // (with --client-ca) present no valid certificate.
                    state.metrics.http_rejection("tls_handshake");
                    tracing::debug!(%error, %peer, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    state.metrics.http_rejection("tls_handshake_timeout");
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let builder = if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                &http.h2
            } else {
                &http.h1
            };
            watcher
                .watch(builder.serve_connection(TokioIo::new(tls), service))
                .await
        }
    };
    if let Err(error) = result {
        // Header-read timeouts, resets, malformed requests: the client's problem.
        tracing::debug!(%error, %peer, "connection ended with an error");
    }
}

/// `Result<T, Infallible>` → `T` without `unwrap`.
trait NeverFails<T> {
    fn infallible(self) -> T;
}

impl<T> NeverFails<T> for Result<T, Infallible> {
    fn infallible(self) -> T {
        match self {
            Ok(t) => t,
            Err(never) => match never {},
        }
    }
}
