//! Every cloud-config rule family of issue #3 through the running HTTPS webhook: real TLS on
//! `127.0.0.1:0` (the `TestServer` of tests/common), reviews built from the captured
//! kube-apiserver bodies with one value changed, POSTed to `/validate` and `/mutate` like the
//! apiserver does. The assertions are on what a user sees: `allowed`, the status code, stable
//! fragments of `status.message`, `warnings`, and whether a patch comes back.
//!
//! tests/rules_table.rs covers the same rules in process with many more inputs; this file
//! proves the decisions survive the transport (encoding, the warning cut, the 403 status).

mod common;

use base64::Engine as _;
use common::*;
use http::StatusCode;
use serde_json::{Value, json};

const VALIDATE_CONFIGMAP: &str = "configmap/validate-create-cloud-provider-config.json";
const MUTATE_CONFIGMAP: &str = "configmap/mutate-create-cloud-provider-config.json";
const VALIDATE_SECRET: &str = "secret/validate-create-cloud-config-from-file.json";
const MUTATE_SECRET: &str = "secret/mutate-create-cloud-config-from-file.json";
const VALIDATE_DEPLOYMENT: &str =
    "deployment/validate-create-openstack-cloud-controller-manager.json";
const MUTATE_DEPLOYMENT: &str = "deployment/mutate-create-openstack-cloud-controller-manager.json";
const VALIDATE_DAEMONSET: &str =
    "daemonset/validate-create-openstack-cloud-controller-manager.json";

/// `[LoadBalancer]` with serial calls on, so that the serial policy neither warns nor patches
/// and each row isolates one family.
const OK_LB: &str = "[LoadBalancer]\nprovider-requires-serial-api-calls = true\n";

/// A credential value that must never come back in any response.
const CANARY: &str = "Canary-Pa55word-Value";

fn json_of(rel: &str) -> Value {
    serde_json::from_slice(&captured(rel)).expect("captured JSON")
}

/// The captured ConfigMap review (`openshift-config/cloud-provider-config`, key `config`)
/// with `text` as its cloud config.
fn configmap(rel: &str, text: &str) -> Value {
    let mut v = json_of(rel);
    v["request"]["object"]["data"]["config"] = json!(text);
    v
}

/// The captured Secret review (`kube-system/cloud-config`, key `cloud.conf`, base64) with
/// `text` as its cloud config.
fn secret(rel: &str, text: &str) -> Value {
    let mut v = json_of(rel);
    v["request"]["object"]["data"]["cloud.conf"] =
        json!(base64::engine::general_purpose::STANDARD.encode(text));
    v
}

/// The captured CCM Deployment review with `args[5]` (`--concurrent-service-syncs=4` as
/// captured) replaced by `arg`.
fn deployment(rel: &str, arg: &str) -> Value {
    let mut v = json_of(rel);
    let args = &mut v["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(
        args[5], "--concurrent-service-syncs=4",
        "captured as expected"
    );
    args[5] = json!(arg);
    // A cluster name of its own, so only the concurrency flag is judged here.
    assert_eq!(args[4], "--cluster-name=kubernetes", "captured as expected");
    args[4] = json!("--cluster-name=cluster-a");
    v
}

/// The captured CCM Deployment as an UPDATE from `--cluster-name=cluster-a` to `cluster-b`.
fn renamed_deployment() -> Value {
    let mut v = deployment(VALIDATE_DEPLOYMENT, "--v=2");
    let request = &mut v["request"];
    request["operation"] = json!("UPDATE");
    let mut old = request["object"].clone();
    old["spec"]["template"]["spec"]["containers"][0]["args"][4] = json!("--cluster-name=cluster-a");
    request["oldObject"] = old;
    request["object"]["spec"]["template"]["spec"]["containers"][0]["args"][4] =
        json!("--cluster-name=cluster-b");
    v
}

const VALIDATE_HELMRELEASE: &str =
    "helmrelease/validate-create-openstack-cloud-controller-manager.json";
const MUTATE_HELMRELEASE: &str =
    "helmrelease/mutate-create-openstack-cloud-controller-manager.json";

