//! Sites: the places in an object that hold a CCM cloud config, and how to write an edit
//! back as a JSON Patch. Rules never see carriers; they see the INI text and a
//! human-readable location.
//!
//! Which objects are sites is policy data ([`SitesDocument`], loaded with the policies), not code.
//!
//! A [`FoundConfig`] is one cloud config and the carrier that holds it (one implementation of
//! the private `Carrier` trait per way of storing it): ConfigMap `data` and Secret
//! `stringData` (verbatim) and Secret `data` (base64), in `object_data.rs`; the values of the
//! `openstack-cloud-controller-manager` Helm chart inside Flux HelmReleases, Argo CD
//! Applications and RKE2/k3s HelmCharts, found by [`helm`] and carried by `values.rs`:
//! structured `cloudConfig` values are rendered to the INI the chart would produce
//! ([`render`]) so the rules run unchanged, and edits go back as JSON Patch `add`s on the
//! values or as a minimal edit of a values string ([`crate::yaml::edit`]).

pub mod chart;
pub mod delivery;
pub mod generation;
pub mod goquote;
mod goquote_tables;
pub mod helm;
pub mod labelled_values;
mod object_data;
mod path;
pub mod payload;
pub mod render;
pub mod resolve;
pub mod strvals;
pub mod umbrella;
mod values;

use std::sync::Arc;

use json_patch::PatchOperation;
use kube::core::{DynamicObject, GroupVersionKind};
use serde::{Deserialize, Serialize};

use crate::budget::Cancel;
use crate::cloudconf::{Document, IniEdit};
use crate::secret_text::SecretText;
use crate::yaml;

pub use crate::yaml::Seg;
pub use helm::{helm_controller_extra_args, helm_controller_extra_args_all};
pub use object_data::decode_base64_like_go;

// What the engine's view of an object reads (how messages name it, whether its diffs must be
// masked as a Secret's, the labelled values key it holds): faces ask `Engine::describe`.
pub use delivery::ObjectPlaces;
pub use helm::object_name;
pub use labelled_values::values_key as labelled_values_key;
pub use payload::embeds_secret;

/// Where cloud configs live: a document of kind `CloudConfigSites`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SitesDocument {
    /// Always `stackgate.dev/v1alpha1`.
    pub api_version: String,
    /// Always `CloudConfigSites`.
    pub kind: String,
    /// Named ConfigMaps and Secrets that hold a cloud config.
    pub sites: Vec<SiteSpec>,
    /// Any ConfigMap or Secret carrying this label is a site; the label value names the data key.
    pub label: Option<String>,
    /// Any ConfigMap or Secret carrying this label holds the CCM chart's Helm values (YAML)
    /// under the data key the label value names: a Flux `valuesFrom` source, checked where it
    /// is written as one values source of a release ([`labelled_values`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values_label: Option<String>,
}

/// The carrier kinds a [`SiteSpec`] can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum SiteKind {
    /// core/v1 ConfigMap, `data[key]`.
    ConfigMap,
    /// core/v1 Secret, `data[key]` (base64) or `stringData[key]`.
    Secret,
}

impl SiteKind {
    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            SiteKind::ConfigMap => "ConfigMap",
            SiteKind::Secret => "Secret",
        }
    }
}

/// One named place holding a cloud config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SiteSpec {
    /// ConfigMap or Secret.
    pub kind: SiteKind,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
    /// Data key holding the INI text.
    pub key: String,
    /// Whether stackgate may edit it (false for copies an operator regenerates).
    #[serde(default = "default_true")]
    pub mutate: bool,
    /// Why it is validate-only, shown in messages.
    #[serde(default)]
    pub note: Option<String>,
    /// The object exists on clusters of other platforms too, holding their cloud configs
    /// (OpenShift keeps every platform's in `openshift-config/cloud-provider-config`): only a
    /// config that is recognisably the OpenStack CCM's is checked or edited
    /// ([`crate::cloudconf::schema::is_openstack_config`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub other_platforms: bool,
    /// The CCM containers that read this key as their `--cloud-config` (from the
    /// `CcmConfigSource` fact, never from a policy file): `DaemonSet ns/name container "c"
    /// (--cloud-config=/etc/config/cloud.conf)`.
    #[serde(skip)]
    pub read_by: Vec<String>,
}

