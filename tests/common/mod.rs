//! Shared helpers for the HTTPS tests: a PKI (rcgen), a rustls + hyper test client that
//! trusts only the CAs it is given, a server started on `127.0.0.1:0` listeners with its
//! certificates in a kubelet-style Secret volume layout, admin-port helpers, polling with a
//! deadline (no fixed sleeps), and captured log output.
//!
//! Not every test binary uses every helper.
#![allow(dead_code)]

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use rustls::{ClientConfig, ProtocolVersion, RootCertStore};
use serde_json::Value;
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::server::{self, AppState, Listeners, ServerConfig, ServerError, TlsSource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Upper bound for anything a test waits for.
pub const DEADLINE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// Process set-up and captured logs

static SETUP: Once = Once::new();
static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// Installs the ring provider (once; "already installed" is fine) and a log subscriber
/// that captures `stackgate=debug` output for [`logs`]. Set `STACKGATE_TEST_LOG=1` to also
/// print it.
pub fn setup() {
    setup_at("stackgate=debug");
}

/// [`setup`] with the log filter `filter` (e.g. `trace` for the leak matrix). The first call
/// in a test binary decides: a binary's tests should all pass the same filter.
pub fn setup_at(filter: &str) {
    SETUP.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(|| LogWriter)
            .try_init();
    });
}

struct LogWriter;

impl io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if std::env::var_os("STACKGATE_TEST_LOG").is_some() {
            eprint!("{}", String::from_utf8_lossy(buf));
        }
        LOGS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Everything logged so far by any test in this binary.
