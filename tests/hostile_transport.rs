//! Hostile clients against the running HTTPS server (issue #12, items 2, 5 and 6): the
//! transport must stay bounded whatever a client does or does not send.
//!
//! * an HTTP/2 connection that never sends its preface is closed;
//! * an idle HTTP/2 connection is closed although it answers PINGs;
//! * connections beyond `max_connections` are refused at once, and counted;
//! * a client that stops reading its response is disconnected (write timeout);
//! * an oversized body over HTTP/2 gets a readable 413, not a stream reset;
//! * an evaluation that does not finish by the deadline is answered at the deadline with
//!   the failure-policy semantics, and does not hold up shutdown;
//! * SIGTERM on the real binary: requests on keep-alive connections during the drain delay
//!   are answered, then the process exits within delay + grace + 1 s.
//!
//! Timing assertions use generous margins (seconds); tight numbers live in BENCHMARKS.md.

mod common;

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use http::StatusCode;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Bytes, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde_json::Value;
use stackgate::admission::{Reply, Webhook};
use stackgate::server::{
    DEADLINE_DENIAL, DEADLINE_WARNING, INLINE_MAX_BYTES, ReviewFn, ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const VALIDATE_CREATE: &str = "configmap/validate-create-cloud-provider-config.json";

fn h2_options(server: &TestServer) -> ClientOptions {
    ClientOptions {
        alpn: vec![b"h2".to_vec()],
        ..server.options()
    }
}

async fn closes(server: &TestServer, reason: &str) -> f64 {
    metric(
        &server.metrics().await,
        &format!("stackgate_connection_closes_total{{listener=\"webhook\",reason=\"{reason}\"}}"),
    )
}

#[tokio::test]
async fn http2_connection_without_preface_is_closed() {
    let server = TestServer::start_with(
        |c| c.header_read_timeout = Duration::from_millis(300),
        default_state(),
    )
    .await;
    let mut tls = tls_connect(server.addr, &h2_options(&server))
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let started = Instant::now();
    // Nothing sent: the server may send its SETTINGS, then must close.
    let _ = read_all(&mut tls).await;
    assert!(started.elapsed() < DEADLINE, "never closed");
    let mut byte = [0u8; 1];
    assert!(
        matches!(tls.read(&mut byte).await, Ok(0) | Err(_)),
        "still open"
    );
    eventually("the close to be counted", || async {
        (closes(&server, "no_request").await >= 1.0).then_some(())
    })
    .await;
    server.assert_serving().await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn idle_http2_connection_is_closed_although_it_answers_pings() {
    let server = TestServer::start_with(
        |c| c.idle_timeout = Duration::from_millis(500),
        default_state(),
    )
    .await;
    let tls = tls_connect(server.addr, &h2_options(&server))
        .await
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(100))
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(tls))
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let body = captured(VALIDATE_CREATE);
    let request = http::Request::post("https://localhost/validate?timeout=10s")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.clone())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let _ = response.into_body().collect().await.unwrap();

    // The client keeps pinging every 100 ms; the server still ends the connection.
    let ended = tokio::time::timeout(DEADLINE, connection).await;
    assert!(ended.is_ok(), "idle HTTP/2 connection still open");
    assert!(closes(&server, "idle").await >= 1.0);
    server.assert_serving().await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn connections_beyond_the_cap_are_refused_and_counted() {
    let server = TestServer::start_with(
        |c| {
            c.max_connections = 2;
            c.header_read_timeout = DEADLINE;
        },
        default_state(),
    )
    .await;
    let first = server.client().await;
    let second = server.client().await;
    // The third is accepted by the kernel and closed by the server before TLS completes
    // (or, in TLS 1.3, on its first request).
    let third = async {
        let client = Client::connect(server.addr, &server.options()).await.ok()?;
        client
            .request(http::Method::POST, "/validate", captured(VALIDATE_CREATE))
            .await
            .ok()
    };
    assert!(
        third.await.is_none(),
        "a connection beyond the cap was served"
    );
    let text = server.metrics().await;
    assert!(
        metric(
            &text,
            "stackgate_connections_total{listener=\"webhook\",outcome=\"refused\"}"
        ) >= 1.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "stackgate_connections_open{listener=\"webhook\"}"),
        2.0
    );
    // The two within the cap are served.
    let (status, _) = post(&first, "/validate?timeout=10s", captured(VALIDATE_CREATE)).await;
    assert_eq!(status, StatusCode::OK);
    drop(second);
    // A slot frees when a connection ends.
    let addr = server.addr;
    let options = server.options();
    eventually("a new connection to be served", || {
        let options = options.clone();
        async move {
            let client = Client::connect(addr, &options).await.ok()?;
            let (status, _) = client
                .request(
                    http::Method::POST,
                    "/validate?timeout=10s",
                    captured(VALIDATE_CREATE),
                )
                .await
                .ok()?;
            (status == StatusCode::OK).then_some(())
        }
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_stops_reading_is_disconnected() {
    // A response far larger than the socket buffers on both ends.
    let huge: ReviewFn = Arc::new(|_: Webhook, _: &[u8]| Reply {
        status: StatusCode::OK,
        body: vec![b' '; 32 * 1024 * 1024],
    });
    let server = TestServer::start_with(
        |c| c.write_timeout = Duration::from_millis(300),
        default_state().with_handler(huge),
    )
    .await;
    let mut tls = tls_connect(server.addr, &server.options()).await.unwrap();
    write_head(&mut tls, "/validate?timeout=10s", 2).await;
    tls.write_all(b"{}").await.unwrap();
    tls.flush().await.unwrap();
    // Never read: the server's writes stall, and it gives up on the connection.
    eventually("the stalled connection to be closed", || async {
        (closes(&server, "write_timeout").await >= 1.0).then_some(())
    })
    .await;
    let text = server.metrics().await;
    assert_eq!(
        metric(&text, "stackgate_connections_open{listener=\"webhook\"}"),
        0.0,
        "{text}"
    );
    // What the client can still read is less than the response: it was cut.
    let raw = read_all(&mut tls).await;
    assert!(raw.len() < 32 * 1024 * 1024, "the whole response arrived");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn oversized_body_over_http2_gets_a_readable_413() {
    let server = TestServer::start().await;
    let tls = tls_connect(server.addr, &h2_options(&server))
        .await
        .unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    let size = 10 * 1024 * 1024;
    let declared: BoxBody<Bytes, Infallible> = Full::new(Bytes::from(vec![b' '; size])).boxed();
    let chunks = futures::stream::iter(
        (0..size / 65536).map(|_| Ok::<_, Infallible>(Frame::data(Bytes::from(vec![b' '; 65536])))),
    );
    let streamed: BoxBody<Bytes, Infallible> = StreamBody::new(chunks).boxed();
    for (what, body) in [("content-length", declared), ("streamed", streamed)] {
        let request = http::Request::post("https://localhost/mutate?timeout=10s")
            .header("content-type", "application/json")
            .body(body)
            .unwrap();
        let response = tokio::time::timeout(DEADLINE, sender.send_request(request))
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer"))
            .unwrap_or_else(|e| panic!("{what}: no response, {e:?}"));
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE, "{what}");
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let json: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            json["error"], "request body exceeds 6291456 bytes",
            "{what}"
        );
    }
    // The connection is still usable.
    let request = http::Request::post("https://localhost/validate?timeout=10s")
        .body(Full::new(Bytes::from(captured(VALIDATE_CREATE))).boxed())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    server.stop().await.unwrap();
}

/// A captured review grown past [`INLINE_MAX_BYTES`], so it is evaluated on the blocking
/// pool.
fn large_review(rel: &str) -> Vec<u8> {
    let mut review: Value = serde_json::from_slice(&captured(rel)).unwrap();
    review["request"]["object"]["metadata"]["annotations"]["example.com/padding"] =
        "x".repeat(INLINE_MAX_BYTES + 1024).into();
    serde_json::to_vec(&review).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluation_past_the_deadline_is_answered_at_the_deadline() {
    // A review function that ignores cancellation and spins until released (at most
    // DEADLINE), like a super-linear rule on a hostile input.
    let release = Arc::new(AtomicBool::new(false));
    let spinning: ReviewFn = {
        let release = Arc::clone(&release);
        Arc::new(move |_: Webhook, _: &[u8]| {
            let started = Instant::now();
            while !release.load(Ordering::Relaxed) && started.elapsed() < DEADLINE {
                std::hint::spin_loop();
            }
            Reply::error(StatusCode::OK, "late")
        })
    };
    let mut server = TestServer::start_with(
        |c| {
            c.request_timeout = Duration::from_millis(300);
            c.shutdown_grace = Duration::from_millis(500);
        },
        default_state().with_handler(spinning),
    )
    .await;
    let client = server.client().await;

    let body = large_review(VALIDATE_CREATE);
    let started = Instant::now();
    let (status, review) = post(&client, "/validate?timeout=10s", body.clone()).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "not answered at the deadline"
    );
    assert_eq!(status, StatusCode::OK, "{review}");
    let response = &review["response"];
    assert_eq!(response["uid"], uid_of(&body).as_str());
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 504);
    assert_eq!(response["status"]["reason"], "Timeout");
    assert_eq!(response["status"]["message"], DEADLINE_DENIAL);

    let body = large_review("configmap/mutate-create-cloud-provider-config.json");
    let (status, review) = post(&client, "/mutate?timeout=10s", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{review}");
    let response = &review["response"];
    assert_eq!(response["uid"], uid_of(&body).as_str());
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());
    assert_eq!(response["warnings"][0], DEADLINE_WARNING);

    assert_eq!(
        metric(
            &server.metrics().await,
            "stackgate_http_rejections_total{reason=\"evaluation_deadline\"}"
        ),
        2.0
    );

    // Two evaluations are still spinning on the blocking pool; shutdown does not wait for
    // them (the binary then exits; see `sigterm_on_the_binary...`).
    let started = Instant::now();
    server.trigger_shutdown();
    server.join().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown waited"
    );
    release.store(true, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------
// The real binary

/// `stackgate serve` on loopback ports with a generated CA; kills the child when dropped.
struct Binary {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
    ca_pem: String,
    _tmp: tempfile::TempDir,
}

impl Binary {
    fn start(extra: &[&str]) -> Self {
        setup();
        let tmp = tempfile::tempdir().unwrap();
        let ca = tmp.path().join("ca.pem");
        let mut child = Command::new(env!("CARGO_BIN_EXE_stackgate"))
            .args([
                "serve",
                "--kube",
                "off",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--log-format",
                "text",
                "--log-level",
                "info",
                "--generated-ca-out",
            ])
            .arg(&ca)
            .args(extra)
            .env_remove("STACKGATE_POLICIES")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the binary");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if std::env::var_os("STACKGATE_TEST_LOG").is_some() {
                    eprintln!("child: {line}");
                }
                let field = |name: &str| {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix(name))
                        .and_then(|v| v.parse::<SocketAddr>().ok())
                };
                if line.contains("serving")
                    && let (Some(addr), Some(admin)) = (field("webhook="), field("admin="))
                {
                    let _ = tx.send((addr, admin));
                }
            }
        });
        let (addr, admin) = rx
            .recv_timeout(DEADLINE)
            .expect("the binary logs its addresses");
        let ca_pem = std::fs::read_to_string(&ca).unwrap();
        Self {
            child,
            addr,
            admin,
            ca_pem,
            _tmp: tmp,
        }
    }

    fn options(&self) -> ClientOptions {
        ClientOptions::trusting(&self.ca_pem)
    }

    fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit; `None` if it is still running after `within`.
    fn exited_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_on_the_binary_answers_during_the_delay_then_exits_in_time() {
    let delay = Duration::from_secs(2);
    let grace = Duration::from_secs(2);
    let mut binary = Binary::start(&["--shutdown-delay", "2s", "--shutdown-grace", "2s"]);
    let body = captured(VALIDATE_CREATE);
    let mut clients = Vec::new();
    for _ in 0..8 {
        let client = Client::connect(binary.addr, &binary.options())
            .await
            .unwrap();
        let (status, _) = post(&client, "/validate?timeout=10s", body.clone()).await;
        assert_eq!(status, StatusCode::OK);
        clients.push(client);
    }

    binary.sigterm();
    let signalled = Instant::now();
    // Readiness goes first.
    let admin = binary.admin;
    eventually("/readyz to fail", || async move {
        let (status, _, _) = admin_get(admin, "/readyz").await.ok()?;
        (status == StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await;
    // During the delay, every keep-alive connection still gets its answer.
    for (i, client) in clients.iter().enumerate() {
        let answer = client
            .request(http::Method::POST, "/validate?timeout=10s", body.clone())
            .await;
        let (status, reply) = answer.unwrap_or_else(|e| panic!("client {i}: no answer: {e:?}"));
        assert_eq!(status, StatusCode::OK, "client {i}");
        assert_eq!(
            json_or_text(&reply)["response"]["uid"],
            uid_of(&body).as_str()
        );
    }
    // ... and so does a new connection.
    assert!(
        signalled.elapsed() < delay,
        "the test was too slow to check the delay"
    );
    let late = Client::connect(binary.addr, &binary.options())
        .await
        .unwrap();
    let (status, _) = post(&late, "/validate?timeout=10s", body.clone()).await;
    assert_eq!(status, StatusCode::OK);

    let status = tokio::task::spawn_blocking(move || {
        let status =
            binary.exited_within(delay + grace + Duration::from_secs(1) + Duration::from_secs(3));
        (status, signalled.elapsed())
    })
    .await
    .unwrap();
    let (status, elapsed) = status;
    let status = status.expect("the process exited");
    assert!(status.success(), "{status:?}");
    // Generous: delay + grace + 1 s is the contract, and nothing was in flight.
    assert!(
        elapsed < delay + grace + Duration::from_secs(1),
        "exited after {elapsed:?}"
    );
}

#[test]
fn server_config_defaults_are_the_documented_caps() {
    let config = ServerConfig::default();
    assert_eq!(config.max_connections, 1024);
    assert_eq!(config.max_inflight_body_bytes, 16 * 1024 * 1024);
    assert_eq!(config.shutdown_delay, Duration::from_secs(5));
}
