//! Generated documentation and the embedded policy set stay in step with the sources.

use stackgate::engine::Engine;
use stackgate::policy::PolicySet;

#[test]
fn docs_rules_md_is_the_output_of_stackgate_rules() {
    let expected = stackgate::engine::docs::markdown(&Engine::new(PolicySet::embedded().unwrap()));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/rules.md");
    let actual = std::fs::read_to_string(path).unwrap();
    assert!(
        actual == expected,
        "docs/rules.md is stale: run `cargo run -q -- rules > docs/rules.md`"
    );
}

#[test]
fn every_policy_file_is_embedded_and_the_directory_loads_the_same_set() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/policies");
    let from_dir = PolicySet::load_dir(std::path::Path::new(dir)).unwrap();
    let embedded = PolicySet::embedded().unwrap();
    let mut a: Vec<_> = from_dir.policies.iter().map(|p| p.name.clone()).collect();
    let mut b: Vec<_> = embedded.policies.iter().map(|p| p.name.clone()).collect();
    a.sort();
    b.sort();
    assert_eq!(
        a, b,
        "a file in policies/ is missing from the EMBEDDED list in src/policy/load.rs"
    );
    assert_eq!(from_dir.sites, embedded.sites);
}

/// Every label value of `stackgate_input_limits_total` in the sources: the `=> "label"` arms of
/// the `Limit` enums' `as_str` (engine, YAML reader, audit) and the adapter's
/// `input_limit("label")` calls.
fn input_limit_labels() -> std::collections::BTreeSet<String> {
    fn walk(dir: &std::path::Path, labels: &mut std::collections::BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, labels);
            } else if path.extension().is_some_and(|e| e == "rs") {
                for line in std::fs::read_to_string(&path).unwrap().lines() {
                    let after = if line.contains("Limit::") && line.contains("=> \"") {
                        line.split_once("=> \"").map(|(_, a)| a)
                    } else {
                        line.split_once("input_limit(\"").map(|(_, a)| a)
                    };
                    if let Some((label, _)) = after.and_then(|a| a.split_once('"')) {
                        labels.insert(label.to_string());
                    }
                }
            }
        }
    }
    let mut labels = std::collections::BTreeSet::new();
    walk(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
        &mut labels,
    );
    labels
}

#[test]
fn docs_limits_md_names_every_input_limit_label() {
    let labels = input_limit_labels();
    for known in [
        "decoded_bytes",
        "cloud_config_bytes",
        "yaml_depth",
        "audit_page_bytes",
    ] {
        assert!(
            labels.contains(known),
            "the source scan lost {known}: {labels:?}"
        );
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/limits.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let missing: Vec<_> = labels
        .iter()
        .filter(|l| !doc.contains(&format!("\"{l}\"")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/limits.md has no row for stackgate_input_limits_total labels {missing:?}"
    );
}

/// Compares a generated page with its checked-in file; with `STACKGATE_BLESS=1` rewrites
/// the file instead.
fn check_generated(file: &str, expected: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    if std::env::var_os("STACKGATE_BLESS").is_some() {
        std::fs::write(&path, expected).unwrap();
        return;
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "{file} is stale: run `STACKGATE_BLESS=1 cargo test --locked --test docs_current`"
    );
}

#[test]
fn docs_flags_md_is_generated_from_the_command_line() {
    check_generated(
        "docs/flags.md",
        &stackgate::cli::reference::flags_markdown(),
    );
}

#[test]
fn docs_metrics_md_is_generated_from_the_metrics_registry() {
    check_generated(
        "docs/metrics.md",
        &stackgate::cli::reference::metrics_markdown(),
    );
}
