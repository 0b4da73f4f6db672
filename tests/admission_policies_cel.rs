//! Differential test: the CEL of the generated admission policies against the engine's
//! verdicts.
//!
//! The generated ValidatingAdmissionPolicies and MutatingAdmissionPolicies are evaluated with
//! a CEL implementation from crates.io (`cel`, with its strings extension: `split`, `join`,
//! `trim`, `lowerAscii`, `indexOf`, `substring`, and `matches`) over:
//!
//! * every text of the gcfg differential corpus (`tests/gcfg_differential.rs`: the fixtures,
//!   hand-written corner cases, 3,000 generated variants, code-point names and the webhook's
//!   own edits of them), as a labelled ConfigMap site and as OpenShift's
//!   `openshift-config/cloud-provider-config`;
//! * generated Flux HelmReleases and Argo CD Applications with structured CCM chart values
//!   (false in every spelling, chart references, `valuesFrom`, `cloudConfigContents`, the
//!   Secret switched off, keys that inject lines, parameters, several sources).
//!
//! The Kubernetes CEL library functions the crate lacks are added here as test-side
//! extensions with Go's semantics: `findAll` (Go `FindAllString`, with Rust's `regex`, whose
//! syntax matches RE2 for the expressions generated) and `jsonpatch.escapeKey`; and the
//! `JSONPatch{…}` object literal is read as a map literal. An evaluation error counts as
//! "admitted / unchanged", as `failurePolicy: Ignore` makes it.
//!
//! Asserted: zero policy denials where the engine admits (or denies for another reason), zero
//! mutations where the engine would not patch, the policies' mutation leaves nothing for the
//! engine to add; and on every text that passes the plain INI gate the policy and the engine
//! agree exactly (counts printed with `--nocapture`).

#[path = "gcfg_differential.rs"]
#[allow(dead_code)]
mod gcfg_differential;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use cel::extractors::This;
use cel::{Context, Env, ExecutionError, Value as CelValue};
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::{Value, json};
use stackgate::admission_policies::{self, AdmissionPolicies};
use stackgate::engine::{Engine, Operation, Subject, Verdict};
use stackgate::policy::PolicySet;

const SERIAL_POLICY: &str = "serial-lb-api-calls";
const KNOWN_BAD_POLICY: &str = "known-bad-lb-settings";

// ---------------------------------------------------------------------------------------------
// A CEL evaluator with the Kubernetes functions the crate lacks

thread_local! {
    static REGEXES: RefCell<HashMap<String, regex::Regex>> = RefCell::new(HashMap::new());
}

/// Kubernetes' `<string>.findAll(<regex>)`: every non-overlapping match, as Go's
/// `FindAllString(s, -1)`.
fn find_all(This(s): This<Arc<String>>, re: Arc<String>) -> Result<CelValue, ExecutionError> {
    REGEXES.with(|cache| {
        let mut cache = cache.borrow_mut();
        if !cache.contains_key(re.as_str()) {
            let compiled = regex::Regex::new(&re)
                .map_err(|e| ExecutionError::function_error("findAll", e.to_string()))?;
            cache.insert(re.to_string(), compiled);
        }
        let compiled = &cache[re.as_str()];
        let found: Vec<CelValue> = compiled
            .find_iter(&s)
            .map(|m| CelValue::from(m.as_str().to_owned()))
            .collect();
        Ok(CelValue::from(found))
    })
}

/// Kubernetes' `jsonpatch.escapeKey`: `~` → `~0`, `/` → `~1`.
fn escape_key(key: Arc<String>) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn env() -> Arc<Env> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings).unwrap();
    Arc::new(env)
}

/// Kubernetes' `<string>.matches(<regex>)` (RE2 `MatchString`: a match anywhere), with the
/// compiled expression cached: the crate's own `matches` compiles it on every call, which
/// makes 30,000 evaluations of the gate take minutes in a debug build.
fn matches_cached(This(s): This<Arc<String>>, re: Arc<String>) -> Result<bool, ExecutionError> {
    REGEXES.with(|cache| {
        let mut cache = cache.borrow_mut();
        if !cache.contains_key(re.as_str()) {
            let compiled = regex::Regex::new(&re)
                .map_err(|e| ExecutionError::function_error("matches", e.to_string()))?;
            cache.insert(re.to_string(), compiled);
        }
        Ok(cache[re.as_str()].is_match(&s))
    })
}

/// The two test-side rewrites of generated CEL: `JSONPatch{op: …, path: …, value: …}` read as
/// a map literal, and `.matches(` calls routed to [`matches_cached`].
fn adapted(expression: &str) -> String {
    expression
        .replace("JSONPatch{op: ", "{'op': ")
        .replace(", path: ", ", 'path': ")
        .replace(", value: ", ", 'value': ")
        .replace(".matches(", ".matchesCached(")
}

thread_local! {
    static PROGRAMS: RefCell<HashMap<String, Arc<cel::Program>>> = RefCell::new(HashMap::new());
}

/// `expression` compiled once per thread.
fn program(env: &Arc<Env>, expression: &str) -> Arc<cel::Program> {
    PROGRAMS.with(|cache| {
        let mut cache = cache.borrow_mut();
        Arc::clone(cache.entry(expression.to_owned()).or_insert_with(|| {
            let compiled = env.compile(&adapted(expression)).unwrap_or_else(|e| {
                panic!("generated CEL does not parse: {e:?}\n{expression}");
            });
            Arc::new(compiled)
        }))
    })
}

/// One admission request as CEL sees it.
struct Request<'a> {
    object: &'a Value,
    old_object: Option<&'a Value>,
    operation: &'a str,
}

/// Evaluates `expression` with `object`, `oldObject`, `request` and `variables`; None on any
/// error (the policies fail open).
fn eval(
    env: &Arc<Env>,
    request: &Request<'_>,
    variables: &Value,
    expression: &str,
) -> Option<Value> {
    let program = program(env, expression);
    let mut ctx = Context::with_env(Arc::clone(env));
    ctx.add_function("findAll", find_all).unwrap();
    ctx.add_function("matchesCached", matches_cached).unwrap();
    ctx.add_function("jsonpatch.escapeKey", escape_key).unwrap();
    ctx.add_variable("object", request.object.clone()).unwrap();
    ctx.add_variable(
        "oldObject",
        request.old_object.cloned().unwrap_or(Value::Null),
    )
    .unwrap();
    let namespace = request.object["metadata"]["namespace"].clone();
    ctx.add_variable(
        "request",
        json!({"operation": request.operation, "namespace": namespace,
               "userInfo": {"username": TENANT, "groups": TENANT_GROUPS}}),
    )
    .unwrap();
    ctx.add_variable("variables", variables.clone()).unwrap();
    let value = program.execute(&ctx).ok()?;
    value.json().ok()
}

/// The resource a test object is written as.
fn resource_of(object: &Value) -> &'static str {
    match object["kind"].as_str() {
        Some("ConfigMap") => "configmaps",
        Some("HelmRelease") => "helmreleases",
        Some("Application") => "applications",
        other => panic!("no resource for {other:?}"),
    }
}

/// Whether `policy`'s matchConstraints and matchConditions select the request, and its
/// variables evaluated in order (an erroring variable is left out: using it errors).
fn prepare(env: &Arc<Env>, policy: &Value, request: &Request<'_>) -> Option<Value> {
    let resource = resource_of(request.object);
    let matched = policy["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == resource)
                && r["operations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|o| o == request.operation)
        });
    if !matched {
        return None;
    }
    let no_variables = json!({});
    for condition in policy["spec"]["matchConditions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let expression = condition["expression"].as_str().unwrap();
        if eval(env, request, &no_variables, expression) != Some(Value::Bool(true)) {
            return None;
        }
    }
    let mut variables = serde_json::Map::new();
    for v in policy["spec"]["variables"].as_array().into_iter().flatten() {
        let (name, expression) = (
            v["name"].as_str().unwrap(),
            v["expression"].as_str().unwrap(),
        );
        if let Some(value) = eval(env, request, &Value::Object(variables.clone()), expression) {
            variables.insert(name.to_owned(), value);
        }
    }
    Some(Value::Object(variables))
}

/// Whether the ValidatingAdmissionPolicy refuses the request.
fn denies(env: &Arc<Env>, policy: &Value, request: &Request<'_>) -> bool {
    let Some(variables) = prepare(env, policy, request) else {
        return false;
    };
    policy["spec"]["validations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| {
            eval(env, request, &variables, v["expression"].as_str().unwrap())
                == Some(Value::Bool(false))
        })
}

/// The object after the MutatingAdmissionPolicy (None: unchanged).
fn mutated(env: &Arc<Env>, policy: &Value, request: &Request<'_>) -> Option<Value> {
    let variables = prepare(env, policy, request)?;
    let mut object = request.object.clone();
    let mut changed = false;
    for m in policy["spec"]["mutations"].as_array().unwrap() {
        let expression = m["jsonPatch"]["expression"].as_str().unwrap();
        let Some(ops) = eval(env, request, &variables, expression) else {
            continue;
        };
        let ops = ops.as_array().unwrap();
        if ops.is_empty() {
            continue;
        }
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops.clone())).unwrap();
        // A patch that does not apply is an error of the policy: with `failurePolicy: Ignore`
        // the apiserver admits the object unchanged.
        let mut attempt = object.clone();
        if json_patch::patch(&mut attempt, &patch).is_err() {
            continue;
        }
        object = attempt;
        changed = true;
    }
    changed.then_some(object)
}

// ---------------------------------------------------------------------------------------------
// The engine's side

fn gvk_of(object: &Value) -> GroupVersionKind {
    let api = object["apiVersion"].as_str().unwrap();
    let (group, version) = api.rsplit_once('/').unwrap_or(("", api));
    GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap())
}

/// Who writes every object of the differential, on both sides: a tenant, whose exemption
/// annotation counts for no shipped `enforce` policy.
const TENANT: &str = "tenant";
const TENANT_GROUPS: [&str; 2] = ["tenants", "system:authenticated"];

