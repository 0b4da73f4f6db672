//! Keystone v3 and Octavia v2, just enough for the guard: `POST /v3/auth/tokens` (password or
//! application credential; the token and the catalog's `load-balancer` endpoint) and
//! `GET /v2/lbaas/loadbalancers/{id}/status` (the status tree).
//!
//! Bounds:
//! - every call ends by min(now + `--openstack-timeout`, the request's deadline), connection
//!   set-up included; bodies are read up to [`MAX_BODY_BYTES`];
//! - no retries, except one: a cached token that Octavia rejects (401) is dropped and the
//!   call is made once more with a fresh token, within the same deadline;
//! - tokens are cached per credential set (Secret uid + resourceVersion + cloud) until
//!   shortly before they expire; status trees per load balancer and credential set for
//!   `--octavia-cache-ttl`, but a cached tree is only ever used when it already refuses the
//!   deletion (the caller decides): admitting always takes a fresh read; both caches hold at
//!   most [`CACHE_ENTRIES`] entries.
//!
//! URLs in errors and logs have any `user:password@` masked ([`mask_url`]): a credential
//! pasted into `auth_url` is never echoed. Requests never carry it either.
//!
//! HTTP: hyper-util's pooled client over hyper-rustls with the ring provider. Trust: the
//! system roots plus the identity Secret's `cacert` (as CAPO uses it).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{ACCEPT, CONTENT_TYPE, USER_AGENT};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::Deserialize;
use tokio::time::{Instant, timeout_at};

use super::cache::TtlCache;
use super::clouds::{CloudAuth, CredentialUrl, Redacted, mask_url};
use super::cluster::{CredentialKey, Identity};
use super::error::{OpenStackError, Service};
use super::metrics::GuardMetrics;
use crate::rules::lb_guard::{LoadBalancerStatus, MemberStatus, PoolStatus};
use crate::telemetry::error_chain;

/// Largest Keystone or Octavia body read (a token with a big catalog is ~100 KiB).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Entries per cache (tokens, status trees, HTTP clients × 4).
pub const CACHE_ENTRIES: usize = 64;
/// Different CA bundles with their own HTTP client (and connection pool).
const CLIENTS: usize = 8;
/// Tokens are dropped this long before they expire (at most half their lifetime).
const TOKEN_MARGIN: Duration = Duration::from_secs(300);

const UA: &str = concat!("stackgate/", env!("CARGO_PKG_VERSION"));

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

#[derive(Debug, Clone)]
struct Token {
    value: Redacted,
    /// Octavia endpoint from the catalog.
    endpoint: String,
}

/// Keystone + Octavia client with its caches.
pub(crate) struct OpenStack {
    roots: Arc<RootCertStore>,
    clients: Mutex<Vec<(Option<Vec<u8>>, HttpClient)>>,
    tokens: Mutex<TtlCache<CredentialKey, Token>>,
    statuses: Mutex<TtlCache<(CredentialKey, String), LoadBalancerStatus>>,
    call_timeout: Duration,
    status_ttl: Duration,
    metrics: GuardMetrics,
}