pub fn logs() -> String {
    String::from_utf8_lossy(&LOGS.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
}

// ---------------------------------------------------------------------------------------
// PKI

/// A CA that can issue server and client certificates.
pub struct Ca {
    /// CA certificate, PEM.
    pub cert_pem: String,
    /// CA certificate, DER.
    pub cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// An issued certificate with its key.
#[derive(Clone)]
pub struct Leaf {
    /// Leaf certificate PEM (followed by intermediates, if any).
    pub chain_pem: String,
    /// Leaf certificate DER.
    pub cert_der: CertificateDer<'static>,
    /// Key, PKCS#8 PEM.
    pub key_pem: String,
}

impl Ca {
    /// A self-signed root CA.
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let params = ca_params(name);
        let cert = params.self_signed(&key).unwrap();
        Self {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// An intermediate CA signed by this one.
    pub fn intermediate(&self, name: &str) -> Self {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let params = ca_params(name);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Self {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate for `localhost` and `127.0.0.1`.
    pub fn server_leaf(&self) -> Leaf {
        self.leaf(
            vec!["localhost".into(), "127.0.0.1".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate.
    pub fn client_leaf(&self, name: &str) -> Leaf {
        self.leaf(vec![name.into()], ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(&self, names: Vec<String>, usage: ExtendedKeyUsagePurpose) -> Leaf {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, names[0].as_str());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            chain_pem: cert.pem(),
            cert_der: cert.der().clone(),
            key_pem: key.serialize_pem(),
        }
    }
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

// ---------------------------------------------------------------------------------------
// TLS + HTTP client

/// How the test client connects.
#[derive(Clone, Default)]
pub struct ClientOptions {
    /// Trusted CA certificates (PEM). Only these are trusted.
    pub trust: Vec<String>,
    /// Client certificate to present.
    pub identity: Option<Leaf>,
    /// Offer TLS 1.2 only.
    pub tls12_only: bool,
    /// ALPN protocols to offer; empty means `http/1.1` only, like kube-apiserver v1.26.
    pub alpn: Vec<Vec<u8>>,
}

impl ClientOptions {
    /// Trust exactly `ca_pem`.
    pub fn trusting(ca_pem: &str) -> Self {
        Self {
            trust: vec![ca_pem.to_owned()],
            ..Self::default()
        }
    }

    /// The rustls configuration.
    pub fn config(&self) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        for pem in &self.trust {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&'static rustls::SupportedProtocolVersion] = if self.tls12_only {
            &[&rustls::version::TLS12]
        } else {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match &self.identity {
            Some(leaf) => {
                let chain = CertificateDer::pem_slice_iter(leaf.chain_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
                let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
                builder.with_client_auth_cert(chain, key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = if self.alpn.is_empty() {
            vec![b"http/1.1".to_vec()]
        } else {
            self.alpn.clone()
        };
        Arc::new(config)
    }
}

/// Opens a TLS connection to `addr` as `localhost`.
pub async fn tls_connect(
    addr: SocketAddr,
    options: &ClientOptions,
) -> io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    let connect = TlsConnector::from(options.config()).connect(name, tcp);
    tokio::time::timeout(DEADLINE, connect)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))?
}

/// An HTTP/1.1 keep-alive connection over TLS.
pub struct Client {
    sender: tokio::sync::Mutex<SendRequest<Full<Bytes>>>,
    /// The leaf certificate the server presented.
    pub peer_leaf: CertificateDer<'static>,
    /// Negotiated TLS version.
    pub version: ProtocolVersion,
    /// Negotiated ALPN protocol.
    pub alpn: Option<Vec<u8>>,
}

impl Client {
    /// Connects with `options` (HTTP/1.1 whatever ALPN says).
    pub async fn connect(addr: SocketAddr, options: &ClientOptions) -> io::Result<Self> {
        let tls = tls_connect(addr, options).await?;
        let (_, session) = tls.get_ref();
        let peer_leaf = session
            .peer_certificates()
            .and_then(|c| c.first())
            .cloned()
            .ok_or_else(|| io::Error::other("no peer certificate"))?;
        let version = session.protocol_version().unwrap();
        let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(io::Error::other)?;
        tokio::spawn(connection);
        Ok(Self {
            sender: tokio::sync::Mutex::new(sender),
            peer_leaf,
            version,
            alpn,
        })
    }

    /// Sends one request like the apiserver does and returns status and body.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Bytes>,
    ) -> Result<(StatusCode, Bytes), hyper::Error> {
        let body = body.into();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .header("accept", "application/json, */*")
            .header("user-agent", "kube-apiserver-admission")
            .header("content-length", body.len())
            .body(Full::new(body))
            .unwrap();
        let mut sender = self.sender.lock().await;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

/// POSTs `body` to `path` on `client`; the response body as JSON (`Value::String` with
/// the text when it is not JSON).
pub async fn post(client: &Client, path: &str, body: impl Into<Bytes>) -> (StatusCode, Value) {
    let (status, body) = tokio::time::timeout(DEADLINE, client.request(Method::POST, path, body))
        .await
        .expect("response before the deadline")
        .expect("HTTP exchange");
    (status, json_or_text(&body))
}

/// Parses JSON, or keeps the text.
pub fn json_or_text(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

// ---------------------------------------------------------------------------------------
// Admin (plain HTTP)

/// `GET path` on the admin listener: status, content type and body text.
pub async fn admin_get(addr: SocketAddr, path: &str) -> io::Result<(StatusCode, String, String)> {
    let tcp = TcpStream::connect(addr).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(io::Error::other)?;
    tokio::spawn(connection);
    let request = Request::get(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(io::Error::other)?;
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(io::Error::other)?
        .to_bytes();
    Ok((
        status,
        content_type,
        String::from_utf8_lossy(&body).into_owned(),
    ))
}

/// The value of one sample in an OpenMetrics/Prometheus text page, e.g.
/// `metric(&text, "stackgate_tls_reloads_total{outcome=\"failure\"}")`; 0 when absent.
pub fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------
// Polling

/// Calls `check` until it returns `Some`, at most until [`DEADLINE`]; panics naming
/// `what` otherwise. Tries are 10 ms apart (a polling interval, not a synchronisation).
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Raw connections (for what a well-behaved client cannot do)

/// Reads until EOF or error (a reset after the response is fine), at most [`DEADLINE`].
pub async fn read_all<R: tokio::io::AsyncRead + Unpin>(reader: &mut R) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let _ = tokio::time::timeout(DEADLINE, async {
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    out
}

/// Splits a raw HTTP/1.1 response into status and body.
pub fn parse_response(raw: &[u8]) -> (StatusCode, Value) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {head:?}"));
    (
        StatusCode::from_u16(code).unwrap(),
        json_or_text(body.as_bytes()),
    )
}

/// Writes a request head (`POST path`, JSON, `Content-Length: length`) on `stream`.
pub async fn write_head<W: tokio::io::AsyncWrite + Unpin>(
    stream: &mut W,
    path: &str,
    length: usize,
) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, */*\r\nUser-Agent: kube-apiserver-admission\r\n\
         Content-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
}

// ---------------------------------------------------------------------------------------
// Fixtures

/// A captured request body from `tests/fixtures/captured/`.
pub fn captured(rel: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/captured")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `request.uid` of a review body.
pub fn uid_of(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap();
    v["request"]["uid"].as_str().unwrap().to_owned()
}

/// The state the server normally runs with: the embedded policies.
pub fn default_state() -> AppState {
    let engine = Engine::new(PolicySet::embedded().expect("embedded policies load"));
    AppState::new(engine, Metrics::new())
}

// ---------------------------------------------------------------------------------------
// Server

/// A certificate directory laid out like a kubelet Secret volume:
/// `..<ts>/tls.crt`, `..data -> ..<ts>`, `tls.crt -> ..data/tls.crt` (same for `tls.key`).
pub struct CertDir {
    /// The volume directory.
    pub path: PathBuf,
    generation: AtomicUsize,
}

impl CertDir {
    /// Lays out `files` as the first generation.
    pub fn new(path: PathBuf, files: &[(&str, &[u8])]) -> Self {
        let dir = Self {
            path,
            generation: AtomicUsize::new(0),
        };
        dir.swap(files);
        for (name, _) in files {
            std::os::unix::fs::symlink(Path::new("..data").join(name), dir.path.join(name))
                .unwrap();
        }
        dir
    }

    /// The path the server is given for `name` (the top-level symlink).
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// What the kubelet does on a Secret update: write a new timestamped directory with
    /// `files` (a name left out dangles), then atomically re-point `..data` at it by
    /// renaming a temporary symlink over it.
    pub fn swap(&self, files: &[(&str, &[u8])]) {
        let n = self.generation.fetch_add(1, Ordering::SeqCst);
        let generation = format!("..2026_11_22_{n:04}");
        let dir = self.path.join(&generation);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        let tmp = self.path.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&generation, &tmp).unwrap();
        std::fs::rename(&tmp, self.path.join("..data")).unwrap();
    }

    /// [`Self::swap`] to a certificate/key pair.
    pub fn swap_to(&self, leaf: &Leaf) {
        self.swap(&[
            ("tls.crt", leaf.chain_pem.as_bytes()),
            ("tls.key", leaf.key_pem.as_bytes()),
        ]);
    }
}

/// A server on `127.0.0.1:0`, serving a certificate from [`TestServer::ca`] out of a
/// kubelet-style [`CertDir`] in a temporary directory.
pub struct TestServer {
    /// Webhook (HTTPS) address.
    pub addr: SocketAddr,
    /// Admin (HTTP) address.
    pub admin: SocketAddr,
    /// The CA of the serving certificate.
    pub ca: Ca,
    /// The serving certificate at start.
    pub leaf: Leaf,
    /// Certificate volume.
    pub certs: CertDir,
    /// Shared state (readiness gates, metrics).
    pub state: Arc<AppState>,
    /// The configuration the server runs with.
    pub config: ServerConfig,
    /// Keeps the temporary directory alive.
    pub tmp: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    join: Option<JoinHandle<Result<(), ServerError>>>,
}

impl TestServer {
    /// Default configuration, default state.
    pub async fn start() -> Self {
        Self::start_with(|_| {}, default_state()).await
    }

    /// `configure` may change anything but `tls` (and `tls_reload_interval` defaults to
    /// 50 ms here). Waits until the admin listener answers `/healthz`.
    pub async fn start_with(configure: impl FnOnce(&mut ServerConfig), state: AppState) -> Self {
        setup();
        let tmp = tempfile::tempdir().unwrap();
        let ca = Ca::new("stackgate test CA");
        let leaf = ca.server_leaf();
        let certs = CertDir::new(
            tmp.path().join("certs"),
            &[
                ("tls.crt", leaf.chain_pem.as_bytes()),
                ("tls.key", leaf.key_pem.as_bytes()),
            ],
        );
        let mut config = ServerConfig {
            tls: TlsSource::Files {
                cert: certs.file("tls.crt"),
                key: certs.file("tls.key"),
            },
            tls_reload_interval: Duration::from_millis(50),
            // Tests that exercise the drain delay set it; the rest stop at once.
            shutdown_delay: Duration::ZERO,
            ..ServerConfig::default()
        };
        configure(&mut config);
        let state = Arc::new(state);
        let (addr, admin, shutdown, join) = spawn_server(config.clone(), Arc::clone(&state)).await;
        let server = Self {
            addr,
            admin,
            ca,
            leaf,
            certs,
            state,
            config,
            tmp,
            shutdown: Some(shutdown),
            join: Some(join),
        };
        server.wait_healthy().await;
        server
    }

    /// Polls `/healthz` until 200 (panics early if the server exited).
    pub async fn wait_healthy(&self) {
        let admin = self.admin;
        eventually("/healthz to answer 200", || async move {
            match admin_get(admin, "/healthz").await {
                Ok((StatusCode::OK, _, _)) => Some(()),
                _ => None,
            }
        })
        .await;
    }

    /// Client options trusting this server's CA.
    pub fn options(&self) -> ClientOptions {
        ClientOptions::trusting(&self.ca.cert_pem)
    }

    /// A connected keep-alive client trusting this server's CA.
    pub async fn client(&self) -> Client {
        Client::connect(self.addr, &self.options()).await.unwrap()
    }

    /// `GET path` on the admin port.
    pub async fn admin_get(&self, path: &str) -> (StatusCode, String, String) {
        admin_get(self.admin, path).await.unwrap()
    }

    /// The `/metrics` page.
    pub async fn metrics(&self) -> String {
        self.admin_get("/metrics").await.2
    }

    /// Starts shutdown (the future passed to `run` completes).
    pub fn trigger_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Shuts down and waits for `run` to return.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        self.trigger_shutdown();
        self.join().await
    }

    /// Waits for `run` to return (after [`Self::trigger_shutdown`]).
    pub async fn join(&mut self) -> Result<(), ServerError> {
        let join = self.join.take().expect("joined once");
        tokio::time::timeout(DEADLINE, join)
            .await
            .expect("server stops before the deadline")
            .expect("server task does not panic")
    }

    /// Asserts a normal review still gets a 200 on a fresh connection.
    pub async fn assert_serving(&self) {
        let body = captured("configmap/validate-create-cloud-provider-config.json");
        let client = self.client().await;
        let (status, review) = post(&client, "/validate?timeout=10s", body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{review}");
        assert_eq!(review["response"]["uid"], uid_of(&body).as_str());
    }
}

/// The JSON Patch of a mutate `response` (base64 in `response.patch`), or `None` when there
/// is none. Checks `patchType` and that the bytes are base64 JSON.
pub fn decoded_patch(response: &Value) -> Option<Value> {
    use base64::Engine as _;
    let b64 = response["patch"].as_str()?;
    assert_eq!(response["patchType"], "JSONPatch", "{response}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("patch is base64");
    Some(serde_json::from_slice(&bytes).expect("patch is JSON"))
}

/// Binds `127.0.0.1:0` twice and spawns [`server::run_with_listeners`] with a oneshot
/// shutdown; returns the addresses, the shutdown trigger and the join handle.
pub async fn spawn_server(
    config: ServerConfig,
    state: Arc<AppState>,
) -> (
    SocketAddr,
    SocketAddr,
    oneshot::Sender<()>,
    JoinHandle<Result<(), ServerError>>,
) {
    setup();
    let webhook = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = webhook.local_addr().unwrap();
    let admin_addr = admin.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let join = tokio::spawn(server::run_with_listeners(
        config,
        Listeners { webhook, admin },
        state,
        async move {
            let _ = rx.await;
        },
    ));
    (addr, admin_addr, tx, join)
}

// ---------------------------------------------------------------------------------------
// The real binary as a child process (memory is read from /proc)

/// `stackgate serve --kube off` as a child process on free loopback ports, with a generated
/// CA; killed on drop.
pub struct ChildServer {
    /// The child.
    pub child: std::process::Child,
    /// Webhook address.
    pub addr: SocketAddr,
    /// Admin address (`/metrics`).
    pub admin: SocketAddr,
    /// The generated CA (PEM).
    pub ca: String,
    _dir: tempfile::TempDir,
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

impl ChildServer {
    /// Starts the binary with `extra` flags and waits until `/readyz` answers 200.
    pub async fn start(extra: &[&str]) -> Self {
        Self::start_logging(&["--log-level", "warn"], std::process::Stdio::null(), extra).await
    }

    /// [`ChildServer::start`] with `log` flags in place of `--log-level warn` and stderr
    /// to `stderr`.
    pub async fn start_logging(log: &[&str], stderr: std::process::Stdio, extra: &[&str]) -> Self {
        setup();
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_path = dir.path().join("ca.pem");
        let (addr, admin) = (free_port(), free_port());
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_stackgate"))
            .args(["serve", "--kube", "off"])
            .args(log)
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--admin-listen")
            .arg(admin.to_string())
            .arg("--generated-ca-out")
            .arg(&ca_path)
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn stackgate");
        eventually("the child to be ready", || async {
            matches!(admin_get(admin, "/readyz").await, Ok((s, _, _)) if s.is_success())
                .then_some(())
        })
        .await;
        let ca = std::fs::read_to_string(&ca_path).expect("CA written");
        Self {
            child,
            addr,
            admin,
            ca,
            _dir: dir,
        }
    }
}

/// A `kB` field of `/proc/<pid>/status` (e.g. `VmHWM:`), in bytes.
pub fn proc_status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kb| kb * 1024)
}

/// Whether `/proc/<pid>/status` can be read (Linux); prints why a test skips otherwise.
pub fn has_proc_status() -> bool {
    if Path::new("/proc/self/status").exists() {
        return true;
    }
    eprintln!("skipped: needs /proc/<pid>/status (Linux) to read the child's memory");
    false
}