fn engine_verdict(engine: &Engine, object: &Value) -> Verdict {
    let gvk = gvk_of(object);
    let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    let groups: Vec<String> = TENANT_GROUPS.iter().map(|g| g.to_string()).collect();
    let mut subject = Subject::create(&gvk, &dynamic);
    subject.operation = Operation::Create;
    subject.requester = stackgate::engine::Requester::User {
        username: TENANT,
        groups: &groups,
    };
    engine.evaluate(&subject)
}

fn engine_denies(verdict: &Verdict, policy: &str, code: &str) -> bool {
    verdict
        .denials
        .iter()
        .any(|f| f.policy == policy && f.code == code)
}

fn engine_mutates(verdict: &Verdict, policy: &str) -> bool {
    verdict.mutations.iter().any(|f| f.policy == policy) && !verdict.patch.is_empty()
}

// ---------------------------------------------------------------------------------------------
// The comparison

struct Harness {
    env: Arc<Env>,
    engine: Engine,
    generated: AdmissionPolicies,
}

#[derive(Default, Debug)]
struct Counts {
    objects: usize,
    decided_by_gate: usize,
    policy_denied: usize,
    engine_denied: usize,
    agree_on_gated: usize,
    disagree_on_gated: Vec<String>,
    /// Policy denied, engine did not (must stay empty).
    wrong_denials: Vec<String>,
    policy_mutated: usize,
    engine_mutated: usize,
    /// Policy rewrote, engine would not (must stay empty).
    wrong_mutations: Vec<String>,
    /// After the policy's mutation the engine still adds or refuses something (must stay empty).
    incomplete_mutations: Vec<String>,
}

impl Harness {
    fn new() -> Self {
        let set = PolicySet::embedded().unwrap();
        Harness {
            env: env(),
            generated: admission_policies::generate(&set),
            engine: Engine::new(set),
        }
    }

    fn validating(&self, name: &str) -> &Value {
        self.generated
            .validating
            .iter()
            .find(|p| p["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no policy {name}"))
    }

    fn mutating(&self, name: &str) -> &Value {
        self.generated
            .mutating
            .iter()
            .find(|p| p["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no policy {name}"))
    }

    /// Compares one object; `gated`: whether the policies claim to decide it exactly.
    fn compare(&self, label: &str, object: &Value, gated: bool, group: &str, counts: &mut Counts) {
        counts.objects += 1;
        if gated {
            counts.decided_by_gate += 1;
        }
        let request = Request {
            object,
            old_object: None,
            operation: "CREATE",
        };
        let verdict = engine_verdict(&self.engine, object);
        let mut all_agree = true;
        for (policy, code) in [
            (SERIAL_POLICY, "false"),
            (KNOWN_BAD_POLICY, "use-octavia-false"),
        ] {
            let vap = self.validating(&format!("stackgate-{policy}-{group}"));
            let policy_says = denies(&self.env, vap, &request);
            let engine_says = engine_denies(&verdict, policy, code);
            counts.policy_denied += usize::from(policy_says);
            counts.engine_denied += usize::from(engine_says);
            if policy_says && !engine_says {
                counts.wrong_denials.push(format!("{policy}: {label}"));
            }
            all_agree &= policy_says == engine_says;
        }
        let map = self.mutating(&format!("stackgate-{SERIAL_POLICY}-{group}-add"));
        let after = mutated(&self.env, map, &request);
        let engine_patches = engine_mutates(&verdict, SERIAL_POLICY);
        counts.engine_mutated += usize::from(engine_patches);
        if let Some(after) = &after {
            counts.policy_mutated += 1;
            if !engine_patches {
                counts.wrong_mutations.push(label.to_owned());
            }
            let again = engine_verdict(&self.engine, after);
            // The refusal of an exemption annotation a tenant set (`exemption-not-allowed`)
            // is the webhook's alone (docs/admission-policies.md, webhook-only): the policies
            // only decline to honour it.
            let serial_left = again
                .mutations
                .iter()
                .chain(&again.denials)
                .any(|f| f.policy == SERIAL_POLICY && f.code != "exemption-not-allowed");
            if serial_left {
                counts.incomplete_mutations.push(label.to_owned());
            }
        }
        all_agree &= after.is_some() == engine_patches;
        if gated {
            if all_agree {
                counts.agree_on_gated += 1;
            } else {
                counts.disagree_on_gated.push(label.to_owned());
            }
        }
    }
}

fn gate_passes(text: &str) -> bool {
    text.len() <= admission_policies::MAX_DECIDED_TEXT_BYTES
        && regex::Regex::new(admission_policies::PLAIN_INI_GATE)
            .unwrap()
            .is_match(text)
        && regex::Regex::new(&admission_policies::gate_structure())
            .unwrap()
            .is_match(text)
}

fn labelled_configmap(text: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "ccm-cloud-config",
            "namespace": "kube-system",
            "labels": {"stackgate.dev/cloud-config": "cloud.conf"},
        },
        "data": {"cloud.conf": text},
    })
}

fn openshift_configmap(text: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cloud-provider-config", "namespace": "openshift-config"},
        "data": {"config": text, "ca-bundle.pem": ""},
    })
}

fn report(what: &str, counts: &Counts) {
    println!(
        "{what}: {} objects, {} pass the gate; denials policy {} / engine {}; mutations policy \
         {} / engine {}; agreement on gated {}/{}",
        counts.objects,
        counts.decided_by_gate,
        counts.policy_denied,
        counts.engine_denied,
        counts.policy_mutated,
        counts.engine_mutated,
        counts.agree_on_gated,
        counts.decided_by_gate
    );
}

fn assert_sound(what: &str, counts: &Counts) {
    report(what, counts);
    let show = |v: &[String]| v.iter().take(10).cloned().collect::<Vec<_>>().join("\n  ");
    assert!(
        counts.wrong_denials.is_empty(),
        "{what}: {} policy denials the engine does not make:\n  {}",
        counts.wrong_denials.len(),
        show(&counts.wrong_denials)
    );
    assert!(
        counts.wrong_mutations.is_empty(),
        "{what}: {} policy rewrites the engine would not make:\n  {}",
        counts.wrong_mutations.len(),
        show(&counts.wrong_mutations)
    );
    assert!(
        counts.incomplete_mutations.is_empty(),
        "{what}: {} policy rewrites after which the engine still adds or refuses:\n  {}",
        counts.incomplete_mutations.len(),
        show(&counts.incomplete_mutations)
    );
    assert!(
        counts.disagree_on_gated.is_empty(),
        "{what}: {} texts pass the gate but policy and engine disagree:\n  {}",
        counts.disagree_on_gated.len(),
        show(&counts.disagree_on_gated)
    );
}

/// Deterministic SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

/// Configs built to sit on both sides of the gate's decisions: the two keys in `[LoadBalancer]`
/// headers of every spelling, bool literals in every case with blanks, comments and junk,
/// repeated assignments, look-alike keys, the keys in other sections and in comments, and a
/// few lines the gate refuses (quotes, continuations, CR, Unicode, a subsection).
fn plain_ini_configs(count: usize, seed: u64) -> Vec<(String, String)> {
    const HEADERS: &[&str] = &[
        "[LoadBalancer]",
        "[loadbalancer]",
        "[LOADBALANCER]",
        "[ LoadBalancer ]",
        "[LoadBalancer] ; lb",
        "[\tLoadBalancer]",
        "[Global]",
        "[BlockStorage]",
        "[LoadBalancerClass]",
        "[Metadata]",
        "[LoadBalancers]",
    ];
    const KEYS: &[&str] = &[
        "provider-requires-serial-api-calls",
        "PROVIDER-REQUIRES-SERIAL-API-CALLS",
        "Provider-Requires-Serial-API-Calls",
        "use-octavia",
        "Use-Octavia",
        "provider-requires-serial-api-calls-x",
        "use-octavias",
        "lb-provider",
        "auth-url",
    ];
    const VALUES: &[&str] = &[
        "true",
        "false",
        "FALSE",
        "False",
        "no",
        "No",
        "off",
        "OFF",
        "0",
        "1",
        "yes",
        "on",
        "",
        " false ",
        "false ; comment",
        "false#x",
        "fa lse",
        "f",
        "00",
        "-0",
        "maybe",
        "[x]",
        "false=true",
        "true ; false",
        "x;false",
    ];
    const NOISE: &[&str] = &[
        "",
        "; provider-requires-serial-api-calls = false",
        "# use-octavia = false",
        "   ",
        "region = RegionOne",
        "\tsubnet-id = abc",
        "name = a[b]c",
        "lb-method = SOURCE_IP_PORT",
    ];
    const OFF_GATE: &[&str] = &[
        "provider-requires-serial-api-calls = \"false\"",
        "provider-requires-serial-api-calls = tr\\\nue",
        "use-octavia = false\r",
        "region = r\u{e9}gion",
        "[LoadBalancer \"x\"]",
        "  [LoadBalancer]",
    ];
    let mut rng = Rng(seed);
    (0..count)
        .map(|i| {
            let mut lines: Vec<String> = Vec::new();
            if rng.next().is_multiple_of(4) {
                lines.push(rng.pick(NOISE).to_owned());
            }
            for _ in 0..1 + rng.next() % 4 {
                lines.push(rng.pick(HEADERS).to_owned());
                for _ in 0..rng.next() % 5 {
                    let line = match rng.next() % 6 {
                        0 => rng.pick(NOISE).to_owned(),
                        1 => rng.pick(KEYS).to_owned(),
                        2 => format!("{}={}", rng.pick(KEYS), rng.pick(VALUES)),
                        _ => format!("  {} = {}", rng.pick(KEYS), rng.pick(VALUES)),
                    };
                    lines.push(line);
                }
            }
            if rng.next().is_multiple_of(10) {
                let at = (rng.next() % (lines.len() as u64 + 1)) as usize;
                lines.insert(at, rng.pick(OFF_GATE).to_owned());
            }
            let mut text = lines.join("\n");
            if !rng.next().is_multiple_of(3) {
                text.push('\n');
            }
            (format!("plain-{i:04}"), text)
        })
        .collect()
}