impl SitesDocument {
    /// These sites plus the object keys CCM containers read as their cloud config
    /// (`reads`: kind, namespace, name, key and how to name the reader). A key already a
    /// site keeps that site's settings (a validate-only copy stays validate-only) and gains
    /// the reader; another key becomes a site stackgate may edit.
    pub fn with_reads<'r>(
        &self,
        reads: impl IntoIterator<Item = (SiteKind, &'r str, &'r str, &'r str, String)>,
    ) -> SitesDocument {
        let mut out = self.clone();
        for (kind, namespace, name, key, reader) in reads {
            match out.sites.iter_mut().find(|s| {
                s.kind == kind && s.namespace == namespace && s.name == name && s.key == key
            }) {
                Some(site) => {
                    if !site.read_by.contains(&reader) {
                        site.read_by.push(reader);
                    }
                }
                None => out.sites.push(SiteSpec {
                    kind,
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    key: key.to_owned(),
                    mutate: true,
                    note: None,
                    other_platforms: false,
                    read_by: vec![reader],
                }),
            }
        }
        out
    }
}

fn default_true() -> bool {
    true
}

/// What kind of object holds a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// core/v1 ConfigMap.
    ConfigMap,
    /// core/v1 Secret.
    Secret,
    /// Values of the CCM Helm chart (HelmRelease, Application, HelmChart, values file).
    HelmValues,
}

impl Holder {
    /// Whether the cloud config is kept in a Secret: a Secret, or Helm values (the chart
    /// renders them into Secret `cloud-config`).
    fn keeps_it_secret(self) -> bool {
        self != Holder::ConfigMap
    }
}

/// Where a line of a site's cloud config is written in the object, for tools that map
/// findings back to source files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anchor {
    /// A node of the object: a structured value, or the field when nothing finer is known.
    Node(Vec<Seg>),
    /// Line `line` (1-based) of the string at `path`.
    TextLine {
        /// Path of the string field.
        path: Vec<Seg>,
        /// 1-based line within the string.
        line: usize,
    },
}

/// Why the text of a site could not be read. Messages never contain the content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SiteError {
    /// `data[key]` of a Secret is not valid base64.
    #[error("{location} is not valid base64")]
    Base64 {
        /// Where.
        location: String,
    },
    /// The decoded bytes are not UTF-8 (gcfg rejects such a file, so the CCM would not start).
    #[error("{location} is not valid UTF-8 text (the CCM rejects non-UTF-8 cloud configs)")]
    Utf8 {
        /// Where.
        location: String,
    },
    /// The value is not a string.
    #[error("{location} is not a string")]
    NotAString {
        /// Where.
        location: String,
    },
    /// A values string is not valid YAML (Helm would refuse it too).
    #[error("{}", yaml_message(.location, .error))]
    Yaml {
        /// Where.
        location: String,
        /// Position and kind of the problem.
        error: yaml::YamlError,
    },
    /// The text is larger than stackgate reads (see
    /// [`helm::MAX_VALUES_TEXT_BYTES`]); nothing in it was parsed.
    #[error("{location} is {size} bytes, over stackgate's limit of {limit} bytes for it")]
    TooLarge {
        /// Where.
        location: String,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// More values carriers in one object than stackgate reads (see
    /// [`helm::MAX_CARRIERS_PER_OBJECT`]); none was parsed.
    #[error(
        "{location} holds {count} places for the CCM chart's values, over stackgate's limit of \
         {limit}"
    )]
    TooManyCarriers {
        /// Where.
        location: String,
        /// How many.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The values come (in part) from places stackgate cannot read here: a Flux HelmRelease's
    /// `spec.valuesFrom` Secrets and ConfigMaps, an Argo CD source's `helm.valueFiles`, which
    /// the admission review does not contain and `stackgate check` did not find in its inputs.
    #[error("{location}: values come from {sources}, which this run cannot see")]
    Unseen {
        /// Where the references are (`spec.valuesFrom`).
        location: String,
        /// The references, e.g. `Secret occm-values key values.yaml` (names, never content).
        sources: String,
    },
    /// Flux `spec.postRenderers` change the manifests the chart renders from the values
    /// stackgate read: what the CCM gets may not be what the values render.
    #[error("{location} ({renderers}) change what the chart renders from these values")]
    PostRendered {
        /// Where (`spec.postRenderers`).
        location: String,
        /// What they are, e.g. `1 post-renderer(s): kustomize.patches` (names, never content).
        renderers: String,
    },
    /// A ConfigMap or Secret labelled as holding the CCM chart's values (the sites document's
    /// `valuesLabel`) has no data key of the name the label gives.
    #[error("{location} is not in the object")]
    ValuesKeyMissing {
        /// The key as messages name it: `data["values.yaml"]`.
        location: String,
        /// The label that names it.
        label: String,
    },
    /// `--set`-like entries past one of stackgate's limits for them (Helm would read them:
    /// a path longer than [`strvals::MAX_SET_PATH_DEPTH`], or more than
    /// [`strvals::MAX_SET_NODES`] keys and list elements added to one values document):
    /// nothing was merged.
    #[error("the --set entries hold {limit}, over stackgate's limit for them (at {location})")]
    SetTooLarge {
        /// The entry where the limit was reached (`spec.set["a[65536]"]`).
        location: String,
        /// Which limit.
        limit: strvals::SetLimit,
    },
    /// A `--set`-like entry (HelmChart `spec.set`, Argo CD `helm.parameters`) that Helm's
    /// `strvals` parser cannot read ([`strvals`]): Helm would stop there, so what the chart
    /// renders is not known.
    #[error("{location} is not a --set entry Helm can read ({error})")]
    SetEntry {
        /// The entry (`spec.set["a[x]"]`).
        location: String,
        /// What Helm's parser objects to (never the entry's text).
        error: strvals::StrvalsError,
    },
    /// The chart cannot render the structured cloud config.
    #[error("{location}: {error}")]
    Render {
        /// Where.
        location: String,
        /// Which section.
        error: render::RenderError,
    },
}

