//! The transport over real TLS on loopback: listeners bound to `127.0.0.1:0` and handed to
//! the server, certificates from rcgen, a client that trusts only the test CA. No network,
//! no cluster, no fixed sleeps (everything that waits polls with a deadline).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use http::{Method, StatusCode};
use serde_json::Value;
use stackgate::admission::{Reply, Webhook};
use stackgate::server::{OVERLOAD_DENIAL, OVERLOAD_WARNING, ServerConfig, ServerError, TlsSource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MUTATE_CREATE: &str = "configmap/mutate-create-cloud-provider-config.json";
const VALIDATE_CREATE: &str = "configmap/validate-create-cloud-provider-config.json";
const TLS_RELOAD_FAILURES: &str = "stackgate_tls_reloads_total{outcome=\"failure\"}";
/// The expiry gauge (no labels: prometheus-client writes `{}`).
const TLS_EXPIRY: &str = "stackgate_tls_certificate_expiry_timestamp_seconds{}";

/// notAfter of a DER certificate, Unix seconds, as the expiry gauge carries it.
fn not_after(der: &[u8]) -> f64 {
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    cert.validity().not_after.timestamp() as f64
}

// 1. ------------------------------------------------------------------------------------

#[tokio::test]
async fn captured_reviews_are_answered_with_their_uid() {
    let server = TestServer::start().await;
    let client = server.client().await;
    assert_eq!(client.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!(client.version, rustls::ProtocolVersion::TLSv1_3);
    // Both on one keep-alive connection, like the apiserver.
    for (path, fixture) in [
        ("/mutate?timeout=10s", MUTATE_CREATE),
        ("/validate?timeout=10s", VALIDATE_CREATE),
    ] {
        let body = captured(fixture);
        let (status, review) = post(&client, path, body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{path}: {review}");
        assert_eq!(review["kind"], "AdmissionReview");
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(review["response"]["uid"], uid_of(&body).as_str(), "{path}");
    }
    server.stop().await.unwrap();
}

// 2. ------------------------------------------------------------------------------------

#[tokio::test]
async fn certificate_rotation_by_kubelet_symlink_swap() {
    let server = TestServer::start().await;
    let other_ca = Ca::new("rotated CA");
    let new_leaf = other_ca.server_leaf();
    let options = ClientOptions {
        trust: vec![server.ca.cert_pem.clone(), other_ca.cert_pem.clone()],
        ..ClientOptions::default()
    };
    let before = Client::connect(server.addr, &options).await.unwrap();
    assert_eq!(before.peer_leaf, server.leaf.cert_der);
    let text = server.metrics().await;
    assert_eq!(metric(&text, TLS_EXPIRY), not_after(&server.leaf.cert_der));

    server.certs.swap_to(&new_leaf);
    let addr = server.addr;
    eventually("the rotated certificate to be served", || {
        let options = options.clone();
        let expected = new_leaf.cert_der.clone();
        async move {
            let client = Client::connect(addr, &options).await.ok()?;
            (client.peer_leaf == expected).then_some(())
        }
    })
    .await;
    // The connection opened before the swap keeps working.
    let (status, _) = post(&before, "/validate?timeout=10s", captured(VALIDATE_CREATE)).await;
    assert_eq!(status, StatusCode::OK);
    let text = server.metrics().await;
    assert!(metric(&text, "stackgate_tls_reloads_total{outcome=\"success\"}") >= 1.0);
    assert_eq!(metric(&text, TLS_EXPIRY), not_after(&new_leaf.cert_der));
    server.stop().await.unwrap();
}

// 3. ------------------------------------------------------------------------------------

#[tokio::test]
async fn broken_certificate_update_keeps_the_old_certificate() {
    let server = TestServer::start().await;
    let interval = server.config.tls_reload_interval;
    let marker = "GARBAGE-MARKER-7d1f0c";

    // Garbage in place of the certificate, the key untouched.
    let garbage = format!("-----BEGIN CERTIFICATE-----\n{marker}\n-----END CERTIFICATE-----\n");
    server.certs.swap(&[
        ("tls.crt", garbage.as_bytes()),
        ("tls.key", server.leaf.key_pem.as_bytes()),
    ]);
    let failures = |want: f64| {
        let admin = server.admin;
        move || async move {
            let text = admin_get(admin, "/metrics").await.ok()?.2;
            (metric(&text, TLS_RELOAD_FAILURES) >= want).then_some(())
        }
    };
    eventually("a counted reload failure", failures(1.0)).await;
    // Several more polls see the same broken files: no new failure, no new log line.
    let window = Instant::now();
    while window.elapsed() < interval * 5 {
        assert_eq!(metric(&server.metrics().await, TLS_RELOAD_FAILURES), 1.0);
    }
    let client = server.client().await;
    assert_eq!(
        client.peer_leaf, server.leaf.cert_der,
        "old certificate still served"
    );

    // Then the certificate file disappears (the symlink dangles).
    server
        .certs
        .swap(&[("tls.key", server.leaf.key_pem.as_bytes())]);
    eventually("a second counted reload failure", failures(2.0)).await;
    let client = server.client().await;
    assert_eq!(
        client.peer_leaf, server.leaf.cert_der,
        "old certificate still served"
    );
    server.assert_serving().await;

    let logs = logs();
    let cert_path = server.certs.file("tls.crt").display().to_string();
    let warnings: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("certificate reload failed") && l.contains(&cert_path))
        .collect();
    assert_eq!(
        warnings.len(),
        2,
        "one warning per broken state: {warnings:#?}"
    );
    assert!(!logs.contains(marker), "file content must never be logged");
    server.stop().await.unwrap();
}

// 4. ------------------------------------------------------------------------------------

#[tokio::test]
async fn bad_inputs_get_clear_answers_and_the_server_keeps_serving() {
    let server = TestServer::start().await;
    let good = captured(VALIDATE_CREATE);
    let mut v1beta1: Value = serde_json::from_slice(&good).unwrap();
    v1beta1["apiVersion"] = "admission.k8s.io/v1beta1".into();
    let mut no_request: Value = serde_json::from_slice(&good).unwrap();
    no_request.as_object_mut().unwrap().remove("request");

    // (name, method, path, body, expected status, the error message mentions)
    type Case<'a> = (&'a str, Method, &'a str, Vec<u8>, StatusCode, &'a str);
    let cases: Vec<Case> = vec![
        (
            "truncated JSON",
            Method::POST,
            "/validate?timeout=10s",
            good[..good.len() / 2].to_vec(),
            StatusCode::BAD_REQUEST,
            "truncated",
        ),
        (
            "missing request",
            Method::POST,
            "/validate?timeout=10s",
            serde_json::to_vec(&no_request).unwrap(),
            StatusCode::BAD_REQUEST,
            "without a request",
        ),
        (
            "non-UTF-8 bytes",
            Method::POST,
            "/mutate?timeout=10s",
            b"{\"kind\":\"\xff\xfe\"}".to_vec(),
            StatusCode::BAD_REQUEST,
            "JSON",
        ),
        (
            "GET on a webhook path",
            Method::GET,
            "/mutate",
            Vec::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "POST",
        ),
        (
            "unknown path",
            Method::POST,
            "/admit?timeout=10s",
            good.clone(),
            StatusCode::NOT_FOUND,
            "/validate",
        ),
        (
            "trailing slash",
            Method::POST,
            "/validate/",
            good.clone(),
            StatusCode::NOT_FOUND,
            "/validate",
        ),
    ];
    for (name, method, path, body, want, mentions) in cases {
        let client = server.client().await;
        let (status, body) = tokio::time::timeout(DEADLINE, client.request(method, path, body))
            .await
            .unwrap()
            .unwrap();
        let json: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| panic!("{name}: body is not JSON: {body:?}"));
        assert_eq!(status, want, "{name}: {json}");
        let message = json["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {json}"));
        assert!(message.contains(mentions), "{name}: {message:?}");
        server.assert_serving().await;
    }

    // A review in a version stackgate does not speak: 200 with a denial that says why.
    let client = server.client().await;
    let (status, review) = post(
        &client,
        "/validate?timeout=10s",
        serde_json::to_vec(&v1beta1).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{review}");
    assert_eq!(review["response"]["allowed"], false);
    assert_eq!(review["response"]["uid"], uid_of(&good).as_str());
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1beta1", "{review}");
    assert_eq!(review["response"]["status"]["code"], 400, "{review}");
    let message = review["response"]["status"]["message"].as_str().unwrap();
    // Names the version stackgate speaks, exactly (not only as a prefix of v1beta1) ...
    assert!(
        message
            .match_indices("admission.k8s.io/v1")
            .any(|(at, m)| !message[at + m.len()..].starts_with(|c: char| c.is_alphanumeric())),
        "admission.k8s.io/v1 not named exactly: {message}"
    );
    // ... the version it was given, and the fix.
    assert!(
        message.contains("admission.k8s.io/v1beta1"),
        "given version not named: {message}"
    );
    assert!(message.contains("admissionReviewVersions"), "{message}");
    server.assert_serving().await;

    // Reviews the server can read whose cloud config it cannot: HTTP 200 on both endpoints;
    // /validate refuses with a message naming the key or the line, /mutate admits unchanged
    // (it cannot edit what it cannot read).
    let secret_review = |rel: &str| {
        let mut v: Value = serde_json::from_slice(&captured(rel)).unwrap();
        v["request"]["object"]["data"]["cloud.conf"] = "%%%not-base64-fake-password%%%".into();
        serde_json::to_vec(&v).unwrap()
    };
    let configmap_review = |rel: &str| {
        let mut v: Value = serde_json::from_slice(&captured(rel)).unwrap();
        v["request"]["object"]["data"]["config"] =
            "[Global\nfoo=bar\n[LoadBalancer]\nprovider-requires-serial-api-calls = true\n".into();
        serde_json::to_vec(&v).unwrap()
    };
    // (name, validate body, mutate body, the denial mentions)
    type ContentCase<'a> = (&'a str, Vec<u8>, Vec<u8>, &'a [&'a str]);
    let content_cases: Vec<ContentCase> = vec![
        (
            "Secret data[cloud.conf] is not base64",
            secret_review("secret/validate-create-cloud-config-from-file.json"),
            secret_review("secret/mutate-create-cloud-config-from-file.json"),
            &[
                "Secret kube-system/cloud-config",
                "data[\"cloud.conf\"] is not valid base64",
                "the CCM would fail to start",
            ],
        ),
        (
            "ConfigMap INI that gcfg rejects",
            configmap_review(VALIDATE_CREATE),
            configmap_review(MUTATE_CREATE),
            &[
                "ConfigMap openshift-config/cloud-provider-config",
                "data[\"config\"] line 1",
                "gcfg syntax error",
                "the CCM would fail to start",
            ],
        ),
    ];
    for (name, validate, mutate, mentions) in content_cases {
        let client = server.client().await;
        let uid = uid_of(&validate);
        let (status, review) = post(&client, "/validate?timeout=10s", validate).await;
        assert_eq!(status, StatusCode::OK, "{name}: {review}");
        let response = &review["response"];
        assert_eq!(response["uid"], uid.as_str(), "{name}");
        assert_eq!(response["allowed"], false, "{name}: {review}");
        assert!(response.get("patch").is_none(), "{name}: {review}");
        let message = response["status"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            message.split("\n\n").count(),
            1,
            "{name}: reported once: {message}"
        );
        for needle in mentions {
            assert!(
                message.contains(needle),
                "{name}: {needle:?} not in {message}"
            );
        }
        assert!(!review.to_string().contains("fake-password"), "{name}");

        let uid = uid_of(&mutate);
        let (status, review) = post(&client, "/mutate?timeout=10s", mutate).await;
        assert_eq!(status, StatusCode::OK, "{name}: {review}");
        assert_eq!(review["response"]["uid"], uid.as_str(), "{name}");
        assert_eq!(review["response"]["allowed"], true, "{name}: {review}");
        assert!(
            review["response"].get("patch").is_none(),
            "{name}: {review}"
        );
        assert!(
            review["response"].get("patchType").is_none(),
            "{name}: {review}"
        );
        assert!(!review.to_string().contains("fake-password"), "{name}");
        server.assert_serving().await;
    }

    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            "stackgate_http_rejections_total{reason=\"method_not_allowed\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "stackgate_http_rejections_total{reason=\"not_found\"}"
        ),
        2.0
    );
    server.stop().await.unwrap();
}