impl std::fmt::Debug for OpenStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenStack")
            .field("roots", &self.roots.len())
            .field("call_timeout", &self.call_timeout)
            .field("status_ttl", &self.status_ttl)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl OpenStack {
    pub(crate) fn new(
        roots: RootCertStore,
        call_timeout: Duration,
        status_ttl: Duration,
        metrics: GuardMetrics,
    ) -> Self {
        Self {
            roots: Arc::new(roots),
            clients: Mutex::new(Vec::new()),
            tokens: Mutex::new(TtlCache::new(CACHE_ENTRIES)),
            statuses: Mutex::new(TtlCache::new(CACHE_ENTRIES)),
            call_timeout,
            status_ttl,
            metrics,
        }
    }

    /// The status tree of load balancer `lb_id`, read with `identity`'s credentials. A cached
    /// tree is returned only when `reuse` accepts it (the guard accepts one that refuses the
    /// deletion); otherwise Octavia is asked.
    pub(crate) async fn load_balancer(
        &self,
        identity: &Identity,
        lb_id: &str,
        deadline: Instant,
        reuse: impl Fn(&LoadBalancerStatus) -> bool,
    ) -> Result<LoadBalancerStatus, OpenStackError> {
        if lb_id.is_empty()
            || lb_id.len() > 64
            || !lb_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(OpenStackError::BadId(lb_id.chars().take(64).collect()));
        }
        let key = (identity.key.clone(), lb_id.to_owned());
        if !self.status_ttl.is_zero() {
            let cached = lock(&self.statuses)
                .get(&key, Instant::now())
                .filter(|status| reuse(status));
            self.metrics.cache("status", cached.is_some());
            if let Some(status) = cached {
                return Ok(status);
            }
        }
        let client = self.client(identity.cacert.as_deref())?;
        let cached = lock(&self.tokens).get(&identity.key, Instant::now());
        self.metrics.cache("token", cached.is_some());
        let status = match cached {
            Some(token) => match self.status(&client, &token, lb_id, deadline).await {
                Err(OpenStackError::Status { status: 401, .. }) => {
                    lock(&self.tokens).remove(&identity.key);
                    let token = self.authenticate(&client, identity, deadline).await?;
                    self.status(&client, &token, lb_id, deadline).await?
                }
                other => other?,
            },
            None => {
                let token = self.authenticate(&client, identity, deadline).await?;
                self.status(&client, &token, lb_id, deadline).await?
            }
        };
        if !self.status_ttl.is_zero() {
            let now = Instant::now();
            lock(&self.statuses).insert(key, status.clone(), now + self.status_ttl, now);
        }
        Ok(status)
    }

    /// The HTTP client trusting the system roots plus `cacert`.
    fn client(&self, cacert: Option<&[u8]>) -> Result<HttpClient, OpenStackError> {
        let mut clients = lock(&self.clients);
        if let Some((_, client)) = clients.iter().find(|(ca, _)| ca.as_deref() == cacert) {
            return Ok(client.clone());
        }
        let mut roots = (*self.roots).clone();
        if let Some(pem) = cacert {
            let added = CertificateDer::pem_slice_iter(pem)
                .filter_map(Result::ok)
                .filter(|cert| roots.add(cert.clone()).is_ok())
                .count();
            if added == 0 {
                return Err(OpenStackError::CaCert);
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|_| OpenStackError::CaCert)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(self.call_timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client: HttpClient = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(4)
            .build(https);
        if clients.len() >= CLIENTS {
            clients.remove(0);
        }
        clients.push((cacert.map(<[u8]>::to_vec), client.clone()));
        Ok(client)
    }

    /// `POST {auth_url}/v3/auth/tokens`; caches the token until shortly before it expires.
    async fn authenticate(
        &self,
        client: &HttpClient,
        identity: &Identity,
        deadline: Instant,
    ) -> Result<Token, OpenStackError> {
        let auth = &identity.auth;
        let url = tokens_url(auth.auth_url.expose())?;
        let body =
            serde_json::to_vec(&auth.token_request()).map_err(|_| OpenStackError::Decode {
                service: Service::Identity,
                url: url.clone(),
                reason: "the token request could not be encoded".to_owned(),
            })?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(&url)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, UA)
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| url_error("auth_url", auth.auth_url.expose()))?;
        let sent_at = SystemTime::now();
        let started = Instant::now();
        let (headers, body) = self
            .send(
                client,
                Service::Identity,
                request,
                &url,
                StatusCode::CREATED,
                deadline,
            )
            .await?;
        let decode = |reason: String| OpenStackError::Decode {
            service: Service::Identity,
            url: url.clone(),
            reason,
        };
        let value = headers
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(|v| Redacted::new(v.to_owned()))
            .ok_or_else(|| OpenStackError::NoToken { url: url.clone() })?;
        let parsed: TokenResponse =
            serde_json::from_slice(&body).map_err(|e| decode(json_reason(&e)))?;
        let endpoint = octavia_endpoint(&parsed.token.catalog, auth).ok_or_else(|| {
            OpenStackError::NoEndpoint {
                interface: auth.interface.clone(),
                region: auth.region.clone(),
            }
        })?;
        let token = Token { value, endpoint };
        if let Some(lifetime) = lifetime(&parsed.token, sent_at) {
            let margin = TOKEN_MARGIN.min(lifetime / 2);
            let ttl = lifetime.saturating_sub(margin);
            if !ttl.is_zero() {
                lock(&self.tokens).insert(
                    identity.key.clone(),
                    token.clone(),
                    started + ttl,
                    Instant::now(),
                );
            }
        }
        tracing::debug!(
            cloud = %auth.cloud,
            method = auth.method(),
            endpoint = %mask_url(&token.endpoint),
            "authenticated with Keystone"
        );
        Ok(token)
    }

    /// `GET {octavia}/v2/lbaas/loadbalancers/{id}/status`.
    async fn status(
        &self,
        client: &HttpClient,
        token: &Token,
        lb_id: &str,
        deadline: Instant,
    ) -> Result<LoadBalancerStatus, OpenStackError> {
        let url = status_url(&token.endpoint, lb_id)?;
        let mut auth = HeaderValue::from_str(token.value.expose())
            .map_err(|_| OpenStackError::NoToken { url: url.clone() })?;
        auth.set_sensitive(true);
        let request = Request::builder()
            .method(Method::GET)
            .uri(&url)
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, UA)
            .header("x-auth-token", auth)
            .body(Full::new(Bytes::new()))
            .map_err(|_| url_error("the load-balancer endpoint", &token.endpoint))?;
        let (_, body) = self
            .send(
                client,
                Service::LoadBalancer,
                request,
                &url,
                StatusCode::OK,
                deadline,
            )
            .await?;
        parse_status_tree(&body).map_err(|e| OpenStackError::Decode {
            service: Service::LoadBalancer,
            url,
            reason: json_reason(&e),
        })
    }

    /// One bounded HTTP exchange; records latency and errors.
    async fn send(
        &self,
        client: &HttpClient,
        service: Service,
        request: Request<Full<Bytes>>,
        url: &str,
        expect: StatusCode,
        deadline: Instant,
    ) -> Result<(http::HeaderMap, Bytes), OpenStackError> {
        let started = Instant::now();
        let call_deadline = deadline.min(started + self.call_timeout);
        let exchange = async {
            let response =
                client
                    .request(request)
                    .await
                    .map_err(|e| OpenStackError::Transport {
                        service,
                        url: url.to_owned(),
                        reason: error_chain(&e),
                    })?;
            let (parts, body) = response.into_parts();
            if parts.status != expect {
                return Err(OpenStackError::Status {
                    service,
                    url: url.to_owned(),
                    status: parts.status.as_u16(),
                    hint: hint(service, parts.status),
                });
            }
            let body = Limited::new(body, MAX_BODY_BYTES)
                .collect()
                .await
                .map_err(|e| OpenStackError::Transport {
                    service,
                    url: url.to_owned(),
                    reason: format!("reading the body: {}", error_chain(e.as_ref())),
                })?
                .to_bytes();
            Ok((parts.headers, body))
        };
        let result = match timeout_at(call_deadline, exchange).await {
            Ok(result) => result,
            Err(_) => Err(OpenStackError::Timeout {
                service,
                after: call_deadline.saturating_duration_since(started),
            }),
        };
        self.metrics.call(
            service,
            started.elapsed().as_secs_f64(),
            result.as_ref().err().map(OpenStackError::metric_reason),
        );
        result
    }
}