/// A values string Helm cannot read, or one over stackgate's own YAML caps (which Helm might
/// read: the message must not say otherwise).
fn yaml_message(location: &str, error: &yaml::YamlError) -> String {
    match error.limit {
        Some(_) => format!("{location} is over stackgate's YAML limits ({error})"),
        None => format!("{location} is not valid YAML ({error}), so Helm cannot read these values"),
    }
}

/// One way an object stores a cloud config: ConfigMap `data` or Secret `stringData`
/// ([`object_data::TextField`]), Secret `data` ([`object_data::Base64Field`]), the CCM chart's
/// structured values and values strings ([`values`]).
///
/// A carrier is built when its site is found, by the module that discovers it
/// ([`object_data::find`], [`helm::find`]), which also reads the INI text: what the text turns
/// out to be can decide the carrier (chart values with `cloudConfigContents` hold the INI in a
/// string field; without it, the INI is rendered from `cloudConfig`). The carrier keeps what it
/// needs to map lines back to the object and to write an edit.
trait Carrier: std::fmt::Debug + Send + Sync {
    /// The JSON Patch operations that write `edited` (the parsed text after `edits` were
    /// applied) back into the object.
    fn patch(&self, edited: &Document, edits: &[IniEdit]) -> Vec<PatchOperation>;

    /// Where line `line` of the cloud config (or the whole config for `None`) is written in
    /// the object.
    fn trace(&self, line: Option<usize>) -> Anchor;

    /// JSON pointer of the field holding the config, e.g. `/data/cloud.conf`.
    fn pointer(&self) -> String;

    /// Where line `line` (or the whole config) is in the object, for messages, without the
    /// object's name: `data["config"] line 3`, `spec.values.cloudConfig.global.region`.
    fn describe(&self, line: Option<usize>) -> String;

    /// [`Carrier::describe`] in parts, for a finding's first line: by default all of it is
    /// the location.
    fn locate(&self, line: Option<usize>) -> Location {
        Location {
            at: self.describe(line),
            field_line: None,
            within: None,
        }
    }

    /// [`Carrier::locate`] with `at` after the name of the object (`object`, a blank, the
    /// location, without trailing blanks): what [`FoundConfig::locate`] returns. A carrier
    /// whose location is its description writes that in one string.
    fn locate_after(&self, object: &str, line: Option<usize>) -> Location {
        let mut location = self.locate(line);
        location.at = after_object(object, &location.at, None);
        location
    }

