//! Masked unified diffs: a fix shown without a Secret's data or a credential value. File
//! diffs mask credential-like keys and every line of a Secret object; cloud configs decoded
//! from a Secret are shown with every value masked.

use std::fmt::Write as _;

use json_patch::PatchOperation;
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::engine::{Engine, FoundConfig, Subject};

/// Whether a key names a credential (its value is never shown).
pub fn sensitive_key(key: &str) -> bool {
    let k = key.trim().trim_matches(['"', '\'']).to_ascii_lowercase();
    ["password", "secret", "token", "credential-secret"]
        .iter()
        .any(|s| k.contains(s))
}

/// What a masked diff may show.
#[derive(Debug, Clone, Copy)]
pub enum MaskMode<'a> {
    /// A manifest or values file as written: credential-like values are masked, so is the
    /// line after a credential key with an empty value (in gcfg that line is a bare key: a
    /// value continued by mistake), and every line inside a Secret object.
    File {
        /// 1-based, inclusive line ranges of the old text that belong to Secret objects.
        secret_lines: &'a [(usize, usize)],
    },
    /// A cloud config decoded from a Secret: every value is masked, and every name that is
    /// not one the CCM knows (a bare key, an unknown key, an unknown section, a subsection
    /// name, a comment), because a value continued on the next line reads as such a name.
    /// Added lines (the webhook's own edits) show the values of known non-credential keys.
    SecretIni,
}

/// Longest diff line shown, in characters; the rest of a longer line is summarised (a single
/// multi-megabyte scalar would otherwise be printed whole, twice).
pub const MAX_DIFF_LINE_CHARS: usize = 400;

