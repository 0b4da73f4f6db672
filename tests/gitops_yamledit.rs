//! The YAML-string editor keeps every byte outside the edited line: generated Helm values
//! texts (comments everywhere, blank lines, 2- or 4-space indentation, LF or CRLF, quoted
//! values, the key absent / false / true / quoted, sections absent or null) get
//! `cloudConfig.loadBalancer.provider-requires-serial-api-calls: true`, and the result differs
//! from the input by inserted lines only (one, or the missing parents), or by the value of
//! the one existing line. The same holds through the webhook path (a HelmChart's
//! `spec.valuesContent`).

#[path = "support/review.rs"]
mod review;

use proptest::prelude::*;
use serde_json::{Value, json};
use stackgate::yaml::edit::{self as yamledit, Change};
use stackgate::yaml::{self, Seg};

const KEY: &str = "provider-requires-serial-api-calls";

#[derive(Debug, Clone)]
enum Existing {
    Absent,
    False,
    True,
    QuotedFalse,
}

#[derive(Debug, Clone)]
enum LoadBalancer {
    /// No `loadBalancer` key.
    Missing,
    /// `loadBalancer:` with nothing (the chart's own values.yaml).
    Null,
    /// Entries, and the serial key in some state.
    Entries(Existing),
}

#[derive(Debug, Clone)]
struct Doc {
    step: usize,
    crlf: bool,
    head_comments: Vec<String>,
    cloud_config: Option<LoadBalancer>,
    tail: bool,
    inner_comment: bool,
}

fn comment() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 :#'\"-]{0,20}".prop_map(|s| format!("# {s}"))
}

fn doc() -> impl Strategy<Value = Doc> {
    let lb = prop_oneof![
        Just(LoadBalancer::Missing),
        Just(LoadBalancer::Null),
        prop_oneof![
            Just(Existing::Absent),
            Just(Existing::False),
            Just(Existing::True),
            Just(Existing::QuotedFalse)
        ]
        .prop_map(LoadBalancer::Entries),
    ];
    (
        prop_oneof![Just(2usize), Just(4usize)],
        any::<bool>(),
        prop::collection::vec(comment(), 0..3),
        prop::option::of(lb),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(step, crlf, head_comments, cloud_config, tail, inner_comment)| Doc {
                step,
                crlf,
                head_comments,
                cloud_config,
                tail,
                inner_comment,
            },
        )
}

fn render(d: &Doc) -> String {
    let i1 = " ".repeat(d.step);
    let i2 = " ".repeat(d.step * 2);
    let mut lines: Vec<String> = d.head_comments.clone();
    lines.push("image:".into());
    lines.push(format!("{i1}tag: \"v1.31.0\"   # pinned"));
    lines.push(String::new());
    if let Some(lb) = &d.cloud_config {
        lines.push("cloudConfig:  # the CCM config".into());
        lines.push(format!("{i1}global:"));
        lines.push(format!(
            "{i2}auth-url: https://keystone.example.test:5000/v3"
        ));
        lines.push(format!("{i2}region: 'RegionOne'"));
        match lb {
            LoadBalancer::Missing => {}
            LoadBalancer::Null => lines.push(format!("{i1}loadBalancer:")),
            LoadBalancer::Entries(existing) => {
                lines.push(format!("{i1}loadBalancer:"));
                lines.push(format!(
                    "{i2}subnet-id: 9c018814-f2a8-45dd-9679-5400d49b333a # workers"
                ));
                match existing {
                    Existing::Absent => {}
                    Existing::False => lines.push(format!("{i2}{KEY}: false  # incident 42")),
                    Existing::True => lines.push(format!("{i2}{KEY}: true")),
                    Existing::QuotedFalse => lines.push(format!("{i2}{KEY}: \"false\"")),
                }
                if d.inner_comment {
                    lines.push(format!("{i2}# lb-method: SOURCE_IP_PORT"));
                }
            }
        }
        lines.push(format!("{i1}metadata:"));
        lines.push(format!("{i2}search-order: configDrive,metadataService"));
    }
    if d.tail {
        lines.push(String::new());
        lines.push("controllerExtraArgs: |-".into());
        lines.push(format!("{i1}- --v=2"));
        lines.push("# the end".into());
    }
    let eol = if d.crlf { "\r\n" } else { "\n" };
    lines.iter().map(|l| format!("{l}{eol}")).collect()
}

fn expected_inserted(d: &Doc) -> usize {
    match &d.cloud_config {
        None => 3,
        Some(LoadBalancer::Missing) => 2,
        Some(LoadBalancer::Null) | Some(LoadBalancer::Entries(Existing::Absent)) => 1,
        Some(LoadBalancer::Entries(_)) => 0,
    }
}