    /// What kind of object holds it.
    fn holder(&self) -> Holder;

    /// Path of the one string field holding the whole text, for carriers that have one
    /// (ConfigMap `data`, Secret `data` / `stringData`); None for values carriers.
    fn path(&self) -> Option<Vec<Seg>> {
        None
    }

    /// Whether a rendered value wrote more than one line (an unquoted chart generation and a
    /// value with a line break): an edit of a key cannot undo such a line.
    fn writes_lines_of_a_value(&self) -> bool {
        false
    }
}

/// One of the configs a delivery renders, depending on a chart version it does not pin
/// ([`generation`]) or on an umbrella chart's switch it does not show ([`umbrella`]): the
/// sites of one values place, one distinct reading each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alternative {
    /// Which place (unique among one object's sites).
    pub group: usize,
    /// Which reading of the place (sites of one reading share it).
    pub class: usize,
    /// How many distinct readings the place has: a reading with no site (no Secret rendered)
    /// counts too.
    pub of: usize,
    /// The chart versions that render this reading, for messages.
    pub versions: String,
    /// The chart generations that render this reading.
    pub generations: Vec<generation::Generation>,
    /// Whether the place's readings differ by chart version (more than one reading renders
    /// with the subchart switched on).
    pub by_version: bool,
    /// Set when the place is an umbrella chart's subchart that a `condition` or tag of the
    /// umbrella's `Chart.yaml`, which this input does not show, may switch off: the visible
    /// values that could ([`umbrella::could_switch_off`]). One reading is then "switched
    /// off", with no site.
    pub switch: Option<String>,
}

/// Whether two cloud configs hold the same settings as gcfg reads them (the same variables
/// with the same values, in the same sections, in order; empty sections aside), or both fail
/// to parse at the same place.
pub(crate) fn same_settings(a: &str, b: &str) -> bool {
    let settings = |text: &str| {
        Document::parse(text).map(|doc| {
            doc.entries()
                .map(|e| {
                    (
                        e.section.to_ascii_lowercase(),
                        e.subsection.map(str::to_owned),
                        e.key.to_ascii_lowercase(),
                        e.value,
                        e.has_truncating_comment,
                    )
                })
                .collect::<Vec<_>>()
        })
    };
    match (settings(a), settings(b)) {
        (Ok(a), Ok(b)) => a == b,
        (Err(a), Err(b)) => a.to_string() == b.to_string(),
        _ => false,
    }
}

/// A cloud config found in an object.
#[derive(Debug, Clone)]
pub struct FoundConfig {
    /// `ConfigMap openshift-config/cloud-provider-config`.
    pub object: String,
    /// `data["config"]`.
    pub location: String,
    /// The INI text, or why it cannot be read. Never printed: a cloud config carries
    /// credentials whatever holds it, so the text is read only through
    /// [`SecretText::expose`] (parsers, comparisons, masking).
    pub text: Result<SecretText, SiteError>,
    /// Whether stackgate may edit this site.
    pub mutable: bool,
    /// Why it is validate-only, when it is.
    pub note: Option<String>,
    /// Whether the cloud config is kept in a Secret: a Secret object, or Helm values (the
    /// chart renders them into Secret `cloud-config`). Values are never echoed either way.
    pub secret: bool,
    /// What kind of object holds the site.
    pub kind: Holder,
    /// The config is rendered from one values source of a release that may have others (a
    /// labelled values ConfigMap or Secret, [`labelled_values`]): a setting missing here may be
    /// set by another source, so rules word a missing setting as such, never as what the CCM
    /// runs.
    pub values_source: bool,
    /// Whether other platforms keep their cloud configs in the same place (see
    /// [`SiteSpec::other_platforms`]).
    pub other_platforms: bool,
    /// The CCM containers that read this config as their `--cloud-config`
    /// ([`SiteSpec::read_by`]), for messages.
    pub read_by: Vec<String>,
    /// Set when this is one of several configs the delivery renders, depending on a chart
    /// version it does not pin.
    pub alternative: Option<Alternative>,
    /// Shared: cloning a found config does not copy the values its carrier keeps.
    carrier: Arc<dyn Carrier>,
}

