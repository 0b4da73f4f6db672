//! Report formats of `stackgate check` and `stackgate audit`: human text, JSON, SARIF 2.1.0 (GitHub code
//! scanning) and JUnit XML. No format prints a Secret's data or a credential value: file
//! diffs mask credential-like keys, Secrets are shown as decoded INI with values masked.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::mask::sensitive_key;
use super::{Item, ObjectResult, Report, TEMPLATE_RULE};
use crate::policy::PolicySet;

/// Which command a report belongs to: its name in the summary line, what one report entry
/// is (a file for `check`, an object or a kind for `audit`) and how its fixes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Face {
    /// `stackgate check`.
    pub command: &'static str,
    /// What one [`FileReport`](super::FileReport) is, singular and plural (`file`, `files`).
    pub entry: (&'static str, &'static str),
    /// How the shown fixes are written (`stackgate check --fix writes it`).
    pub fix_hint: &'static str,
    /// What an input error is, for SARIF's `input-error` rule.
    pub input_error: &'static str,
    /// Rules of findings the face adds itself (not a policy's): `(id, description)`.
    pub own_rules: &'static [(&'static str, &'static str)],
    /// Whether entries have line numbers (files do; objects read from a cluster do not).
    pub lines: bool,
}

/// `stackgate check`: one entry per input file.
pub const CHECK: Face = Face {
    command: "stackgate check",
    entry: ("file", "files"),
    fix_hint: "stackgate check --fix writes it",
    input_error: "The input could not be read as YAML or as Kubernetes objects.",
    own_rules: &[],
    lines: true,
};

/// `name:line`, or `name` alone for a face without lines (objects read from a cluster).
fn at(face: &Face, name: &str, line: usize) -> String {
    if face.lines {
        format!("{name}:{line}")
    } else {
        name.to_owned()
    }
}

/// Human-readable text.
pub fn text(report: &Report, show_diffs: bool) -> String {
    text_as(report, show_diffs, &CHECK, false)
}