/// Checks that `after` is `before` with only inserted lines, or with one line whose value
/// changed; returns (inserted, changed).
fn classify(before: &str, after: &str) -> (Vec<String>, Vec<(String, String)>) {
    let diff = similar::TextDiff::from_lines(before, after);
    let mut inserted = Vec::new();
    let mut changed = Vec::new();
    for op in diff.ops() {
        match *op {
            similar::DiffOp::Equal { .. } => {}
            similar::DiffOp::Insert {
                new_index, new_len, ..
            } => {
                inserted.extend(
                    diff.new_slices()[new_index..new_index + new_len]
                        .iter()
                        .map(|s| (*s).to_owned()),
                );
            }
            similar::DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => {
                assert_eq!((old_len, new_len), (1, 1), "one line replaced by one line");
                changed.push((
                    diff.old_slices()[old_index].to_owned(),
                    diff.new_slices()[new_index].to_owned(),
                ));
            }
            similar::DiffOp::Delete { .. } => panic!("a line was deleted:\n{before}\n=>\n{after}"),
        }
    }
    (inserted, changed)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn set_changes_only_the_edited_line(d in doc()) {
        let before = render(&d);
        let path = vec![Seg::key("cloudConfig"), Seg::key("loadBalancer"), Seg::key(KEY)];
        let after = yamledit::apply(&before, 0, &Change::Set { path: path.clone(), value: json!(true) })
            .expect("the edit applies");
        let root = yaml::parse_one(&after).expect("parses");
        prop_assert_eq!(root.at(&path).and_then(|n| n.to_json().ok()), Some(Value::Bool(true)));
        let (inserted, changed) = classify(&before, &after);
        let eol = if d.crlf { "\r\n" } else { "\n" };
        match &d.cloud_config {
            Some(LoadBalancer::Entries(Existing::True)) => {
                prop_assert_eq!(&after, &before);
            }
            Some(LoadBalancer::Entries(Existing::False | Existing::QuotedFalse)) => {
                prop_assert!(inserted.is_empty());
                prop_assert_eq!(changed.len(), 1);
                let (old, new) = &changed[0];
                // Same indentation, key and comment; only the value token differs.
                let (old_key, old_rest) = old.split_once(':').expect("key line");
                let (new_key, new_rest) = new.split_once(':').expect("key line");
                prop_assert_eq!(old_key, new_key);
                prop_assert!(new_rest.starts_with(" true"));
                let old_tail = old_rest.trim_start().trim_start_matches("\"false\"").trim_start_matches("false");
                prop_assert_eq!(new_rest.trim_start().trim_start_matches("true"), old_tail);
            }
            _ => {
                prop_assert!(changed.is_empty(), "{:?}", changed);
                prop_assert_eq!(inserted.len(), expected_inserted(&d));
                let last = inserted.last().expect("a line");
                prop_assert_eq!(last.trim_end_matches(['\r', '\n']).trim_start(), format!("{KEY}: true"));
                prop_assert!(inserted.iter().all(|l| l.ends_with(eol)));
                let indent = last.len() - last.trim_start().len();
                prop_assert_eq!(indent, 2 * d.step);
            }
        }
    }

    /// The webhook path: a HelmChart whose `spec.valuesContent` is the generated text.
    #[test]
    fn helmchart_patch_keeps_the_values_text(d in doc()) {
        let before = render(&d);
        let object = json!({
            "apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
            "spec": {"chart": "openstack-cloud-controller-manager", "valuesContent": before},
        });
        let engine = stackgate::engine::Engine::new(stackgate::policy::PolicySet::embedded().expect("policies"));
        let review: kube::core::admission::AdmissionReview<kube::core::DynamicObject> =
            serde_json::from_value(review::review_for(&object, "p")).expect("review");
        let request: kube::core::admission::AdmissionRequest<kube::core::DynamicObject> = review.try_into().expect("request");
        let verdict = engine.evaluate(&stackgate::admission::subject_of(&request));
        let patch = serde_json::to_value(&verdict.patch).expect("patch");
        if expected_inserted(&d) == 0 {
            prop_assert!(!patch.to_string().contains("valuesContent"));
            return Ok(());
        }
        let after = patch[0]["value"].as_str().expect("the new values text").to_owned();
        let (inserted, changed) = classify(&before, &after);
        prop_assert!(changed.is_empty());
        prop_assert_eq!(inserted.len(), expected_inserted(&d));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary YAML-ish text never panics the parser, the editor or `stackgate check`, and
    /// an edit that succeeds always reads back as intended.
    #[test]
    fn arbitrary_text_never_panics(text in "[a-z0-9:{}\\[\\],'\"|>&*!#~ \n-]{0,160}") {
        let path = vec![Seg::key("cloudConfig"), Seg::key("loadBalancer"), Seg::key(KEY)];
        if let Ok(after) = yamledit::apply(&text, 0, &Change::Set { path: path.clone(), value: json!(true) }) {
            let root = yaml::parse_one(&after).expect("an applied edit parses");
            prop_assert_eq!(root.at(&path).and_then(|n| n.to_json().ok()), Some(Value::Bool(true)));
        }
        let engine = stackgate::engine::Engine::new(stackgate::policy::PolicySet::embedded().expect("policies"));
        let _ = stackgate::check::check_text(&engine, "fuzz.yaml", &text, Some("openstack-cloud-controller-manager"));
        let _ = stackgate::check::check_text(&engine, "fuzz.yaml", &text, None);
        let object = json!({
            "apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "x", "namespace": "kube-system"},
            "spec": {"chart": "openstack-cloud-controller-manager", "valuesContent": text},
        });
        let review: kube::core::admission::AdmissionReview<kube::core::DynamicObject> =
            serde_json::from_value(review::review_for(&object, "f")).expect("review");
        let request: kube::core::admission::AdmissionRequest<kube::core::DynamicObject> = review.try_into().expect("request");
        let _ = engine.evaluate(&stackgate::admission::subject_of(&request));
    }
}
