//! The CCM version a delivery pins: chart version, `image.tag`, or an image reference.

use super::{content, get, str_at};
use crate::budget::Cancel;
use crate::sites::chart::chart_matches;
use crate::sites::delivery::ObjectPlaces;
use crate::sites::path::value_at;
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

/// The OpenStack CCM release a GitOps object deploys, as far as the object says so exactly.
///
/// Only the CCM's minor version matters to the rules (what a release reads is decided per
/// minor), and some sources pin it only to two neighbouring minors, so this is a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CcmVersion {
    /// Lowest CCM minor (`34` for v1.34.x) the object can deploy.
    pub min_minor: u64,
    /// Highest CCM minor it can deploy.
    pub max_minor: u64,
    /// Where the version was read, for messages: `chart version 2.33.0` or
    /// `values image.tag v1.33.1`.
    pub source: String,
}

impl CcmVersion {
    /// True when every CCM the object can deploy is older than v1.`minor`.
    pub fn all_before(&self, minor: u64) -> bool {
        self.max_minor < minor
    }
}

/// The CCM version `object` deploys, when it pins one exactly (domain-facts §1.7, §9.1):
/// the chart values' `image.tag` (the chart's DaemonSet uses it in place of its appVersion),
/// else the chart version of a Flux `HelmRelease` (`spec.chart.spec.version`), an RKE2/k3s
/// `HelmChart` (`spec.version`) or an Argo CD `Application` source (`targetRevision`).
///
/// Chart versions map to CCM releases as the chart's history shows (cloud-provider-openstack
/// `charts/openstack-cloud-controller-manager/Chart.yaml`): a release `2.Y.Z` (Y ≥ 29) ships
/// appVersion v1.Y; a pre-release `2.Y.Z-…` shipped v1.(Y-1) or v1.Y. Ranges (`>=2.30`,
/// `2.x`), chart 1.x (appVersion `latest`), tags such as `latest` or digests, and values
/// given as a YAML string are not read: None, and rules that need the version stay silent.
pub fn ccm_version(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    charts: &[String],
) -> Option<CcmVersion> {
    ccm_version_in(&ObjectPlaces::new(gvk, object), charts, &Cancel::never())
}

/// [`ccm_version`] of the object whose values places `read_places` reads (once for every
/// reader of the object's values), that stops reading values once `cancel` fires.
pub fn ccm_version_in(
    read_places: &ObjectPlaces<'_>,
    charts: &[String],
    cancel: &Cancel,
) -> Option<CcmVersion> {
    let (gvk, object) = (read_places.gvk(), read_places.object());
    let places = read_places.of(charts, cancel);
    let root = content(object);
    // image.tag in a values map wins: the chart renders `default .Chart.AppVersion .Values.image.tag`.
    for place in places.iter().filter(|p| !p.yaml_string) {
        if let Some(tag) = get(root, &place.path)
            .and_then(|v| v.get("image"))
            .and_then(|v| v.get("tag"))
            .and_then(Value::as_str)
            && let Some(minor) = image_tag_minor(tag)
        {
            return Some(CcmVersion {
                min_minor: minor,
                max_minor: minor,
                source: format!("values image.tag {}", shown_version(tag)),
            });
        }
    }
    if places.is_empty() {
        return None;
    }
    let chart_version = match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("helm.toolkit.fluxcd.io", "HelmRelease") => {
            str_at(root, &["spec", "chart", "spec", "version"])
        }
        ("helm.cattle.io", "HelmChart") => str_at(root, &["spec", "version"]),
        ("argoproj.io", "Application") => {
            let mut sources: Vec<&Value> = value_at(root, "/spec/source").into_iter().collect();
            if let Some(list) = value_at(root, "/spec/sources").and_then(Value::as_array) {
                sources.extend(list);
            }
            sources
                .into_iter()
                .find(|s| {
                    s.get("chart")
                        .and_then(Value::as_str)
                        .is_some_and(|c| chart_matches(c, charts))
                })
                .and_then(|s| s.get("targetRevision"))
                .and_then(Value::as_str)
        }
        _ => None,
    }?;
    let (minor, prerelease) = chart_version_minor(chart_version)?;
    let (min_minor, max_minor) = if prerelease {
        (minor.saturating_sub(1), minor)
    } else {
        (minor, minor)
    };
    Some(CcmVersion {
        min_minor,
        max_minor,
        source: format!("chart version {}", shown_version(chart_version)),
    })
}

/// The CCM release a container image runs, when its tag pins one (`…:v1.24.0`, also before a
/// `@sha256:` digest); None for no tag, `latest`, a digest alone or another scheme.
pub fn image_version(image: &str) -> Option<CcmVersion> {
    let image = image.split_once('@').map_or(image, |(name, _)| name);
    // The tag follows the last `:` after the last `/` (a registry's port comes before it).
    let last = image.rsplit_once('/').map_or(image, |(_, last)| last);
    let (_, tag) = last.rsplit_once(':')?;
    let minor = image_tag_minor(tag)?;
    Some(CcmVersion {
        min_minor: minor,
        max_minor: minor,
        source: format!("image tag {}", shown_version(tag)),
    })
}

/// `2.Y.Z` or `2.Y.Z-pre` (an optional leading `v`) → (Y, whether a pre-release); only chart
/// major 2 from 2.27 on, whose appVersion follows the chart's minor.
fn chart_version_minor(version: &str) -> Option<(u64, bool)> {
    let v = version.trim();
    let v = v.strip_prefix('v').unwrap_or(v);
    let (core, pre) = match v.split_once('-') {
        Some((core, pre)) => (core, !pre.is_empty()),
        None => (v, false),
    };
    let core = core.split_once('+').map_or(core, |(c, _)| c);
    let mut parts = core.split('.');
    let (major, minor, patch) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || ![major, minor, patch].iter().all(|p| is_number(p)) {
        return None;
    }
    let minor: u64 = minor.parse().ok()?;
    (major == "2" && minor >= 27).then_some((minor, pre))
}

/// `v1.Y.Z` (with anything after the patch number, e.g. `-rc.1`) → Y.
fn image_tag_minor(tag: &str) -> Option<u64> {
    let rest = tag.trim().strip_prefix("v1.")?;
    let (minor, after) = rest.split_once('.')?;
    let patch: String = after.chars().take_while(char::is_ascii_digit).collect();
    if !is_number(minor) || patch.is_empty() {
        return None;
    }
    minor.parse().ok()
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit())
}

/// A version string as shown in messages: short, printable, or not at all.
pub(super) fn shown_version(v: &str) -> String {
    let v = v.trim();
    // A tag `check` took from a Secret carries the marker that stands for it: shown alone.
    if crate::secret_text::ends_not_shown(v)
        && let Some(at) = v.find("<from Secret ")
    {
        return v[at..].to_owned();
    }
    if v.len() <= 40
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-+".contains(c))
    {
        v.to_owned()
    } else {
        "(not shown)".to_owned()
    }
}
