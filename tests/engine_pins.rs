//! Pins on two things mutation testing showed no test held (issue 26): a finding's
//! `fixed_by_patch` is true only where the verdict's patch really fixes it, and every exempted
//! policy of an object is recorded (in `verdict.exemptions` and as an audit annotation).
//!
//! `fixed_by_patch` is checked against the patch itself: the patch is applied (RFC 6902, the
//! `json-patch` crate the apiserver's semantics are tested against elsewhere) and the patched
//! object is evaluated again. A finding the verdict says the patch fixes must be gone; one it
//! says the patch does not fix must still be there.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::{Value, json};
use stackgate::engine::{Engine, Finding, Verdict};
use stackgate::policy::{Mode, PolicySet};

/// A config with `provider-requires-serial-api-calls` missing (a warning the mutating webhook
/// fixes by adding the line) and the OVN provider without `lb-method` (a denial no edit fixes).
const CONFIG: &str = "[Global]\nauth-url = https://keystone.example:5000/v3\n\
[LoadBalancer]\nlb-provider = ovn\n";

fn engine_with(modes: &[(&str, Mode)]) -> Engine {
    let mut set = PolicySet::embedded().expect("embedded policies");
    for (name, mode) in modes {
        let policy = set
            .policies
            .iter_mut()
            .find(|p| p.name == *name)
            .unwrap_or_else(|| panic!("no policy {name}"));
        policy.mode = *mode;
    }
    Engine::new(set)
}

/// A labelled ConfigMap in a tenant namespace: a site stackgate may edit.
fn editable(text: &str, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "occm", "namespace": "tenant",
            "labels": {"stackgate.dev/cloud-config": "cloud.conf"},
            "annotations": annotations},
        "data": {"cloud.conf": text}})
}

/// The copy OpenShift's operator manages: validated only, never edited.
fn validate_only(text: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cloud-conf", "namespace": "openshift-cloud-controller-manager"},
        "data": {"cloud.conf": text}})
}

fn evaluate(engine: &Engine, object: &Value) -> Verdict {
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": object["metadata"]["name"], "namespace": object["metadata"]["namespace"],
            "operation": "CREATE", "dryRun": false,
            // A cluster admin: the shipped enforce policies let group system:masters exempt.
            "userInfo": {"username": "t", "groups": ["system:masters", "system:authenticated"]},
            "object": object
        }
    });
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review).expect("review");
    let request: AdmissionRequest<DynamicObject> = review.try_into().expect("request");
    engine.evaluate(&stackgate::admission::subject_of(&request))
}

fn findings(verdict: &Verdict) -> Vec<&Finding> {
    verdict
        .denials
        .iter()
        .chain(&verdict.warnings)
        .chain(&verdict.audits)
        .collect()
}

/// The verdict's patch applied to `object`.
fn patched(object: &Value, verdict: &Verdict) -> Value {
    let mut out = object.clone();
    json_patch::patch(&mut out, &verdict.patch).expect("the verdict's patch applies");
    out
}

/// Every finding's `fixed_by_patch` agrees with what the patch does: evaluated again after
/// the patch, a finding marked fixed is gone and one not marked is still there.
fn assert_fixed_by_patch_is_true(engine: &Engine, object: &Value) -> Verdict {
    let verdict = evaluate(engine, object);
    let after = evaluate(engine, &patched(object, &verdict));
    let remaining = findings(&after);
    for f in findings(&verdict) {
        let still = remaining
            .iter()
            .any(|g| g.policy == f.policy && g.code == f.code && g.anchor == f.anchor);
        assert_eq!(
            still,
            !f.fixed_by_patch,
            "{}/{} fixed_by_patch = {} but after the patch it is {}: {}",
            f.policy,
            f.code,
            f.fixed_by_patch,
            if still { "still there" } else { "gone" },
            f.denial_text()
        );
    }
    verdict
}

fn find<'v>(verdict: &'v Verdict, policy: &str) -> &'v Finding {
    findings(verdict)
        .into_iter()
        .find(|f| f.policy == policy)
        .unwrap_or_else(|| panic!("no finding of {policy}: {verdict:?}"))
}