fn hint(service: Service, status: StatusCode) -> &'static str {
    match (service, status.as_u16()) {
        (Service::Identity, 401) => " (check the credentials in the identity Secret)",
        (Service::LoadBalancer, 401) => " (the token was rejected)",
        (Service::LoadBalancer, 403) => " (the credentials may not read this load balancer)",
        (Service::LoadBalancer, 404) => " (no such load balancer)",
        (_, 503) => " (busy; retry later)",
        _ => "",
    }
}

fn url_error(what: &'static str, url: &str) -> OpenStackError {
    OpenStackError::Url {
        what,
        url: CredentialUrl::new(url.to_owned()),
    }
}

/// A serde_json error reduced to its category and position: bodies are never quoted.
fn json_reason(e: &serde_json::Error) -> String {
    let what = match e.classify() {
        serde_json::error::Category::Io => "unreadable",
        serde_json::error::Category::Syntax => "not JSON",
        serde_json::error::Category::Data => "not the documented shape",
        serde_json::error::Category::Eof => "truncated JSON",
    };
    format!("{what} at line {}, column {}", e.line(), e.column())
}

/// An http(s) URL without trailing slashes and without user information (Keystone and
/// Octavia authenticate by token, never by URL credentials: they are dropped, not sent).
fn http_url(what: &'static str, url: &str) -> Result<String, OpenStackError> {
    let trimmed = url.trim().trim_end_matches('/');
    let Some(scheme_end) = trimmed.find("://") else {
        return Err(url_error(what, url));
    };
    let rest = &trimmed[scheme_end + 3..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let without_user = match rest[..authority_len].rfind('@') {
        Some(at) => format!("{}{}", &trimmed[..scheme_end + 3], &rest[at + 1..]),
        None => trimmed.to_owned(),
    };
    let ok = (without_user.starts_with("https://") || without_user.starts_with("http://"))
        && without_user
            .parse::<http::Uri>()
            .is_ok_and(|u| u.host().is_some_and(|h| !h.is_empty()));
    if ok {
        Ok(without_user)
    } else {
        Err(url_error(what, url))
    }
}

/// `{auth_url}/auth/tokens`, adding `/v3` when `auth_url` has no version (clouds.yaml files
/// use both forms).
pub(crate) fn tokens_url(auth_url: &str) -> Result<String, OpenStackError> {
    let base = http_url("auth_url", auth_url)?;
    if base.ends_with("/v3") {
        Ok(format!("{base}/auth/tokens"))
    } else {
        Ok(format!("{base}/v3/auth/tokens"))
    }
}

/// `{endpoint}/v2/lbaas/loadbalancers/{id}/status`; catalog endpoints come with and without
/// the version (Octavia serves `/v2` and `/v2.0`).
pub(crate) fn status_url(endpoint: &str, lb_id: &str) -> Result<String, OpenStackError> {
    let base = http_url("the load-balancer endpoint", endpoint)?;
    let base = if base.ends_with("/v2") || base.ends_with("/v2.0") {
        base
    } else {
        format!("{base}/v2")
    };
    Ok(format!("{base}/lbaas/loadbalancers/{lb_id}/status"))
}

#[derive(Deserialize)]
struct TokenResponse {
    token: TokenBody,
}

#[derive(Deserialize)]
struct TokenBody {
    expires_at: Option<String>,
    issued_at: Option<String>,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
}

#[derive(Deserialize)]
struct CatalogEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    endpoints: Vec<CatalogEndpoint>,
}