/// The captured Flux HelmRelease of the CCM chart (chart version 2.31.1, CCM v1.31) with
/// `lb-provider` set and its `controllerExtraArgs` removed (so ccm-concurrency stays quiet).
fn helmrelease_provider(rel: &str, provider: &str) -> Value {
    let mut v = json_of(rel);
    let spec = &mut v["request"]["object"]["spec"];
    assert_eq!(
        spec["chart"]["spec"]["version"], "2.31.1",
        "captured as expected"
    );
    spec["values"]["cloudConfig"]["loadBalancer"]["lb-provider"] = json!(provider);
    // A cluster of its own, so that the cluster-name family has nothing to say here.
    spec["values"]["cluster"]["name"] = json!("prod-eu-1");
    if let Some(values) = spec["values"].as_object_mut() {
        values.remove("controllerExtraArgs");
    }
    v
}

/// POSTs `review` to `path` and returns the `response`, checking status 200 and the uid.
async fn send(client: &Client, path: &str, review: &Value) -> Value {
    let body = serde_json::to_vec(review).expect("encode");
    let (status, out) = post(client, path, body).await;
    assert_eq!(status, StatusCode::OK, "{path}: {out}");
    assert_eq!(out["apiVersion"], "admission.k8s.io/v1", "{path}: {out}");
    assert_eq!(out["kind"], "AdmissionReview", "{path}: {out}");
    assert_eq!(out["response"]["uid"], review["request"]["uid"], "{path}");
    out["response"].clone()
}

fn warnings(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// What `/validate` must answer.
enum Expect {
    /// Denied (403) by `policy`; the message holds every needle.
    Deny {
        policy: &'static str,
        needles: &'static [&'static str],
    },
    /// Allowed with exactly one warning, from `policy`, holding every needle (ignoring case).
    Warn {
        policy: &'static str,
        needles: &'static [&'static str],
    },
    /// Allowed, no warnings.
    Clean,
}