/// A unified diff of `old` → `new` (3 lines of context) with every line masked per `mode`.
pub fn masked_diff(old: &str, new: &str, label: &str, mode: MaskMode<'_>) -> String {
    let diff = similar::TextDiff::from_lines(old, new);
    let old_lines = diff.old_slices();
    let new_lines = diff.new_slices();
    let (old_sections, new_sections) = match mode {
        MaskMode::SecretIni => (ini_sections(old_lines), ini_sections(new_lines)),
        MaskMode::File { .. } => (Vec::new(), Vec::new()),
    };
    let mut out = String::new();
    for group in diff.grouped_ops(3) {
        if group.is_empty() {
            continue;
        }
        if out.is_empty() {
            let _ = writeln!(out, "--- a/{label}\n+++ b/{label}");
        }
        let _ = writeln!(out, "{}", similar::udiff::UnifiedHunkHeader::new(&group));
        for op in &group {
            for change in diff.iter_changes(op) {
                let (mark, line) = match (change.tag(), change.old_index(), change.new_index()) {
                    (similar::ChangeTag::Insert, _, Some(i)) => {
                        ("+", mask_at(new_lines, i, mode, &new_sections, true))
                    }
                    (tag, Some(i), _) => {
                        let mark = if tag == similar::ChangeTag::Delete {
                            "-"
                        } else {
                            " "
                        };
                        (mark, mask_at(old_lines, i, mode, &old_sections, false))
                    }
                    _ => continue,
                };
                out.push_str(mark);
                out.push_str(&shorten(&line));
                if change.missing_newline() {
                    out.push_str("\n\\ No newline at end of file\n");
                }
            }
        }
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Masked diffs of each cloud config that `patch` changes, with the pointer of its site: the
/// sites of `before` (the object as evaluated), found again in `written` (the object as
/// written, which the patch applies to) with the patch applied, matched by pointer, and
/// diffed when their text changed. The sites are the ones `engine` finds ([`Engine::configs`]).
/// `label` and `mode` say how each site's diff is headed and masked. Empty when the patch
/// does not apply.
pub fn site_diffs(
    gvk: &GroupVersionKind,
    before: &DynamicObject,
    written: &Value,
    patch: &[PatchOperation],
    engine: &Engine,
    label: impl Fn(&FoundConfig) -> String,
    mode: impl Fn(&FoundConfig) -> MaskMode<'static>,
) -> Vec<(String, String)> {
    let mut patched = written.clone();
    if json_patch::patch(&mut patched, patch).is_err() {
        return Vec::new();
    }
    let Ok(after_obj) = serde_json::from_value::<DynamicObject>(patched) else {
        return Vec::new();
    };
    let after = engine.configs(&Subject::create(gvk, &after_obj));
    let mut out = Vec::new();
    for site in engine.configs(&Subject::create(gvk, before)) {
        let Some(new) = after.iter().find(|s| s.pointer() == site.pointer()) else {
            continue;
        };
        let (Ok(old_text), Ok(new_text)) = (&site.text, &new.text) else {
            continue;
        };
        if old_text == new_text {
            continue;
        }
        let diff = masked_diff(
            old_text.expose(),
            new_text.expose(),
            &label(&site),
            mode(&site),
        );
        out.push((site.pointer(), diff));
    }
    out
}

/// Line `i` of `lines` (with its line ending) as a masked diff may show it. `added`: a line
/// only the new text has (the webhook's edit).
fn mask_at(
    lines: &[&str],
    i: usize,
    mode: MaskMode<'_>,
    sections: &[Option<usize>],
    added: bool,
) -> String {
    let line = lines.get(i).copied().unwrap_or_default();
    match mode {
        MaskMode::SecretIni => {
            let section = sections
                .get(i)
                .copied()
                .flatten()
                .and_then(|h| lines.get(h))
                .and_then(|h| header_name(h))
                .unwrap_or_default();
            mask_ini_line(line, section, added)
        }
        MaskMode::File { secret_lines } => {
            let number = i + 1;
            let in_secret = !added
                && secret_lines
                    .iter()
                    .any(|(a, b)| (*a..=*b).contains(&number));
            if in_secret {
                return mask_secret_yaml_line(line);
            }
            let continued = i
                .checked_sub(1)
                .and_then(|p| lines.get(p))
                .is_some_and(|prev| empty_credential(prev));
            if continued && !line.trim().is_empty() {
                return masked_whole(line);
            }
            mask_line(line, false)
        }
    }
}

/// Cuts a line longer than [`MAX_DIFF_LINE_CHARS`] characters, saying how much is not shown.
fn shorten(line: &str) -> String {
    let body = line.trim_end_matches(['\n', '\r']);
    let ending = &line[body.len()..];
    match body.char_indices().nth(MAX_DIFF_LINE_CHARS) {
        Some((cut, _)) => format!(
            "{}… ({} more bytes not shown){ending}",
            &body[..cut],
            body.len() - cut
        ),
        None => line.to_owned(),
    }
}

/// The line's indentation and `***`, with its line ending.
fn masked_whole(line: &str) -> String {
    let body = line.trim_end_matches(['\n', '\r']);
    let ending = &line[body.len()..];
    let indent = &body[..body.len() - body.trim_start().len()];
    format!("{indent}***{ending}")
}

/// Whether a line sets a credential-like key to nothing (`password =`, `password:`), so the
/// next line may be its value, written one line too low.
fn empty_credential(line: &str) -> bool {
    let body = line.trim();
    let Some(i) = body.find(['=', ':']) else {
        return false;
    };
    let key = body[..i].trim().trim_start_matches("- ");
    let value = body[i + 1..].trim();
    value.is_empty() && sensitive_key(key)
}

/// A line inside a Secret object of a manifest: every line is masked but blank lines,
/// document markers and the few structure lines every Secret has. Line by line, a mapping key
/// cannot be told from text inside a block scalar (`S3cr3t:` can be a continued value), so
/// no other key is shown.
fn mask_secret_yaml_line(line: &str) -> String {
    const STRUCTURE: &[&str] = &[
        "---",
        "...",
        "apiVersion: v1",
        "kind: Secret",
        "metadata:",
        "data:",
        "stringData:",
    ];
    let body = line.trim();
    if body.is_empty() || STRUCTURE.contains(&body) {
        return line.to_owned();
    }
    masked_whole(line)
}

/// For each line of a gcfg text, the index of the section header line it is under.
fn ini_sections(lines: &[&str]) -> Vec<Option<usize>> {
    let mut current = None;
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if l.trim_start().starts_with('[') {
                current = Some(i);
            }
            current
        })
        .collect()
}

/// The section name of a `[name]` or `[name "sub"]` header line.
fn header_name(line: &str) -> Option<&str> {
    let inner = line.trim().strip_prefix('[')?;
    let inner = &inner[..inner.find(']').unwrap_or(inner.len())];
    inner.split_whitespace().next()
}

