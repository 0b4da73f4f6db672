//! TLS: loading PEM files, the reloading certificate resolver, generated development
//! certificates and optional client-certificate verification.
//!
//! Reload semantics: the files are **polled** (no inotify: the kubelet updates Secret
//! volumes by swapping a `..data` symlink, which path watches miss). Each poll reads both
//! files through their symlinks and compares the bytes with the last seen. A changed pair
//! is parsed and checked (the key must match the leaf certificate) before it is swapped
//! in; new handshakes use it, existing connections keep theirs. A broken pair is logged
//! once (never its content), counted as `stackgate_tls_reloads_total{outcome="failure"}`,
//! and the previous certificate stays in service. If the certificate file changes between
//! the two reads of one poll (a swap in progress), the poll is skipped without a warning.
//!
//! Expiry: whenever a certificate goes into service (at start, generated or from files, and
//! on each successful reload) its leaf's notBefore/notAfter are published as
//! `stackgate_tls_certificate_{not_before,expiry}_timestamp_seconds` and logged with its
//! subject and serial. A failed reload leaves them as they are (the old certificate still
//! serves); a certificate in service whose validity cannot be read withdraws them, with a
//! warning, rather than leave the previous certificate's dates on display.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use std::sync::atomic::{AtomicI64, Ordering};

use arc_swap::ArcSwapOption;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::{AppState, ServerError, TlsSource};
use crate::metrics::Metrics;
use crate::telemetry::error_chain;

/// ALPN ids offered, in preference order.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The one crypto provider stackgate uses (ring), passed explicitly so that the server
/// does not depend on a process-wide default having been installed.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Serves whatever [`CertifiedKey`] is current; swapped by the reload task (files) or the
/// Secret watch (self-managed). A self-managed certificate is served only until its
/// notAfter: past it the handshake fails rather than present an expired certificate (and
/// /readyz already says not ready). Files are served as they are, expired or not (the
/// apiserver refuses an expired one; the expiry gauge shows it).
#[derive(Debug)]
pub(crate) struct ReloadingResolver {
    current: ArcSwapOption<CertifiedKey>,
    /// notAfter (Unix seconds) of a self-managed certificate; `i64::MAX` for files.
    serve_until: AtomicI64,
}

impl ReloadingResolver {
    fn new(key: CertifiedKey) -> Self {
        Self {
            current: ArcSwapOption::from_pointee(key),
            serve_until: AtomicI64::new(i64::MAX),
        }
    }

    fn empty() -> Self {
        Self {
            current: ArcSwapOption::empty(),
            serve_until: AtomicI64::new(i64::MIN),
        }
    }

    fn store(&self, key: CertifiedKey) {
        self.current.store(Some(Arc::new(key)));
    }

    /// Whether a certificate is in service and, if self-managed, not past its end at `now`.
    fn serving_at(&self, now: i64) -> bool {
        self.current.load().is_some() && now < self.serve_until.load(Ordering::Acquire)
    }
}

impl ResolvesServerCert for ReloadingResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if !self.serving_at(unix_now()) {
            return None;
        }
        self.current.load_full()
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The serving certificate of `--tls-mode self-managed`: empty at start; the Secret watch
/// ([`crate::certs::controller::run_loader`], wired in `compose`) installs each certificate
/// it reads. Cloning shares it.
#[derive(Clone)]
pub struct ServingCert {
    resolver: Arc<ReloadingResolver>,
    provider: Arc<CryptoProvider>,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert").finish_non_exhaustive()
    }
}

impl PartialEq for ServingCert {
    /// The same handle.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.resolver, &other.resolver)
    }
}

impl Eq for ServingCert {}

impl Default for ServingCert {
    fn default() -> Self {
        Self {
            resolver: Arc::new(ReloadingResolver::empty()),
            provider: provider(),
        }
    }
}

