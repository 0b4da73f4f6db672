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
    // A family alone (the tag `check` prints): the family, its policies and every code, each
    // to be explained, and no example (that belongs to a code).
    let family = explain(&engine, "known-bad-lb-settings").expect("a family is explained");
    assert!(
        family.starts_with("known-bad-lb-settings (a rule family)\n"),
        "{family}"
    );
    for code in ["use-octavia-false", "ovn-lb-method"] {
        assert!(
            family.contains(&format!("  - known-bad-lb-settings/{code}\n")),
            "{family}"
        );
    }
    assert!(
        family.contains("Policy known-bad-lb-settings (mode "),
        "{family}"
    );
    assert!(family.contains("Sources:"), "{family}");
    assert!(!family.contains("Example:"), "{family}");
    // A policy's name names its family too.
    let policy = engine
        .policies()
        .policies
        .iter()
        .find(|p| p.rule.as_str() == "known-bad-lb-settings")
        .expect("a policy of the family");
    assert_eq!(explain(&engine, &policy.name).expect("policy"), family);
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

/// The Secret of `docs/first-hour.md` as the apiserver hands it to admission webhooks: the
/// apiserver merges `stringData` into `data` (base64) before admission, so the webhook's
/// messages name `data["cloud.conf"]`, never `stringData`.
fn stored_secret(cloud_conf: &str) -> serde_json::Value {
    use base64::Engine as _;
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "cloud-config", "namespace": "kube-system"},
        "type": "Opaque",
        "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(cloud_conf)},
    })
}

/// The body of a `key: |` block scalar in `yaml` (indented by 4 under the key).
fn block_scalar(yaml: &str, key: &str) -> String {
    let start = yaml
        .find(key)
        .unwrap_or_else(|| panic!("{key} not in {yaml}"))
        + key.len();
    let mut out = String::new();
    for line in yaml[start..].lines().skip(1) {
        if !line.is_empty() && !line.starts_with("    ") {
            break;
        }
        out.push_str(line.strip_prefix("    ").unwrap_or(line));
        out.push('\n');
    }
    out.trim_end().to_owned() + "\n"
}

/// The webhook's answer to `object` (`old` for an UPDATE), through the same handler as
/// `serve`, for an AdmissionReview shaped like the apiserver's (the captured fixture).
fn webhook_answer(
    webhook: stackgate::admission::Webhook,
    object: serde_json::Value,
    old: Option<serde_json::Value>,
) -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/captured/secret/validate-create-cloud-config-from-file.json"
    );
    let mut review: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("captured review")).expect("JSON");
    review["request"]["object"] = object;
    if let Some(old) = old {
        review["request"]["operation"] = "UPDATE".into();
        review["request"]["oldObject"] = old;
    }
    let metrics = stackgate::metrics::Metrics::new();
    let body = serde_json::to_vec(&review).expect("JSON");
    let reply = stackgate::admission::handle(&engine(), webhook, &body, &metrics);
    assert_eq!(reply.status, 200);
    let out: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    out["response"].clone()
}

/// `docs/first-hour.md` steps 2 and 3 show the webhooks' real texts inside illustrative
/// kubectl output: the warnings `serve` answers for the stored Secret, and its denial of the
/// `false` variant, with the apiserver's `data["cloud.conf"]` naming.
#[test]
fn the_first_hour_webhook_texts_are_what_serve_answers_for_the_stored_secret() {
    use base64::Engine as _;
    use stackgate::admission::Webhook;

    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/first-hour.md"))
        .expect("docs/first-hour.md");
    let secret = block_after(&doc, "(`cloud-config.yaml`; the credentials are fake):");
    let conf = block_scalar(secret, "cloud.conf: |");
    assert!(conf.starts_with("[Global]\n"), "{conf}");

    // Step 2: the mutating webhook's warnings, one `Warning:` line each, in order.
    let created = webhook_answer(Webhook::Mutate, stored_secret(&conf), None);
    let warnings: Vec<String> = created["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| format!("Warning: {}", w.as_str().expect("text")))
        .collect();
    let step2 = block_after(
        &doc,
        "the real warnings of the mutating\nwebhook for this object:",
    );
    let shown: Vec<&str> = step2
        .lines()
        .filter(|l| l.starts_with("Warning: "))
        .collect();
    assert_eq!(
        shown, warnings,
        "docs/first-hour.md step 2 shows stale warnings"
    );
    assert!(!step2.contains("stringData"), "{step2}");

    // What step 2 stored (the patch applied), the old object of step 3's UPDATE.
    let patch = created["patch"].as_str().expect("a patch");
    let ops: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(patch)
            .expect("base64"),
    )
    .expect("JSON patch");
    let mut stored = stored_secret(&conf);
    stored["data"]["cloud.conf"] = ops[0]["value"].clone();

    // Step 3: the validating webhook's denial of the `false` variant, after "denied the
    // request: " to the end of the block.
    let line = "floating-network-id = 9f3c6f2e-5a53-4d2a-9c1e-2b7f0d4e8a11\n";
    let with_false = conf.replace(
        line,
        &format!("{line}provider-requires-serial-api-calls = false\n"),
    );
    let denied = webhook_answer(Webhook::Validate, stored_secret(&with_false), Some(stored));
    assert_eq!(denied["allowed"], false, "{denied}");
    let message = denied["status"]["message"].as_str().expect("message");
    let step3 = block_after(&doc, "stands for the patch kubectl sent, see below):");
    let after = step3
        .split_once("denied the request: ")
        .map(|(_, m)| m)
        .expect("step 3 shows the denial");
    assert_eq!(
        after, message,
        "docs/first-hour.md step 3 shows a stale denial"
    );
}

/// The GitOps run of `docs/first-hour.md` step 4: the lines it shows (its `...` stands for
/// the others) are lines of the real output, in order, and its summary is the real one.
#[test]
fn the_first_hour_gitops_check_lines_are_current() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/first-hour.md"))
        .expect("docs/first-hour.md");
    let command = "stackgate check tests/fixtures/gitops/repo \\\n";
    let after_command = &doc[doc.find(command).expect("the GitOps check in step 4")..];
    let shown = block_after(after_command, "```\n");
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args([
            "check",
            "tests/fixtures/gitops/repo",
            "--values-for",
            "openstack-cloud-controller-manager=clusters/*/occm-values.yaml",
            "--values-for",
            "openstack-cloud-controller-manager=base/occm/values.yaml",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("STACKGATE_LOG_LEVEL", "off")
        .output()
        .expect("run stackgate");
    assert_eq!(out.status.code(), Some(1), "the guide says exit code 1");
    let real = String::from_utf8(out.stdout).expect("utf-8");
    let mut real_lines = real.lines();
    let shown_lines: Vec<&str> = shown.lines().filter(|l| *l != "...").collect();
    assert!(shown_lines.len() >= 2, "{shown}");
    for line in &shown_lines {
        assert!(
            real_lines.any(|r| r == *line),
            "docs/first-hour.md step 4 shows a line the GitOps check does not print (or not in this order): {line}"
        );
    }
    assert_eq!(
        shown_lines.last(),
        real.lines().last().as_ref(),
        "docs/first-hour.md step 4: the summary"
    );
}
