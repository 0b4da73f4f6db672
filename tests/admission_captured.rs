//! In-process tests of the admission adapter and engine with AdmissionReviews captured from a
//! real kube-apiserver (tests/fixtures/captured, see tests/fixtures/SOURCES.md).

use base64::Engine as _;
use serde_json::{Value, json};
use stackgate::admission::{Webhook, handle};
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;

const SERIAL_LINE: &str = "provider-requires-serial-api-calls";

fn fixture(rel: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/captured/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// The embedded policy set with only the serial-calls policy: the captured cloud.conf
/// carries `password=` inside a ConfigMap, which credential-placement rightly denies (tested
/// on its own below), and these tests are about the serial-calls behaviour.
fn engine() -> Engine {
    let mut set = PolicySet::embedded().expect("embedded policies load");
    set.policies.retain(|p| p.name == "serial-lb-api-calls");
    Engine::new(set)
}

fn full_engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

/// Posts `review` to the webhook in process and returns the response object.
fn review(engine: &Engine, webhook: Webhook, review: &Value) -> Value {
    let metrics = Metrics::new();
    let body = serde_json::to_vec(review).unwrap();
    let reply = handle(engine, webhook, &body, &metrics);
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let out: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(out["kind"], "AdmissionReview");
    assert_eq!(out["response"]["uid"], review["request"]["uid"]);
    out["response"].clone()
}

fn patch_of(response: &Value) -> Option<json_patch::Patch> {
    let b64 = response["patch"].as_str()?;
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    Some(serde_json::from_slice(&bytes).unwrap())
}

/// Applies the mutate response's patch to the review's object and returns the new review.
fn apply(review: &Value, response: &Value) -> Value {
    let patch = patch_of(response).expect("a patch");
    let mut out = review.clone();
    json_patch::patch(&mut out["request"]["object"], &patch).expect("patch applies");
    out
}

fn configmap_text(review: &Value) -> String {
    review["request"]["object"]["data"]["config"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn secret_text(review: &Value) -> String {
    let b64 = review["request"]["object"]["data"]["cloud.conf"]
        .as_str()
        .unwrap();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap(),
    )
    .unwrap()
}

fn warnings(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .map(|a| a.iter().map(|w| w.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn configmap_create_gets_exactly_one_line_added_and_reevaluation_is_clean() {
    let e = engine();
    let original = fixture("configmap/mutate-create-cloud-provider-config.json");
    let response = review(&e, Webhook::Mutate, &original);
    assert_eq!(response["allowed"], true);
    let patched = apply(&original, &response);

    // The patched object equals the original with one line inserted after the last
    // [LoadBalancer] entry, in the file's own `key=value` style.
    let before = configmap_text(&original);
    let anchor = "floating-network-id=80c9fc78-a2be-45d5-a85b-f17a6c98df92\n";
    let expected_text = before.replace(anchor, &format!("{anchor}{SERIAL_LINE}=true\n"));
    assert_ne!(before, expected_text);
    let mut expected = original.clone();
    expected["request"]["object"]["data"]["config"] = json!(expected_text);
    assert_eq!(patched, expected);
    assert!(warnings(&response)[0].contains("stackgate set [LoadBalancer]"));
    // The running CCM reads the config only at start: the warning says so.
    assert_eq!(
        warnings(&response).last().map(String::as_str),
        Some(stackgate::admission::CCM_RESTART_WARNING)
    );

    // Idempotent: the patched object gets no patch and no denial on either webhook.
    let again = review(&e, Webhook::Mutate, &patched);
    assert!(again.get("patch").is_none());
    let validated = review(&e, Webhook::Validate, &patched);
    assert_eq!(validated["allowed"], true);
    assert!(validated.get("warnings").is_none());
}

#[test]
fn configmap_validate_without_key_is_allowed_with_a_warning() {
    let e = engine();
    let response = review(
        &e,
        Webhook::Validate,
        &fixture("configmap/validate-create-cloud-provider-config.json"),
    );
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());
    let w = warnings(&response);
    assert_eq!(w.len(), 1);
    assert!(w[0].contains("is not set"), "{w:?}");
}

#[test]
fn explicit_false_is_denied_with_line_reason_and_exemption_hint() {
    let e = engine();
    let req = fixture("configmap/validate-update-cloud-provider-config-serial-false.json");
    let text = configmap_text(&req);
    let line = text
        .lines()
        .position(|l| l.contains(SERIAL_LINE))
        .expect("fixture has the key")
        + 1;
    let response = review(&e, Webhook::Validate, &req);
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    let message = response["status"]["message"].as_str().unwrap();
    for needle in [
        "ConfigMap openshift-config/cloud-provider-config",
        "data[\"config\"]",
        &format!("line {line}"),
        SERIAL_LINE,
        "409",
        "stackgate.dev/exempt.serial-lb-api-calls",
        "PR #2314",
    ] {
        assert!(message.contains(needle), "missing {needle:?} in {message}");
    }
    // The mutating webhook does not silently flip an explicit choice.
    let mutate = review(
        &e,
        Webhook::Mutate,
        &fixture("configmap/mutate-update-cloud-provider-config-serial-false.json"),
    );
    assert_eq!(mutate["allowed"], true);
    assert!(mutate.get("patch").is_none());
}

#[test]
fn dry_run_gets_the_same_verdict() {
    let e = engine();
    let mut req = fixture("configmap/validate-update-cloud-provider-config-serial-false.json");
    let wet = review(&e, Webhook::Validate, &req);
    req["request"]["dryRun"] = json!(true);
    let dry = review(&e, Webhook::Validate, &req);
    assert_eq!(wet["allowed"], dry["allowed"]);
    assert_eq!(wet["status"], dry["status"]);
}

#[test]
fn exemption_with_reason_admits_and_is_audited() {
    let e = engine();
    let mut req = fixture("configmap/validate-update-cloud-provider-config-serial-false.json");
    req["request"]["object"]["metadata"]["annotations"]["stackgate.dev/exempt.serial-lb-api-calls"] =
        json!("vendor provider CHG-1234 needs bulk create");
    let response = review(&e, Webhook::Validate, &req);
    assert_eq!(response["allowed"], true);
    assert_eq!(
        response["auditAnnotations"]["serial-lb-api-calls-exempted"],
        "vendor provider CHG-1234 needs bulk create"
    );
    // An empty reason is not an exemption.
    req["request"]["object"]["metadata"]["annotations"]["stackgate.dev/exempt.serial-lb-api-calls"] =
        json!("  ");
    assert_eq!(review(&e, Webhook::Validate, &req)["allowed"], false);
}

#[test]
fn server_side_apply_sequence_is_stable() {
    let e = engine();
    for step in [
        "ssa-1-apply-serial-true",
        "ssa-2-last-applied-annotation",
        "ssa-3-managedfields-migration",
        "ssa-4-reapply",
        "ssa-force-conflicts-noop",
        "ssa-noop",
    ] {
        for webhook in [Webhook::Mutate, Webhook::Validate] {
            let prefix = if webhook == Webhook::Mutate {
                "mutate"
            } else {
                "validate"
            };
            let req = fixture(&format!(
                "configmap/{prefix}-update-cloud-provider-config-{step}.json"
            ));
            let response = review(&e, webhook, &req);
            assert_eq!(response["allowed"], true, "{step}");
            assert!(response.get("patch").is_none(), "{step}");
            assert!(response.get("warnings").is_none(), "{step}: {response}");
        }
    }
}

#[test]
fn delete_is_admitted() {
    let e = engine();
    for f in [
        "configmap/mutate-delete-cloud-provider-config.json",
        "configmap/validate-delete-cloud-provider-config.json",
        "secret/mutate-delete-cloud-config-stringdata.json",
        "secret/validate-delete-cloud-config-stringdata.json",
    ] {
        let webhook = if f.contains("/mutate") {
            Webhook::Mutate
        } else {
            Webhook::Validate
        };
        let response = review(&e, webhook, &fixture(f));
        assert_eq!(response["allowed"], true, "{f}");
        assert!(response.get("patch").is_none(), "{f}");
    }
}

#[test]
fn secret_data_is_patched_in_base64_and_reevaluation_is_clean() {
    let e = engine();
    for f in [
        "secret/mutate-create-cloud-config-from-file.json",
        "secret/mutate-create-cloud-config-stringdata-from-stringdata.json",
    ] {
        let mut original = fixture(f);
        if f.contains("stringdata") {
            // Not a default site by name (cloud-config-stringdata): the label makes it one.
            original["request"]["object"]["metadata"]["labels"] =
                json!({"stackgate.dev/cloud-config": "cloud.conf"});
        }
        let response = review(&e, Webhook::Mutate, &original);
        let patched = apply(&original, &response);
        let before = secret_text(&original);
        let after = secret_text(&patched);
        let added: Vec<&str> = after
            .lines()
            .filter(|l| !before.lines().any(|b| b == *l))
            .collect();
        assert_eq!(added, vec![format!("{SERIAL_LINE}=true")], "{f}");
        assert_eq!(after.lines().count(), before.lines().count() + 1);
        let again = review(&e, Webhook::Mutate, &patched);
        assert!(again.get("patch").is_none(), "{f}");
        assert_eq!(review(&e, Webhook::Validate, &patched)["allowed"], true);
    }
    // Without name or label, a Secret is not a site and is left alone.
    let unlabelled = review(
        &e,
        Webhook::Mutate,
        &fixture("secret/mutate-create-cloud-config-stringdata-from-stringdata.json"),
    );
    assert!(unlabelled.get("patch").is_none());
    let replaced = review(
        &e,
        Webhook::Mutate,
        &fixture("secret/mutate-update-cloud-config-replace-serial-true.json"),
    );
    assert!(replaced.get("patch").is_none());
}

#[test]
fn invalid_base64_in_a_secret_is_denied_without_echoing_it() {
    let e = engine();
    let mut req = fixture("secret/validate-create-cloud-config-from-file.json");
    req["request"]["object"]["data"]["cloud.conf"] = json!("%%%fake-password%%%");
    let response = review(&e, Webhook::Validate, &req);
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("is not valid base64"), "{message}");
    assert!(!message.contains("fake-password"));
    // The mutating webhook admits it unchanged (it cannot edit what it cannot read).
    req["request"]["uid"] = json!("other");
    let mutate = review(&e, Webhook::Mutate, &req);
    assert_eq!(mutate["allowed"], true);
    assert!(mutate.get("patch").is_none());
}

#[test]
fn ini_that_gcfg_rejects_is_denied_with_its_line() {
    let e = engine();
    let mut req = fixture("configmap/validate-create-cloud-provider-config.json");
    req["request"]["object"]["data"]["config"] =
        json!("[Global]\nregion=RegionOne\nauth_url=http://x\n");
    let response = review(&e, Webhook::Validate, &req);
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("line 3"), "{message}");
    assert!(message.contains("fail to start"), "{message}");
}

#[test]
fn v1beta1_review_gets_a_clear_refusal() {
    let e = engine();
    let mut req = fixture("configmap/validate-create-cloud-provider-config.json");
    req["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let metrics = Metrics::new();
    let reply = handle(
        &e,
        Webhook::Validate,
        &serde_json::to_vec(&req).unwrap(),
        &metrics,
    );
    assert_eq!(reply.status, 200);
    let out: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(out["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(out["response"]["allowed"], false);
    assert!(
        out["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("admissionReviewVersions")
    );
}

#[test]
fn bodies_that_are_not_reviews_get_400_with_a_clear_message() {
    let e = engine();
    let metrics = Metrics::new();
    let good = serde_json::to_vec(&fixture(
        "configmap/validate-create-cloud-provider-config.json",
    ))
    .unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated",
            good[..good.len() / 2].to_vec(),
            "truncated JSON",
        ),
        ("not json", b"hello".to_vec(), "not valid JSON"),
        ("non-utf8", vec![0xff, 0xfe, 0x00, 0x7b], "not valid JSON"),
        (
            "no request",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            "without a request",
        ),
        (
            "wrong shape",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}"#
                .to_vec(),
            "shape",
        ),
    ];
    for (name, body, needle) in cases {
        let reply = handle(&e, Webhook::Validate, &body, &metrics);
        assert_eq!(reply.status, 400, "{name}");
        let out: Value = serde_json::from_slice(&reply.body).unwrap();
        let msg = out["error"].as_str().unwrap();
        assert!(msg.contains(needle), "{name}: {msg}");
    }
    // A readable uid with an unreadable rest still gets a 200 review that refuses it.
    let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","kind":5}}"#;
    let reply = handle(&e, Webhook::Validate, body, &metrics);
    assert_eq!(reply.status, 200);
    let out: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(out["response"]["uid"], "u-1");
    assert_eq!(out["response"]["allowed"], false);
    // Metrics counted the invalid ones.
    assert!(metrics.encode().contains("decision=\"invalid\""));
}

#[test]
fn secret_values_never_reach_messages_warnings_or_audit_annotations() {
    let e = engine();
    let secret_b64 = base64::engine::general_purpose::STANDARD.encode("fake-password");
    let mut reviews = Vec::new();
    for f in [
        "secret/validate-create-cloud-config-from-file.json",
        "secret/mutate-create-cloud-config-from-file.json",
        "configmap/validate-update-cloud-provider-config-serial-false.json",
        "configmap/mutate-create-cloud-provider-config.json",
    ] {
        let req = fixture(f);
        reviews.push((f.to_owned(), req.clone()));
        // Also a variant where the serial value is false inside a Secret.
        if f.starts_with("secret/") {
            let mut bad = req.clone();
            let text = secret_text(&req).replace(
                "[LoadBalancer]\n",
                "[LoadBalancer]\nprovider-requires-serial-api-calls=off\n",
            );
            bad["request"]["object"]["data"]["cloud.conf"] =
                json!(base64::engine::general_purpose::STANDARD.encode(text));
            reviews.push((format!("{f} (serial off)"), bad));
        }
    }
    for (name, req) in reviews {
        for webhook in [Webhook::Mutate, Webhook::Validate] {
            let response = review(&e, webhook, &req);
            let mut visible = response.clone();
            if let Some(obj) = visible.as_object_mut() {
                obj.remove("patch");
            }
            let text = visible.to_string();
            assert!(!text.contains("fake-password"), "{name}: {text}");
            assert!(!text.contains(&secret_b64), "{name}");
        }
    }
}

#[test]
fn default_policies_deny_the_captured_configmap_for_its_inline_password() {
    let response = review(
        &full_engine(),
        Webhook::Validate,
        &fixture("configmap/validate-create-cloud-provider-config.json"),
    );
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("[Global] password holds a credential"),
        "{message}"
    );
    assert!(message.contains("line 8"), "{message}");
    assert!(!message.contains("fake-password"));
    // The Secret with the same text is fine.
    let secret = review(
        &full_engine(),
        Webhook::Validate,
        &fixture("secret/validate-update-cloud-config-replace-serial-true.json"),
    );
    assert_eq!(secret["allowed"], true, "{secret}");
}

/// The captured UPDATE (`kubectl apply` over an existing ConfigMap) with the serial line
/// taken out of the new object: `provider-requires-serial-api-calls = false` removed.
fn update_without_serial_key() -> Value {
    let mut req = fixture("configmap/mutate-update-cloud-provider-config-serial-false.json");
    assert_eq!(req["request"]["operation"], "UPDATE");
    let text = configmap_text(&req);
    let without: String = text
        .lines()
        .filter(|l| !l.contains(SERIAL_LINE))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(text, without, "the fixture had the key");
    req["request"]["object"]["data"]["config"] = json!(without);
    req
}

#[test]
fn update_without_the_key_is_patched_and_the_patched_object_is_clean() {
    // The serial-only engine on the text as captured, and the full default set on the same
    // text without its inline password (which credential-placement denies on its own).
    let without_password = {
        let mut req = update_without_serial_key();
        let text = configmap_text(&req).replace("password=fake-password\n", "");
        req["request"]["object"]["data"]["config"] = json!(text);
        req
    };
    for (name, e, original) in [
        ("serial policy", engine(), update_without_serial_key()),
        ("default policies", full_engine(), without_password),
    ] {
        let response = review(&e, Webhook::Mutate, &original);
        assert_eq!(response["allowed"], true, "{name}");
        let patch = patch_of(&response).unwrap_or_else(|| panic!("{name}: no patch: {response}"));
        assert_eq!(patch.0.len(), 1, "{name}: one operation: {patch:?}");
        let patched = apply(&original, &response);
        let before = configmap_text(&original);
        let after = configmap_text(&patched);
        assert_eq!(after.lines().count(), before.lines().count() + 1, "{name}");
        assert_eq!(
            after.lines().filter(|l| l.starts_with(SERIAL_LINE)).count(),
            1,
            "{name}: {after}"
        );
        // Nothing else in the review changed (oldObject, metadata, other keys).
        let mut expected = original.clone();
        expected["request"]["object"]["data"]["config"] = json!(after);
        assert_eq!(patched, expected, "{name}");

        // Idempotent: the patched object put back gets no patch and no denial.
        let again = review(&e, Webhook::Mutate, &patched);
        assert_eq!(again["allowed"], true, "{name}");
        assert!(again.get("patch").is_none(), "{name}: {again}");
        let validated = review(&e, Webhook::Validate, &patched);
        assert_eq!(validated["allowed"], true, "{name}: {validated}");
        assert!(validated.get("warnings").is_none(), "{name}: {validated}");
    }
}

#[test]
fn dry_run_mutation_gets_the_identical_patch() {
    let e = engine();
    for original in [
        update_without_serial_key(),
        fixture("configmap/mutate-create-cloud-provider-config.json"),
    ] {
        let wet = review(&e, Webhook::Mutate, &original);
        let mut dry_req = original.clone();
        dry_req["request"]["dryRun"] = json!(true);
        let dry = review(&e, Webhook::Mutate, &dry_req);
        assert!(wet["patch"].is_string(), "{wet}");
        assert_eq!(dry["patch"], wet["patch"]);
        assert_eq!(dry["patchType"], wet["patchType"]);
        assert_eq!(dry["allowed"], wet["allowed"]);
        assert_eq!(dry["warnings"], wet["warnings"]);
    }
}

/// The captured ConfigMap review rewritten to the OpenShift operator-managed copy
/// `openshift-cloud-controller-manager/cloud-conf` (key `cloud.conf`), holding `text`.
fn operator_copy(rel: &str, text: &str) -> Value {
    let mut req = fixture(rel);
    let r = &mut req["request"];
    r["namespace"] = json!("openshift-cloud-controller-manager");
    r["name"] = json!("cloud-conf");
    r["object"]["metadata"]["namespace"] = json!("openshift-cloud-controller-manager");
    r["object"]["metadata"]["name"] = json!("cloud-conf");
    r["object"]["data"] = json!({ "cloud.conf": text });
    req
}

#[test]
fn operator_managed_copy_is_validated_but_never_patched() {
    let captured = configmap_text(&fixture(
        "configmap/mutate-create-cloud-provider-config.json",
    ));
    assert!(!captured.contains(SERIAL_LINE));
    for e in [engine(), full_engine()] {
        // Missing key: no patch (the operator would overwrite it; the source is patched).
        let mutate = review(
            &e,
            Webhook::Mutate,
            &operator_copy(
                "configmap/mutate-create-cloud-provider-config.json",
                &captured,
            ),
        );
        assert_eq!(mutate["allowed"], true, "{mutate}");
        assert!(mutate.get("patch").is_none(), "{mutate}");
        assert!(mutate.get("patchType").is_none(), "{mutate}");
    }
    // The same copy as the source ConfigMap is patched: the site list, not the text, decides.
    let source = review(
        &engine(),
        Webhook::Mutate,
        &fixture("configmap/mutate-create-cloud-provider-config.json"),
    );
    assert!(source["patch"].is_string(), "{source}");

    // An explicit false is still denied, naming the copy, its key and line, and the source.
    let with_false = captured.replace(
        "[LoadBalancer]\n",
        &format!("[LoadBalancer]\n{SERIAL_LINE} = false\n"),
    );
    let line = with_false
        .lines()
        .position(|l| l.starts_with(SERIAL_LINE))
        .expect("inserted")
        + 1;
    for (name, e) in [
        ("serial policy", engine()),
        ("default policies", full_engine()),
    ] {
        let validate = review(
            &e,
            Webhook::Validate,
            &operator_copy(
                "configmap/validate-create-cloud-provider-config.json",
                &with_false,
            ),
        );
        assert_eq!(validate["allowed"], false, "{name}: {validate}");
        let message = validate["status"]["message"].as_str().unwrap_or_default();
        let serial = message
            .split("\n\n")
            .find(|m| m.contains("Policy serial-lb-api-calls,"))
            .unwrap_or_else(|| panic!("{name}: no serial denial: {message}"));
        for needle in [
            "ConfigMap openshift-cloud-controller-manager/cloud-conf",
            "data[\"cloud.conf\"]",
            &format!("line {line}"),
            "set to a false value",
            "openshift-config/cloud-provider-config",
        ] {
            assert!(
                serial.contains(needle),
                "{name}: {needle:?} not in {serial}"
            );
        }
        // /mutate on the same review: admitted, unchanged.
        let mutate = review(
            &e,
            Webhook::Mutate,
            &operator_copy(
                "configmap/mutate-create-cloud-provider-config.json",
                &with_false,
            ),
        );
        assert_eq!(mutate["allowed"], true, "{name}");
        assert!(mutate.get("patch").is_none(), "{name}: {mutate}");
    }
}
