//! Fault tests (issue #7, item 4): graceful shutdown (the SIGTERM path: the future given to
//! `server::run` completes, exactly what `main`'s SIGTERM handler does) while many
//! keep-alive clients are sending reviews over TLS.
//!
//! * `shutdown_under_load_completes_every_request_in_flight` is deterministic: 32 clients
//!   load the server, then every one of them is caught with a request inside the review
//!   function (a gate parks them), shutdown begins, the listener closes, the gate opens.
//!   Every parked request must get a complete 200, every client must then see a clean close
//!   (no reset, no truncated response), and the server must stop.
//! * `shutdown_at_a_random_moment_loses_no_answered_request` shuts down at whatever moment
//!   the load is at (the inline evaluation path, small bodies): a request the server has
//!   evaluated must reach its client complete. A request the server had not started may
//!   fail (HTTP/1.1 closes idle keep-alive connections; a client that sent on one at the
//!   same instant sees it closed — kube-apiserver applies the webhook's failurePolicy, which
//!   is why the Helm chart delays SIGTERM with a preStop hook until endpoints are updated).
//!
//! * `api_server_unreachable_at_start_and_mid_run`: the `OpenStackVersion` watcher, wired
//!   as `main` wires it (`AppState::watch_releases`), against a stand-in API server that is
//!   down at start, then up, then gone: readiness, served reviews and metrics at each step.
//!
//! Elsewhere: certificate files deleted or replaced with garbage, a single in-flight request
//! during shutdown, slow clients and the concurrency limit are in `tests/https.rs`; the
//! watcher's list/watch/relist protocol against kube-rs's mock API in
//! `tests/releases_watcher.rs`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use common::*;
use http::{Method, StatusCode};
use serde_json::Value;
use stackgate::admission::{self, Reply, Webhook};
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::server::{AppState, INLINE_MAX_BYTES};
use tokio::net::TcpStream;

/// Keep-alive clients loading the server.
const CLIENTS: usize = 32;

const VALIDATE_CREATE: &str = "configmap/validate-create-cloud-provider-config.json";

/// A gate the review function waits at while it is closed, and counters.
#[derive(Default)]
struct Gate {
    closed: Mutex<bool>,
    opened: Condvar,
    /// Reviews that arrived while the gate was closed.
    parked: AtomicUsize,
    /// Reviews answered (the reply was handed back to the server).
    answered: AtomicUsize,
}

impl Gate {
    fn close(&self) {
        *self.closed.lock().unwrap() = true;
    }

    fn open(&self) {
        *self.closed.lock().unwrap() = false;
        self.opened.notify_all();
    }

    /// Waits while the gate is closed (at most [`DEADLINE`], so a broken test cannot hang).
    fn pass(&self) {
        let closed = self.closed.lock().unwrap();
        if !*closed {
            return;
        }
        self.parked.fetch_add(1, Ordering::SeqCst);
        let (_closed, timeout) = self
            .opened
            .wait_timeout_while(closed, DEADLINE, |closed| *closed)
            .unwrap();
        assert!(!timeout.timed_out(), "the gate was never opened");
    }
}

/// Server state whose review function is the real one (embedded policies) behind `gate`.
fn gated_state(gate: Arc<Gate>) -> AppState {
    let engine = Engine::new(PolicySet::embedded().expect("embedded policies load"));
    let metrics = Metrics::new();
    let handler = move |webhook: Webhook, body: &[u8]| -> Reply {
        gate.pass();
        let reply = admission::handle(&engine, webhook, body, &metrics);
        gate.answered.fetch_add(1, Ordering::SeqCst);
        reply
    };
    default_state().with_handler(Arc::new(handler))
}

/// A captured review grown past [`INLINE_MAX_BYTES`] (an annotation of padding), so that
/// the server evaluates it on the blocking pool and a parked review does not hold an async
/// worker.
fn large_review() -> Vec<u8> {
    let mut review: Value = serde_json::from_slice(&captured(VALIDATE_CREATE)).unwrap();
    review["request"]["object"]["metadata"]["annotations"]["example.com/padding"] =
        "x".repeat(INLINE_MAX_BYTES + 1024).into();
    serde_json::to_vec(&review).unwrap()
}

/// How a client's loop ended.
#[derive(Debug)]
struct ClientEnd {
    ok: usize,
    /// 200s received after the gate was reopened.
    ok_after_open: usize,
    other_status: Vec<StatusCode>,
    error: Option<hyper::Error>,
}

