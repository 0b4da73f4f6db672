//! The generated admission policies as objects: which exist for which policy set and
//! Kubernetes version, their modes, scopes and exemptions, the command line, and the chart's
//! copy. What their CEL decides is tested in `admission_policies_cel.rs`.

use std::process::Command;

use serde_json::Value;
use stackgate::admission_policies::{AdmissionPoliciesError, KubeVersion, generate};
use stackgate::policy::{Mode, PolicySet};

fn version(v: &str) -> KubeVersion {
    v.parse().unwrap()
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn expression_text(policy: &Value) -> String {
    serde_json::to_string(&policy["spec"]).unwrap()
}

#[test]
fn default_set_has_a_policy_and_binding_per_rule_and_carrier() {
    let generated = generate(&PolicySet::embedded().unwrap());
    let objects = generated.objects(version("1.36")).unwrap();
    for policy in ["serial-lb-api-calls", "known-bad-lb-settings"] {
        for group in ["configmaps", "chart-values"] {
            let name = format!("stackgate-{policy}-{group}");
            let vap = named(&objects, "ValidatingAdmissionPolicy", &name).expect(&name);
            assert_eq!(vap["apiVersion"], "admissionregistration.k8s.io/v1");
            assert_eq!(vap["spec"]["failurePolicy"], "Ignore", "{name}");
            let binding = named(&objects, "ValidatingAdmissionPolicyBinding", &name).expect(&name);
            assert_eq!(binding["spec"]["policyName"], name.as_str());
            assert_eq!(
                binding["spec"]["validationActions"],
                serde_json::json!(["Deny"])
            );
            let exempt = format!("stackgate.dev/exempt.{policy}");
            assert!(expression_text(vap).contains(&exempt), "{name}");
        }
    }
    for group in ["configmaps", "chart-values"] {
        let name = format!("stackgate-serial-lb-api-calls-{group}-add");
        let map = named(&objects, "MutatingAdmissionPolicy", &name).expect(&name);
        assert_eq!(map["spec"]["reinvocationPolicy"], "Never");
        assert!(named(&objects, "MutatingAdmissionPolicyBinding", &name).is_some());
    }
    // use-octavia is never added: only the serial setting is.
    assert!(
        objects
            .iter()
            .filter(|o| o["kind"] == "MutatingAdmissionPolicy")
            .all(|o| o["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("stackgate-serial-lb-api-calls-"))
    );
}

#[test]
fn secrets_are_never_matched() {
    let generated = generate(&PolicySet::embedded().unwrap());
    for o in generated.objects(version("1.36")).unwrap() {
        let rules = &o["spec"]["matchConstraints"]["resourceRules"];
        for rule in rules.as_array().into_iter().flatten() {
            assert!(
                !rule["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == "secrets"),
                "{}",
                o["metadata"]["name"]
            );
        }
    }
}

#[test]
fn modes_become_validation_actions_and_off_generates_nothing() {
    let mut set = PolicySet::embedded().unwrap();
    let serial = set
        .policies
        .iter_mut()
        .find(|p| p.name == "serial-lb-api-calls")
        .unwrap();
    serial.mode = Mode::Warn;
    let objects = generate(&set).objects(version("1.36")).unwrap();
    let binding = named(
        &objects,
        "ValidatingAdmissionPolicyBinding",
        "stackgate-serial-lb-api-calls-configmaps",
    )
    .unwrap();
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Warn"])
    );
    // warn still mutates, as the webhook does.
    assert!(
        named(
            &objects,
            "MutatingAdmissionPolicy",
            "stackgate-serial-lb-api-calls-configmaps-add"
        )
        .is_some()
    );

    let serial = set
        .policies
        .iter_mut()
        .find(|p| p.name == "serial-lb-api-calls")
        .unwrap();
    serial.mode = Mode::Audit;
    let objects = generate(&set).objects(version("1.36")).unwrap();
    let binding = named(
        &objects,
        "ValidatingAdmissionPolicyBinding",
        "stackgate-serial-lb-api-calls-chart-values",
    )
    .unwrap();
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Audit"])
    );
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "MutatingAdmissionPolicy"),
        "audit mode never mutates"
    );

    for p in &mut set.policies {
        p.mode = Mode::Off;
    }
    assert!(generate(&set).objects(version("1.36")).unwrap().is_empty());
}

