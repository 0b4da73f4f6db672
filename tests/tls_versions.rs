//! Security of the webhook port (issue #7, item 5), over real TLS on loopback:
//!
//! * a client offering only TLS 1.0 or 1.1 is refused: rustls cannot speak them, so the
//!   ClientHello records are built by hand and sent over TCP; the answer must be a fatal
//!   alert and a close, never a ServerHello. A TLS 1.2 hello from the same builder gets a
//!   ServerHello, which shows the hand-built hellos are well formed.
//! * every captured fixture under `tests/fixtures/captured/**` and a bad-input matrix go
//!   through the HTTPS server with **every** tracing event captured at TRACE level (this
//!   binary installs that subscriber itself, before the shared `setup()`); no credential
//!   value of a fixture, nor a canary planted in bad inputs, appears in the logs, the
//!   metrics, or any response outside the JSON Patch (which must carry the object's data
//!   back to the apiserver).

mod common;

use std::io;
use std::path::Path;
use std::sync::{Mutex, Once};

use base64::Engine as _;
use common::*;
use http::{Method, StatusCode};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ---------------------------------------------------------------------------------------
// Logs at TRACE

static TRACE_SETUP: Once = Once::new();
static TRACE_LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// Installs a global subscriber that records every event at TRACE level (all targets,
/// including `log` records from rustls), then the shared set-up (whose own subscriber then
/// does not install). Every test in this binary calls it first.
fn trace_setup() {
    TRACE_SETUP.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(|| TraceWriter)
            .try_init()
            .expect("this binary installs the first subscriber");
    });
    setup();
}

struct TraceWriter;