/// One line of a cloud config from a Secret, masked: see [`MaskMode::SecretIni`].
fn mask_ini_line(line: &str, section: &str, added: bool) -> String {
    use crate::cloudconf::schema;
    let body = line.trim_end_matches(['\n', '\r']);
    let ending = &line[body.len()..];
    let trimmed = body.trim_start();
    let indent = &body[..body.len() - trimmed.len()];
    if trimmed.is_empty() {
        return line.to_owned();
    }
    if let Some(c) = trimmed.chars().next().filter(|c| matches!(c, '#' | ';')) {
        // A comment can hold an old credential; that there is one is enough to show.
        return format!("{indent}{c} ***{ending}");
    }
    if trimmed.starts_with('[') {
        let name = header_name(trimmed).unwrap_or_default();
        let has_sub = trimmed.contains('"');
        return match schema::find_section(name) {
            Some(_) if has_sub => format!("{indent}[{name} \"***\"]{ending}"),
            Some(_) => format!("{indent}[{name}]{ending}"),
            None => format!("{indent}[***]{ending}"),
        };
    }
    let (key, rest) = match trimmed.find('=') {
        Some(i) => (trimmed[..i].trim(), Some(&trimmed[..=i])),
        None => (trimmed.trim(), None),
    };
    let known = schema::find_key(section, key);
    match (known, rest) {
        // A known key with its value: the name is safe, the value shown only for the webhook's
        // own edits of non-credential keys.
        (Some(spec), Some(upto)) => {
            if (added && !spec.secret) || trimmed[upto.len()..].trim().is_empty() {
                line.to_owned()
            } else {
                format!("{indent}{upto} ***{ending}")
            }
        }
        // A known key written bare (gcfg reads `true` for a bool).
        (Some(_), None) => line.to_owned(),
        // Anything else names nothing the CCM reads, so it can be text that belongs to a value.
        (None, Some(_)) => format!("{indent}*** = ***{ending}"),
        (None, None) => format!("{indent}***{ending}"),
    }
}

