//! Engine tests of the release-annotations rule over release snapshots: Glance reviews
//! captured from a real kube-apiserver (tests/fixtures/captured/glance) evaluated against
//! OpenStackVersion objects as the apiserver stored them (tests/fixtures/captured/
//! openstackversion) or built from them. See tests/fixtures/SOURCES.md.

use std::collections::BTreeMap;
use std::sync::Arc;

use json_patch::{Patch, PatchOperation};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use proptest::prelude::*;
use serde_json::{Value, json};
use stackgate::engine::{Engine, Verdict};
use stackgate::policy::PolicySet;
use stackgate::releases::{Snapshot, VersionState};

const WSGI: &str = "glance.openstack.org/wsgi";
const LOCATION: &str = "glance.openstack.org/location-api";
const CATALOG: &str = include_str!("../policies/release-catalog.yaml");

fn fixture(rel: &str) -> Value {
    let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// The release-annotations policy with `params` (YAML flow map) and `mode`, plus the
/// repository's release catalog.
fn policies(mode: &str, params: &str) -> PolicySet {
    let policy = format!(
        "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\nname: release-annotations\n\
         rule: release-annotations\nmode: {mode}\ndescription: d\nsource: s\nparams: {params}\n\
         exemptions:\n  annotation:\n    allowedGroups: [system:masters]\n"
    );
    PolicySet::from_files(
        vec![
            ("release-catalog.yaml".into(), CATALOG.into()),
            ("release-annotations.yaml".into(), policy),
        ],
        "test".into(),
    )
    .expect("policies load")
}

fn engine(snapshot: Snapshot, mode: &str, params: &str) -> Engine {
    Engine::with_releases(policies(mode, params), Arc::new(snapshot))
}

/// An OpenStackVersion object as the apiserver stores it (the captured status update).
fn captured_osv() -> Value {
    fixture("captured/openstackversion/validate-update-openstack-status-subresource.json")["request"]
        ["object"]
        .clone()
}

fn snapshot_of(objects: &[Value]) -> Snapshot {
    Snapshot::from_versions(objects.iter().map(|o| {
        let obj: DynamicObject = serde_json::from_value(o.clone()).expect("an object");
        VersionState::from_object(&obj).expect("an OpenStackVersion")
    }))
}

/// An OpenStackVersion in namespace `openstack` with the given spec/status fields.
fn osv(name: &str, target: &str, status: Value) -> Value {
    json!({
        "apiVersion": "core.openstack.org/v1beta1",
        "kind": "OpenStackVersion",
        "metadata": {"name": name, "namespace": "openstack"},
        "spec": {"targetVersion": target},
        "status": status,
    })
}

fn request(review: &Value) -> AdmissionRequest<DynamicObject> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(review.clone()).expect("an AdmissionReview");
    review.try_into().expect("a request")
}

/// The captured Glance CREATE (mutating call): annotations hold only last-applied.
fn glance_create() -> Value {
    fixture("captured/glance/mutate-create-glance.json")
}

/// The captured CREATE with its object's annotations replaced.
fn glance_create_with(annotations: Option<Value>) -> Value {
    let mut review = glance_create();
    let meta = &mut review["request"]["object"]["metadata"];
    match annotations {
        Some(a) => meta["annotations"] = a,
        None => {
            meta.as_object_mut().unwrap().remove("annotations");
        }
    }
    review
}

/// An UPDATE of the captured Glance from `old` annotations to `new` ones.
fn glance_update(old: Value, new: Value) -> Value {
    let mut review = fixture("captured/glance/validate-create-glance.json");
    let object = review["request"]["object"].clone();
    review["request"]["operation"] = json!("UPDATE");
    review["request"]["options"] = json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"});
    review["request"]["oldObject"] = object;
    review["request"]["oldObject"]["metadata"]["annotations"] = old;
    review["request"]["object"]["metadata"]["annotations"] = new;
    review
}

