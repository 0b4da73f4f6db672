//! Chart references as Helm, Flux and Argo CD write them, and whether one names a chart
//! whose values carry a cloud config.

use std::borrow::Cow;

/// Whether a chart reference (`name`, `repo/name`, `./charts/name`, `oci://…/name`,
/// `https://…/name-1.2.3.tgz`) names one of `charts`.
///
/// The reference is read as a URL is (RFC 3986), as the tools that fetch it read it: the
/// `?query` and `#fragment` end the path at their first raw `?` or `#` (`….tgz?raw=true`; a
/// name only there names nothing), each `/` segment loses its `;parameters`, then is
/// `%XX`-decoded and split again at the slashes it decodes to (`charts%2Fname`), and `.`,
/// empty segments and `..` are applied (an Argo CD path `charts/name/.`, a trailing `/`,
/// `a//b`); an OCI `:tag` or `@digest` is dropped; an archive name `name-<version>.tgz`
/// (`.tgz` and `.tar.gz` in any case, the version with or without a leading `v`) names
/// `name`. The name itself is compared as written: chart names are lower case, OCI
/// repositories must be, and Helm looks names up case-sensitively. `scheme://authority` stays
/// a segment: only a reference with no path after it (`oci://<chart name>`) is named by it,
/// which fails closed and is what the generated admission policies read too (their test of a
/// reference must stay within this one).
pub fn chart_matches<C: AsRef<str>>(reference: &str, charts: &[C]) -> bool {
    let Some(last) = chart_reference_name(reference) else {
        return false;
    };
    charts.iter().map(AsRef::as_ref).any(|c| {
        *last == *c
            || archive_stem(&last)
                .and_then(|stem| stem.strip_prefix(c))
                .and_then(|rest| rest.strip_prefix('-'))
                .map(|version| version.strip_prefix(['v', 'V']).unwrap_or(version))
                .is_some_and(|version| version.starts_with(|ch: char| ch.is_ascii_digit()))
    })
}

/// The last path segment of a chart reference, normalised (see [`chart_matches`]). Borrowed
/// from `reference` unless the segment was `%XX`-decoded: every values place asks this of its
/// chart reference, several times per review.
fn chart_reference_name(reference: &str) -> Option<Cow<'_, str>> {
    // The common reference is a bare chart name: ASCII with no blank at either end and none
    // of the characters the steps below act on (`?#/;%:@`), so that it is one segment that
    // is its own name (unless `.` or `..`, which name nothing). Told in one pass over its
    // bytes rather than through the splits below.
    let bare = reference.bytes().all(|b| {
        b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'/' | b';' | b'%' | b':' | b'@')
    });
    if bare {
        return (!matches!(reference, "" | "." | "..")).then_some(Cow::Borrowed(reference));
    }
    parsed_reference_name(reference)
}

/// [`chart_reference_name`] of any reference, step by step.
fn parsed_reference_name(reference: &str) -> Option<Cow<'_, str>> {
    let reference = reference.trim();
    // A URL's query and fragment are not part of its path.
    let reference = reference.split(['?', '#']).next().unwrap_or_default();
    fn push<'a>(segments: &mut Vec<Cow<'a, str>>, segment: Cow<'a, str>) {
        match &*segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            _ => segments.push(segment),
        }
    }
    let mut segments: Vec<Cow<'_, str>> = Vec::new();
    for raw in reference.split('/') {
        // `;v=1`: path parameters are not part of the segment's name.
        let raw = raw.split(';').next().unwrap_or_default();
        if raw.contains('%') {
            for segment in percent_decoded(raw).split('/') {
                push(&mut segments, Cow::Owned(segment.to_owned()));
            }
        } else {
            // Nothing to decode, and `raw` holds no `/`: the segment is `raw` itself.
            push(&mut segments, Cow::Borrowed(raw));
        }
    }
    // An OCI reference's tag or digest (`name:2.31.1`, `name@sha256:…`).
    let name = match segments.pop()? {
        Cow::Borrowed(last) => Cow::Borrowed(last.split([':', '@']).next().unwrap_or_default()),
        Cow::Owned(last) => {
            Cow::Owned(last.split([':', '@']).next().unwrap_or_default().to_owned())
        }
    };
    (!name.is_empty()).then_some(name)
}