#[derive(Deserialize)]
struct CatalogEndpoint {
    interface: String,
    url: String,
    region: Option<String>,
    region_id: Option<String>,
}

fn octavia_endpoint(catalog: &[CatalogEntry], auth: &CloudAuth) -> Option<String> {
    catalog
        .iter()
        .filter(|s| s.kind == "load-balancer")
        .flat_map(|s| &s.endpoints)
        .find(|e| {
            e.interface == auth.interface
                && auth.region.as_deref().is_none_or(|r| {
                    e.region_id.as_deref() == Some(r) || e.region.as_deref() == Some(r)
                })
        })
        .map(|e| e.url.clone())
}

/// How long the token lives: `expires_at - issued_at` (both Keystone's clock, so the
/// pod's clock skew does not matter), else `expires_at - now`.
fn lifetime(token: &TokenBody, sent_at: SystemTime) -> Option<Duration> {
    let expires = parse_timestamp(token.expires_at.as_deref()?)?;
    let start = match token.issued_at.as_deref().and_then(parse_timestamp) {
        Some(issued) => issued,
        None => sent_at.duration_since(UNIX_EPOCH).ok()?.as_secs_f64(),
    };
    let secs = expires - start;
    (secs > 0.0)
        .then(|| Duration::try_from_secs_f64(secs).ok())
        .flatten()
}