impl FoundConfig {
    /// A site stackgate may edit, held by `carrier`.
    fn new(
        object: String,
        location: String,
        text: Result<String, SiteError>,
        carrier: impl Carrier + 'static,
    ) -> Self {
        Self::holding(object, location, text.map(SecretText::new), carrier)
    }

    /// A site stackgate may edit, held by `carrier`, whose text was read by another site (an
    /// embedded document's).
    fn holding(
        object: String,
        location: String,
        text: Result<SecretText, SiteError>,
        carrier: impl Carrier + 'static,
    ) -> Self {
        let kind = carrier.holder();
        FoundConfig {
            object,
            location,
            text,
            mutable: true,
            note: None,
            secret: kind.keeps_it_secret(),
            kind,
            values_source: false,
            other_platforms: false,
            read_by: Vec::new(),
            alternative: None,
            carrier: Arc::new(carrier),
        }
    }

    /// The JSON Patch operations that write `edited` (the parsed text after `edits` were
    /// applied) back into the object.
    pub fn patch(&self, edited: &Document, edits: &[IniEdit]) -> Vec<PatchOperation> {
        self.carrier.patch(edited, edits)
    }

    /// Whether the cloud config is held by a ConfigMap (readable more widely than a Secret).
    pub fn is_configmap(&self) -> bool {
        self.kind == Holder::ConfigMap
    }

    /// Where line `line` of the cloud config (or the whole config for `None`) is written in
    /// the object.
    pub fn trace(&self, line: Option<usize>) -> Anchor {
        self.carrier.trace(line)
    }

    /// JSON pointer of the field holding the text, e.g. `/data/cloud.conf`.
    pub fn pointer(&self) -> String {
        self.carrier.pointer()
    }

    /// `ConfigMap openshift-config/cloud-provider-config data["config"] line 3`.
    ///
    /// Helm values name the values path instead, e.g.
    /// `HelmRelease kube-system/occm spec.values.cloudConfig.loadBalancer.provider-requires-serial-api-calls`.
    pub fn describe(&self, line: Option<usize>) -> String {
        format!("{} {}", self.object, self.carrier.describe(line))
    }

    /// Where line `line` (or the whole config) is, in the parts a finding's text keeps apart:
    /// `HelmChart kube-system/occm spec.valuesContent`, line 8 of that text, at
    /// `cloudConfig.loadBalancer.provider-requires-serial-api-calls`.
    pub fn locate(&self, line: Option<usize>) -> Location {
        self.carrier.locate_after(&self.object, line)
    }
}

/// `{object} {at}`, then ` line {line}` when there is one, without trailing blanks: written
/// into one string (every finding of a site is located).
fn after_object(object: &str, at: &str, line: Option<usize>) -> String {
    let mut out = String::with_capacity(object.len() + 1 + at.len() + 16);
    out.push_str(object);
    out.push(' ');
    out.push_str(at);
    if let Some(line) = line {
        out.push_str(" line ");
        path::push_decimal(&mut out, line);
    }
    out.truncate(out.trim_end().len());
    out
}

/// Where a finding is, in parts (`engine::Text` keeps them apart): the first line names `at`
/// and `field_line`; `within` follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The object and the field: `HelmChart kube-system/occm spec.valuesContent`.
    pub at: String,
    /// The line of the field's text, when the field is a text other than the cloud config
    /// (a values string) and the line is known.
    pub field_line: Option<usize>,
    /// The place inside the field that `at` leaves out: a values path, a line of
    /// `cloudConfigContents`.
    pub within: Option<String>,
}

/// Group and version of the synthetic object `stackgate check` builds for a plain INI cloud
/// config file: `{apiVersion: stackgate.dev/v1alpha1, kind: CloudConfigFile, metadata:
/// {name: <file>}, text: <the INI>}`.
pub const CONFIG_FILE_API_VERSION: &str = "stackgate.dev/v1alpha1";
/// Kind of the synthetic plain-INI object.
pub const CONFIG_FILE_KIND: &str = "CloudConfigFile";

/// Finds every cloud config `object` holds according to `sites`.
pub fn find(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &SitesDocument,
) -> Vec<FoundConfig> {
    find_in(&ObjectPlaces::new(gvk, object), sites, &Cancel::never())
}