/// The gcfg differential corpus and the plain-INI configs, as labelled ConfigMaps and as
/// OpenShift's shared site.
#[test]
fn configmap_policies_never_deny_what_the_engine_admits_and_agree_on_plain_ini() {
    let harness = Harness::new();
    let mut counts = Counts::default();
    let mut corpus = gcfg_differential::corpus();
    corpus.extend(plain_ini_configs(3000, 0x5EED_0025));
    for (name, text) in &corpus {
        let gated = gate_passes(text);
        harness.compare(
            name,
            &labelled_configmap(text),
            gated,
            "configmaps",
            &mut counts,
        );
        harness.compare(
            &format!("openshift {name}"),
            &openshift_configmap(text),
            gated,
            "configmaps",
            &mut counts,
        );
    }
    assert_sound("gcfg corpus as ConfigMaps", &counts);
    // The gate must leave a real share of the corpus to the policies, and they must act on it.
    assert!(counts.decided_by_gate * 10 > counts.objects, "{counts:?}");
    assert!(counts.policy_denied > 500, "{counts:?}");
    assert!(counts.policy_mutated > 500, "{counts:?}");
}

/// A random JSON scalar for a chart value of the two decided keys.
const BOOLISH: &[&str] = &[
    "false",
    "\"false\"",
    "\"no\"",
    "\"Off\"",
    "0",
    "\"0\"",
    "0.0",
    "true",
    "\"true\"",
    "\"yes\"",
    "1",
    "null",
    "\"\"",
    "\" false\"",
    "\"maybe\"",
    "\"FALSE\"",
];

/// Structured CCM chart values in Flux HelmReleases and Argo CD Applications. Returns
/// (name, object, plain): `plain` when the object was built to meet every condition under
/// which the policies decide (chart named plainly, structured `cloudConfig` with plain keys
/// and scalars, Secret rendered, nothing merged from elsewhere).
fn gitops_objects(count: usize, seed: u64) -> Vec<(String, Value, bool)> {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    for i in 0..count {
        let mut plain = true;
        let mut lb = serde_json::Map::new();
        for key in [
            "provider-requires-serial-api-calls",
            "use-octavia",
            "Provider-Requires-Serial-API-Calls",
            "lb-provider",
        ] {
            if rng.next().is_multiple_of(2) {
                let v: Value = serde_json::from_str(rng.pick(BOOLISH)).unwrap();
                lb.insert(key.to_owned(), v);
            }
        }
        // Every generation of the chart must write a value alike for the policies to decide
        // (`GENERATION_PROOF_SCALAR`: 1.x and 2.24.0 write values unquoted): a null, or a
        // string with a blank or one of `"#;\`, is left to the webhook.
        if lb.values().any(|v| match v {
            Value::Null => true,
            Value::String(s) => !s
                .chars()
                .all(|c| c.is_ascii_graphic() && !"\"#;\\".contains(c)),
            _ => false,
        }) {
            plain = false;
        }
        if lb.contains_key("Provider-Requires-Serial-API-Calls")
            && !lb.contains_key("provider-requires-serial-api-calls")
        {
            // The policies read the exact key only; the chart renders this one too.
            plain = false;
        }
        let mut cloud_config =
            json!({"global": {"auth-url": "https://keystone:5000/v3", "region": "RegionOne"}});
        if !rng.next().is_multiple_of(6) {
            cloud_config["loadBalancer"] = Value::Object(lb);
        }
        match rng.next() % 14 {
            // A key that injects lines into the rendered config, after [LoadBalancer].
            0 => {
                plain = false;
                cloud_config["route"] =
                    json!({"x\n[LoadBalancer]\nprovider-requires-serial-api-calls": "true"});
            }
            1 => {
                plain = false;
                cloud_config["global"]["tenant-name"] = json!("caf\u{e9} \"q\"");
            }
            2 => {
                plain = false;
                cloud_config["blockStorage"] = json!("not a map");
            }
            3 => cloud_config["metadata"] = json!({"search-order": "configDrive,metadataService"}),
            _ => {}
        }
        let mut values = json!({"cloudConfig": cloud_config});
        match rng.next() % 12 {
            0 => {
                plain = false;
                values["cloudConfigContents"] =
                    json!("[LoadBalancer]\nprovider-requires-serial-api-calls = true\n");
            }
            1 => {
                plain = false;
                values["secret"] = json!({"create": false});
            }
            2 => {
                plain = false;
                values["secret"] = json!({"enabled": "false"});
            }
            3 => values["secret"] = json!({"enabled": true, "name": "cloud-config"}),
            4 => {
                plain = false;
                values = json!({"openstack-cloud-controller-manager": values});
            }
            _ => {}
        }
        let chart = match rng.next() % 10 {
            0 => {
                plain = false;
                "other-chart"
            }
            1 => {
                plain = false;
                "openstack-cloud-controller-manager-2.31.0.tgz"
            }
            2 => "cpo/openstack-cloud-controller-manager",
            3 => "oci://registry.example/charts/openstack-cloud-controller-manager",
            _ => "openstack-cloud-controller-manager",
        };
        let namespace = rng.pick(&["kube-system", "flux-system", "argocd"]);
        let mut annotations = serde_json::Map::new();
        if rng.next().is_multiple_of(15) {
            plain = false;
            let policy = rng.pick(&[SERIAL_POLICY, KNOWN_BAD_POLICY]);
            let reason = rng.pick(&["tested on amphora", "  "]);
            annotations.insert(format!("stackgate.dev/exempt.{policy}"), json!(reason));
        }
        let object = if rng.next().is_multiple_of(2) {
            let mut spec = json!({"interval": "10m", "values": values});
            if rng.next().is_multiple_of(5) {
                spec["chartRef"] = json!({"kind": "OCIRepository", "name": chart});
            } else {
                spec["chart"] = json!({"spec": {"chart": chart, "sourceRef": {"kind": "HelmRepository", "name": "cpo"}}});
            }
            match rng.next() % 8 {
                0 => {
                    plain = false;
                    spec["valuesFrom"] = json!([{"kind": "Secret", "name": "occm-values"}]);
                }
                1 => spec["valuesFrom"] = json!([]),
                _ => {}
            }
            json!({
                "apiVersion": rng.pick(&["helm.toolkit.fluxcd.io/v2", "helm.toolkit.fluxcd.io/v2beta2", "helm.toolkit.fluxcd.io/v2beta1"]),
                "kind": "HelmRelease",
                "metadata": {"name": format!("occm-{i}"), "namespace": namespace, "annotations": annotations},
                "spec": spec,
            })
        } else {
            let mut helm = json!({"valuesObject": values});
            match rng.next() % 10 {
                0 => {
                    plain = false;
                    helm["parameters"] = json!([{"name": "cloudConfig.loadBalancer.provider-requires-serial-api-calls", "value": "true"}]);
                }
                1 => {
                    plain = false;
                    helm["valueFiles"] = json!(["values-prod.yaml"]);
                }
                2 => helm["values"] = json!("cloudConfig: {}\n"),
                _ => {}
            }
            let field = if rng.next().is_multiple_of(6) {
                "path"
            } else {
                "chart"
            };
            let mut source = json!({"repoURL": "https://kubernetes.github.io/cloud-provider-openstack", "targetRevision": "2.31.0", "helm": helm});
            source[field] = json!(chart);
            let mut spec =
                json!({"project": "default", "destination": {"namespace": "kube-system"}});
            if rng.next().is_multiple_of(3) {
                // The mutating policy edits `spec.source` only.
                plain = false;
                let other = json!({"repoURL": "https://example.org/charts", "chart": "other", "targetRevision": "1.0.0"});
                spec["sources"] = json!([other, source]);
            } else {
                spec["source"] = source;
            }
            json!({
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Application",
                "metadata": {"name": format!("occm-{i}"), "namespace": namespace, "annotations": annotations},
                "spec": spec,
            })
        };
        out.push((format!("gitops-{i:04}"), object, plain));
    }
    out
}

/// Flux HelmReleases and Argo CD Applications with structured chart values.
#[test]
fn chart_values_policies_never_deny_what_the_engine_admits_and_agree_on_plain_values() {
    let harness = Harness::new();
    let mut counts = Counts::default();
    for (name, object, plain) in gitops_objects(2000, 0x5EED_0026) {
        harness.compare(
            &format!("{name} {object}"),
            &object,
            plain,
            "chart-values",
            &mut counts,
        );
    }
    assert_sound("structured chart values", &counts);
    // (A sixth of the objects: nulls and values with blanks, which the chart's unquoted
    // generations write differently, are left to the webhook.)
    assert!(counts.decided_by_gate * 7 > counts.objects, "{counts:?}");
    assert!(counts.policy_denied > 200, "{counts:?}");
    assert!(counts.policy_mutated > 100, "{counts:?}");
}

// ---------------------------------------------------------------------------------------------
// Literals (issue 31 item 8a)

/// Namespaces (and other texts) a policy may name that CEL cannot take raw in a literal, or
/// that read as escapes or line breaks: each must compile and read back as itself.
const HOSTILE_TEXTS: &[&str] = &[
    "kube\rsystem",
    "a\nb",
    "\r\n",
    "it's",
    "'",
    "' || true || '",
    "say \"x\"",
    "back\\slash",
    "\\",
    "\\u0041",
    "\\n",
    "tab\there",
    "nul\u{0}",
    "bell\u{7}",
    "del\u{7f}",
    "nel\u{85}",
    "line\u{2028}sep",
    "para\u{2029}sep",
    "bom\u{feff}",
    "snow☃man",
    "😀",
    "",
];

/// Every CEL expression of the generated policies: match conditions, variables, validations
/// and mutations.
fn expressions(generated: &AdmissionPolicies) -> Vec<String> {
    let mut out = Vec::new();
    for policy in generated.validating.iter().chain(&generated.mutating) {
        let spec = &policy["spec"];
        for list in ["matchConditions", "variables", "validations"] {
            for item in spec[list].as_array().into_iter().flatten() {
                out.push(item["expression"].as_str().unwrap().to_owned());
            }
        }
        for m in spec["mutations"].as_array().into_iter().flatten() {
            out.push(m["jsonPatch"]["expression"].as_str().unwrap().to_owned());
        }
    }
    out
}