/// What `/mutate` must answer (always allowed: mutation fails open).
#[derive(Clone, Copy)]
enum Mutate {
    /// No patch.
    NoPatch,
    /// A patch whose decoded text mentions this.
    Patch(&'static str),
}

struct Case {
    name: &'static str,
    validate: Value,
    mutate: Value,
    expect: Expect,
    mutate_expect: Mutate,
}

fn config_case(name: &'static str, text: &str, expect: Expect, mutate: Mutate) -> Case {
    Case {
        name,
        validate: configmap(VALIDATE_CONFIGMAP, text),
        mutate: configmap(MUTATE_CONFIGMAP, text),
        expect,
        mutate_expect: mutate,
    }
}

fn cases() -> Vec<Case> {
    vec![
        // cloud-config-integrity: what the CCM cannot start with.
        config_case(
            "integrity: duration without a unit",
            &format!("{OK_LB}monitor-delay = 5\n"),
            Expect::Deny {
                policy: "cloud-config-integrity",
                needles: &[
                    "ConfigMap openshift-config/cloud-provider-config",
                    "data[\"config\"]",
                    "line 3",
                    "[LoadBalancer] monitor-delay",
                    "duration without a unit",
                    "the CCM would fail to start",
                    "source: gcfg v1.2.3",
                ],
            },
            Mutate::NoPatch,
        ),
        config_case(
            "integrity: invalid bool literal",
            &format!("{OK_LB}create-monitor = maybe\n"),
            Expect::Deny {
                policy: "cloud-config-integrity",
                needles: &["line 3", "create-monitor", "fail to start"],
            },
            Mutate::NoPatch,
        ),
        config_case(
            "integrity: gcfg syntax error ('_' in a name)",
            &format!("[Global]\nauth_url = http://keystone\n{OK_LB}"),
            Expect::Deny {
                policy: "cloud-config-integrity",
                needles: &["line 2", "fail to start"],
            },
            Mutate::NoPatch,
        ),
        // cloud-config-integrity: what the CCM silently ignores.
        config_case(
            "integrity: unknown key with a did-you-mean",
            &format!("{OK_LB}provider-requires-serial-api-call = true\n"),
            Expect::Warn {
                policy: "cloud-config-integrity",
                needles: &[
                    "line 3",
                    "provider-requires-serial-api-call:",
                    "silently ignored",
                    "did you mean `provider-requires-serial-api-calls`?",
                ],
            },
            Mutate::NoPatch,
        ),
        config_case(
            "integrity: unknown section",
            &format!("{OK_LB}[Routes]\nrouter-id = r\n"),
            Expect::Warn {
                policy: "cloud-config-integrity",
                needles: &["line 3", "[Routes]", "silently ignored"],
            },
            Mutate::NoPatch,
        ),
        // known-bad-lb-settings
        config_case(
            "known-bad: use-octavia = false",
            &format!("{OK_LB}use-octavia = false\n"),
            Expect::Deny {
                policy: "known-bad-lb-settings",
                needles: &[
                    "line 3",
                    "use-octavia",
                    "Neutron LBaaS",
                    "stackgate.dev/exempt.known-bad-lb-settings",
                    "PR #1882",
                ],
            },
            Mutate::NoPatch,
        ),
        config_case(
            "known-bad: lb-provider = ovn without lb-method",
            &format!("{OK_LB}lb-provider = ovn\n"),
            Expect::Deny {
                policy: "known-bad-lb-settings",
                needles: &[
                    "line 3",
                    "lb-provider = ovn",
                    "ROUND_ROBIN",
                    "lb-method = SOURCE_IP_PORT",
                    "stackgate.dev/exempt.known-bad-lb-settings",
                ],
            },
            Mutate::NoPatch,
        ),
        config_case(
            "known-bad: lb-provider = ovn with lb-method = ROUND_ROBIN",
            &format!("{OK_LB}lb-provider = ovn\nlb-method = ROUND_ROBIN\n"),
            Expect::Deny {
                policy: "known-bad-lb-settings",
                needles: &["line 4", "SOURCE_IP_PORT"],
            },
            Mutate::NoPatch,
        ),
        config_case(
            "known-bad: lb-provider = ovn with SOURCE_IP_PORT is fine",
            &format!("{OK_LB}lb-provider = ovn\nlb-method = SOURCE_IP_PORT\n"),
            Expect::Clean,
            Mutate::NoPatch,
        ),
        // credential-placement (the value must never come back: checked for every row)
        config_case(
            "credentials: password in a ConfigMap",
            &format!("[Global]\nusername = admin\npassword = {CANARY}\n{OK_LB}"),
            Expect::Deny {
                policy: "credential-placement",
                needles: &[
                    "line 3",
                    "[Global] password holds a credential",
                    "value not shown",
                    "Secret",
                    "stackgate.dev/exempt.credential-placement",
                ],
            },
            Mutate::NoPatch,
        ),
        config_case(
            "credentials: application-credential-secret in a ConfigMap",
            &format!("[Global]\napplication-credential-secret = {CANARY}\n{OK_LB}"),
            Expect::Deny {
                policy: "credential-placement",
                needles: &["line 2", "application-credential-secret", "value not shown"],
            },
            Mutate::NoPatch,
        ),
        Case {
            name: "credentials: the same password in the Secret is fine",
            validate: secret(
                VALIDATE_SECRET,
                &format!("[Global]\nusername = admin\npassword = {CANARY}\n{OK_LB}"),
            ),
            mutate: secret(
                MUTATE_SECRET,
                &format!("[Global]\nusername = admin\npassword = {CANARY}\n{OK_LB}"),
            ),
            expect: Expect::Clean,
            mutate_expect: Mutate::NoPatch,
        },
        // serial-lb-api-calls, for completeness of the families
        config_case(
            "serial: explicit false",
            "[LoadBalancer]\nprovider-requires-serial-api-calls = false\n",
            Expect::Deny {
                policy: "serial-lb-api-calls",
                needles: &[
                    "line 2",
                    "set it to true",
                    "stackgate.dev/exempt.serial-lb-api-calls",
                ],
            },
            Mutate::NoPatch,
        ),
        config_case(
            "serial: missing is added by /mutate and warned by /validate",
            "[Global]\nregion = RegionOne\n[LoadBalancer]\nsubnet-id = s\n",
            Expect::Warn {
                policy: "serial-lb-api-calls",
                needles: &["is not set"],
            },
            Mutate::Patch("provider-requires-serial-api-calls"),
        ),
        // ccm-concurrency on the captured CCM Deployment (image
        // registry.k8s.io/provider-os/openstack-cloud-controller-manager, args[5]).
        Case {
            // The default mode is warn (weak evidence: domain-facts §9.1).
            name: "concurrency: --concurrent-service-syncs=4 on the CCM Deployment",
            validate: json_of(VALIDATE_DEPLOYMENT),
            mutate: json_of(MUTATE_DEPLOYMENT),
            expect: Expect::Warn {
                policy: "ccm-concurrency",
                needles: &[
                    "Deployment kube-system/openstack-cloud-controller-manager",
                    "args[5]",
                    "--concurrent-service-syncs=4",
                    // The why (Octavia's 409) is in `stackgate explain`; the warning keeps the fix.
                    "fix: set it to 1",
                ],
            },
            mutate_expect: Mutate::NoPatch,
        },
        Case {
            name: "concurrency: space-separated value above 1",
            validate: {
                let mut v = deployment(VALIDATE_DEPLOYMENT, "--concurrent-service-syncs");
                v["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["args"][6] =
                    json!("2");
                v
            },
            mutate: json_of(MUTATE_DEPLOYMENT),
            expect: Expect::Warn {
                policy: "ccm-concurrency",
                needles: &["--concurrent-service-syncs"],
            },
            mutate_expect: Mutate::NoPatch,
        },
        Case {
            name: "concurrency: --concurrent-service-syncs=1 is fine",
            validate: deployment(VALIDATE_DEPLOYMENT, "--concurrent-service-syncs=1"),
            mutate: deployment(MUTATE_DEPLOYMENT, "--concurrent-service-syncs=1"),
            expect: Expect::Clean,
            mutate_expect: Mutate::NoPatch,
        },
        // The CCM's own start-up checks and silent settings (domain-facts §9.1).
        config_case(
            "integrity: lb-version other than v2",
            &format!("{OK_LB}lb-version = v1\n"),
            Expect::Deny {
                policy: "cloud-config-integrity",
                needles: &[
                    "line 3",
                    "[LoadBalancer] lb-version",
                    "only support LBaaS v2",
                ],
            },
            Mutate::NoPatch,
        ),
        config_case(
            "integrity: search-order with an unknown id",
            &format!("{OK_LB}[Metadata]\nsearch-order = configDrive,metadata\n"),
            Expect::Deny {
                policy: "cloud-config-integrity",
                needles: &["line 4", "[Metadata] search-order", "invalid element"],
            },
            Mutate::NoPatch,
        ),
        config_case(
            "integrity: tls-insecure other than true/false",
            &format!("[Global]\ntls-insecure = TRUE\n{OK_LB}"),
            Expect::Warn {
                policy: "cloud-config-integrity",
                needles: &["line 2", "tls-insecure", "exactly `true`"],
            },
            Mutate::NoPatch,
        ),
        Case {
            name: "integrity: amphorav2 on a chart that ships CCM v1.31",
            validate: helmrelease_provider(VALIDATE_HELMRELEASE, "amphorav2"),
            mutate: helmrelease_provider(MUTATE_HELMRELEASE, "amphorav2"),
            expect: Expect::Warn {
                policy: "cloud-config-integrity",
                needles: &["lb-provider = amphorav2", "from CCM v1.34.0"],
            },
            mutate_expect: Mutate::NoPatch,
        },
        Case {
            name: "integrity: amphora on the same chart is fine",
            validate: helmrelease_provider(VALIDATE_HELMRELEASE, "amphora"),
            mutate: helmrelease_provider(MUTATE_HELMRELEASE, "amphora"),
            expect: Expect::Clean,
            mutate_expect: Mutate::NoPatch,
        },
        Case {
            // Its only finding is the cluster name: `--cluster-name=$(CLUSTER_NAME)` with the
            // literal env value "kubernetes", the default shared across clusters.
            name: "concurrency: the upstream DaemonSet does not set the flag; cluster-name warns",
            validate: json_of(VALIDATE_DAEMONSET),
            mutate: json_of("daemonset/mutate-create-openstack-cloud-controller-manager.json"),
            expect: Expect::Warn {
                policy: "cluster-name",
                needles: &["args[2]", "default cluster name \"kubernetes\""],
            },
            mutate_expect: Mutate::NoPatch,
        },
        Case {
            // No cloud-config fact source in this server: the rule says it cannot see the
            // cluster's config and only warns.
            name: "ovn-source-ranges: source ranges without a known cloud config warn",
            validate: json_of("service/validate-create-loadbalancer-source-ranges.json"),
            mutate: json_of("service/validate-create-loadbalancer-source-ranges.json"),
            expect: Expect::Warn {
                policy: "ovn-source-ranges",
                needles: &[
                    "Service web/ingress spec.loadBalancerSourceRanges",
                    "cannot see",
                ],
            },
            mutate_expect: Mutate::NoPatch,
        },
        Case {
            name: "ovn-source-ranges: a LoadBalancer Service without ranges is clean",
            validate: json_of("service/validate-create-loadbalancer.json"),
            mutate: json_of("service/validate-create-loadbalancer.json"),
            expect: Expect::Clean,
            mutate_expect: Mutate::NoPatch,
        },
        Case {
            name: "cluster-name: a renamed CCM Deployment is denied",
            validate: renamed_deployment(),
            mutate: renamed_deployment(),
            expect: Expect::Deny {
                policy: "cluster-name",
                needles: &[
                    "from \"cluster-a\" to \"cluster-b\"",
                    "recreates every Service load balancer",
                    "kubermatic #5322",
                ],
            },
            mutate_expect: Mutate::NoPatch,
        },
    ]
}

#[tokio::test]
async fn each_rule_family_is_decided_over_https() {
    let server = TestServer::start().await;
    // One keep-alive connection for everything, like the apiserver.
    let client = server.client().await;
    let canary_b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
    for case in cases() {
        let name = case.name;
        let v = send(&client, "/validate?timeout=10s", &case.validate).await;
        assert!(v.get("patch").is_none(), "{name}: /validate never patches");
        let text = v.to_string();
        assert!(!text.contains(CANARY), "{name}: credential value echoed");
        assert!(!text.contains(&canary_b64), "{name}: credential echoed");
        match case.expect {
            Expect::Deny { policy, needles } => {
                assert_eq!(v["allowed"], false, "{name}: {v}");
                assert_eq!(v["status"]["code"], 403, "{name}: {v}");
                assert_eq!(v["status"]["reason"], "Forbidden", "{name}: {v}");
                let message = v["status"]["message"].as_str().unwrap_or_default();
                assert_eq!(
                    message.split("\n\n").count(),
                    1,
                    "{name}: exactly one denial: {message}"
                );
                assert!(
                    message.contains(&format!("Policy {policy}, rule ")),
                    "{name}: not denied by {policy}: {message}"
                );
                for needle in needles {
                    assert!(
                        message.contains(needle),
                        "{name}: {needle:?} not in {message}"
                    );
                }
            }
            Expect::Warn { policy, needles } => {
                assert_eq!(v["allowed"], true, "{name}: {v}");
                // Other families may warn about the same object (a CCM Deployment keeping the
                // default cluster name); this case is about `policy`.
                let w: Vec<String> = warnings(&v)
                    .into_iter()
                    .filter(|w| w.starts_with(&format!("stackgate {policy}: ")))
                    .collect();
                assert_eq!(w.len(), 1, "{name}: {:#?}", warnings(&v));
                assert!(
                    w[0].starts_with(&format!("stackgate {policy}: ")),
                    "{name}: {w:?}"
                );
                // Case-insensitive: a fragment may open a sentence or follow a colon.
                let lower = w[0].to_lowercase();
                for needle in needles {
                    assert!(
                        lower.contains(&needle.to_lowercase()),
                        "{name}: {needle:?} not in {:?}",
                        w[0]
                    );
                }
            }
            Expect::Clean => {
                assert_eq!(v["allowed"], true, "{name}: {v}");
                assert!(v.get("warnings").is_none(), "{name}: {v}");
            }
        }

        // Mutation fails open: /mutate admits every one of these.
        let m = send(&client, "/mutate?timeout=10s", &case.mutate).await;
        assert_eq!(m["allowed"], true, "{name}: {m}");
        match case.mutate_expect {
            Mutate::NoPatch => assert!(m.get("patch").is_none(), "{name}: {m}"),
            Mutate::Patch(mentions) => {
                let patch = decoded_patch(&m).unwrap_or_else(|| panic!("{name}: no patch: {m}"));
                assert!(patch.to_string().contains(mentions), "{name}: {patch}");
            }
        }
        let mut visible = m.clone();
        if let Some(r) = visible.as_object_mut() {
            r.remove("patch");
        }
        assert!(!visible.to_string().contains(CANARY), "{name}: {visible}");
    }

    // The denials were counted per policy.
    let text = server.metrics().await;
    for policy in [
        "cloud-config-integrity",
        "known-bad-lb-settings",
        "credential-placement",
        "serial-lb-api-calls",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("stackgate_denials_total{")
                    && l.contains(&format!("policy=\"{policy}\""))),
            "no denial counted for {policy}:\n{text}"
        );
    }
    // ccm-concurrency warns by default: counted as a warning, never as a denial.
    assert!(
        text.lines()
            .any(|l| l.starts_with("stackgate_warnings_total{")
                && l.contains("policy=\"ccm-concurrency\"")),
        "no warning counted for ccm-concurrency:\n{text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("stackgate_denials_total{")
                && l.contains("policy=\"ccm-concurrency\"")),
        "ccm-concurrency denied in its default mode:\n{text}"
    );
    assert!(!text.contains(CANARY));
    server.stop().await.unwrap();
}

