//! Hostile cloud configs against the rule families (issue #12, items 2, 4 and 7): every rule
//! and the gcfg reader stay linear in the input, a config reports a bounded number of
//! findings however many lines are bad, and no name that could be a value (a wrapped
//! `password =` line, a section named after a secret) is echoed.
//!
//! The time bound is deliberately generous (these run in the debug build on a shared
//! machine; a quadratic rule takes hours on these inputs, the linear ones a second or two):
//! the tight numbers live in `benches/cloudconf.rs` (`hostile/*`).

use std::time::{Duration, Instant};

use base64::Engine as _;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::{Value, json};
use stackgate::admission::{Webhook, handle};
use stackgate::engine::{Engine, Verdict};
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::rules::MAX_FINDINGS_PER_KIND;

/// Lines per hostile config.
const LINES: usize = 200_000;

/// Far above what a linear evaluation of 200 000 lines needs in a debug build (5 to 17 s each
/// on a loaded 2-core machine, decoding the 4 MB review included; 0.3 to 1 s in release), far
/// below what the quadratic rules needed (20 000 repeated `password=` lines took 2 s in
/// release, 200 000 never finished; 150 000 unknown keys took 16 s in release).
const GENEROUS: Duration = Duration::from_secs(60);

/// A labelled ConfigMap holding `text` (the label makes any ConfigMap a site).
fn configmap_review(text: &str) -> Value {
    review(
        "ConfigMap",
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "hostile", "namespace": "tenant",
                "labels": {"stackgate.dev/cloud-config": "cloud.conf"}},
            "data": {"cloud.conf": text}}),
    )
}

/// A labelled Secret holding `text`.
fn secret_review(text: &str) -> Value {
    review(
        "Secret",
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "hostile", "namespace": "tenant",
                "labels": {"stackgate.dev/cloud-config": "cloud.conf"}},
            "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(text)}}),
    )
}

fn review(kind: &str, resource: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": resource},
            "name": "hostile", "namespace": "tenant", "operation": "CREATE",
            "userInfo": {"username": "tenant"}, "dryRun": false,
            "object": object
        }
    })
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

fn evaluate(engine: &Engine, review: &Value) -> Verdict {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(review.clone()).expect("a review");
    let request: AdmissionRequest<DynamicObject> = review.try_into().expect("a request");
    engine.evaluate(&stackgate::admission::subject_of(&request))
}

/// `n` lines made by `line(i)` under `header`.
fn lines(header: &str, n: usize, line: impl Fn(usize) -> String) -> String {
    let mut text = String::with_capacity(n * 24);
    text.push_str(header);
    for i in 0..n {
        text.push_str(&line(i));
        text.push('\n');
    }
    text
}

/// Evaluates `text` in a ConfigMap and in a Secret through `/validate` (in process) and checks
/// what a user sees: an answer in time, a bounded number of findings, a small body.
fn assert_bounded(name: &str, text: &str) {
    let engine = engine();
    let metrics = Metrics::new();
    for (carrier, review) in [
        ("ConfigMap", configmap_review(text)),
        ("Secret", secret_review(text)),
    ] {
        let body = serde_json::to_vec(&review).expect("encode");
        let started = Instant::now();
        let reply = handle(&engine, Webhook::Validate, &body, &metrics);
        let took = started.elapsed();
        eprintln!(
            "{name} in a {carrier}: {took:?}, {} byte answer",
            reply.body.len()
        );
        assert!(took < GENEROUS, "{name} in a {carrier}: {took:?}");
        let out: Value = serde_json::from_slice(&reply.body).expect("JSON answer");
        let response = &out["response"];
        // Each family folds its findings past MAX_FINDINGS_PER_KIND into one "and N more";
        // a family has at most four kinds, there are four cloud-config families.
        let bound = 4 * 4 * (MAX_FINDINGS_PER_KIND + 1);
        let warnings = response["warnings"].as_array().map_or(0, Vec::len);
        let denials = response["status"]["message"]
            .as_str()
            .map_or(0, |m| m.split("\n\n").count());
        assert!(
            warnings + denials <= bound,
            "{name} in a {carrier}: {warnings} warnings, {denials} denials"
        );
        // The answer stays small although the body is megabytes.
        assert!(
            reply.body.len() < 256 * 1024,
            "{name} in a {carrier}: {} byte answer to a {} byte body",
            reply.body.len(),
            body.len()
        );
    }
}