/// Sends `body` to `/validate` back to back on one keep-alive connection until the
/// connection fails (the server closes it while draining) or `DEADLINE` passes.
async fn load_client(
    client: Client,
    body: Vec<u8>,
    ok_total: Arc<AtomicUsize>,
    reopened: Arc<AtomicBool>,
) -> ClientEnd {
    let uid = uid_of(&body);
    let mut end = ClientEnd {
        ok: 0,
        ok_after_open: 0,
        other_status: Vec::new(),
        error: None,
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while tokio::time::Instant::now() < deadline {
        let sent = client.request(Method::POST, "/validate?timeout=10s", body.clone());
        match tokio::time::timeout_at(deadline, sent).await {
            Err(_) => break,
            Ok(Err(e)) => {
                end.error = Some(e);
                break;
            }
            Ok(Ok((StatusCode::OK, answer))) => {
                let review = json_or_text(&answer);
                assert_eq!(review["response"]["uid"], uid.as_str(), "complete review");
                end.ok += 1;
                if reopened.load(Ordering::SeqCst) {
                    end.ok_after_open += 1;
                }
                ok_total.fetch_add(1, Ordering::SeqCst);
            }
            Ok(Ok((status, _))) => end.other_status.push(status),
        }
    }
    end
}

/// True when `error` (or a source of it) is a connection reset.
fn is_reset(error: &hyper::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            )
        {
            return true;
        }
        source = e.source();
    }
    false
}

async fn start_clients(
    server: &TestServer,
    body: &[u8],
    ok_total: &Arc<AtomicUsize>,
    reopened: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<ClientEnd>> {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let client = server.client().await;
        clients.push(tokio::spawn(load_client(
            client,
            body.to_vec(),
            Arc::clone(ok_total),
            Arc::clone(reopened),
        )));
    }
    clients
}

async fn join_clients(clients: Vec<tokio::task::JoinHandle<ClientEnd>>) -> Vec<ClientEnd> {
    let mut ends = Vec::new();
    for client in clients {
        ends.push(
            tokio::time::timeout(DEADLINE, client)
                .await
                .expect("every client finishes before the deadline")
                .expect("client task does not panic"),
        );
    }
    ends
}

async fn wait_for_port_closed(server: &TestServer) {
    let addr = server.addr;
    eventually("the webhook port to refuse connections", || async move {
        TcpStream::connect(addr).await.is_err().then_some(())
    })
    .await;
}

/// A server whose review function waits at `gate`, with deadlines long enough that only
/// shutdown ends a request.
async fn start_gated_server(gate: &Arc<Gate>) -> TestServer {
    TestServer::start_with(
        |c| {
            c.request_timeout = DEADLINE;
            c.shutdown_grace = DEADLINE;
            // Every client must be able to sit in the review function at once.
            c.max_large_evaluations = CLIENTS;
        },
        gated_state(Arc::clone(gate)),
    )
    .await
}