#[test]
fn cel_literals_of_hostile_texts_compile_and_read_back_as_themselves() {
    let env = env();
    let object = labelled_configmap("[Global]\n");
    let request = Request {
        object: &object,
        old_object: None,
        operation: "CREATE",
    };
    for text in HOSTILE_TEXTS {
        let literal = admission_policies::cel_str(text);
        assert!(
            !literal.contains(['\r', '\n', '\u{2028}', '\u{2029}', '\u{85}']),
            "{text:?}: {literal}"
        );
        let read = eval(&env, &request, &json!({}), &literal);
        assert_eq!(read, Some(json!(text)), "{text:?} as {literal}");
    }
}

#[test]
fn policies_scoped_to_hostile_namespaces_compile_and_match_only_those() {
    let env = env();
    for namespace in HOSTILE_TEXTS {
        let mut set = PolicySet::embedded().unwrap();
        for policy in &mut set.policies {
            policy.scope.namespaces = vec![(*namespace).to_owned(), "kube-system\r".to_owned()];
            policy.scope.exclude_namespaces = vec![format!("{namespace}\u{2028}")];
        }
        let generated = admission_policies::generate(&set);
        for expression in expressions(&generated) {
            // Panics, naming the expression, when it does not parse.
            program(&env, &expression);
        }
        // The scope reads the namespace as written: in scope there, not one character off.
        let policy = generated
            .validating
            .iter()
            .find(|p| p["metadata"]["name"] == format!("stackgate-{SERIAL_POLICY}-configmaps"))
            .expect("the serial ConfigMap policy");
        let in_scope = |ns: &str| {
            let mut object = labelled_configmap("[Global]\n");
            object["metadata"]["namespace"] = json!(ns);
            let request = Request {
                object: &object,
                old_object: None,
                operation: "CREATE",
            };
            prepare(&env, policy, &request).map(|v| v["inScope"].clone())
        };
        assert_eq!(in_scope(namespace), Some(json!(true)), "{namespace:?}");
        assert_eq!(in_scope("kube-system"), Some(json!(false)), "{namespace:?}");
        assert_eq!(
            in_scope(&format!("{namespace}\u{2028}")),
            Some(json!(false)),
            "{namespace:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Issue 35: never stricter than the engine, no rewrite it would not make

/// Sets `value` at JSON pointer `pointer` in `object`, creating the maps on the way.
fn set_pointer(object: &mut Value, pointer: &str, value: Value) {
    let mut at = object;
    let segments: Vec<&str> = pointer.split('/').skip(1).collect();
    for (i, segment) in segments.iter().enumerate() {
        let map = at.as_object_mut().expect("a map on the way");
        if i + 1 == segments.len() {
            map.insert((*segment).to_owned(), value);
            return;
        }
        at = map
            .entry((*segment).to_owned())
            .or_insert_with(|| json!({}));
    }
}

/// A plain, decided HelmRelease or Application of the CCM chart whose values set the serial
/// setting to `serial` (None: missing, which the mutating policy adds).
fn decided_gitops(kind: &str, chart: &str, serial: Option<Value>) -> Value {
    let mut lb = json!({"lb-provider": "amphora"});
    if let Some(serial) = serial {
        lb["provider-requires-serial-api-calls"] = serial;
    }
    let values = json!({"cloudConfig": {"global": {"region": "RegionOne"}, "loadBalancer": lb}});
    match kind {
        "HelmRelease" => json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"interval": "10m", "values": values,
                     "chart": {"spec": {"chart": chart, "sourceRef": {"kind": "HelmRepository", "name": "cpo"}}}},
        }),
        _ => json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {"name": "occm", "namespace": "argocd"},
            "spec": {"project": "default", "destination": {"namespace": "kube-system"},
                     "source": {"repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                                "targetRevision": "2.31.0", "chart": chart,
                                "helm": {"valuesObject": values}}},
        }),
    }
}

/// The values sources the engine cannot see, from the delivery registry (every `unseen_at`
/// of the Flux and Argo CD paths), plus Flux's deprecated `spec.chart.spec.valuesFile`, which
/// the reader treats as unseen too (`sites::helm`) but the registry does not list.
fn unseen_values_sources() -> Vec<(&'static str, String, Value)> {
    use stackgate::sites::delivery::REGISTRY;
    let mut out = Vec::new();
    // Only the paths whose objects the policies read (other groups have kinds of these names).
    for path in REGISTRY
        .iter()
        .filter(|p| ["helm.toolkit.fluxcd.io", "argoproj.io"].contains(&p.group))
    {
        for kind in path.kinds {
            if !["HelmRelease", "Application"].contains(kind) {
                continue;
            }
            for source in path.sources {
                if let Some(at) = source.unseen_at {
                    let example: Value = serde_json::from_str(at.example).unwrap();
                    out.push((*kind, at.pointer.to_owned(), example));
                }
            }
        }
    }
    out.push((
        "HelmRelease",
        "/spec/chart/spec/valuesFile".to_owned(),
        json!("values-prod.yaml"),
    ));
    out
}

/// Every values source the engine treats as unseen, with every serial value (false in each
/// spelling, true, missing) and, for Flux, a chart given by `chartRef` too: the policies must
/// neither refuse nor rewrite any of them (the engine only warns).
#[test]
fn values_the_engine_cannot_see_are_never_decided_by_the_policies() {
    let harness = Harness::new();
    let mut counts = Counts::default();
    let sources = unseen_values_sources();
    assert!(sources.len() >= 5, "{sources:?}");
    let mut classes = 0;
    for (kind, pointer, example) in &sources {
        classes += 1;
        for serial in BOOLISH
            .iter()
            .map(|b| Some(serde_json::from_str(b).unwrap()))
            .chain([None])
        {
            let mut object = decided_gitops(kind, "openstack-cloud-controller-manager", serial);
            set_pointer(&mut object, pointer, example.clone());
            let label = format!("{kind} {pointer} {object}");
            let before = counts.policy_denied + counts.policy_mutated;
            harness.compare(&label, &object, false, "chart-values", &mut counts);
            if counts.policy_denied + counts.policy_mutated > before {
                println!("decided by the policies (and the engine): {label}");
            }
        }
    }
    println!("unseen values sources: {classes} classes");
    assert_sound("unseen values sources", &counts);
    let decided: Vec<_> = counts
        .wrong_denials
        .iter()
        .chain(&counts.wrong_mutations)
        .collect();
    assert!(decided.is_empty(), "{decided:?}");
}

/// Chart references of every form the engine parses as a URL: query and fragment before or
/// after the name, `;params`, percent escapes, dot segments, tags, archives and blanks, in
/// every place a chart is named (Flux `chart.spec.chart` and `chartRef.name`, Argo CD `chart`,
/// `path` and `repoURL`). The policies must agree with the engine or leave it to the webhook.
#[test]
fn chart_references_are_read_as_the_engine_reads_them() {
    const PREFIXES: &[&str] = &[
        "",
        "repo/",
        "oci://registry.example/charts/",
        "./charts/",
        "https://h.example/x/",
        "https://h.example/x?y=1/",
        "https://h.example/x#f/",
        "a?/",
        "a#/",
        "?/",
        "#/",
        "a;p=1/",
        "%2e%2e/",
        "a%2Fb/",
        "a/%3F/",
        " ",
    ];
    const NAMES: &[&str] = &[
        "openstack-cloud-controller-manager",
        "openstack-cloud-controller-manager:2.31.1",
        "openstack-cloud-controller-manager-2.31.0.tgz",
        "openstack%2Dcloud-controller-manager",
        "openstack-cloud-controller-manager;v=1",
        "Openstack-cloud-controller-manager",
    ];
    const SUFFIXES: &[&str] = &[
        "", "?x=1", "#frag", "/", "/.", "/..", " ", "%20", "?/x", "#/x",
    ];
    let harness = Harness::new();
    let mut counts = Counts::default();
    let mut references = 0;
    for prefix in PREFIXES {
        for name in NAMES {
            for suffix in SUFFIXES {
                let reference = format!("{prefix}{name}{suffix}");
                references += 1;
                for serial in [Some(json!(false)), None] {
                    for place in 0..5 {
                        let (kind, chart) = match place {
                            0 | 1 => ("HelmRelease", reference.as_str()),
                            _ => ("Application", reference.as_str()),
                        };
                        let mut object = decided_gitops(kind, chart, serial.clone());
                        match place {
                            1 => {
                                object["spec"].as_object_mut().unwrap().remove("chart");
                                object["spec"]["chartRef"] =
                                    json!({"kind": "OCIRepository", "name": reference});
                            }
                            3 => {
                                let source = object["spec"]["source"].as_object_mut().unwrap();
                                source.remove("chart");
                                source.insert("path".to_owned(), json!(reference));
                            }
                            4 => {
                                object["spec"]["source"]["repoURL"] =
                                    json!(format!("https://h.example/{prefix}{suffix}"));
                            }
                            _ => {}
                        }
                        let label = format!("{kind} place {place} {reference:?}");
                        harness.compare(&label, &object, false, "chart-values", &mut counts);
                    }
                }
            }
        }
    }
    println!("chart references: {references} references");
    assert_sound("chart references", &counts);
    // The plain forms (no `?`, `#` or `%`) are still decided.
    assert!(counts.policy_denied >= 30, "{counts:?}");
    assert!(counts.policy_mutated >= 30, "{counts:?}");
}

/// `cloudConfig`, `cloudConfig.loadBalancer` and the values themselves null, empty or not a
/// map: no refusal the engine does not make, and where the engine adds the serial setting
/// the mutating policy adds it too (or leaves the object alone).
#[test]
fn null_empty_and_non_map_values_are_never_stricter() {
    const SHAPES: &[&str] = &[
        "null",
        "{}",
        "\"x\"",
        "[]",
        "1",
        "true",
        "{\"lb-provider\": null}",
    ];
    let harness = Harness::new();
    let mut counts = Counts::default();
    for kind in ["HelmRelease", "Application"] {
        for shape in SHAPES {
            let shape: Value = serde_json::from_str(shape).unwrap();
            for pointer in ["/cloudConfig/loadBalancer", "/cloudConfig", ""] {
                let mut object = decided_gitops(kind, "openstack-cloud-controller-manager", None);
                let base = if kind == "HelmRelease" {
                    "/spec/values"
                } else {
                    "/spec/source/helm/valuesObject"
                };
                set_pointer(&mut object, &format!("{base}{pointer}"), shape.clone());
                let label = format!("{kind} {base}{pointer} = {shape}");
                // A null or empty section is the chart's own: the policies decide it exactly.
                let decided = pointer == "/cloudConfig/loadBalancer"
                    && (shape.is_null() || shape == json!({}));
                harness.compare(&label, &object, decided, "chart-values", &mut counts);
            }
        }
    }
    assert_sound("null, empty and non-map values", &counts);
    assert_eq!(counts.decided_by_gate, 4, "{counts:?}");
}