/// Sends a 10 MiB body (declared, or chunked) while reading the answer concurrently, as a
/// real client would; the write side may be cut off once the server has answered.
async fn send_huge(server: &TestServer, chunked: bool) -> (StatusCode, Value) {
    let stream = tls_connect(server.addr, &server.options()).await.unwrap();
    let (mut reader, mut writer) = tokio::io::split(stream);
    let size = 10 * 1024 * 1024;
    let head = if chunked {
        "POST /mutate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
            .to_owned()
    } else {
        format!(
            "POST /mutate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Content-Length: {size}\r\n\r\n"
        )
    };
    let writer_task = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..size / chunk.len() {
            if chunked {
                writer
                    .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .await?;
                writer.write_all(&chunk).await?;
                writer.write_all(b"\r\n").await?;
            } else {
                writer.write_all(&chunk).await?;
            }
        }
        if chunked {
            writer.write_all(b"0\r\n\r\n").await?;
        }
        writer.flush().await
    });
    let raw = read_all(&mut reader).await;
    writer_task.abort();
    parse_response(&raw)
}

#[tokio::test]
async fn oversized_bodies_are_refused_with_413() {
    let server = TestServer::start().await;
    for chunked in [false, true] {
        let (status, json) = send_huge(&server, chunked).await;
        assert_eq!(
            status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "chunked={chunked}: {json}"
        );
        assert_eq!(json["error"], "request body exceeds 6291456 bytes");
        server.assert_serving().await;
    }
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            "stackgate_http_rejections_total{reason=\"body_too_large\"}"
        ),
        2.0
    );
    server.stop().await.unwrap();
}