/// Waits until the clients have had at least `answers` 200s between them.
async fn wait_for_answers(ok_total: &Arc<AtomicUsize>, answers: usize) {
    eventually("the load to flow", || {
        let ok = Arc::clone(ok_total);
        async move { (ok.load(Ordering::SeqCst) >= answers).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_under_load_completes_every_request_in_flight() {
    let gate = Arc::new(Gate::default());
    let mut server = start_gated_server(&gate).await;
    let ok_total = Arc::new(AtomicUsize::new(0));
    let reopened = Arc::new(AtomicBool::new(false));
    let clients = start_clients(&server, &large_review(), &ok_total, &reopened).await;

    // Load flows: every client has completed several requests on average.
    wait_for_answers(&ok_total, CLIENTS * 5).await;

    // Catch every client with exactly one request inside the review function.
    gate.close();
    let parked = Arc::clone(&gate);
    eventually("every client to have a request in flight", || {
        let parked = Arc::clone(&parked);
        async move { (parked.parked.load(Ordering::SeqCst) == CLIENTS).then_some(()) }
    })
    .await;

    // SIGTERM: readiness off, every connection told to finish, listener closed.
    server.trigger_shutdown();
    wait_for_port_closed(&server).await;
    let (status, _, body) = server.admin_get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");

    reopened.store(true, Ordering::SeqCst);
    gate.open();
    let ends = join_clients(clients).await;
    server.join().await.expect("the server drains and stops");

    let ok: usize = ends.iter().map(|e| e.ok).sum();
    assert_eq!(
        ok,
        gate.answered.load(Ordering::SeqCst),
        "every answered review reached its client complete"
    );
    for (i, end) in ends.iter().enumerate() {
        assert!(end.other_status.is_empty(), "client {i}: {end:?}");
        assert_eq!(
            end.ok_after_open, 1,
            "client {i}: its request in flight completed with 200, and nothing was sent after \
             the server said `connection: close`: {end:?}"
        );
        let error = end.error.as_ref().unwrap_or_else(|| {
            panic!("client {i}: the connection stayed open after shutdown: {end:?}")
        });
        assert!(
            !is_reset(error) && !error.is_incomplete_message(),
            "client {i}: the connection was reset or a response cut: {error:?}"
        );
        assert!(
            error.is_closed() || error.is_canceled(),
            "client {i}: the connection ended with a clean close, not {error:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_at_a_random_moment_loses_no_answered_request() {
    let gate = Arc::new(Gate::default());
    let mut server = start_gated_server(&gate).await;
    let ok_total = Arc::new(AtomicUsize::new(0));
    let reopened = Arc::new(AtomicBool::new(false));
    let body = captured(VALIDATE_CREATE);
    assert!(body.len() <= INLINE_MAX_BYTES, "evaluated inline");
    let clients = start_clients(&server, &body, &ok_total, &reopened).await;

    wait_for_answers(&ok_total, CLIENTS * 20).await;
    server.trigger_shutdown();
    let ends = join_clients(clients).await;
    server.join().await.expect("the server drains and stops");

    let ok: usize = ends.iter().map(|e| e.ok).sum();
    assert_eq!(
        ok,
        gate.answered.load(Ordering::SeqCst),
        "every review the server evaluated reached its client complete: {ends:?}"
    );
    for (i, end) in ends.iter().enumerate() {
        assert!(end.other_status.is_empty(), "client {i}: {end:?}");
        assert!(
            end.error.is_some(),
            "client {i}: the connection stayed open after shutdown"
        );
    }
}

// ---------------------------------------------------------------------------------------
// API server unreachable at start and mid-run (the release catalog)

/// A stand-in kube-apiserver on `127.0.0.1:0` for the `OpenStackVersion` watcher. While
/// down, every connection is accepted and closed at once (what a client sees behind a load
/// balancer with no backend); while up, it answers the list with the captured stored object
/// and holds every watch open. Going down also cuts the connections already open.
struct FakeApiServer {
    addr: std::net::SocketAddr,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<tokio::task::JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl FakeApiServer {
    async fn start_down() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(Mutex::new(tokio::task::JoinSet::new()));
        let accept = tokio::spawn({
            let (up, connections) = (Arc::clone(&up), Arc::clone(&connections));
            async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    if !up.load(Ordering::SeqCst) {
                        drop(tcp);
                        continue;
                    }
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    let service = hyper::service::service_fn(|request| async move {
                        Ok::<_, std::convert::Infallible>(fake_api_answer(&request))
                    });
                    connections.lock().unwrap().spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, service)
                            .await;
                    });
                }
            }
        });
        Self {
            addr,
            up,
            connections,
            accept,
        }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            self.connections.lock().unwrap().abort_all();
        }
    }

    /// A kube client for this server (plain HTTP, as a kubeconfig with an `http://` server).
    fn client(&self) -> kube::Client {
        let url = format!("http://{}", self.addr).parse().unwrap();
        kube::Client::try_from(kube::Config::new(url)).unwrap()
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.accept.abort();
        self.connections.lock().unwrap().abort_all();
    }
}

type FakeBody = http_body_util::combinators::BoxBody<hyper::body::Bytes, std::convert::Infallible>;

/// The list answers with the OpenStackVersion the apiserver stored after the captured
/// status update (namespace `openstack`, target = deployed 18.0.0, glanceWsgi "true"); a
/// watch gets its headers and then nothing, like a quiet cluster.
fn fake_api_answer<B>(request: &http::Request<B>) -> http::Response<FakeBody> {
    use http_body_util::BodyExt;
    let watch = request.uri().query().unwrap_or("").contains("watch=true");
    let path_ok = request.uri().path() == "/apis/core.openstack.org/v1beta1/openstackversions";
    let (status, body): (StatusCode, FakeBody) = if !path_ok {
        (
            StatusCode::NOT_FOUND,
            http_body_util::Full::from("{}").boxed(),
        )
    } else if watch {
        let never = futures::stream::pending::<
            Result<hyper::body::Frame<hyper::body::Bytes>, std::convert::Infallible>,
        >();
        (
            StatusCode::OK,
            http_body_util::StreamBody::new(never).boxed(),
        )
    } else {
        let review: Value = serde_json::from_slice(&captured(
            "openstackversion/validate-update-openstack-status-subresource.json",
        ))
        .unwrap();
        let list = serde_json::json!({
            "apiVersion": "core.openstack.org/v1beta1",
            "kind": "OpenStackVersionList",
            "metadata": {"resourceVersion": "100"},
            "items": [review["request"]["object"]],
        });
        (
            StatusCode::OK,
            http_body_util::Full::from(list.to_string()).boxed(),
        )
    };
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body)
        .unwrap()
}