#[test]
fn enforce_on_an_editable_site_the_patch_fixes_only_what_it_says() {
    let engine = engine_with(&[]);
    let verdict = assert_fixed_by_patch_is_true(&engine, &editable(CONFIG, json!({})));
    assert!(!verdict.patch.is_empty(), "{verdict:?}");
    // The missing line is added by the patch; the OVN lb-method is not.
    assert!(find(&verdict, "serial-lb-api-calls").fixed_by_patch);
    assert!(!find(&verdict, "known-bad-lb-settings").fixed_by_patch);
}

#[test]
fn audit_mode_patches_nothing_and_claims_no_fix() {
    let engine = engine_with(&[("serial-lb-api-calls", Mode::Audit)]);
    let verdict = assert_fixed_by_patch_is_true(&engine, &editable(CONFIG, json!({})));
    let serial = find(&verdict, "serial-lb-api-calls");
    assert!(verdict.audits.iter().any(|f| f == serial), "{verdict:?}");
    assert!(!serial.fixed_by_patch);
    assert!(verdict.patch.is_empty(), "{:?}", verdict.patch);
    assert!(verdict.mutations.is_empty(), "{:?}", verdict.mutations);
}

#[test]
fn a_validate_only_site_claims_no_fix() {
    let engine = engine_with(&[]);
    let verdict = assert_fixed_by_patch_is_true(&engine, &validate_only(CONFIG));
    assert!(!find(&verdict, "serial-lb-api-calls").fixed_by_patch);
    assert!(verdict.patch.is_empty(), "{:?}", verdict.patch);
}

#[test]
fn two_exempted_policies_on_one_object_are_both_recorded() {
    let engine = engine_with(&[]);
    let object = editable(
        CONFIG,
        json!({
            "stackgate.dev/exempt.serial-lb-api-calls": "tracked in TICKET-1",
            "stackgate.dev/exempt.known-bad-lb-settings": "tracked in TICKET-2",
        }),
    );
    let verdict = evaluate(&engine, &object);
    let exempted: Vec<(&str, &str)> = verdict
        .exemptions
        .iter()
        .map(|e| (e.policy.as_str(), e.reason.as_str()))
        .collect();
    for (policy, reason) in [
        ("serial-lb-api-calls", "tracked in TICKET-1"),
        ("known-bad-lb-settings", "tracked in TICKET-2"),
    ] {
        assert!(exempted.contains(&(policy, reason)), "{exempted:?}");
        assert_eq!(
            verdict
                .audit_annotations
                .get(&format!("{policy}-exempted"))
                .map(String::as_str),
            Some(reason),
            "{:?}",
            verdict.audit_annotations
        );
        assert!(
            findings(&verdict).iter().all(|f| f.policy != policy),
            "{verdict:?}"
        );
    }
    // Exempted findings are not fixed either: no patch for an exempted policy.
    assert!(verdict.patch.is_empty(), "{:?}", verdict.patch);
    // Without the annotations both policies report, so the exemptions are what removed them.
    let plain = evaluate(&engine, &editable(CONFIG, json!({})));
    find(&plain, "serial-lb-api-calls");
    find(&plain, "known-bad-lb-settings");
}

/// The captured Glance CREATE and OpenStackVersion (tests/fixtures/captured): an object
/// family's patch (release-annotations adds a missing annotation) next to a violation it does
/// not fix (another annotation that contradicts the release).
mod object_family {
    use super::*;
    use stackgate::releases::{Snapshot, VersionState};
    use std::sync::Arc;

