//! `stackgate explain CODE`: the full explanation of a finding code, for a reader who saw the
//! code in a report or the first line of a message and wants the rest: what the rule family
//! prevents and why, the policies that run it (mode and exemption), the message stackgate gives
//! for the family's documentation example when that example produces this code (what, where,
//! why, fix, exemption), and the upstream sources.
//!
//! Codes are closed per family ([`crate::rules::Family::codes`]) but not unique across families
//! (`invalid`, `unreadable`, `ovn-lb-method`), so a code is written `<family>/<code>` (or
//! `<policy>/<code>`); a bare code is accepted when one family has it, and a family or policy
//! named alone (the tag `check` prints) explains the family and lists its codes. The engine's own codes
//! (mutation, oversized, values-unseen, values-key-missing, more-findings) are explained too.
//! Everything is read from the registry and the effective policy set, and the example runs the
//! same engine as `stackgate rules` (`docs/rules.md`).

use std::fmt::Write as _;

use clap::Args;
use kube::core::{DynamicObject, GroupVersionKind};

use super::PolicyArgs;
use crate::engine::{self, Engine, Finding, Operation, Subject};
use crate::rules::{FAMILIES, Family};

/// Arguments of `stackgate explain`.
#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// The finding code: `<family>/<code>` (e.g. `serial-lb-api-calls/false`), `<policy>/<code>`,
    /// or a code alone when only one family has it; a family or policy alone explains the
    /// family and lists its codes.
    #[arg(value_name = "CODE")]
    pub code: String,
    /// Where policies come from.
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Why a code could not be explained.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExplainError {
    /// No family, policy or engine code matches.
    #[error("unknown finding code {code:?}; {}", suggestions(close))]
    Unknown {
        /// What was asked.
        code: String,
        /// Known codes close to it (all codes when none is close).
        close: Vec<String>,
    },
    /// More than one family reports this bare code.
    #[error("{code:?} is a code of more than one rule family; name one: {}", candidates.join(", "))]
    Ambiguous {
        /// What was asked.
        code: String,
        /// The qualified codes it may mean.
        candidates: Vec<String>,
    },
}

fn suggestions(close: &[String]) -> String {
    format!("did you mean one of: {}", close.join(", "))
}

/// The engine's own codes (not a family's), with what they mean.
const ENGINE_CODES: &[(&str, &str)] = &[
    (
        engine::CODE_MUTATION,
        "A change the mutating webhook makes (or `check --fix` writes): the patch adds or sets a \
         setting a policy requires. Reported as a note; nothing to fix.",
    ),
    (
        engine::CODE_OVERSIZED,
        "A cloud config (over 256 KiB) or CCM values text (over 64 KiB) larger than stackgate \
         reads: no rule ran on it. Split or shorten it; the CCM's own files are a few KiB.",
    ),
    (
        engine::CODE_UNSEEN,
        "The CCM chart's values come from objects or files this evaluation cannot see (a Flux \
         HelmRelease's spec.valuesFrom, an Argo CD helm.valueFiles): no rule ran on them. \
         `stackgate check` over the repository that holds them resolves them; in the cluster, \
         label the values ConfigMap or Secret stackgate.dev/ccm-values=<key> so the webhook \
         checks it where it is written.",
    ),
    (
        engine::CODE_VALUES_KEY_MISSING,
        "A ConfigMap or Secret labelled stackgate.dev/ccm-values=<key> has no data key <key>: \
         the label names the key that holds the CCM chart's values. Fix the label or the key.",
    ),
    (
        engine::CODE_EXEMPTION_NOT_ALLOWED,
        "An object carries a policy's exemption annotation (stackgate.dev/exempt.<policy>) that \
         the webhook did not apply: the policy's exemptions.annotation lists who may exempt, the \
         requester is not among them, and the stored object did not carry the same annotation \
         already. The policy applies as if the annotation were absent, and in enforce mode the \
         write is refused even where the policy found nothing (stored, the annotation would \
         count on every later update). Remove it, or have a listed group or user set it.",
    ),
    (
        engine::CODE_EXEMPTION_UNVERIFIED,
        "`check` or `audit` found a policy's exemption annotation but cannot know who set it, \
         and the policy's exemptions.annotation.unverified is `apply` (the default unless \
         anyone may exempt): the policy applies as if the annotation were absent, as the \
         webhook does for a requester who may not exempt. Have a listed group or user set it \
         in the cluster, or set `unverified: honour` in the policy.",
    ),
    (
        engine::CODE_MORE,
        "More findings than stackgate lists one by one in one answer (it caps each list): the \
         rest are counted in this finding. Fix the listed ones and run again to see the others.",
    ),
];

