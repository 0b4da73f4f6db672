//! The committed fuzz corpora (`fuzz/corpus/<target>/`) run as ordinary tests, through the
//! same property checks the cargo-fuzz targets use (`fuzz/checks.rs`), plus one regression
//! test per fuzzing finding. How to fuzz: `docs/fuzzing.md`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

#[path = "../fuzz/checks.rs"]
mod checks;

/// Runs every file of `fuzz/corpus/<target>/` through `check`; reports all failing files.
fn run_corpus(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    let mut failed = Vec::new();
    for file in &files {
        let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(
                file.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} {target} corpus files fail (reproduce with \
         `cargo fuzz run {target} fuzz/corpus/{target}/<file>`): {failed:?}",
        failed.len(),
        files.len()
    );
}

#[test]
fn cloudconf_roundtrip_corpus() {
    run_corpus("cloudconf_roundtrip", checks::cloudconf_roundtrip);
}

#[test]
fn cloudconf_edit_corpus() {
    run_corpus("cloudconf_edit", checks::cloudconf_edit);
}

#[test]
fn review_corpus() {
    run_corpus("review", checks::review);
}

#[test]
fn review_cloudconf_corpus() {
    run_corpus("review_cloudconf", checks::review_cloudconf);
}

#[test]
fn yaml_values_corpus() {
    run_corpus("yaml_values", checks::yaml_values);
}

#[test]
fn review_values_corpus() {
    run_corpus("review_values", checks::review_values);
}

// Regression tests for what fuzzing found (docs/fuzzing.md, "Findings").

/// A finding's input, kept in `fuzz/regressions/<target>/`.
fn regression(target: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A captured review with `needle` replaced by `with` (raw bytes, so invalid UTF-8 can be
/// planted).
fn captured_with(rel: &str, needle: &[u8], with: &[u8]) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/captured")
        .join(rel);
    let body = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let at = body
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("needle in the fixture");
    [&body[..at], with, &body[at + needle.len()..]].concat()
}

/// Finding `review` #1: a review whose uid is readable but whose body the typed decode
/// rejects (invalid UTF-8 inside a managedFields key, found by the fuzzer; or a field of
/// the wrong type) was answered `allowed: false` by `/mutate`, which must fail open
/// (ARCHITECTURE.md invariant 8). `/validate` still refuses it. The corpus inputs that
/// showed it are back in `fuzz/corpus/review/`, so the corpus test covers them too.
#[test]
fn mutate_fails_open_on_an_undecodable_review_with_a_readable_uid() {
    use stackgate::admission::{Webhook, handle};
    use stackgate::engine::Engine;
    use stackgate::metrics::Metrics;
    use stackgate::policy::PolicySet;

    let engine = Engine::new(PolicySet::embedded().expect("embedded policies load"));
    let metrics = Metrics::new();
    let inputs = [
        regression("review", "mutate-denied-undecodable-review-with-uid"),
        captured_with(
            "configmap/mutate-create-cloud-provider-config.json",
            b"\"f:data\"",
            b"\"f:d\xffta\"",
        ),
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","kind":5}}"#.to_vec(),
    ];
    for body in &inputs {
        checks::review(body);
        let mutate: serde_json::Value =
            serde_json::from_slice(&handle(&engine, Webhook::Mutate, body, &metrics).body)
                .expect("JSON");
        assert_eq!(mutate["response"]["allowed"], true, "{mutate}");
        assert!(mutate["response"].get("patch").is_none());
        let warning = mutate["response"]["warnings"][0].as_str().unwrap_or("");
        assert!(warning.contains("without mutation"), "{mutate}");
        let validate: serde_json::Value =
            serde_json::from_slice(&handle(&engine, Webhook::Validate, body, &metrics).body)
                .expect("JSON");
        assert_eq!(validate["response"]["allowed"], false, "{validate}");
    }
}

/// Finding `review` #2 (in the check, not the server): invalid UTF-8 inside an unknown
/// field is skipped by the typed decode, so the review is served (and patched) although the
/// body is not valid JSON for `serde_json::Value`; the idempotence check must not assume it
/// is.
#[test]
fn invalid_utf8_in_an_unknown_field_is_served() {
    checks::review(&regression("review", "invalid-utf8-in-unknown-field"));
    let body = captured_with(
        "configmap/mutate-create-cloud-provider-config.json",
        b"\"dryRun\"",
        b"\"x-unknown\": \"ad\xdfin\", \"dryRun\"",
    );
    assert!(serde_json::from_slice::<serde_json::Value>(&body).is_err());
    checks::review(&body);
    let engine = stackgate::engine::Engine::new(
        stackgate::policy::PolicySet::embedded().expect("embedded policies load"),
    );
    let reply = stackgate::admission::handle(
        &engine,
        stackgate::admission::Webhook::Mutate,
        &body,
        &stackgate::metrics::Metrics::new(),
    );
    let answer: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert!(answer["response"]["patch"].is_string(), "{answer}");
}
