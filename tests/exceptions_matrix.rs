//! Issue 37's matrix: every face × every exemption case, one expected answer per cell.
//!
//! The object is the captured Flux HelmRelease `kube-system/openstack-cloud-controller-manager`
//! with `provider-requires-serial-api-calls: false` (policy serial-lb-api-calls, code `false`,
//! a denial). The cases: no exception; an active exception; one inside the warning window;
//! an expired one; a malformed one; one in a namespace exceptions are not accepted in; the
//! exemption annotation set by a requester the policy allows (group `system:masters`), by one
//! it does not (a tenant), and already stored (an UPDATE by the tenant that leaves it as it
//! was). The faces:
//!
//! - the webhook (`/validate` over HTTPS), its exceptions fed the way `serve
//!   --watch-exceptions` feeds them: each object parsed by the watcher's own fold
//!   (`exceptions_watch::Objects`), the review judged at its own instant;
//! - `stackgate check --exceptions DIR` (no requester: an annotation is "unverified" and the
//!   policy's default for it, `apply`, holds);
//! - `stackgate exceptions list --from DIR` (the state of each exception).
//!
//! `audit` and the background audit's PolicyReports apply the same exception set through the
//! same engine call as `check` (`tests/audit.rs`: `skip` until `expires`, `fail` after, a
//! refused exception an input error); they need a fake cluster and are not repeated here.
//! All faces use the system clock, and the exceptions are written relative to it.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::*;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::core::DynamicObject;
use serde_json::{Value, json};
use stackgate::engine::Engine;
use stackgate::exceptions_watch::{ExceptionCell, ExceptionSource, Objects};
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::policy::exception::ExceptionRules;
use stackgate::server::AppState;

const VALIDATE: &str = "helmrelease/validate-create-openstack-cloud-controller-manager.json";
const ANNOTATION: &str = "stackgate.dev/exempt.serial-lb-api-calls";

/// The exemption cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    None,
    Valid,
    Expiring,
    Expired,
    Malformed,
    WrongNamespace,
    AnnotationAllowed,
    AnnotationNotAllowed,
    AnnotationStored,
}

const CASES: [Case; 9] = [
    Case::None,
    Case::Valid,
    Case::Expiring,
    Case::Expired,
    Case::Malformed,
    Case::WrongNamespace,
    Case::AnnotationAllowed,
    Case::AnnotationNotAllowed,
    Case::AnnotationStored,
];

/// What a face answers for a case: the decision, and text the user must see.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    /// Webhook: allowed. `check`: exit code. `exceptions list`: the state.
    decision: String,
    /// Substrings of what the face shows (message, warnings, report, listing).
    shows: Vec<&'static str>,
}