// 5. ------------------------------------------------------------------------------------

#[tokio::test]
async fn tls12_only_client_is_served() {
    let server = TestServer::start().await;
    let options = ClientOptions {
        tls12_only: true,
        ..server.options()
    };
    let client = Client::connect(server.addr, &options).await.unwrap();
    assert_eq!(client.version, rustls::ProtocolVersion::TLSv1_2);
    let (status, _) = post(&client, "/mutate?timeout=10s", captured(MUTATE_CREATE)).await;
    assert_eq!(status, StatusCode::OK);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn http2_is_negotiated_by_alpn() {
    let server = TestServer::start().await;
    let options = ClientOptions {
        alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        ..server.options()
    };
    let tls = tls_connect(server.addr, &options).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let body = captured(VALIDATE_CREATE);
    let request = http::Request::post("https://localhost/validate?timeout=10s")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(hyper::body::Bytes::from(
            body.clone(),
        )))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let review: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(review["response"]["uid"], uid_of(&body).as_str());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn plaintext_http_to_the_tls_port_gets_no_http_response() {
    let server = TestServer::start().await;
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let raw = read_all(&mut tcp).await;
    assert!(
        !raw.starts_with(b"HTTP/"),
        "plaintext got an HTTP answer: {raw:?}"
    );
    assert!(!String::from_utf8_lossy(&raw).contains("ok"));
    server.assert_serving().await;
    let text = server.metrics().await;
    assert!(
        metric(
            &text,
            "stackgate_http_rejections_total{reason=\"tls_handshake\"}"
        ) >= 1.0
    );
    server.stop().await.unwrap();
}

// 6. ------------------------------------------------------------------------------------

#[tokio::test]
async fn admin_endpoints() {
    let state = default_state();
    let gate = state.add_readiness_gate("release-catalog");
    let server = TestServer::start_with(|_| {}, state).await;

    let (status, _, body) = server.admin_get("/healthz").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));

    let (status, _, body) = server.admin_get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("release-catalog"), "{body}");
    assert!(server.metrics().await.contains("stackgate_ready 0"));

    gate.set(true);
    let (status, _, body) = server.admin_get("/readyz").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
    assert!(server.metrics().await.contains("stackgate_ready 1"));

    server.state.set_policies_loaded(false);
    let (status, _, body) = server.admin_get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("policies"), "{body}");
    server.state.set_policies_loaded(true);

    let client = server.client().await;
    let (status, _) = post(&client, "/validate?timeout=10s", captured(VALIDATE_CREATE)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, content_type, text) = server.admin_get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("stackgate_admission_requests_total{")
                && l.contains("webhook=\"validate\"")),
        "{text}"
    );
    let (status, _, _) = server.admin_get("/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    server.stop().await.unwrap();
}