/// Human-readable text, with the summary and fix hints of `face`. Entries for kinds the
/// cluster does not serve ([`FileReport::not_served`](super::FileReport::not_served)) are one
/// line each when `each_skip`, else folded into one line: on a plain cluster they are most of
/// the report and say nothing about its objects.
pub fn text_as(report: &Report, show_diffs: bool, face: &Face, each_skip: bool) -> String {
    let mut out = String::new();
    let mut not_served: Vec<&str> = Vec::new();
    // The upstream source of each rule that has a finding, printed once after the findings
    // (each message is cut before its attribution).
    let mut sources: Vec<(&str, &str)> = Vec::new();
    for f in &report.files {
        if f.not_served && !each_skip {
            not_served.push(&f.name);
        } else if let Some(reason) = &f.skipped {
            let _ = writeln!(out, "{}: note [skipped] {reason}", f.name);
        }
        if let Some(note) = &f.template {
            let _ = writeln!(out, "{}: note [{TEMPLATE_RULE}] {note}", f.name);
        }
        for p in &f.problems {
            if !face.lines {
                let _ = writeln!(out, "{}: error [input] {}", f.name, p.message);
            } else {
                let _ = writeln!(
                    out,
                    "{}:{}:{}: error [input] {}",
                    f.name, p.line, p.column, p.message
                );
            }
        }
        for o in &f.objects {
            for i in &o.items {
                let (message, source) = short_and_source(i);
                if let Some(source) = source
                    && !sources.iter().any(|(r, _)| *r == i.rule)
                {
                    sources.push((i.rule.as_str(), source));
                }
                let _ = writeln!(
                    out,
                    "{}: {} [{}] {}{}",
                    at(face, i.file.as_deref().unwrap_or(&f.name), i.line),
                    i.level.as_str(),
                    tag(i),
                    message,
                    policy_suffix(i)
                );
            }
            if !o.verdict.patch.is_empty() && !o.fixable_in_place {
                let _ = writeln!(
                    out,
                    "{}: note [fix] {}: the webhook would apply this JSON Patch, which cannot be written into this file as a minimal edit; apply it by hand: {}",
                    at(face, &f.name, o.line),
                    o.object,
                    patch_summary(o)
                );
            }
            if show_diffs {
                for d in &o.secret_diffs {
                    let verb = if f.written { "fixed" } else { "fix" };
                    let _ = writeln!(
                        out,
                        "{}: {verb} for {} (Secret data shown decoded, values masked):",
                        at(face, &f.name, o.line),
                        o.object
                    );
                    out.push_str(d);
                }
            }
        }
        if let Some(reason) = &f.not_written {
            let _ = writeln!(out, "{}: note [fix] {reason}", f.name);
        }
        if show_diffs && let Some(diff) = &f.diff {
            if f.written {
                let _ = writeln!(
                    out,
                    "{}: fixed: wrote the edit the mutating webhook would make:",
                    f.name
                );
            } else {
                let _ = writeln!(
                    out,
                    "{}: fix: the edit the mutating webhook would make ({}):",
                    f.name, face.fix_hint
                );
            }
            out.push_str(diff);
        }
    }
    if !not_served.is_empty() {
        let _ = writeln!(
            out,
            "note [skipped] {} kind{} not served by this cluster (no CRD installed), so none of \
             {} objects exist to audit: {} (--verbose: one line each, with what it is listed for)",
            not_served.len(),
            plural(not_served.len()),
            if not_served.len() == 1 {
                "its"
            } else {
                "their"
            },
            not_served.join(", ")
        );
    }
    for (rule, source) in &sources {
        let _ = writeln!(out, "source of [{rule}]: {source}");
    }
    let o = &report.omitted;
    if o.files > 0 {
        let _ = writeln!(
            out,
            "… and {} more {} not listed ({} error{}, {} warning{}, {} note{}, {} input error{}): \
             the report is capped; the summary counts them",
            o.files,
            entries(face, o.files),
            o.errors,
            plural(o.errors),
            o.warnings,
            plural(o.warnings),
            o.notes,
            plural(o.notes),
            o.problems,
            plural(o.problems)
        );
    }
    let c = report.counts();
    let _ = write!(
        out,
        "{}: {} {}, {} object{}: {} error{}, {} warning{}, {} note{}",
        face.command,
        c.files,
        entries(face, c.files),
        c.objects,
        plural(c.objects),
        c.errors,
        plural(c.errors),
        c.warnings,
        plural(c.warnings),
        c.notes,
        plural(c.notes)
    );
    if c.problems > 0 {
        let _ = write!(out, ", {} input error{}", c.problems, plural(c.problems));
    }
    if c.skipped > 0 {
        let _ = write!(out, ", {} skipped", c.skipped);
    }
    if c.fixed > 0 {
        let _ = write!(out, "; fixed {} {}", c.fixed, entries(face, c.fixed));
    }
    if c.not_written > 0 {
        let _ = write!(
            out,
            "; {} {} not written",
            c.not_written,
            entries(face, c.not_written)
        );
    }
    if c.fixable > 0 {
        let _ = write!(
            out,
            "; {} {} fixable with --fix",
            c.fixable,
            entries(face, c.fixable)
        );
    }
    out.push('\n');
    out
}

/// The singular or plural of `face`'s entry noun.
fn entries(face: &Face, n: usize) -> &'static str {
    if n == 1 { face.entry.0 } else { face.entry.1 }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The operations of a patch, with string values not shown (they can be whole configs).
fn patch_summary(o: &ObjectResult) -> String {
    // Every string of a Secret's patch is Secret data.
    let secret = o.json.get("kind").and_then(Value::as_str) == Some("Secret")
        && o.json.get("apiVersion").and_then(Value::as_str) == Some("v1");
    let ops: Vec<String> = serde_json::to_value(&o.verdict.patch)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|op| {
            let verb = op.get("op").and_then(Value::as_str).unwrap_or("?");
            let path = op.get("path").and_then(Value::as_str).unwrap_or("?");
            match op.get("value") {
                Some(Value::String(_)) | None => format!("{verb} {path}"),
                Some(v) => format!("{verb} {path} {}", mask_json(v, secret)),
            }
        })
        .collect();
    ops.join("; ")
}