#[test]
fn repeated_password_lines() {
    // The credential rule counted the occurrences of a key once per entry: quadratic.
    assert_bounded(
        "repeated password",
        &lines("[Global]\n", LINES, |i| format!("password=s3cr3t-{i}")),
    );
}

#[test]
fn unknown_keys() {
    assert_bounded(
        "unknown keys",
        &lines("[Global]\n", LINES, |i| format!("unknown-key-{i}=v")),
    );
}

#[test]
fn did_you_mean_candidates() {
    // The same typo everywhere, then distinct names close to several keys: a suggestion
    // search on each.
    assert_bounded(
        "one typo repeated",
        &lines("[Global]\n", LINES, |_| "regoin=RegionOne".to_owned()),
    );
    assert_bounded(
        "many candidates",
        &lines("[Global]\n", LINES, |i| {
            format!("domain-{}={i}", ["ia", "nme", "idd", "nam"][i % 4])
        }),
    );
}

#[test]
fn many_sections() {
    assert_bounded(
        "unknown sections",
        &lines("", LINES / 2, |i| format!("[Section{i}]\nk=v")),
    );
    assert_bounded(
        "misspelt sections",
        &lines("", LINES, |_| "[LoadBalancr]".to_owned()),
    );
    assert_bounded(
        "repeated sections",
        &lines("", LINES / 2, |_| {
            "[LoadBalancer]\nlb-method=ROUND_ROBIN".to_owned()
        }),
    );
}

#[test]
fn long_lines() {
    // 2 000 keys of 1 000 characters, then one key of 2 MB: the edit distance was quadratic
    // in the length of a name.
    assert_bounded(
        "long lines",
        &lines("[Global]\n", 2_000, |i| {
            format!("{}{i}=v", "x".repeat(1_000))
        }),
    );
    assert_bounded(
        "one very long key",
        &format!("[Global]\n{}=v\n", "k".repeat(2_000_000)),
    );
}

#[test]
fn repeated_bad_values() {
    assert_bounded(
        "values that stop the CCM",
        &lines("[LoadBalancer]\n", LINES, |_| {
            "monitor-delay = 5".to_owned()
        }),
    );
    assert_bounded(
        "values cut at a comment",
        &lines("[Global]\n", LINES, |_| "password=ab#cd".to_owned()),
    );
    // `password =` with the value on the next line, again and again.
    assert_bounded(
        "wrapped credentials",
        &lines("[Global]\n", LINES / 2, |i| {
            format!("password =\nS3cr3t-{i}")
        }),
    );
}