impl ServingCert {
    /// Puts a certificate (PEM chain, leaf first) and its key (PEM) into service when they
    /// parse, belong together and have a readable validity; otherwise the certificate in
    /// service stays, the failure is logged (never the content) and counted in
    /// `stackgate_tls_reloads_total{outcome="failure"}`. `origin` names where they came from
    /// (the Secret) in logs. Returns whether the new certificate serves.
    pub fn install(
        &self,
        cert_pem: &[u8],
        key_pem: &[u8],
        origin: &str,
        metrics: &Metrics,
    ) -> bool {
        let path = Path::new(origin);
        let built = certified_key(path, cert_pem, path, key_pem, &self.provider).and_then(|key| {
            let der = key.end_entity_cert().map_err(ServerError::TlsConfig)?;
            let info = leaf_info(der).map_err(|reason| ServerError::BadPem {
                flag: "tls-secret",
                path: path.to_path_buf(),
                reason,
            })?;
            Ok((key, info))
        });
        match built {
            Ok((key, info)) => {
                publish_validity(&key, origin, metrics);
                // The end first: a handshake between the two stores sees the old certificate
                // with the new end, which is at least as late (renewals only extend it).
                self.resolver
                    .serve_until
                    .store(info.not_after, Ordering::Release);
                self.resolver.store(key);
                metrics.tls_reload(true);
                true
            }
            Err(error) => {
                metrics.tls_reload(false);
                tracing::warn!(
                    error = %error_chain(&error),
                    "self-managed certificate not loaded; still serving the previous one"
                );
                false
            }
        }
    }

    /// Whether a certificate serves now (loaded and not past its end): `/readyz`.
    pub fn serving(&self) -> bool {
        self.resolver.serving_at(unix_now())
    }
}

/// The result of TLS set-up: the rustls configuration and, for file-based certificates,
/// the reloader to spawn.
pub(crate) struct Tls {
    pub(crate) config: Arc<rustls::ServerConfig>,
    pub(crate) reloader: Option<Reloader>,
}

/// Loads or generates the serving certificate and builds the rustls configuration:
/// TLS 1.3 and 1.2 only, ALPN `h2` + `http/1.1`, and client-certificate verification when
/// `client_ca` is given. `webhook_port` only feeds the log hint of the generated mode. The
/// certificate's validity period goes to `metrics`.
pub(crate) fn setup(
    source: &TlsSource,
    client_ca: Option<&Path>,
    webhook_port: u16,
    metrics: &Metrics,
) -> Result<Tls, ServerError> {
    let provider = provider();
    if let TlsSource::SelfManaged(serving) = source {
        return Ok(Tls {
            config: server_config(client_ca, &provider, Arc::clone(&serving.resolver))?,
            reloader: None,
        });
    }
    let (key, reloader_paths) = match source {
        TlsSource::Files { cert, key } => {
            let cert_pem = read_file("tls-cert", cert)?;
            let key_pem = read_file("tls-key", key)?;
            let certified = certified_key(cert, &cert_pem, key, &key_pem, &provider)?;
            (
                certified,
                Some((cert.clone(), key.clone(), cert_pem, key_pem)),
            )
        }
        TlsSource::Generated { ca_out } => {
            let (certified, ca_pem) = generate(&provider)?;
            write_ca(ca_out, &ca_pem)?;
            tracing::info!(
                ca = %ca_out.display(),
                "no --tls-cert/--tls-key given: serving a generated certificate for localhost, \
                 127.0.0.1 and ::1; try: curl --cacert {} https://127.0.0.1:{}/...",
                ca_out.display(),
                webhook_port,
            );
            (certified, None)
        }
        TlsSource::SelfManaged(_) => unreachable!("returned above"),
    };
    let origin = match source {
        TlsSource::Files { cert, .. } => cert.display().to_string(),
        TlsSource::Generated { .. } | TlsSource::SelfManaged(_) => "generated".to_owned(),
    };
    publish_validity(&key, &origin, metrics);
    let resolver = Arc::new(ReloadingResolver::new(key));
    let config = server_config(client_ca, &provider, Arc::clone(&resolver))?;

    let reloader = reloader_paths.map(|(cert, key, cert_pem, key_pem)| Reloader {
        cert,
        key,
        resolver,
        provider,
        applied: (cert_pem, key_pem),
        last_failure: None,
    });
    Ok(Tls { config, reloader })
}