    fn fixture(rel: &str) -> Value {
        let path = format!("{}/tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).expect("fixture is JSON")
    }

    fn engine(mode: Mode) -> Engine {
        let osv =
            fixture("captured/openstackversion/validate-update-openstack-status-subresource.json")
                ["request"]["object"]
                .clone();
        let osv: DynamicObject = serde_json::from_value(osv).expect("an object");
        let snapshot =
            Snapshot::from_versions(
                [VersionState::from_object(&osv).expect("an OpenStackVersion")],
            );
        let mut set = PolicySet::embedded().expect("embedded policies");
        for p in set.policies.iter_mut() {
            if p.name == "release-annotations" {
                p.mode = mode;
            }
        }
        Engine::with_releases(set, Arc::new(snapshot))
    }

    fn evaluate(engine: &Engine, review: &Value) -> Verdict {
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_value(review.clone()).expect("review");
        let request: AdmissionRequest<DynamicObject> = review.try_into().expect("request");
        engine.evaluate(&stackgate::admission::subject_of(&request))
    }

    /// The Glance CREATE with `glance.openstack.org/wsgi: "false"` (the release says true)
    /// and no `location-api` annotation (the patch adds it).
    fn review() -> Value {
        let mut review = fixture("captured/glance/mutate-create-glance.json");
        review["request"]["object"]["metadata"]["annotations"] =
            json!({"glance.openstack.org/wsgi": "false"});
        review
    }

    #[test]
    fn the_patch_fixes_the_missing_annotation_not_the_contradiction() {
        let engine = engine(Mode::Enforce);
        let review = review();
        let verdict = evaluate(&engine, &review);
        assert!(!verdict.patch.is_empty(), "{verdict:?}");
        let contradiction = findings(&verdict)
            .into_iter()
            .find(|f| f.code == "contradiction")
            .unwrap_or_else(|| panic!("no contradiction: {verdict:?}"));
        assert!(
            !contradiction.fixed_by_patch,
            "{}",
            contradiction.denial_text()
        );
        let mut patched = review.clone();
        json_patch::patch(&mut patched["request"]["object"], &verdict.patch)
            .expect("the patch applies");
        let after = evaluate(&engine, &patched);
        assert!(
            findings(&after)
                .iter()
                .any(|f| f.code == "contradiction" && f.anchor == contradiction.anchor),
            "{after:?}"
        );
        assert!(after.patch.is_empty(), "the patch was complete: {after:?}");
    }

    /// An initialized OpenStackVersion whose release has no ServiceDefaults: openstack-operator
    /// writes "false" for `glance.openstack.org/wsgi`, and a missing annotation (read as true)
    /// contradicts it, a finding the patch fixes where the mode lets it patch.
    fn legacy_engine(mode: Mode) -> Engine {
        let osv = json!({
            "apiVersion": "core.openstack.org/v1beta1", "kind": "OpenStackVersion",
            "metadata": {"name": "openstack", "namespace": "openstack"},
            "spec": {"targetVersion": "18.0.0"},
            "status": {"availableVersion": "18.0.1", "deployedVersion": "18.0.0",
                       "availableServiceDefaults": {"18.0.1": {"glanceWsgi": "true"}}},
        });
        let osv: DynamicObject = serde_json::from_value(osv).expect("an object");
        let snapshot =
            Snapshot::from_versions(
                [VersionState::from_object(&osv).expect("an OpenStackVersion")],
            );
        let mut set = PolicySet::embedded().expect("embedded policies");
        for p in set.policies.iter_mut() {
            if p.name == "release-annotations" {
                p.mode = mode;
            }
        }
        Engine::with_releases(set, Arc::new(snapshot))
    }

    #[test]
    fn a_missing_annotation_is_fixed_by_the_patch_only_where_one_is_made() {
        let review = fixture("captured/glance/mutate-create-glance.json");
        let enforced = legacy_engine(Mode::Enforce);
        let verdict = evaluate(&enforced, &review);
        let missing = find(&verdict, "release-annotations");
        assert!(missing.fixed_by_patch, "{}", missing.denial_text());
        let mut patched = review.clone();
        json_patch::patch(&mut patched["request"]["object"], &verdict.patch)
            .expect("the patch applies");
        assert!(findings(&evaluate(&enforced, &patched)).is_empty());
        // Audit mode: the same finding, no patch, so no claim.
        let audited = evaluate(&legacy_engine(Mode::Audit), &review);
        assert!(audited.patch.is_empty(), "{audited:?}");
        assert!(audited.mutations.is_empty(), "{audited:?}");
        let missing = find(&audited, "release-annotations");
        assert!(audited.audits.contains(missing), "{audited:?}");
        assert!(!missing.fixed_by_patch, "{}", missing.denial_text());
    }
}
