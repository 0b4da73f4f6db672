//! Bounded reads of the API for the audit: a list page or an object is read as raw bytes up
//! to a cap, never deserialized whole, so what one answer costs is bounded by the caps and
//! not by what the API server (or something in front of it) sends.
//!
//! kube-rs's `Api::list` collects the whole body into memory and decodes every item at once
//! (kube-client 5.0 `Client::request_text`), so a 400 MB object or a 300 MB page cost more
//! than a GiB (issue 22). Here a page is read up to [`ReadLimits::max_page_bytes`]; its items
//! stay raw JSON ([`serde_json::value::RawValue`], borrowed from the page) and are decoded one
//! at a time by the caller, and an item over [`ReadLimits::max_object_bytes`] is only named
//! (its `metadata.name` and `namespace`), never decoded. An error answer is read up to
//! [`MAX_ERROR_BODY_BYTES`].
//!
//! A real API server cannot store an object over etcd's request limit (1.5 MiB by default;
//! the apiserver accepts write bodies up to 3 MiB, kubernetes/apiserver
//! 5a72bc815bfbf203121de56eecd3a2d3e4f14096 `pkg/server/config.go` `MaxRequestBodyBytes`), so
//! [`DEFAULT_MAX_OBJECT_BYTES`] never skips an object a real cluster holds.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use http_body_util::BodyExt as _;
use kube::api::ListParams;
use kube::core::{ApiResource, DynamicObject, Request, Resource as _};
use serde::Deserialize;
use serde_json::value::RawValue;

/// Default for [`ReadLimits::max_page_bytes`]: the bytes of one list answer, at most.
pub const DEFAULT_MAX_PAGE_BYTES: usize = 16 * 1024 * 1024;
/// Default for [`ReadLimits::max_object_bytes`]: the JSON bytes of one object, at most.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 4 * 1024 * 1024;
/// Default for [`ReadLimits::max_list_pages`]: list requests per kind, at most (250 objects
/// a page: 2.5 million objects of one kind).
pub const DEFAULT_MAX_LIST_PAGES: usize = 10_000;
/// Default for [`ReadLimits::request_timeout`]: one request, answer body included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A namespace is cut to this many bytes when read: Kubernetes' own limit (a DNS label), so
/// only a namespace no real API server stores is ever cut.
pub const MAX_NAMESPACE_BYTES: usize = 63;
/// A name is cut to this many bytes when read: Kubernetes' limit for names (a DNS
/// subdomain), so only a name no real API server stores is ever cut.
pub const MAX_NAME_BYTES: usize = 253;
/// An error answer (a `Status`) is read up to this many bytes; past it, only its HTTP status
/// is kept.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The caps of the audit's reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Bytes of one list answer. A page over it is asked again with half the `limit`; a page
    /// of one object over it is skipped (named through a metadata-only list).
    pub max_page_bytes: usize,
    /// Bytes of one object's JSON. An object over it is skipped with a finding that names
    /// it and its size.
    pub max_object_bytes: usize,
    /// List requests per kind (retries of a smaller page included). Past it, the kind is
    /// stopped with an input error.
    pub max_list_pages: usize,
    /// Wall time of one request, from sending it to the last byte of its answer. The
    /// client's own read timeout restarts with every byte, so an answer sent one byte at a
    /// time would otherwise never end.
    pub request_timeout: Duration,
}

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            max_page_bytes: DEFAULT_MAX_PAGE_BYTES,
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            max_list_pages: DEFAULT_MAX_LIST_PAGES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// Why a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The API answered with an error status, or the request did not get an answer.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The answer was longer than the cap (more than `limit` bytes).
    #[error("the answer is over {limit} bytes")]
    TooLarge {
        /// The cap.
        limit: usize,
    },
    /// The request and its whole answer took longer than `after`
    /// ([`ReadLimits::request_timeout`]).
    #[error("no complete answer within {after:?}")]
    TimedOut {
        /// The deadline.
        after: Duration,
    },
    /// The answer is not the JSON it should be (the reason names no content).
    #[error("the answer is not readable JSON: {0}")]
    Decode(String),
}

/// A list answer read within its cap: the raw bytes, decoded by [`Page::parse`].
#[derive(Debug)]
pub struct Page {
    body: Vec<u8>,
}