/// [`find`] of the object whose values places `read_places` reads (once for every reader of
/// the object's values), that stops reading (values strings and payloads parsed, `--set`
/// entries, merges, each place and payload document) once `cancel` fires; what it then
/// returns is not an answer, and the caller checks the flag before using it.
fn find_in(
    read_places: &ObjectPlaces<'_>,
    sites: &SitesDocument,
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let (gvk, object) = (read_places.gvk(), read_places.object());
    match data_kind(gvk) {
        Some(kind) => {
            let mut found = object_data::find(kind, object, sites);
            found.extend(payload::find_within(kind, object, sites, cancel));
            found.extend(labelled_values::find(kind, object, sites, cancel));
            found
        }
        None if (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str())
            == ("stackgate.dev", "v1alpha1", CONFIG_FILE_KIND) =>
        {
            object_data::config_file(object)
        }
        None => {
            let charts = helm::chart_names(sites);
            let mut found = helm::find(read_places, charts, cancel);
            found.extend(delivery::find(gvk, object, sites, charts, cancel));
            found
        }
    }
}

/// [`find`], plus the objects a ClusterResourceSet payload in `object` embeds that the object
/// families read ([`payload::EmbeddedObject`]); each payload value is parsed once for both.
pub fn find_with_embedded(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &SitesDocument,
) -> (Vec<FoundConfig>, Vec<payload::EmbeddedObject>) {
    find_with_embedded_in(&ObjectPlaces::new(gvk, object), sites, &Cancel::never())
}

/// [`find_with_embedded`] of the object whose values places `read_places` reads (once for
/// every reader of the object's values: the engine also asks its CCM version and its object
/// rules), that stops reading Helm values once `cancel` fires (what it then returns is not an
/// answer; the caller checks the flag).
pub fn find_with_embedded_in(
    read_places: &ObjectPlaces<'_>,
    sites: &SitesDocument,
    cancel: &Cancel,
) -> (Vec<FoundConfig>, Vec<payload::EmbeddedObject>) {
    let (gvk, object) = (read_places.gvk(), read_places.object());
    let Some(kind) = data_kind(gvk) else {
        return (find_in(read_places, sites, cancel), Vec::new());
    };
    // The same sites, in the same order, as `find`.
    let mut found = object_data::find(kind, object, sites);
    let (embedded_sites, objects) = payload::scan(kind, object, sites, true, cancel);
    found.extend(embedded_sites);
    found.extend(labelled_values::find(kind, object, sites, cancel));
    (found, objects)
}

/// [`helm::DEFAULT_CHARTS`] as the owned names the readers compare, built once rather than
/// on each of the several readings of every review. A constant: built the same on first use,
/// never changed after, so the engine stays pure. Here, where both the registry's readers
/// ([`delivery`]) and the chart readers ([`helm`]) reach it.
static DEFAULT_CHART_NAMES: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    helm::DEFAULT_CHARTS
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
});

/// [`helm::DEFAULT_CHARTS`], as the readers take chart names (the same list on every call,
/// which `delivery::ObjectPlaces` keys its readings by without a copy).
pub(crate) fn default_chart_names() -> &'static [String] {
    &DEFAULT_CHART_NAMES
}

/// The chart names a sites document asks for ([`helm::chart_names`]): the carriers that nest
/// chart values (`payload`, `delivery`) ask here, so they do not use `helm`, which uses them.
fn chart_names_of(sites: &SitesDocument) -> &'static [String] {
    helm::chart_names(sites)
}

/// The sites in the chart values an object carries ([`helm::find`]), for the nested-manifest
/// reader ([`payload::read_nested`]): a document of a nested stream is read as an object.
fn chart_values_sites(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &SitesDocument,
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    helm::find(
        &ObjectPlaces::new(gvk, object),
        helm::chart_names(sites),
        cancel,
    )
}

/// Most nested manifest streams one object has parsed ([`helm::MAX_CARRIERS_PER_OBJECT`]).
const MAX_NESTED_CARRIERS: usize = helm::MAX_CARRIERS_PER_OBJECT;