/// `name` without a `.tgz` or `.tar.gz` suffix in any case; None without one.
fn archive_stem(name: &str) -> Option<&str> {
    [".tgz", ".tar.gz"].iter().find_map(|suffix| {
        let stem = name.len().checked_sub(suffix.len())?;
        // The suffix is ASCII: a match ends the name in ASCII bytes, so `stem` is a
        // character boundary.
        name.as_bytes()
            .get(stem..)
            .filter(|tail| tail.eq_ignore_ascii_case(suffix.as_bytes()))
            .and_then(|_| name.get(..stem))
    })
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

/// The chart Giant Swarm ships the CCM in: an umbrella whose own top-level `cloudConfig` the
/// CCM subchart's `cloudConfig` helper renders into the cloud-config Secret
/// (giantswarm/cloud-provider-openstack-app at d98a895326464a83cfc36a139316ccb95d3de59d,
/// `helm/cloud-provider-openstack-app/templates/cloud-config-secret.yaml`). Its values have the
/// CCM chart's shape at their root.
pub const GIANT_SWARM_APP_CHART: &str = "cloud-provider-openstack-app";

#[cfg(test)]
mod tests {
    use super::*;

    const CCM: &str = "openstack-cloud-controller-manager";

    /// A bare name is told apart in one pass: what that gives is what the steps give.
    #[test]
    fn bare_names_are_named_as_the_steps_name_them() {
        let pieces = [
            "", "a", "ccm", ".", "..", " ", "\t", "\u{a0}", "\u{e9}", "?", "#", "/", ";", "%",
            "%2F", ":", "@", "-", "1.2.3", ".tgz", "~", "\u{7f}", "\u{1}",
        ];
        for a in pieces {
            for b in pieces {
                for c in ["", "x", "."] {
                    let reference = format!("{a}{b}{c}");
                    assert_eq!(
                        chart_reference_name(&reference),
                        parsed_reference_name(&reference),
                        "{reference:?}"
                    );
                }
            }
        }
        assert_eq!(chart_reference_name("ccm").as_deref(), Some("ccm"));
        assert_eq!(chart_reference_name(".."), None);
        assert!(chart_matches(
            "cloud-provider-openstack-app",
            &[GIANT_SWARM_APP_CHART]
        ));
    }

    /// Each reference form (issue 31 item 8b), with whether it names the CCM chart.
    #[test]
    fn reference_forms_are_read_as_urls() {
        let charts = vec![CCM.to_owned()];
        let table: &[(&str, bool)] = &[
            // oci://
            (
                "oci://registry.example/charts/openstack-cloud-controller-manager",
                true,
            ),
            (
                "oci://registry.example:5000/charts/openstack-cloud-controller-manager:2.31.1",
                true,
            ),
            (
                "oci://registry.example/openstack-cloud-controller-manager@sha256:0123abcd",
                true,
            ),
            (
                "OCI://REGISTRY.EXAMPLE/charts/openstack-cloud-controller-manager",
                true,
            ),
            // No path after the host: the host is taken as the chart (fails closed).
            ("oci://openstack-cloud-controller-manager", true),
            (
                "oci://registry.example/charts/other:openstack-cloud-controller-manager",
                false,
            ),
            // https://…/charts and archives
            (
                "https://example.com/charts/openstack-cloud-controller-manager",
                true,
            ),
            (
                "https://example.com/charts/openstack-cloud-controller-manager-2.31.1.tgz",
                true,
            ),
            ("https://example.com/charts", false),
            ("https://openstack-cloud-controller-manager/charts", false),
            // repo/chart
            ("cpo/openstack-cloud-controller-manager", true),
            ("openstack-cloud-controller-manager", true),
            ("openstack-cloud-controller-manager/x", false),
            // ?query and #fragment: stripped; a name only there names nothing
            (
                "https://example.com/openstack-cloud-controller-manager-2.31.1.tgz?raw=true",
                true,
            ),
            (
                "https://example.com/openstack-cloud-controller-manager#readme",
                true,
            ),
            (
                "https://example.com/index.yaml?chart=openstack-cloud-controller-manager",
                false,
            ),
            (
                "https://example.com/x.tgz#/openstack-cloud-controller-manager",
                false,
            ),
            (
                "https://example.com/?openstack-cloud-controller-manager",
                false,
            ),
            ("#openstack-cloud-controller-manager", false),
            // %2F and %2f: decoded, then split
            (
                "oci://registry.example/charts%2Fopenstack-cloud-controller-manager",
                true,
            ),
            (
                "oci://registry.example/charts%2fopenstack-cloud-controller-manager",
                true,
            ),
            (
                "https://example.com/a%2Fb%2Fopenstack-cloud-controller-manager-2.31.1.tgz",
                true,
            ),
            (
                "https://example.com/openstack-cloud-controller-manager%2Fx",
                false,
            ),
            (
                "https://example.com/openstack%2Dcloud%2Dcontroller%2Dmanager",
                true,
            ),
            (
                "https://example.com/x%3Fopenstack-cloud-controller-manager",
                false,
            ),
            // ;v=1 path parameters
            (
                "https://example.com/charts/openstack-cloud-controller-manager;v=1",
                true,
            ),
            (
                "https://example.com/openstack-cloud-controller-manager-2.31.1.tgz;v=1",
                true,
            ),
            (
                "https://example.com/charts;v=1/openstack-cloud-controller-manager",
                true,
            ),
            (
                "https://example.com/x;openstack-cloud-controller-manager",
                false,
            ),
            // trailing /, double slashes, dot segments
            (
                "https://example.com/charts/openstack-cloud-controller-manager/",
                true,
            ),
            ("charts//openstack-cloud-controller-manager//", true),
            (
                "https://example.com//openstack-cloud-controller-manager",
                true,
            ),
            ("charts/openstack-cloud-controller-manager/%2E", true),
            ("charts/openstack-cloud-controller-manager/x/%2E%2E", true),
            ("charts/openstack-cloud-controller-manager/%2E%2E", false),
            // uppercase: the name is compared as written (the scheme and host above are not)
            (
                "https://example.com/OPENSTACK-CLOUD-CONTROLLER-MANAGER",
                false,
            ),
            (
                "https://example.com/openstack-cloud-controller-manager-2.31.1.TGZ",
                true,
            ),
            // userinfo
            (
                "https://user:p%2Fss@example.com/openstack-cloud-controller-manager",
                true,
            ),
            (
                "https://user:pass@example.com/charts/openstack-cloud-controller-manager",
                true,
            ),
            (
                "https://openstack-cloud-controller-manager@example.com/charts",
                false,
            ),
            (
                "https://user:openstack-cloud-controller-manager@example.com/",
                false,
            ),
            // blanks around the reference
            ("  cpo/openstack-cloud-controller-manager\n", true),
            ("", false),
        ];
        for (reference, ccm) in table {
            assert_eq!(chart_matches(reference, &charts), *ccm, "{reference:?}");
        }
    }

    #[test]
    fn escapes_that_are_not_utf8_or_not_escapes_are_kept_as_written() {
        assert_eq!(percent_decoded("a%ZZb%2"), "a%ZZb%2");
        assert_eq!(percent_decoded("a%FFb"), "a%FFb");
        assert_eq!(percent_decoded("%41%62"), "Ab");
    }

    /// The archive suffix is found in any case, and only as a suffix, whatever the name's
    /// characters before it; the name keeps its own case.
    #[test]
    fn archive_stems_are_cut_in_any_case() {
        let table: &[(&str, Option<&str>)] = &[
            ("ccm-2.31.1.tgz", Some("ccm-2.31.1")),
            ("ccm-2.31.1.TGZ", Some("ccm-2.31.1")),
            ("Ccm-2.31.1.Tar.Gz", Some("Ccm-2.31.1")),
            ("é.tgz", Some("é")),
            (".tgz", Some("")),
            ("tgz", None),
            ("ccm.tg", None),
            ("ccm.tgz.asc", None),
            ("ccmtgz", None),
            ("", None),
            ("\u{e9}é", None),
        ];
        for (name, stem) in table {
            assert_eq!(archive_stem(name), *stem, "{name}");
        }
    }

    /// A segment that decodes nothing is the reference's own text; one that decodes is a
    /// new string: both name the chart alike.
    #[test]
    fn decoded_and_borrowed_names_are_alike() {
        assert_eq!(
            chart_reference_name("repo/openstack-cloud-controller-manager:2.31.1").as_deref(),
            Some("openstack-cloud-controller-manager")
        );
        assert!(matches!(
            chart_reference_name("repo/ccm@sha256:00"),
            Some(Cow::Borrowed("ccm"))
        ));
        assert!(matches!(
            chart_reference_name("repo%2Fccm%3A1"),
            Some(Cow::Owned(name)) if name == "ccm"
        ));
        assert_eq!(chart_reference_name("a/b/..").as_deref(), Some("a"));
        assert_eq!(chart_reference_name("a/%2E%2E").as_deref(), None);
        assert_eq!(chart_reference_name(":tag").as_deref(), None);
    }
}
