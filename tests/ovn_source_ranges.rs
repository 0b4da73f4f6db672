//! The `ovn-source-ranges` family: a table of Services (the captured-shape reviews, changed
//! one field at a time) against cloud-config facts, through the admission adapter and the
//! engine; and `check`, which derives the fact from a cloud config in the same input.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::{Value, json};
use stackgate::engine::{Engine, Facts, Verdict};
use stackgate::policy::PolicySet;
use stackgate::rules::ovn_source_ranges::{CloudConfigFact, FAMILY, LbSettings};

fn captured(rel: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/captured/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn with_ranges() -> Value {
    captured("service/validate-create-loadbalancer-source-ranges.json")
}

fn without_ranges() -> Value {
    captured("service/validate-create-loadbalancer.json")
}

fn evaluate(review: &Value, facts: &Facts) -> Verdict {
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review.clone()).unwrap();
    let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
    Engine::new(PolicySet::embedded().unwrap())
        .evaluate_with(&stackgate::admission::subject_of(&request), facts)
}

fn config(ini: &str) -> Facts {
    Facts::of(
        FAMILY.id,
        CloudConfigFact::Known(LbSettings::from_ini(
            "Secret kube-system/cloud-config key cloud.conf".to_owned(),
            ini,
        )),
    )
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Clean,
    Warn(&'static str),
    Deny(&'static str),
}

fn outcome(verdict: &Verdict) -> (Outcome, String) {
    let ours = |list: &[stackgate::engine::Finding]| {
        list.iter()
            .filter(|f| f.policy == "ovn-source-ranges")
            .map(|f| (f.code, f.denial_text()))
            .collect::<Vec<_>>()
    };
    let (denials, warnings) = (ours(&verdict.denials), ours(&verdict.warnings));
    assert!(
        denials.len() + warnings.len() <= 1,
        "{denials:?} {warnings:?}"
    );
    match (denials.first(), warnings.first()) {
        (Some((code, m)), _) => (Outcome::Deny(code), m.clone()),
        (None, Some((code, m))) => (Outcome::Warn(code), m.clone()),
        (None, None) => (Outcome::Clean, String::new()),
    }
}

const OVN: &str = "[LoadBalancer]\nlb-provider = ovn\nlb-method = SOURCE_IP_PORT\n";
const OVN_SG: &str = "[LoadBalancer]\nlb-provider = ovn\nlb-method = SOURCE_IP_PORT\nmanage-security-groups = true\n";
const AMPHORA: &str = "[LoadBalancer]\nlb-provider = amphora\n";

/// (name, review, facts, outcome, needles)
type Case = (&'static str, Value, Facts, Outcome, &'static [&'static str]);

fn annotated(mut review: Value, key: &str, value: &str) -> Value {
    review["request"]["object"]["metadata"]["annotations"] = json!({ key: value });
    review
}

#[test]
fn services_against_cloud_configs() {
    let ranges_annotation = annotated(
        without_ranges(),
        "service.beta.kubernetes.io/load-balancer-source-ranges",
        "203.0.113.0/24",
    );
    let round_robin = annotated(
        without_ranges(),
        "loadbalancer.openstack.org/lb-method",
        "ROUND_ROBIN",
    );
    let mut cluster_ip = with_ranges();
    cluster_ip["request"]["object"]["spec"]["type"] = json!("ClusterIP");
    let cases: Vec<Case> = vec![
        (
            "OVN without managed security groups: ranges denied",
            with_ranges(),
            config(OVN),
            Outcome::Deny("source-ranges-ignored"),
            &[
                "Service web/ingress spec.loadBalancerSourceRanges",
                "Secret kube-system/cloud-config key cloud.conf",
                "ignores these source ranges",
                "Fix: set manage-security-groups = true",
                "loadbalancer.go",
            ],
        ),
        (
            "the annotation form is denied the same way",
            ranges_annotation.clone(),
            config(OVN),
            Outcome::Deny("source-ranges-ignored"),
            &["the annotation service.beta.kubernetes.io/load-balancer-source-ranges"],
        ),
        (
            "OVN with managed security groups: fine",
            with_ranges(),
            config(OVN_SG),
            Outcome::Clean,
            &[],
        ),
        (
            "amphora: fine",
            with_ranges(),
            config(AMPHORA),
            Outcome::Clean,
            &[],
        ),
        (
            "no ranges: nothing to decide, even without a config",
            without_ranges(),
            Facts::default(),
            Outcome::Clean,
            &[],
        ),
        (
            "not a LoadBalancer: not read",
            cluster_ip,
            config(OVN),
            Outcome::Clean,
            &[],
        ),
        (
            "no config known: a warning that says so",
            with_ranges(),
            Facts::default(),
            Outcome::Warn("cloud-config-unseen"),
            &["cannot see the cluster's cloud config", "no cloud config"],
        ),
        (
            "config unavailable: the reason is named",
            with_ranges(),
            Facts::of(
                FAMILY.id,
                CloudConfigFact::Unavailable(
                    "Secret kube-system/cloud-config could not be read: forbidden".to_owned(),
                ),
            ),
            Outcome::Warn("cloud-config-unseen"),
            &["could not be read: forbidden"],
        ),
        (
            "unreadable config: unseen, not guessed",
            with_ranges(),
            config("[LoadBalancer\n"),
            Outcome::Warn("cloud-config-unseen"),
            &["is not valid gcfg"],
        ),
        (
            "OVN: lb-method annotation other than SOURCE_IP_PORT",
            round_robin.clone(),
            config(OVN_SG),
            Outcome::Deny("ovn-lb-method"),
            &[
                "\"ROUND_ROBIN\"",
                "from v1.34.0",
                "earlier versions ignore the annotation",
                "PR #2988",
            ],
        ),
        (
            "OVN: SOURCE_IP_PORT annotation is fine",
            annotated(
                without_ranges(),
                "loadbalancer.openstack.org/lb-method",
                "SOURCE_IP_PORT",
            ),
            config(OVN),
            Outcome::Clean,
            &[],
        ),
        (
            "amphora: any lb-method annotation is fine",
            round_robin,
            config(AMPHORA),
            Outcome::Clean,
            &[],
        ),
    ];
    for (name, review, facts, expected, needles) in cases {
        let (got, message) = outcome(&evaluate(&review, &facts));
        assert_eq!(got, expected, "{name}: {message}");
        for needle in needles {
            assert!(
                message.contains(needle),
                "{name}: {needle:?} not in {message}"
            );
        }
    }
}

#[test]
fn exemption_with_a_reason_admits() {
    let review = annotated(
        with_ranges(),
        "stackgate.dev/exempt.ovn-source-ranges",
        "ranges enforced by the edge firewall",
    );
    let verdict = evaluate(&review, &config(OVN));
    assert_eq!(outcome(&verdict).0, Outcome::Clean);
    assert!(
        verdict
            .audit_annotations
            .contains_key("ovn-source-ranges-exempted")
    );
}

fn check_stdin(input: &str) -> Value {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args(["check", "-", "--format", "json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

const SERVICE: &str = "apiVersion: v1\nkind: Service\nmetadata:\n  name: ingress\n  namespace: web\nspec:\n  type: LoadBalancer\n  loadBalancerSourceRanges:\n    - 203.0.113.0/24\n  ports:\n    - port: 443\n";

fn secret(lb: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\nstringData:\n  cloud.conf: |\n    [LoadBalancer]\n    provider-requires-serial-api-calls = true\n    lb-method = SOURCE_IP_PORT\n{lb}"
    )
}

fn ours(report: &Value) -> Vec<Value> {
    report["results"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter(|i| i["policy"] == "ovn-source-ranges")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn check_takes_the_fact_from_a_cloud_config_in_the_same_input() {
    let ovn = format!("{}---\n{SERVICE}", secret("    lb-provider = ovn\n"));
    let found = ours(&check_stdin(&ovn));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["level"], "error");
    assert_eq!(found[0]["line"], 20, "{}", found[0]);
    let message = found[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Secret kube-system/cloud-config stringData[\"cloud.conf\"] in <stdin>"),
        "{message}"
    );

    let managed = format!(
        "{}---\n{SERVICE}",
        secret("    lb-provider = ovn\n    manage-security-groups = true\n")
    );
    assert!(ours(&check_stdin(&managed)).is_empty());

    // No cloud config in the input: a warning that says it cannot see one.
    let alone = ours(&check_stdin(SERVICE));
    assert_eq!(alone.len(), 1, "{alone:?}");
    assert_eq!(alone[0]["level"], "warning");
}
