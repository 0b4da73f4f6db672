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