#[test]
fn scope_and_exemption_follow_the_policy() {
    let mut set = PolicySet::embedded().unwrap();
    let serial = set
        .policies
        .iter_mut()
        .find(|p| p.name == "serial-lb-api-calls")
        .unwrap();
    serial.scope.namespaces = vec!["kube-system".to_owned()];
    serial.scope.exclude_namespaces = vec!["sandbox".to_owned()];
    serial.exemption = None;
    let objects = generate(&set).objects(version("1.30")).unwrap();
    let vap = named(
        &objects,
        "ValidatingAdmissionPolicy",
        "stackgate-serial-lb-api-calls-configmaps",
    )
    .unwrap();
    let variables = vap["spec"]["variables"].as_array().unwrap();
    let var = |name: &str| {
        variables.iter().find(|v| v["name"] == name).unwrap()["expression"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        var("inScope").contains("in ['kube-system']"),
        "{}",
        var("inScope")
    );
    assert!(var("inScope").contains("!("), "{}", var("inScope"));
    assert!(var("inScope").contains("['sandbox']"), "{}", var("inScope"));
    assert_eq!(var("exempt"), "false");
    assert!(
        !vap["spec"]["validations"][0]["message"]
            .as_str()
            .unwrap()
            .contains("To exempt")
    );
}

#[test]
fn versions_pick_the_api() {
    let generated = generate(&PolicySet::embedded().unwrap());
    let apis = |v: &str| -> Vec<(String, String)> {
        generated
            .objects(version(v))
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap().to_owned(),
                    o["apiVersion"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let v1 = "admissionregistration.k8s.io/v1";
    let beta = "admissionregistration.k8s.io/v1beta1";
    assert!(apis("1.28").iter().all(|(_, a)| a == beta));
    assert!(
        apis("1.30")
            .iter()
            .all(|(k, a)| a == v1 && k.starts_with("Validating"))
    );
    assert!(
        apis("1.34")
            .iter()
            .all(|(k, a)| (k.starts_with("Validating") && a == v1)
                || (k.starts_with("Mutating") && a == beta))
    );
    assert!(apis("1.34").iter().any(|(k, _)| k.starts_with("Mutating")));
    assert!(apis("1.36").iter().all(|(_, a)| a == v1));
    assert!(matches!(
        generated.objects(version("1.27")),
        Err(AdmissionPoliciesError::Unsupported(_))
    ));
}

fn stackgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args(args)
        .env_remove("STACKGATE_POLICIES")
        .env_remove("STACKGATE_KUBE_VERSION")
        .env_remove("STACKGATE_POLICIES_OUTPUT")
        .output()
        .unwrap()
}

#[test]
fn command_line_prints_the_objects_for_the_version() {
    let out = stackgate(&[
        "policies",
        "--output",
        "admission-policies",
        "--kube-version",
        "1.36",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<Value> = text
        .split("---\n")
        .skip(1)
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(docs.iter().any(|d| d["kind"] == "MutatingAdmissionPolicy"));
    assert!(
        docs.iter()
            .any(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
    );

    let out = stackgate(&["policies", "--output", "admission-policies"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("ValidatingAdmissionPolicy"));
    assert!(
        !text.contains("MutatingAdmissionPolicy"),
        "1.30 is the default"
    );

    let out = stackgate(&[
        "policies",
        "--output",
        "admission-policies",
        "--kube-version",
        "1.27",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1.27"));

    // The default output is still the policy set.
    let out = stackgate(&["policies"]);
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .starts_with("# effective policy set")
    );
}

/// The chart ships the objects generated from the default set; regenerate with
/// `cargo run -- policies --output admission-policies --kube-version 1.36 >
/// charts/stackgate/files/admission-policies.yaml`.
#[test]
fn chart_copy_is_current() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/charts/stackgate/files/admission-policies.yaml"
    );
    let shipped = std::fs::read_to_string(path).unwrap();
    let expected = generate(&PolicySet::embedded().unwrap())
        .to_yaml(version("1.36"))
        .unwrap();
    assert!(
        shipped == expected,
        "{path} is stale: regenerate it with `cargo run -- policies --output admission-policies \
         --kube-version 1.36 > charts/stackgate/files/admission-policies.yaml`"
    );
}