/// Texts that are not an OpenStack CCM config, or barely one: another platform's gcfg, YAML,
/// JSON, an empty text, comments only.
const OTHER_PLATFORM_TEXTS: &[&str] = &[
    "",
    "\n",
    "; nothing here\n",
    "[global]\nproject-id = my-project\nnode-tags = k8s\n",
    "[Global]\nregion = RegionOne\n",
    "[Global]\nsecret-name = vsphere-creds\nsecret-namespace = kube-system\n",
    "global:\n  insecureFlag: true\nvcenter:\n  vc.example:\n    server: vc.example\n",
    "{\"prismCentral\": {\"address\": \"pc.example\"}}\n",
    "[Global]\nauth-url = https://keystone:5000/v3\n",
    "[LoadBalancer]\nlb-provider = ovn\n",
    "[LoadBalancer]\nprovider-requires-serial-api-calls = false\n",
    "[Global]\nauth-url = https://keystone:5000/v3\n[LoadBalancer]\nuse-octavia = false\n",
];

/// Every ConfigMap site of the embedded sites document (named, validate-only, shared with
/// other platforms) × no label / the label naming the site's key / the label naming another
/// key, × texts of every kind (OpenStack or not, the plain-INI configs), plus a labelled
/// ConfigMap no site names: the mutating policy edits only where the engine edits (named
/// validate-only sites never; shared sites only with OpenStack content).
#[test]
fn site_kinds_labels_and_named_site_rules_agree_with_the_engine() {
    use stackgate::policy::SiteKind;
    let harness = Harness::new();
    let set = PolicySet::embedded().unwrap();
    let label = set
        .sites
        .label
        .clone()
        .expect("the embedded set has a site label");
    let mut texts: Vec<(String, String)> = OTHER_PLATFORM_TEXTS
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("other-{i}"), (*t).to_owned()))
        .collect();
    texts.extend(plain_ini_configs(150, 0x5EED_0035));
    let mut placements: Vec<(String, String, String)> = set
        .sites
        .sites
        .iter()
        .filter(|s| s.kind == SiteKind::ConfigMap)
        .map(|s| (s.namespace.clone(), s.name.clone(), s.key.clone()))
        .collect();
    assert!(placements.len() >= 2, "{placements:?}");
    placements.push((
        "kube-system".into(),
        "ccm-cloud-config".into(),
        "cloud.conf".into(),
    ));
    let mut counts = Counts::default();
    let mut classes = 0;
    for (namespace, name, key) in &placements {
        for labelled in [None, Some(key.clone()), Some("other.conf".to_owned())] {
            classes += 1;
            for (text_name, text) in &texts {
                let mut data = serde_json::Map::new();
                data.insert(key.clone(), json!(text));
                let mut labels = serde_json::Map::new();
                if let Some(labelled) = &labelled {
                    labels.insert(label.clone(), json!(labelled));
                    data.insert(labelled.clone(), json!(text));
                }
                let object = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace, "labels": labels},
                    "data": data,
                });
                let what = format!("{namespace}/{name}[{key}] label {labelled:?} {text_name}");
                harness.compare(&what, &object, false, "configmaps", &mut counts);
            }
        }
    }
    println!("site placements: {classes} classes × {} texts", texts.len());
    assert_sound("site kinds × labels × named-site rules", &counts);
    assert!(counts.policy_mutated > 100, "{counts:?}");
}

// ---------------------------------------------------------------------------------------------
// CEL cost (issue 35 item 3)

/// The apiserver's limits (`k8s.io/apiserver/pkg/apis/cel/config.go`): `PerCallLimit`, the
/// cost one expression (each variable, each validation, each mutation is its own program with
/// `cel.CostLimit(PerCallLimit)`, `pkg/cel/environment/base.go`) may spend before "actual cost
/// limit exceeded", and `RuntimeCELCostBudget`, what one policy evaluation may spend in all
/// (variables report their cost to it, `pkg/admission/plugin/cel/composition.go`).
const PER_CALL_LIMIT: f64 = 1_000_000.0;
const RUNTIME_CEL_COST_BUDGET: f64 = 10_000_000.0;

/// The regular expressions of `expression`: (applied to a section chunk `c`, decoded length).
fn regex_calls(expression: &str) -> Vec<(bool, usize)> {
    let mut out = Vec::new();
    for call in [".matches('", ".findAll('"] {
        for (at, _) in expression.match_indices(call) {
            let before = &expression[..at];
            let on_chunk = before.ends_with('c')
                && !before[..before.len() - 1]
                    .ends_with(|ch: char| ch.is_ascii_alphanumeric() || ch == '_' || ch == '.');
            let mut length = 0;
            let mut chars = expression[at + call.len()..].chars();
            while let Some(ch) = chars.next() {
                match ch {
                    '\'' => break,
                    '\\' if chars.next() == Some('u') => {
                        chars.nth(3);
                    }
                    _ => {}
                }
                length += 1;
            }
            out.push((on_chunk, length));
        }
    }
    out
}

/// An upper bound of the runtime cost of `expression` over a ConfigMap whose `keys` site keys
/// hold gated texts of `bytes` bytes each, with the cost functions of cel-go
/// (`interpreter/runtimecost.go`: `matches` costs ⌈(1 + len)·0.1⌉ · ⌈len(regex)·0.25⌉, string
/// `+` ⌈(len a + len b)·0.1⌉) and of Kubernetes' library (`pkg/cel/library/cost.go`: `findAll`
/// as `matches`; `split` and `join` ⌈len·0.2⌉; `lowerAscii`, `trim`, `substring`, `indexOf`
/// ⌈len·0.1⌉). The text has at most `bytes / 4 + 2` section chunks (`[A]` and a newline is
/// the shortest header the gate admits), and every per-chunk rounding is counted as a whole
/// unit. Each step of a comprehension over chunks (one per split at `\n[`) is counted at 40 (cel-go
/// charges 1 per identifier and select, 10 per list created), each over site keys at 40 per
/// key. An expression that reads no text (no regex, no split) works on metadata: its string
/// operations are bounded by the apiserver's 256 KiB cap on annotations.
fn cost_bound(expression: &str, bytes: usize, keys: usize) -> f64 {
    let count = |ops: &[&str]| -> f64 {
        ops.iter()
            .map(|op| expression.matches(op).count())
            .sum::<usize>() as f64
    };
    let string_ops = count(&[
        " + ",
        ".split(",
        ".join(",
        ".lowerAscii(",
        ".trim(",
        ".substring(",
        ".indexOf(",
        ".contains(",
        ".endsWith(",
    ]);
    let comprehensions = count(&[".filter(", ".exists(", ".map(", ".all("]);
    // Splits into section chunks (other splits cut one line into a few parts).
    let splits = count(&[".split('\\n[')"]);
    let keys = keys as f64;
    let calls = regex_calls(expression);
    if calls.is_empty() && splits == 0.0 && !expression.contains("object.data[") {
        return string_ops * 0.2 * 262_144.0 + comprehensions * keys * 40.0;
    }
    let n = bytes as f64;
    let chunks = n / 4.0 + 2.0;
    let mut cost = 0.0;
    for (on_chunk, length) in calls {
        let regex = (length as f64 * 0.25).ceil();
        let text = if on_chunk {
            // Σ ⌈(1 + len_i)·0.1⌉ ≤ 0.1·(n + chunks) + chunks.
            0.1 * (n + chunks) + chunks
        } else {
            // The whole text, or the joined `[LoadBalancer]` chunks (≤ n + chunks).
            ((1.0 + n + chunks) * 0.1).ceil()
        };
        cost += keys * text * regex;
    }
    cost += keys * string_ops * (0.2 * (n + chunks + 1.0) + chunks + 1.0);
    cost += keys * splits * (chunks + 1.0) * 40.0;
    cost += keys * comprehensions * 40.0;
    cost
}

/// Every expression of a policy with what it is, for messages.
fn named_expressions(policy: &Value) -> Vec<(String, String)> {
    let spec = &policy["spec"];
    let mut out = Vec::new();
    for v in spec["variables"].as_array().into_iter().flatten() {
        out.push((
            format!("variable {}", v["name"].as_str().unwrap()),
            v["expression"].as_str().unwrap().to_owned(),
        ));
    }
    for v in spec["validations"].as_array().into_iter().flatten() {
        out.push((
            "validation".to_owned(),
            v["expression"].as_str().unwrap().to_owned(),
        ));
    }
    for m in spec["mutations"].as_array().into_iter().flatten() {
        out.push((
            "mutation".to_owned(),
            m["jsonPatch"]["expression"].as_str().unwrap().to_owned(),
        ));
    }
    out
}