impl io::Write for TraceWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        TRACE_LOGS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn trace_logs() -> String {
    String::from_utf8_lossy(&TRACE_LOGS.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
}

// ---------------------------------------------------------------------------------------
// Hand-built ClientHello records

/// TLS versions on the wire.
const TLS10: u16 = 0x0301;
const TLS11: u16 = 0x0302;
const TLS12: u16 = 0x0303;

/// Record content types and the alert we expect.
const HANDSHAKE: u8 = 0x16;
const ALERT: u8 = 0x15;
const FATAL: u8 = 2;
const PROTOCOL_VERSION: u8 = 70;
const HANDSHAKE_FAILURE: u8 = 40;

fn u16be(v: u16) -> [u8; 2] {
    v.to_be_bytes()
}

fn extension(kind: u16, body: &[u8]) -> Vec<u8> {
    let mut out = u16be(kind).to_vec();
    out.extend_from_slice(&u16be(body.len() as u16));
    out.extend_from_slice(body);
    out
}

/// A ClientHello record: `legacy_version` in the hello, optional `supported_versions`,
/// ECDHE-ECDSA suites (the test server has a P-256 certificate), SNI `localhost`, P-256,
/// uncompressed points. `modern`: AES-GCM suites and signature algorithms, which rustls
/// supports (so only the version can be the reason for a refusal); otherwise the CBC-SHA
/// suites a TLS 1.0/1.1 client offers.
fn client_hello(legacy_version: u16, supported_versions: Option<&[u16]>, modern: bool) -> Vec<u8> {
    let suites: &[u16] = if modern {
        // ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, ..._256_GCM_SHA384
        &[0xc02b, 0xc02c]
    } else {
        // ECDHE_ECDSA_WITH_AES_128_CBC_SHA, ..._256_CBC_SHA, RSA_WITH_AES_128_CBC_SHA
        &[0xc009, 0xc00a, 0x002f]
    };
    let mut extensions = Vec::new();
    let host = b"localhost";
    let mut sni = u16be(host.len() as u16 + 3).to_vec();
    sni.push(0);
    sni.extend_from_slice(&u16be(host.len() as u16));
    sni.extend_from_slice(host);
    extensions.extend(extension(0x0000, &sni));
    extensions.extend(extension(0x000a, &[0, 2, 0x00, 0x17])); // supported_groups: secp256r1
    extensions.extend(extension(0x000b, &[1, 0])); // ec_point_formats: uncompressed
    if modern {
        // signature_algorithms: ecdsa_secp256r1_sha256, rsa_pss_rsae_sha256
        extensions.extend(extension(0x000d, &[0, 4, 0x04, 0x03, 0x08, 0x04]));
    }
    if let Some(versions) = supported_versions {
        let mut body = vec![(versions.len() * 2) as u8];
        for v in versions {
            body.extend_from_slice(&u16be(*v));
        }
        extensions.extend(extension(0x002b, &body));
    }

    let mut hello = u16be(legacy_version).to_vec();
    hello.extend((0u8..32).map(|i| i.wrapping_mul(37).wrapping_add(11))); // random
    hello.push(0); // session id
    hello.extend_from_slice(&u16be((suites.len() * 2) as u16));
    for s in suites {
        hello.extend_from_slice(&u16be(*s));
    }
    hello.extend_from_slice(&[1, 0]); // compression: null
    hello.extend_from_slice(&u16be(extensions.len() as u16));
    hello.extend(extensions);

    let mut handshake = vec![0x01]; // client_hello
    handshake.extend_from_slice(&(hello.len() as u32).to_be_bytes()[1..]);
    handshake.extend(hello);

    let mut record = vec![HANDSHAKE];
    record.extend_from_slice(&u16be(TLS10)); // record layer version, as real clients send
    record.extend_from_slice(&u16be(handshake.len() as u16));
    record.extend(handshake);
    record
}

/// Sends `hello` on a fresh TCP connection; returns everything the server sent until it
/// closed (or the deadline).
async fn exchange_hello(server: &TestServer, hello: &[u8]) -> Vec<u8> {
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(hello).await.unwrap();
    read_all(&mut tcp).await
}

/// Reads until one whole TLS record has arrived (the server then waits for the client's
/// next handshake message, so reading to EOF would wait for the handshake timeout).
async fn read_first_record(tcp: &mut TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let complete = |raw: &[u8]| {
        raw.len() >= 5 && raw.len() >= 5 + usize::from(u16::from_be_bytes([raw[3], raw[4]]))
    };
    while !complete(&raw) {
        match tokio::time::timeout(DEADLINE, tcp.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => raw.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    raw
}

/// Splits raw bytes into `(content type, payload)` TLS records.
fn records(mut raw: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while raw.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([raw[3], raw[4]]));
        let end = (5 + len).min(raw.len());
        out.push((raw[0], raw[5..end].to_vec()));
        raw = &raw[end..];
    }
    out
}

async fn assert_refused(server: &TestServer, name: &str, hello: &[u8], alerts: &[u8]) {
    let raw = exchange_hello(server, hello).await;
    let records = records(&raw);
    assert!(
        !records
            .iter()
            .any(|(kind, body)| *kind == HANDSHAKE && body.first() == Some(&0x02)),
        "{name}: the server sent a ServerHello: {raw:02x?}"
    );
    let (kind, alert) = records
        .first()
        .unwrap_or_else(|| panic!("{name}: closed without an alert"));
    assert_eq!(
        *kind, ALERT,
        "{name}: first record is not an alert: {raw:02x?}"
    );
    assert_eq!(alert.first(), Some(&FATAL), "{name}: alert is not fatal");
    assert!(
        alert.get(1).is_some_and(|d| alerts.contains(d)),
        "{name}: alert {alert:?}, expected one of {alerts:?} (70 protocol_version, 40 \
         handshake_failure)"
    );
    assert_eq!(records.len(), 1, "{name}: more than the alert: {raw:02x?}");
}

#[tokio::test]
async fn clients_offering_only_tls_1_0_or_1_1_are_refused() {
    trace_setup();
    let server = TestServer::start().await;

    // Control: the same builder at TLS 1.2 gets a ServerHello, so a refusal below is about
    // the version, not a malformed hello.
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(&client_hello(TLS12, None, true))
        .await
        .unwrap();
    let raw = read_first_record(&mut tcp).await;
    drop(tcp);
    let first = records(&raw).into_iter().next();
    assert!(
        matches!(&first, Some((HANDSHAKE, body)) if body.first() == Some(&0x02)),
        "a TLS 1.2 hello gets a ServerHello: {raw:02x?}"
    );

    // (name, hello, the alerts it may get). With the suites and extensions rustls supports,
    // the version alone must be the reason: protocol_version. With a real TLS 1.0/1.1
    // client's CBC-SHA suites, handshake_failure (no shared suite) is also a refusal.
    let cases: Vec<(&str, Vec<u8>, &[u8])> = vec![
        (
            "TLS 1.0 hello, modern suites",
            client_hello(TLS10, None, true),
            &[PROTOCOL_VERSION],
        ),
        (
            "TLS 1.1 hello, modern suites",
            client_hello(TLS11, None, true),
            &[PROTOCOL_VERSION],
        ),
        (
            "supported_versions 1.1 and 1.0 only",
            client_hello(TLS12, Some(&[TLS11, TLS10]), true),
            &[PROTOCOL_VERSION],
        ),
        (
            "TLS 1.0 hello, supported_versions 1.0",
            client_hello(TLS10, Some(&[TLS10]), true),
            &[PROTOCOL_VERSION],
        ),
        (
            "TLS 1.0 client (CBC-SHA suites)",
            client_hello(TLS10, None, false),
            &[PROTOCOL_VERSION, HANDSHAKE_FAILURE],
        ),
        (
            "TLS 1.1 client (CBC-SHA suites)",
            client_hello(TLS11, None, false),
            &[PROTOCOL_VERSION, HANDSHAKE_FAILURE],
        ),
    ];
    for (name, hello, alerts) in &cases {
        assert_refused(&server, name, hello, alerts).await;
    }

    server.assert_serving().await;
    let text = server.metrics().await;
    assert!(
        metric(
            &text,
            "stackgate_http_rejections_total{reason=\"tls_handshake\"}"
        ) >= cases.len() as f64,
        "each refused handshake is counted"
    );
    server.stop().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// Secret values in logs, metrics and responses

/// Planted in the bad inputs.
const CANARY: &str = "Canary-Tr4ce-Secret-Value";

/// Every `*.json` under `tests/fixtures/captured/`, sorted, relative.
fn captured_fixtures() -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "json") {
                out.push(
                    path.strip_prefix(base)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/captured");
    let mut out = Vec::new();
    walk(&base, &base, &mut out);
    out.sort();
    out
}

/// Values that must never leave: the fixtures' fake credentials, every Secret `data` value
/// as sent (base64) and decoded, and every `stringData` value.
fn secret_values(review: &Value) -> Vec<String> {
    let mut out = vec![
        "fake-password".to_owned(),
        "fake-app-cred-secret".to_owned(),
    ];
    for which in ["object", "oldObject"] {
        let object = &review["request"][which];
        if object["kind"] != "Secret" {
            continue;
        }
        for field in ["data", "stringData"] {
            for value in object[field]
                .as_object()
                .into_iter()
                .flat_map(|m| m.values())
                .filter_map(Value::as_str)
            {
                if value.len() >= 8 {
                    out.push(value.to_owned());
                }
                if field == "data"
                    && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(value)
                    && let Ok(text) = String::from_utf8(bytes)
                    && text.len() >= 8
                {
                    out.push(text);
                }
            }
        }
    }
    out
}

/// A response body with the JSON Patch (and its type) removed.
fn without_patch(body: &[u8]) -> String {
    let mut value = json_or_text(body);
    if let Some(response) = value.get_mut("response").and_then(Value::as_object_mut) {
        response.remove("patch");
        response.remove("patchType");
    }
    value.to_string()
}

/// Sends raw bytes (a request head and body) on a fresh TLS connection while reading the
/// answer concurrently (the server may answer, e.g. 413, before reading everything); status
/// and body.
async fn raw_exchange(server: &TestServer, request: &[u8]) -> (StatusCode, String) {
    let tls = tls_connect(server.addr, &server.options()).await.unwrap();
    let (mut reader, mut writer) = tokio::io::split(tls);
    let request = request.to_vec();
    let writer_task = tokio::spawn(async move {
        writer.write_all(&request).await?;
        writer.flush().await
    });
    let raw = read_all(&mut reader).await;
    writer_task.abort();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let (status, _) = parse_response(head.as_bytes());
    (status, body.to_owned())
}

fn post_request(path: &str, extra_headers: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Connection: close\r\n{extra_headers}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

#[tokio::test]
async fn no_secret_value_in_responses_metrics_or_trace_logs() {
    trace_setup();
    let server = TestServer::start_with(|c| c.max_body_bytes = 256 * 1024, default_state()).await;
    let mut leaks_to_check: Vec<String> = vec![CANARY.to_owned()];
    let mut responses = String::new();

    // 1. Every captured fixture, to both webhooks.
    let fixtures = captured_fixtures();
    assert!(fixtures.len() >= 40, "fixtures found: {}", fixtures.len());
    let client = server.client().await;
    for rel in &fixtures {
        let body = captured(rel);
        let review: Value = serde_json::from_slice(&body).unwrap();
        leaks_to_check.extend(secret_values(&review));
        for path in ["/mutate?timeout=10s", "/validate?timeout=10s"] {
            let (status, answer) =
                tokio::time::timeout(DEADLINE, client.request(Method::POST, path, body.clone()))
                    .await
                    .expect("answer before the deadline")
                    .expect("HTTP exchange");
            assert_eq!(status, StatusCode::OK, "{rel} {path}");
            let answer = without_patch(&answer);
            assert!(answer.contains(&uid_of(&body)), "{rel} {path}: {answer}");
            responses.push_str(&answer);
        }
    }

    // 2. The bad-input matrix, each input carrying the canary.
    let good = captured("configmap/mutate-create-cloud-provider-config.json");
    let with_canary = String::from_utf8(good.clone())
        .unwrap()
        .replace("fake-password", CANARY);
    assert!(with_canary.contains(CANARY));
    let mut v1beta1: Value = serde_json::from_str(&with_canary).unwrap();
    v1beta1["apiVersion"] = "admission.k8s.io/v1beta1".into();
    let mut bad_base64: Value = serde_json::from_slice(&captured(
        "secret/mutate-create-cloud-config-from-file.json",
    ))
    .unwrap();
    bad_base64["request"]["object"]["data"]["cloud.conf"] = format!("!!{CANARY}!!").into();
    let mut broken_syntax: Value = serde_json::from_str(&with_canary).unwrap();
    broken_syntax["request"]["object"]["data"]["config"] =
        format!("[Global]\npassword = \"{CANARY}\n[LoadBalancer\n").into();
    let mut huge = with_canary.clone().into_bytes();
    huge.extend(std::iter::repeat_n(b' ', 300 * 1024));
    let wrong_shape = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u-1","object":"{CANARY}","operation":7}}}}"#
    );

    // (name, request bytes, expected status)
    let cases: Vec<(&str, Vec<u8>, StatusCode)> = vec![
        (
            "truncated JSON",
            post_request(
                "/validate?timeout=10s",
                "",
                &with_canary.as_bytes()[..with_canary.find(CANARY).unwrap() + CANARY.len() + 3],
            ),
            StatusCode::BAD_REQUEST,
        ),
        (
            "not UTF-8",
            post_request(
                "/mutate?timeout=10s",
                "",
                &[b"{\"kind\":\"\xff".as_slice(), CANARY.as_bytes(), b"\"}"].concat(),
            ),
            StatusCode::BAD_REQUEST,
        ),
        (
            "wrong shape with a uid",
            post_request("/validate?timeout=10s", "", wrong_shape.as_bytes()),
            StatusCode::OK,
        ),
        (
            "v1beta1",
            post_request(
                "/validate?timeout=10s",
                "",
                &serde_json::to_vec(&v1beta1).unwrap(),
            ),
            StatusCode::OK,
        ),
        (
            "invalid base64 in a Secret",
            post_request(
                "/validate?timeout=10s",
                "",
                &serde_json::to_vec(&bad_base64).unwrap(),
            ),
            StatusCode::OK,
        ),
        (
            "gcfg syntax error next to a credential",
            post_request(
                "/validate?timeout=10s",
                "",
                &serde_json::to_vec(&broken_syntax).unwrap(),
            ),
            StatusCode::OK,
        ),
        (
            "body over the limit",
            post_request("/mutate?timeout=10s", "", &huge),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            "GET with the canary in the query and a header",
            format!(
                "GET /mutate?timeout=10s&token={CANARY} HTTP/1.1\r\nHost: localhost\r\n\
                 Authorization: Bearer {CANARY}\r\nConnection: close\r\n\r\n"
            )
            .into_bytes(),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            "credential in a header",
            post_request(
                "/mutate?timeout=10s",
                &format!("Authorization: Bearer {CANARY}\r\n"),
                with_canary.as_bytes(),
            ),
            StatusCode::OK,
        ),
    ];
    for (name, request, want) in &cases {
        let (status, body) = raw_exchange(&server, request).await;
        assert_eq!(status, *want, "{name}: {body}");
        responses.push_str(&without_patch(body.as_bytes()));
    }
    server.assert_serving().await;
    let metrics = server.metrics().await;
    server.stop().await.unwrap();

    let logs = trace_logs();
    assert!(logs.contains("review answered"), "logs were captured");
    assert!(
        logs.contains("TRACE") || logs.contains("DEBUG"),
        "logs are captured below info"
    );
    leaks_to_check.sort();
    leaks_to_check.dedup();
    for secret in &leaks_to_check {
        for (what, text) in [
            ("responses", &responses),
            ("metrics", &metrics),
            ("trace logs", &logs),
        ] {
            assert!(
                !text.contains(secret.as_str()),
                "a secret value ({} bytes, starting {:?}) was found in the {what}",
                secret.len(),
                secret.chars().take(4).collect::<String>()
            );
        }
    }
}
