//! Who may exempt (issue 37, item 1): the exemption annotation `stackgate.dev/exempt.<policy>`
//! counts only when the review's requester is one the policy lists, or when the stored
//! object already carries the same annotation; `check` and `audit`, which have no requester,
//! report it as unverified and apply the policy unless it says `unverified: honour`.
//!
//! The webhook cases go over HTTPS (`TestServer`) with the captured Flux HelmRelease review
//! (`tests/fixtures/captured/helmrelease`), its userInfo varied: a tenant, a cluster admin
//! (group `system:masters`, which the shipped enforce policies list), a platform-team member
//! and a named user of a policy set that lists them. Assertions are on what users see:
//! `allowed`, the message, warnings, the patch, the audit annotations; and for `check` and
//! `audit` the report items.

mod common;

use common::*;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;
use stackgate::report::ItemKind;
use stackgate::server::AppState;

const VALIDATE: &str = "helmrelease/validate-create-openstack-cloud-controller-manager.json";
const MUTATE: &str = "helmrelease/mutate-create-openstack-cloud-controller-manager.json";
const KEY: &str = "stackgate.dev/exempt.serial-lb-api-calls";
const NOT_APPLIED: &str = "exemption annotation set by a user not allowed to exempt; not applied";

fn tenant() -> Value {
    json!({"username": "tenant-a", "groups": ["tenants", "system:authenticated"]})
}

fn admin() -> Value {
    json!({"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]})
}

fn platform_member() -> Value {
    json!({"username": "pat", "groups": ["platform-team", "system:authenticated"]})
}

/// The captured HelmRelease review with serial calls `serial` (None: the key left out) and
/// `annotation` as the exemption (None: no annotation), written by `user`. The concurrency
/// flag of the capture is dropped so that only the serial policy speaks.
fn review(rel: &str, serial: Option<bool>, annotation: Option<&str>, user: Value) -> Value {
    let mut v: Value = serde_json::from_slice(&captured(rel)).expect("captured JSON");
    let request = &mut v["request"];
    request["userInfo"] = user;
    let object = &mut request["object"];
    let values = object["spec"]["values"].as_object_mut().expect("values");
    values.remove("controllerExtraArgs");
    let lb = object["spec"]["values"]["cloudConfig"]["loadBalancer"]
        .as_object_mut()
        .expect("loadBalancer");
    match serial {
        Some(value) => {
            lb.insert("provider-requires-serial-api-calls".into(), json!(value));
        }
        None => {
            lb.remove("provider-requires-serial-api-calls");
        }
    }
    set_annotation(object, annotation);
    v
}

fn set_annotation(object: &mut Value, annotation: Option<&str>) {
    let annotations = object["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations");
    match annotation {
        Some(reason) => {
            annotations.insert(KEY.into(), json!(reason));
        }
        None => {
            annotations.remove(KEY);
        }
    }
}

/// `review` as an UPDATE whose stored object carries `old_annotation` (serial `old_serial`).
fn update(
    serial: Option<bool>,
    annotation: Option<&str>,
    old_serial: Option<bool>,
    old_annotation: Option<&str>,
    user: Value,
) -> Value {
    let mut v = review(VALIDATE, serial, annotation, user.clone());
    let old = review(VALIDATE, old_serial, old_annotation, user)["request"]["object"].clone();
    v["request"]["operation"] = json!("UPDATE");
    v["request"]["oldObject"] = old;
    v["request"]["options"] = json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"});
    v
}

async fn send(client: &Client, path: &str, review: &Value) -> Value {
    let body = serde_json::to_vec(review).expect("encode");
    let (status, out) = post(client, path, body).await;
    assert_eq!(status, http::StatusCode::OK, "{path}: {out}");
    out["response"].clone()
}

fn message(response: &Value) -> &str {
    response["status"]["message"].as_str().unwrap_or("")
}

/// A policy set whose serial policy lets group platform-team and user ci-bot exempt.
fn platform_team_policies() -> PolicySet {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("policies/serial-lb-api-calls.yaml"))
        .expect("read the policy")
        .replace(
            "    allowedGroups: [system:masters]\n",
            "    allowedGroups: [platform-team]\n    allowedUsers: [ci-bot]\n",
        );
    assert!(text.contains("platform-team"), "{text}");
    PolicySet::from_files(
        vec![("serial-lb-api-calls.yaml".into(), text)],
        "test".into(),
    )
    .expect("policies load")
}

#[tokio::test]
async fn a_tenants_self_exemption_is_refused_and_named() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let r = send(
        &client,
        "/validate",
        &review(VALIDATE, Some(false), Some("we need it off"), tenant()),
    )
    .await;
    assert_eq!(r["allowed"], false, "{r}");
    let text = message(&r);
    assert!(text.contains(NOT_APPLIED), "{text}");
    assert!(text.contains("have group system:masters set it"), "{text}");
    // The policy applies as if the annotation were absent: its own denial is there too.
    assert!(text.contains("set to a false value"), "{text}");
    assert!(
        r["auditAnnotations"]
            .get("serial-lb-api-calls-exempted")
            .is_none(),
        "{r}"
    );
}

