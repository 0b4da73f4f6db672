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

// ---------------------------------------------------------------------------------------
// YAML values strings and structured values

/// A CREATE review of `object` of the API group/version `gv` and `resource`.
fn review_of_gv(object: Value, group: &str, version: &str, resource: &str) -> Value {
    let mut review = review_of(object, resource);
    for field in ["kind", "requestKind"] {
        review["request"][field]["group"] = json!(group);
        review["request"][field]["version"] = json!(version);
    }
    for field in ["resource", "requestResource"] {
        review["request"][field]["group"] = json!(group);
        review["request"][field]["version"] = json!(version);
    }
    review
}

/// Nodes of a JSON value (every value and every object key).
fn json_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(items) => items.iter().map(json_nodes).sum(),
        Value::Object(m) => m.values().map(|v| 1 + json_nodes(v)).sum(),
        _ => 0,
    }
}

const SERIAL_PATH: [&str; 3] = [
    "cloudConfig",
    "loadBalancer",
    "provider-requires-serial-api-calls",
];

/// Any UTF-8 text as a YAML stream and as a Helm values string.
///
/// The YAML reader never panics; an error has a position inside the text and names its cap
/// when a cap refused it; a stream it reads converts to JSON no larger than the node caps
/// allow (aliases expanded). The minimal editor's answer reads back as intended. As the
/// `valuesContent` of an RKE2 HelmChart and the `helm.values` of an Argo CD Application, the
/// text gets the same answers as in [`review`].
pub fn yaml_values(data: &[u8]) {
    use stackgate::yaml::edit::{self as yamledit, Change};
    use stackgate::yaml::{self, Limit, MAX_ALIAS_NODES, MAX_NODES, Seg};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // YAML line breaks: LF, CRLF and a lone CR (YAML 1.2 5.4, as go-yaml counts them).
    let lines = text.replace("\r\n", "\n").split(['\n', '\r']).count();
    match yaml::parse_stream(text) {
        Err(e) => {
            assert!(e.line >= 1 && e.column >= 1, "error has a position: {e}");
            assert!(e.line <= lines + 1, "error line inside the text: {e}");
            if let Some(limit) = e.limit {
                let name = match limit {
                    Limit::Nodes => "node cap",
                    Limit::AliasExpansion => "alias expansion cap",
                    Limit::Depth => "depth cap",
                };
                assert!(e.message.contains(name), "a cap names itself: {e}");
            }
        }
        Ok(docs) => {
            for d in &docs {
                assert!(d.root.start.line >= 1 && d.root.start.line <= lines + 1);
                match d.root.to_json() {
                    Ok(v) => assert!(json_nodes(&v) <= 2 * (MAX_NODES + MAX_ALIAS_NODES)),
                    Err(e) => assert!(e.line >= 1 && e.line <= lines + 1, "{e}"),
                }
            }
            // One minimal edit, verified by the editor; check it independently.
            let first = docs.first().map(|d| d.root.to_json());
            if let Some(Ok(Value::Object(_))) | None = first {
                let path: Vec<Seg> = SERIAL_PATH.iter().map(|k| Seg::key(k)).collect();
                let change = Change::Set {
                    path,
                    value: json!(true),
                };
                if let Ok(edited) = yamledit::apply(text, 0, &change) {
                    let docs = yaml::parse_stream(&edited).expect("an edit parses");
                    let root = match docs.first() {
                        Some(d) => d.root.to_json().expect("an edit converts"),
                        None => Value::Null,
                    };
                    assert_eq!(
                        root.pointer(
                            "/cloudConfig/loadBalancer/provider-requires-serial-api-calls"
                        ),
                        Some(&json!(true)),
                        "the edit reads back"
                    );
                    // Setting it again changes nothing.
                    assert_eq!(
                        yamledit::apply(&edited, 0, &change).as_deref(),
                        Ok(&*edited)
                    );
                }
            }
        }
    }
    let helmchart = json!({
        "apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"chart": "openstack-cloud-controller-manager", "bootstrap": true,
                 "targetNamespace": "kube-system", "valuesContent": text}
    });
    let application = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "occm", "namespace": "argocd"},
        "spec": {"project": "default",
                 "destination": {"namespace": "kube-system", "server": "https://kubernetes.default.svc"},
                 "source": {"chart": "openstack-cloud-controller-manager",
                            "repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                            "targetRevision": "2.31.1",
                            "helm": {"values": text}}}
    });
    for review in [
        review_of_gv(helmchart, "helm.cattle.io", "v1", "helmcharts"),
        review_of_gv(application, "argoproj.io", "v1alpha1", "applications"),
    ] {
        review_both(&serde_json::to_vec(&review).expect("serialize"));
    }
}

