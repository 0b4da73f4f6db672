//! The release catalog (policies/release-catalog.yaml): it covers every ServiceDefaults field
//! of the real OpenStackVersion CRD, every static release yields exactly the annotations the
//! operator would write, and malformed catalogs or release parameters are load errors.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::{Value, json};
use stackgate::engine::Engine;
use stackgate::policy::{PolicyError, PolicySet};
use stackgate::releases::{ReleaseCatalog, Snapshot, VersionState};

const CATALOG: &str = include_str!("../policies/release-catalog.yaml");

fn fixture_text(rel: &str) -> String {
    let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn catalog() -> ReleaseCatalog {
    PolicySet::embedded().expect("embedded policies").releases
}

fn policy(params: &str) -> String {
    format!(
        "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\nname: release-annotations\n\
         rule: release-annotations\nmode: enforce\ndescription: d\nsource: s\nparams: {params}\n"
    )
}

fn load(files: &[(&str, &str)]) -> Result<PolicySet, PolicyError> {
    PolicySet::from_files(
        files
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
            .collect(),
        "dir".into(),
    )
}

/// openstack-operator internal/openstack/glance.go l.254-280, transcribed.
fn operator_value(field: Option<&str>) -> &'static str {
    if field == Some("true") {
        "true"
    } else {
        "false"
    }
}

/// The annotations a mutated Glance CREATE (no annotations) ends up with.
fn glance_annotations(engine: &Engine) -> Value {
    let text = fixture_text("captured/glance/mutate-create-glance.json");
    mutated_annotations(engine, serde_json::from_str(&text).unwrap())
}

/// The annotations a mutated Manila CREATE (manila-operator's sample, no annotations) ends up
/// with.
fn manila_annotations(engine: &Engine) -> Value {
    let object: Value =
        serde_saphyr::from_str(&fixture_text("openstack-k8s-operators/sample-manila.yaml"))
            .expect("sample YAML");
    let gvk = json!({"group": "manila.openstack.org", "version": "v1beta1", "kind": "Manila"});
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": gvk, "requestKind": gvk,
            "resource": {"group": "manila.openstack.org", "version": "v1beta1", "resource": "manilas"},
            "name": "manila", "namespace": "openstack", "operation": "CREATE",
            "userInfo": {"username": "t"}, "object": object, "dryRun": false,
        }
    });
    mutated_annotations(engine, review)
}

/// The annotations of `review`'s object (annotations removed first) after the engine's patch.
fn mutated_annotations(engine: &Engine, mut review: Value) -> Value {
    review["request"]["object"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    let r: AdmissionReview<DynamicObject> = serde_json::from_value(review.clone()).unwrap();
    let req: AdmissionRequest<DynamicObject> = r.try_into().unwrap();
    let verdict = engine.evaluate(&stackgate::admission::subject_of(&req));
    let mut object = review["request"]["object"].clone();
    json_patch::patch(&mut object, &json_patch::Patch(verdict.patch)).unwrap();
    object["metadata"]["annotations"].clone()
}

#[test]
fn catalog_covers_exactly_the_crd_service_defaults_fields() {
    let crd: Value = serde_saphyr::from_str(&fixture_text(
        "openstack-k8s-operators/crd-core.openstack.org_openstackversions.yaml",
    ))
    .expect("CRD YAML");
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1beta1")
        .expect("v1beta1");
    let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    let crd_fields: BTreeSet<String> = status["serviceDefaults"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    // availableServiceDefaults holds the same struct.
    let available: BTreeSet<String> =
        status["availableServiceDefaults"]["additionalProperties"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
    assert_eq!(crd_fields, available);
    let c = catalog();
    let mapped: BTreeSet<String> = c.mappings.iter().map(|m| m.field.clone()).collect();
    let unmapped: BTreeSet<String> = c.unmapped.iter().map(|u| u.field.clone()).collect();
    assert_eq!(
        mapped,
        BTreeSet::from([
            "glanceWsgi".to_owned(),
            "glanceLocationAPI".to_owned(),
            "manilaSharev1".to_owned()
        ])
    );
    // rabbitmqVersion sets the RabbitMq CR's spec.targetVersion, not an annotation.
    assert_eq!(unmapped, BTreeSet::from(["rabbitmqVersion".to_owned()]));
    let manila = c
        .mappings
        .iter()
        .find(|m| m.field == "manilaSharev1")
        .expect("manilaSharev1 is mapped");
    assert_eq!(manila.annotation, "manila.openstack.org/sharev1");
    assert!(
        manila
            .target
            .matches("manila.openstack.org", "v1beta1", "Manila")
    );
    assert!(manila.when_absent, "manila-operator: missing means enabled");
    assert_eq!(&mapped | &unmapped, crd_fields);
}

#[test]
fn every_static_release_yields_the_operator_value_for_every_mapping() {
    let c = catalog();
    assert!(c.releases.len() >= 2);
    for (release, entry) in &c.releases {
        let defaults = &entry.service_defaults;
        let mut want = serde_json::Map::new();
        let mut want_manila = serde_json::Map::new();
        for m in &c.mappings {
            let into = match m.target.kind.as_str() {
                "Glance" => &mut want,
                "Manila" => &mut want_manila,
                other => panic!("no test object for {other}"),
            };
            into.insert(
                m.annotation.clone(),
                json!(operator_value(defaults.get(&m.field))),
            );
        }
        // Static table (no live object), as `stackgate check` or --kube off would run.
        let params = format!("{{namespaceReleases: {{openstack: {release}}}}}");
        let set = load(&[("c.yaml", CATALOG), ("p.yaml", &policy(&params))]).unwrap();
        let static_engine = Engine::new(set.clone());
        assert_eq!(
            glance_annotations(&static_engine),
            Value::Object(want.clone()),
            "{release}"
        );
        assert_eq!(
            manila_annotations(&static_engine),
            Value::Object(want_manila.clone()),
            "{release} Manila"
        );

        // The same release served live by an OpenStackVersion targeting it: same strings.
        let mut status = json!({
            "availableVersion": release,
            "deployedVersion": release,
            "availableServiceDefaults": {release: defaults},
        });
        if !defaults.is_empty() {
            status["serviceDefaults"] = json!(defaults);
        }
        let osv: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "core.openstack.org/v1beta1",
            "kind": "OpenStackVersion",
            "metadata": {"name": "openstack", "namespace": "openstack"},
            "spec": {"targetVersion": release},
            "status": status,
        }))
        .unwrap();
        let snapshot = Snapshot::from_versions([VersionState::from_object(&osv).unwrap()]);
        let live_engine = Engine::with_releases(
            load(&[("c.yaml", CATALOG), ("p.yaml", &policy("{}"))]).unwrap(),
            Arc::new(snapshot),
        );
        assert_eq!(
            glance_annotations(&live_engine),
            Value::Object(want),
            "{release} live"
        );
        assert_eq!(
            manila_annotations(&live_engine),
            Value::Object(want_manila),
            "{release} live Manila"
        );
    }
}

