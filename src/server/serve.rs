//! The accept loop shared by both listeners: connection cap, TLS handshake (webhook) or plain
//! TCP (admin), HTTP/1.1 or HTTP/2 by ALPN, per-connection timeouts, and graceful drain on
//! stop.
//!
//! Per connection, a watchdog enforces what hyper does not:
//! - **no request**: a connection on which no request starts within the header-read timeout
//!   is dropped (an HTTP/2 client that never sends its preface; hyper's own graceful
//!   shutdown waits for the preface forever);
//! - **idle**: a connection with no request in flight for the idle timeout is shut down
//!   gracefully (HTTP/2 has no idle timeout in hyper, and a client that answers PINGs keeps
//!   a connection open forever); if it has not closed a header-read timeout later, it is
//!   dropped;
//! - **stalled**: a request still in flight (its response not fully written) longer than the
//!   request timeout plus the write timeout means the client stopped reading (or withholds
//!   HTTP/2 flow-control credit): the connection is dropped, freeing the response;
//! - **write timeout**: a socket write (TLS records, responses, GOAWAY) that makes no progress
//!   for the write timeout fails the connection ([`TimedIo`]).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use http::HeaderValue;
use http::header::CONNECTION;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::AppState;
use crate::telemetry::error_chain;

/// Pause after a failed `accept` (e.g. out of file descriptors) instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// HTTP/2 keep-alive ping interval and timeout: detect dead peers on idle connections.
const H2_PING_INTERVAL: Duration = Duration::from_secs(20);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);
/// HTTP/2 receive windows. hyper's defaults (1 MiB per stream and per connection) let every
/// connection park a megabyte the server has not asked for yet; with these a connection
/// buffers at most 256 KiB of request bodies, and a 6 MiB body still arrives in a few
/// dozen round trips.
const H2_CONNECTION_WINDOW: u32 = 256 * 1024;
const H2_STREAM_WINDOW: u32 = 128 * 1024;
/// Streams per HTTP/2 connection (the apiserver opens another connection beyond this).
const H2_MAX_CONCURRENT_STREAMS: u32 = 100;
/// Largest request head (HTTP/2 header list); the apiserver sends well under 2 KiB.
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

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

/// Per-connection limits of one listener.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    /// Connections open at once; more are accepted and closed at once (and counted).
    pub(crate) max_connections: usize,
    /// Time from accepting a connection (after TLS) to its first request.
    pub(crate) first_request: Duration,
    /// Time a connection may have no request in flight.
    pub(crate) idle: Duration,
    /// Time a socket write may make no progress.
    pub(crate) write: Duration,
    /// Time a request may stay in flight (response not fully written) before its
    /// connection is considered stalled.
    pub(crate) stall: Duration,
}

/// One listener and what it serves.
pub(crate) struct Endpoint {
    /// `webhook` or `admin`, for logs and metrics.
    pub(crate) name: &'static str,
    pub(crate) listener: TcpListener,
    pub(crate) transport: Transport,
    pub(crate) router: Router,
    pub(crate) limits: ConnectionLimits,
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
            .keep_alive_timeout(H2_PING_TIMEOUT)
            .initial_connection_window_size(H2_CONNECTION_WINDOW)
            .initial_stream_window_size(H2_STREAM_WINDOW)
            .adaptive_window(false)
            .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
            .max_header_list_size(MAX_HEADER_LIST_BYTES);
        Self { h1, h2 }
    }
}

/// What every connection task of one listener shares.
struct Shared {
    name: &'static str,
    transport: Transport,
    router: Router,
    http: Arc<Http>,
    state: Arc<AppState>,
    limits: ConnectionLimits,
}

