//! Messages where they are read (issue 27, item 1): every family's documentation example (the
//! inputs `stackgate rules` runs for `docs/rules.md`) is posted to both webhooks as the
//! apiserver would post it, and what `kubectl` would show is measured:
//!
//! - each denial's first line: at most [`FIRST_LINE_MAX`] characters, and it carries the fix
//!   (`Fix:`), so the reader needs nothing else to act;
//! - each warning: whole within kubectl's [`KUBECTL_WARNING_MAX`]-character cut. A warning is
//!   `stackgate POLICY: <first line>`; stackgate cuts a longer one itself (marked `…`), so a
//!   warning that ends in `…` lost its end, often the fix.
//!
//! `measure` prints one row per message (`cargo test --test message_length -- --nocapture`).

#[path = "support/review.rs"]
mod review;

use serde_json::{Value, json};
use stackgate::admission::{Webhook, handle_with};
use stackgate::budget::Cancel;
use stackgate::engine::{Engine, Operation};
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::rules::FAMILIES;

/// The longest first line of a denial that `kubectl` users read whole.
const FIRST_LINE_MAX: usize = 200;
/// kubectl (client-go's warning handler) shows warnings of at most this many characters; the
/// apiserver may drop longer ones (k8s.io/apiserver pkg/warning: 256-character limit per
/// warning, applied by admission's warning recorder).
const KUBECTL_WARNING_MAX: usize = 256;

/// One message as kubectl would show it.
#[derive(Debug)]
struct Shown {
    /// The rule family of the finding (an example may raise findings of other families).
    family: &'static str,
    code: String,
    /// `denial` or `warning` (mutate or validate).
    kind: &'static str,
    first_line: String,
    cut: bool,
}

impl Shown {
    fn has_fix(&self) -> bool {
        self.first_line.contains("Fix:")
    }

    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let len = self.first_line.chars().count();
        match self.kind {
            "denial" => {
                if len > FIRST_LINE_MAX {
                    out.push(format!("first line {len} > {FIRST_LINE_MAX} chars"));
                }
                if !self.has_fix() {
                    out.push("no `Fix:` in the first line".to_owned());
                }
            }
            _ => {
                if self.cut {
                    out.push(format!(
                        "warning cut at {KUBECTL_WARNING_MAX} chars ({}`Fix:` left)",
                        if self.has_fix() { "" } else { "no " }
                    ));
                }
            }
        }
        out
    }
}

/// The review the apiserver would send for the example (CREATE, or DELETE of the old object).
fn review(object: &Value, operation: Operation) -> Value {
    let mut review = review::review_for(object, "message-length");
    let request = &mut review["request"];
    request["dryRun"] = json!(false);
    if operation == Operation::Delete {
        request["operation"] = json!("DELETE");
        request["oldObject"] = object.clone();
        request["object"] = Value::Null;
        request["options"] = json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"});
    }
    review
}

/// Everything the two webhooks answer for every family's example.
fn measure() -> Vec<Shown> {
    let engine = Engine::new(PolicySet::embedded().expect("embedded policies"));
    let metrics = Metrics::new();
    let mut shown = Vec::new();
    for family in FAMILIES {
        let Some(example) = (family.example)() else {
            continue;
        };
        let body = serde_json::to_vec(&review(&example.object, example.operation)).expect("json");
        for webhook in [Webhook::Mutate, Webhook::Validate] {
            let (reply, verdict) = handle_with(
                &engine,
                webhook,
                &body,
                &metrics,
                &example.facts,
                &Cancel::never(),
            );
            let verdict = verdict.expect("the example is evaluated");
            let answer: Value = serde_json::from_slice(&reply.body).expect("review json");
            let response = &answer["response"];
            if webhook == Webhook::Validate {
                for d in &verdict.denials {
                    shown.push(Shown {
                        family: d.rule.as_str(),
                        code: d.code.to_owned(),
                        kind: "denial",
                        first_line: d.denial_text().lines().next().unwrap_or("").to_owned(),
                        cut: false,
                    });
                }
            }
            // Warnings are in the order of their findings: validate answers the verdict's
            // warnings, mutate its mutation notes and then (for cloud configs) one note on
            // restarting the CCM, which is no finding.
            let findings = match webhook {
                Webhook::Validate => &verdict.warnings,
                Webhook::Mutate => &verdict.mutations,
            };
            for (i, w) in response["warnings"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let text = w.as_str().expect("warning text");
                assert!(text.chars().count() <= KUBECTL_WARNING_MAX, "{text}");
                let finding = findings.get(i);
                shown.push(Shown {
                    family: finding.map_or("(engine)", |f| f.rule.as_str()),
                    code: finding
                        .map_or_else(|| "ccm-restart-note".to_owned(), |f| f.code.to_owned()),
                    kind: match webhook {
                        Webhook::Mutate => "warning (mutate)",
                        Webhook::Validate => "warning (validate)",
                    },
                    first_line: text.to_owned(),
                    cut: text.ends_with('…'),
                });
            }
        }
    }
    shown.sort_by(|a, b| (a.family, &a.code, a.kind).cmp(&(b.family, &b.code, b.kind)));
    shown.dedup_by(|a, b| {
        (a.family, &a.code, a.kind, &a.first_line) == (b.family, &b.code, b.kind, &b.first_line)
    });
    for s in &shown {
        eprintln!(
            "{:<28} {:<24} {:<20} first line {:>4} chars, Fix: {:<3} {}",
            s.family,
            s.code,
            s.kind,
            s.first_line.chars().count(),
            if s.has_fix() { "yes" } else { "no" },
            if s.cut { "CUT" } else { "" }
        );
    }
    shown
}

/// The measurement itself runs: every family with an example is posted, and the examples
/// produce denials and warnings to measure.
#[test]
fn every_example_is_measured() {
    let shown = measure();
    assert!(
        FAMILIES.iter().filter(|f| (f.example)().is_some()).count() >= 8,
        "the families lost their examples"
    );
    assert!(shown.iter().any(|s| s.kind == "denial"));
    assert!(shown.iter().any(|s| s.kind != "denial"));
}

/// The target of issue 27: every denial's first line is short and carries the fix, and no
/// warning is cut.
#[test]
fn first_lines_lead_with_the_fix_and_warnings_fit_kubectl() {
    let problems: Vec<String> = measure()
        .iter()
        .flat_map(|s| {
            s.problems()
                .into_iter()
                .map(move |p| format!("{}/{} {}: {p}", s.family, s.code, s.kind))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "{} messages do not fit:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}