/// Builds a JSON value from bytes: a small stack machine that reaches deep and wide shapes
/// quickly (the first bytes of an input choose the structure, the rest fills it).
fn values_from_bytes(data: &[u8]) -> Value {
    // Names the chart reads, so structure lands where the rules look.
    const KEYS: &[&str] = &[
        "cloudConfig",
        "loadBalancer",
        "global",
        "provider-requires-serial-api-calls",
        "controllerExtraArgs",
        "secret",
        "enabled",
        "<<",
        "",
        "x",
    ];
    enum Open {
        Map(serde_json::Map<String, Value>, String),
        Seq(Vec<Value>),
    }
    let mut stack: Vec<Open> = vec![Open::Map(serde_json::Map::new(), "cloudConfig".into())];
    let push = |stack: &mut Vec<Open>, v: Value| match stack.last_mut() {
        Some(Open::Map(m, k)) => {
            m.insert(k.clone(), v);
        }
        Some(Open::Seq(items)) => items.push(v),
        None => {}
    };
    let mut counter = 0u32;
    for &b in data {
        match b % 8 {
            0 => stack.push(Open::Map(serde_json::Map::new(), "x".into())),
            1 => stack.push(Open::Seq(Vec::new())),
            2 | 3 if stack.len() > 1 => {
                let v = match stack.pop() {
                    Some(Open::Map(m, _)) => Value::Object(m),
                    Some(Open::Seq(items)) => Value::Array(items),
                    None => Value::Null,
                };
                push(&mut stack, v);
            }
            4 => {
                if let Some(Open::Map(_, k)) = stack.last_mut() {
                    *k = KEYS[(b as usize / 8) % KEYS.len()].to_owned();
                }
            }
            5 => {
                counter += 1;
                if let Some(Open::Map(_, k)) = stack.last_mut() {
                    *k = format!("k{counter}");
                }
            }
            6 => push(&mut stack, json!(b % 3 == 0)),
            _ => push(&mut stack, json!(format!("v{}", b / 8))),
        }
    }
    while stack.len() > 1 {
        let v = match stack.pop() {
            Some(Open::Map(m, _)) => Value::Object(m),
            Some(Open::Seq(items)) => Value::Array(items),
            None => Value::Null,
        };
        push(&mut stack, v);
    }
    match stack.pop() {
        Some(Open::Map(m, _)) => Value::Object(m),
        _ => Value::Null,
    }
}

/// Deep and wide structured values: the bytes build a JSON value (see
/// [`values_from_bytes`]), sent as a Flux HelmRelease's `spec.values` and an Argo CD
/// Application's `helm.valuesObject`; the answers are checked as in [`review`].
pub fn review_values(data: &[u8]) {
    let values = values_from_bytes(data);
    let helmrelease = json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager",
                                    "sourceRef": {"kind": "HelmRepository", "name": "cpo"}}},
                 "interval": "10m", "values": values}
    });
    let application = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "occm", "namespace": "argocd"},
        "spec": {"project": "default",
                 "destination": {"namespace": "kube-system", "server": "https://kubernetes.default.svc"},
                 "source": {"chart": "openstack-cloud-controller-manager",
                            "repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                            "targetRevision": "2.31.1",
                            "helm": {"valuesObject": values}}}
    });
    for review in [
        review_of_gv(helmrelease, "helm.toolkit.fluxcd.io", "v2", "helmreleases"),
        review_of_gv(application, "argoproj.io", "v1alpha1", "applications"),
    ] {
        // serde_json refuses to serialize nothing here, but a value nested deeper than its
        // recursion limit is only refused when read back: that is the webhook's business.
        review_both(&serde_json::to_vec(&review).expect("serialize"));
    }
}