/// TLS 1.3 and 1.2, ALPN, optional client certificates, certificates from `resolver`.
fn server_config(
    client_ca: Option<&Path>,
    provider: &Arc<CryptoProvider>,
    resolver: Arc<ReloadingResolver>,
) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(ServerError::TlsConfig)?;
    let builder = match client_ca {
        Some(path) => builder.with_client_cert_verifier(client_verifier(path, provider)?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver as _);
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

fn read_file(flag: &'static str, path: &Path) -> Result<Vec<u8>, ServerError> {
    std::fs::read(path).map_err(|source| ServerError::ReadPem {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

/// Parses a certificate chain and a key and checks that they belong together.
fn certified_key(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, ServerError> {
    let chain = parse_chain(cert_pem).map_err(|reason| ServerError::BadPem {
        flag: "tls-cert",
        path: cert_path.to_path_buf(),
        reason,
    })?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| ServerError::BadPem {
        flag: "tls-key",
        path: key_path.to_path_buf(),
        reason: describe_pem_error(
            &e,
            "PRIVATE KEY (PKCS#8), RSA PRIVATE KEY or EC PRIVATE KEY",
        ),
    })?;
    let pair_error = |e: rustls::Error| ServerError::CertKeyPair {
        cert: cert_path.to_path_buf(),
        key: key_path.to_path_buf(),
        reason: e.to_string(),
    };
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(pair_error)?;
    // `from_der` tolerates keys whose public half is unknown; ring's keys all expose it, so
    // insist on a positive match.
    certified.keys_match().map_err(pair_error)?;
    Ok(certified)
}

/// All `CERTIFICATE` blocks, leaf first (a chain is fine).
fn parse_chain(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| describe_pem_error(&e, "CERTIFICATE"))?;
    if chain.is_empty() {
        return Err("no CERTIFICATE block found".to_owned());
    }
    Ok(chain)
}

/// A PEM error in words that never quote the file (the Display of `pem::Error` can).
fn describe_pem_error(error: &pem::Error, expected: &str) -> String {
    match error {
        pem::Error::MissingSectionEnd { .. } => "a PEM block has no END line".to_owned(),
        pem::Error::IllegalSectionStart { .. } => "a PEM BEGIN line is malformed".to_owned(),
        pem::Error::Base64Decode(_) => "a PEM block is not valid base64".to_owned(),
        pem::Error::NoItemsFound => format!("no {expected} block found"),
        pem::Error::SectionTooLarge => "a PEM block is too large".to_owned(),
        _ => "the file is not valid PEM".to_owned(),
    }
}

fn client_verifier(
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, ServerError> {
    let pem = read_file("client-ca", path)?;
    let certs = parse_chain(&pem).map_err(|reason| ServerError::BadPem {
        flag: "client-ca",
        path: path.to_path_buf(),
        reason,
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| ServerError::ClientCa {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .build()
        .map_err(|e| ServerError::ClientCa {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

/// A development CA and a serving certificate for `localhost`, `127.0.0.1` and `::1`
/// (ECDSA P-256). Returns the serving key and the CA certificate as PEM. The CA key is
/// dropped: nothing else can be signed with it.
fn generate(provider: &CryptoProvider) -> Result<(CertifiedKey, String), ServerError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    };

    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(ServerError::Generate)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(ServerError::Generate)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "stackgate generated CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).map_err(ServerError::Generate)?;
    let issuer = Issuer::new(ca, ca_key);

    let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(ServerError::Generate)?;
    let names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let mut leaf = CertificateParams::new(names).map_err(ServerError::Generate)?;
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.use_authority_key_identifier_extension = true;
    let leaf_cert = leaf
        .signed_by(&leaf_key, &issuer)
        .map_err(ServerError::Generate)?;

    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let certified = CertifiedKey::from_der(vec![leaf_cert.der().clone()], key, provider)
        .map_err(ServerError::TlsConfig)?;
    Ok((certified, ca_cert.pem()))
}

fn write_ca(path: &Path, pem: &str) -> Result<(), ServerError> {
    let err = |source| ServerError::WriteGeneratedCa {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    std::fs::write(path, pem).map_err(err)
}

/// What one poll saw in a file: its bytes, or why it could not be read.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Bytes(Vec<u8>),
    Unreadable(io::ErrorKind),
}

/// Polls the certificate files and swaps the served key when they change.
pub(crate) struct Reloader {
    cert: PathBuf,
    key: PathBuf,
    resolver: Arc<ReloadingResolver>,
    provider: Arc<CryptoProvider>,
    /// File contents of the certificate in service.
    applied: (Vec<u8>, Vec<u8>),
    /// The last broken state reported, so it is not reported again on every poll.
    last_failure: Option<(Seen, Seen)>,
}

impl Reloader {
    /// Polls every `interval` until the task is aborted.
    pub(crate) async fn run(mut self, interval: Duration, state: Arc<AppState>) {
        let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await; // the first tick is immediate; the files were just loaded
        loop {
            ticker.tick().await;
            self.poll(&state.metrics).await;
        }
    }

    async fn poll(&mut self, metrics: &Metrics) {
        let cert = read_seen(&self.cert).await;
        let key = read_seen(&self.key).await;
        if let (Seen::Bytes(c), Seen::Bytes(k)) = (&cert, &key)
            && *c == self.applied.0
            && *k == self.applied.1
        {
            if self.last_failure.take().is_some() {
                tracing::info!(
                    cert = %self.cert.display(),
                    "certificate files are back to the certificate in service"
                );
            }
            return;
        }
        // A symlink swap between the two reads would pair an old certificate with a new
        // key; if the certificate changed meanwhile, look again at the next poll.
        if read_seen(&self.cert).await != cert {
            return;
        }
        let observed = (cert, key);
        if self.last_failure.as_ref() == Some(&observed) {
            return;
        }
        match self.build(&observed) {
            Ok(certified) => {
                publish_validity(&certified, &self.cert.display().to_string(), metrics);
                self.resolver.store(certified);
                if let (Seen::Bytes(c), Seen::Bytes(k)) = observed {
                    self.applied = (c, k);
                }
                self.last_failure = None;
                metrics.tls_reload(true);
                tracing::info!(
                    cert = %self.cert.display(),
                    key = %self.key.display(),
                    "reloaded the serving certificate"
                );
            }
            Err(error) => {
                metrics.tls_reload(false);
                tracing::warn!(
                    error = %error_chain(&error),
                    "certificate reload failed; still serving the previous certificate"
                );
                self.last_failure = Some(observed);
            }
        }
    }

    fn build(&self, observed: &(Seen, Seen)) -> Result<CertifiedKey, ServerError> {
        let bytes = |seen: &Seen, flag: &'static str, path: &Path| match seen {
            Seen::Bytes(b) => Ok(b.clone()),
            Seen::Unreadable(kind) => Err(ServerError::ReadPem {
                flag,
                path: path.to_path_buf(),
                source: io::Error::from(*kind),
            }),
        };
        let cert = bytes(&observed.0, "tls-cert", &self.cert)?;
        let key = bytes(&observed.1, "tls-key", &self.key)?;
        certified_key(&self.cert, &cert, &self.key, &key, &self.provider)
    }
}

async fn read_seen(path: &Path) -> Seen {
    match tokio::fs::read(path).await {
        Ok(bytes) => Seen::Bytes(bytes),
        Err(e) => Seen::Unreadable(e.kind()),
    }
}

/// What the log says about a certificate going into service, and the gauges' values.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LeafInfo {
    /// notBefore, Unix seconds.
    not_before: i64,
    /// notAfter, Unix seconds.
    not_after: i64,
    /// notAfter as `openssl x509 -enddate` prints it.
    not_after_text: String,
    /// The subject DN, e.g. `CN=stackgate.stackgate.svc`.
    subject: String,
    /// The serial number in upper-case hex, as `openssl x509 -serial` prints it.
    serial: String,
}

/// Reads the validity period, subject and serial of an X.509 certificate (DER). The error
/// says what is wrong without quoting the certificate. Its input has already been parsed by
/// webpki (`keys_match`) or generated here; x509-parser's own nesting limit is asn1-rs's
/// `MAX_RECURSION` (50; asn1-rs 0.7.2, `src/ber/parser.rs`).
fn leaf_info(der: &[u8]) -> Result<LeafInfo, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the leaf certificate is not X.509 DER x509-parser can read ({e})"))?;
    let validity = cert.validity();
    Ok(LeafInfo {
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
        not_after_text: validity.not_after.to_string(),
        subject: cert.subject().to_string(),
        serial: cert
            .raw_serial()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect(),
    })
}

/// Publishes the validity period of the leaf certificate of `certified`, which is going into
/// service, and logs which certificate it is (`origin`: its file or `generated`). Never logs
/// the key: only the certificate is read.
fn publish_validity(certified: &CertifiedKey, origin: &str, metrics: &Metrics) {
    let info = certified
        .end_entity_cert()
        .map_err(|e| e.to_string())
        .and_then(|der| leaf_info(der));
    let info = match info {
        Ok(info) => info,
        Err(reason) => {
            metrics.clear_tls_certificate_validity();
            tracing::warn!(
                cert = origin,
                reason,
                "cannot read the serving certificate's validity period; \
                 stackgate_tls_certificate_expiry_timestamp_seconds is not exported until a \
                 certificate with a readable one is loaded"
            );
            return;
        }
    };
    metrics.set_tls_certificate_validity(info.not_before, info.not_after);
    let now = unix_now();
    let LeafInfo {
        not_after_text,
        subject,
        serial,
        ..
    } = &info;
    if info.not_after <= now {
        tracing::warn!(
            cert = origin,
            subject,
            serial,
            not_after = not_after_text,
            "the serving certificate in service has EXPIRED: the apiserver refuses it; \
             rotate it (docs/operations.md#stackgatecertificateexpiring)"
        );
    } else if info.not_before > now {
        tracing::warn!(
            cert = origin,
            subject,
            serial,
            not_before = info.not_before,
            "the serving certificate in service is not valid yet (notBefore in the future, \
             a clock skew?): the apiserver refuses it until then"
        );
    } else {
        tracing::info!(
            cert = origin,
            subject,
            serial,
            not_after = not_after_text,
            days_left = (info.not_after - now) / 86_400,
            "serving certificate in service"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, KeyPair, PKCS_ECDSA_P256_SHA256,
        SerialNumber, date_time_ymd,
    };

    const EXPIRY: &str = "stackgate_tls_certificate_expiry_timestamp_seconds";
    const NOT_BEFORE: &str = "stackgate_tls_certificate_not_before_timestamp_seconds";
    /// `date -u -d 2030-01-01 +%s` and so on: the dates the test certificates carry.
    const JAN_1_2030: i64 = 1_893_456_000;
    const MAR_4_2031: i64 = 1_930_348_800;
    const MAY_6_2032: i64 = 1_967_414_400;
    const JAN_1_2025: i64 = 1_735_689_600;

    /// A self-signed certificate for `localhost` (subject `CN=stackgate-test`, serial `0ABC`),
    /// valid from `from` to `until` (year, month, day, midnight UTC): (certificate PEM, key PEM).
    fn self_signed(from: (i32, u8, u8), until: (i32, u8, u8)) -> (String, String) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_before = date_time_ymd(from.0, from.1, from.2);
        params.not_after = date_time_ymd(until.0, until.1, until.2);
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "stackgate-test");
        params.serial_number = Some(SerialNumber::from(vec![0x0a, 0xbc]));
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// The value of the unlabelled gauge `name` on `/metrics` (prometheus-client writes an
    /// empty label set as `{}`), if it has a series.
    fn gauge(metrics: &Metrics, name: &str) -> Option<i64> {
        let text = metrics.encode();
        let mut values = text.lines().filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            rest.strip_prefix("{} ").or_else(|| rest.strip_prefix(' '))
        });
        let value = values.next()?.parse().unwrap();
        assert_eq!(values.next(), None, "one series of {name}:\n{text}");
        Some(value)
    }

    fn reloads(metrics: &Metrics, outcome: &str) -> usize {
        let sample = format!("stackgate_tls_reloads_total{{outcome=\"{outcome}\"}} 1");
        metrics.encode().lines().filter(|l| *l == sample).count()
    }

    struct CertFiles {
        _dir: tempfile::TempDir,
        cert: PathBuf,
        key: PathBuf,
    }

    impl CertFiles {
        fn new((cert_pem, key_pem): &(String, String)) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let files = Self {
                cert: dir.path().join("tls.crt"),
                key: dir.path().join("tls.key"),
                _dir: dir,
            };
            files.write(cert_pem.as_bytes(), key_pem.as_bytes());
            files
        }

        fn write(&self, cert: &[u8], key: &[u8]) {
            std::fs::write(&self.cert, cert).unwrap();
            std::fs::write(&self.key, key).unwrap();
        }

        fn source(&self) -> TlsSource {
            TlsSource::Files {
                cert: self.cert.clone(),
                key: self.key.clone(),
            }
        }
    }

    #[test]
    fn a_loaded_certificate_publishes_its_validity() {
        let files = CertFiles::new(&self_signed((2030, 1, 1), (2031, 3, 4)));
        let metrics = Metrics::new();
        assert_eq!(gauge(&metrics, EXPIRY), None, "no series before a load");
        assert_eq!(gauge(&metrics, NOT_BEFORE), None);

        setup(&files.source(), None, 8443, &metrics).unwrap();
        assert_eq!(gauge(&metrics, EXPIRY), Some(MAR_4_2031));
        assert_eq!(gauge(&metrics, NOT_BEFORE), Some(JAN_1_2030));
    }

    #[test]
    fn an_expired_certificate_still_loads_and_shows_its_past_expiry() {
        // rustls serves it (the apiserver is the one to refuse it): the gauge must say so.
        let files = CertFiles::new(&self_signed((2024, 1, 1), (2025, 1, 1)));
        let metrics = Metrics::new();
        setup(&files.source(), None, 8443, &metrics).unwrap();
        assert_eq!(gauge(&metrics, EXPIRY), Some(JAN_1_2025));
    }

    #[test]
    fn the_generated_certificate_publishes_its_validity() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let source = TlsSource::Generated {
            ca_out: dir.path().join("ca.crt"),
        };
        setup(&source, None, 8443, &metrics).unwrap();
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let now = i64::try_from(now).unwrap();
        assert!(gauge(&metrics, EXPIRY).unwrap() > now);
        assert!(gauge(&metrics, NOT_BEFORE).unwrap() <= now);
    }

    #[tokio::test]
    async fn a_reload_updates_the_gauge_and_a_broken_one_keeps_it() {
        let files = CertFiles::new(&self_signed((2030, 1, 1), (2031, 3, 4)));
        let metrics = Metrics::new();
        let mut reloader = setup(&files.source(), None, 8443, &metrics)
            .unwrap()
            .reloader
            .unwrap();

        let (cert, key) = self_signed((2030, 1, 1), (2032, 5, 6));
        files.write(cert.as_bytes(), key.as_bytes());
        reloader.poll(&metrics).await;
        assert_eq!(reloads(&metrics, "success"), 1);
        assert_eq!(gauge(&metrics, EXPIRY), Some(MAY_6_2032));

        // Garbage in place of the certificate: counted, the old certificate and its expiry stay.
        files.write(
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            key.as_bytes(),
        );
        reloader.poll(&metrics).await;
        assert_eq!(reloads(&metrics, "failure"), 1);
        assert_eq!(gauge(&metrics, EXPIRY), Some(MAY_6_2032));
        assert_eq!(gauge(&metrics, NOT_BEFORE), Some(JAN_1_2030));

        // A valid certificate with a key that is not its own: refused the same way.
        let (other_cert, _) = self_signed((2030, 1, 1), (2031, 3, 4));
        files.write(other_cert.as_bytes(), key.as_bytes());
        reloader.poll(&metrics).await;
        assert_eq!(gauge(&metrics, EXPIRY), Some(MAY_6_2032));
        assert_eq!(
            reloader
                .resolver
                .current
                .load_full()
                .unwrap()
                .end_entity_cert()
                .unwrap(),
            &CertificateDer::from_pem_slice(cert.as_bytes()).unwrap(),
            "the reloaded certificate still serves"
        );
    }

    /// Self-managed: nothing serves until a certificate is installed; a broken pair keeps
    /// the one in service; a certificate past its end is not served (the handshake fails,
    /// readiness follows `serving`).
    #[test]
    fn a_self_managed_certificate_serves_only_once_installed_and_until_its_end() {
        let metrics = Metrics::new();
        let serving = ServingCert::default();
        assert!(!serving.serving(), "nothing installed");
        let setup = setup(
            &TlsSource::SelfManaged(serving.clone()),
            None,
            8443,
            &metrics,
        )
        .unwrap();
        assert!(setup.reloader.is_none(), "no file reloader");

        let now = unix_now();
        let (cert, key) = self_signed((2024, 1, 1), (2099, 1, 1));
        assert!(serving.install(cert.as_bytes(), key.as_bytes(), "Secret ns/s", &metrics));
        assert!(serving.serving());
        assert_eq!(reloads(&metrics, "success"), 1);
        assert!(gauge(&metrics, EXPIRY).unwrap() > now);

        let (other_cert, _) = self_signed((2024, 1, 1), (2098, 1, 1));
        assert!(!serving.install(
            other_cert.as_bytes(),
            key.as_bytes(),
            "Secret ns/s",
            &metrics
        ));
        assert_eq!(reloads(&metrics, "failure"), 1);
        assert!(serving.serving(), "the pair in service stays");
        assert_eq!(
            serving
                .resolver
                .current
                .load_full()
                .unwrap()
                .end_entity_cert()
                .unwrap(),
            &CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()
        );

        let (expired, expired_key) = self_signed((2024, 1, 1), (2025, 1, 1));
        assert!(serving.install(
            expired.as_bytes(),
            expired_key.as_bytes(),
            "Secret ns/s",
            &metrics
        ));
        assert!(!serving.serving(), "past its end: not served");
        assert!(!serving.resolver.serving_at(now));
        assert!(serving.resolver.serving_at(JAN_1_2025 - 1));
    }

    #[test]
    fn an_unreadable_validity_withdraws_the_gauges() {
        let metrics = Metrics::new();
        metrics.set_tls_certificate_validity(JAN_1_2030, MAR_4_2031);
        let provider = provider();
        let (_, key_pem) = self_signed((2030, 1, 1), (2031, 3, 4));
        let signing_key = provider
            .key_provider
            .load_private_key(PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap())
            .unwrap();
        // An INTEGER, not a certificate: rustls takes certificate bytes as they are.
        let garbage = CertificateDer::from(vec![0x02, 0x01, 0x01]);
        let certified = CertifiedKey::new(vec![garbage], signing_key);
        publish_validity(&certified, "test", &metrics);
        assert_eq!(gauge(&metrics, EXPIRY), None, "no stale expiry on display");
        assert_eq!(gauge(&metrics, NOT_BEFORE), None);
    }

    #[test]
    fn leaf_info_reads_a_certificate_and_refuses_every_truncation() {
        let (cert_pem, _) = self_signed((2030, 1, 1), (2031, 3, 4));
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        let info = leaf_info(&der).unwrap();
        assert_eq!((info.not_before, info.not_after), (JAN_1_2030, MAR_4_2031));
        assert_eq!(info.not_after_text, "Mar  4 00:00:00 2031 +00:00");
        assert_eq!(info.subject, "CN=stackgate-test");
        assert_eq!(info.serial, "0ABC");
        for end in 0..der.len() {
            let error = leaf_info(&der[..end]).unwrap_err();
            assert!(
                error.starts_with("the leaf certificate is not X.509 DER"),
                "{error}"
            );
        }
    }
}
