//! control-plane-lb-guard through the pure engine: the captured Machine DELETE reviews
//! (kube-apiserver v1.26, `object: null`, the Machine in `oldObject`) evaluated with facts
//! parsed from the Octavia api-ref status-tree example, adapted per case to a CAPO API load
//! balancer (pool `<lb>-6443`, members `<pool>-<OpenStackMachine>`).

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::{Value, json};
use stackgate::engine::{Engine, Facts, Verdict};
use stackgate::guard::parse_status_tree;
use stackgate::policy::PolicySet;
use stackgate::rules::lb_guard::{GuardFacts, INCIDENT, Observation};

const LB_NAME: &str = "k8s-clusterapi-cluster-cluster-a-cluster-a-kubeapi";
const LB_ID: &str = "a7f7b5c4-1e0d-4b8e-9c3f-6d2e1f0a9b87";
const DELETED: &str = "cluster-a-control-plane-b2m4d";
const CP_DELETE: &str =
    "machine/validate-delete-cluster-a-control-plane-b2m4d-control-plane-with-finalizer.json";
const WORKER_DELETE: &str = "machine/validate-delete-cluster-a-md-0-5f7c9-xk2lp-worker.json";
const CP_UPDATE: &str =
    "machine/validate-update-cluster-a-control-plane-b2m4d-remove-finalizer-while-deleting.json";

fn fixture(rel: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn captured(rel: &str) -> Value {
    serde_json::from_slice(&fixture(&format!("captured/{rel}"))).unwrap()
}

fn request(review: &Value) -> AdmissionRequest<DynamicObject> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review.clone()).unwrap();
    review.try_into().unwrap()
}

/// (member suffix, address, provisioning_status, operating_status)
type Member<'a> = (&'a str, &'a str, &'a str, &'a str);