/// At the largest text the policies decide, on a ConfigMap with the most site keys the
/// embedded sites document gives one object (a named site and a label naming another key),
/// every expression of the ConfigMap policies stays under half the apiserver's per-call limit
/// and the policy under half its budget: a decision inside the documented size never runs out
/// (on a real apiserver a single-expression MAP ran out at 49 KB).
#[test]
fn configmap_policies_stay_under_half_the_apiserver_cost_limits_at_the_largest_decided_text() {
    use stackgate::policy::SiteKind;
    let set = PolicySet::embedded().unwrap();
    let generated = admission_policies::generate(&set);
    // Site keys one ConfigMap can have: its named sites, and the label's key; shared keys: its
    // named sites other platforms share (what the OpenStack-content check runs on).
    let named = |shared_only: bool| {
        let mut per_object: HashMap<(&str, &str), usize> = HashMap::new();
        for s in &set.sites.sites {
            if s.kind == SiteKind::ConfigMap && (s.other_platforms || !shared_only) {
                *per_object.entry((&s.namespace, &s.name)).or_default() += 1;
            }
        }
        per_object.values().copied().max().unwrap_or(0)
    };
    let keys = named(false) + usize::from(set.sites.label.is_some());
    let shared_keys = named(true);
    assert_eq!((keys, shared_keys), (2, 1));
    let bytes = admission_policies::MAX_DECIDED_TEXT_BYTES;
    let mut checked = 0;
    for policy in generated.validating.iter().chain(&generated.mutating) {
        let name = policy["metadata"]["name"].as_str().unwrap();
        if !name.contains("-configmaps") {
            continue;
        }
        let mut total = 0.0;
        for (what, expression) in named_expressions(policy) {
            let keys = if expression.starts_with("variables.sharedMissingKeys") {
                shared_keys
            } else {
                keys
            };
            let cost = cost_bound(&expression, bytes, keys);
            println!("{name} {what}: ≤ {cost:.0}");
            assert!(
                cost <= PER_CALL_LIMIT / 2.0,
                "{name} {what}: cost bound {cost:.0} at {bytes} bytes × {keys} keys"
            );
            total += cost;
        }
        assert!(
            total <= RUNTIME_CEL_COST_BUDGET / 2.0,
            "{name}: cost bound {total:.0} in all"
        );
        checked += 1;
    }
    assert_eq!(
        checked, 3,
        "two validating and one mutating ConfigMap policy"
    );
}

/// The bound itself: it grows with the text and counts the regular expressions of the gate.
#[test]
fn the_cost_bound_counts_regexes_strings_and_chunks() {
    assert_eq!(
        regex_calls("t.matches('ab') && c.matches('\\u0041x')"),
        vec![(false, 2), (true, 2)]
    );
    let gate = format!(
        "t.matches({})",
        admission_policies::cel_str(admission_policies::PLAIN_INI_GATE)
    );
    assert!(cost_bound(&gate, 10_000, 1) > 1_000.0);
    assert!(cost_bound(&gate, 20_000, 1) > cost_bound(&gate, 10_000, 1) * 1.9);
    assert!(cost_bound(&gate, 10_000, 2) > cost_bound(&gate, 10_000, 1) * 1.9);
}

/// A static upper bound of the runtime cost of a CEL expression under the apiserver's cost
/// functions (cel-go `interpreter/runtimecost.go`, Kubernetes `pkg/cel/library/cost.go`),
/// used for the chart-values policies, whose inputs are structured values rather than one text.
///
/// It walks the parsed expression (macros expanded into comprehensions) and bounds every
/// string's length and every list's or map's size: by a literal's own size, by a `size(X) <= N`
/// (or `== N`) test that guards it on the left of `&&` or in a `?:` condition, or else by
/// [`UNKNOWN_SIZE`]. Every node costs 1 (constants 0), list literals 10, map and object literals
/// 40 (cel-go's creation costs are 10, 30 and 40), plus: `matches` ⌈(1 + len)·0.1⌉ ·
/// ⌈len(regex)·0.25⌉; `lowerAscii`, `trim`, `startsWith`, `endsWith` ⌈len·0.1⌉; `==`/`!=`
/// ⌈min(sizes)·0.1⌉; string `+` ⌈(len a + len b)·0.1⌉ (1 when an operand is a list); `in` the
/// right side's size unless it is a map by the Kubernetes schema. A comprehension costs its
/// range, then (condition + step) per element of the range's bound. Both sides of `&&` and
/// `||` are counted; a `?:` counts its condition and its costlier branch. A function with no
/// cost model here fails the estimate.
mod worst_cost {
    use std::collections::HashMap;

    use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

    /// Any string or collection of an object whose size nothing bounds: the apiserver reads
    /// request bodies of at most 3 MiB.
    pub const UNKNOWN_SIZE: f64 = 3.0 * 1024.0 * 1024.0;

    /// Annotation maps: their values hold at most 256 KiB in all. Source: kubernetes/apimachinery
    /// `pkg/api/validation/objectmeta.go`, `TotalAnnotationSizeLimitB = 256 * (1 << 10)`,
    /// checked when an object is validated, which the apiserver does before validating
    /// admission policies run; a mutating policy may see more, but such an object is then
    /// refused by that validation, so no cost error there can let it in.
    const ANNOTATION_MAPS: &[&str] = &[
        "object.metadata.annotations",
        "oldObject.metadata.annotations",
    ];
    const ANNOTATIONS_BYTES: f64 = 256.0 * 1024.0;

    /// Maps by the Kubernetes schema (`in` on a map costs 1).
    const KNOWN_MAPS: &[&str] = &[
        "object.metadata.annotations",
        "object.metadata.labels",
        "oldObject.metadata.annotations",
    ];

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Kind {
        List,
        Other,
    }

    /// What evaluating a node may cost, and how large its result may be.
    #[derive(Debug, Clone, Copy)]
    pub struct Estimate {
        /// Upper bound of the cost.
        pub cost: f64,
        /// Upper bound of the result's size (string length, list or map size).
        pub size: f64,
        kind: Kind,
    }

    /// Size bounds in force: canonical text of an expression → its bound.
    #[derive(Debug, Clone, Default)]
    pub struct Scope(HashMap<String, f64>);

    impl Scope {
        /// A bound known from outside (a variable's estimated size).
        pub fn with(mut self, text: &str, bound: f64) -> Self {
            self.0.insert(text.to_owned(), bound);
            self
        }
    }

    /// The canonical text of `e`, for matching guards with their uses.
    fn text(e: &IdedExpr) -> String {
        match &e.expr {
            Expr::Ident(name) => name.clone(),
            Expr::Select(s) if s.test => format!("has({}.{})", text(&s.operand), s.field),
            Expr::Select(s) => format!("{}.{}", text(&s.operand), s.field),
            Expr::Literal(LiteralValue::String(v)) => format!("{:?}", v.inner()),
            Expr::Literal(l) => format!("{l:?}"),
            Expr::Call(c) => {
                let args: Vec<String> = c.args.iter().map(text).collect();
                match &c.target {
                    Some(t) => format!("{}.{}({})", text(t), c.func_name, args.join(",")),
                    None => format!("{}({})", c.func_name, args.join(",")),
                }
            }
            Expr::List(l) => format!(
                "[{}]",
                l.elements.iter().map(text).collect::<Vec<_>>().join(",")
            ),
            _ => format!("#{}", e.id),
        }
    }

    /// The bounds a true `guard` establishes: `size(X) <= N`, `size(X) < N`, `size(X) == N`,
    /// and conjunctions of them.
    fn guards(guard: &IdedExpr, scope: &Scope) -> Scope {
        let mut out = scope.clone();
        if let Expr::Call(c) = &guard.expr {
            match c.func_name.as_str() {
                "_&&_" => {
                    let left = guards(&c.args[0], scope);
                    return guards(&c.args[1], &left);
                }
                "_<=_" | "_<_" | "_==_" => {
                    let sized = match &c.args[0].expr {
                        Expr::Call(s) if s.func_name == "size" && s.args.len() == 1 => {
                            Some(text(&s.args[0]))
                        }
                        _ => None,
                    };
                    if let (Some(sized), Expr::Literal(LiteralValue::Int(n))) =
                        (sized, &c.args[1].expr)
                    {
                        let n = *n.inner() as f64 - if c.func_name == "_<_" { 1.0 } else { 0.0 };
                        let bound = out.0.get(&sized).map_or(n, |b| b.min(n));
                        out.0.insert(sized, bound);
                    }
                }
                _ => {}
            }
        }
        out
    }

    fn ceil(x: f64) -> f64 {
        x.ceil()
    }

    /// Upper bounds of cost and size of `e` in `scope`.
    pub fn estimate(e: &IdedExpr, scope: &Scope) -> Estimate {
        let known = |e: &IdedExpr| scope.0.get(&text(e)).copied();
        let unknown = |cost: f64, e: &IdedExpr| Estimate {
            cost,
            size: known(e).unwrap_or(UNKNOWN_SIZE),
            kind: Kind::Other,
        };
        match &e.expr {
            Expr::Ident(_) => unknown(1.0, e),
            Expr::Select(s) => {
                let operand = estimate(&s.operand, scope);
                if s.test {
                    Estimate {
                        cost: operand.cost + 1.0,
                        size: 1.0,
                        kind: Kind::Other,
                    }
                } else {
                    unknown(operand.cost + 1.0, e)
                }
            }
            Expr::Literal(LiteralValue::String(v)) => Estimate {
                cost: 0.0,
                size: v.inner().len() as f64,
                kind: Kind::Other,
            },
            Expr::Literal(_) => Estimate {
                cost: 0.0,
                size: 1.0,
                kind: Kind::Other,
            },
            Expr::List(l) => Estimate {
                cost: 10.0
                    + l.elements
                        .iter()
                        .map(|x| estimate(x, scope).cost)
                        .sum::<f64>(),
                size: l.elements.len() as f64,
                kind: Kind::List,
            },
            Expr::Map(m) => entries(&m.entries, scope),
            Expr::Struct(s) => entries(&s.entries, scope),
            Expr::Comprehension(c) => {
                let range = estimate(&c.iter_range, scope);
                // The loop variable: an element of a literal list is as long as its longest
                // element; anything else is bounded only by guards in the body.
                let mut inner = scope.clone();
                inner.0.remove(&c.iter_var);
                if let Expr::List(l) = &c.iter_range.expr {
                    let longest = l
                        .elements
                        .iter()
                        .map(|x| estimate(x, scope).size)
                        .fold(0.0, f64::max);
                    inner.0.insert(c.iter_var.clone(), longest);
                }
                inner.0.insert(c.accu_var.clone(), range.size);
                let init = estimate(&c.accu_init, &inner);
                let step =
                    estimate(&c.loop_cond, &inner).cost + estimate(&c.loop_step, &inner).cost;
                let result = estimate(&c.result, &inner);
                let builds_list = matches!(c.accu_init.expr, Expr::List(_));
                Estimate {
                    cost: range.cost + init.cost + range.size * step + result.cost,
                    size: if builds_list { range.size } else { 1.0 },
                    kind: if builds_list { Kind::List } else { Kind::Other },
                }
            }
            Expr::Call(c) => call(e, c, scope),
            Expr::Unspecified => panic!("unspecified expression"),
        }
    }