/// `ConfigMap kube-system/cloud-config`: how a ConfigMap's or Secret's sites name their object
/// (`ConfigMap /name` without a namespace), written without going through `fmt`.
fn kind_namespace_name(kind: SiteKind, namespace: &str, name: &str) -> String {
    let kind = kind.as_str();
    let mut out = String::with_capacity(kind.len() + namespace.len() + name.len() + 2);
    out.push_str(kind);
    out.push(' ');
    out.push_str(namespace);
    out.push('/');
    out.push_str(name);
    out
}

/// ConfigMap or Secret, the two kinds whose `data` holds sites.
pub fn data_kind(gvk: &GroupVersionKind) -> Option<SiteKind> {
    match (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) {
        ("", "v1", "ConfigMap") => Some(SiteKind::ConfigMap),
        ("", "v1", "Secret") => Some(SiteKind::Secret),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret_text::SecretText;
    use base64::Engine as _;
    use serde_json::{Value, json};

    /// The default CloudConfigSites document (policies/ is the one source of it).
    fn default_sites() -> SitesDocument {
        serde_saphyr::from_str(include_str!("../../policies/cloud-config-sites.yaml"))
            .expect("the default sites document parses")
    }

    fn gvk(kind: &str) -> GroupVersionKind {
        GroupVersionKind::gvk("", "v1", kind)
    }

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn wrapped_secret_data_is_found() {
        let sites = default_sites();
        let encoded = base64::engine::general_purpose::STANDARD
            .encode("[Global]\nregion = RegionOne\n".repeat(4));
        let wrapped: String = encoded
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8_lossy(c).into_owned() + "\n")
            .collect();
        let o = obj(
            json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"cloud-config","namespace":"kube-system"},
            "data":{"cloud.conf": wrapped}}),
        );
        let found = find(&gvk("Secret"), &o, &sites);
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].text.as_ref().map(SecretText::expose).ok(),
            Some("[Global]\nregion = RegionOne\n".repeat(4).as_str())
        );
    }

    #[test]
    fn finds_default_secret_and_decodes_base64() {
        let sites = default_sites();
        let o = obj(
            json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"cloud-config","namespace":"kube-system"},
            "data":{"cloud.conf": base64::engine::general_purpose::STANDARD.encode("[Global]\n")}}),
        );
        let found = find(&gvk("Secret"), &o, &sites);
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].text.as_ref().map(SecretText::expose),
            Ok("[Global]\n")
        );
        assert!(found[0].secret);
        let edited = Document::parse("[LoadBalancer]\n").unwrap();
        let patch = serde_json::to_value(found[0].patch(&edited, &[])).unwrap();
        assert_eq!(
            patch,
            json!([{"op":"replace","path":"/data/cloud.conf","value":"W0xvYWRCYWxhbmNlcl0K"}])
        );
    }

    #[test]
    fn invalid_base64_is_a_site_error_without_content() {
        let sites = default_sites();
        let o = obj(
            json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"cloud-config","namespace":"kube-system"},
            "data":{"cloud.conf": "not base64 secret-value!"}}),
        );
        let found = find(&gvk("Secret"), &o, &sites);
        let err = found[0].text.clone().unwrap_err().to_string();
        assert_eq!(err, "data[\"cloud.conf\"] is not valid base64");
    }

    #[test]
    fn label_makes_any_configmap_a_site_and_other_kinds_are_not() {
        let sites = default_sites();
        let v = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"a",
            "labels":{"stackgate.dev/cloud-config":"my.conf"}},"data":{"my.conf":"[Global]\n"}});
        assert_eq!(find(&gvk("ConfigMap"), &obj(v.clone()), &sites).len(), 1);
        assert!(
            find(
                &GroupVersionKind::gvk("apps", "v1", "Deployment"),
                &obj(v),
                &sites
            )
            .is_empty()
        );
    }

    #[test]
    fn operator_copy_is_validate_only() {
        let sites = default_sites();
        let o = obj(
            json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cloud-conf",
            "namespace":"openshift-cloud-controller-manager"},"data":{"cloud.conf":"[Global]\n"}}),
        );
        let found = find(&gvk("ConfigMap"), &o, &sites);
        assert!(!found[0].mutable);
        assert!(found[0].note.as_deref().unwrap_or("").contains("operator"));
    }
}