/// Masks the value of a `key = value` (INI) or `key: value` (YAML) line when the key is
/// credential-like, or always with `all`.
pub fn mask_line(line: &str, all: bool) -> String {
    let body = line.trim_end_matches(['\n', '\r']);
    let ending = &line[body.len()..];
    let sep = match (body.find('='), body.find(':')) {
        (Some(e), Some(c)) => Some(e.min(c)),
        (e, c) => e.or(c),
    };
    let Some(i) = sep else {
        return line.to_owned();
    };
    let key = body[..i].trim().trim_start_matches("- ");
    let value = body[i + 1..].trim();
    let key_like =
        !key.is_empty() && !key.contains(char::is_whitespace) && !key.starts_with(['#', ';', '[']);
    if !key_like
        || value.is_empty()
        || value == "|"
        || value == "|-"
        || value == ">"
        || !(all || sensitive_key(key))
    {
        return line.to_owned();
    }
    format!("{} ***{ending}", &body[..=i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_credentials_in_ini_and_yaml_lines() {
        assert_eq!(mask_line("password = hunter2\n", false), "password = ***\n");
        assert_eq!(
            mask_line("    application-credential-secret: abc # c\n", false),
            "    application-credential-secret: ***\n"
        );
        assert_eq!(
            mask_line("region = RegionOne\n", false),
            "region = RegionOne\n"
        );
        assert_eq!(mask_line("region = RegionOne\n", true), "region = ***\n");
        assert_eq!(mask_line("[Global]\n", true), "[Global]\n");
        assert_eq!(
            mask_line("auth-url: https://k:5000/v3\n", false),
            "auth-url: https://k:5000/v3\n"
        );
    }

    #[test]
    fn diffs_never_show_secret_values() {
        let old = "[Global]\npassword = hunter2\n[LoadBalancer]\nsubnet-id = s\n";
        let new = "[Global]\npassword = hunter2\n[LoadBalancer]\nsubnet-id = s\nprovider-requires-serial-api-calls = true\n";
        let file = MaskMode::File { secret_lines: &[] };
        let d = masked_diff(old, new, "x", file);
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("+provider-requires-serial-api-calls = true"));
        let d = masked_diff(old, new, "x", MaskMode::SecretIni);
        assert!(!d.contains("= s\n"), "{d}");
        assert!(
            d.contains("+provider-requires-serial-api-calls = true"),
            "{d}"
        );
    }

    #[test]
    fn secret_diffs_mask_bare_keys_unknown_keys_sections_and_comments() {
        let old = "[Global]\npassword =\nCANARY-bare\nCANARY-key = v\n# CANARY comment\n[CANARY-section]\n[LoadBalancerClass \"CANARY-sub\"]\n[LoadBalancer]\nsubnet-id = s\n";
        // Every old line is removed, so every one is shown.
        let new = "[LoadBalancer]\nprovider-requires-serial-api-calls = true\nCANARY-added\n";
        let d = masked_diff(old, new, "x", MaskMode::SecretIni);
        assert!(!d.contains("CANARY"), "{d}");
        for shown in [
            "\n-[Global]\n",
            "\n-password =\n",
            "\n-***\n",
            "\n-*** = ***\n",
            "\n-# ***\n",
            "\n-[***]\n",
            "\n-[LoadBalancerClass \"***\"]\n",
            "\n-subnet-id = ***\n",
            "\n+provider-requires-serial-api-calls = true\n",
            "\n+***\n",
        ] {
            assert!(d.contains(shown), "{shown:?} in {d}");
        }
    }

    #[test]
    fn file_diffs_mask_continued_credentials_and_secret_objects() {
        let old = "a: 1\nb: |\n  [Global]\n  password =\n  CANARY-continued\n---\napiVersion: v1\nkind: Secret\nstringData:\n  cloud.conf: |\n    CANARY-in-secret\n---\nc: 1\n";
        let new = old.replace("c: 1\n", "c: 1\nd: 2\n");
        let d = masked_diff(
            old,
            &new,
            "x",
            MaskMode::File {
                secret_lines: &[(7, 12)],
            },
        );
        assert!(!d.contains("CANARY"), "{d}");
        assert!(d.contains("+d: 2"), "{d}");
        let d = masked_diff(
            old,
            &old.replace("a: 1", "a: 2"),
            "x",
            MaskMode::File { secret_lines: &[] },
        );
        assert!(!d.contains("CANARY"), "{d}");
    }

    #[test]
    fn long_diff_lines_are_cut() {
        let old = format!("a: \"{}\"\n", "x".repeat(10_000));
        let new = format!("a: \"{}y\"\n", "x".repeat(10_000));
        let d = masked_diff(&old, &new, "x", MaskMode::File { secret_lines: &[] });
        assert!(d.len() < 2_000, "{}", d.len());
        assert!(d.contains("more bytes not shown"), "{d}");
    }

    /// A Secret at the default site (`kube-system/cloud-config`, key `cloud.conf`).
    fn secret(conf: &str) -> Value {
        use base64::Engine as _;
        serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cloud-config", "namespace": "kube-system"},
            "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(conf)}})
    }

    #[test]
    fn site_diffs_diff_each_config_the_patch_changes_masked_with_its_pointer() {
        let engine = Engine::new(crate::policy::PolicySet::embedded().unwrap());
        let gvk = GroupVersionKind::gvk("", "v1", "Secret");
        let old = "[Global]\npassword = hunter2\n[LoadBalancer]\nsubnet-id = s\n";
        let new = format!("{old}provider-requires-serial-api-calls = true\n");
        let written = secret(old);
        let before: DynamicObject = serde_json::from_value(written.clone()).unwrap();
        let replace = |value: &Value| -> Vec<PatchOperation> {
            serde_json::from_value(serde_json::json!([{"op": "replace",
                "path": "/data/cloud.conf", "value": value["data"]["cloud.conf"]}]))
            .unwrap()
        };
        let diffs = |patch: &[PatchOperation]| {
            site_diffs(
                &gvk,
                &before,
                &written,
                patch,
                &engine,
                |site| format!("{} {}", site.object, site.location),
                |_| MaskMode::SecretIni,
            )
        };

        let changed = diffs(&replace(&secret(&new)));
        assert_eq!(changed.len(), 1, "{changed:?}");
        let (pointer, diff) = &changed[0];
        assert_eq!(pointer, "/data/cloud.conf");
        assert!(
            diff.starts_with("--- a/Secret kube-system/cloud-config data[\"cloud.conf\"]\n"),
            "{diff}"
        );
        assert!(
            diff.contains("\n+provider-requires-serial-api-calls = true\n"),
            "{diff}"
        );
        assert!(
            !diff.contains("hunter2") && !diff.contains("= s\n"),
            "{diff}"
        );

        // The same text written again, a patch elsewhere, a patch that does not apply: none.
        assert!(diffs(&replace(&secret(old))).is_empty());
        let label: Vec<PatchOperation> = serde_json::from_value(serde_json::json!([{"op": "add",
            "path": "/metadata/labels", "value": {"a": "b"}}]))
        .unwrap();
        assert!(diffs(&label).is_empty());
        let missing: Vec<PatchOperation> = serde_json::from_value(serde_json::json!([{"op":
            "replace", "path": "/spec/x", "value": 1}]))
        .unwrap();
        assert!(diffs(&missing).is_empty());
    }
}