fn answer(decision: &str, shows: &[&'static str]) -> Answer {
    Answer {
        decision: decision.to_owned(),
        shows: shows.to_vec(),
    }
}

/// The expected answer of each face for `case`: the matrix.
fn expected(case: Case) -> [Answer; 3] {
    use Case::*;
    // [webhook allowed, check exit code, exceptions list state]
    match case {
        None => [
            answer(
                "false",
                &["provider-requires-serial-api-calls is set to a false value"],
            ),
            answer("1", &["serial-lb-api-calls/false"]),
            answer("none listed", &[]),
        ],
        Valid => [
            answer("true", &["StackgateException stackgate/occm-serial"]),
            answer(
                "0",
                &[
                    "excepted from policy serial-lb-api-calls by StackgateException stackgate/occm-serial",
                ],
            ),
            answer("active", &[]),
        ],
        Expiring => [
            answer("true", &["then the policy applies again"]),
            answer(
                "0",
                &["StackgateException stackgate/occm-serial", "expires in"],
            ),
            answer("expiring", &[]),
        ],
        Expired => [
            answer(
                "false",
                &[
                    "exception StackgateException stackgate/occm-serial expired at",
                    "not applied",
                ],
            ),
            answer("1", &["expired at", "not applied"]),
            answer("expired", &[]),
        ],
        // Refused: it exempts nothing. `check` refuses to run on it (an input error, exit 2,
        // never "exempt everything"); the webhook's watcher logs and counts it.
        Malformed => [
            answer(
                "false",
                &["provider-requires-serial-api-calls is set to a false value"],
            ),
            answer("2", &["spec.match.kinds"]),
            answer("invalid", &["spec.match.kinds"]),
        ],
        WrongNamespace => [
            answer(
                "false",
                &["provider-requires-serial-api-calls is set to a false value"],
            ),
            answer("2", &["tenant-a"]),
            answer("invalid", &["tenant-a"]),
        ],
        // The webhook knows the requester; `check` does not: unverified, the policy applies.
        AnnotationAllowed => [
            answer("true", &[]),
            answer("1", &["exemption-unverified"]),
            answer("none listed", &[]),
        ],
        AnnotationNotAllowed => [
            answer("false", &["not allowed to exempt", "system:masters"]),
            answer("1", &["exemption-unverified"]),
            answer("none listed", &[]),
        ],
        AnnotationStored => [
            answer("true", &[]),
            answer("1", &["exemption-unverified"]),
            answer("none listed", &[]),
        ],
    }
}

/// The HelmRelease with `false`, as the apiserver sends it.
fn object() -> Value {
    let review: Value = serde_json::from_slice(&captured(VALIDATE)).unwrap();
    let mut object = review["request"]["object"].clone();
    object["spec"]["values"]
        .as_object_mut()
        .unwrap()
        .remove("controllerExtraArgs");
    object["spec"]["values"]["cloudConfig"]["loadBalancer"]["provider-requires-serial-api-calls"] =
        json!(false);
    object
}

fn with_annotation(mut object: Value) -> Value {
    object["metadata"]["annotations"] = json!({ANNOTATION: "Octavia fixed, CHG-42"});
    object
}

/// The exception of `case`, if it has one, relative to `now`.
fn exception_text(case: Case, now: Timestamp) -> Option<String> {
    let days = |n: i64| now + SignedDuration::from_hours(24 * n);
    let (namespace, kinds, expires) = match case {
        Case::Valid => ("stackgate", "[HelmRelease]", days(60)),
        Case::Expiring => ("stackgate", "[HelmRelease]", days(3)),
        Case::Expired => ("stackgate", "[HelmRelease]", days(-1)),
        Case::Malformed => ("stackgate", "[]", days(60)),
        Case::WrongNamespace => ("tenant-a", "[HelmRelease]", days(60)),
        _ => return None,
    };
    Some(format!(
        "apiVersion: stackgate.dev/v1alpha1
kind: StackgateException
metadata:
  name: occm-serial
  namespace: {namespace}
spec:
  policy: serial-lb-api-calls
  codes: [\"false\"]
  match:
    kinds: {kinds}
    namespaces: [kube-system]
    names: [openstack-cloud-controller-manager]
  reason: Octavia provider fixed upstream
  ticket: CHG-42
  expires: \"{expires}\"
"
    ))
}

/// The review the apiserver sends for `case`: who writes, and the stored object on UPDATE.
fn review(case: Case) -> Value {
    let mut review: Value = serde_json::from_slice(&captured(VALIDATE)).unwrap();
    let tenant = json!({"username": "tenant-a", "groups": ["tenants", "system:authenticated"]});
    let admin = json!({"username": "admin", "groups": ["system:masters"]});
    let (object, user, old) = match case {
        Case::AnnotationAllowed => (with_annotation(object()), admin, None),
        Case::AnnotationNotAllowed => (with_annotation(object()), tenant, None),
        Case::AnnotationStored => {
            let mut changed = with_annotation(object());
            changed["metadata"]["labels"] = json!({"team": "a"});
            (changed, tenant, Some(with_annotation(object())))
        }
        _ => (object(), tenant, None),
    };
    let request = &mut review["request"];
    request["object"] = object;
    request["userInfo"] = user;
    if let Some(old) = old {
        request["operation"] = json!("UPDATE");
        request["oldObject"] = old;
    }
    review
}

/// What the webhook shows: allowed, and the message, warnings and audit annotations.
async fn webhook(case: Case, now: Timestamp) -> (String, String) {
    let engine = Engine::new(PolicySet::embedded().unwrap());
    let rules = ExceptionRules::default();
    // The watcher's own fold: each object parsed, refused ones kept as refused.
    let mut objects = Objects::default();
    if let Some(text) = exception_text(case, now) {
        let object: DynamicObject = serde_saphyr::from_str(&text).unwrap();
        // The watcher lists only the accepted namespaces: an object elsewhere is never read.
        if rules
            .namespaces
            .contains(object.metadata.namespace.as_ref().unwrap())
        {
            objects.apply(&object, &engine, &rules, now);
        }
    }
    let cell = ExceptionCell::holding(objects.set(&rules).0);
    let state = AppState::new(engine, Metrics::new())
        .with_fact_source(Arc::new(ExceptionSource::new(cell)));
    let server = TestServer::start_with(|_| {}, state).await;
    let client = server.client().await;
    let body = serde_json::to_vec(&review(case)).unwrap();
    let (status, out) = post(&client, "/validate", body).await;
    assert_eq!(status, http::StatusCode::OK, "{case:?}: {out}");
    let r = &out["response"];
    (
        r["allowed"].to_string(),
        format!(
            "{} {} {}",
            r["status"]["message"], r["warnings"], r["auditAnnotations"]
        ),
    )
}

fn stackgate(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .env("STACKGATE_LOG_LEVEL", "off")
        .output()
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `check` over the object written as a file, with the case's exception in `--exceptions`.
fn check(case: Case, now: Timestamp, dir: &Path) -> (String, String) {
    let object = match case {
        Case::AnnotationAllowed | Case::AnnotationNotAllowed | Case::AnnotationStored => {
            with_annotation(object())
        }
        _ => object(),
    };
    let input = dir.join("occm.yaml");
    std::fs::write(&input, serde_json::to_string_pretty(&object).unwrap()).unwrap();
    let exceptions = dir.join("exceptions");
    std::fs::create_dir_all(&exceptions).unwrap();
    if let Some(text) = exception_text(case, now) {
        std::fs::write(exceptions.join("occm-serial.yaml"), text).unwrap();
    }
    let (code, out) = stackgate(&[
        "check",
        input.to_str().unwrap(),
        "--exceptions",
        exceptions.to_str().unwrap(),
    ]);
    (code.map_or("signal".to_owned(), |c| c.to_string()), out)
}

/// `exceptions list --from DIR`: the listed state, and the listing.
fn list(dir: &Path) -> (String, String) {
    let exceptions = dir.join("exceptions");
    let (code, out) = stackgate(&[
        "exceptions",
        "list",
        "--from",
        exceptions.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, Some(0), "{out}");
    let listed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let states: Vec<&str> = listed["exceptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    let state = match states.as_slice() {
        [] => "none listed".to_owned(),
        [one] => (*one).to_owned(),
        many => panic!("{many:?}"),
    };
    (state, out)
}

#[tokio::test]
async fn every_face_gives_the_answer_of_its_cell() {
    let now = Timestamp::now();
    let mut disagreements = Vec::new();
    for case in CASES {
        let dir = tempfile::tempdir().unwrap();
        let got = [
            webhook(case, now).await,
            check(case, now, dir.path()),
            list(dir.path()),
        ];
        for ((face, want), (decision, shown)) in ["webhook", "check", "exceptions list"]
            .iter()
            .zip(expected(case))
            .zip(got)
        {
            let missing: Vec<&str> = want
                .shows
                .iter()
                .copied()
                .filter(|s| !shown.contains(s))
                .collect();
            if decision != want.decision || !missing.is_empty() {
                disagreements.push(format!(
                    "{case:?} × {face}: want {} showing {:?}, got {decision} (missing {missing:?}):\n{shown}",
                    want.decision, want.shows
                ));
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} cells disagree:\n\n{}",
        disagreements.len(),
        disagreements.join("\n\n")
    );
}