/// The explanation of `code` under `engine`'s policy set, as plain text.
pub fn explain(engine: &Engine, code: &str) -> Result<String, ExplainError> {
    let code = code.trim();
    // An engine code is explained alone or behind the rule it was reported for (the tag
    // `check` prints: `serial-lb-api-calls/mutation`).
    let engine_code = code.rsplit_once('/').map_or(code, |(_, c)| c);
    if let Some((code, text)) = ENGINE_CODES.iter().find(|(c, _)| *c == engine_code) {
        return Ok(format!(
            "{code} (a code of the engine, not of one rule family)\n\n{}\n",
            wrap(text, "  ")
        ));
    }
    // `code` of None: a family or policy named alone (the tag `check` prints) is explained as
    // the family, its policies and every code it reports.
    let (family, code) = resolve(engine, code)?;
    Ok(render(engine, family, code))
}

/// The family named `name`, or the family of the policy named `name`.
fn family_named(engine: &Engine, name: &str) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.id.as_str() == name)
        .or_else(|| {
            engine
                .policies()
                .policies
                .iter()
                .find(|p| p.name == name)
                .map(|p| p.rule.family())
        })
}

/// The family and the code (the registry's own `'static` copy) that `asked` names; no code
/// when `asked` names a family or a policy alone.
fn resolve(
    engine: &Engine,
    asked: &str,
) -> Result<(&'static Family, Option<&'static str>), ExplainError> {
    let family_named = |name: &str| family_named(engine, name);
    if let Some((prefix, code)) = asked.rsplit_once('/') {
        if let Some(family) = family_named(prefix)
            && let Some(code) = family.codes.iter().copied().find(|c| *c == code)
        {
            return Ok((family, Some(code)));
        }
    } else if let Some(family) = family_named(asked) {
        return Ok((family, None));
    } else {
        let owners: Vec<&'static Family> = FAMILIES
            .iter()
            .copied()
            .filter(|f| f.codes.contains(&asked))
            .collect();
        match owners.as_slice() {
            [family] => {
                let code = family.codes.iter().copied().find(|c| *c == asked);
                if let Some(code) = code {
                    return Ok((family, Some(code)));
                }
            }
            [] => {}
            many => {
                return Err(ExplainError::Ambiguous {
                    code: asked.to_owned(),
                    candidates: many.iter().map(|f| qualified(f, asked)).collect(),
                });
            }
        }
    }
    Err(ExplainError::Unknown {
        code: asked.to_owned(),
        close: close_codes(asked),
    })
}

fn qualified(family: &Family, code: &str) -> String {
    format!("{}/{code}", family.id.as_str())
}

/// Every known code, qualified, then the engine's.
fn all_codes() -> Vec<String> {
    FAMILIES
        .iter()
        .flat_map(|f| f.codes.iter().map(move |c| qualified(f, c)))
        .chain(ENGINE_CODES.iter().map(|(c, _)| (*c).to_owned()))
        .collect()
}

/// Known codes within a small edit distance of `asked` (comparing the code part too, so a
/// misspelt bare code finds its qualified forms), or sharing it as a part; all codes when none
/// is close.
fn close_codes(asked: &str) -> Vec<String> {
    let asked_lower = asked.to_ascii_lowercase();
    let asked_code = asked_lower.rsplit('/').next().unwrap_or(&asked_lower);
    let limit = (asked_code.chars().count() / 3).max(2);
    let all = all_codes();
    let mut scored: Vec<(usize, &String)> = all
        .iter()
        .filter_map(|known| {
            let code = known.rsplit('/').next().unwrap_or(known);
            let d = edit_distance(&asked_lower, known).min(edit_distance(asked_code, code));
            let related =
                !asked_code.is_empty() && (code.contains(asked_code) || asked_code.contains(code));
            (d <= limit || related).then_some((d, known))
        })
        .collect();
    if scored.is_empty() {
        return all;
    }
    scored.sort();
    scored.into_iter().map(|(_, c)| c.clone()).collect()
}