#[tokio::test]
async fn an_allowed_requesters_exemption_admits() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let r = send(
        &client,
        "/validate",
        &review(VALIDATE, Some(false), Some("CHG-42"), admin()),
    )
    .await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(
        r["auditAnnotations"]["serial-lb-api-calls-exempted"], "CHG-42",
        "{r}"
    );
}

#[tokio::test]
async fn a_listed_group_or_user_may_exempt_and_nobody_else() {
    let state = AppState::new(Engine::new(platform_team_policies()), Default::default());
    let server = TestServer::start_with(|_| {}, state).await;
    let client = server.client().await;
    let bot = json!({"username": "ci-bot", "groups": ["system:authenticated"]});
    for (who, user, allowed) in [
        ("platform-team member", platform_member(), true),
        ("listed user", bot, true),
        // Listed nowhere in this set: a cluster admin's annotation does not count either.
        ("cluster admin", admin(), false),
        ("tenant", tenant(), false),
        // A username equal to the group's name is no member of it.
        (
            "user named like the group",
            json!({"username": "platform-team", "groups": ["system:authenticated"]}),
            false,
        ),
        ("no userInfo groups", json!({"username": "x"}), false),
    ] {
        let r = send(
            &client,
            "/validate",
            &review(VALIDATE, Some(false), Some("CHG-7"), user),
        )
        .await;
        assert_eq!(r["allowed"], allowed, "{who}: {r}");
        assert_eq!(message(&r).contains(NOT_APPLIED), !allowed, "{who}: {r}");
    }
}

#[tokio::test]
async fn a_stored_annotation_keeps_counting_for_later_edits() {
    let server = TestServer::start().await;
    let client = server.client().await;
    // The platform set it; a tenant's later edit keeps it unchanged.
    let kept = update(
        Some(false),
        Some("CHG-42"),
        Some(false),
        Some("CHG-42"),
        tenant(),
    );
    let r = send(&client, "/validate", &kept).await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(
        r["auditAnnotations"]["serial-lb-api-calls-exempted"], "CHG-42",
        "{r}"
    );
    // A tenant who changes the stored reason writes a new annotation: it does not count.
    let changed = update(
        Some(false),
        Some("mine now"),
        Some(false),
        Some("CHG-42"),
        tenant(),
    );
    let r = send(&client, "/validate", &changed).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert!(message(&r).contains(NOT_APPLIED), "{r}");
}

#[tokio::test]
async fn the_end_of_an_exemption_re_evaluates_the_object() {
    let server = TestServer::start().await;
    let client = server.client().await;
    // Removing the annotation from an object that holds false: denied, whoever removes it.
    for user in [tenant(), admin()] {
        let removed = update(Some(false), None, Some(false), Some("CHG-42"), user);
        let r = send(&client, "/validate", &removed).await;
        assert_eq!(r["allowed"], false, "{r}");
        assert!(message(&r).contains("set to a false value"), "{r}");
    }
}