#[test]
fn folded_findings_say_how_many_more_and_where() {
    let engine = engine();
    let text = lines("[Global]\n", 1_000, |i| format!("unknown-key-{i}=v"));
    let verdict = evaluate(&engine, &configmap_review(&text));
    let ignored: Vec<String> = verdict
        .warnings
        .iter()
        .filter(|w| w.policy == "cloud-config-integrity")
        .map(|w| w.denial_text())
        .collect();
    assert_eq!(ignored.len(), MAX_FINDINGS_PER_KIND + 1, "{ignored:#?}");
    let last = ignored.last().map(String::as_str).unwrap_or_default();
    let more = 1_000 - MAX_FINDINGS_PER_KIND;
    assert!(
        last.contains(&format!(
            "and {more} more sections or keys the CCM silently ignores"
        )),
        "{last}"
    );
    // The first folded line is named, so a user can go there.
    let first_folded = 2 + MAX_FINDINGS_PER_KIND;
    assert!(last.contains(&format!("line {first_folded}:")), "{last}");
    assert!(last.contains(&format!("(lines {first_folded}, ")), "{last}");

    // Repeated credentials in a ConfigMap: the first ones one by one, then one summary.
    let text = lines("[Global]\n", 1_000, |i| format!("password=s3cr3t-{i}"));
    let verdict = evaluate(&engine, &configmap_review(&text));
    let denials: Vec<String> = verdict
        .denials
        .iter()
        .filter(|d| d.policy == "credential-placement")
        .map(|d| d.denial_text())
        .collect();
    assert_eq!(denials.len(), MAX_FINDINGS_PER_KIND + 1, "{denials:#?}");
    assert!(
        denials
            .iter()
            .take(MAX_FINDINGS_PER_KIND)
            .all(|d| d.contains("does not remove this one")),
        "{denials:#?}"
    );
    assert!(
        denials
            .last()
            .is_some_and(|d| d.contains("and 990 more credentials in this ConfigMap")),
        "{denials:#?}"
    );
    assert!(denials.iter().all(|d| !d.contains("s3cr3t")));
}

/// A credential that must never come back.
const CANARY: &str = "S3cr3t-P4ssw0rd-Canary";

#[test]
fn names_that_may_be_values_are_masked_in_secrets_and_configmaps() {
    let engine = engine();
    let metrics = Metrics::new();
    let ok_lb = "[LoadBalancer]\nprovider-requires-serial-api-calls = true\n";
    for text in [
        // The value on the line after `password =`: gcfg reads it as a variable name.
        format!("[Global]\npassword =\n{CANARY}\n{ok_lb}"),
        format!("[Global]\napplication-credential-secret =\n  {CANARY}\n{ok_lb}"),
        // A section named after the secret, with and without keys under it.
        format!("{ok_lb}[{CANARY}]\nregion = r\n"),
        format!("{ok_lb}[{CANARY}]\n"),
        // Cut at a comment under such a section, and as a key with a value.
        format!("{ok_lb}[{CANARY}]\nk = a#b\n"),
        format!("[Global]\n{CANARY} = a#b\n{ok_lb}"),
    ] {
        for review in [configmap_review(&text), secret_review(&text)] {
            let verdict = evaluate(&engine, &review);
            let all: Vec<String> = verdict
                .denials
                .iter()
                .chain(&verdict.warnings)
                .chain(&verdict.audits)
                .map(|f| f.denial_text())
                .collect();
            assert!(!all.is_empty(), "{text:?}: no finding at all");
            for m in &all {
                assert!(!m.contains(CANARY), "{text:?}: {m}");
            }
            assert!(
                all.iter().any(|m| m.contains("name not shown")),
                "{text:?}: {all:#?}"
            );
            for webhook in [Webhook::Validate, Webhook::Mutate] {
                let body = serde_json::to_vec(&review).expect("encode");
                let reply = handle(&engine, webhook, &body, &metrics);
                let mut out: Value = serde_json::from_slice(&reply.body).expect("JSON");
                // The patch carries the object's own data back; nothing else may.
                if let Some(r) = out.get_mut("response").and_then(Value::as_object_mut) {
                    r.remove("patch");
                }
                assert!(!out.to_string().contains(CANARY), "{text:?}: {out}");
            }
        }
    }
    assert!(!metrics.encode().contains(CANARY));
}

#[test]
fn known_names_and_plausible_typos_are_still_shown() {
    let engine = engine();
    let ok_lb = "[LoadBalancer]\nprovider-requires-serial-api-calls = true\n";
    for (text, shown) in [
        (format!("[Global]\nregoin = r\n{ok_lb}"), "[Global] regoin"),
        (format!("{ok_lb}[LoadBalancr]\n"), "[LoadBalancr]"),
        (format!("{ok_lb}use-octavia = true\n"), "use-octavia"),
        (
            format!("[Global]\nlb-method = ROUND_ROBIN\n{ok_lb}"),
            "[Global] lb-method",
        ),
    ] {
        let verdict = evaluate(&engine, &secret_review(&text));
        assert!(
            verdict
                .warnings
                .iter()
                .any(|w| w.denial_text().contains(shown)),
            "{text:?}: {:#?}",
            verdict.warnings
        );
    }
}

