//! Table-driven cases for every cloud-config rule family through the engine, plus the CCM
//! concurrency rule on captured workloads, plus the no-secret-leak check with logs captured
//! at trace level.

use std::io::Write;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::{Value, json};
use stackgate::admission::{Webhook, handle};
use stackgate::engine::{Engine, Verdict};
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

fn configmap_review(text: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cloud-provider-config", "namespace": "openshift-config", "operation": "CREATE",
            "userInfo": {"username": "t"}, "dryRun": false,
            "object": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cloud-provider-config", "namespace": "openshift-config"},
                "data": {"config": text}}
        }
    })
}

fn secret_review(text: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Secret"},
            "resource": {"group": "", "version": "v1", "resource": "secrets"},
            "name": "cloud-config", "namespace": "kube-system", "operation": "CREATE",
            "userInfo": {"username": "t"}, "dryRun": false,
            "object": {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": "cloud-config", "namespace": "kube-system"},
                "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(text)}}
        }
    })
}

/// The operator-managed copy on OpenShift: validated only, so messages carry a note.
fn operator_copy_review(text: &str) -> Value {
    let mut review = configmap_review(text);
    let request = &mut review["request"];
    request["name"] = json!("cloud-conf");
    request["namespace"] = json!("openshift-cloud-controller-manager");
    request["object"]["metadata"] =
        json!({"name": "cloud-conf", "namespace": "openshift-cloud-controller-manager"});
    request["object"]["data"] = json!({"cloud.conf": text});
    review
}

fn evaluate(review: &Value) -> Verdict {
    evaluate_by(&engine(), review)
}

fn evaluate_by(engine: &Engine, review: &Value) -> Verdict {
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review.clone()).unwrap();
    let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
    engine.evaluate(&stackgate::admission::subject_of(&request))
}

/// The embedded set with the ccm-concurrency policy switched to `mode: enforce` (its default
/// is warn), the way an operator who wants the deny would write it.
fn concurrency_enforced() -> Engine {
    let mut set = PolicySet::embedded().unwrap();
    let mut found = false;
    for p in &mut set.policies {
        if p.name == "ccm-concurrency" {
            assert_eq!(p.mode, stackgate::policy::Mode::Warn, "the default is warn");
            p.mode = stackgate::policy::Mode::Enforce;
            found = true;
        }
    }
    assert!(found, "the embedded set has a ccm-concurrency policy");
    Engine::new(set)
}

/// Verdict of the ccm-concurrency rule in enforce mode.
fn evaluate_enforced(review: &Value) -> Verdict {
    evaluate_by(&concurrency_enforced(), review)
}

const OK_LB: &str = "[LoadBalancer]\nprovider-requires-serial-api-calls = true\n";

/// (name, INI text, expected policy of the single denial or None, needles in its message)
type Case = (
    &'static str,
    String,
    Option<&'static str>,
    &'static [&'static str],
);

