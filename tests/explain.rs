//! `stackgate explain CODE`: every code of every rule family is explained from the registry and
//! the effective policy set (description, mode, exemption, sources), with the real message of
//! the family's documentation example when it reports that code; unknown, ambiguous and
//! family-only names get a clear error that lists the codes meant.

use std::process::Command;

use stackgate::cli::explain::{ExplainError, example_findings, explain};
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;
use stackgate::rules::FAMILIES;

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies"))
}

fn stackgate(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args(args)
        .env("STACKGATE_LOG_LEVEL", "off")
        .output()
        .expect("run stackgate");
    (
        out.status.success(),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

/// Whitespace-insensitive containment (the explanation wraps long text).
fn contains(haystack: &str, needle: &str) -> bool {
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    squash(haystack).contains(&squash(needle))
}

#[test]
fn every_family_code_is_explained_with_its_policy_and_sources() {
    let engine = engine();
    let mut with_example = 0;
    for family in FAMILIES {
        let id = family.id.as_str();
        let examples = example_findings(&engine, family);
        for code in family.codes {
            let text = explain(&engine, &format!("{id}/{code}"))
                .unwrap_or_else(|e| panic!("{id}/{code}: {e}"));
            assert!(text.starts_with(&format!("{id}/{code}\n")), "{text}");
            for policy in engine
                .policies()
                .policies
                .iter()
                .filter(|p| p.rule == family.id)
            {
                assert!(
                    contains(&text, &format!("Policy {}", policy.name)),
                    "{id}/{code}"
                );
                assert!(
                    contains(&text, policy.description.trim()),
                    "{id}/{code}: description"
                );
                for source in policy.source.split("; ") {
                    assert!(
                        contains(&text, source.trim()),
                        "{id}/{code}: source {source}"
                    );
                }
                if let Some(annotation) = policy.exemption_annotation() {
                    assert!(contains(&text, &annotation), "{id}/{code}: exemption");
                }
                match examples
                    .iter()
                    .find(|f| f.policy == policy.name && f.code == *code)
                {
                    Some(f) => {
                        with_example += 1;
                        // Every part of the example finding, in full.
                        let t = &f.text;
                        for part in [&t.what, &t.fix, &t.why]
                            .into_iter()
                            .chain(&t.location)
                            .chain(&t.notes)
                        {
                            assert!(contains(&text, part), "{id}/{code}: example part {part}");
                        }
                    }
                    None => assert!(
                        contains(&text, &format!("docs/rules.md#{}", policy.name)),
                        "{id}/{code}: points to the docs"
                    ),
                }
            }
        }
    }
    // Each family with an example reports at least one code through it.
    let families_with_examples = FAMILIES.iter().filter(|f| (f.example)().is_some()).count();
    assert!(
        with_example >= families_with_examples,
        "{with_example} explanations carry an example, {families_with_examples} families have one"
    );
}

#[test]
fn a_bare_code_of_one_family_and_a_policy_qualified_code_resolve() {
    let engine = engine();
    let qualified = explain(&engine, "serial-lb-api-calls/false").expect("qualified");
    assert_eq!(explain(&engine, "false").expect("bare"), qualified);
    // The default policy of a family has the family's name; a policy name qualifies too.
    let policy = &engine.policies().policies[0];
    let code = policy.rule.family().codes[0];
    assert_eq!(
        explain(&engine, &format!("{}/{code}", policy.name)).expect("policy/code"),
        explain(&engine, &format!("{}/{code}", policy.rule.as_str())).expect("family/code")
    );
    let engine_code = explain(&engine, "values-unseen").expect("engine code");
    assert!(engine_code.contains("spec.valuesFrom"), "{engine_code}");
}

#[test]
fn unknown_ambiguous_and_family_names_get_errors_that_list_codes() {
    let engine = engine();
    match explain(&engine, "serial-lb-api-calls/flase") {
        Err(ExplainError::Unknown { close, .. }) => {
            assert_eq!(
                close.first().map(String::as_str),
                Some("serial-lb-api-calls/false")
            );
        }
        other => panic!("{other:?}"),
    }
    match explain(&engine, "invalid") {
        Err(ExplainError::Ambiguous { candidates, .. }) => {
            assert!(candidates.contains(&"serial-lb-api-calls/invalid".to_owned()));
            assert!(candidates.contains(&"ccm-concurrency/invalid".to_owned()));
        }
        other => panic!("{other:?}"),
    }
    match explain(&engine, "known-bad-lb-settings") {
        Err(ExplainError::FamilyOnly { codes, .. }) => assert_eq!(
            codes,
            [
                "known-bad-lb-settings/use-octavia-false",
                "known-bad-lb-settings/ovn-lb-method"
            ]
        ),
        other => panic!("{other:?}"),
    }
    // Nothing close: every code is listed.
    match explain(&engine, "zzzzzzzzzzzzzzzzzzzzzzzzzzzz") {
        Err(ExplainError::Unknown { close, .. }) => {
            let total: usize = FAMILIES.iter().map(|f| f.codes.len()).sum();
            assert!(close.len() > total, "{close:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_command_prints_the_explanation_and_fails_on_an_unknown_code() {
    let (ok, out, _) = stackgate(&["explain", "known-bad-lb-settings/ovn-lb-method"]);
    assert!(ok);
    assert!(
        contains(&out, "Fix: set `lb-method = SOURCE_IP_PORT`"),
        "{out}"
    );
    assert!(contains(&out, "Sources:"), "{out}");

    let (ok, out, err) = stackgate(&["explain", "ovn-lb-methd"]);
    assert!(!ok);
    assert!(out.is_empty());
    assert!(
        err.contains("unknown finding code \"ovn-lb-methd\""),
        "{err}"
    );
    assert!(err.contains("known-bad-lb-settings/ovn-lb-method"), "{err}");
    assert!(err.contains("ovn-source-ranges/ovn-lb-method"), "{err}");
}

/// The fenced block that follows `marker` in `doc` (its body, without the fences).
fn block_after<'a>(doc: &'a str, marker: &str) -> &'a str {
    let at = doc
        .find(marker)
        .unwrap_or_else(|| panic!("docs/first-hour.md lost {marker:?}"))
        + marker.len();
    let rest = &doc[at..];
    let open = rest.find("```").expect("a fenced block");
    let body_start = open + rest[open..].find('\n').expect("fence line") + 1;
    let body_len = rest[body_start..].find("\n```").expect("closing fence");
    &rest[body_start..body_start + body_len]
}

/// `docs/first-hour.md` shows real output: its `check` and `explain` runs are re-run on the
/// Secret it shows (and its `false` variant) and must print what the guide says.
#[test]
fn the_first_hour_guide_shows_current_output() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/first-hour.md"))
        .expect("docs/first-hour.md");
    let secret = block_after(&doc, "(`cloud-config.yaml`; the credentials are fake):");
    let line = "    floating-network-id = 9f3c6f2e-5a53-4d2a-9c1e-2b7f0d4e8a11";
    assert!(secret.contains(line), "{secret}");
    let with_false = secret.replace(
        line,
        &format!("{line}\n    provider-requires-serial-api-calls = false"),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("cloud-config.yaml"), format!("{secret}\n")).expect("write");
    std::fs::write(
        dir.path().join("cloud-config-false.yaml"),
        format!("{with_false}\n"),
    )
    .expect("write");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
            .args(args)
            .current_dir(dir.path())
            .env("STACKGATE_LOG_LEVEL", "off")
            .output()
            .expect("run stackgate");
        let text = String::from_utf8(out.stdout).expect("utf-8")
            + &String::from_utf8(out.stderr).expect("utf-8");
        text.trim_end().to_owned()
    };
    for (command, args) in [
        (
            "stackgate check cloud-config.yaml\n",
            &["check", "cloud-config.yaml"][..],
        ),
        (
            "stackgate check cloud-config-false.yaml\n",
            &["check", "cloud-config-false.yaml"],
        ),
        (
            "stackgate explain serial-lb-api-calls/false\n",
            &["explain", "serial-lb-api-calls/false"],
        ),
    ] {
        let after_command = &doc[doc.find(command).unwrap_or_else(|| panic!("{command}"))..];
        let shown = block_after(after_command, "```\n");
        assert_eq!(
            shown,
            run(args),
            "docs/first-hour.md shows stale output of `{}`: paste the current output",
            command.trim()
        );
    }
}