    fn entries(entries: &[cel::common::ast::IdedEntryExpr], scope: &Scope) -> Estimate {
        let mut cost = 40.0;
        for entry in entries {
            match &entry.expr {
                EntryExpr::StructField(f) => cost += estimate(&f.value, scope).cost,
                EntryExpr::MapEntry(m) => {
                    cost += estimate(&m.key, scope).cost + estimate(&m.value, scope).cost;
                }
            }
        }
        Estimate {
            cost,
            size: entries.len() as f64,
            kind: Kind::Other,
        }
    }

    fn call(e: &IdedExpr, c: &cel::common::ast::CallExpr, scope: &Scope) -> Estimate {
        let known = scope.0.get(&text(e)).copied();
        let f = c.func_name.as_str();
        match f {
            "_&&_" => {
                let left = estimate(&c.args[0], scope);
                let right = estimate(&c.args[1], &guards(&c.args[0], scope));
                return Estimate {
                    cost: left.cost + right.cost,
                    size: 1.0,
                    kind: Kind::Other,
                };
            }
            "_?_:_" => {
                let condition = estimate(&c.args[0], scope);
                let then = estimate(&c.args[1], &guards(&c.args[0], scope));
                let otherwise = estimate(&c.args[2], scope);
                let kind = if then.kind == Kind::List && otherwise.kind == Kind::List {
                    Kind::List
                } else {
                    Kind::Other
                };
                let size = then.size.max(otherwise.size);
                return Estimate {
                    cost: condition.cost + then.cost.max(otherwise.cost),
                    size: known.map_or(size, |k| k.min(size)),
                    kind,
                };
            }
            _ => {}
        }
        let target = c.target.as_ref().map(|t| estimate(t, scope));
        let args: Vec<Estimate> = c.args.iter().map(|a| estimate(a, scope)).collect();
        let children = target.map_or(0.0, |t| t.cost) + args.iter().map(|a| a.cost).sum::<f64>();
        let first = target
            .or_else(|| args.first().copied())
            .expect("an operand");
        let (own, size, kind) = match f {
            "_||_"
            | "!_"
            | "@not_strictly_false"
            | "_<=_"
            | "_<_"
            | "_>=_"
            | "_>_"
            | "size"
            | "_[_]"
            | "string"
            | "int"
            | "bool" => {
                let size = match f {
                    "_[_]" if ANNOTATION_MAPS.contains(&text(&c.args[0]).as_str()) => {
                        known.unwrap_or(ANNOTATIONS_BYTES)
                    }
                    "_[_]" | "string" => known.unwrap_or(if f == "string" {
                        first.size
                    } else {
                        UNKNOWN_SIZE
                    }),
                    _ => 1.0,
                };
                (1.0, size, Kind::Other)
            }
            "_==_" | "_!=_" => (
                ceil(first.size.min(args[1].size) * 0.1).max(1.0),
                1.0,
                Kind::Other,
            ),
            "matches" => {
                let regex = args[0].size;
                (
                    ceil((1.0 + first.size) * 0.1) * ceil(regex * 0.25),
                    1.0,
                    Kind::Other,
                )
            }
            "lowerAscii" | "upperAscii" | "trim" => {
                (ceil(first.size * 0.1).max(1.0), first.size, Kind::Other)
            }
            "startsWith" | "endsWith" => (ceil(first.size * 0.1).max(1.0), 1.0, Kind::Other),
            "_+_" => {
                if args[0].kind == Kind::List || args[1].kind == Kind::List {
                    (1.0, args[0].size + args[1].size, Kind::List)
                } else {
                    let size = args[0].size + args[1].size;
                    (ceil(size * 0.1).max(1.0), size, Kind::Other)
                }
            }
            "@in" => {
                let map = KNOWN_MAPS.contains(&text(&c.args[1]).as_str());
                let list = &args[1];
                (if map { 1.0 } else { list.size.max(1.0) }, 1.0, Kind::Other)
            }
            other => panic!("no cost model for {other}"),
        };
        let size = known.map_or(size, |k| k.min(size));
        Estimate {
            cost: children + own,
            size,
            kind,
        }
    }

    /// Parses `expression` (as the apiserver reads it: `JSONPatch{…}` is an object literal).
    pub fn parse(expression: &str) -> IdedExpr {
        cel::parser::Parser::new()
            .parse(expression)
            .unwrap_or_else(|e| panic!("{e:?}: {expression}"))
    }
}

/// Every expression of each chart-values policy (match conditions, variables in order — each
/// variable's size bound feeds the expressions after it —, validations, mutations) stays
/// under half the apiserver's per-call limit, and each policy under half its budget, whatever
/// the object: the policies' size gates ([`admission_policies::MAX_DECIDED_CHART_REF_BYTES`],
/// `MAX_DECIDED_VALUES_ENTRIES`, `…_KEY_BYTES`, `…_VALUE_BYTES`, at most
/// `MAX_CARRIERS_PER_OBJECT` Application sources) bound every string matched and every map
/// walked; anything else is bounded by the 3 MiB request body.
#[test]
fn chart_values_policies_stay_under_half_the_apiserver_cost_limits_for_any_object() {
    use worst_cost::{Scope, estimate, parse};
    let generated = admission_policies::generate(&PolicySet::embedded().unwrap());
    let mut checked = 0;
    for policy in generated.validating.iter().chain(&generated.mutating) {
        let name = policy["metadata"]["name"].as_str().unwrap();
        if !name.contains("-chart-values") {
            continue;
        }
        let spec = &policy["spec"];
        let mut expressions: Vec<(String, String)> = Vec::new();
        for c in spec["matchConditions"].as_array().into_iter().flatten() {
            expressions.push((
                format!("matchCondition {}", c["name"].as_str().unwrap()),
                c["expression"].as_str().unwrap().to_owned(),
            ));
        }
        expressions.extend(named_expressions(policy));
        // The requester's groups come from the apiserver's authenticator, not from the
        // object, so no tenant can pad them; 1,024 bounds the estimate only. A requester with
        // more groups could run the `exempt` variable out of cost at run time, which fails
        // open (admits): never stricter than the engine.
        let mut scope = Scope::default().with("request.userInfo.groups", 1024.0);
        let mut total = 0.0;
        for (what, expression) in expressions {
            let estimate = estimate(&parse(&expression), &scope);
            println!(
                "{name} {what}: ≤ {:.0} (size ≤ {:.0})",
                estimate.cost, estimate.size
            );
            assert!(
                estimate.cost <= PER_CALL_LIMIT / 2.0,
                "{name} {what}: cost bound {:.0}",
                estimate.cost
            );
            if let Some(variable) = what.strip_prefix("variable ") {
                scope = scope.with(&format!("variables.{variable}"), estimate.size);
            }
            total += estimate.cost;
        }
        assert!(
            total <= RUNTIME_CEL_COST_BUDGET / 2.0,
            "{name}: cost bound {total:.0} in all"
        );
        checked += 1;
    }
    assert_eq!(
        checked, 3,
        "two validating and one mutating chart-values policy"
    );
}

/// The estimator itself: an unguarded match over object text is bounded only by the request
/// size (over the limit), a guarded one by its guard, a walk over a map by the map's guard.
#[test]
fn the_worst_case_estimate_follows_guards() {
    use worst_cost::{Scope, UNKNOWN_SIZE, estimate, parse};
    let cost = |e: &str| estimate(&parse(e), &Scope::default()).cost;
    let regex = "'^(?:[^?#%]*/)?(?:openstack-cloud-controller-manager)$'";
    assert!(cost(&format!("object.spec.chart.matches({regex})")) > PER_CALL_LIMIT);
    let guarded = cost(&format!(
        "size(object.spec.chart) <= 512 && object.spec.chart.matches({regex})"
    ));
    assert!(guarded < 2_000.0 && guarded > 512.0 * 0.1, "{guarded}");
    // The guard must be on the left: on the right it guards nothing.
    assert!(
        cost(&format!(
            "object.spec.chart.matches({regex}) && size(object.spec.chart) <= 512"
        )) > PER_CALL_LIMIT
    );
    let walk = |guard: &str| {
        cost(&format!(
            "{guard}object.spec.values.all(k, size(k) <= 8 && k.matches('^[a-z]+$'))"
        ))
    };
    assert!(walk("") > UNKNOWN_SIZE, "unbounded map");
    let bounded = walk("size(object.spec.values) <= 10 && ");
    assert!(bounded < 200.0 && bounded > 10.0, "{bounded}");
}