// 7. ------------------------------------------------------------------------------------

#[tokio::test]
async fn silent_clients_are_disconnected() {
    let timeout = Duration::from_millis(300);
    let server = TestServer::start_with(
        |c| {
            c.header_read_timeout = timeout;
            c.tls_handshake_timeout = timeout;
        },
        default_state(),
    )
    .await;

    // TLS done, no request head.
    let started = Instant::now();
    let mut tls = tls_connect(server.addr, &server.options()).await.unwrap();
    let raw = read_all(&mut tls).await;
    let elapsed = started.elapsed();
    assert!(elapsed < DEADLINE, "not disconnected");
    assert!(
        elapsed >= timeout - Duration::from_millis(50),
        "too early: {elapsed:?}"
    );
    assert!(!raw.starts_with(b"HTTP/1.1 2"), "{raw:?}");

    // TCP only, no handshake.
    let started = Instant::now();
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    let raw = read_all(&mut tcp).await;
    let elapsed = started.elapsed();
    assert!(elapsed < DEADLINE, "not disconnected");
    assert!(
        elapsed >= timeout - Duration::from_millis(50),
        "too early: {elapsed:?}"
    );
    assert!(raw.is_empty(), "{raw:?}");

    // Half a request head.
    let started = Instant::now();
    let mut tls = tls_connect(server.addr, &server.options()).await.unwrap();
    tls.write_all(b"POST /validate HTTP/1.1\r\nHost: local")
        .await
        .unwrap();
    let _ = read_all(&mut tls).await;
    assert!(started.elapsed() < DEADLINE, "not disconnected");

    server.assert_serving().await;
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            "stackgate_http_rejections_total{reason=\"tls_handshake_timeout\"}"
        ),
        1.0
    );
    server.stop().await.unwrap();
}