#[tokio::test]
async fn a_tenant_cannot_store_an_annotation_for_later() {
    let server = TestServer::start().await;
    let client = server.client().await;
    // A clean object: nothing for the policy to find, but a stored annotation would count on
    // every later UPDATE, so the enforce policy refuses it.
    let clean = review(VALIDATE, Some(true), Some("for later"), tenant());
    let r = send(&client, "/validate", &clean).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert!(message(&r).contains(NOT_APPLIED), "{r}");
    // The same write by a cluster admin is admitted, and so is the tenant's write without it.
    let r = send(
        &client,
        "/validate",
        &review(VALIDATE, Some(true), Some("for later"), admin()),
    )
    .await;
    assert_eq!(r["allowed"], true, "{r}");
    let r = send(
        &client,
        "/validate",
        &review(VALIDATE, Some(true), None, tenant()),
    )
    .await;
    assert_eq!(r["allowed"], true, "{r}");
    // An empty reason is no exemption at all, and nothing to refuse.
    let r = send(
        &client,
        "/validate",
        &review(VALIDATE, Some(true), Some("  "), tenant()),
    )
    .await;
    assert_eq!(r["allowed"], true, "{r}");
}

#[tokio::test]
async fn mutation_still_applies_under_an_annotation_that_does_not_count() {
    let server = TestServer::start().await;
    let client = server.client().await;
    // Serial calls missing: the mutating webhook adds them unless the object is exempt.
    let r = send(
        &client,
        "/mutate",
        &review(MUTATE, None, Some("x"), tenant()),
    )
    .await;
    assert_eq!(r["allowed"], true, "mutation fails open: {r}");
    assert!(r["patch"].is_string(), "the policy applies: {r}");
    let r = send(
        &client,
        "/mutate",
        &review(MUTATE, None, Some("x"), admin()),
    )
    .await;
    assert_eq!(r["allowed"], true, "{r}");
    assert!(r.get("patch").is_none_or(Value::is_null), "exempt: {r}");
}

/// `stackgate audit`'s evaluation of a stored object (an UPDATE of itself, no requester).
fn audit_items(
    set: PolicySet,
    annotation: Option<&str>,
) -> Vec<(ItemKind, Option<&'static str>, String)> {
    let object =
        review(VALIDATE, Some(false), annotation, Value::Null)["request"]["object"].clone();
    let object: DynamicObject = serde_json::from_value(object).expect("object");
    let gvk = GroupVersionKind::gvk("helm.toolkit.fluxcd.io", "v2", "HelmRelease");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "helmreleases");
    let (result, _) = stackgate::audit::evaluate_update(&Engine::new(set), &ar, &gvk, &object);
    result
        .items
        .into_iter()
        .map(|i| (i.kind, i.code, i.message))
        .collect()
}

#[test]
fn audit_reports_an_annotation_as_unverified_and_applies_the_policy() {
    let items = audit_items(PolicySet::embedded().unwrap(), Some("CHG-42"));
    let kinds: Vec<_> = items.iter().map(|(k, c, _)| (*k, *c)).collect();
    assert!(
        kinds.contains(&(ItemKind::Denial, Some("false"))),
        "the policy applies: {items:?}"
    );
    assert!(
        kinds.contains(&(ItemKind::Warning, Some("exemption-unverified"))),
        "{items:?}"
    );
    assert!(
        !kinds.iter().any(|(k, _)| *k == ItemKind::Exemption),
        "{items:?}"
    );

    // With `unverified: honour` the annotation exempts, named as unverified.
    let mut set = PolicySet::embedded().unwrap();
    for p in &mut set.policies {
        if let Some(a) = p.exemptions.annotation.as_mut() {
            a.unverified = Some(stackgate::policy::Unverified::Honour);
        }
    }
    let items = audit_items(set, Some("CHG-42"));
    assert!(
        items
            .iter()
            .all(|(k, _, _)| !matches!(k, ItemKind::Denial | ItemKind::Warning)),
        "{items:?}"
    );
    let exemption = items
        .iter()
        .find(|(k, _, _)| *k == ItemKind::Exemption)
        .unwrap_or_else(|| panic!("{items:?}"));
    assert!(exemption.2.contains("unverified"), "{exemption:?}");
    assert!(exemption.2.contains("CHG-42"), "{exemption:?}");

    // Without the annotation: the denial alone.
    let items = audit_items(PolicySet::embedded().unwrap(), None);
    assert!(
        items
            .iter()
            .all(|(_, c, _)| *c != Some("exemption-unverified")),
        "{items:?}"
    );
}

/// The engine's verdict on `review`'s request (the webhook's Subject, in process).
fn verdict_of(engine: &Engine, review: &Value) -> stackgate::engine::Verdict {
    let review: kube::core::admission::AdmissionReview<DynamicObject> =
        serde_json::from_value(review.clone()).expect("review");
    let request: kube::core::admission::AdmissionRequest<DynamicObject> =
        review.try_into().expect("request");
    engine.evaluate(&stackgate::admission::subject_of(&request))
}