/// Chart values at each of the chart-values policies' size limits and one over (chart
/// reference length, entries of `cloudConfig` and of a section, key length, value length), for
/// HelmRelease and Application, with the serial setting false, missing and true: decided
/// exactly as the engine decides them up to the limits, left to the webhook past them (no
/// denial, no rewrite).
#[test]
fn values_up_to_the_size_limits_are_decided_and_larger_ones_left_to_the_webhook() {
    use admission_policies::{
        MAX_DECIDED_CHART_REF_BYTES, MAX_DECIDED_VALUES_ENTRIES, MAX_DECIDED_VALUES_KEY_BYTES,
        MAX_DECIDED_VALUES_VALUE_BYTES,
    };
    let harness = Harness::new();
    let (mut within, mut over) = (Counts::default(), Counts::default());
    let chart = "openstack-cloud-controller-manager";
    for kind in ["HelmRelease", "Application"] {
        let base = if kind == "HelmRelease" {
            "/spec/values"
        } else {
            "/spec/source/helm/valuesObject"
        };
        let chart_pointer = if kind == "HelmRelease" {
            "/spec/chart/spec/chart"
        } else {
            "/spec/source/chart"
        };
        for serial in [Some(json!("false")), None, Some(json!(true))] {
            for extra in [0, 1] {
                let mut shapes: Vec<(String, Value)> = Vec::new();
                // A chart reference of exactly the limit's length.
                let mut object = decided_gitops(kind, chart, serial.clone());
                let length = MAX_DECIDED_CHART_REF_BYTES + extra;
                let reference = format!("{}/{chart}", "c".repeat(length - chart.len() - 1));
                set_pointer(&mut object, chart_pointer, json!(reference));
                shapes.push((format!("chart reference of {length} bytes"), object));
                // A loadBalancer section, and cloudConfig, with the most entries.
                let entries = MAX_DECIDED_VALUES_ENTRIES + extra;
                let mut object = decided_gitops(kind, chart, serial.clone());
                for i in 0..entries
                    - object_entries(&object, &format!("{base}/cloudConfig/loadBalancer"))
                {
                    set_pointer(
                        &mut object,
                        &format!("{base}/cloudConfig/loadBalancer/option-{i}"),
                        json!("x"),
                    );
                }
                shapes.push((format!("loadBalancer of {entries} entries"), object));
                let mut object = decided_gitops(kind, chart, serial.clone());
                for i in 0..entries - object_entries(&object, &format!("{base}/cloudConfig")) {
                    set_pointer(
                        &mut object,
                        &format!("{base}/cloudConfig/extra-{i}"),
                        json!({}),
                    );
                }
                shapes.push((format!("cloudConfig of {entries} entries"), object));
                // The longest key and value.
                let length = MAX_DECIDED_VALUES_KEY_BYTES + extra;
                let mut object = decided_gitops(kind, chart, serial.clone());
                set_pointer(
                    &mut object,
                    &format!("{base}/cloudConfig/global/k{}", "e".repeat(length - 1)),
                    json!("v"),
                );
                shapes.push((format!("key of {length} bytes"), object));
                let length = MAX_DECIDED_VALUES_VALUE_BYTES + extra;
                let mut object = decided_gitops(kind, chart, serial.clone());
                set_pointer(
                    &mut object,
                    &format!("{base}/cloudConfig/global/region"),
                    json!("r".repeat(length)),
                );
                shapes.push((format!("value of {length} bytes"), object));
                for (shape, object) in shapes {
                    let label = format!("{kind} {shape}, serial {serial:?}");
                    let counts = if extra == 0 { &mut within } else { &mut over };
                    harness.compare(&label, &object, extra == 0, "chart-values", counts);
                }
            }
        }
    }
    assert_sound("values at the size limits", &within);
    assert_eq!(within.agree_on_gated, 30, "{within:?}");
    assert!(
        within.policy_denied >= 10 && within.policy_mutated >= 5,
        "{within:?}"
    );
    assert_sound("values over the size limits", &over);
    assert_eq!(
        (over.policy_denied, over.policy_mutated),
        (0, 0),
        "past the limits the policies decide nothing: {over:?}"
    );
    assert!(
        over.engine_denied >= 10,
        "the engine still decides: {over:?}"
    );
}

/// How many entries the map at `pointer` has.
fn object_entries(object: &Value, pointer: &str) -> usize {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .map_or(0, serde_json::Map::len)
}

/// Texts at the size limit and one byte over, padded with comments or with the most section
/// headers a text of that size can hold (the costliest shape): decided exactly up to the
/// limit, left to the webhook past it.
#[test]
fn texts_up_to_the_size_limit_are_decided_and_larger_ones_left_to_the_webhook() {
    let harness = Harness::new();
    let mut counts = Counts::default();
    let limit = admission_policies::MAX_DECIDED_TEXT_BYTES;
    let bodies = [
        "[Global]\nauth-url = https://keystone:5000/v3\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n",
        "[Global]\nauth-url = https://keystone:5000/v3\n[LoadBalancer]\nuse-octavia = false\n",
        "[Global]\nauth-url = https://keystone:5000/v3\n[LoadBalancer]\nlb-provider = ovn\n",
        "[Global]\nregion = RegionOne\n",
    ];
    for (i, body) in bodies.iter().enumerate() {
        for size in [limit - 1, limit, limit + 1] {
            for padding in ["; padding\n", "[A]\n"] {
                let mut text = String::new();
                while text.len() + body.len() + padding.len() <= size {
                    text.push_str(padding);
                }
                text.push_str(&";".repeat(size - text.len() - body.len()));
                text.push_str(body);
                // `;…` then the body's `[Global]` on the same line would be a comment: keep
                // the body on its own line.
                let text = text.replacen(&format!(";{body}"), &format!("\n{body}"), 1);
                assert_eq!(text.len(), size, "{i} {size} {padding:?}");
                let gated = gate_passes(&text);
                assert_eq!(gated, size <= limit, "{i} {size} {padding:?}");
                let label = format!("body {i} size {size} padding {padding:?}");
                harness.compare(
                    &label,
                    &labelled_configmap(&text),
                    gated,
                    "configmaps",
                    &mut counts,
                );
                harness.compare(
                    &format!("openshift {label}"),
                    &openshift_configmap(&text),
                    gated,
                    "configmaps",
                    &mut counts,
                );
            }
        }
    }
    assert_sound("texts at the size limit", &counts);
    assert!(
        counts.policy_denied >= 8 && counts.policy_mutated >= 4,
        "{counts:?}"
    );
}

/// Issue 37: the generated policies' `exempt` variable counts the annotation as the webhook
/// does: set by a listed user or group (the shipped enforce policies: `system:masters`), or
/// already stored with the same value in `oldObject`; a tenant's own annotation exempts
/// nothing, and neither does a tenant changing an approved one.
#[test]
fn the_exempt_variable_counts_only_allowed_requesters_or_the_stored_annotation() {
    let h = Harness::new();
    let key = format!("stackgate.dev/exempt.{SERIAL_POLICY}");
    let mut checked = 0;
    for policy in h.generated.validating.iter().chain(&h.generated.mutating) {
        let Some(exempt) = policy["spec"]["variables"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "exempt")
            .and_then(|v| v["expression"].as_str())
        else {
            continue;
        };
        if !exempt.contains(&key) {
            continue;
        }
        let program = program(&h.env, exempt);
        let object = |reason: &str| json!({"metadata": {"annotations": {key.clone(): reason}}});
        let run = |object: &Value, old: Option<&Value>, user: &str, groups: &[&str]| {
            let mut ctx = Context::with_env(Arc::clone(&h.env));
            ctx.add_variable("object", object.clone()).unwrap();
            ctx.add_variable("oldObject", old.cloned().unwrap_or(Value::Null))
                .unwrap();
            ctx.add_variable(
                "request",
                json!({"userInfo": {"username": user, "groups": groups}}),
            )
            .unwrap();
            program.execute(&ctx).unwrap().json().unwrap()
        };
        let name = policy["metadata"]["name"].as_str().unwrap();
        let approved = object("tested on amphora");
        assert_eq!(
            run(&approved, None, "tenant", &TENANT_GROUPS),
            json!(false),
            "{name}: a tenant's own annotation"
        );
        assert_eq!(
            run(
                &approved,
                None,
                "admin",
                &["system:masters", "system:authenticated"]
            ),
            json!(true),
            "{name}: an allowed group"
        );
        assert_eq!(
            run(&object("  "), None, "admin", &["system:masters"]),
            json!(false),
            "{name}: a blank reason"
        );
        assert_eq!(
            run(&approved, Some(&approved), "tenant", &TENANT_GROUPS),
            json!(true),
            "{name}: the stored annotation, unchanged"
        );
        assert_eq!(
            run(&approved, Some(&object("other")), "tenant", &TENANT_GROUPS),
            json!(false),
            "{name}: a tenant changing the stored annotation"
        );
        assert_eq!(
            run(
                &json!({"metadata": {}}),
                Some(&approved),
                "admin",
                &["system:masters"]
            ),
            json!(false),
            "{name}: no annotation now"
        );
        checked += 1;
    }
    assert!(checked >= 2, "the serial policy's VAP and MAP: {checked}");
}

/// Issue 37: on UPDATE the GitOps policies run when `spec` changed or their own exemption
/// annotation was added, changed or removed (an exemption's end is judged), and not for other
/// metadata-only writes, as the webhook's `spec-or-exemption-changed` condition.
#[test]
fn gitops_policies_run_when_spec_or_their_exemption_changes() {
    let h = Harness::new();
    let key = format!("stackgate.dev/exempt.{SERIAL_POLICY}");
    let policy = h.validating(&format!("stackgate-{SERIAL_POLICY}-chart-values"));
    let condition = policy["spec"]["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "spec-or-exemption-changed")
        .expect("the condition")["expression"]
        .as_str()
        .unwrap()
        .to_owned();
    let program = program(&h.env, &condition);
    let object = |annotations: Value, values: &str| {
        json!({"metadata": {"annotations": annotations, "labels": {}},
               "spec": {"values": {"cloudConfig": {"loadBalancer": {"x": values}}}}})
    };
    let runs = |new: &Value, old: &Value, operation: &str| {
        let mut ctx = Context::with_env(Arc::clone(&h.env));
        ctx.add_variable("object", new.clone()).unwrap();
        ctx.add_variable("oldObject", old.clone()).unwrap();
        ctx.add_variable("request", json!({"operation": operation}))
            .unwrap();
        program.execute(&ctx).unwrap().json().unwrap()
    };
    let approved = object(json!({key.clone(): "tested"}), "a");
    let plain = object(json!({}), "a");
    let mut relabelled = approved.clone();
    relabelled["metadata"]["labels"] = json!({"team": "a"});
    let other_key = object(
        json!({"stackgate.dev/exempt.other": "x", key.clone(): "tested"}),
        "a",
    );
    for (what, new, old, operation, expected) in [
        ("create", &approved, &Value::Null, "CREATE", true),
        ("a label only", &relabelled, &approved, "UPDATE", false),
        ("annotation removed", &plain, &approved, "UPDATE", true),
        ("annotation added", &approved, &plain, "UPDATE", true),
        (
            "reason changed",
            &object(json!({key.clone(): "other"}), "a"),
            &approved,
            "UPDATE",
            true,
        ),
        (
            "another policy's annotation",
            &other_key,
            &approved,
            "UPDATE",
            false,
        ),
        (
            "spec changed",
            &object(json!({key.clone(): "tested"}), "b"),
            &approved,
            "UPDATE",
            true,
        ),
    ] {
        assert_eq!(runs(new, old, operation), json!(expected), "{what}");
    }
}
