//! The properties the fuzz targets check, shared by `fuzz/fuzz_targets/*.rs` (libFuzzer) and
//! `tests/fuzz_corpus.rs` (every committed corpus file, as an ordinary test), both of which
//! include this file with `#[path]`. Each function takes the raw fuzz input and panics when
//! a property does not hold.
//!
//! * [`cloudconf_roundtrip`]: parse → serialize is byte-identical; every view of the
//!   document and the CCM schema check work; a parse error has a position.
//! * [`cloudconf_edit`]: parse → `set` → parse: the edit is accepted for any gcfg name and
//!   representable value, reads back as set, changes no other variable, and is idempotent.
//! * [`review`]: any bytes posted to `/mutate` and `/validate` get 200 + AdmissionReview
//!   or 400 + `{"error"}`; mutate never denies an evaluated review, validate never
//!   patches; a patch applies to the object and the patched object needs no further patch.
//! * [`review_cloudconf`]: the same for any text as the cloud config of the ConfigMap and
//!   Secret sites (`data` and `stringData`), which reaches the rules far more often than
//!   raw JSON does.

#![allow(dead_code)] // Each fuzz target uses one of these.

use base64::Engine as _;
use serde_json::{Value, json};
use stackgate::admission::{self, Reply, Webhook};
use stackgate::cloudconf::{self, Document, EditKind, eq_fold};
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;

/// The engine with the embedded default policies, built once.
fn engine() -> &'static Engine {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| Engine::new(PolicySet::embedded().expect("embedded policies load")))
}

// ---------------------------------------------------------------------------------------
// cloudconf

/// Parse → serialize round trip, views and schema check on any UTF-8 text.
pub fn cloudconf_roundtrip(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Document::parse(text) {
        Ok(doc) => {
            assert_eq!(doc.as_str(), text, "parse keeps every byte");
            assert_eq!(doc.to_text(), text, "serialize is byte-identical");
            let lines = text.split('\n').count();
            for e in doc.entries() {
                assert!(e.line >= 1 && e.line <= e.last_line && e.last_line <= lines);
                assert!(e.section_line >= 1 && e.section_line <= e.line);
                assert!(e.column >= 1);
                assert_eq!(e.raw_value.is_some(), e.value.is_some());
                assert!(!e.key.is_empty());
                // The effective entry of every key is one of its occurrences.
                let eff = doc.effective(e.section, e.subsection, e.key);
                assert!(eff.is_some_and(|f| eq_fold(f.key, e.key) && f.line >= e.line));
            }
            for s in doc.sections() {
                assert!(s.line >= 1 && s.line <= lines && !s.name.is_empty());
            }
            let report = cloudconf::check(&doc);
            assert_eq!(cloudconf::would_start(text), report.starts());
            for p in &report.fatal {
                assert!(p.line >= 1 && p.line <= lines);
            }
            // Debug output is redacted: it never carries a value.
            let _ = format!("{doc:?}");
        }
        Err(e) => {
            assert!(e.line >= 1 && e.column >= 1, "error has a position: {e}");
            assert!(e.line <= text.split('\n').count());
            assert!(!cloudconf::would_start(text));
        }
    }
}

/// Sections the edit target writes to (case variants and one that does not exist).
const EDIT_SECTIONS: &[&str] = &[
    "LoadBalancer",
    "Global",
    "loadbalancer",
    "Route",
    "Stackgate-New",
];
/// Keys the edit target sets.
const EDIT_KEYS: &[&str] = &[
    "provider-requires-serial-api-calls",
    "use-octavia",
    "lb-method",
    "region",
    "PASSWORD",
];
/// Values: safe literals and every kind that needs quoting.
const EDIT_VALUES: &[&str] = &[
    "true",
    "false",
    "",
    "SOURCE_IP_PORT",
    "a b",
    "x;y",
    "x#y",
    "\"quoted\"",
    "back\\slash",
    "tab\tvalue",
    " lead",
    "trail ",
    "two\nlines",
    "é中",
    "5s",
    "=",
    "[x]",
];

/// Parse → edit → parse. Input: byte 0 picks the section and key, byte 1 the value (or,
/// above the table, the value is the input's last line), the rest is the document.
pub fn cloudconf_edit(data: &[u8]) {
    let [pick, value_pick, rest @ ..] = data else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(mut doc) = Document::parse(text) else {
        return;
    };
    let section = EDIT_SECTIONS[usize::from(*pick) % EDIT_SECTIONS.len()];
    let key = EDIT_KEYS[usize::from(*pick / 8) % EDIT_KEYS.len()];
    let value = match EDIT_VALUES.get(usize::from(*value_pick)) {
        Some(v) => (*v).to_owned(),
        None => text.rsplit('\n').next().unwrap_or_default().to_owned(),
    };
    if value.contains(['\r', '\0']) {
        return; // Documented as unrepresentable.
    }
    let before_entries = doc.entries().count();
    let others = |d: &Document| -> Vec<(String, Option<String>, String, Option<String>)> {
        d.entries()
            .filter(|e| {
                !(eq_fold(e.section, section) && e.subsection.is_none() && eq_fold(e.key, key))
            })
            .map(|e| {
                (
                    e.section.to_owned(),
                    e.subsection.map(str::to_owned),
                    e.key.to_owned(),
                    e.value,
                )
            })
            .collect()
    };
    let others_before = others(&doc);

    let summary = doc
        .try_set(section, key, &value)
        .unwrap_or_else(|e| panic!("set [{section}] {key} refused: {e:?}"));
    let after = doc.to_text();
    assert!(summary.line > 0);
    if !summary.changed {
        assert_eq!(after, text, "an unchanged edit writes nothing");
    }
    let reparsed = Document::parse(&after).expect("the edited text parses");
    let effective = reparsed.effective(section, None, key);
    assert_eq!(
        effective.as_ref().and_then(|e| e.value.clone()),
        Some(value.clone()),
        "the value reads back"
    );
    assert_eq!(effective.map(|e| e.line), Some(summary.line));
    let added = usize::from(summary.kind != EditKind::Replaced);
    assert_eq!(reparsed.entries().count(), before_entries + added);
    assert_eq!(
        others(&reparsed),
        others_before,
        "no other variable changes"
    );
    let again = doc.set(section, key, &value);
    assert!(!again.changed, "the edit is idempotent");
    assert_eq!(doc.to_text(), after);
}