fn eval(engine: &Engine, review: &Value) -> Verdict {
    engine.evaluate(&stackgate::admission::subject_of(&request(review)))
}

/// The object after applying the verdict's patch.
fn patched(review: &Value, verdict: &Verdict) -> Value {
    let mut out = review.clone();
    json_patch::patch(&mut out["request"]["object"], &Patch(verdict.patch.clone()))
        .expect("patch applies");
    out
}

fn annotation(review: &Value, key: &str) -> Option<String> {
    review["request"]["object"]["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_owned)
}

/// openstack-operator internal/openstack/glance.go l.254-280, transcribed: "true" only when
/// the ServiceDefaults field is the string "true", otherwise "false".
fn operator_value(field: Option<&str>) -> &'static str {
    if field == Some("true") {
        "true"
    } else {
        "false"
    }
}

fn assert_clean(v: &Verdict) {
    assert!(v.patch.is_empty(), "{:?}", v.patch);
    assert!(v.denials.is_empty(), "{:?}", v.denials);
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
}

#[test]
fn live_glance_create_gets_exactly_the_operator_annotations_and_is_then_clean() {
    let stored = captured_osv();
    let e = engine(snapshot_of(std::slice::from_ref(&stored)), "enforce", "{}");
    let review = glance_create();
    let v = eval(&e, &review);
    assert!(v.denials.is_empty() && v.warnings.is_empty(), "{v:?}");
    // Exactly two adds, no `{}` (the object already has annotations), keys escaped.
    let paths: Vec<String> = v
        .patch
        .iter()
        .map(|op| match op {
            PatchOperation::Add(a) => a.path.to_string(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        paths,
        [
            "/metadata/annotations/glance.openstack.org~1wsgi",
            "/metadata/annotations/glance.openstack.org~1location-api"
        ]
    );
    let out = patched(&review, &v);
    let defaults = &stored["status"]["serviceDefaults"];
    assert_eq!(
        annotation(&out, WSGI).as_deref(),
        Some(operator_value(defaults["glanceWsgi"].as_str()))
    );
    assert_eq!(
        annotation(&out, LOCATION).as_deref(),
        Some(operator_value(defaults["glanceLocationAPI"].as_str()))
    );
    assert_eq!(annotation(&out, WSGI).as_deref(), Some("true"));
    assert_eq!(annotation(&out, LOCATION).as_deref(), Some("false"));
    // Nothing else changed.
    let mut before = review["request"]["object"].clone();
    let mut after = out["request"]["object"].clone();
    for o in [&mut before, &mut after] {
        let a = o["metadata"]["annotations"].as_object_mut().unwrap();
        a.remove(WSGI);
        a.remove(LOCATION);
    }
    assert_eq!(before, after);
    assert_eq!(v.mutations.len(), 2);
    assert!(
        v.mutations[0]
            .denial_text()
            .contains("OpenStackVersion openstack/openstack")
    );
    // Idempotent.
    assert_clean(&eval(&e, &out));
}

#[test]
fn object_without_annotations_gets_the_map_first() {
    let e = engine(snapshot_of(&[captured_osv()]), "enforce", "{}");
    let review = glance_create_with(None);
    let v = eval(&e, &review);
    let PatchOperation::Add(first) = &v.patch[0] else {
        panic!("{:?}", v.patch)
    };
    assert_eq!(first.path.to_string(), "/metadata/annotations");
    assert_eq!(first.value, json!({}));
    assert_eq!(v.patch.len(), 3);
    let out = patched(&review, &v);
    assert_eq!(
        out["request"]["object"]["metadata"]["annotations"],
        json!({WSGI: "true", LOCATION: "false"})
    );
    assert_clean(&eval(&e, &out));
}

#[test]
fn legacy_empty_service_defaults_give_false_like_the_operator() {
    // Initialized, but the target release has no ServiceDefaults entry: the operator uses an
    // empty struct and writes "false" for both.
    let o = osv(
        "openstack",
        "18.0.0",
        json!({"availableVersion": "18.0.1", "deployedVersion": "18.0.0",
               "availableServiceDefaults": {"18.0.1": {"glanceWsgi": "true"}}}),
    );
    let e = engine(snapshot_of(&[o]), "enforce", "{}");
    let review = glance_create();
    let v = eval(&e, &review);
    let out = patched(&review, &v);
    assert_eq!(annotation(&out, WSGI).as_deref(), Some("false"));
    assert_eq!(annotation(&out, LOCATION).as_deref(), Some("false"));
    // A missing wsgi annotation means WSGI to glance-operator: that contradicts the legacy
    // release, so it is reported too (fixed by the patch, a warning by default).
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    let w = &v.warnings[0];
    assert!(w.fixed_by_patch);
    assert!(
        w.denial_text()
            .contains("is missing, which the service operator reads as \"true\"")
    );
    assert!(w.denial_text().contains("contradicts the release"));
    assert_clean(&eval(&e, &out));
}

#[test]
fn update_in_progress_adds_the_deployed_value_and_accepts_both() {
    let o = osv(
        "openstack",
        "18.0.1",
        json!({"availableVersion": "18.0.1", "deployedVersion": "18.0.0",
               "serviceDefaults": {"glanceWsgi": "true"},
               "availableServiceDefaults": {"18.0.0": {"glanceWsgi": "false"},
                                            "18.0.1": {"glanceWsgi": "true"}}}),
    );
    let e = engine(
        snapshot_of(&[o]),
        "enforce",
        "{enforceContradictions: true}",
    );
    let review = glance_create();
    let v = eval(&e, &review);
    let out = patched(&review, &v);
    assert_eq!(annotation(&out, WSGI).as_deref(), Some("false"));
    assert!(
        v.mutations[0]
            .denial_text()
            .contains("updating from 18.0.0 to 18.0.1")
    );
    // The operator's control-plane stage writes the target's "true": accepted too.
    for value in ["true", "false", "True", "0"] {
        let review = glance_create_with(Some(json!({WSGI: value, LOCATION: "false"})));
        assert_clean(&eval(&e, &review));
    }
}

#[test]
fn update_in_progress_from_a_release_without_defaults_uses_false() {
    let o = osv(
        "openstack",
        "18.0.1",
        json!({"availableVersion": "18.0.1", "deployedVersion": "17.1.0",
               "serviceDefaults": {"glanceWsgi": "true"},
               "availableServiceDefaults": {"18.0.1": {"glanceWsgi": "true"}}}),
    );
    let e = engine(snapshot_of(&[o]), "enforce", "{}");
    let review = glance_create();
    let out = patched(&review, &eval(&e, &review));
    assert_eq!(annotation(&out, WSGI).as_deref(), Some("false"));
}

#[test]
fn contradiction_is_a_warning_by_default_and_a_denial_when_enforced() {
    let snap = snapshot_of(&[captured_osv()]);
    let review = glance_create_with(Some(json!({WSGI: "false", LOCATION: "false"})));

    let v = eval(&engine(snap.clone(), "enforce", "{}"), &review);
    assert!(v.denials.is_empty());
    assert!(v.patch.is_empty());
    assert_eq!(v.warnings.len(), 1);
    let m = &v.warnings[0].denial_text();
    for needle in [
        "Glance openstack/glance",
        "glance.openstack.org/wsgi=\"false\" contradicts the release",
        "OpenStackVersion openstack/openstack (targetVersion 18.0.0)",
        "glanceWsgi = \"true\"",
        "httpd+ProxyPass",
        "glance.go l.254-280",
        "glance_controller.go l.849-868",
        "Fix: set it to \"true\"",
        "stackgate.dev/exempt.release-annotations",
    ] {
        assert!(m.contains(needle), "{needle:?} not in {m}");
    }
    assert_eq!(
        v.warnings[0].pointer(),
        Some("/metadata/annotations/glance.openstack.org~1wsgi")
    );

    let v = eval(
        &engine(snap.clone(), "enforce", "{enforceContradictions: true}"),
        &review,
    );
    assert_eq!(v.denials.len(), 1, "{v:?}");
    assert!(
        v.denials[0]
            .denial_text()
            .contains("contradicts the release")
    );

    // In warn mode an enforced contradiction is still only a warning.
    let v = eval(
        &engine(snap, "warn", "{enforceContradictions: true}"),
        &review,
    );
    assert!(v.denials.is_empty());
    assert_eq!(v.warnings.len(), 1);
}

#[test]
fn go_spellings_of_the_expected_value_are_not_contradictions() {
    let e = engine(
        snapshot_of(&[captured_osv()]),
        "enforce",
        "{enforceContradictions: true}",
    );
    for (w, l) in [("True", "False"), ("1", "0"), ("t", "F"), ("TRUE", "f")] {
        assert_clean(&eval(
            &e,
            &glance_create_with(Some(json!({WSGI: w, LOCATION: l}))),
        ));
    }
}

#[test]
fn unparsable_value_is_denied_with_the_accepted_list_even_without_a_release() {
    for snap in [snapshot_of(&[captured_osv()]), Snapshot::empty()] {
        let e = engine(snap, "enforce", "{}");
        let review = glance_create_with(Some(json!({WSGI: "yes"})));
        let v = eval(&e, &review);
        assert_eq!(v.denials.len(), 1, "{v:?}");
        let m = &v.denials[0].denial_text();
        assert!(
            m.contains("glance.openstack.org/wsgi=\"yes\" cannot be parsed"),
            "{m}"
        );
        assert!(
            m.contains("1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False"),
            "{m}"
        );
        assert!(m.contains("glance_controller.go l.849-868"), "{m}");
    }
}

#[test]
fn unchanged_contradiction_on_update_is_only_warned_changed_one_is_denied() {
    let e = engine(
        snapshot_of(&[captured_osv()]),
        "enforce",
        "{enforceContradictions: true}",
    );
    let bad = json!({WSGI: "false", LOCATION: "false"});
    let v = eval(&e, &glance_update(bad.clone(), bad.clone()));
    assert!(v.denials.is_empty(), "{v:?}");
    assert_eq!(v.warnings.len(), 1);
    assert!(
        v.warnings[0]
            .denial_text()
            .contains("does not change the annotation")
    );

    let good = json!({WSGI: "true", LOCATION: "false"});
    let v = eval(&e, &glance_update(good, bad));
    assert_eq!(v.denials.len(), 1, "{v:?}");
}

#[test]
fn update_that_drops_an_annotation_gets_it_back() {
    let e = engine(snapshot_of(&[captured_osv()]), "enforce", "{}");
    let review = glance_update(
        json!({WSGI: "true", LOCATION: "false"}),
        json!({WSGI: "true"}),
    );
    let v = eval(&e, &review);
    let out = patched(&review, &v);
    assert_eq!(annotation(&out, LOCATION).as_deref(), Some("false"));
    assert_eq!(v.patch.len(), 1);
}

#[test]
fn objects_being_deleted_are_left_alone() {
    let e = engine(
        snapshot_of(&[captured_osv()]),
        "enforce",
        "{enforceContradictions: true}",
    );
    let mut review = glance_update(json!({WSGI: "yes"}), json!({WSGI: "yes"}));
    review["request"]["object"]["metadata"]["deletionTimestamp"] = json!("2026-11-22T04:00:00Z");
    assert_clean(&eval(&e, &review));
}

#[test]
fn uninitialized_openstackversion_implies_nothing() {
    // The captured CREATE of the OpenStackVersion: no status yet.
    let created =
        fixture("captured/openstackversion/validate-create-openstack.json")["request"]["object"]
            .clone();
    let e = engine(
        snapshot_of(&[created]),
        "enforce",
        "{namespaceReleases: {openstack: legacy}}",
    );
    assert_clean(&eval(&e, &glance_create()));
}

#[test]
fn several_openstackversions_are_warned_about_and_imply_nothing() {
    let mut second = captured_osv();
    second["metadata"]["name"] = json!("second");
    let e = engine(snapshot_of(&[captured_osv(), second]), "enforce", "{}");
    let v = eval(&e, &glance_create());
    assert!(v.patch.is_empty());
    assert_eq!(v.warnings.len(), 1);
    assert!(
        v.warnings[0]
            .denial_text()
            .contains("has 2 OpenStackVersions (openstack, second)")
    );
}

#[test]
fn without_a_live_object_the_static_table_serves_where_a_policy_names_the_release() {
    let review = glance_create();
    // --kube off, no release named: unchanged.
    assert_clean(&eval(&engine(Snapshot::empty(), "enforce", "{}"), &review));
    // Another namespace named: unchanged.
    let e = engine(
        Snapshot::empty(),
        "enforce",
        "{namespaceReleases: {other: legacy}}",
    );
    assert_clean(&eval(&e, &review));
    for (release, wsgi) in [("legacy", "false"), ("openstack-operator-84322c77", "true")] {
        let params = format!("{{namespaceReleases: {{openstack: {release}}}}}");
        let v = eval(&engine(Snapshot::empty(), "enforce", &params), &review);
        let out = patched(&review, &v);
        assert_eq!(annotation(&out, WSGI).as_deref(), Some(wsgi), "{release}");
        assert_eq!(
            annotation(&out, LOCATION).as_deref(),
            Some("false"),
            "{release}"
        );
        assert!(
            v.mutations[0]
                .denial_text()
                .contains(&format!("release {release} (static release table"))
        );
    }
}

#[test]
fn a_live_object_wins_over_the_static_table() {
    let e = engine(
        snapshot_of(&[captured_osv()]),
        "enforce",
        "{namespaceReleases: {openstack: legacy}}",
    );
    let review = glance_create();
    let out = patched(&review, &eval(&e, &review));
    assert_eq!(annotation(&out, WSGI).as_deref(), Some("true"));
}

#[test]
fn exemption_admits_and_is_recorded() {
    let e = engine(
        snapshot_of(&[captured_osv()]),
        "enforce",
        "{enforceContradictions: true}",
    );
    let review = glance_create_with(Some(json!({
        WSGI: "no",
        "stackgate.dev/exempt.release-annotations": "migrating by hand, CHG-42",
    })));
    let v = eval(&e, &review);
    assert_clean(&v);
    assert_eq!(v.exemptions.len(), 1);
    assert_eq!(v.exemptions[0].reason, "migrating by hand, CHG-42");
}

#[test]
fn audit_mode_records_without_patching_or_denying() {
    let e = engine(
        snapshot_of(&[captured_osv()]),
        "audit",
        "{enforceContradictions: true}",
    );
    let v = eval(&e, &glance_create_with(Some(json!({WSGI: "nope"}))));
    assert_clean(&v);
    assert_eq!(v.audits.len(), 1);
    assert!(
        v.audit_annotations
            .contains_key("release-annotations-finding")
    );
}

#[test]
fn other_kinds_and_operations_are_untouched() {
    let e = engine(snapshot_of(&[captured_osv()]), "enforce", "{}");
    // GlanceAPI carries the annotation too, but glance-operator writes it there.
    let mut review = glance_create_with(Some(json!({WSGI: "yes"})));
    review["request"]["kind"]["kind"] = json!("GlanceAPI");
    assert_clean(&eval(&e, &review));
    // The OpenStackVersion status update itself.
    let osv_review =
        fixture("captured/openstackversion/mutate-update-openstack-status-subresource.json");
    assert_clean(&eval(&e, &osv_review));
    // DELETE of the Glance.
    assert_clean(&eval(
        &e,
        &fixture("captured/glance/mutate-delete-glance.json"),
    ));
}

#[test]
fn captured_rejected_sample_without_annotations_is_mutated_too() {
    // The mutating webhook sees this CREATE before CRD validation rejects it.
    let review =
        fixture("captured/glance/mutate-create-glance-sample-missing-required-rejected.json");
    let e = engine(snapshot_of(&[captured_osv()]), "enforce", "{}");
    let out = patched(&review, &eval(&e, &review));
    assert_eq!(annotation(&out, WSGI).as_deref(), Some("true"));
}

#[test]
fn the_upstream_unquoted_bool_sample_never_reaches_admission() {
    // glance-operator config/samples/layout/single writes `glance.openstack.org/wsgi: true`
    // unquoted; annotations are map[string]string, so the object does not decode.
    let path = format!(
        "{}/tests/fixtures/openstack-k8s-operators/sample-glance-layout-single-wsgi-annotation.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    let value: Value = serde_saphyr::from_str(&text).expect("valid YAML");
    assert_eq!(value["metadata"]["annotations"][WSGI], json!(true));
    assert!(serde_json::from_value::<DynamicObject>(value).is_err());
}

#[test]
fn the_upstream_glance_sample_without_annotations_gets_both() {
    let path = format!(
        "{}/tests/fixtures/openstack-k8s-operators/sample-glance.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut object: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).expect("valid YAML");
    object["metadata"]["namespace"] = json!("openstack");
    let mut review = glance_create();
    review["request"]["object"] = object;
    let e = engine(
        Snapshot::empty(),
        "enforce",
        "{namespaceReleases: {openstack: legacy}}",
    );
    let out = patched(&review, &eval(&e, &review));
    let annotations: BTreeMap<String, String> =
        serde_json::from_value(out["request"]["object"]["metadata"]["annotations"].clone())
            .unwrap();
    assert_eq!(
        annotations,
        BTreeMap::from([
            (WSGI.to_owned(), "false".to_owned()),
            (LOCATION.to_owned(), "false".to_owned())
        ])
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any annotation value: no panic; denied exactly when Go ParseBool rejects it; a
    /// parsable value is never patched over.
    #[test]
    fn any_value_is_denied_iff_unparsable(value in "\\PC{0,12}|[01tfTF]|true|false|True|False|TRUE|FALSE") {
        let e = engine(snapshot_of(&[captured_osv()]), "enforce", "{}");
        let review = glance_create_with(Some(json!({WSGI: value.clone(), LOCATION: "false"})));
        let v = eval(&e, &review);
        let parsable = stackgate::releases::go_parse_bool(&value).is_some();
        prop_assert_eq!(v.denied(), !parsable);
        prop_assert!(v.patch.is_empty());
    }
}

// ---------------------------------------------------------------------------------------------
// Manila: `ServiceDefaults.manilaSharev1` → `manila.openstack.org/sharev1` (domain-facts §9.2).

const SHAREV1: &str = "manila.openstack.org/sharev1";

/// manila-operator's sample Manila (tests/fixtures/openstack-k8s-operators/sample-manila.yaml)
/// in an AdmissionReview shaped like the captured Glance ones, with `annotations` (None: no
/// annotations map) and, for an UPDATE, the stored object's annotations.
fn manila_review(
    operation: &str,
    annotations: Option<Value>,
    old_annotations: Option<Value>,
) -> Value {
    let path = format!(
        "{}/tests/fixtures/openstack-k8s-operators/sample-manila.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut object: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).expect("sample YAML");
    assert_eq!(object["kind"], "Manila");
    assert_eq!(object["apiVersion"], "manila.openstack.org/v1beta1");
    if let Some(a) = annotations {
        object["metadata"]["annotations"] = a;
    }
    let mut request = json!({
        "uid": "3b0f7f0e-5c55-4c8e-8d53-0d8a1f1e7a11",
        "kind": {"group": "manila.openstack.org", "version": "v1beta1", "kind": "Manila"},
        "resource": {"group": "manila.openstack.org", "version": "v1beta1", "resource": "manilas"},
        "requestKind": {"group": "manila.openstack.org", "version": "v1beta1", "kind": "Manila"},
        "requestResource": {"group": "manila.openstack.org", "version": "v1beta1", "resource": "manilas"},
        "name": "manila", "namespace": "openstack", "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
        "object": object.clone(),
        "oldObject": null, "dryRun": false,
    });
    if operation == "UPDATE" {
        let mut old = object;
        match old_annotations {
            Some(a) => old["metadata"]["annotations"] = a,
            None => {
                old["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("annotations");
            }
        }
        request["oldObject"] = old;
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// An OpenStackVersion in `openstack` whose target release has `manilaSharev1` = `sharev1`
/// (None: the field is absent from its ServiceDefaults).
fn manila_release(sharev1: Option<&str>) -> Snapshot {
    let mut defaults = json!({"glanceWsgi": "true"});
    if let Some(v) = sharev1 {
        defaults["manilaSharev1"] = json!(v);
    }
    snapshot_of(&[osv(
        "openstack",
        "18.0.9",
        json!({"availableVersion": "18.0.9", "deployedVersion": "18.0.9",
               "serviceDefaults": defaults,
               "availableServiceDefaults": {"18.0.9": defaults}}),
    )])
}

/// What the release implies for the annotation, whether it is added, denied or warned about.
#[derive(Debug)]
enum ManilaExpect {
    /// Mutated: the annotation is added with this value; no denial.
    Adds(&'static str),
    /// Allowed untouched, no findings.
    Clean,
    /// Denied (enforce) with these needles.
    Deny(&'static [&'static str]),
    /// Allowed with one warning holding these needles.
    Warn(&'static [&'static str]),
}

#[test]
fn manila_sharev1_table() {
    let cases: Vec<(&str, Option<&str>, Value, ManilaExpect)> = vec![
        // The operator's rule: "true" only when the field is exactly "true".
        (
            "release true, no annotation",
            Some("true"),
            json!(null),
            ManilaExpect::Adds("true"),
        ),
        (
            "release false, no annotation",
            Some("false"),
            json!(null),
            ManilaExpect::Adds("false"),
        ),
        (
            "release True (not exactly true)",
            Some("True"),
            json!(null),
            ManilaExpect::Adds("false"),
        ),
        (
            "field absent from the release",
            None,
            json!(null),
            ManilaExpect::Adds("false"),
        ),
        (
            "matching value",
            Some("true"),
            json!({SHAREV1: "true"}),
            ManilaExpect::Clean,
        ),
        (
            "matching false",
            Some("false"),
            json!({SHAREV1: "false"}),
            ManilaExpect::Clean,
        ),
        (
            "strconv.ParseBool rejects yes",
            Some("true"),
            json!({SHAREV1: "yes"}),
            ManilaExpect::Deny(&[
                "Manila openstack/manila",
                "manila.openstack.org/sharev1=\"yes\" cannot be parsed",
                "strconv.ParseBool",
                "IsShareV1Enabled",
            ]),
        ),
        (
            "contradiction is a warning by default",
            Some("true"),
            json!({SHAREV1: "false"}),
            ManilaExpect::Warn(&["manila.openstack.org/sharev1", "contradicts the release"]),
        ),
        (
            "ParseBool's 1 is read as true: no contradiction",
            Some("true"),
            json!({SHAREV1: "1"}),
            ManilaExpect::Clean,
        ),
    ];
    for (name, sharev1, annotations, expect) in cases {
        let e = engine(manila_release(sharev1), "enforce", "{}");
        let annotations = (!annotations.is_null()).then_some(annotations);
        let review = manila_review("CREATE", annotations, None);
        let v = eval(&e, &review);
        match expect {
            ManilaExpect::Adds(value) => {
                assert!(v.denials.is_empty(), "{name}: {:?}", v.denials);
                let out = patched(&review, &v);
                assert_eq!(annotation(&out, SHAREV1).as_deref(), Some(value), "{name}");
                // Only the Manila mapping applies to a Manila CR: no Glance annotation.
                assert_eq!(
                    out["request"]["object"]["metadata"]["annotations"]
                        .as_object()
                        .map(|a| a.len()),
                    Some(1),
                    "{name}: {out}"
                );
                assert_clean(&eval(&e, &out));
            }
            ManilaExpect::Clean => assert_clean(&v),
            ManilaExpect::Deny(needles) => {
                assert_eq!(v.denials.len(), 1, "{name}: {:?}", v.denials);
                assert!(v.patch.is_empty(), "{name}");
                for n in needles {
                    assert!(
                        v.denials[0].denial_text().contains(n),
                        "{name}: {n:?} in {}",
                        v.denials[0].denial_text()
                    );
                }
            }
            ManilaExpect::Warn(needles) => {
                assert!(v.denials.is_empty(), "{name}: {:?}", v.denials);
                assert_eq!(v.warnings.len(), 1, "{name}: {:?}", v.warnings);
                for n in needles {
                    assert!(
                        v.warnings[0].denial_text().contains(n),
                        "{name}: {n:?} in {}",
                        v.warnings[0].denial_text()
                    );
                }
            }
        }
    }
}

#[test]
fn manila_missing_sharev1_means_enabled_to_manila_operator() {
    // Release turns share v1 off, the CR has no annotation: manila-operator would read the
    // missing annotation as enabled, which contradicts the release; the patch fixes it.
    let e = engine(manila_release(Some("false")), "enforce", "{}");
    let review = manila_review("CREATE", None, None);
    let v = eval(&e, &review);
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    assert!(v.warnings[0].fixed_by_patch);
    assert!(
        v.warnings[0]
            .denial_text()
            .contains("is missing, which the service operator reads as \"true\""),
        "{}",
        v.warnings[0].denial_text()
    );
    // With contradictions enforced, an UPDATE that sets the contradicting value is denied,
    // and a stored contradicting value on an unrelated update is only warned about.
    let strict = engine(
        manila_release(Some("false")),
        "enforce",
        "{enforceContradictions: true}",
    );
    let sets = manila_review(
        "UPDATE",
        Some(json!({SHAREV1: "true"})),
        Some(json!({SHAREV1: "false"})),
    );
    assert_eq!(eval(&strict, &sets).denials.len(), 1);
    let unchanged = manila_review(
        "UPDATE",
        Some(json!({SHAREV1: "true"})),
        Some(json!({SHAREV1: "true"})),
    );
    let v = eval(&strict, &unchanged);
    assert!(v.denials.is_empty(), "{:?}", v.denials);
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
}

#[test]
fn manila_uses_the_static_table_without_a_live_release() {
    // `stackgate check` / --kube off: the repository's table, release named per namespace.
    for (release, want) in [("legacy", "false"), ("openstack-operator-84322c77", "true")] {
        let e = Engine::new(policies(
            "enforce",
            &format!("{{namespaceReleases: {{openstack: {release}}}}}"),
        ));
        let review = manila_review("CREATE", None, None);
        let out = patched(&review, &eval(&e, &review));
        assert_eq!(
            annotation(&out, SHAREV1).as_deref(),
            Some(want),
            "{release}"
        );
    }
    // No release known for the namespace: nothing is added, a bad value is still denied.
    let e = Engine::new(policies("enforce", "{}"));
    assert_clean(&eval(&e, &manila_review("CREATE", None, None)));
    let v = eval(
        &e,
        &manila_review("CREATE", Some(json!({SHAREV1: "on"})), None),
    );
    assert_eq!(v.denials.len(), 1, "{:?}", v.denials);
}