/// Accepts and serves connections until `stop` turns true, then drains: every connection
/// is told to shut down gracefully (HTTP/1 finishes the request in flight and closes,
/// idle keep-alive connections close at once; HTTP/2 sends GOAWAY) **before** the
/// listener closes, in-flight requests get up to `grace`, and what is still open after
/// that is closed (dropping a request's handler fires its evaluation's cancel flag).
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
        limits,
    } = endpoint;
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.min(Semaphore::MAX_PERMITS),
    ));
    let shared = Arc::new(Shared {
        name,
        transport,
        router,
        http,
        state: Arc::clone(&state),
        limits,
    });
    let mut connections = JoinSet::new();
    let mut stopped = std::pin::pin!(stopped(stop.clone()));
    loop {
        tokio::select! {
            () = &mut stopped => break,
            // Reap finished connection tasks so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    // Over the cap: close at once rather than leave the client waiting in
                    // the backlog; the apiserver then applies the failure policy without
                    // waiting for its timeout.
                    let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                        state.metrics.connection_refused(name);
                        tracing::debug!(%peer, listener = name, "connection cap reached; refused");
                        drop(tcp);
                        continue;
                    };
                    state.metrics.connection_accepted(name);
                    let shared = Arc::clone(&shared);
                    let stop = stop.clone();
                    connections.spawn(async move {
                        let _open = OpenConnection {
                            shared: Arc::clone(&shared),
                            _slot: slot,
                        };
                        connection(tcp, peer, &shared, stop).await;
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, listener = name, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    }

    // Every connection task saw `stop` (it is a watch) and started its graceful shutdown;
    // give that a moment to go out before the listener closes, so that a client that sees
    // "connection refused" knows draining has begun.
    tokio::task::yield_now().await;
    let open = connections.len();
    drop(listener);
    tracing::info!(
        listener = name,
        connections = open,
        "stopped accepting; draining"
    );
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, drained).await.is_err() {
        tracing::warn!(
            listener = name,
            grace_seconds = grace.as_secs_f64(),
            "connections still open after the shutdown grace period; closing them"
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
    tracing::info!(listener = name, "drained");
}

/// Keeps a connection slot and the open-connections gauge for as long as the task runs
/// (also when it is aborted).
struct OpenConnection {
    shared: Arc<Shared>,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.shared.state.metrics.connection_ended(self.shared.name);
    }
}

/// Completes when `stop` turns true or its sender is gone.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    stop: watch::Receiver<bool>,
) {
    // Small request/response exchanges: don't let Nagle delay them.
    let _ = tcp.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let io = TimedIo::new(tcp, shared.limits.write, Arc::clone(&activity));
    let closed_by_us = match &shared.transport {
        Transport::Plain => drive(TokioIo::new(io), false, shared, &activity, stop).await,
        Transport::Tls {
            acceptor,
            handshake_timeout,
        } => {
            let tls = match tokio::time::timeout(*handshake_timeout, acceptor.accept(io)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    // Port scanners, plaintext clients, clients that distrust our CA or
                    // (with --client-ca) present no valid certificate.
                    shared.state.metrics.http_rejection("tls_handshake");
                    tracing::debug!(%error, %peer, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    shared.state.metrics.http_rejection("tls_handshake_timeout");
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            drive(TokioIo::new(tls), h2, shared, &activity, stop).await
        }
    };
    let reason = closed_by_us.or_else(|| {
        activity
            .write_timed_out
            .load(Ordering::Relaxed)
            .then_some("write_timeout")
    });
    if let Some(reason) = reason {
        shared
            .state
            .metrics
            .connection_closed_by_server(shared.name, reason);
        tracing::debug!(%peer, listener = shared.name, reason, "connection closed by the server");
    }
}

/// Serves one connection until it ends; returns why the server cut it, if it did.
async fn drive<I>(
    io: I,
    h2: bool,
    shared: &Shared,
    activity: &Arc<Activity>,
    mut stop: watch::Receiver<bool>,
) -> Option<&'static str>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = {
        let router = shared.router.clone();
        let state = Arc::clone(&shared.state);
        let activity = Arc::clone(activity);
        hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let router = router.clone();
            let state = Arc::clone(&state);
            let in_flight = Activity::begin(&activity);
            async move {
                let mut response = router.oneshot(request).await.infallible();
                if !h2 && state.is_draining() {
                    // Draining (SIGTERM, before the listener closes): answer, then close,
                    // so the client's next request opens a connection that the Service
                    // routes to another replica, instead of racing our close.
                    response
                        .headers_mut()
                        .insert(CONNECTION, HeaderValue::from_static("close"));
                }
                Ok::<_, Infallible>(response.map(|body| with_guard(body, in_flight)))
            }
        })
    };
    let builder = if h2 { &shared.http.h2 } else { &shared.http.h1 };
    let mut conn = std::pin::pin!(builder.serve_connection(io, service));
    let limits = shared.limits;
    let mut shutting_down: Option<Instant> = None;
    // Set when the watchdog began a graceful close (idle), reported when the connection ends.
    let mut closing: Option<&'static str> = None;
    loop {
        let next = match activity.check(Instant::now(), &limits, shutting_down) {
            Check::Until(next) => next,
            Check::Cut(reason) => return Some(reason),
            Check::Idle => {
                closing = Some("idle");
                conn.as_mut().graceful_shutdown();
                shutting_down = Some(Instant::now());
                continue;
            }
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    // Header-read timeouts, resets, malformed requests: the client's problem.
                    tracing::debug!(error = %error_chain(&*error), "connection ended with an error");
                }
                return closing;
            }
            changed = stop.wait_for(|stop| *stop), if shutting_down.is_none() => {
                let _ = changed;
                conn.as_mut().graceful_shutdown();
                // Requests in flight finish (the shutdown grace bounds them); an idle
                // connection that does not close is cut like after an idle shutdown.
                shutting_down = Some(Instant::now());
            }
            () = tokio::time::sleep_until(next) => {}
        }
    }
}