#[test]
fn catalog_documents_are_strict() {
    let p = policy("{}");
    let cases: &[(&str, &str)] = &[
        ("    effect: >-", "    colour: blue\n    effect: >-"),
        ("value: trueOnlyWhenTrue", "value: trueWhenYes"),
        (
            "annotation: glance.openstack.org/wsgi",
            "annotation: Glance/wsgi",
        ),
        (
            "annotation: glance.openstack.org/location-api",
            "annotation: glance.openstack.org/wsgi",
        ),
        ("  - field: rabbitmqVersion", "  - field: glanceWsgi"),
        (
            "      rabbitmqVersion: \"4.2\"",
            "      rabbitmqVersoin: \"4.2\"",
        ),
        ("kind: ReleaseCatalog", "kind: ReleaseCatalogue"),
    ];
    for (from, to) in cases {
        assert!(CATALOG.contains(from), "{from}");
        let bad = CATALOG.replacen(from, to, 1);
        let err = load(&[("c.yaml", &bad), ("p.yaml", &p)])
            .expect_err(to)
            .to_string();
        assert!(err.starts_with("c.yaml"), "{to}: {err}");
    }
    let twice = load(&[("a.yaml", CATALOG), ("b.yaml", CATALOG)])
        .unwrap_err()
        .to_string();
    assert!(twice.contains("a second ReleaseCatalog"), "{twice}");
}

#[test]
fn release_params_are_checked_against_the_table_and_the_rule() {
    let err = load(&[
        ("c.yaml", CATALOG),
        (
            "p.yaml",
            &policy("{namespaceReleases: {openstack: \"18.0.0\"}}"),
        ),
    ])
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("p.yaml"), "{err}");
    assert!(err.contains("names release \"18.0.0\""), "{err}");
    assert!(err.contains("legacy"), "{err}");

    let other = "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\nname: x\nrule: serial-lb-api-calls\n\
                 mode: warn\ndescription: d\nsource: s\nparams: {enforceContradictions: true}\n";
    let err = load(&[("c.yaml", CATALOG), ("o.yaml", other)])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("only apply to rule release-annotations"),
        "{err}"
    );

    let err = load(&[("p.yaml", &policy("{enforceContradiction: true}"))])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown field `enforceContradiction`"),
        "{err}"
    );
}

#[test]
fn a_directory_without_a_catalog_uses_the_embedded_one() {
    let set = load(&[(
        "p.yaml",
        &policy("{namespaceReleases: {openstack: legacy}, enforceContradictions: true}"),
    )])
    .unwrap();
    assert_eq!(set.releases, catalog());
    assert_eq!(
        release_params(&set.policies[0]).enforce_contradictions,
        Some(true)
    );
}

#[test]
fn embedded_policy_enforces_parsing_and_warns_on_contradictions() {
    let set = PolicySet::embedded().unwrap();
    let p = set
        .policies
        .iter()
        .find(|p| p.name == "release-annotations")
        .expect("embedded release-annotations policy");
    assert_eq!(p.mode, stackgate::policy::Mode::Enforce);
    assert_eq!(release_params(p).enforce_contradictions, Some(false));
    assert!(release_params(p).namespace_releases.is_empty());
    assert!(set.to_yaml().contains("\"kind\": \"ReleaseCatalog\""));
}

/// The parsed parameters of a release-annotations policy.
fn release_params(
    p: &stackgate::policy::Policy,
) -> &stackgate::rules::release_annotations::ReleaseParams {
    p.params.get().expect("release-annotations parameters")
}