// 8. ------------------------------------------------------------------------------------

#[tokio::test]
async fn graceful_shutdown_completes_the_request_in_flight() {
    let mut server =
        TestServer::start_with(|c| c.request_timeout = DEADLINE, default_state()).await;
    let body = captured(VALIDATE_CREATE);

    // A request in flight: the server has read the head and is waiting for the body
    // (it asked for it with "100 Continue").
    let mut tls = tls_connect(server.addr, &server.options()).await.unwrap();
    let head = format!(
        "POST /validate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    let mut interim = Vec::new();
    while !interim.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(DEADLINE, tls.read(&mut byte))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 1, "connection closed before 100 Continue");
        interim.push(byte[0]);
    }
    assert!(interim.starts_with(b"HTTP/1.1 100"), "{interim:?}");
    let idle = server.client().await;

    server.trigger_shutdown();
    // Readiness goes first.
    let admin = server.admin;
    eventually("/readyz to report shutting down", || async move {
        let (status, _, body) = admin_get(admin, "/readyz").await.ok()?;
        (status == StatusCode::SERVICE_UNAVAILABLE && body.contains("shutting-down")).then_some(())
    })
    .await;
    // The webhook listener closes after every connection was told to drain.
    let addr = server.addr;
    eventually("the webhook port to refuse connections", || async move {
        TcpStream::connect(addr).await.is_err().then_some(())
    })
    .await;
    // The idle keep-alive connection is closed, not reset mid-request.
    assert!(
        idle.request(Method::POST, "/validate", captured(VALIDATE_CREATE))
            .await
            .is_err(),
        "idle connection still accepts requests while draining"
    );

    tls.write_all(&body).await.unwrap();
    tls.flush().await.unwrap();
    let raw = read_all(&mut tls).await;
    let (status, review) = parse_response(&raw);
    assert_eq!(status, StatusCode::OK, "{review}");
    assert_eq!(review["response"]["uid"], uid_of(&body).as_str());
    server.join().await.unwrap();
}

// 9. ------------------------------------------------------------------------------------