/// The watchdog's view of one connection: requests in flight (by start order) and the time
/// of the last change.
struct Activity {
    inner: Mutex<ActivityInner>,
    /// Set by [`TimedIo`] when a write made no progress for the write timeout.
    write_timed_out: AtomicBool,
}

struct ActivityInner {
    /// Start time of each request in flight, by sequence number (oldest first).
    in_flight: BTreeMap<u64, Instant>,
    started: u64,
    /// When the connection was accepted, or the last request ended.
    last_change: Instant,
}

/// What the watchdog decided.
enum Check {
    /// Nothing to do before this instant.
    Until(Instant),
    /// Start a graceful shutdown: idle.
    Idle,
    /// Drop the connection now, for this reason.
    Cut(&'static str),
}

impl Activity {
    fn new() -> Self {
        Self {
            inner: Mutex::new(ActivityInner {
                in_flight: BTreeMap::new(),
                started: 0,
                last_change: Instant::now(),
            }),
            write_timed_out: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request started; it ends when the returned guard is dropped (its response body
    /// fully written or dropped, or the handler dropped).
    fn begin(this: &Arc<Self>) -> InFlight {
        let mut inner = this.lock();
        let id = inner.started;
        inner.started += 1;
        inner.in_flight.insert(id, Instant::now());
        InFlight {
            activity: Arc::clone(this),
            id,
        }
    }

    /// `shutting_down`: when a graceful shutdown began (idle), if it did.
    fn check(
        &self,
        now: Instant,
        limits: &ConnectionLimits,
        shutting_down: Option<Instant>,
    ) -> Check {
        let inner = self.lock();
        if let Some((_, &oldest)) = inner.in_flight.first_key_value() {
            let due = oldest + limits.stall;
            return if now >= due {
                Check::Cut("stalled")
            } else {
                Check::Until(due)
            };
        }
        if let Some(since) = shutting_down {
            // Told to close while idle; a client that does not let it (HTTP/2 GOAWAY
            // needs a PING round trip) is cut after one more header-read timeout.
            let due = since.max(inner.last_change) + limits.first_request;
            return if now >= due {
                Check::Cut("idle")
            } else {
                Check::Until(due)
            };
        }
        if inner.started == 0 {
            let due = inner.last_change + limits.first_request;
            return if now >= due {
                Check::Cut("no_request")
            } else {
                Check::Until(due)
            };
        }
        let due = inner.last_change + limits.idle;
        if now >= due {
            Check::Idle
        } else {
            Check::Until(due)
        }
    }
}

/// One request in flight on a connection (see [`Activity::begin`]).
struct InFlight {
    activity: Arc<Activity>,
    id: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut inner = self.activity.lock();
        inner.in_flight.remove(&self.id);
        inner.last_change = Instant::now();
    }
}

/// `body`, keeping `keep` alive until the body is dropped: after hyper wrote the last byte
/// (or gave up). Used to end a request's [`InFlight`] when its response is out, and to keep
/// an unread request body open until its early answer is sent (HTTP/2 then ends the stream
/// with `RST_STREAM(NO_ERROR)` after the response instead of `CANCEL` before it).
pub(crate) fn with_guard<T: Send + Unpin + 'static>(body: Body, keep: T) -> Body {
    Body::new(Guarded { body, _keep: keep })
}

struct Guarded<T> {
    body: Body,
    _keep: T,
}

impl<T: Send + Unpin + 'static> hyper::body::Body for Guarded<T> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        // `Body` and the kept value are `Unpin`.
        let this = Pin::into_inner(self);
        Pin::new(&mut this.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A socket whose writes fail with `TimedOut` after making no progress for `limit`: a
/// client that stops reading cannot pin a response (or a TLS record, or a GOAWAY) in memory
/// forever. Reads are untouched (the header-read, idle and deadline timers bound them).
struct TimedIo<S> {
    inner: S,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
    activity: Arc<Activity>,
}

impl<S> TimedIo<S> {
    fn new(inner: S, limit: Duration, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
            activity,
        }
    }

    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                self.stalled = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let limit = self.limit;
                let timer = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if timer.as_mut().poll(cx).is_ready() {
                    self.activity.write_timed_out.store(true, Ordering::Relaxed);
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client did not read for the write timeout",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TimedIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TimedIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, polled)
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