/// A config with findings from several families at once is denied by each of them in one
/// answer, every denial on its own line naming its own line of the file.
#[tokio::test]
async fn several_families_in_one_config_are_all_reported() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let text = format!(
        "[Global]\npassword = {CANARY}\n[LoadBalancer]\nprovider-requires-serial-api-calls = true\n\
         use-octavia = false\nlb-provider = ovn\nmonitor-delay = 5\n"
    );
    let v = send(
        &client,
        "/validate?timeout=10s",
        &configmap(VALIDATE_CONFIGMAP, &text),
    )
    .await;
    assert_eq!(v["allowed"], false, "{v}");
    let message = v["status"]["message"].as_str().unwrap_or_default();
    let denials: Vec<&str> = message.split("\n\n").collect();
    for (policy, line) in [
        ("cloud-config-integrity", "line 7"),
        ("known-bad-lb-settings", "line 5"),
        ("known-bad-lb-settings", "line 6"),
        ("credential-placement", "line 2"),
    ] {
        assert!(
            denials
                .iter()
                .any(|d| d.contains(&format!("Policy {policy}, "))
                    && d.contains(&format!("{line}:"))),
            "no {policy} denial at {line}: {message}"
        );
    }
    assert!(!v.to_string().contains(CANARY));
    server.stop().await.unwrap();
}