/// The parts of a list answer the audit reads; items stay raw JSON borrowed from the page.
#[derive(Debug, Deserialize)]
pub struct RawPage<'a> {
    /// The list's metadata.
    #[serde(default)]
    pub metadata: RawListMeta,
    /// The items, undecoded.
    #[serde(borrow, default)]
    pub items: Vec<&'a RawValue>,
}

/// `metadata` of a list: only the continue token.
#[derive(Debug, Default, Deserialize)]
pub struct RawListMeta {
    /// The continue token (empty or absent on the last page).
    #[serde(rename = "continue", default)]
    pub continue_token: Option<String>,
}

/// What names an object: enough to report one without decoding the rest.
#[derive(Debug, Default, Deserialize)]
struct NameOnly {
    #[serde(default)]
    metadata: NameMeta,
}

#[derive(Debug, Default, Deserialize)]
struct NameMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

impl Page {
    /// The page's continue token and raw items.
    pub fn parse(&self) -> Result<RawPage<'_>, ReadError> {
        serde_json::from_slice(&self.body).map_err(|e| ReadError::Decode(e.classify_string()))
    }
}

/// How a serde error is reported: its category and position, never the input.
trait Classify {
    fn classify_string(&self) -> String;
}

impl Classify for serde_json::Error {
    fn classify_string(&self) -> String {
        let what = match self.classify() {
            serde_json::error::Category::Io => "read error",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "unexpected shape",
            serde_json::error::Category::Eof => "truncated",
        };
        format!("{what} at line {} column {}", self.line(), self.column())
    }
}

/// `namespace` and `name` of a raw object (`None` when it has none or is not an object).
/// Both are cut as [`decode`] cuts them.
pub fn name_of(raw: &RawValue) -> (Option<String>, Option<String>) {
    match serde_json::from_str::<NameOnly>(raw.get()) {
        Ok(n) => (
            n.metadata.namespace.map(|ns| cut(ns, MAX_NAMESPACE_BYTES)),
            n.metadata.name.map(|name| cut(name, MAX_NAME_BYTES)),
        ),
        Err(_) => (None, None),
    }
}

/// Decodes one raw item, its namespace and name cut to [`MAX_NAMESPACE_BYTES`] and
/// [`MAX_NAME_BYTES`].
pub fn decode(raw: &RawValue) -> Result<DynamicObject, ReadError> {
    let mut object: DynamicObject =
        serde_json::from_str(raw.get()).map_err(|e| ReadError::Decode(e.classify_string()))?;
    cut_names(&mut object);
    Ok(object)
}

/// Cuts an object's namespace and name to Kubernetes' limits, once, where they are read:
/// everything the audit keeps or prints about an object (entry names, messages, the
/// per-namespace tally) is then bounded whatever the API server sends. A real object is
/// never changed; a cut one ends in `…`, so it cannot be taken for a real name.
pub fn cut_names(object: &mut DynamicObject) {
    let meta = &mut object.metadata;
    if let Some(ns) = meta.namespace.take() {
        meta.namespace = Some(cut(ns, MAX_NAMESPACE_BYTES));
    }
    if let Some(name) = meta.name.take() {
        meta.name = Some(cut(name, MAX_NAME_BYTES));
    }
}

/// `text` itself when it is at most `max` bytes, else its first `max` bytes (at a character
/// boundary) and `…`.
fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut at = max;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text.truncate(at);
    text.push('…');
    text
}

/// A stable hash of a continue token: the audit remembers tokens by hash, so a hostile
/// token costs its bytes once, not once per page.
pub fn token_hash(token: &str) -> u64 {
    let mut h = DefaultHasher::new();
    token.hash(&mut h);
    h.finish()
}

/// Sends `request` and reads its answer up to `max_bytes` (an error answer up to
/// [`MAX_ERROR_BODY_BYTES`], returned as the `Status` it holds), all of it within `timeout`.
async fn read(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
    max_bytes: usize,
    timeout: Duration,
) -> Result<Vec<u8>, ReadError> {
    tokio::time::timeout(timeout, read_untimed(client, request, max_bytes))
        .await
        .unwrap_or(Err(ReadError::TimedOut { after: timeout }))
}