/// Seconds since the epoch of an ISO 8601 / RFC 3339 timestamp as Keystone writes them
/// (`2015-08-27T09:49:58.000000Z`, `…+00:00`, or without a zone, meaning UTC).
pub(crate) fn parse_timestamp(s: &str) -> Option<f64> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[13] != b':' || b[16] != b':' || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut fraction = 0.0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        fraction = format!("0.{}", &frac[..digits]).parse().ok()?;
        rest = &frac[digits..];
    }
    let offset = match rest {
        "" | "Z" | "z" => 0,
        zone => {
            let sign = match zone.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hm = &zone[1..];
            let (h, m) = hm.split_once(':').unwrap_or((hm.get(..2)?, hm.get(2..)?));
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some(secs as f64 + fraction)
}

// ------------------------------------------------------------------------------------------
// The status tree

#[derive(Deserialize)]
struct StatusDocument {
    statuses: Statuses,
}

#[derive(Deserialize)]
struct Statuses {
    loadbalancer: LbNode,
}

#[derive(Deserialize)]
struct LbNode {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    provisioning_status: String,
    #[serde(default)]
    operating_status: String,
    #[serde(default)]
    listeners: Vec<ListenerNode>,
    #[serde(default)]
    pools: Vec<PoolNode>,
}

#[derive(Deserialize)]
struct ListenerNode {
    #[serde(default)]
    pools: Vec<PoolNode>,
}

#[derive(Deserialize)]
struct PoolNode {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: Option<String>,
    /// Octavia's own key (`PoolStatusResponse.health_monitor` in
    /// octavia/api/v2/types/pool.py, openstack/octavia 0e6ea11c2992ce2746bb0cf0fb5cb3e81d5b94ba,
    /// asserted by its functional test `test_statuses_health_monitor`); the api-ref example
    /// writes `healthmonitor`, accepted too.
    #[serde(default, alias = "healthmonitor")]
    health_monitor: Option<MonitorNode>,
    #[serde(default)]
    members: Vec<MemberNode>,
}

#[derive(Deserialize)]
struct MonitorNode {
    #[serde(default)]
    id: Option<String>,
}

#[derive(Deserialize)]
struct MemberNode {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    protocol_port: Option<u16>,
    #[serde(default)]
    provisioning_status: String,
    #[serde(default)]
    operating_status: String,
}

/// Parses an Octavia status tree (`GET /v2/lbaas/loadbalancers/{id}/status`). Pools are
/// collected from the listeners and from `loadbalancer.pools` (the api-ref example lists them
/// there too; Octavia's `LoadBalancerStatusResponse` only under the listeners), once each; a
/// health monitor (`health_monitor`, or the api-ref's `healthmonitor`) counts when it has an
/// id (Octavia omits the key for a pool without one; the api-ref shows `{}`).
pub fn parse_status_tree(body: &[u8]) -> Result<LoadBalancerStatus, serde_json::Error> {
    let doc: StatusDocument = serde_json::from_slice(body)?;
    let lb = doc.statuses.loadbalancer;
    let mut pools: Vec<PoolStatus> = Vec::new();
    let nodes = lb
        .listeners
        .into_iter()
        .flat_map(|l| l.pools)
        .chain(lb.pools);
    for pool in nodes {
        if !pool.id.is_empty() && pools.iter().any(|p| p.id == pool.id) {
            continue;
        }
        pools.push(PoolStatus {
            has_monitor: pool
                .health_monitor
                .and_then(|m| m.id)
                .is_some_and(|id| !id.is_empty()),
            id: pool.id,
            name: pool.name.unwrap_or_default(),
            members: pool
                .members
                .into_iter()
                .map(|m| MemberStatus {
                    id: m.id,
                    name: m.name.unwrap_or_default(),
                    address: m.address.unwrap_or_default(),
                    protocol_port: m.protocol_port,
                    provisioning_status: m.provisioning_status,
                    operating_status: m.operating_status,
                })
                .collect(),
        });
    }
    Ok(LoadBalancerStatus {
        id: lb.id,
        name: lb.name.unwrap_or_default(),
        provisioning_status: lb.provisioning_status,
        operating_status: lb.operating_status,
        pools,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(
            parse_timestamp("2015-08-27T09:49:58Z"),
            Some(1_440_668_998.0)
        );
        assert_eq!(
            parse_timestamp("2015-08-27T09:49:58.500000Z"),
            Some(1_440_668_998.5)
        );
        assert_eq!(
            parse_timestamp("2015-08-27T11:49:58+02:00"),
            Some(1_440_668_998.0)
        );
        assert_eq!(
            parse_timestamp("2015-08-27T09:49:58"),
            Some(1_440_668_998.0)
        );
        assert_eq!(
            parse_timestamp("2024-02-29T00:00:00Z"),
            Some(1_709_164_800.0)
        );
        assert_eq!(parse_timestamp("yesterday"), None);
        assert_eq!(parse_timestamp("2015-13-27T09:49:58Z"), None);
    }

    #[test]
    fn urls() {
        assert_eq!(
            tokens_url("https://k.example:5000").unwrap(),
            "https://k.example:5000/v3/auth/tokens"
        );
        assert_eq!(
            tokens_url("https://k.example/identity/v3/").unwrap(),
            "https://k.example/identity/v3/auth/tokens"
        );
        assert!(tokens_url("k.example:5000").is_err());
        assert_eq!(
            status_url("https://o.example:9876/", "x").unwrap(),
            "https://o.example:9876/v2/lbaas/loadbalancers/x/status"
        );
        assert_eq!(
            status_url("https://o.example/load-balancer/v2.0", "x").unwrap(),
            "https://o.example/load-balancer/v2.0/lbaas/loadbalancers/x/status"
        );
    }

    #[test]
    fn credentials_in_urls_are_masked_and_never_sent() {
        let url = "https://admin:s3cr%20t@keystone.example:5000/v3";
        assert_eq!(mask_url(url), "https://***@keystone.example:5000/v3");
        assert_eq!(
            tokens_url(url).unwrap(),
            "https://keystone.example:5000/v3/auth/tokens"
        );
        // Every `@` may end user information (the table is in clouds.rs).
        assert_eq!(mask_url("https://k.example/a@b"), "https://***@b/");
        let e = tokens_url("https://user:pw@").unwrap_err().to_string();
        assert!(!e.contains("pw"), "{e}");
        assert!(e.contains(crate::guard::masked_url::UNREADABLE_URL), "{e}");
    }

    #[test]
    fn token_lifetime_uses_keystones_clock() {
        let body = TokenBody {
            expires_at: Some("2015-08-27T10:49:58Z".into()),
            issued_at: Some("2015-08-27T09:49:58Z".into()),
            catalog: vec![],
        };
        assert_eq!(
            lifetime(&body, SystemTime::now()),
            Some(Duration::from_secs(3600))
        );
    }
}