// ---------------------------------------------------------------------------------------
// reviews

/// Checks one answer; returns the AdmissionReview `response` when there is one.
fn check_reply(webhook: Webhook, reply: &Reply) -> Option<Value> {
    let value: Value = serde_json::from_slice(&reply.body).expect("every answer is JSON");
    match reply.status.as_u16() {
        200 => {}
        400 => {
            assert!(value["error"].is_string(), "400 carries an error: {value}");
            return None;
        }
        other => panic!("unexpected status {other}: {value}"),
    }
    let response = value.get("response").cloned().expect("200 is a review");
    assert!(response["uid"].is_string(), "the uid is echoed");
    let allowed = response["allowed"].as_bool().expect("allowed is a bool");
    // 400 in the status: a review that could not be evaluated (v1beta1, wrong shape).
    let evaluated = response["status"]["code"].as_u64() != Some(400);
    match webhook {
        Webhook::Validate => assert!(response.get("patch").is_none(), "validate never patches"),
        Webhook::Mutate if evaluated => assert!(allowed, "mutate never denies: {response}"),
        Webhook::Mutate => assert!(response.get("patch").is_none()),
    }
    Some(response)
}

/// The JSON Patch in a mutate response.
fn patch_of(response: &Value) -> Option<Vec<json_patch::PatchOperation>> {
    let encoded = response.get("patch")?.as_str().expect("patch is base64");
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("patch is valid base64");
    Some(serde_json::from_slice(&bytes).expect("patch is a JSON Patch"))
}

/// Posts `body` to both webhooks; when mutate patches, applies the patch to the object and
/// checks that the patched review needs no further patch (idempotence).
fn review_both(body: &[u8]) {
    let metrics = Metrics::new();
    let _ = check_reply(
        Webhook::Validate,
        &admission::handle(engine(), Webhook::Validate, body, &metrics),
    );
    let Some(response) = check_reply(
        Webhook::Mutate,
        &admission::handle(engine(), Webhook::Mutate, body, &metrics),
    ) else {
        return;
    };
    let Some(patch) = patch_of(&response) else {
        return;
    };
    let Ok(mut review) = serde_json::from_slice::<Value>(body) else {
        // The typed decode skips unknown fields without validating them (invalid UTF-8 in
        // an unknown field is accepted, as it should be); such a body has no JSON tree to
        // apply the patch to.
        return;
    };
    let object = review
        .pointer_mut("/request/object")
        .expect("a patched review has an object");
    json_patch::patch(object, &patch).expect("the patch applies to the object");
    let patched = serde_json::to_vec(&review).expect("serialize");
    let again = admission::handle(engine(), Webhook::Mutate, &patched, &metrics);
    let again = check_reply(Webhook::Mutate, &again).expect("the patched review is answered");
    assert!(
        again.get("patch").is_none(),
        "the patched object needs no further patch: {:?}",
        patch_of(&again)
    );
}

/// Any bytes as a review body.
pub fn review(data: &[u8]) {
    review_both(data);
}

/// A CREATE review of `object` (kind from `object`).
fn review_of(object: Value, resource: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-4000-8000-000000000000",
            "kind": {"group": "", "version": "v1", "kind": object["kind"]},
            "resource": {"group": "", "version": "v1", "resource": resource},
            "requestKind": {"group": "", "version": "v1", "kind": object["kind"]},
            "requestResource": {"group": "", "version": "v1", "resource": resource},
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "fuzz"},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// Any UTF-8 text as the cloud config of the three site shapes.
pub fn review_cloudconf(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let configmap = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cloud-provider-config", "namespace": "openshift-config"},
        "data": {"config": text}
    });
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "cloud-config", "namespace": "kube-system"},
        "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(text)}
    });
    let string_data = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "cloud-config", "namespace": "kube-system"},
        "stringData": {"cloud.conf": text}
    });
    for review in [
        review_of(configmap, "configmaps"),
        review_of(secret, "secrets"),
        review_of(string_data, "secrets"),
    ] {
        review_both(&serde_json::to_vec(&review).expect("serialize"));
    }
}