/// Names gcfg reads that may be values (issue #12 item 7): `password =` with the password on
/// the next line makes it a bare variable name, and a header line can hold a secret. Neither
/// comes back in any answer, over HTTPS, from a Secret or a ConfigMap, nor in the metrics.
#[tokio::test]
async fn bare_keys_and_section_names_that_may_be_secrets_are_masked() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let texts = [
        format!("[Global]\npassword =\n{CANARY}\n{OK_LB}"),
        format!("[Global]\napplication-credential-secret =\n{CANARY}\nregion = r\n{OK_LB}"),
        format!("{OK_LB}[{CANARY}]\nregion = r\n"),
        format!("{OK_LB}[{CANARY}]\n"),
    ];
    for text in &texts {
        for (name, validate, mutate) in [
            (
                "configmap",
                configmap(VALIDATE_CONFIGMAP, text),
                configmap(MUTATE_CONFIGMAP, text),
            ),
            (
                "secret",
                secret(VALIDATE_SECRET, text),
                secret(MUTATE_SECRET, text),
            ),
        ] {
            let v = send(&client, "/validate?timeout=10s", &validate).await;
            assert!(!v.to_string().contains(CANARY), "{name} {text:?}: {v}");
            // Reported, masked, with its line.
            let w = warnings(&v);
            assert!(
                w.iter().any(|w| w.contains("name not shown")),
                "{name} {text:?}: {w:#?}"
            );
            let mut m = send(&client, "/mutate?timeout=10s", &mutate).await;
            if let Some(r) = m.as_object_mut() {
                r.remove("patch");
            }
            assert!(!m.to_string().contains(CANARY), "{name} {text:?}: {m}");
        }
    }
    assert!(!server.metrics().await.contains(CANARY));
    server.stop().await.unwrap();
}