/// The report messages of `verdict`'s exemptions, as `check` and `audit` print them.
fn exemption_messages(verdict: &stackgate::engine::Verdict) -> Vec<String> {
    stackgate::report::verdict_items(verdict, |_| 1, 1, |_, _| {})
        .into_iter()
        .filter(|i| i.kind == ItemKind::Exemption)
        .map(|i| i.message)
        .collect()
}

#[test]
fn each_exemption_says_why_it_counted() {
    let engine = Engine::new(PolicySet::embedded().unwrap());
    let by_admin = verdict_of(
        &engine,
        &review(VALIDATE, Some(false), Some("CHG-1"), admin()),
    );
    assert_eq!(
        exemption_messages(&by_admin),
        [
            "exempted from policy serial-lb-api-calls by annotation (set by a user allowed to exempt): CHG-1"
        ]
    );
    let kept = verdict_of(
        &engine,
        &update(
            Some(false),
            Some("CHG-1"),
            Some(false),
            Some("CHG-1"),
            tenant(),
        ),
    );
    assert_eq!(
        exemption_messages(&kept),
        [
            "exempted from policy serial-lb-api-calls by annotation (kept from the stored object): CHG-1"
        ]
    );
    // A policy anyone may exempt from, judged without a requester.
    let mut open = PolicySet::embedded().unwrap();
    for p in &mut open.policies {
        if let Some(a) = p.exemptions.annotation.as_mut() {
            a.allowed_groups = vec![stackgate::policy::EVERY_USER_GROUP.to_owned()];
        }
    }
    let items = audit_items(open, Some("CHG-1"));
    let messages: Vec<&str> = items
        .iter()
        .filter(|(k, _, _)| *k == ItemKind::Exemption)
        .map(|(_, _, m)| m.as_str())
        .collect();
    assert_eq!(
        messages,
        ["exempted from policy serial-lb-api-calls by annotation (anyone may exempt): CHG-1"]
    );
}

#[test]
fn an_annotation_that_does_not_count_is_named_once() {
    let engine = Engine::new(PolicySet::embedded().unwrap());
    let v = verdict_of(&engine, &review(VALIDATE, Some(false), Some("x"), tenant()));
    let named: Vec<_> = v
        .denials
        .iter()
        .filter(|f| f.code == stackgate::engine::CODE_EXEMPTION_NOT_ALLOWED)
        .collect();
    assert_eq!(named.len(), 1, "{:?}", v.denials);
    assert_eq!(named[0].policy, "serial-lb-api-calls");
    assert_eq!(
        named[0].pointer(),
        Some("/metadata/annotations/stackgate.dev~1exempt.serial-lb-api-calls")
    );
    // Its hint does not tell the tenant to annotate; the policy's own denial names who may.
    assert!(
        !named[0].denial_text().contains("To exempt"),
        "{}",
        named[0].denial_text()
    );
    let own = v
        .denials
        .iter()
        .find(|f| f.code == "false")
        .expect("the policy's denial");
    assert!(
        own.denial_text()
            .contains("To exempt: have group system:masters annotate it with stackgate.dev/exempt.serial-lb-api-calls"),
        "{}",
        own.denial_text()
    );
}

#[test]
fn a_policy_that_is_off_or_out_of_scope_refuses_no_annotation() {
    let clean = review(VALIDATE, Some(true), Some("for later"), tenant());
    let mut off = PolicySet::embedded().unwrap();
    let mut scoped = off.clone();
    for p in &mut off.policies {
        if p.name == "serial-lb-api-calls" {
            p.mode = stackgate::policy::Mode::Off;
        }
    }
    for p in &mut scoped.policies {
        if p.name == "serial-lb-api-calls" {
            p.scope.exclude_namespaces = vec!["kube-system".to_owned()];
        }
    }
    for (what, set) in [("off", off), ("out of scope", scoped)] {
        let v = verdict_of(&Engine::new(set), &clean);
        assert!(v.denials.is_empty(), "{what}: {:?}", v.denials);
    }
    // The same review under the shipped set is refused (the cases above are not vacuous).
    let v = verdict_of(&Engine::new(PolicySet::embedded().unwrap()), &clean);
    assert!(!v.denials.is_empty());
}