fn deny_cases() -> Vec<Case> {
    vec![
        // cloud-config-integrity: crash at start
        (
            "syntax: underscore in key",
            format!("[Global]\nauth_url = x\n{OK_LB}"),
            Some("cloud-config-integrity"),
            &["line 2", "fail to start", "replace '_' with '-'"],
        ),
        (
            // gcfg refuses '_' in a name: fatal, not an unknown key with a suggestion.
            "syntax: lb_method is fatal, not a typo",
            format!("{OK_LB}lb_method = SOURCE_IP_PORT\n"),
            Some("cloud-config-integrity"),
            &[
                "line 3",
                "fail to start",
                "replace '_' with '-'",
                "lb-method",
            ],
        ),
        (
            "syntax: unterminated quote",
            format!("{OK_LB}subnet-id = \"abc\n"),
            Some("cloud-config-integrity"),
            &["line 3", "fail to start", "Fix: fix the line named here"],
        ),
        (
            "syntax: key before section",
            format!("region = r\n{OK_LB}"),
            Some("cloud-config-integrity"),
            &["line 1"],
        ),
        (
            "bool: invalid literal",
            format!("{OK_LB}create-monitor = maybe\n"),
            Some("cloud-config-integrity"),
            &["line 3", "create-monitor", "fail to start"],
        ),
        (
            "bool: empty value",
            format!("{OK_LB}internal-lb =\n"),
            Some("cloud-config-integrity"),
            &["line 3", "internal-lb"],
        ),
        (
            "duration: no unit",
            format!("{OK_LB}monitor-delay = 5\n"),
            Some("cloud-config-integrity"),
            &["line 3", "monitor-delay", "fail to start"],
        ),
        (
            "duration: metadata timeout no unit",
            format!("{OK_LB}[Metadata]\nrequest-timeout = 30\n"),
            Some("cloud-config-integrity"),
            &["line 4", "request-timeout"],
        ),
        (
            "int: not a number",
            format!("{OK_LB}max-shared-lb = two\n"),
            Some("cloud-config-integrity"),
            &["line 3", "max-shared-lb"],
        ),
        (
            "uint: negative",
            format!("{OK_LB}monitor-max-retries = -1\n"),
            Some("cloud-config-integrity"),
            &["line 3", "monitor-max-retries"],
        ),
        (
            // The int key is under the plain [LoadBalancer] header that follows the class
            // subsection; the subsection case itself is in `warn_cases`.
            "int key after a class subsection",
            format!(
                "{OK_LB}[LoadBalancerClass \"x\"]\nsubnet-id = s\n[LoadBalancer]\nmonitor-max-retries-down = 1.5\n"
            ),
            Some("cloud-config-integrity"),
            &["line 6"],
        ),
        // The CCM's own start-up checks, past gcfg (domain-facts §9.1).
        (
            "lb-version other than v2",
            format!("{OK_LB}lb-version = v1\n"),
            Some("cloud-config-integrity"),
            &[
                "line 3",
                "[LoadBalancer] lb-version",
                "only support LBaaS v2",
                "fail to start",
            ],
        ),
        (
            "lb-version compares exactly: V2 is not v2",
            format!("{OK_LB}lb-version = V2\n"),
            Some("cloud-config-integrity"),
            &["line 3", "lb-version"],
        ),
        (
            "search-order with three elements",
            format!("{OK_LB}[Metadata]\nsearch-order = configDrive,metadataService,configDrive\n"),
            Some("cloud-config-integrity"),
            &["line 4", "[Metadata] search-order", "more than 2 elements"],
        ),
        (
            "search-order with an unknown id",
            format!("{OK_LB}[Metadata]\nsearch-order = configdrive\n"),
            Some("cloud-config-integrity"),
            &["line 4", "invalid element", "exact case"],
        ),
        (
            "search-order with a trailing comma",
            format!("{OK_LB}[Metadata]\nsearch-order = metadataService,\n"),
            Some("cloud-config-integrity"),
            &["line 4", "trailing comma"],
        ),
        (
            "the last search-order counts",
            format!(
                "{OK_LB}[Metadata]\nsearch-order = metadataService\n[Metadata]\nsearch-order = x\n"
            ),
            Some("cloud-config-integrity"),
            &["line 6"],
        ),
        // serial-lb-api-calls
        (
            "serial: false",
            "[LoadBalancer]\nprovider-requires-serial-api-calls = false\n".into(),
            Some("serial-lb-api-calls"),
            &[
                "line 2",
                "set it to true",
                "stackgate.dev/exempt.serial-lb-api-calls",
            ],
        ),
        (
            "serial: 0 in lowercase section",
            "[loadbalancer]\nprovider-requires-serial-api-calls=0\n".into(),
            Some("serial-lb-api-calls"),
            &["line 2"],
        ),
        // known-bad-lb-settings
        (
            "use-octavia false",
            format!("{OK_LB}use-octavia = false\n"),
            Some("known-bad-lb-settings"),
            &["line 3", "Neutron LBaaS", "delete the line"],
        ),
        (
            "ovn without lb-method",
            format!("{OK_LB}lb-provider = ovn\n"),
            Some("known-bad-lb-settings"),
            &["line 3", "SOURCE_IP_PORT"],
        ),
        (
            "ovn with ROUND_ROBIN",
            format!("{OK_LB}lb-provider = ovn\nlb-method = ROUND_ROBIN\n"),
            Some("known-bad-lb-settings"),
            &["line 4", "SOURCE_IP_PORT"],
        ),
        // credential-placement
        (
            "password in configmap",
            format!("[Global]\npassword = hunter2-secret\n{OK_LB}"),
            Some("credential-placement"),
            &["line 2", "[Global] password", "Secret"],
        ),
        (
            "app credential secret in configmap",
            format!("[Global]\napplication-credential-secret = hunter2-secret\n{OK_LB}"),
            Some("credential-placement"),
            &["line 2", "application-credential-secret"],
        ),
        (
            "token in configmap",
            format!("[Global]\ntoken = hunter2-secret\n{OK_LB}"),
            Some("credential-placement"),
            &["line 2", "token"],
        ),
        (
            "trustee password in configmap",
            format!("[Global]\ntrustee-password = hunter2-secret\n{OK_LB}"),
            Some("credential-placement"),
            &["line 2", "trustee-password"],
        ),
        (
            // The CCM reads the last (empty) value; the ConfigMap still holds the first one.
            "password overridden by a later empty line",
            format!("[Global]\npassword=hunter2-secret\npassword=\n{OK_LB}"),
            Some("credential-placement"),
            &["line 2", "[Global] password", "does not remove this one"],
        ),
        // clean
        (
            "clean",
            format!(
                "[Global]\nregion = r\n{OK_LB}lb-provider = ovn\nlb-method = SOURCE_IP_PORT\nmonitor-delay = 5s\n"
            ),
            None,
            &[],
        ),
        (
            "clean: bool spellings",
            format!("{OK_LB}create-monitor = YES\ninternal-lb\n"),
            None,
            &[],
        ),
        (
            "clean: lb-version v2 or empty",
            format!("{OK_LB}lb-version = v2\n[LoadBalancer]\nlb-version =\n"),
            None,
            &[],
        ),
        (
            // LoadBalancer() returns before the version check when the LB is disabled.
            "clean: lb-version ignored with the load balancer disabled",
            format!("{OK_LB}enabled = false\nlb-version = v1\n"),
            None,
            &[],
        ),
        (
            "clean: search-order forms the CCM accepts",
            format!(
                "{OK_LB}[Metadata]\nsearch-order = metadataService , configDrive\n[Metadata]\nsearch-order = \"configDrive\"\n"
            ),
            None,
            &[],
        ),
        (
            "clean: empty search-order means the default",
            format!("{OK_LB}[Metadata]\nsearch-order =\n"),
            None,
            &[],
        ),
    ]
}

