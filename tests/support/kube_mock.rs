//! A fake Kubernetes API for the watcher tests (tower-test mock): list and Status answers,
//! and the wait for the watcher's next GET of one object selected by name.

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;

/// The mock's handle, as the watcher tests hold it.
pub type Handle = mock::Handle<Request<Body>, Response<Body>>;

/// A complete list of `items` (`kind`, e.g. `SecretList`) at resourceVersion 100.
pub fn list_response(api_version: &str, kind: &str, items: &[Value]) -> Response<Body> {
    let body = json!({"apiVersion": api_version, "kind": kind,
        "metadata": {"resourceVersion": "100"}, "items": items});
    Response::new(Body::from(serde_json::to_vec(&body).expect("JSON")))
}

/// A `Status` failure with HTTP status `code`.
pub fn status_response(code: u16, reason: &str, message: &str) -> Response<Body> {
    let body = json!({"apiVersion": "v1", "kind": "Status", "metadata": {},
        "status": "Failure", "reason": reason, "code": code, "message": message});
    let mut response = Response::new(Body::from(serde_json::to_vec(&body).expect("JSON")));
    *response.status_mut() = StatusCode::from_u16(code).expect("HTTP status");
    response
}

/// Waits for the watcher's next request: a GET of `path` selected by
/// `metadata.name=<name>`, a watch or not.
pub async fn expect_get(
    handle: &mut Handle,
    path: &str,
    name: &str,
    watch: bool,
) -> mock::SendResponse<Response<Body>> {
    let (request, send) = handle
        .next_request()
        .await
        .expect("the watcher calls the API");
    assert_eq!(request.method(), http::Method::GET);
    assert_eq!(request.uri().path(), path, "{}", request.uri());
    let query = request.uri().query().unwrap_or("");
    assert!(
        query.contains(&format!("fieldSelector=metadata.name%3D{name}")),
        "{query}"
    );
    assert_eq!(query.contains("watch=true"), watch, "{query}");
    send
}

/// The registry's metrics in the text format.
pub fn encoded(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("encodes");
    out
}