/// The `glance.openstack.org/wsgi` value `/mutate` adds to the captured Glance CREATE
/// (namespace `openstack`), or `None` when it admits it unchanged.
async fn glance_wsgi_added(server: &TestServer) -> Option<String> {
    let body = captured("glance/mutate-create-glance.json");
    let (status, review) = post(&server.client().await, "/mutate?timeout=10s", body).await;
    assert_eq!(status, StatusCode::OK, "{review}");
    assert_eq!(review["response"]["allowed"], true, "{review}");
    let patch = decoded_patch(&review["response"])?;
    patch.as_array().unwrap().iter().find_map(|op| {
        let path = op["path"].as_str()?;
        if path.ends_with("glance.openstack.org~1wsgi") {
            return op["value"].as_str().map(str::to_owned);
        }
        op["value"]["glance.openstack.org/wsgi"]
            .as_str()
            .map(str::to_owned)
    })
}

/// Readiness semantics with `--kube auto` (README, docs/operations.md):
///
/// * API server unreachable at start: the webhook serves at once (reviews are answered;
///   release annotations fall back to what the static table and policies say, which for a
///   namespace no policy names is "admit unchanged"), `/healthz` is 200, and `/readyz` is
///   503 naming `release-catalog` until the first complete list. Errors are counted.
/// * API server reachable: the first list opens the gate; Glance CREATEs get the operator's
///   annotations.
/// * API server gone mid-run: `/readyz` stays 200, the last snapshot keeps serving (the
///   same annotations), errors are counted and the snapshot's age grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_unreachable_at_start_and_mid_run() {
    let server = TestServer::start().await;
    let api = FakeApiServer::start_down().await;
    let release_metrics = server.state.metrics.releases().clone();
    let config = stackgate::releases::watcher::WatchConfig {
        resync: std::time::Duration::from_secs(3600),
        backoff_initial: std::time::Duration::from_millis(10),
        backoff_max: std::time::Duration::from_millis(50),
    };
    let watcher = server
        .state
        .watch_releases(api.client(), config, release_metrics);
    let errors = |text: &str| {
        metric(
            text,
            "stackgate_release_catalog_syncs_total{outcome=\"error\"}",
        )
    };

    // Down at start: serving, alive, not ready.
    let failed_at_start = eventually("the watcher to count a failed list", || async {
        let text = server.metrics().await;
        (errors(&text) >= 2.0).then_some(errors(&text))
    })
    .await;
    let (status, _, body) = server.admin_get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("release-catalog"), "{body}");
    assert_eq!(server.admin_get("/healthz").await.0, StatusCode::OK);
    assert_eq!(glance_wsgi_added(&server).await, None);
    server.assert_serving().await;

    // Up: the first list opens the gate and the snapshot serves.
    api.set_up(true);
    eventually("/readyz to answer 200 after the first list", || async {
        (server.admin_get("/readyz").await.0 == StatusCode::OK).then_some(())
    })
    .await;
    assert_eq!(glance_wsgi_added(&server).await.as_deref(), Some("true"));

    // Down mid-run: the watch is cut and every retry fails; nothing else changes.
    let errors_before = errors(&server.metrics().await);
    assert!(errors_before >= failed_at_start);
    api.set_up(false);
    eventually("the watcher to count the lost API server", || async {
        (errors(&server.metrics().await) >= errors_before + 2.0).then_some(())
    })
    .await;
    let age = |text: &str| metric(text, "stackgate_release_catalog_snapshot_age_seconds");
    let age_then = age(&server.metrics().await);
    assert_eq!(server.admin_get("/readyz").await.0, StatusCode::OK);
    assert_eq!(glance_wsgi_added(&server).await.as_deref(), Some("true"));
    eventually("the snapshot age to grow", || async {
        (age(&server.metrics().await) > age_then).then_some(())
    })
    .await;

    watcher.abort();
    server.stop().await.unwrap();
}