/// The api-ref status tree with its `HTTP_pool` turned into CAPO's API pool holding `members`
/// (in the listener and in `loadbalancer.pools`, as Octavia lists it), and `monitor` or not.
fn status_tree(members: &[Member<'_>], monitor: bool) -> Value {
    let mut tree: Value =
        serde_json::from_slice(&fixture("octavia/loadbalancer-status-response.json")).unwrap();
    let pool_name = format!("{LB_NAME}-6443");
    let members: Vec<Value> = members
        .iter()
        .enumerate()
        .map(|(i, (machine, address, prov, op))| {
            json!({"name": format!("{pool_name}-{machine}"), "address": address,
                   "protocol_port": 6443, "id": format!("member-{i}"),
                   "provisioning_status": prov, "operating_status": op})
        })
        .collect();
    let lb = &mut tree["statuses"]["loadbalancer"];
    lb["id"] = json!(LB_ID);
    lb["name"] = json!(LB_NAME);
    for pointer in ["/listeners/0/pools/0", "/pools/0"] {
        let Some(pool) = lb.pointer_mut(pointer) else {
            panic!("{pointer} in the api-ref example");
        };
        pool["name"] = json!(pool_name);
        pool["members"] = json!(members);
        if !monitor {
            pool["healthmonitor"] = json!({});
        }
    }
    tree
}

fn observed(members: &[Member<'_>]) -> Facts {
    observed_with(members, true)
}

fn observed_with(members: &[Member<'_>], monitor: bool) -> Facts {
    let body = serde_json::to_vec(&status_tree(members, monitor)).unwrap();
    Facts::of(
        stackgate::rules::lb_guard::FAMILY.id,
        GuardFacts::Observed(Observation::of(parse_status_tree(&body).unwrap())),
    )
}

fn unavailable(reason: &str) -> Facts {
    Facts::of(
        stackgate::rules::lb_guard::FAMILY.id,
        GuardFacts::Unavailable {
            reason: reason.to_owned(),
        },
    )
}

const POLICY: &str = include_str!("../policies/control-plane-lb-guard.yaml");

/// The embedded set with the guard policy's mode / params replaced.
fn engine_with(mode: &str, unknown: &str) -> Engine {
    let text = POLICY
        .replace("mode: enforce", &format!("mode: {mode}"))
        .replace("unknown: admit", &format!("unknown: {unknown}"));
    let mut files = vec![("control-plane-lb-guard.yaml".to_owned(), text)];
    for (name, body) in [
        (
            "cloud-config-sites.yaml",
            include_str!("../policies/cloud-config-sites.yaml"),
        ),
        (
            "serial-lb-api-calls.yaml",
            include_str!("../policies/serial-lb-api-calls.yaml"),
        ),
    ] {
        files.push((name.to_owned(), body.to_owned()));
    }
    Engine::new(PolicySet::from_files(files, "test".to_owned()).unwrap())
}

fn engine() -> Engine {
    engine_with("enforce", "admit")
}

fn eval(engine: &Engine, review: &Value, facts: &Facts) -> Verdict {
    engine.evaluate_with(&stackgate::admission::subject_of(&request(review)), facts)
}

fn denial(verdict: &Verdict) -> String {
    assert_eq!(verdict.denials.len(), 1, "{verdict:#?}");
    assert_eq!(
        verdict.denials[0].rule,
        stackgate::rules::lb_guard::FAMILY.id
    );
    verdict.denials[0].denial_text()
}

const HEALTHY: [Member<'static>; 3] = [
    (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
    (
        "cluster-a-control-plane-7x9kq",
        "10.6.0.12",
        "ACTIVE",
        "ONLINE",
    ),
    (
        "cluster-a-control-plane-n3w01",
        "10.6.0.13",
        "ACTIVE",
        "ONLINE",
    ),
];

#[test]
fn the_policy_is_embedded_and_enforcing_with_unknown_admit() {
    let set = PolicySet::embedded().unwrap();
    let p = set
        .policies
        .iter()
        .find(|p| p.rule == stackgate::rules::lb_guard::FAMILY.id)
        .expect("control-plane-lb-guard in the embedded set");
    assert_eq!(p.mode.as_str(), "enforce");
    assert_eq!(
        p.params
            .get::<stackgate::rules::lb_guard::GuardParams>()
            .and_then(|g| g.unknown),
        Some(stackgate::rules::lb_guard::WhenUnknown::Admit)
    );
    assert!(p.source.contains("#2763"));
}

#[test]
fn all_members_healthy_is_admitted() {
    let v = eval(&engine(), &captured(CP_DELETE), &observed(&HEALTHY));
    assert!(v.denials.is_empty() && v.warnings.is_empty(), "{v:#?}");
}

#[test]
fn the_incident_a_member_pending_create_while_the_lb_is_active_is_denied() {
    let members = [
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (
            "cluster-a-control-plane-7x9kq",
            "10.6.0.12",
            "ACTIVE",
            "ONLINE",
        ),
        (
            "cluster-a-control-plane-n3w01",
            "10.6.0.13",
            "PENDING_CREATE",
            "OFFLINE",
        ),
    ];
    let v = eval(&engine(), &captured(CP_DELETE), &observed(&members));
    let m = denial(&v);
    for needle in [
        "cluster-a/cluster-a-control-plane-b2m4d",
        "Cluster cluster-a",
        LB_NAME,
        "k8s-clusterapi-cluster-cluster-a-cluster-a-kubeapi-6443-cluster-a-control-plane-n3w01",
        "10.6.0.13:6443",
        "provisioning_status=PENDING_CREATE",
        "operating_status=OFFLINE",
        INCIDENT,
        "Cluster API retries",
        "stackgate.dev/exempt.control-plane-lb-guard",
        "Policy control-plane-lb-guard",
    ] {
        assert!(m.contains(needle), "{needle:?} missing from {m}");
    }
}

#[test]
fn a_member_in_error_is_denied() {
    let members = [
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (
            "cluster-a-control-plane-7x9kq",
            "10.6.0.12",
            "ERROR",
            "ERROR",
        ),
        (
            "cluster-a-control-plane-n3w01",
            "10.6.0.13",
            "ACTIVE",
            "ONLINE",
        ),
    ];
    let v = eval(&engine(), &captured(CP_DELETE), &observed(&members));
    assert!(denial(&v).contains("provisioning_status=ERROR"));
}

#[test]
fn deleting_the_last_online_member_is_denied() {
    let members = [
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (
            "cluster-a-control-plane-7x9kq",
            "10.6.0.12",
            "ACTIVE",
            "ERROR",
        ),
        (
            "cluster-a-control-plane-n3w01",
            "10.6.0.13",
            "ACTIVE",
            "OFFLINE",
        ),
    ];
    let v = eval(&engine(), &captured(CP_DELETE), &observed(&members));
    let m = denial(&v);
    assert!(m.contains("last one serving"), "{m}");
    // Two ONLINE members left after the deletion: admitted.
    let members = [
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (
            "cluster-a-control-plane-7x9kq",
            "10.6.0.12",
            "ACTIVE",
            "ONLINE",
        ),
        (
            "cluster-a-control-plane-n3w01",
            "10.6.0.13",
            "ACTIVE",
            "OFFLINE",
        ),
    ];
    let v = eval(&engine(), &captured(CP_DELETE), &observed(&members));
    assert!(v.denials.is_empty(), "{v:#?}");
}

#[test]
fn a_pool_with_nothing_serving_does_not_block_remediation() {
    // Nothing serves before the deletion: it cannot make the pool worse (denying it would
    // block the remediation of the very Machines that are down, forever).
    let members = [
        (DELETED, "10.6.0.11", "ACTIVE", "OFFLINE"),
        (
            "cluster-a-control-plane-7x9kq",
            "10.6.0.12",
            "ACTIVE",
            "ERROR",
        ),
    ];
    let v = eval(&engine(), &captured(CP_DELETE), &observed(&members));
    assert!(v.denials.is_empty(), "{v:#?}");
}

/// Octavia's own answer shape (`health_monitor`, pools only under listeners) for CAPO's
/// load balancer with an `additionalPorts` pool whose service is down everywhere.
fn additional_port_down() -> Value {
    serde_json::from_slice(&fixture("octavia/status-capo-additional-port-down.json")).unwrap()
}

fn facts_of(tree: &Value) -> Facts {
    let body = serde_json::to_vec(tree).unwrap();
    Facts::of(
        stackgate::rules::lb_guard::FAMILY.id,
        GuardFacts::Observed(Observation::of(parse_status_tree(&body).unwrap())),
    )
}

#[test]
fn octavias_own_status_shape_reads_the_health_monitor() {
    let lb = parse_status_tree(&serde_json::to_vec(&additional_port_down()).unwrap()).unwrap();
    assert_eq!(lb.pools.len(), 2);
    assert!(lb.pools.iter().all(|p| p.has_monitor), "health_monitor key");
    assert_eq!(lb.pools[1].name, format!("{LB_NAME}-8132"));
    assert!(
        lb.pools[1]
            .members
            .iter()
            .all(|m| m.operating_status == "ERROR")
    );
}

#[test]
fn an_additional_port_pool_already_down_does_not_block() {
    let mut tree = additional_port_down();
    let v = eval(&engine(), &captured(CP_DELETE), &facts_of(&tree));
    assert!(v.denials.is_empty(), "{v:#?}");
    // The API pool still judges: with the two peers' members failing their checks there,
    // the deleted Machine's is the last one serving, and the message names that pool.
    for i in [1, 2] {
        tree["statuses"]["loadbalancer"]["listeners"][0]["pools"][0]["members"][i]["operating_status"] =
            json!("ERROR");
    }
    let v = eval(&engine(), &captured(CP_DELETE), &facts_of(&tree));
    let m = denial(&v);
    assert!(
        m.contains(&format!(
            "pool {LB_NAME}-6443: this Machine's member is the last one serving (operating_status ONLINE)"
        )),
        "{m}"
    );
    assert!(!m.contains(&format!("pool {LB_NAME}-8132")), "{m}");
}

#[test]
fn with_a_real_health_monitor_no_monitor_is_not_serving() {
    // The api-ref key (`healthmonitor`) used to be the only one read: against Octavia's own
    // `health_monitor` every pool looked unmonitored and NO_MONITOR members counted as serving.
    let mut tree = additional_port_down();
    let members = &mut tree["statuses"]["loadbalancer"]["listeners"][0]["pools"][0]["members"];
    members[1]["operating_status"] = json!("NO_MONITOR");
    members[2]["operating_status"] = json!("NO_MONITOR");
    let v = eval(&engine(), &captured(CP_DELETE), &facts_of(&tree));
    assert!(denial(&v).contains("last one serving (operating_status ONLINE)"));
}

#[test]
fn no_monitor_counts_as_serving_only_without_a_health_monitor() {
    let members = [
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (
            "cluster-a-control-plane-7x9kq",
            "10.6.0.12",
            "ACTIVE",
            "NO_MONITOR",
        ),
    ];
    let v = eval(
        &engine(),
        &captured(CP_DELETE),
        &observed_with(&members, false),
    );
    assert!(v.denials.is_empty(), "{v:#?}");
    let v = eval(
        &engine(),
        &captured(CP_DELETE),
        &observed_with(&members, true),
    );
    assert!(denial(&v).contains("operating_status ONLINE)"));
}

#[test]
fn the_deleted_machines_own_member_need_not_be_active() {
    // Remediation of a Machine whose member failed must stay possible.
    let members = [
        (DELETED, "10.6.0.11", "ERROR", "ERROR"),
        (
            "cluster-a-control-plane-7x9kq",
            "10.6.0.12",
            "ACTIVE",
            "ONLINE",
        ),
        (
            "cluster-a-control-plane-n3w01",
            "10.6.0.13",
            "ACTIVE",
            "ONLINE",
        ),
    ];
    let v = eval(&engine(), &captured(CP_DELETE), &observed(&members));
    assert!(v.denials.is_empty(), "{v:#?}");
}

#[test]
fn own_member_recognised_by_address_from_machine_status() {
    // Members not named after the OpenStackMachine: the Machine's status.addresses decide.
    let mut review = captured(CP_DELETE);
    review["request"]["oldObject"]["status"] =
        json!({"addresses": [{"type": "InternalIP", "address": "10.6.0.11"}]});
    // No infrastructureRef: the CAPO member name cannot be checked, the address decides.
    review["request"]["oldObject"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("infrastructureRef");
    let members = [
        ("x", "10.6.0.11", "ACTIVE", "ONLINE"),
        ("y", "10.6.0.12", "ACTIVE", "OFFLINE"),
    ];
    let v = eval(&engine(), &review, &observed(&members));
    assert!(denial(&v).contains("last one serving"));
}

#[test]
fn a_pending_load_balancer_is_denied() {
    let body = {
        let mut t = status_tree(&HEALTHY, true);
        t["statuses"]["loadbalancer"]["provisioning_status"] = json!("PENDING_UPDATE");
        serde_json::to_vec(&t).unwrap()
    };
    let facts = Facts::of(
        stackgate::rules::lb_guard::FAMILY.id,
        GuardFacts::Observed(Observation::of(parse_status_tree(&body).unwrap())),
    );
    let v = eval(&engine(), &captured(CP_DELETE), &facts);
    assert!(denial(&v).contains("is provisioning_status=PENDING_UPDATE"));
}

#[test]
fn unknown_facts_follow_params_unknown() {
    let reason = "Octavia did not answer within 800 ms";
    let v = eval(&engine(), &captured(CP_DELETE), &unavailable(reason));
    assert!(v.denials.is_empty());
    assert_eq!(v.warnings.len(), 1, "{v:#?}");
    assert!(v.warnings[0].denial_text().contains(reason));
    assert!(v.warnings[0].denial_text().starts_with(
        "Admitted without checking the API load balancer (params.unknown is admit). Fix:"
    ));
    let v = eval(
        &engine_with("enforce", "deny"),
        &captured(CP_DELETE),
        &unavailable(reason),
    );
    let m = denial(&v);
    assert!(
        m.contains(reason) && m.contains("params.unknown is deny"),
        "{m}"
    );
}

#[test]
fn not_applicable_and_no_facts_admit_silently() {
    let facts = Facts::of(
        stackgate::rules::lb_guard::FAMILY.id,
        GuardFacts::NotApplicable {
            reason: "Cluster cluster-a/cluster-a is being deleted".into(),
        },
    );
    let v = eval(&engine(), &captured(CP_DELETE), &facts);
    assert_eq!(v, Verdict::default());
    // The guard did not run (off, or a custom handler): DELETE is admitted as before.
    let v = eval(&engine(), &captured(CP_DELETE), &Facts::default());
    assert_eq!(v, Verdict::default());
    let v = engine().evaluate(&stackgate::admission::subject_of(&request(&captured(
        CP_DELETE,
    ))));
    assert_eq!(v, Verdict::default());
}

#[test]
fn workers_and_updates_are_never_guarded() {
    let facts = unavailable("x");
    let v = eval(
        &engine_with("enforce", "deny"),
        &captured(WORKER_DELETE),
        &facts,
    );
    assert_eq!(v, Verdict::default());
    let v = eval(
        &engine_with("enforce", "deny"),
        &captured(CP_UPDATE),
        &facts,
    );
    assert!(
        v.denials
            .iter()
            .all(|d| d.rule != stackgate::rules::lb_guard::FAMILY.id),
        "{v:#?}"
    );
}

#[test]
fn modes_and_exemption() {
    let pending = [
        (DELETED, "10.6.0.11", "ACTIVE", "ONLINE"),
        (
            "cluster-a-control-plane-7x9kq",
            "10.6.0.12",
            "PENDING_CREATE",
            "OFFLINE",
        ),
    ];
    let review = captured(CP_DELETE);
    let v = eval(&engine_with("warn", "admit"), &review, &observed(&pending));
    assert!(v.denials.is_empty() && v.warnings.len() == 1, "{v:#?}");
    let v = eval(&engine_with("audit", "admit"), &review, &observed(&pending));
    assert!(v.denials.is_empty() && v.audits.len() == 1, "{v:#?}");
    assert!(
        v.audit_annotations
            .contains_key("control-plane-lb-guard-finding")
    );
    let v = eval(&engine_with("off", "admit"), &review, &observed(&pending));
    assert_eq!(v, Verdict::default());

    let mut exempt = review.clone();
    exempt["request"]["oldObject"]["metadata"]["annotations"]["stackgate.dev/exempt.control-plane-lb-guard"] =
        json!("replacing a dead node, INC-42");
    let v = eval(&engine(), &exempt, &observed(&pending));
    assert!(v.denials.is_empty(), "{v:#?}");
    assert_eq!(v.exemptions.len(), 1);
    assert_eq!(
        v.audit_annotations["control-plane-lb-guard-exempted"],
        "replacing a dead node, INC-42"
    );
}

#[test]
fn the_api_ref_example_itself_parses_into_the_documented_tree() {
    let lb = parse_status_tree(&fixture("octavia/loadbalancer-status-response.json")).unwrap();
    assert_eq!(lb.id, "84faceee-cb97-48d0-93df-9e41d40d4cb4");
    assert_eq!(lb.provisioning_status, "ACTIVE");
    // HTTP_pool appears under the listener and in loadbalancer.pools: counted once.
    assert_eq!(lb.pools.len(), 2);
    let http = &lb.pools[0];
    assert_eq!(http.name, "HTTP_pool");
    assert!(http.has_monitor);
    assert_eq!(http.members.len(), 2);
    assert_eq!(http.members[0].operating_status, "ERROR");
    assert_eq!(http.members[1].address, "192.0.2.21");
    let source_ip = &lb.pools[1];
    assert!(
        !source_ip.has_monitor,
        "\"healthmonitor\": {{}} is no monitor"
    );
    assert!(source_ip.members.is_empty());
}

#[test]
fn a_delete_without_old_object_is_unknown_and_follows_params_unknown() {
    for old in [None, Some(Value::Null)] {
        let mut review = captured(CP_DELETE);
        let request = review["request"].as_object_mut().unwrap();
        match &old {
            None => drop(request.remove("oldObject")),
            Some(v) => drop(request.insert("oldObject".into(), v.clone())),
        }
        let reason = "the DELETE review carries no oldObject and Machine cluster-a/cluster-a-control-plane-b2m4d was not found";
        let v = eval(
            &engine_with("enforce", "deny"),
            &review,
            &unavailable(reason),
        );
        let m = denial(&v);
        assert!(
            m.contains("params.unknown is deny") && m.contains(reason),
            "{m}"
        );
        let v = eval(&engine(), &review, &unavailable(reason));
        assert!(v.denials.is_empty());
        assert_eq!(v.warnings.len(), 1, "{v:#?}");
        assert!(v.warnings[0].denial_text().contains(reason));
        // Without the guard (no facts) nothing changes for such a review.
        let v = eval(&engine_with("enforce", "deny"), &review, &Facts::default());
        assert_eq!(v, Verdict::default());
    }
}

#[test]
fn ipv6_members_match_the_machines_addresses_in_any_spelling() {
    let mut review = captured(CP_DELETE);
    review["request"]["oldObject"]["status"] = json!({"addresses": [
        {"type": "Hostname", "address": "cluster-a-control-plane-b2m4d"},
        {"type": "InternalIP", "address": "10.6.0.11"},
        {"type": "InternalIP", "address": "2001:db8:0:6::b"}]});
    // No infrastructureRef: the CAPO member name cannot be checked, the addresses decide.
    review["request"]["oldObject"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("infrastructureRef");
    let members = [
        ("x", "2001:DB8:0:6:0:0:0:B", "ACTIVE", "ONLINE"),
        ("y", "2001:db8:0:6::c", "ACTIVE", "OFFLINE"),
    ];
    let v = eval(&engine(), &review, &observed(&members));
    assert!(denial(&v).contains("last one serving"));
    let members = [
        ("x", "::ffff:10.6.0.11", "ACTIVE", "ONLINE"),
        ("y", "10.6.0.12", "ACTIVE", "OFFLINE"),
    ];
    let v = eval(&engine(), &review, &observed(&members));
    assert!(denial(&v).contains("last one serving"));
}