#[test]
fn a_credential_written_below_its_key_in_a_configmap_is_denied() {
    let engine = engine();
    let text = format!(
        "[Global]\npassword =\n{CANARY}\n[LoadBalancer]\nprovider-requires-serial-api-calls = true\n"
    );
    let verdict = evaluate(&engine, &configmap_review(&text));
    let denial = verdict
        .denials
        .iter()
        .find(|d| d.policy == "credential-placement")
        .unwrap_or_else(|| panic!("no denial: {verdict:#?}"));
    assert!(
        denial.denial_text().contains("line 3"),
        "{}",
        denial.denial_text()
    );
    assert!(
        denial.denial_text().contains("credential of `password`"),
        "{}",
        denial.denial_text()
    );
    assert!(!denial.denial_text().contains(CANARY));
    // In a Secret the credential is where it belongs: only the ignored-line warning.
    let verdict = evaluate(&engine, &secret_review(&text));
    assert!(verdict.denials.is_empty(), "{:#?}", verdict.denials);
    assert!(
        verdict.warnings.iter().any(|w| w
            .denial_text()
            .contains("the line before sets `password` to an empty value")),
        "{:#?}",
        verdict.warnings
    );
}

/// The answer cap (`admission::MAX_RESPONSE_BYTES`, issue 22 item 4): a ClusterResourceSet
/// payload Secret whose ~900 KiB base64 value embeds a cloud config the mutating policy edits.
/// The patch must re-encode the whole value (JSON Patch replaces the string), and the patch
/// is base64 again in the answer: about 1.6 MiB, over the cap. The answer is replaced by an
/// admission without the patch and a warning that says why, and the cap is counted; a value
/// half that size keeps its patch.
#[test]
fn an_answer_over_the_cap_is_replaced_by_a_short_one() {
    use stackgate::admission::MAX_RESPONSE_BYTES;
    let engine = engine();
    let crs = |filler: usize| {
        let payload = format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: \
             kube-system\nstringData:\n  cloud.conf: |\n    [Global]\n    region = RegionOne\n    \
             [LoadBalancer]\n    subnet-id = x\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  \
             name: filler\n  namespace: kube-system\ndata:\n  filler: {}\n",
            "f".repeat(filler)
        );
        review(
            "Secret",
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                "type": "addons.cluster.x-k8s.io/resource-set",
                "metadata": {"name": "crs", "namespace": "default"},
                "data": {"p.yaml": base64::engine::general_purpose::STANDARD.encode(payload)}}),
        )
    };
    let mutate = |review: &Value| {
        let metrics = Metrics::new();
        let body = serde_json::to_vec(review).expect("encode");
        let reply = handle(&engine, Webhook::Mutate, &body, &metrics);
        let out: Value = serde_json::from_slice(&reply.body).expect("JSON answer");
        (reply.body.len(), out["response"].clone(), metrics.encode())
    };
    // Half the size: the patch fits, and is sent.
    let (size, response, metrics) = mutate(&crs(300 * 1024));
    assert!(response.get("patch").is_some(), "{size} bytes: no patch");
    assert!(size <= MAX_RESPONSE_BYTES, "{size}");
    assert!(!metrics.contains("response_bytes"), "{metrics}");
    // Near the payload cap: the answer would be over 1 MiB.
    let (size, response, metrics) = mutate(&crs(900 * 1024));
    assert!(size <= MAX_RESPONSE_BYTES, "{size}");
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("patch").is_none(), "{response}");
    let warnings = response["warnings"].to_string();
    assert!(
        warnings.contains("without mutation") && warnings.contains("response cap"),
        "{warnings}"
    );
    assert!(
        metrics.contains("stackgate_input_limits_total{limit=\"response_bytes\"} 1"),
        "{metrics}"
    );
}