#[tokio::test]
async fn client_certificates_are_required_with_client_ca() {
    setup();
    let clients_ca = Ca::new("apiserver client CA");
    let dir = tempfile::tempdir().unwrap();
    let ca_path = dir.path().join("client-ca.pem");
    std::fs::write(&ca_path, &clients_ca.cert_pem).unwrap();
    let server =
        TestServer::start_with(|c| c.client_ca = Some(ca_path.clone()), default_state()).await;

    // No certificate: refused (in TLS 1.3 the client may only learn it on first use).
    let anonymous = async {
        let client = Client::connect(server.addr, &server.options()).await.ok()?;
        client
            .request(
                Method::POST,
                "/validate?timeout=10s",
                captured(VALIDATE_CREATE),
            )
            .await
            .ok()
    };
    assert!(
        anonymous.await.is_none(),
        "a client without a certificate was served"
    );

    // A certificate from another CA: refused.
    let stranger = ClientOptions {
        identity: Some(Ca::new("someone else").client_leaf("kube-apiserver")),
        ..server.options()
    };
    let refused = async {
        let client = Client::connect(server.addr, &stranger).await.ok()?;
        client
            .request(
                Method::POST,
                "/validate?timeout=10s",
                captured(VALIDATE_CREATE),
            )
            .await
            .ok()
    };
    assert!(
        refused.await.is_none(),
        "a client with a foreign certificate was served"
    );

    // A certificate from the configured CA: served.
    let apiserver = ClientOptions {
        identity: Some(clients_ca.client_leaf("kube-apiserver")),
        ..server.options()
    };
    let client = Client::connect(server.addr, &apiserver).await.unwrap();
    let body = captured(VALIDATE_CREATE);
    let (status, review) = post(&client, "/validate?timeout=10s", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{review}");
    assert_eq!(review["response"]["uid"], uid_of(&body).as_str());
    server.stop().await.unwrap();
}

// More: overload, chains, generated certificates, start-up errors. -------------------------

#[tokio::test]
async fn overload_fails_open_for_mutate_and_closed_for_validate() {
    // No evaluation slots at all: every review waits until its deadline.
    let server = TestServer::start_with(
        |c| {
            c.max_concurrency = 0;
            c.request_timeout = Duration::from_millis(100);
        },
        default_state(),
    )
    .await;
    let client = server.client().await;

    let body = captured(MUTATE_CREATE);
    let (status, review) = post(&client, "/mutate?timeout=10s", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{review}");
    let response = &review["response"];
    assert_eq!(response["uid"], uid_of(&body).as_str());
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());
    assert_eq!(response["warnings"][0], OVERLOAD_WARNING);

    let body = captured(VALIDATE_CREATE);
    let (status, review) = post(&client, "/validate?timeout=10s", body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{review}");
    let response = &review["response"];
    assert_eq!(response["uid"], uid_of(&body).as_str());
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 429);
    assert_eq!(response["status"]["message"], OVERLOAD_DENIAL);

    // No readable uid: not a review we can answer; 503 and the apiserver's failurePolicy.
    let (status, json) = post(&client, "/validate?timeout=10s", &b"{}"[..]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{json}");
    assert_eq!(json["error"], OVERLOAD_DENIAL);

    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            "stackgate_http_rejections_total{reason=\"overloaded\"}"
        ),
        3.0
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn large_reviews_are_evaluated_off_the_async_workers() {
    // A custom review function sees what the server passes on; a 1 MiB body takes the
    // blocking-pool path. (The test runtime is single-threaded: inline evaluation runs on
    // the test's own thread.)
    let test_thread = std::thread::current().id();
    let handler: stackgate::server::ReviewFn =
        Arc::new(move |webhook: Webhook, body: &[u8]| Reply {
            status: StatusCode::OK,
            body: serde_json::to_vec(&serde_json::json!({
                "webhook": format!("{webhook:?}"),
                "len": body.len(),
                "blocking": std::thread::current().id() != test_thread,
            }))
            .unwrap(),
        });
    let server = TestServer::start_with(|_| {}, default_state().with_handler(handler)).await;
    let client = server.client().await;
    let (status, json) = post(&client, "/validate", vec![b' '; 1024 * 1024]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["len"], 1024 * 1024);
    assert_eq!(json["webhook"], "Validate");
    assert_eq!(json["blocking"], true);
    let (_, json) = post(&client, "/mutate", &b"{}"[..]).await;
    assert_eq!(json["webhook"], "Mutate");
    assert_eq!(json["blocking"], false);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn certificate_chains_are_served() {
    setup();
    let root = Ca::new("root");
    let intermediate = root.intermediate("intermediate");
    let mut leaf = intermediate.server_leaf();
    leaf.chain_pem.push_str(&intermediate.cert_pem);
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, &leaf.chain_pem).unwrap();
    std::fs::write(&key, &leaf.key_pem).unwrap();
    let config = ServerConfig {
        tls: TlsSource::Files { cert, key },
        ..ServerConfig::default()
    };
    let state = Arc::new(default_state());
    let (addr, _, stop, join) = spawn_server(config, state).await;
    // The client trusts only the root: the intermediate must come from the server.
    let client = Client::connect(addr, &ClientOptions::trusting(&root.cert_pem))
        .await
        .unwrap();
    assert_eq!(client.peer_leaf, leaf.cert_der);
    let (status, _) = post(&client, "/mutate?timeout=10s", captured(MUTATE_CREATE)).await;
    assert_eq!(status, StatusCode::OK);
    stop.send(()).unwrap();
    join.await.unwrap().unwrap();
}

#[tokio::test]
async fn generated_certificate_when_none_is_given() {
    setup();
    let dir = tempfile::tempdir().unwrap();
    let ca_out = dir.path().join("nested/dir/ca.pem");
    let config = ServerConfig {
        tls: TlsSource::Generated {
            ca_out: ca_out.clone(),
        },
        ..ServerConfig::default()
    };
    let state = Arc::new(default_state());
    let (addr, admin, stop, join) = spawn_server(config, Arc::clone(&state)).await;
    eventually("readiness", || async move {
        let (status, _, _) = admin_get(admin, "/readyz").await.ok()?;
        (status == StatusCode::OK).then_some(())
    })
    .await;
    let ca_pem = std::fs::read_to_string(&ca_out).unwrap();
    let client = Client::connect(addr, &ClientOptions::trusting(&ca_pem))
        .await
        .unwrap();
    let (status, _) = post(&client, "/validate?timeout=10s", captured(VALIDATE_CREATE)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(logs().contains(&format!("curl --cacert {}", ca_out.display())));
    stop.send(()).unwrap();
    join.await.unwrap().unwrap();
}

/// Starts with `tls` and returns the start-up error.
async fn startup_error(tls: TlsSource, client_ca: Option<std::path::PathBuf>) -> ServerError {
    let config = ServerConfig {
        tls,
        client_ca,
        ..ServerConfig::default()
    };
    let (_, _, _stop, join) = spawn_server(config, Arc::new(default_state())).await;
    tokio::time::timeout(DEADLINE, join)
        .await
        .unwrap()
        .unwrap()
        .expect_err("start-up must fail")
}

#[tokio::test]
async fn startup_errors_name_the_flag_and_never_the_content() {
    setup();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("ca");
    let leaf = ca.server_leaf();
    let other = ca.server_leaf();
    let write = |name: &str, content: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path
    };
    let cert = write("tls.crt", &leaf.chain_pem);
    let key = write("tls.key", &leaf.key_pem);
    let other_key = write("other.key", &other.key_pem);
    let garbage = write("garbage.pem", "SECRET-ISH-CONTENT\n");
    let missing = dir.path().join("missing.pem");

    let cases = [
        (
            TlsSource::Files {
                cert: missing.clone(),
                key: key.clone(),
            },
            None,
            "--tls-cert",
        ),
        (
            TlsSource::Files {
                cert: cert.clone(),
                key: missing.clone(),
            },
            None,
            "--tls-key",
        ),
        (
            TlsSource::Files {
                cert: garbage.clone(),
                key: key.clone(),
            },
            None,
            "--tls-cert",
        ),
        (
            TlsSource::Files {
                cert: cert.clone(),
                key: garbage.clone(),
            },
            None,
            "--tls-key",
        ),
        (
            TlsSource::Files {
                cert: cert.clone(),
                key: other_key.clone(),
            },
            None,
            "do not form a usable pair",
        ),
        (
            TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            Some(garbage.clone()),
            "--client-ca",
        ),
        (
            TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            Some(missing.clone()),
            "--client-ca",
        ),
    ];
    for (tls, client_ca, mentions) in cases {
        let error = startup_error(tls.clone(), client_ca).await;
        let chain = format!("{error}: {:?}", std::error::Error::source(&error));
        assert!(chain.contains(mentions), "{tls:?}: {chain}");
        assert!(!chain.contains("SECRET-ISH"), "{chain}");
    }
}