/// A JSON value with credential-like members and multi-line strings masked; with
/// `all_strings`, every string.
fn mask_json(v: &Value, all_strings: bool) -> String {
    fn walk(v: &Value, all_strings: bool) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            if sensitive_key(k) {
                                json!("***")
                            } else {
                                walk(v, all_strings)
                            },
                        )
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(|v| walk(v, all_strings)).collect()),
            Value::String(s) if all_strings || s.contains('\n') => json!("(text not shown)"),
            other => other.clone(),
        }
    }
    walk(v, all_strings).to_string()
}

/// JSON: `{version, summary, results, fixes, errors}`.
pub fn json(report: &Report) -> String {
    let c = report.counts();
    let results: Vec<Value> = report
        .items()
        .map(|(f, o, i)| {
            json!({
                "file": i.file.as_deref().unwrap_or(&f.name),
                "line": i.line,
                "level": i.level.as_str(),
                "kind": i.kind.as_str(),
                "rule": i.rule,
                "code": explain_code(i),
                "policy": i.policy,
                "object": o.object,
                "message": i.message,
                "fixedByPatch": i.fixed_by_patch,
            })
        })
        .collect();
    let mut fixes = Vec::new();
    for f in &report.files {
        if let Some(diff) = &f.diff {
            fixes.push(json!({"file": f.name, "written": f.written, "diff": diff}));
        }
        for o in &f.objects {
            for d in &o.secret_diffs {
                fixes.push(json!({"file": f.name, "object": o.object, "line": o.line, "written": f.written, "diff": d}));
            }
            if !o.verdict.patch.is_empty() && !o.fixable_in_place {
                fixes.push(
                    json!({"file": f.name, "object": o.object, "line": o.line, "written": false,
                    "inPlace": false, "patch": patch_summary(o)}),
                );
            }
        }
    }
    // Templates carry their rule, so that a consumer can tell them from unread inputs.
    let skipped: Vec<Value> = report
        .files
        .iter()
        .flat_map(|f| {
            let unread = f
                .skipped
                .as_ref()
                .map(|r| json!({"file": f.name, "reason": r}));
            let template = f
                .template
                .as_ref()
                .map(|r| json!({"file": f.name, "reason": r, "rule": TEMPLATE_RULE}));
            unread.into_iter().chain(template)
        })
        .collect();
    let not_written: Vec<Value> = report
        .files
        .iter()
        .filter_map(|f| {
            f.not_written
                .as_ref()
                .map(|r| json!({"file": f.name, "reason": r}))
        })
        .collect();
    let errors: Vec<Value> = report
        .files
        .iter()
        .flat_map(|f| f.problems.iter().map(move |p| json!({"file": f.name, "line": p.line, "column": p.column, "message": p.message})))
        .collect();
    let doc = json!({
        "version": 1,
        "summary": {
            "files": c.files, "objects": c.objects, "errors": c.errors, "warnings": c.warnings,
            "notes": c.notes, "inputErrors": c.problems, "fixable": c.fixable, "fixed": c.fixed,
            "skipped": c.skipped, "notWritten": c.not_written,
            "exitCode": report.exit_code(),
        },
        "results": results,
        "fixes": fixes,
        "errors": errors,
        "skipped": skipped,
        "notWritten": not_written,
    });
    let mut doc = doc;
    let o = &report.omitted;
    if o.files > 0 {
        // Entries past `stackgate audit`'s report caps: counted in the summary, not listed.
        doc["summary"]["notListed"] = json!({
            "entries": o.files, "objects": o.objects, "errors": o.errors,
            "warnings": o.warnings, "notes": o.notes, "inputErrors": o.problems,
        });
    }
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// SARIF 2.1.0 for GitHub code scanning: one result per denial, warning and note, input
/// errors as results of the `input-error` rule.
pub fn sarif(report: &Report, policies: &PolicySet) -> String {
    sarif_as(report, policies, &CHECK)
}

/// SARIF 2.1.0 with the input-error description and own rules of `face`.
pub fn sarif_as(report: &Report, policies: &PolicySet, face: &Face) -> String {
    let mut rule_ids: Vec<String> = report.items().map(|(_, _, i)| i.rule.clone()).collect();
    if report.files.iter().any(|f| !f.problems.is_empty()) {
        rule_ids.push("input-error".to_owned());
    }
    if report.files.iter().any(|f| f.skipped.is_some()) {
        rule_ids.push(SKIPPED_RULE.to_owned());
    }
    if report.files.iter().any(|f| f.template.is_some()) {
        rule_ids.push(TEMPLATE_RULE.to_owned());
    }
    rule_ids.sort();
    rule_ids.dedup();
    let rules: Vec<Value> = rule_ids
        .iter()
        .map(|id| {
            let policy = policies.policies.iter().find(|p| p.rule.as_str() == id);
            let description = policy.map_or_else(
                || {
                    if id == SKIPPED_RULE {
                        "The input was not read: a symbolic link out of the checked tree, not a regular file, or a path named on the command line that --exclude matches.".to_owned()
                    } else if id == TEMPLATE_RULE {
                        "The input is a template (Helm/Go, Jinja or Terraform), not a manifest, and was not checked. Check the rendered manifests: pipe `helm template` or `kustomize build` into `stackgate check -`.".to_owned()
                    } else if let Some((_, own)) = face.own_rules.iter().find(|(r, _)| r == id) {
                        (*own).to_owned()
                    } else {
                        face.input_error.to_owned()
                    }
                },
                |p| p.description.trim().to_owned(),
            );
            let mut rule = json!({
                "id": id,
                "name": id,
                "shortDescription": {"text": first_sentence(&description)},
                "fullDescription": {"text": description},
            });
            if let (Some(p), Some(r)) = (policy, rule.as_object_mut()) {
                let mut help = format!("Source: {}", p.source.trim());
                // Code scanning shows a rule's help, not a result's properties: name the codes
                // a result's `properties.code` can hold, and how to read about one.
                let codes: Vec<String> = p
                    .rule
                    .family()
                    .codes
                    .iter()
                    .map(|c| format!("{}/{c}", p.rule.as_str()))
                    .collect();
                if !codes.is_empty() {
                    let _ = write!(
                        help,
                        "\nFinding codes (in each result's properties.code; `stackgate explain CODE` explains one): {}.",
                        codes.join(", ")
                    );
                }
                r.insert("help".to_owned(), json!({"text": help}));
            }
            rule
        })
        .collect();
    let index_of = |id: &str| rule_ids.iter().position(|r| r == id).unwrap_or(0);
    let mut results: Vec<Value> = Vec::new();
    for f in &report.files {
        if let Some(reason) = &f.skipped {
            results.push(json!({
                "ruleId": SKIPPED_RULE,
                "ruleIndex": index_of(SKIPPED_RULE),
                "level": "note",
                "message": {"text": reason},
                "locations": [location(&f.name, 1, None)],
            }));
        }
        if let Some(note) = &f.template {
            results.push(json!({
                "ruleId": TEMPLATE_RULE,
                "ruleIndex": index_of(TEMPLATE_RULE),
                "level": "note",
                "message": {"text": note},
                "locations": [location(&f.name, 1, None)],
            }));
        }
        for p in &f.problems {
            results.push(json!({
                "ruleId": "input-error",
                "ruleIndex": index_of("input-error"),
                "level": "error",
                "message": {"text": p.message},
                "locations": [location(&f.name, p.line.max(1), Some(p.column.max(1)))],
            }));
        }
        for o in &f.objects {
            for i in &o.items {
                let mut properties = json!({"policy": i.policy, "object": o.object, "kind": i.kind.as_str(), "fixedByPatch": i.fixed_by_patch});
                if let (Some(code), Some(p)) = (explain_code(i), properties.as_object_mut()) {
                    p.insert("code".to_owned(), json!(code));
                }
                results.push(json!({
                    "ruleId": i.rule,
                    "ruleIndex": index_of(&i.rule),
                    "level": i.level.as_str(),
                    "message": {"text": format!("{}{}", sarif_text(i), policy_suffix(i))},
                    "locations": [location(i.file.as_deref().unwrap_or(&f.name), i.line.max(1), None)],
                    "properties": properties,
                }));
            }
        }
    }
    let doc = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "stackgate",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// A finding's text on one line without its attribution (the text report names the source
/// once per rule), and the source; an item without parts is its message.
fn short_and_source(i: &Item) -> (String, Option<&str>) {
    match &i.text {
        Some(text) => (text.one_line(), Some(text.source.as_str())),
        None => (i.message.clone(), None),
    }
}

/// A finding's text on one line with its attribution (JUnit, which has no sources section);
/// an item without parts is its message.
fn attributed_line(i: &Item) -> String {
    match &i.text {
        Some(text) => format!(
            "{} (policy {}, rule {}; source: {})",
            text.one_line(),
            i.policy,
            i.rule,
            text.source
        ),
        None => i.message.clone(),
    }
}

/// A SARIF result's text: the first line (where, what, `Fix:`) and the why.
fn sarif_text(i: &Item) -> String {
    match &i.text {
        Some(text) if !text.why.is_empty() => format!("{} {}", text.first_line(), text.why),
        Some(text) => text.first_line(),
        None => i.message.clone(),
    }
}

/// The finding's code in the form `stackgate explain` reads: `<family>/<code>` for a code of
/// the item's rule family (codes are closed per family but not unique across families), the
/// code alone for an engine code (`mutation`, `oversized`, ...). Read from the item's
/// structured code, never from its message; `None` for exemptions and a face's own findings.
fn explain_code(i: &Item) -> Option<String> {
    let code = i.code?;
    Some(match crate::rules::RuleId::parse(&i.rule) {
        Some(rule) if rule.family().codes.contains(&code) => format!("{}/{code}", rule.as_str()),
        _ => code.to_owned(),
    })
}

/// ` (policy NAME)` when the policy's name differs from its rule's (a custom policy), which
/// the short message would otherwise lose.
fn policy_suffix(i: &Item) -> String {
    if i.policy == i.rule || i.message.starts_with("exempted from policy") {
        String::new()
    } else {
        format!(" (policy {})", i.policy)
    }
}

/// The SARIF rule of inputs skipped by design.
const SKIPPED_RULE: &str = "input-skipped";

fn location(file: &str, line: usize, column: Option<usize>) -> Value {
    let mut region = json!({"startLine": line});
    if let (Some(c), Some(r)) = (column, region.as_object_mut()) {
        r.insert("startColumn".to_owned(), json!(c));
    }
    json!({"physicalLocation": {"artifactLocation": {"uri": file}, "region": region}})
}

fn first_sentence(s: &str) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.find(". ") {
        Some(i) => flat[..=i].to_owned(),
        None => flat,
    }
}

/// JUnit XML: one test suite per input, one test case per object (plus one per input with
/// problems); failing findings are failures, input problems are errors, other findings go to
/// `system-out`.
pub fn junit(report: &Report) -> String {
    junit_as(report, &CHECK)
}

/// JUnit XML with the test-suites name of `face`.
pub fn junit_as(report: &Report, face: &Face) -> String {
    let mut suites = String::new();
    let (mut total_tests, mut total_failures, mut total_errors) = (0, 0, 0);
    for f in &report.files {
        let mut cases = String::new();
        let (mut tests, mut failures, mut errors, mut skipped) = (0, 0, 0, 0);
        if let Some(reason) = &f.skipped {
            tests += 1;
            skipped += 1;
            let _ = writeln!(
                cases,
                "    <testcase classname=\"{}\" name=\"read input\">\n      <skipped message=\"{}\"/>\n    </testcase>",
                xml(&f.name),
                xml(reason)
            );
        }
        if let Some(note) = &f.template {
            tests += 1;
            skipped += 1;
            let _ = writeln!(
                cases,
                "    <testcase classname=\"{}\" name=\"template\">\n      <skipped message=\"{}\"/>\n    </testcase>",
                xml(&f.name),
                xml(note)
            );
        }
        if !f.problems.is_empty() {
            tests += 1;
            errors += 1;
            let body: Vec<String> = f
                .problems
                .iter()
                .map(|p| format!("{}:{}:{}: {}", f.name, p.line, p.column, p.message))
                .collect();
            let _ = write!(
                cases,
                "    <testcase classname=\"{}\" name=\"read input\">\n      <error type=\"input-error\" message=\"{}\">{}</error>\n    </testcase>\n",
                xml(&f.name),
                xml(&f
                    .problems
                    .first()
                    .map(|p| p.message.clone())
                    .unwrap_or_default()),
                xml(&body.join("\n"))
            );
        }
        for o in &f.objects {
            tests += 1;
            let name = if !face.lines {
                o.object.clone()
            } else {
                format!("{} (line {})", o.object, o.line)
            };
            let _ = write!(
                cases,
                "    <testcase classname=\"{}\" name=\"{}\"",
                xml(&f.name),
                xml(&name)
            );
            let failing: Vec<&Item> = o.items.iter().filter(|i| report.failing(i.level)).collect();
            let other: Vec<&Item> = o
                .items
                .iter()
                .filter(|i| !report.failing(i.level))
                .collect();
            if failing.is_empty() && other.is_empty() {
                cases.push_str("/>\n");
                continue;
            }
            cases.push_str(">\n");
            // One line per item, as the text report writes it (with the attribution).
            let line = |i: &Item| {
                format!(
                    "{}: {} [{}] {}",
                    at(face, i.file.as_deref().unwrap_or(&f.name), i.line),
                    i.level.as_str(),
                    tag(i),
                    attributed_line(i)
                )
            };
            if let Some(first) = failing.first() {
                failures += 1;
                let body: Vec<String> = failing.iter().map(|i| line(i)).collect();
                let _ = writeln!(
                    cases,
                    "      <failure type=\"{}\" message=\"{}\">{}</failure>",
                    xml(&first.rule),
                    xml(&format!(
                        "{} finding(s); first: [{}] {}line {}",
                        failing.len(),
                        tag(first),
                        first
                            .file
                            .as_deref()
                            .map(|f| format!("{f} "))
                            .unwrap_or_default(),
                        first.line
                    )),
                    xml(&body.join("\n"))
                );
            }
            if !other.is_empty() {
                let body: Vec<String> = other.iter().map(|i| line(i)).collect();
                let _ = writeln!(
                    cases,
                    "      <system-out>{}</system-out>",
                    xml(&body.join("\n"))
                );
            }
            cases.push_str("    </testcase>\n");
        }
        total_tests += tests;
        total_failures += failures;
        total_errors += errors;
        // `skipped` only where something was, so reports without skips read as before.
        let skipped = if skipped > 0 {
            format!(" skipped=\"{skipped}\"")
        } else {
            String::new()
        };
        let _ = write!(
            suites,
            "  <testsuite name=\"{}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\"{skipped}>\n{cases}  </testsuite>\n",
            xml(&f.name)
        );
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{}\" tests=\"{total_tests}\" failures=\"{total_failures}\" errors=\"{total_errors}\">\n{suites}</testsuites>\n",
        xml(face.command)
    )
}

/// XML text/attribute escaping; characters XML 1.0 cannot carry become U+FFFD.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The tag a finding's line carries: `rule/code` (what `stackgate explain` takes), or the rule
/// alone for a finding without a code.
fn tag(item: &Item) -> String {
    match item.code {
        Some(code) => format!("{}/{code}", item.rule),
        None => item.rule.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escaping() {
        assert_eq!(xml("a<b>&\"'\u{1}"), "a&lt;b&gt;&amp;&quot;&apos;\u{fffd}");
    }
}