#[test]
fn each_rule_denies_exactly_what_it_should() {
    for (name, text, policy, needles) in deny_cases() {
        let verdict = evaluate(&configmap_review(&text));
        match policy {
            Some(policy) => {
                assert_eq!(verdict.denials.len(), 1, "{name}: {:#?}", verdict.denials);
                let d = &verdict.denials[0];
                assert_eq!(d.policy, policy, "{name}");
                for needle in needles {
                    assert!(
                        d.denial_text().contains(needle),
                        "{name}: {needle:?} not in {}",
                        d.denial_text()
                    );
                }
                assert!(d.denial_text().contains("source:"), "{name}");
                assert!(!d.denial_text().contains("hunter2"), "{name}");
            }
            None => assert!(verdict.denials.is_empty(), "{name}: {:#?}", verdict.denials),
        }
    }
}

/// (name, INI text, needles of the single warning; none: no warning at all, builder of the
/// review that carries the text)
type WarnCase = (
    &'static str,
    String,
    &'static [&'static str],
    fn(&str) -> Value,
);

fn warn_cases() -> Vec<WarnCase> {
    vec![
        (
            "typo key",
            format!("{OK_LB}provider-requires-serial-api-call = true\n"),
            &[
                "line 3",
                "silently ignored",
                "did you mean `provider-requires-serial-api-calls`?",
            ],
            configmap_review,
        ),
        (
            "typo section",
            format!("{OK_LB}[LoadBalancr]\nlb-method = SOURCE_IP_PORT\n"),
            &["line 3", "[LoadBalancr]", "did you mean `LoadBalancer`?"],
            configmap_review,
        ),
        (
            "unknown section",
            format!("{OK_LB}[Routes]\nrouter-id = r\n"),
            &["line 3", "[Routes]"],
            configmap_review,
        ),
        (
            "removed key",
            format!("{OK_LB}use-octavia = true\n"),
            &["line 3", "use-octavia"],
            configmap_review,
        ),
        (
            "subsection on struct section",
            format!("{OK_LB}[Global \"x\"]\nregion = r\n"),
            &["line 3"],
            configmap_review,
        ),
        (
            // LBClass has string keys only: gcfg drops an [LoadBalancer] int key here without
            // converting it, so an invalid integer is not fatal, only ignored.
            "class subsection: int key is not read there",
            format!("{OK_LB}[LoadBalancerClass \"x\"]\nsubnet-id = s\nmax-shared-lb = two\n"),
            &[
                "line 5",
                "[LoadBalancerClass] max-shared-lb",
                "read in section [LoadBalancer]",
            ],
            configmap_review,
        ),
        (
            "section names are case-insensitive",
            "[Loadbalancer]\nprovider-requires-serial-api-calls = true\nlb-method = SOURCE_IP_PORT\n"
                .into(),
            &[],
            configmap_review,
        ),
        (
            "value cut at #",
            format!("{OK_LB}subnet-id = abc#def\n"),
            &["line 3", "wrap the value in double quotes"],
            configmap_review,
        ),
        (
            // In a Secret (in a ConfigMap credential-placement denies it).
            "credential cut at ;",
            format!("[Global]\npassword = abc;hunter2-tail\n{OK_LB}"),
            &[
                "line 2",
                "[Global] password",
                "credential value",
                "wrap the value in double quotes",
            ],
            secret_review,
        ),
        // Settings the CCM accepts without an error but that do not do what they say (§9.1).
        (
            "tls-insecure is a string: only exactly true disables verification",
            format!("[Global]\ntls-insecure = True\n{OK_LB}"),
            &["line 2", "[Global] tls-insecure", "only for exactly `true`", "pkg/client/client.go"],
            configmap_review,
        ),
        (
            "tls-insecure = yes",
            format!("[Global]\ntls-insecure = yes\n{OK_LB}"),
            &["line 2", "tls-insecure"],
            configmap_review,
        ),
        (
            "tls-insecure true and false are fine",
            format!("[Global]\ntls-insecure = false\n[Global]\ntls-insecure = true\n{OK_LB}"),
            &[],
            configmap_review,
        ),
        (
            "unknown lb-provider",
            format!("{OK_LB}lb-provider = octavia-ovn\n"),
            &[
                "line 3",
                "[LoadBalancer] lb-provider",
                "Unsupported LoadBalancer Provider",
                "amphorav2 from v1.34.0",
            ],
            configmap_review,
        ),
        (
            "lb-provider compares exactly: Amphora is unknown",
            format!("{OK_LB}lb-provider = Amphora\n"),
            &["line 3", "exact case"],
            configmap_review,
        ),
        (
            // No CCM version in a ConfigMap: no finding about amphorav2 (never guessed).
            "amphorav2 without a known CCM version",
            format!("{OK_LB}lb-provider = amphorav2\n"),
            &[],
            configmap_review,
        ),
        (
            "unknown container-store",
            format!("{OK_LB}container-store = vault\n"),
            &["line 3", "[LoadBalancer] container-store", "Unsupported Container Store"],
            configmap_review,
        ),
        (
            "container-store external is fine",
            format!("{OK_LB}container-store = external\n"),
            &[],
            configmap_review,
        ),
        (
            // The CCM reads clouds.yaml from the pod's file system: no input shows whether it
            // is there, so nothing is reported (see the integrity module docs).
            "use-clouds cannot be checked",
            format!("[Global]\nuse-clouds = true\nclouds-file = /etc/openstack/clouds.yaml\n{OK_LB}"),
            &[],
            configmap_review,
        ),
        (
            "username is not a credential",
            format!("[Global]\nusername = u\n{OK_LB}"),
            &[],
            configmap_review,
        ),
    ]
}

