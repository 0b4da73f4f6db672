//! Chart references as Helm, Flux and Argo CD write them, and whether one names a chart
//! whose values carry a cloud config.

/// Whether a chart reference (`name`, `repo/name`, `./charts/name`, `oci://…/name`,
/// `https://…/name-1.2.3.tgz`) names one of `charts`.
///
/// The reference is normalised first, as the tools that fetch it read it: a URL's `?query`
/// and `#fragment` dropped (`….tgz?raw=true`), `%XX` escapes decoded, `.` and empty path
/// segments and `..` applied (an Argo CD path `charts/name/.`), an OCI `:tag` or `@digest`
/// dropped; an archive name `name-<version>.tgz` (`.tgz` and `.tar.gz` in any case, the
/// version with or without a leading `v`) names `name`.
pub fn chart_matches(reference: &str, charts: &[String]) -> bool {
    let Some(last) = chart_reference_name(reference) else {
        return false;
    };
    charts.iter().any(|c| {
        last == *c
            || archive_stem(&last)
                .and_then(|stem| stem.strip_prefix(c.as_str()))
                .and_then(|rest| rest.strip_prefix('-'))
                .map(|version| version.strip_prefix(['v', 'V']).unwrap_or(version))
                .is_some_and(|version| version.starts_with(|ch: char| ch.is_ascii_digit()))
    })
}

/// The last path segment of a chart reference, normalised (see [`chart_matches`]).
fn chart_reference_name(reference: &str) -> Option<String> {
    let reference = reference.trim();
    // A URL's query and fragment are not part of the file's name.
    let reference = reference.split(['?', '#']).next().unwrap_or_default();
    let mut segments: Vec<&str> = Vec::new();
    for segment in reference.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let last = segments.last()?;
    let last = percent_decoded(last);
    // An OCI reference's tag or digest (`name:2.31.1`, `name@sha256:…`).
    let name = last.split([':', '@']).next().unwrap_or_default();
    (!name.is_empty()).then(|| name.to_owned())
}

/// `name` without a `.tgz` or `.tar.gz` suffix in any case; None without one.
fn archive_stem(name: &str) -> Option<&str> {
    let lower = name.to_ascii_lowercase();
    [".tgz", ".tar.gz"]
        .iter()
        .find(|suffix| lower.ends_with(*suffix))
        .map(|suffix| &name[..name.len() - suffix.len()])
}

/// `%XX` escapes decoded (as a URL's path is); invalid escapes and non-UTF-8 results kept as
/// written.
fn percent_decoded(text: &str) -> String {
    if !text.contains('%') {
        return text.to_owned();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'%'));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}