/// Levenshtein distance over chars (codes are short: O(n·m) is nothing).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The explanation of `code` of `family`, or of the family itself when `code` is None (then
/// every code is listed with the command that explains it, and no example is shown).
fn render(engine: &Engine, family: &'static Family, code: Option<&'static str>) -> String {
    let mut out = String::new();
    let id = family.id.as_str();
    match code {
        Some(code) => {
            let _ = writeln!(out, "{id}/{code}\n");
            let _ = writeln!(
                out,
                "Rule family {id}; its codes: {}.",
                family.codes.join(", ")
            );
        }
        None => {
            let _ = writeln!(out, "{id} (a rule family)\n");
            let _ = writeln!(
                out,
                "Its codes (`stackgate explain {id}/<code>` explains each, with an example):"
            );
            for c in family.codes {
                let _ = writeln!(out, "  - {id}/{c}");
            }
        }
    }
    let policies: Vec<_> = engine
        .policies()
        .policies
        .iter()
        .filter(|p| p.rule == family.id)
        .collect();
    if policies.is_empty() {
        let _ = writeln!(
            out,
            "No policy of the effective set runs this family, so stackgate reports nothing with \
             this code."
        );
    }
    for policy in &policies {
        let _ = writeln!(
            out,
            "\nPolicy {} (mode {}; exemption: {})\n\n{}",
            policy.name,
            policy.mode.as_str(),
            match (policy.exemption_annotation(), &policy.exemptions.annotation) {
                (Some(a), Some(rules)) => format!(
                    "{} annotates the object with {a}: \"<reason>\"",
                    rules.who()
                ),
                _ => "not allowed".to_owned(),
            },
            wrap(policy.description.trim(), "  "),
        );
        let examples: Vec<Finding> = match code {
            Some(code) => example_findings(engine, family)
                .into_iter()
                .filter(|f| f.policy == policy.name && f.code == code)
                .collect(),
            None => Vec::new(),
        };
        match examples.first() {
            Some(f) => {
                let _ = writeln!(
                    out,
                    "\n  Example: what stackgate answers for the family's documentation input \
                     (docs/rules.md):\n"
                );
                let text = &f.text;
                let mut parts: Vec<(&str, String)> = Vec::new();
                if let Some(location) = &text.location {
                    parts.push(("Where", location.clone()));
                }
                parts.push(("What", text.what.clone()));
                if !text.fix.is_empty() {
                    parts.push(("Fix", text.fix.clone()));
                }
                if !text.why.is_empty() {
                    parts.push(("Why", text.why.clone()));
                }
                for note in text.unseen_overlay.iter().chain(&text.notes) {
                    parts.push(("Note", note.clone()));
                }
                if let Some(key) = &text.exemption {
                    parts.push(("Exempt", text.exemption_hint(key)));
                }
                for (label, part) in parts {
                    let _ = writeln!(out, "{}", wrap(&format!("{label}: {part}"), "    "));
                }
            }
            None if code.is_some() => {
                let _ = writeln!(
                    out,
                    "\n  The family's documentation example reports another code; \
                     docs/rules.md#{} shows it.",
                    policy.name
                );
            }
            None => {}
        }
        let sources: Vec<&str> = policy
            .source
            .split("; ")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let _ = writeln!(out, "\n  Sources:");
        for s in sources {
            let _ = writeln!(out, "  - {s}");
        }
    }
    out
}

/// Every denial, warning and audit finding of `family`'s documentation example under
/// `engine`'s policies: the input `stackgate rules` runs ([`engine::docs`]).
pub fn example_findings(engine: &Engine, family: &Family) -> Vec<Finding> {
    let Some(example) = (family.example)() else {
        return Vec::new();
    };
    let Ok(object) = serde_json::from_value::<DynamicObject>(example.object) else {
        return Vec::new();
    };
    let Some(types) = object.types.as_ref() else {
        return Vec::new();
    };
    let (group, version) = types
        .api_version
        .split_once('/')
        .unwrap_or(("", &types.api_version));
    let kind = GroupVersionKind::gvk(group, version, &types.kind);
    let mut subject = Subject::create(&kind, &object);
    subject.dry_run = false;
    if example.operation == Operation::Delete {
        subject.operation = Operation::Delete;
        subject.object = None;
        subject.old_object = Some(&object);
    }
    let verdict = engine.evaluate_with(&subject, &example.facts);
    verdict
        .denials
        .into_iter()
        .chain(verdict.warnings)
        .chain(verdict.audits)
        .filter(|f| f.rule == family.id)
        .collect()
}

/// `text` wrapped at 100 columns, each line indented by `indent`.
fn wrap(text: &str, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > 100 {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = write!(out, "{indent}{line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("false", "false"), 0);
        assert_eq!(edit_distance("flase", "false"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn wrapping_keeps_every_word() {
        let text = "word ".repeat(60);
        let wrapped = wrap(&text, "  ");
        assert!(
            wrapped
                .lines()
                .all(|l| l.len() <= 100 && l.starts_with("  "))
        );
        assert_eq!(wrapped.split_whitespace().count(), 60);
    }
}