async fn read_untimed(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
    max_bytes: usize,
) -> Result<Vec<u8>, ReadError> {
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let status = response.status();
    let mut body = response.into_body();
    let failed = status.is_client_error() || status.is_server_error();
    let cap = if failed {
        MAX_ERROR_BODY_BYTES
    } else {
        max_bytes
    };
    let mut out: Vec<u8> = Vec::new();
    let mut over = false;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if out.len() + data.len() > cap {
            over = true;
            break;
        }
        out.extend_from_slice(&data);
    }
    if failed {
        let status_object = (!over)
            .then(|| serde_json::from_slice::<kube::core::Status>(&out).ok())
            .flatten()
            .filter(|s| s.code == status.as_u16())
            .unwrap_or_else(|| {
                kube::core::Status::failure(
                    status.canonical_reason().unwrap_or("error"),
                    "the error answer could not be read",
                )
                .with_code(status.as_u16())
            });
        return Err(ReadError::Api(kube::Error::Api(status_object.boxed())));
    }
    if over {
        return Err(ReadError::TooLarge { limit: cap });
    }
    Ok(out)
}

fn build(
    result: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<http::Request<Vec<u8>>, ReadError> {
    result.map_err(|e| ReadError::Api(kube::Error::BuildRequest(e)))
}

/// One list page of `ar` in every namespace, read within `limits.max_page_bytes` and
/// `limits.request_timeout`.
pub async fn list(
    client: &kube::Client,
    ar: &ApiResource,
    params: &ListParams,
    limits: &ReadLimits,
) -> Result<Page, ReadError> {
    list_in(client, ar, None, params, limits).await
}

/// One list page of `ar` in `namespace` (every namespace for None), read within
/// `limits.max_page_bytes` and `limits.request_timeout`.
pub async fn list_in(
    client: &kube::Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    params: &ListParams,
    limits: &ReadLimits,
) -> Result<Page, ReadError> {
    let request = build(Request::new(DynamicObject::url_path(ar, namespace)).list(params))?;
    read_page(client, request, limits).await
}

/// A list answer read within `limits.max_page_bytes` and `limits.request_timeout`.
async fn read_page(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
    limits: &ReadLimits,
) -> Result<Page, ReadError> {
    let body = read(
        client,
        request,
        limits.max_page_bytes,
        limits.request_timeout,
    )
    .await?;
    Ok(Page { body })
}

/// One metadata-only list page (`PartialObjectMetadataList`), read within
/// `limits.max_page_bytes` and `limits.request_timeout`: how the audit names an object too
/// large to read and gets the continue token past it.
pub async fn list_metadata(
    client: &kube::Client,
    ar: &ApiResource,
    params: &ListParams,
    limits: &ReadLimits,
) -> Result<Page, ReadError> {
    let request = build(Request::new(DynamicObject::url_path(ar, None)).list_metadata(params))?;
    read_page(client, request, limits).await
}

/// One object by name, read within `limits.max_object_bytes` and `limits.request_timeout`
/// (its namespace and name cut as [`decode`] cuts them); `Ok(None)` on 404.
pub async fn get(
    client: &kube::Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    limits: &ReadLimits,
) -> Result<Option<DynamicObject>, ReadError> {
    let request =
        build(Request::new(DynamicObject::url_path(ar, namespace)).get(name, &Default::default()))?;
    match read(
        client,
        request,
        limits.max_object_bytes,
        limits.request_timeout,
    )
    .await
    {
        Ok(body) => serde_json::from_slice(&body)
            .map(|mut object| {
                cut_names(&mut object);
                Some(object)
            })
            .map_err(|e| ReadError::Decode(e.classify_string())),
        Err(ReadError::Api(kube::Error::Api(status))) if status.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use http::{Request as HttpRequest, Response, StatusCode};
    use http_body_util::Full;
    use hyper::body::Bytes;
    use kube::client::Body;
    use tower_test::mock;

    /// A client whose every request is answered with `status` and `body`.
    fn answering(status: StatusCode, body: Vec<u8>) -> kube::Client {
        let (service, mut handle) = mock::pair::<HttpRequest<Body>, Response<Full<Bytes>>>();
        tokio::spawn(async move {
            while let Some((_, send)) = handle.next_request().await {
                let mut response = Response::new(Full::new(Bytes::from(body.clone())));
                *response.status_mut() = status;
                send.send_response(response);
            }
        });
        kube::Client::new(service, "default")
    }

    fn secrets() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
    }

    async fn list_answer(client: &kube::Client) -> Result<Page, ReadError> {
        list(
            client,
            &secrets(),
            &ListParams::default(),
            &ReadLimits::default(),
        )
        .await
    }

    /// A page that is not JSON is reported by category and position, never by its content.
    #[tokio::test]
    async fn an_unreadable_page_is_named_by_its_position_not_its_content() {
        let client = answering(StatusCode::OK, b"{\"items\": [CANARY-SECRET".to_vec());
        let page = list_answer(&client).await.expect("read within the cap");
        let error = page.parse().expect_err("not JSON");
        assert_eq!(
            error.to_string(),
            "the answer is not readable JSON: syntax error at line 1 column 12"
        );
        let client = answering(StatusCode::OK, b"{\"items\": [".to_vec());
        let page = list_answer(&client).await.expect("read within the cap");
        assert_eq!(
            page.parse().expect_err("cut short").to_string(),
            "the answer is not readable JSON: truncated at line 1 column 11"
        );
        let client = answering(StatusCode::OK, br#"{"items": {"a": 1}}"#.to_vec());
        let page = list_answer(&client).await.expect("read within the cap");
        assert_eq!(
            page.parse().expect_err("items is not a list").to_string(),
            "the answer is not readable JSON: unexpected shape at line 1 column 10"
        );
    }

    /// An error answer keeps the API's Status up to 64 KiB; a longer one (or one that is not
    /// a Status) is reduced to its HTTP status, read no further.
    #[tokio::test]
    async fn an_error_answer_is_read_up_to_its_cap() {
        let status_body = |message: &str| {
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "v1", "kind": "Status", "status": "Failure",
                "message": message, "reason": "Forbidden", "code": 403}))
            .unwrap()
        };
        // 64 KiB, the cap: a 60 KiB message (the Status JSON around it is under 150 bytes)
        // is kept, a 64 KiB one is not.
        assert_eq!(MAX_ERROR_BODY_BYTES, 65_536);
        let fits = "m".repeat(60 * 1024);
        let client = answering(StatusCode::FORBIDDEN, status_body(&fits));
        match list_answer(&client).await {
            Err(ReadError::Api(kube::Error::Api(status))) => {
                assert_eq!((status.code, status.message.len()), (403, fits.len()));
            }
            other => panic!("{other:?}"),
        }
        let over = "m".repeat(MAX_ERROR_BODY_BYTES);
        let client = answering(StatusCode::FORBIDDEN, status_body(&over));
        match list_answer(&client).await {
            Err(ReadError::Api(kube::Error::Api(status))) => {
                assert_eq!(
                    (status.code, status.reason.as_str(), status.message.len()),
                    (403, "the error answer could not be read", "Forbidden".len())
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// A name over its cap is cut at a character boundary at or before the cap, and marked.
    #[test]
    fn names_are_cut_at_a_character_boundary() {
        let name = format!("{}é", "a".repeat(MAX_NAME_BYTES - 1));
        assert_eq!(name.len(), MAX_NAME_BYTES + 1);
        // Byte 253 is inside `é`: the cut falls back to 252.
        assert_eq!(
            cut(name, MAX_NAME_BYTES),
            format!("{}…", "a".repeat(MAX_NAME_BYTES - 1))
        );
        let exact = "b".repeat(MAX_NAMESPACE_BYTES);
        assert_eq!(cut(exact.clone(), MAX_NAMESPACE_BYTES), exact);
    }

    /// A page over its cap is refused with the cap, not read on; one of exactly the cap is
    /// read.
    #[tokio::test]
    async fn a_page_over_its_cap_is_too_large() {
        let limits = ReadLimits {
            max_page_bytes: 1024,
            ..ReadLimits::default()
        };
        let client = answering(StatusCode::OK, vec![b' '; 1025]);
        match list(&client, &secrets(), &ListParams::default(), &limits).await {
            Err(ReadError::TooLarge { limit }) => assert_eq!(limit, 1024),
            other => panic!("{other:?}"),
        }
        let mut at_cap = br#"{"items": []}"#.to_vec();
        at_cap.resize(1024, b' ');
        let client = answering(StatusCode::OK, at_cap);
        let page = list(&client, &secrets(), &ListParams::default(), &limits)
            .await
            .expect("a page of exactly the cap is read");
        assert!(page.parse().expect("JSON").items.is_empty());
    }
}