#[test]
fn silent_ignores_are_warnings_with_suggestions() {
    for (name, text, needles, review) in warn_cases() {
        let verdict = evaluate(&review(&text));
        assert!(verdict.denials.is_empty(), "{name}: {:#?}", verdict.denials);
        if needles.is_empty() {
            assert!(
                verdict.warnings.is_empty(),
                "{name}: {:#?}",
                verdict.warnings
            );
            continue;
        }
        assert_eq!(verdict.warnings.len(), 1, "{name}: {:#?}", verdict.warnings);
        for needle in needles {
            assert!(
                verdict.warnings[0].denial_text().contains(needle),
                "{name}: {needle:?} not in {}",
                verdict.warnings[0].denial_text()
            );
        }
        assert!(
            !verdict.warnings[0].denial_text().contains("hunter2"),
            "{name}"
        );
    }
}

/// The `did you mean `…`?` part of a message (any case), if it has one.
fn suggestion(message: &str) -> Option<&str> {
    let at = message.to_ascii_lowercase().find("did you mean `")?;
    let rest = message.get(at..)?;
    let end = rest.find("`?")?;
    rest.get(..end + 2)
}

#[test]
fn warnings_sent_to_clients_keep_line_key_and_suggestion() {
    let engine = engine();
    let metrics = Metrics::new();
    let mut suggestions = 0;
    for (name, text, _, _) in warn_cases() {
        for review in [
            configmap_review(&text),
            secret_review(&text),
            operator_copy_review(&text),
        ] {
            let verdict = evaluate(&review);
            let body = serde_json::to_vec(&review).unwrap();
            let reply = handle(&engine, Webhook::Validate, &body, &metrics);
            let out: Value = serde_json::from_slice(&reply.body).unwrap();
            let sent: Vec<&str> = out["response"]["warnings"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            assert_eq!(sent.len(), verdict.warnings.len(), "{name}: {sent:#?}");
            for (finding, sent) in verdict.warnings.iter().zip(sent) {
                assert!(
                    sent.chars().count() <= 256,
                    "{name}: {} chars: {sent}",
                    sent.chars().count()
                );
                if let Some(line) = finding.line() {
                    assert!(sent.contains(&format!("line {line}:")), "{name}: {sent}");
                }
                if let Some(hint) = suggestion(&finding.denial_text()) {
                    suggestions += 1;
                    assert!(sent.contains(hint), "{name}: {hint:?} cut from {sent}");
                    // Ending well before the limit, with room for longer object names.
                    let end = sent
                        .find(hint)
                        .map(|at| sent[..at + hint.len()].chars().count());
                    assert!(end <= Some(240), "{name}: ends at {end:?}: {sent}");
                }
            }
        }
    }
    // The typo section, the typo key and the unknown section (`[Routes]`: did you mean `Route`?).
    assert_eq!(suggestions, 9, "three suggestion cases on three sites");
}

#[test]
fn truncated_credential_in_a_secret_is_warned_without_the_value() {
    let text = format!("[Global]\npassword = abc#hunter2-tail\n{OK_LB}");
    let verdict = evaluate(&secret_review(&text));
    assert!(verdict.denials.is_empty(), "{:#?}", verdict.denials);
    assert_eq!(verdict.warnings.len(), 1);
    let m = &verdict.warnings[0].denial_text();
    assert!(m.contains("line 2") && m.contains("credential"), "{m}");
    assert!(!m.contains("abc") && !m.contains("hunter2"), "{m}");
}

fn captured(rel: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/captured/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn ccm_concurrency_on_captured_workloads() {
    let deployment = captured("deployment/validate-create-openstack-cloud-controller-manager.json");
    let verdict = evaluate_enforced(&deployment);
    assert_eq!(verdict.denials.len(), 1, "{:#?}", verdict.denials);
    let d = &verdict.denials[0];
    assert_eq!(d.policy, "ccm-concurrency");
    assert_eq!(d.pointer(), Some("/spec/template/spec/containers/0/args/5"));
    assert!(
        d.denial_text().contains("--concurrent-service-syncs=4"),
        "{}",
        d.denial_text()
    );
    assert!(d.denial_text().contains("409"), "{}", d.denial_text());

    // The upstream DaemonSet does not set the flag.
    let daemonset = captured("daemonset/validate-create-openstack-cloud-controller-manager.json");
    assert!(evaluate_enforced(&daemonset).denials.is_empty());

    // Setting it to 1, or the space-separated form with 2, through the same path.
    let mut one = deployment.clone();
    one["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["args"][5] =
        json!("--concurrent-service-syncs=1");
    assert!(evaluate_enforced(&one).denials.is_empty());
    let mut spaced = deployment.clone();
    spaced["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["args"][5] =
        json!("--concurrent-service-syncs");
    spaced["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["args"][6] =
        json!("2");
    assert_eq!(evaluate_enforced(&spaced).denials.len(), 1);

    // A container that is not the CCM is not checked.
    let mut other = deployment.clone();
    let c = &mut other["request"]["object"]["spec"]["template"]["spec"]["containers"][0];
    c["image"] = json!("example.com/some-controller:v1");
    c["args"] = json!(["--concurrent-service-syncs=4"]);
    assert!(evaluate_enforced(&other).denials.is_empty());
}

/// The captured CCM Deployment with its container's args replaced, exempt from the
/// cluster-name policy (these args set no name), so only the concurrency flag is judged.
fn deployment_with_args(args: Value) -> Value {
    let mut review = captured("deployment/validate-create-openstack-cloud-controller-manager.json");
    let object = &mut review["request"]["object"];
    object["spec"]["template"]["spec"]["containers"][0]["args"] = args;
    object["metadata"]["annotations"]["stackgate.dev/exempt.cluster-name"] =
        json!("cluster-name cases are in tests/cluster_name.rs");
    // The args replaced here drop the captured --cloud-config.
    object["metadata"]["annotations"]["stackgate.dev/exempt.ccm-config-source"] =
        json!("ccm-config-source cases are in tests/ccm_config_source.rs");
    review
}

#[test]
fn ccm_concurrency_judges_only_the_last_setting() {
    const BIN: &str = "/bin/openstack-cloud-controller-manager";
    // pflag: the last setting wins, in either form.
    for args in [
        json!([
            BIN,
            "--concurrent-service-syncs=4",
            "--concurrent-service-syncs=1"
        ]),
        json!([
            BIN,
            "--concurrent-service-syncs",
            "4",
            "--concurrent-service-syncs",
            "1"
        ]),
        json!([
            BIN,
            "--concurrent-service-syncs=x",
            "--concurrent-service-syncs",
            "1"
        ]),
    ] {
        let verdict = evaluate_enforced(&deployment_with_args(args.clone()));
        assert!(verdict.denials.is_empty(), "{args}: {:#?}", verdict.denials);
        assert!(
            verdict.warnings.is_empty(),
            "{args}: {:#?}",
            verdict.warnings
        );
    }
    for (args, index) in [
        (
            json!([
                BIN,
                "--concurrent-service-syncs=1",
                "--concurrent-service-syncs",
                "4"
            ]),
            2,
        ),
        (
            json!([
                BIN,
                "--concurrent-service-syncs",
                "1",
                "--concurrent-service-syncs=4"
            ]),
            3,
        ),
    ] {
        let verdict = evaluate_enforced(&deployment_with_args(args.clone()));
        assert_eq!(verdict.denials.len(), 1, "{args}: {:#?}", verdict.denials);
        assert_eq!(
            verdict.denials[0].pointer(),
            Some(format!("/spec/template/spec/containers/0/args/{index}").as_str()),
            "{args}"
        );
    }
    // command and args form one argv: a setting in args overrides one in command.
    let mut review = deployment_with_args(json!(["--concurrent-service-syncs=1"]));
    review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["command"] = json!([
        BIN,
        "--cloud-provider=openstack",
        "--concurrent-service-syncs=4"
    ]);
    assert!(evaluate_enforced(&review).denials.is_empty());
}

#[test]
fn ccm_concurrency_variable_reference_is_warned_not_denied() {
    const BIN: &str = "/bin/openstack-cloud-controller-manager";
    for args in [
        json!([BIN, "--concurrent-service-syncs=$(SYNCS)"]),
        json!([BIN, "--concurrent-service-syncs", "$(SYNCS)"]),
        json!([
            BIN,
            "--concurrent-service-syncs=1",
            "--concurrent-service-syncs=$(SYNCS)"
        ]),
    ] {
        let mut review = deployment_with_args(args.clone());
        review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "SYNCS", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]);
        let verdict = evaluate_enforced(&review);
        assert!(verdict.denials.is_empty(), "{args}: {:#?}", verdict.denials);
        assert_eq!(verdict.warnings.len(), 1, "{args}: {:#?}", verdict.warnings);
        let w = &verdict.warnings[0];
        assert_eq!(w.policy, "ccm-concurrency");
        assert!(
            w.denial_text().contains("--concurrent-service-syncs"),
            "{}",
            w.denial_text()
        );
        assert!(
            w.denial_text().contains("cannot be checked"),
            "{}",
            w.denial_text()
        );
        assert!(!w.denial_text().contains("fail to"), "{}", w.denial_text());
    }
    // `$$(SYNCS)` is the escaped literal `$(SYNCS)`: the CCM cannot parse it.
    let verdict = evaluate_enforced(&deployment_with_args(json!([
        BIN,
        "--concurrent-service-syncs=$$(SYNCS)"
    ])));
    assert_eq!(verdict.denials.len(), 1, "{:#?}", verdict.denials);
    assert!(verdict.denials[0].denial_text().contains("not start"));
}

#[test]
fn ccm_concurrency_warns_only_when_serial_calls_are_not_enforced() {
    let mut set = PolicySet::embedded().unwrap();
    for p in &mut set.policies {
        if p.name == "serial-lb-api-calls" {
            p.mode = stackgate::policy::Mode::Warn;
        }
        if p.name == "ccm-concurrency" {
            p.mode = stackgate::policy::Mode::Enforce;
        }
    }
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(captured(
        "deployment/validate-create-openstack-cloud-controller-manager.json",
    ))
    .unwrap();
    let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
    let verdict = Engine::new(set).evaluate(&stackgate::admission::subject_of(&request));
    assert!(verdict.denials.is_empty());
    assert!(
        verdict
            .warnings
            .iter()
            .any(|w| w.policy == "ccm-concurrency")
    );
}

/// The default mode is warn (domain-facts §1.5, §9.1: weak evidence, Gardener runs 10): the
/// same captured Deployment that enforce mode denies is admitted with the finding as a
/// warning, and a value the CCM cannot parse is a warning too.
#[test]
fn ccm_concurrency_defaults_to_warn() {
    let deployment = captured("deployment/validate-create-openstack-cloud-controller-manager.json");
    let verdict = evaluate(&deployment);
    assert!(verdict.denials.is_empty(), "{:#?}", verdict.denials);
    let warnings: Vec<_> = verdict
        .warnings
        .iter()
        .filter(|w| w.policy == "ccm-concurrency")
        .collect();
    assert_eq!(warnings.len(), 1, "{:#?}", verdict.warnings);
    assert!(
        warnings[0]
            .denial_text()
            .contains("--concurrent-service-syncs=4"),
        "{}",
        warnings[0].denial_text()
    );
    assert_eq!(
        warnings[0].pointer(),
        Some("/spec/template/spec/containers/0/args/5")
    );
    let invalid = evaluate(&deployment_with_args(json!([
        "/bin/openstack-cloud-controller-manager",
        "--concurrent-service-syncs=many"
    ])));
    assert!(invalid.denials.is_empty(), "{:#?}", invalid.denials);
    assert!(
        invalid
            .warnings
            .iter()
            .any(|w| w.policy == "ccm-concurrency" && w.denial_text().contains("not start")),
        "{:#?}",
        invalid.warnings
    );
    // And enforce is still available: the same object is denied.
    assert_eq!(evaluate_enforced(&deployment).denials.len(), 1);
}

/// The captured Flux HelmRelease of the CCM chart (chart version 2.31.1 as captured) with
/// `lb-provider` set in its structured cloudConfig, the chart version replaced by `version`
/// and, when given, the values' `image.tag`.
fn helmrelease_with(provider: &str, version: &str, tag: Option<&str>) -> Value {
    let mut review =
        captured("helmrelease/validate-create-openstack-cloud-controller-manager.json");
    let spec = &mut review["request"]["object"]["spec"];
    assert_eq!(
        spec["chart"]["spec"]["version"], "2.31.1",
        "captured as expected"
    );
    spec["chart"]["spec"]["version"] = json!(version);
    spec["values"]["cloudConfig"]["loadBalancer"]["lb-provider"] = json!(provider);
    if let Some(tag) = tag {
        spec["values"]["image"] = json!({"tag": tag});
    }
    review
}

/// Warnings of one code.
fn with_code<'v>(verdict: &'v Verdict, code: &str) -> Vec<&'v stackgate::engine::Finding> {
    verdict.warnings.iter().filter(|w| w.code == code).collect()
}

/// `amphorav2` is listed from CCM v1.34.0 and `f5` from v1.32.0, and keys of the key table
/// have a first release (domain-facts §9.1): warned only where the object pins an older CCM,
/// by chart version or values `image.tag`.
#[test]
fn provider_newer_than_the_pinned_ccm_is_warned() {
    const CODE: &str = "needs-newer-ccm";
    // (provider, chart version, image.tag, expected needles or None)
    type Row<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a [&'a str]>);
    let cases: &[Row<'_>] = &[
        (
            "amphorav2",
            "2.31.1",
            None,
            Some(&[
                "lb-provider = amphorav2",
                "from CCM v1.34.0",
                "chart version 2.31.1, v1.31",
            ]),
        ),
        ("amphorav2", "2.34.0", None, None),
        ("amphorav2", "2.36.0", None, None),
        // A pre-release chart ships the previous minor or its own: 2.34.0-alpha.x may be v1.33.
        ("amphorav2", "2.34.0-alpha.1", None, None),
        (
            "amphorav2",
            "2.33.0-alpha.0",
            None,
            Some(&["chart version 2.33.0-alpha.0, v1.32 or v1.33"]),
        ),
        // Ranges are not a version: no finding.
        ("amphorav2", ">=2.30.0", None, None),
        ("amphorav2", "2.x", None, None),
        // image.tag wins over the chart's appVersion.
        ("amphorav2", "2.31.1", Some("v1.35.0"), None),
        (
            "amphorav2",
            "2.36.0",
            Some("v1.33.2"),
            Some(&["values image.tag v1.33.2, v1.33"]),
        ),
        (
            "amphorav2",
            "2.31.1",
            Some("latest"),
            Some(&["chart version 2.31.1"]),
        ),
        (
            "f5",
            "2.31.1",
            None,
            Some(&["lb-provider = f5", "from CCM v1.32.0"]),
        ),
        ("f5", "2.32.0", None, None),
        ("amphora", "2.28.0", None, None),
        // A key newer than the pinned CCM is ignored by it: the captured values set
        // provider-requires-serial-api-calls, read from v1.28.0.
        (
            "amphora",
            "2.27.0",
            None,
            Some(&[
                "[LoadBalancer] provider-requires-serial-api-calls is read from CCM v1.28.0",
                "chart version 2.27.0, v1.27",
                "silently ignores it",
            ]),
        ),
    ];
    for (provider, version, tag, expect) in cases {
        let verdict = evaluate(&helmrelease_with(provider, version, *tag));
        let name = format!("{provider} on {version} tag {tag:?}");
        assert!(verdict.denials.is_empty(), "{name}: {:#?}", verdict.denials);
        let found = with_code(&verdict, CODE);
        match expect {
            None => assert!(found.is_empty(), "{name}: {found:#?}"),
            Some(needles) => {
                assert_eq!(found.len(), 1, "{name}: {:#?}", verdict.warnings);
                assert_eq!(found[0].policy, "cloud-config-integrity");
                for n in *needles {
                    assert!(
                        found[0].denial_text().contains(n),
                        "{name}: {n:?} in {}",
                        found[0].denial_text()
                    );
                }
            }
        }
    }
}

/// A `MakeWriter` that appends every log line to a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Adds `stackgate.dev/exempt.<policy>` for every policy of `set` that allows exemptions,
/// written by a cluster admin (the shipped enforce policies let group system:masters exempt).
fn exempt_all(review: &Value, set: &PolicySet) -> Value {
    let mut review = review.clone();
    review["request"]["userInfo"] = json!({"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]});
    let metadata = &mut review["request"]["object"]["metadata"];
    for p in &set.policies {
        if let Some(key) = p.exemption_annotation() {
            metadata["annotations"][key] = json!("change ticket 42");
        }
    }
    review
}

#[test]
fn credential_values_appear_in_no_message_warning_annotation_metric_or_log() {
    const CANARY: &str = "Canary-Cr3dential-Value";
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let metrics = Metrics::new();
    // The default set; credential-placement in audit mode (its findings become audit
    // annotations); every policy in audit mode.
    let default = PolicySet::embedded().unwrap();
    let mut credential_audit = default.clone();
    for p in &mut credential_audit.policies {
        if p.name == "credential-placement" {
            p.mode = stackgate::policy::Mode::Audit;
        }
    }
    let mut all_audit = default.clone();
    for p in &mut all_audit.policies {
        p.mode = stackgate::policy::Mode::Audit;
    }
    let engines: Vec<Engine> = [default.clone(), credential_audit, all_audit]
        .into_iter()
        .map(Engine::new)
        .collect();
    let mut outputs = String::new();
    tracing::subscriber::with_default(subscriber, || {
        let mut texts: Vec<String> = Vec::new();
        for key in [
            "password",
            "application-credential-secret",
            "token",
            "trustee-password",
        ] {
            // Plain, cut at an unquoted '#' or ';', unterminated quote, bad values elsewhere,
            // broken syntax, overridden by a later empty line, a typo of the key.
            texts.push(format!("[Global]\n{key} = {CANARY}\n{OK_LB}"));
            texts.push(format!("[Global]\n{key} = x#{CANARY}\n{OK_LB}"));
            texts.push(format!("[Global]\n{key} = x;{CANARY}\n{OK_LB}"));
            texts.push(format!("[Global]\n{key} = \"{CANARY}\n{OK_LB}"));
            texts.push(format!("[Global]\n{key} = {CANARY}\n[LoadBalancer]\nprovider-requires-serial-api-calls = {CANARY}\nmonitor-delay = {CANARY}\n"));
            texts.push(format!("[Global]\n{key}_x = {CANARY}\n{OK_LB}"));
            texts.push(format!("[Global]\n{key} = {CANARY}\n{key} =\n{OK_LB}"));
            texts.push(format!("[Global]\n{key}s = {CANARY}\n{OK_LB}"));
            // The value on the line after `key =`: gcfg reads it as a bare variable name
            // (issue #12 item 7), alone or between other lines.
            texts.push(format!("[Global]\n{key} =\n{CANARY}\n{OK_LB}"));
            texts.push(format!(
                "[Global]\n{key} =\n  {CANARY}\nregion = r\n{OK_LB}"
            ));
            // A section named after the secret, with keys, empty, and with a cut value.
            texts.push(format!(
                "[Global]\n{key} = {CANARY}\n{OK_LB}[{CANARY}]\nregion = r\n"
            ));
            texts.push(format!("{OK_LB}[{CANARY}]\n"));
            texts.push(format!("{OK_LB}[{CANARY}]\n{key} = x#y\n"));
            // known-bad-lb-settings, with the canary in the values it reads.
            texts.push(format!(
                "[Global]\n{key} = {CANARY}\n{OK_LB}lb-provider = ovn\nlb-method = {CANARY}\n"
            ));
            texts.push(format!(
                "[Global]\n{key} = {CANARY}\n{OK_LB}use-octavia = {CANARY}\n"
            ));
            texts.push(format!(
                "[Global]\n{key} = {CANARY}\n{OK_LB}use-octavia = false\nlb-provider = {CANARY}\n"
            ));
        }
        let mut reviews: Vec<Value> = Vec::new();
        for text in &texts {
            reviews.push(configmap_review(text));
            reviews.push(secret_review(text));
        }
        // ccm-concurrency: the canary as the flag's value, as a variable reference, in the
        // environment and in a neighbouring argument.
        const BIN: &str = "/bin/openstack-cloud-controller-manager";
        for args in [
            json!([BIN, format!("--concurrent-service-syncs={CANARY}")]),
            json!([BIN, "--concurrent-service-syncs", CANARY]),
            json!([BIN, format!("--concurrent-service-syncs=$({CANARY})")]),
            json!([
                BIN,
                format!("--os-password={CANARY}"),
                "--concurrent-service-syncs=4"
            ]),
        ] {
            let mut review = deployment_with_args(args);
            review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["env"] =
                json!([{"name": CANARY, "value": CANARY}]);
            reviews.push(review);
        }
        // A Flux HelmRelease values site: credentials, bad values, a typo, and the flag.
        let helmrelease =
            captured("helmrelease/validate-create-openstack-cloud-controller-manager.json");
        let edits: &[&[(&str, &str, Value)]] = &[
            &[("global", "password", json!(CANARY))],
            &[("global", "application-credential-secret", json!(CANARY))],
            &[("global", "token", json!(format!("x#{CANARY}")))],
            &[("global", "passwd", json!(CANARY))],
            &[(
                "loadBalancer",
                "provider-requires-serial-api-calls",
                json!(CANARY),
            )],
            &[("loadBalancer", "monitor-delay", json!(CANARY))],
            &[
                ("loadBalancer", "lb-provider", json!("ovn")),
                ("loadBalancer", "lb-method", json!(CANARY)),
            ],
            &[("loadBalancer", "use-octavia", json!(CANARY))],
            &[
                ("loadBalancer", "use-octavia", json!(false)),
                ("loadBalancer", "lb-provider", json!(CANARY)),
            ],
        ];
        for edit in edits {
            let mut review = helmrelease.clone();
            let values = &mut review["request"]["object"]["spec"]["values"];
            for (section, key, value) in edit.iter() {
                values["cloudConfig"][section][key] = value.clone();
            }
            values["controllerExtraArgs"] = json!(format!(
                "- --concurrent-service-syncs={CANARY}\n- --os-password={CANARY}\n"
            ));
            reviews.push(review);
        }
        for review in &reviews {
            for review in [review.clone(), exempt_all(review, &default)] {
                let body = serde_json::to_vec(&review).unwrap();
                for engine in &engines {
                    for webhook in [Webhook::Mutate, Webhook::Validate] {
                        let reply = handle(engine, webhook, &body, &metrics);
                        let mut out: Value = serde_json::from_slice(&reply.body).unwrap();
                        // The patch necessarily carries the object's data back to the
                        // apiserver; everything else a user or operator sees must not.
                        if let Some(r) = out.get_mut("response").and_then(Value::as_object_mut) {
                            r.remove("patch");
                        }
                        outputs.push_str(&out.to_string());
                    }
                }
            }
        }
    });
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("review answered"), "logs were captured");
    // The scan covers what each output can carry.
    for needle in [
        "credential-placement-finding",
        "credential-placement-exempted",
        "ccm-concurrency-finding",
        "ccm-concurrency-exempted",
        "known-bad-lb-settings-finding",
        "known-bad-lb-settings-exempted",
        "cloud-config-integrity-finding",
        "\"warnings\"",
        "\"message\"",
    ] {
        assert!(outputs.contains(needle), "no {needle} in the responses");
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
    for (what, text) in [
        ("responses", &outputs),
        ("logs", &logs),
        ("metrics", &metrics.encode()),
    ] {
        assert!(!text.contains(CANARY), "credential value found in {what}");
        assert!(
            !text.contains(&b64),
            "base64 credential value found in {what}"
        );
    }
}

#[test]
fn only_an_underscore_gets_the_underscore_advice() {
    let verdict = evaluate(&configmap_review(&format!("{OK_LB}subnet-id = \"abc\n")));
    let text = verdict
        .denials
        .iter()
        .find(|d| d.policy == "cloud-config-integrity")
        .map(|d| d.denial_text())
        .expect("an integrity denial");
    assert!(!text.contains("'_'"), "{text}");
    assert!(!text.contains("replace"), "{text}");
}
