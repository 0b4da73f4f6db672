//! The registry of delivery paths: every controller and carrier that brings the CCM its cloud
//! config, as data. For each one: how it is recognised (API group, versions, kinds), its
//! values sources in the controller's order and which Helm operation each is, what stackgate
//! cannot see there, what the webhook must be registered for and whether `stackgate audit`
//! lists it.
//!
//! The faces are checked against it by `tests/delivery_registry.rs`: the chart's webhook rules
//! (`charts/stackgate/templates/webhooks.yaml`, rendered), the audit's targets
//! ([`crate::audit::targets`]), what `stackgate check` recognises (one sample object per entry
//! goes through the engine) and the carrier table in `docs/carriers.md`
//! ([`carriers_markdown`]); each unseen source ([`UnseenAt`]) is set on the sample and both
//! the webhook and `check` must say the values are unseen, naming it.
//!
//! The registry also drives the values reader: each entry's `values` says, per kind, where the
//! CCM chart's values are ([`Values::Place`]: chart reference, values path, whether a YAML
//! string, version, what is unseen beneath or on top, `--set` entries) or which structured
//! reader reads them ([`Values::Reader`]: Argo CD, ApplicationSet, Sveltos, Fleet, k0s,
//! kustomize), and `values_places` loops over it, so finding the values needs no match on
//! kinds elsewhere (the chart version a release pins, post-renderers and `--set` layering
//! still have their own). The
//! test checks that each typed place is a source the entry's prose names. Adding a values
//! kind with one place is an entry here (its `values` and prose sources) and its sample in
//! that test.
//!
//! This module also says which objects hold values stackgate cannot see (`find`: Azimuth's
//! addon objects, whose values are Jinja2 templates the addon provider renders, and Giant
//! Swarm `App`s).

use std::borrow::Cow;
use std::cell::RefCell;
use std::rc::Rc;

use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

pub use super::helm::places::{ChartAt, ChartUnseen, Place, PlaceReader};
use super::helm::places::{VALUES_FILE_KIND, ValuesPlace, read_place};
use super::path::value_at;
use super::values::UnseenValues;
use super::{FoundConfig, SiteError, SitesDocument};
use crate::budget::Cancel;
use crate::yaml::Seg;

/// How Helm (or the controller) takes one values source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// The object holds the INI cloud config itself (a ConfigMap or Secret data key).
    CloudConfig,
    /// A values file (`-f`), merged over the chart's values and the files before it.
    ValuesFile,
    /// `--set`: typed values.
    Set,
    /// `--set-string`: string values.
    SetString,
    /// `--set-file`: a value read from a file.
    SetFile,
    /// Flux `valuesFrom[].targetPath`: `--set` (or `--set-string`) of one data key's content.
    TargetPath,
    /// A manifest that embeds a ConfigMap or Secret holding the cloud config.
    EmbeddedManifest,
    /// A Jinja2 template the controller renders into values or manifests.
    Template,
    /// Which chart renders the values (its templates and default values), not a values source.
    Chart,
    /// Patches the controller applies to the manifests Helm rendered.
    PostRender,
}

impl Operation {
    /// How the docs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::CloudConfig => "the cloud config itself",
            Operation::ValuesFile => "values file",
            Operation::Set => "`--set`",
            Operation::SetString => "`--set-string`",
            Operation::SetFile => "`--set-file`",
            Operation::TargetPath => "Flux `targetPath` (`--set`)",
            Operation::EmbeddedManifest => "embedded manifest",
            Operation::Template => "Jinja2 template",
            Operation::Chart => "the chart itself",
            Operation::PostRender => "post-renderer over the rendered manifests",
        }
    }
}

/// One values source of a delivery path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// The field (`spec.values`).
    pub field: &'static str,
    /// Which operation it is.
    pub operation: Operation,
    /// Whether stackgate reads it where it is written (false: a finding says it is unseen).
    pub read: bool,
    /// For an unseen source: where it is set and a value of its shape. None for a read one.
    pub unseen_at: Option<UnseenAt>,
}

/// Where an unseen values source is set in an object of its delivery path, with a value of the
/// field's shape: `tests/delivery_registry.rs` sets it on the path's sample object and checks
/// that the webhook and `stackgate check` say the values are unseen and name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnseenAt {
    /// JSON pointer from the object's root (`/spec/valuesFrom`). Messages name it dotted
    /// (`spec.valuesFrom`; a key holding a dot in brackets: `stringData["cloud-config.yaml"]`).
    pub pointer: &'static str,
    /// A value of the field's shape, as JSON text.
    pub example: &'static str,
}

const fn read(field: &'static str, operation: Operation) -> Source {
    Source {
        field,
        operation,
        read: true,
        unseen_at: None,
    }
}

const fn unseen(
    field: &'static str,
    operation: Operation,
    pointer: &'static str,
    example: &'static str,
) -> Source {
    Source {
        field,
        operation,
        read: false,
        unseen_at: Some(UnseenAt { pointer, example }),
    }
}

/// What the webhook must be registered for to see a delivery path's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// API versions.
    pub versions: &'static [&'static str],
    /// Resources (plural).
    pub resources: &'static [&'static str],
    /// How the chart selects the objects among all of the resources' writes.
    pub selected_by: &'static str,
    /// Whether the resources are namespaced or cluster-scoped: the scope of the chart's rule.
    pub scope: Scope,
}

/// Whether a registration's resources are namespaced or cluster-scoped, as the apiserver
/// serves them. A webhook rule of `scope: Namespaced` never matches a cluster-scoped object,
/// so the chart registers each scope in rules of its own; a `namespaceSelector` never skips a
/// cluster-scoped object, so namespace exemptions do not apply to it (an exception names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Objects in a namespace.
    Namespaced,
    /// Objects of the cluster, in no namespace.
    Cluster,
}

impl Scope {
    /// The `scope` of a webhook rule (`Namespaced`, `Cluster`).
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Namespaced => "Namespaced",
            Scope::Cluster => "Cluster",
        }
    }
}

/// The scope the registry registers `resource` of API `group` in, or None when no
/// registration names it.
pub fn registered_scope(group: &str, resource: &str) -> Option<Scope> {
    REGISTRY
        .iter()
        .filter_map(|path| path.webhook.ok())
        .flatten()
        .find(|r| r.group == group && r.resources.contains(&resource))
        .map(|r| r.scope)
}

/// Whether and how `stackgate audit` lists a delivery path's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audit {
    /// Listed: group, version and kind of the audit's target.
    Listed(&'static str, &'static str, &'static str),
    /// Not an object of a cluster (a file of the repository): nothing to list.
    NotInCluster,
}

/// One controller or carrier that brings the CCM its cloud config.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryPath {
    /// How the docs name it.
    pub name: &'static str,
    /// API group of its objects.
    pub group: &'static str,
    /// Served versions read.
    pub versions: &'static [&'static str],
    /// Kinds.
    pub kinds: &'static [&'static str],
    /// Which of those objects carry the CCM's config.
    pub recognised_by: &'static str,
    /// Its values sources, in the order the controller hands them to Helm (later wins).
    pub sources: &'static [Source],
    /// What the webhook must be registered for; None with why when the objects never reach
    /// an apiserver the webhook serves.
    pub webhook: Result<&'static [Registration], &'static str>,
    /// Whether `stackgate audit` lists them.
    pub audit: &'static [Audit],
    /// Where its objects hold the CCM chart's values, per kind: what the values reader loops
    /// over (`values_places`). Empty for an entry that holds none (a cloud config itself,
    /// embedded manifests, values named as unseen only).
    pub values: &'static [ValuesReading],
    /// Where stackgate reads it.
    pub reader: &'static str,
}

/// How the objects of some kinds of a delivery path hold the CCM chart's values.
#[derive(Debug, Clone, Copy)]
pub struct ValuesReading {
    /// The kinds read so (of the entry's kinds).
    pub kinds: &'static [&'static str],
    /// Read at any API version of the group (the reader reads the kind's shape, and `check`
    /// reads files of versions the webhook is not registered for); else at the entry's
    /// versions only.
    pub any_version: bool,
    /// Only objects whose content this holds for are read so (an Azimuth HelmRelease: one
    /// template-free template).
    pub when: Option<fn(&Value) -> bool>,
    /// The one place of the values, or the reader of a shape one place cannot describe.
    pub values: Values,
}

/// Where an object holds the CCM chart's values.
#[derive(Debug, Clone, Copy)]
pub enum Values {
    /// One place, as data.
    Place(Place),
    /// A reader over lists of charts or sources, or an embedded config.
    Reader(PlaceReader),
}

/// The base of the registry's single places: a values map that names no version and nothing
/// beneath, on top or instead (every [`Place`] below sets its chart and values).
const VALUES_MAP: Place = Place {
    chart: &[],
    values: "",
    yaml_string: false,
    version: None,
    unseen_beneath: &[],
    values_secrets: None,
    set: None,
    values_over: None,
    chart_unseen: None,
    umbrella_dependency: false,
};

/// The reading of the CCM chart's values the registry gives objects of `gvk` with content
/// `root`, if any.
fn reading_of(gvk: &GroupVersionKind, root: &Value) -> Option<Values> {
    REGISTRY
        .iter()
        .filter(|path| path.group == gvk.group)
        .flat_map(|path| path.values.iter().map(move |r| (path, r)))
        .find(|(path, r)| {
            r.kinds.contains(&gvk.kind.as_str())
                && (r.any_version || path.versions.contains(&gvk.version.as_str()))
                && r.when.is_none_or(|holds| holds(root))
        })
        .map(|(_, r)| r.values)
}

/// The places in `object` that hold values of the charts in `charts`, as the registry says
/// objects of `gvk` hold them.
///
/// Values strings are parsed (to find an umbrella chart's subchart key): once `cancel` fires
/// no more are, and what is returned is not an answer (the caller checks the flag).
pub(super) fn values_places(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    charts: &[String],
    cancel: &Cancel,
) -> Vec<ValuesPlace> {
    match reading_of(gvk, &object.data) {
        Some(Values::Place(place)) => read_place(object, &place, charts, cancel),
        Some(Values::Reader(reader)) => reader.places(&object.data, charts, cancel),
        None => Vec::new(),
    }
}

/// The values places of one object (`values_places`), read at most once per chart list
/// while the object is evaluated.
///
/// Finding its sites, its CCM version and the object rules (cluster name, concurrency) each
/// need where an object holds the CCM chart's values; read apart, a HelmRelease's places were
/// read four times per review (BENCHMARKS.md, "Where a HelmRelease's instructions go"). The
/// engine makes one of these per object it evaluates and hands it to each of them. A reading
/// that `cancel` stopped is not kept: it is not an answer.
#[derive(Debug)]
pub struct ObjectPlaces<'o> {
    gvk: &'o GroupVersionKind,
    object: &'o DynamicObject,
    read: RefCell<Vec<PlacesOfCharts>>,
}

/// The places of the values of one chart list, as read.
type PlacesOfCharts = (Cow<'static, [String]>, Rc<[ValuesPlace]>);

impl<'o> ObjectPlaces<'o> {
    /// Nothing read yet of `object`, an object of kind `gvk`.
    pub fn new(gvk: &'o GroupVersionKind, object: &'o DynamicObject) -> Self {
        Self {
            gvk,
            object,
            read: RefCell::new(Vec::new()),
        }
    }

    /// The object's kind.
    pub fn gvk(&self) -> &'o GroupVersionKind {
        self.gvk
    }

    /// The object.
    pub fn object(&self) -> &'o DynamicObject {
        self.object
    }

    /// The places holding values of the charts in `charts` (read now, or as read before).
    pub(super) fn of(&self, charts: &[String], cancel: &Cancel) -> Rc<[ValuesPlace]> {
        if let Some((_, places)) = self.read.borrow().iter().find(|(c, _)| **c == *charts) {
            return Rc::clone(places);
        }
        let places: Rc<[ValuesPlace]> = values_places(self.gvk, self.object, charts, cancel).into();
        if !cancel.is_cancelled() {
            // The default list is kept as it is, not copied (every review reads it).
            let default = super::default_chart_names();
            let key = if std::ptr::eq(charts, default) {
                Cow::Borrowed(default)
            } else {
                Cow::Owned(charts.to_vec())
            };
            self.read.borrow_mut().push((key, Rc::clone(&places)));
        }
        places
    }
}

/// A field of an object that holds the CCM chart's values, as the registry places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValuesField {
    /// Path of the field from the object's root: the values map, or the values string. For
    /// an umbrella chart's values it is the umbrella's field, whose keys start with the
    /// subchart's key (the alias a place reads below is not part of it).
    pub path: Vec<Seg>,
    /// The field is a YAML string (HelmChart `valuesContent`), not a map.
    pub yaml_string: bool,
}

/// The fields of `object` that hold values of the charts `sites` asks for, as the registry
/// places them (`values_places`): what a face needs to tell values keys from the object's
/// own fields without naming any controller's.
pub fn values_fields(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &SitesDocument,
) -> Vec<ValuesField> {
    let charts = super::chart_names_of(sites);
    values_places(gvk, object, charts, &Cancel::never())
        .into_iter()
        .map(|place| {
            let mut path = place.path;
            // A map place of an umbrella's values ends with the subchart's key; a values
            // string's place is the string itself.
            if !place.yaml_string && place.alias.is_some() {
                path.pop();
            }
            ValuesField {
                path,
                yaml_string: place.yaml_string,
            }
        })
        .collect()
}

/// Whether `object`'s place names its chart only by a reference to another object (Flux
/// `spec.chartRef`) whose name is not the chart, and holds structured values: the decoder's
/// first reading keeps none of another chart's values, so whether these are the CCM chart's
/// (and named as unseen) is only told from the full reading.
pub(super) fn unnamed_chart_ref_with_values(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    charts: &[String],
) -> bool {
    let root = &object.data;
    let Some(Values::Place(place)) = reading_of(gvk, root) else {
        return false;
    };
    let Some(ChartUnseen::Reference(at)) = place.chart_unseen else {
        return false;
    };
    let first_unset = match place.chart.first() {
        Some(ChartAt::Field(first)) => value_at(root, first).and_then(Value::as_str).is_none(),
        _ => true,
    };
    first_unset
        && value_at(root, at)
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .is_some_and(|n| !super::chart::chart_matches(n, charts))
        && !place.yaml_string
        && value_at(root, place.values).is_some_and(Value::is_object)
}

const CM_SECRET: &[&str] = &["configmaps", "secrets"];
const V1: &[&str] = &["v1"];
const FLUX: &[&str] = &["v2", "v2beta2", "v2beta1"];

/// The registry: every delivery path stackgate knows of.
pub const REGISTRY: &[DeliveryPath] = &[
    DeliveryPath {
        name: "ConfigMap / Secret cloud-config site",
        group: "",
        versions: V1,
        kinds: &["ConfigMap", "Secret"],
        recognised_by: "namespace and name (CloudConfigSites `sites`), or the site label",
        sources: &[read("data[key] / stringData[key]", Operation::CloudConfig)],
        webhook: Ok(&[Registration {
            group: "",
            versions: V1,
            resources: CM_SECRET,
            selected_by: "namespaces of the named sites and a matchCondition on the name; the site label",
            scope: Scope::Namespaced,
        }]),
        audit: &[
            Audit::Listed("", "v1", "ConfigMap"),
            Audit::Listed("", "v1", "Secret"),
        ],
        values: &[],
        reader: "src/sites/object_data.rs",
    },
    DeliveryPath {
        name: "Whatever a CCM workload mounts as `--cloud-config`",
        group: "",
        versions: V1,
        kinds: &["ConfigMap", "Secret"],
        recognised_by: "a Deployment or DaemonSet whose OpenStack CCM container reads the key as its `--cloud-config` (the `CcmConfigSource` fact: env and `$(VAR)` expansion, the last flag, mounts, `subPath`, `items`, projected volumes), whatever the object's name",
        sources: &[read("data[key] / stringData[key]", Operation::CloudConfig)],
        webhook: Ok(&[Registration {
            group: "",
            versions: V1,
            resources: CM_SECRET,
            selected_by: "chart `ccmConfigSource.enabled` (serve `--ccm-config-source auto` watches Deployments and DaemonSets): the namespaces in `ccmConfigSource.namespaces`, with matchConditions (1.28+) keeping out service-account tokens, Helm release records, TLS, registry, basic-auth, SSH and bootstrap-token Secrets, three system ConfigMaps and the named sites",
            scope: Scope::Namespaced,
        }]),
        // The audit lists the CCM workloads first and reads each object they name.
        audit: &[
            Audit::Listed("", "v1", "ConfigMap"),
            Audit::Listed("", "v1", "Secret"),
        ],
        values: &[],
        reader: "src/facts/ccm_config.rs",
    },
    DeliveryPath {
        name: "Labelled values ConfigMap / Secret",
        group: "",
        versions: V1,
        kinds: &["ConfigMap", "Secret"],
        recognised_by: "the values label (CloudConfigSites `valuesLabel`) naming the data key",
        sources: &[read("data[key] / stringData[key]", Operation::ValuesFile)],
        webhook: Ok(&[Registration {
            group: "",
            versions: V1,
            resources: CM_SECRET,
            selected_by: "objectSelector on the values label",
            scope: Scope::Namespaced,
        }]),
        audit: &[
            Audit::Listed("", "v1", "ConfigMap"),
            Audit::Listed("", "v1", "Secret"),
        ],
        values: &[],
        reader: "src/sites/labelled_values.rs",
    },
    DeliveryPath {
        name: "Cluster API ClusterResourceSet payload",
        group: "",
        versions: V1,
        kinds: &["Secret", "ConfigMap"],
        recognised_by: "Secret type `addons.cluster.x-k8s.io/resource-set`; a ConfigMap by shape (embedded manifests holding a site or the CCM chart's values; this also reads the ConfigMaps a K0smotronControlPlane lists in `spec.manifests`)",
        sources: &[
            read(
                "data[*] / stringData[*]: cloud-config sites and the CCM chart's values carriers (HelmChart, k0s Chart, …)",
                Operation::EmbeddedManifest,
            ),
            unseen(
                "a clusterctl `${VARIABLE}` as the embedded cloud.conf",
                Operation::EmbeddedManifest,
                "/stringData/cloud-config.yaml",
                r#""apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\nstringData:\n  cloud.conf: ${OPENSTACK_CLOUD_PROVIDER_CONF}\n""#,
            ),
        ],
        webhook: Ok(&[
            Registration {
                group: "",
                versions: V1,
                resources: &["secrets"],
                selected_by: "matchCondition on `object.type` (1.28+); without matchConditions the namespaces in `webhooks.legacy.crsPayloadNamespaces`",
                scope: Scope::Namespaced,
            },
            Registration {
                group: "",
                versions: V1,
                resources: &["configmaps"],
                selected_by: "matchCondition on the data (1.28+): more than 10,000 keys, or a value holding a YAML escape, or `kind` and a token of a site's name, the site label or a CCM marker, so never narrower than the payload reader (docs/limits.md). Without matchConditions none is sent (`check` reads them; the audit does not list ConfigMaps by content)",
                scope: Scope::Namespaced,
            },
        ]),
        audit: &[Audit::Listed("", "v1", "Secret")],
        values: &[],
        reader: "src/sites/payload.rs",
    },
    DeliveryPath {
        name: "Flux HelmRelease",
        group: "helm.toolkit.fluxcd.io",
        versions: FLUX,
        kinds: &["HelmRelease"],
        recognised_by: "`spec.chart.spec.chart` or `spec.chartRef.name` names the CCM chart; `check` resolves a `chartRef` to the run's `OCIRepository` (`spec.url`) or source `HelmChart` (`spec.chart`)",
        sources: &[
            unseen(
                "spec.chartRef not named after the chart, with the CCM chart's values (resolved by `check` from the run's objects)",
                Operation::Chart,
                "/spec/chartRef",
                r#"{"kind": "OCIRepository", "name": "occm-chart"}"#,
            ),
            unseen(
                "spec.chart.spec.valuesFiles, spec.chart.spec.valuesFile (deprecated)",
                Operation::ValuesFile,
                "/spec/chart/spec/valuesFiles",
                r#"["values.yaml", "values-prod.yaml"]"#,
            ),
            unseen(
                "spec.valuesFrom[] (resolved by `check` from the run's objects)",
                Operation::ValuesFile,
                "/spec/valuesFrom",
                r#"[{"kind": "Secret", "name": "occm-values", "valuesKey": "values.yaml"}]"#,
            ),
            unseen(
                "spec.valuesFrom[].targetPath",
                Operation::TargetPath,
                "/spec/valuesFrom",
                r#"[{"kind": "Secret", "name": "occm-cloud-conf", "valuesKey": "cloud.conf", "targetPath": "cloudConfigContents"}]"#,
            ),
            read("spec.values", Operation::ValuesFile),
            unseen(
                "spec.postRenderers (named beside the values' findings: the values are checked)",
                Operation::PostRender,
                "/spec/postRenderers",
                r#"[{"kustomize": {"patches": [{"target": {"kind": "Secret"}, "patch": "- op: remove\n  path: /data"}]}}]"#,
            ),
        ],
        webhook: Ok(&[Registration {
            group: "helm.toolkit.fluxcd.io",
            versions: FLUX,
            resources: &["helmreleases"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[Audit::Listed("helm.toolkit.fluxcd.io", "v2", "HelmRelease")],
        values: &[ValuesReading {
            kinds: &["HelmRelease"],
            any_version: false,
            when: None,
            values: Values::Place(Place {
                chart: &[
                    ChartAt::Field("/spec/chart/spec/chart"),
                    ChartAt::Field("/spec/chartRef/name"),
                ],
                values: "/spec/values",
                version: Some("/spec/chart/spec/version"),
                unseen_beneath: &[
                    "/spec/valuesFrom",
                    "/spec/chart/spec/valuesFiles",
                    "/spec/chart/spec/valuesFile",
                ],
                chart_unseen: Some(ChartUnseen::Reference("/spec/chartRef")),
                ..VALUES_MAP
            }),
        }],
        reader: "src/sites/helm/places.rs",
    },
    DeliveryPath {
        name: "Argo CD Application",
        group: "argoproj.io",
        versions: &["v1alpha1"],
        kinds: &["Application"],
        recognised_by: "`spec.source(s).chart`, or the last segment of `path`, names the CCM chart",
        sources: &[
            unseen(
                "helm.valueFiles",
                Operation::ValuesFile,
                "/spec/source/helm/valueFiles",
                r#"["values-prod.yaml"]"#,
            ),
            read("helm.values / helm.valuesObject", Operation::ValuesFile),
            read("helm.parameters[]", Operation::Set),
            read("helm.parameters[] with forceString", Operation::SetString),
            unseen(
                "helm.fileParameters[]",
                Operation::SetFile,
                "/spec/source/helm/fileParameters",
                r#"[{"name": "cloudConfigContents", "path": "files/cloud.conf"}]"#,
            ),
        ],
        webhook: Ok(&[Registration {
            group: "argoproj.io",
            versions: &["v1alpha1"],
            resources: &["applications"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[Audit::Listed("argoproj.io", "v1alpha1", "Application")],
        values: &[ValuesReading {
            kinds: &["Application"],
            any_version: false,
            when: None,
            values: Values::Reader(PlaceReader::ARGO),
        }],
        reader: "src/sites/helm/places.rs",
    },
    DeliveryPath {
        name: "Argo CD ApplicationSet",
        group: "argoproj.io",
        versions: &["v1alpha1"],
        kinds: &["ApplicationSet"],
        recognised_by: "`spec.template` whose sources name the CCM chart, as an Application's",
        sources: &[
            read(
                "spec.template.spec.source(s).helm (as an Application's) when the template holds no template syntax (`{{`)",
                Operation::ValuesFile,
            ),
            unseen(
                "spec.template with template syntax, or patched by spec.templatePatch",
                Operation::Template,
                "/spec/templatePatch",
                r#""spec:\n  source:\n    helm:\n      valuesObject: {}\n""#,
            ),
        ],
        webhook: Ok(&[Registration {
            group: "argoproj.io",
            versions: &["v1alpha1"],
            resources: &["applicationsets"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[Audit::Listed("argoproj.io", "v1alpha1", "ApplicationSet")],
        values: &[ValuesReading {
            kinds: &["ApplicationSet"],
            any_version: false,
            when: None,
            values: Values::Reader(PlaceReader::APPLICATION_SET),
        }],
        reader: "src/sites/helm/places.rs (application_set_places)",
    },
    DeliveryPath {
        name: "Sveltos ClusterProfile / Profile `helmCharts`",
        group: "config.projectsveltos.io",
        versions: &["v1beta1"],
        kinds: &["Profile", "ClusterProfile"],
        recognised_by: "`spec.helmCharts[].chartName` names the CCM chart",
        sources: &[
            read(
                "spec.helmCharts[].values without template syntax (`{{`)",
                Operation::ValuesFile,
            ),
            unseen(
                "spec.helmCharts[].values with template syntax (a Go template Sveltos renders per cluster)",
                Operation::Template,
                "/spec/helmCharts/0/values",
                r#""cloudConfig:\n  global:\n    region: {{ .Cluster.metadata.name }}\n""#,
            ),
            unseen(
                "spec.helmCharts[].valuesFrom",
                Operation::ValuesFile,
                "/spec/helmCharts/0/valuesFrom",
                r#"[{"kind": "ConfigMap", "name": "occm-values", "namespace": "default"}]"#,
            ),
        ],
        webhook: Ok(&[
            Registration {
                group: "config.projectsveltos.io",
                versions: &["v1beta1"],
                resources: &["profiles"],
                selected_by: "matchCondition: spec changed",
                scope: Scope::Namespaced,
            },
            Registration {
                group: "config.projectsveltos.io",
                versions: &["v1beta1"],
                resources: &["clusterprofiles"],
                selected_by: "matchCondition: spec changed; in a rule of its own, where no namespace exemption applies",
                scope: Scope::Cluster,
            },
        ]),
        audit: &[
            Audit::Listed("config.projectsveltos.io", "v1beta1", "Profile"),
            Audit::Listed("config.projectsveltos.io", "v1beta1", "ClusterProfile"),
        ],
        values: &[ValuesReading {
            kinds: &["Profile", "ClusterProfile"],
            any_version: true,
            when: None,
            values: Values::Reader(PlaceReader::SVELTOS),
        }],
        reader: "src/sites/helm/places.rs (sveltos_places)",
    },
    DeliveryPath {
        name: "Rancher Fleet HelmOp / Bundle",
        group: "fleet.cattle.io",
        versions: &["v1alpha1"],
        kinds: &["HelmOp", "Bundle"],
        recognised_by: "`spec.helm.chart` names the CCM chart",
        sources: &[
            read("spec.helm.values", Operation::ValuesFile),
            unseen(
                "spec.helm.valuesFiles, spec.helm.valuesFrom, spec.targetCustomizations[] (named as set over the values: stackgate claims no order for them)",
                Operation::ValuesFile,
                "/spec/helm/valuesFrom",
                r#"[{"secretKeyRef": {"name": "occm-values", "key": "values.yaml"}}]"#,
            ),
        ],
        webhook: Ok(&[Registration {
            group: "fleet.cattle.io",
            versions: &["v1alpha1"],
            resources: &["helmops", "bundles"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[
            Audit::Listed("fleet.cattle.io", "v1alpha1", "HelmOp"),
            Audit::Listed("fleet.cattle.io", "v1alpha1", "Bundle"),
        ],
        values: &[ValuesReading {
            kinds: &["HelmOp", "Bundle"],
            any_version: true,
            when: None,
            values: Values::Reader(PlaceReader::fleet(&["spec", "helm"])),
        }],
        reader: "src/sites/helm/places.rs (fleet_places)",
    },
    DeliveryPath {
        name: "Rancher Fleet `fleet.yaml`",
        group: "stackgate.dev",
        versions: &["v1alpha1"],
        kinds: &[FLEET_YAML_KIND],
        recognised_by: "a `fleet.yaml` whose `helm.chart` names the CCM chart",
        sources: &[
            read("helm.values", Operation::ValuesFile),
            unseen(
                "helm.valuesFiles, helm.valuesFrom, targetCustomizations[] (named as set over the values)",
                Operation::ValuesFile,
                "/helm/valuesFiles",
                r#"["values-prod.yaml"]"#,
            ),
        ],
        webhook: Err(
            "a file of a Git repository Fleet reads: `check` only (Fleet makes Bundles of it, which the webhook sees)",
        ),
        audit: &[Audit::NotInCluster],
        values: &[ValuesReading {
            kinds: &[FLEET_YAML_KIND],
            any_version: false,
            when: None,
            values: Values::Reader(PlaceReader::fleet(&["helm"])),
        }],
        reader: "src/sites/helm/places.rs (fleet_places)",
    },
    DeliveryPath {
        name: "RKE2/k3s helm-controller HelmChart and HelmChartConfig",
        group: "helm.cattle.io",
        versions: V1,
        kinds: &["HelmChart", "HelmChartConfig"],
        recognised_by: "HelmChart `spec.chart` names the CCM chart; a HelmChartConfig by the HelmChart's name",
        sources: &[
            unseen(
                "HelmChart spec.chartContent (an inline chart archive installed in place of the upstream chart)",
                Operation::Chart,
                "/spec/chartContent",
                r#""H4sIAAAAAAAA/wAAAP//AQAA//8AAAAAAAAAAA==""#,
            ),
            read("HelmChart spec.valuesContent", Operation::ValuesFile),
            read("HelmChart spec.values", Operation::ValuesFile),
            unseen(
                "HelmChart spec.valuesSecrets (resolved by `check` from the run's Secrets)",
                Operation::ValuesFile,
                "/spec/valuesSecrets",
                r#"[{"name": "occm-values", "keys": ["values.yaml"]}]"#,
            ),
            read("HelmChartConfig spec.valuesContent", Operation::ValuesFile),
            read("HelmChartConfig spec.values", Operation::ValuesFile),
            unseen(
                "HelmChartConfig spec.valuesSecrets (resolved by `check` from the run's Secrets when its HelmChart is in the run)",
                Operation::ValuesFile,
                "/spec/valuesSecrets",
                r#"[{"name": "occm-config-values", "keys": ["values.yaml"], "ignoreUpdates": true}]"#,
            ),
            read(
                "HelmChart spec.set (`true`/`false`/integers)",
                Operation::Set,
            ),
            read("HelmChart spec.set (other strings)", Operation::SetString),
        ],
        webhook: Ok(&[Registration {
            group: "helm.cattle.io",
            versions: V1,
            resources: &["helmcharts", "helmchartconfigs"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[
            Audit::Listed("helm.cattle.io", "v1", "HelmChart"),
            Audit::Listed("helm.cattle.io", "v1", "HelmChartConfig"),
        ],
        values: &[
            ValuesReading {
                kinds: &["HelmChart"],
                any_version: false,
                when: None,
                values: Values::Place(Place {
                    chart: &[ChartAt::Field("/spec/chart")],
                    values: "/spec/valuesContent",
                    yaml_string: true,
                    version: Some("/spec/version"),
                    values_secrets: Some("/spec/valuesSecrets"),
                    set: Some("/spec/set"),
                    values_over: Some("/spec/values"),
                    chart_unseen: Some(ChartUnseen::InlineArchive("/spec/chartContent")),
                    ..VALUES_MAP
                }),
            },
            // A HelmChartConfig customises the HelmChart of the same name.
            ValuesReading {
                kinds: &["HelmChartConfig"],
                any_version: false,
                when: None,
                values: Values::Place(Place {
                    chart: &[ChartAt::ObjectName],
                    values: "/spec/valuesContent",
                    yaml_string: true,
                    values_secrets: Some("/spec/valuesSecrets"),
                    values_over: Some("/spec/values"),
                    ..VALUES_MAP
                }),
            },
        ],
        reader: "src/sites/helm/places.rs",
    },
    DeliveryPath {
        name: "k0s ClusterConfig",
        group: "k0s.k0sproject.io",
        versions: &["v1beta1"],
        kinds: &["ClusterConfig"],
        recognised_by: "`spec.extensions.helm.charts[].chartname` names the CCM chart",
        sources: &[read(
            "spec.extensions.helm.charts[].values",
            Operation::ValuesFile,
        )],
        webhook: Ok(&[Registration {
            group: "k0s.k0sproject.io",
            versions: &["v1beta1"],
            resources: &["clusterconfigs"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[Audit::Listed(
            "k0s.k0sproject.io",
            "v1beta1",
            "ClusterConfig",
        )],
        values: &[ValuesReading {
            kinds: &["ClusterConfig"],
            any_version: true,
            when: None,
            values: Values::Reader(PlaceReader::k0s(&[])),
        }],
        reader: "src/sites/helm/places.rs",
    },
    DeliveryPath {
        name: "k0smotron control plane (a k0s ClusterConfig inside)",
        group: "controlplane.cluster.x-k8s.io",
        versions: &["v1beta1", "v1beta2"],
        kinds: &["K0smotronControlPlane", "K0sControlPlane"],
        recognised_by: "an embedded ClusterConfig (`spec.k0sConfig`, `spec.k0sConfigSpec.k0s`) whose helm charts name the CCM chart; a K0sControlPlane's `spec.k0sConfigSpec.files[].content` holding manifests (a k0s `Chart`, a cloud-config Secret)",
        sources: &[
            read(
                "<embedded ClusterConfig> spec.extensions.helm.charts[].values",
                Operation::ValuesFile,
            ),
            read(
                "K0sControlPlane spec.k0sConfigSpec.files[].content (manifests k0s applies from its manifests directory; the nested-manifest reader)",
                Operation::EmbeddedManifest,
            ),
        ],
        webhook: Ok(&[Registration {
            group: "controlplane.cluster.x-k8s.io",
            versions: &["v1beta1", "v1beta2"],
            resources: &["k0smotroncontrolplanes", "k0scontrolplanes"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[
            Audit::Listed(
                "controlplane.cluster.x-k8s.io",
                "v1beta2",
                "K0smotronControlPlane",
            ),
            Audit::Listed(
                "controlplane.cluster.x-k8s.io",
                "v1beta2",
                "K0sControlPlane",
            ),
        ],
        values: &[
            // k0sproject/k0smotron at 3897bbe645698acbe9974449bb771e949dedb77e:
            // `api/k0smotron.io/v1beta2/k0smotroncluster_types.go` (`K0sConfig
            // *unstructured.Unstructured json:"k0sConfig"`) and `api/bootstrap/v1beta2/k0s_types.go`
            // (`K0s *unstructured.Unstructured json:"k0s"`).
            ValuesReading {
                kinds: &["K0smotronControlPlane"],
                any_version: true,
                when: None,
                values: Values::Reader(PlaceReader::k0s(&["spec", "k0sConfig"])),
            },
            ValuesReading {
                kinds: &["K0sControlPlane"],
                any_version: true,
                when: None,
                values: Values::Reader(PlaceReader::k0s(&["spec", "k0sConfigSpec", "k0s"])),
            },
        ],
        reader: "src/sites/helm/places.rs (k0s_places, at the path the entry's PlaceReader::k0s names)",
    },
    DeliveryPath {
        name: "k0smotron Cluster (a k0s ClusterConfig inside)",
        group: "k0smotron.io",
        versions: &["v1beta1", "v1beta2"],
        kinds: &["Cluster"],
        recognised_by: "`spec.k0sConfig` whose helm charts name the CCM chart",
        sources: &[read(
            "spec.k0sConfig.spec.extensions.helm.charts[].values",
            Operation::ValuesFile,
        )],
        webhook: Ok(&[Registration {
            group: "k0smotron.io",
            versions: &["v1beta1", "v1beta2"],
            resources: &["clusters"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[Audit::Listed("k0smotron.io", "v1beta2", "Cluster")],
        values: &[ValuesReading {
            kinds: &["Cluster"],
            any_version: true,
            when: None,
            values: Values::Reader(PlaceReader::k0s(&["spec", "k0sConfig"])),
        }],
        reader: "src/sites/helm/places.rs (k0s_places, at the path the entry's PlaceReader::k0s names)",
    },
    DeliveryPath {
        name: "k0sctl Cluster (a k0s ClusterConfig inside)",
        group: "k0sctl.k0sproject.io",
        versions: &["v1beta1"],
        kinds: &["Cluster"],
        recognised_by: "`spec.k0s.config` whose helm charts name the CCM chart",
        sources: &[read(
            "spec.k0s.config.spec.extensions.helm.charts[].values",
            Operation::ValuesFile,
        )],
        webhook: Err(
            "a k0sctl file is read by the k0sctl CLI, never applied to a cluster: `check` only",
        ),
        audit: &[Audit::NotInCluster],
        values: &[
            // The `k0s.config` of `k0sctl.yaml` (k0sproject/k0sctl).
            ValuesReading {
                kinds: &["Cluster"],
                any_version: true,
                when: None,
                values: Values::Reader(PlaceReader::k0s(&["spec", "k0s", "config"])),
            },
        ],
        reader: "src/sites/helm/places.rs (k0s_places, at the path the entry's PlaceReader::k0s names)",
    },
    DeliveryPath {
        name: "Azimuth cluster-api-addon-provider HelmRelease (also Magnum's CAPI driver)",
        group: "addons.stackhpc.com",
        versions: &["v1alpha1"],
        kinds: &["HelmRelease"],
        recognised_by: "`spec.chart.name` names the CCM chart",
        sources: &[
            read(
                "spec.valuesSources[0].template when it is the only source and holds no template syntax (`{{`, `{%`, `{#`): the values as written",
                Operation::ValuesFile,
            ),
            unseen(
                "spec.valuesSources[] (templates with template syntax, configMap, secret, or more than one source)",
                Operation::Template,
                "/spec/valuesSources",
                r#"[{"secret": {"name": "occm-values", "key": "values.yaml"}}]"#,
            ),
        ],
        webhook: Ok(&[Registration {
            group: "addons.stackhpc.com",
            versions: &["v1alpha1"],
            resources: &["helmreleases", "manifests"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[Audit::Listed(
            "addons.stackhpc.com",
            "v1alpha1",
            "HelmRelease",
        )],
        values: &[ValuesReading {
            kinds: &["HelmRelease"],
            any_version: false,
            // One template-free template is the values as written.
            when: Some(|root| plain_values_template(root).is_some()),
            values: Values::Place(Place {
                chart: &[ChartAt::Field("/spec/chart/name")],
                values: "/spec/valuesSources/0/template",
                yaml_string: true,
                version: Some("/spec/chart/version"),
                ..VALUES_MAP
            }),
        }],
        reader: "src/sites/helm/places.rs (a template-free template), src/sites/delivery.rs (unseen)",
    },
    DeliveryPath {
        name: "Azimuth cluster-api-addon-provider Manifests",
        group: "addons.stackhpc.com",
        versions: &["v1alpha1"],
        kinds: &["Manifests"],
        recognised_by: "a `spec.manifestSources[].template` that may embed a cloud-config site or the CCM chart's values",
        sources: &[
            read(
                "spec.manifestSources[].template without template syntax (`{{`, `{%`, `{#`): manifests as written (the nested-manifest reader)",
                Operation::EmbeddedManifest,
            ),
            unseen(
                "spec.manifestSources[] (templates with template syntax, configMap, secret)",
                Operation::Template,
                "/spec/manifestSources",
                r#"[{"configMap": {"name": "cloud-config-manifests", "key": "secret.yaml"}}]"#,
            ),
        ],
        webhook: Ok(&[Registration {
            group: "addons.stackhpc.com",
            versions: &["v1alpha1"],
            resources: &["helmreleases", "manifests"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[Audit::Listed(
            "addons.stackhpc.com",
            "v1alpha1",
            "Manifests",
        )],
        values: &[],
        reader: "src/sites/payload.rs (`read_nested`, template-free templates), src/sites/delivery.rs (unseen)",
    },
    DeliveryPath {
        name: "k0s Chart (helm.k0sproject.io)",
        group: "helm.k0sproject.io",
        versions: &["v1beta1"],
        kinds: &["Chart"],
        recognised_by: "`spec.chartName` names the CCM chart (k0s applies `Chart` objects from its manifests directory; also inside a K0sControlPlane's files and a K0smotronControlPlane's `spec.manifests` ConfigMaps)",
        sources: &[read("spec.values", Operation::ValuesFile)],
        webhook: Ok(&[Registration {
            group: "helm.k0sproject.io",
            versions: &["v1beta1"],
            resources: &["charts"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[Audit::Listed("helm.k0sproject.io", "v1beta1", "Chart")],
        values: &[ValuesReading {
            kinds: &["Chart"],
            any_version: false,
            when: None,
            // k0sproject/k0s `pkg/apis/helm/v1beta1/chart_types.go`: `chartName`, `version`,
            // `values` (a string).
            values: Values::Place(Place {
                chart: &[ChartAt::Field("/spec/chartName")],
                values: "/spec/values",
                yaml_string: true,
                version: Some("/spec/version"),
                ..VALUES_MAP
            }),
        }],
        reader: "src/sites/helm/places.rs",
    },
    DeliveryPath {
        name: "Rancher provisioning Cluster (RKE2/k3s `additionalManifest`)",
        group: "provisioning.cattle.io",
        versions: V1,
        kinds: &["Cluster"],
        recognised_by: "`spec.rkeConfig.additionalManifest` holding manifests (an RKE2 HelmChart of the CCM chart, a cloud-config Secret)",
        sources: &[read(
            "spec.rkeConfig.additionalManifest (a manifest stream; the nested-manifest reader)",
            Operation::EmbeddedManifest,
        )],
        webhook: Ok(&[Registration {
            group: "provisioning.cattle.io",
            versions: V1,
            resources: &["clusters"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[Audit::Listed("provisioning.cattle.io", "v1", "Cluster")],
        values: &[],
        reader: "src/sites/delivery.rs (nested_fields) and src/sites/payload.rs (read_nested)",
    },
    DeliveryPath {
        name: "Giant Swarm App (cloud-provider-openstack-app)",
        group: "application.giantswarm.io",
        versions: &["v1alpha1"],
        kinds: &["App"],
        recognised_by: "`spec.name` names the CCM chart or `cloud-provider-openstack-app`",
        sources: &[
            unseen(
                "spec.config (catalog and cluster ConfigMap / Secret)",
                Operation::ValuesFile,
                "/spec/config",
                r#"{"configMap": {"name": "cpo-cluster-values", "namespace": "org-acme"}}"#,
            ),
            unseen(
                "spec.userConfig (ConfigMap / Secret)",
                Operation::ValuesFile,
                "/spec/userConfig",
                r#"{"secret": {"name": "cpo-user-secrets", "namespace": "org-acme"}}"#,
            ),
        ],
        webhook: Ok(&[Registration {
            group: "application.giantswarm.io",
            versions: &["v1alpha1"],
            resources: &["apps"],
            selected_by: "matchCondition: spec changed",
            scope: Scope::Namespaced,
        }]),
        audit: &[Audit::Listed(
            "application.giantswarm.io",
            "v1alpha1",
            "App",
        )],
        values: &[],
        reader: "src/sites/delivery.rs (unseen)",
    },
    DeliveryPath {
        name: "Talos machine config `cluster.inlineManifests`",
        group: "stackgate.dev",
        versions: &["v1alpha1"],
        kinds: &[TALOS_MACHINE_CONFIG_KIND],
        recognised_by: "a document with `version: v1alpha1`, `machine` and `cluster` (no `apiVersion`) in a file `check` reads",
        sources: &[read(
            "cluster.inlineManifests[].contents (manifests Talos applies at bootstrap; the nested-manifest reader)",
            Operation::EmbeddedManifest,
        )],
        webhook: Err(
            "a Talos machine config is applied by talosctl to the nodes, never to the Kubernetes API: `check` only",
        ),
        audit: &[Audit::NotInCluster],
        values: &[],
        reader: "src/sites/delivery.rs (synthetic_object, nested_fields) and src/sites/payload.rs (read_nested)",
    },
    DeliveryPath {
        name: "KubeOne manifest `cloudProvider.cloudConfig`",
        group: "kubeone.k8c.io",
        versions: &["v1beta2", "v1beta3"],
        kinds: &["KubeOneCluster"],
        recognised_by: "`cloudProvider.openstack` set",
        sources: &[read("cloudProvider.cloudConfig", Operation::CloudConfig)],
        webhook: Err(
            "a KubeOne manifest is read by the kubeone CLI, never applied to a cluster: `check` only",
        ),
        audit: &[Audit::NotInCluster],
        values: &[],
        reader: "src/sites/delivery.rs (kubeone_cloud_config)",
    },
    DeliveryPath {
        name: "kustomize `helmCharts[]` (`kubectl kustomize --enable-helm`)",
        group: "kustomize.config.k8s.io",
        versions: &["v1beta1"],
        kinds: &["Kustomization"],
        recognised_by: "a kustomization (`kustomization.yaml`, with or without `apiVersion`) whose `helmCharts[].name` names the CCM chart",
        sources: &[
            unseen(
                "helmCharts[].valuesFile (relative to the kustomization; merged beneath `valuesInline` by `check` when it is among the inputs, `valuesMerge: override`)",
                Operation::ValuesFile,
                "/helmCharts/0/valuesFile",
                r#""values-prod.yaml""#,
            ),
            read("helmCharts[].valuesInline", Operation::ValuesFile),
            unseen(
                "helmCharts[].additionalValuesFiles (and `valuesFile` under `valuesMerge: merge`)",
                Operation::ValuesFile,
                "/helmCharts/0/additionalValuesFiles",
                r#"["extra-values.yaml"]"#,
            ),
        ],
        webhook: Err(
            "a kustomization is read by kustomize, never applied to a cluster: `check` only",
        ),
        audit: &[Audit::NotInCluster],
        values: &[ValuesReading {
            kinds: &["Kustomization"],
            any_version: true,
            when: None,
            values: Values::Reader(PlaceReader::KUSTOMIZE),
        }],
        reader: "src/sites/helm/places.rs (kustomize_places), src/sites/resolve.rs (kustomize_values_files)",
    },
    DeliveryPath {
        name: "Plain Helm values file",
        group: "stackgate.dev",
        versions: &["v1alpha1"],
        kinds: &["HelmValues"],
        recognised_by: "`stackgate check --values-for CHART=GLOB` (an umbrella chart's file: under its dependency key)",
        sources: &[read("the file", Operation::ValuesFile)],
        webhook: Err("a file of the repository: `check` only"),
        audit: &[Audit::NotInCluster],
        values: &[ValuesReading {
            kinds: &[VALUES_FILE_KIND],
            any_version: false,
            when: None,
            values: Values::Place(Place {
                chart: &[ChartAt::Field("/chart")],
                values: "/values",
                version: Some("/chartVersion"),
                umbrella_dependency: true,
                ..VALUES_MAP
            }),
        }],
        reader: "src/sites/helm/places.rs",
    },
    DeliveryPath {
        name: "Plain INI cloud.conf",
        group: "stackgate.dev",
        versions: &["v1alpha1"],
        kinds: &["CloudConfigFile"],
        recognised_by: "a `.conf` / `.ini` file named on the command line, or `--ini GLOB`",
        sources: &[read("the file", Operation::CloudConfig)],
        webhook: Err("a file of the repository: `check` only"),
        audit: &[Audit::NotInCluster],
        values: &[],
        reader: "src/sites/object_data.rs",
    },
];

pub use super::chart::GIANT_SWARM_APP_CHART;

/// Objects whose CCM values stackgate cannot see: one unseen site each, naming the sources
/// (never their content). Azimuth's addon objects (values and manifests are Jinja2 templates
/// the addon provider renders with the cluster's objects) and Giant Swarm `App`s (values in
/// ConfigMaps and Secrets the App names).
pub(super) fn find(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &SitesDocument,
    charts: &[String],
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let root = &object.data;
    let kubeone = kubeone_cloud_config(gvk, object);
    if !kubeone.is_empty() {
        return kubeone;
    }
    let mut nested = nested_streams(gvk, object, sites, cancel);
    if gvk.group == "addons.stackhpc.com" && gvk.kind == "Manifests" {
        // Its template-free templates are read above; the rest is named below.
        nested.extend(unseen_manifests(gvk, object, sites));
        return nested;
    }
    if !nested.is_empty() {
        return nested;
    }
    let names_chart = |reference: Option<&str>| {
        reference.is_some_and(|r| {
            super::chart::chart_matches(r, charts) || r.trim().ends_with(GIANT_SWARM_APP_CHART)
        })
    };
    let (field, sources) = match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("addons.stackhpc.com", "HelmRelease")
            if names_chart(value_at(root, "/spec/chart/name").and_then(Value::as_str))
                && plain_values_template(root).is_none() =>
        {
            (
                "valuesSources",
                describe_sources("valuesSources", value_at(root, "/spec/valuesSources")),
            )
        }
        ("application.giantswarm.io", "App")
            if names_chart(value_at(root, "/spec/name").and_then(Value::as_str)) =>
        {
            // Each reference is named with its field, and the finding sits at the first field
            // set (`spec.config` when neither is: the catalog's defaults still apply).
            let mut refs = Vec::new();
            let mut first = None;
            for (field, what) in [
                ("config", "configMap"),
                ("config", "secret"),
                ("userConfig", "configMap"),
                ("userConfig", "secret"),
            ] {
                let at = format!("/spec/{field}/{what}/name");
                if let Some(name) = value_at(root, &at).and_then(Value::as_str) {
                    let kind = if what == "secret" {
                        "Secret"
                    } else {
                        "ConfigMap"
                    };
                    refs.push(format!("{kind} {name} (spec.{field})"));
                    first.get_or_insert(field);
                }
            }
            refs.push("the catalog's and the cluster's default values".to_owned());
            (first.unwrap_or("config"), refs.join(", "))
        }
        _ => return Vec::new(),
    };
    unseen_at(gvk, object, field, sources)
}

/// The unseen site of `object` at `spec.<field>`, naming `sources`.
fn unseen_at(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    field: &str,
    sources: String,
) -> Vec<FoundConfig> {
    let path = vec![Seg::key("spec"), Seg::key(field)];
    let location = format!("spec.{field}");
    let error = SiteError::Unseen {
        location: location.clone(),
        sources,
    };
    let name = object.metadata.name.as_deref().unwrap_or("");
    let outer = match object.metadata.namespace.as_deref() {
        Some(ns) => format!("{} {ns}/{name}", gvk.kind),
        None => format!("{} {name}", gvk.kind),
    };
    let mut site = FoundConfig::new(outer, location, Err(error), UnseenValues { path });
    site.mutable = false;
    vec![site]
}

/// The one values source of an Azimuth addon `HelmRelease` when it is a template without
/// template syntax (its index): the values are that YAML, read as the chart's values by
/// [`super::helm`]. None with other or more sources (named as unseen).
pub(super) fn plain_values_template(root: &Value) -> Option<usize> {
    match value_at(root, "/spec/valuesSources")?
        .as_array()?
        .as_slice()
    {
        [only] if only.as_object().is_some_and(|m| m.len() == 1) => only
            .get("template")
            .and_then(Value::as_str)
            .is_some_and(|t| !templated(t))
            .then_some(0),
        _ => None,
    }
}

/// Whether a Jinja2 template (Azimuth's addon provider renders them) holds template syntax:
/// one without any (no `{{`, `{%` or `{#`) renders as itself, so it is read as plain YAML.
fn templated(text: &str) -> bool {
    text.contains("{{") || text.contains("{%") || text.contains("{#")
}

/// Kind of the synthetic object `stackgate check` makes of a Rancher Fleet `fleet.yaml`.
pub const FLEET_YAML_KIND: &str = "FleetYaml";

/// Kind of the synthetic object `stackgate check` makes of a Talos machine config document.
pub const TALOS_MACHINE_CONFIG_KIND: &str = "TalosMachineConfig";

/// A document without `apiVersion` and `kind` that is a carrier all the same, as the object
/// `stackgate check` evaluates (every other path as in the file, so a fix is written where the
/// document has it); None for any other document:
/// - a Talos machine config (`version: v1alpha1` with `machine` and `cluster` maps;
///   siderolabs/talos `pkg/machinery/config/types/v1alpha1`): `apiVersion:
///   stackgate.dev/v1alpha1`, `kind: TalosMachineConfig`, the file's name;
/// - a kustomization file (`kustomization.yaml`, `.yml`, `Kustomization`) with `helmCharts`,
///   which kustomize reads without them: `kustomize.config.k8s.io/v1beta1` `Kustomization`.
pub fn synthetic_object(json: &Value, name: &str) -> Option<Value> {
    let map = json.as_object()?;
    if map.contains_key("apiVersion") || map.contains_key("kind") {
        return None;
    }
    let file = name.rsplit(['/', '\\']).next().unwrap_or(name);
    if matches!(file, "fleet.yaml" | "fleet.yml") && map.get("helm").is_some_and(Value::is_object) {
        let mut out = map.clone();
        out.insert(
            "apiVersion".to_owned(),
            Value::String("stackgate.dev/v1alpha1".to_owned()),
        );
        out.insert("kind".to_owned(), Value::String(FLEET_YAML_KIND.to_owned()));
        out.insert("metadata".to_owned(), serde_json::json!({ "name": name }));
        return Some(Value::Object(out));
    }
    if matches!(
        file,
        "kustomization.yaml" | "kustomization.yml" | "Kustomization"
    ) && map.get("helmCharts").is_some_and(Value::is_array)
    {
        let mut out = map.clone();
        out.insert(
            "apiVersion".to_owned(),
            Value::String("kustomize.config.k8s.io/v1beta1".to_owned()),
        );
        out.insert("kind".to_owned(), Value::String("Kustomization".to_owned()));
        out.entry("metadata")
            .or_insert_with(|| serde_json::json!({ "name": file }));
        return Some(Value::Object(out));
    }
    let is_talos = map.get("version").and_then(Value::as_str) == Some("v1alpha1")
        && map.get("machine").is_some_and(Value::is_object)
        && map.get("cluster").is_some_and(Value::is_object)
        && !map.contains_key("apiVersion")
        && !map.contains_key("kind");
    if !is_talos {
        return None;
    }
    let mut out = map.clone();
    out.insert(
        "apiVersion".to_owned(),
        Value::String("stackgate.dev/v1alpha1".to_owned()),
    );
    out.insert(
        "kind".to_owned(),
        Value::String(TALOS_MACHINE_CONFIG_KIND.to_owned()),
    );
    out.insert("metadata".to_owned(), serde_json::json!({ "name": name }));
    Some(Value::Object(out))
}

/// A KubeOne manifest's cloud config (`KubeOneCluster.cloudProvider.cloudConfig`, the INI the
/// OpenStack CCM reads: kubermatic/kubeone `pkg/apis/kubeone/v1beta2/types.go`
/// `CloudProviderSpec.CloudConfig`), when its cloud provider is OpenStack.
fn kubeone_cloud_config(gvk: &GroupVersionKind, object: &DynamicObject) -> Vec<FoundConfig> {
    let root = &object.data;
    if gvk.group != "kubeone.k8c.io"
        || gvk.kind != "KubeOneCluster"
        || value_at(root, "/cloudProvider/openstack").is_none()
    {
        return Vec::new();
    }
    let Some(raw) = value_at(root, "/cloudProvider/cloudConfig") else {
        return Vec::new();
    };
    let name = object
        .metadata
        .name
        .as_deref()
        .or_else(|| root.get("name").and_then(Value::as_str))
        .unwrap_or("");
    vec![super::object_data::TextField::found(
        format!("KubeOneCluster {name}"),
        vec![Seg::key("cloudProvider"), Seg::key("cloudConfig")],
        "cloudProvider.cloudConfig".to_owned(),
        raw,
        super::Holder::Secret,
    )]
}

/// Where a manifest stream nested in a string field of `object` is, for the kinds that carry
/// one: (JSON path of the string, how messages name the carrier and the field).
///
/// - Rancher `provisioning.cattle.io/v1` `Cluster.spec.rkeConfig.additionalManifest`
///   (rancher/rancher `pkg/apis/provisioning.cattle.io/v1/rke.go`: `AdditionalManifest
///   string`), which RKE2/k3s apply from their manifests directory;
/// - Azimuth `Manifests.spec.manifestSources[].template` without template syntax (rendered
///   as itself: [`templated`]);
/// - k0smotron `K0sControlPlane.spec.k0sConfigSpec.files[].content` (k0sproject/k0smotron
///   `api/bootstrap/v1beta1/k0s_types.go` `Files []File`, CAPI's `File.Content`), written to
///   the node, and applied by k0s when under its manifests directory
///   (`/var/lib/k0s/manifests/`: k0rdent's OpenStack template writes its CCM `Chart` there).
fn nested_fields(gvk: &GroupVersionKind, root: &Value) -> Vec<(Vec<Seg>, &'static str, String)> {
    match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("provisioning.cattle.io", "Cluster") => {
            let path = vec![
                Seg::key("spec"),
                Seg::key("rkeConfig"),
                Seg::key("additionalManifest"),
            ];
            vec![(
                path,
                "Cluster",
                "spec.rkeConfig.additionalManifest".to_owned(),
            )]
        }
        ("addons.stackhpc.com", "Manifests") => list_entry_fields(
            root,
            &["spec", "manifestSources"],
            "template",
            None,
            |t| !templated(t),
            "Manifests",
        ),
        ("stackgate.dev", TALOS_MACHINE_CONFIG_KIND) => list_entry_fields(
            root,
            &["cluster", "inlineManifests"],
            "contents",
            Some("name"),
            |_| true,
            "Talos machine config",
        ),
        ("controlplane.cluster.x-k8s.io", "K0sControlPlane") => list_entry_fields(
            root,
            &["spec", "k0sConfigSpec", "files"],
            "content",
            Some("path"),
            |_| true,
            "K0sControlPlane",
        ),
        _ => Vec::new(),
    }
}

/// The string `field` of each entry of the list at `list` that `keep` accepts: its path, the
/// carrier's label and a location (`spec.files[0].content`, followed by the entry's
/// `named_by` value in parentheses when given).
fn list_entry_fields(
    root: &Value,
    list: &[&str],
    field: &str,
    named_by: Option<&str>,
    keep: impl Fn(&str) -> bool,
    label: &'static str,
) -> Vec<(Vec<Seg>, &'static str, String)> {
    let entries = list
        .iter()
        .try_fold(root, |v, k| v.get(k))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.get(field).and_then(Value::as_str).is_some_and(&keep))
        .map(|(i, e)| {
            let mut path: Vec<Seg> = list.iter().map(|k| Seg::key(k)).collect();
            path.extend([Seg::Index(i), Seg::key(field)]);
            let mut location = format!("{}[{i}].{field}", list.join("."));
            if let Some(named_by) = named_by {
                let name = e.get(named_by).and_then(Value::as_str).unwrap_or("");
                location.push_str(&format!(" ({})", super::path::shown_entry(name)));
            }
            (path, label, location)
        })
        .collect()
}

/// The configs in the manifest streams nested in `object` ([`nested_fields`]), read with the
/// one nested-manifest reader ([`super::payload::read_nested`]). More than
/// [`super::MAX_NESTED_CARRIERS`] streams that would be parsed are not parsed: the
/// object is reported over the limit instead.
fn nested_streams(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &SitesDocument,
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let root = &object.data;
    let fields = nested_fields(gvk, root);
    if fields.is_empty() {
        return Vec::new();
    }
    let name = object.metadata.name.as_deref().unwrap_or("");
    let outer = match object.metadata.namespace.as_deref() {
        Some(ns) => format!("{} {ns}/{name}", gvk.kind),
        None => format!("{} {name}", gvk.kind),
    };
    let charts = super::chart_names_of(sites);
    let texts: Vec<(Vec<Seg>, &'static str, String, &str)> = fields
        .into_iter()
        .filter_map(|(path, label, location)| {
            let text = path
                .iter()
                .try_fold(root, |v, seg| match seg {
                    Seg::Key(k) => v.get(k),
                    Seg::Index(i) => v.get(i),
                })
                .and_then(Value::as_str)?;
            let worth = super::payload::mentions(text, charts)
                || super::payload::may_hold_site(text, sites);
            worth.then_some((path, label, location, text))
        })
        .collect();
    if texts.len() > super::MAX_NESTED_CARRIERS {
        let (path, _, location, _) = &texts[0];
        let error = SiteError::TooManyCarriers {
            location: location.clone(),
            count: texts.len(),
            limit: super::MAX_NESTED_CARRIERS,
        };
        let mut site = FoundConfig::new(
            outer,
            location.clone(),
            Err(error),
            UnseenValues { path: path.clone() },
        );
        site.mutable = false;
        return vec![site];
    }
    let mut found = Vec::new();
    for (path, label, location, text) in texts {
        if cancel.is_cancelled() {
            break;
        }
        found.extend(super::payload::read_nested(
            outer.clone(),
            label,
            (path, location),
            text,
            sites,
            cancel,
        ));
    }
    found
}

/// The unseen site of an Azimuth `Manifests` whose templated or referenced sources may embed
/// a cloud-config site (its template-free templates are read, [`nested_streams`]).
fn unseen_manifests(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &SitesDocument,
) -> Vec<FoundConfig> {
    let root = &object.data;
    let unread: Vec<Value> = value_at(root, "/spec/manifestSources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        // Sources other than a template-free template (read by `nested_streams`).
        .filter(|s| {
            s.get("template")
                .and_then(Value::as_str)
                .is_none_or(templated)
        })
        .cloned()
        .collect();
    let embeds_site = unread.iter().any(|s| {
        s.get("template")
            .and_then(Value::as_str)
            .is_some_and(|t| super::payload::may_hold_site(t, sites))
            || s.get("configMap").is_some()
            || s.get("secret").is_some()
    });
    if !embeds_site {
        return Vec::new();
    }
    let sources = describe_sources("manifestSources", value_at(root, "/spec/manifestSources"));
    unseen_at(gvk, object, "manifestSources", sources)
}

/// `spec.valuesSources[0] (a Jinja2 template the addon provider renders), ConfigMap
/// occm-values key values.yaml (a Jinja2 template)`: names, never content.
fn describe_sources(field: &str, list: Option<&Value>) -> String {
    let Some(list) = list.and_then(Value::as_array) else {
        return "sources the addon provider renders".to_owned();
    };
    let mut out: Vec<String> = Vec::new();
    // A template-free template is read where it is (`nested_streams`, `plain_values_template`).
    let plain = |s: &Value| {
        s.get("template")
            .and_then(Value::as_str)
            .is_some_and(|t| !templated(t))
    };
    for (i, source) in list.iter().enumerate().filter(|(_, s)| !plain(s)).take(8) {
        let name_key = |what: &str, v: &Value| {
            let name = v.get("name").and_then(Value::as_str).unwrap_or("");
            match v.get("key").and_then(Value::as_str) {
                Some(key) => format!("{what} {name} key {key} (a Jinja2 template)"),
                None => format!("{what} {name} (a Jinja2 template)"),
            }
        };
        if let Some(cm) = source.get("configMap") {
            out.push(name_key("ConfigMap", cm));
        } else if let Some(secret) = source.get("secret") {
            out.push(name_key("Secret", secret));
        } else {
            out.push(format!(
                "spec.{field}[{i}] (a Jinja2 template the addon provider renders)"
            ));
        }
    }
    if list.len() > 8 {
        out.push(format!("{} more", list.len() - 8));
    }
    if out.is_empty() {
        "no source".to_owned()
    } else {
        out.join(", ")
    }
}

/// The carrier table of `docs/carriers.md`, generated from [`REGISTRY`].
pub fn carriers_markdown() -> String {
    let mut out = String::from(
        "# Delivery paths\n\nGenerated from the registry in `src/sites/delivery.rs` \
         (`tests/delivery_registry.rs` fails when this file, the chart's webhook rules, the \
         audit's targets or `stackgate check` disagree with it).\n\nValues sources are listed in \
         the order the controller hands them to Helm: a later one wins. *Unseen* sources are \
         not read where they are written: a finding says which, and claims nothing about \
         them.\n\n| delivery path | objects | recognised by | values sources (Helm operation) | webhook registration | audit | reader |\n|---|---|---|---|---|---|---|\n",
    );
    for path in REGISTRY {
        let group = if path.group.is_empty() {
            "core".to_owned()
        } else {
            format!("`{}`", path.group)
        };
        let objects = format!(
            "{group} {} {}",
            path.versions.join("/"),
            path.kinds.join(", ")
        );
        let sources: Vec<String> = path
            .sources
            .iter()
            .map(|s| {
                format!(
                    "{} ({}){}",
                    s.field,
                    s.operation.as_str(),
                    if s.read { "" } else { ", *unseen*" }
                )
            })
            .collect();
        let webhook = match path.webhook {
            Ok(registrations) => registrations
                .iter()
                .map(|r| {
                    format!(
                        "{} {}: {}{} ({})",
                        if r.group.is_empty() { "core" } else { r.group },
                        r.versions.join("/"),
                        r.resources.join(", "),
                        match r.scope {
                            Scope::Namespaced => "",
                            Scope::Cluster => ", cluster-scoped",
                        },
                        r.selected_by
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(why) => format!("none: {why}"),
        };
        let audit: Vec<String> = path
            .audit
            .iter()
            .map(|a| match a {
                Audit::Listed(_, version, kind) => format!("{kind} {version}"),
                Audit::NotInCluster => "not in a cluster".to_owned(),
            })
            .collect();
        out.push_str(&format!(
            "| {} | {objects} | {} | {} | {webhook} | {} | `{}` |\n",
            path.name,
            path.recognised_by,
            sources.join("; "),
            audit.join(", "),
            path.reader
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Flux HelmRelease of the CCM chart with values.
    fn ccm_release() -> (GroupVersionKind, DynamicObject) {
        let gvk = GroupVersionKind::gvk("helm.toolkit.fluxcd.io", "v2", "HelmRelease");
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "ccm", "namespace": "kube-system"},
            "spec": {
                "chart": {"spec": {"chart": "openstack-cloud-controller-manager", "version": "2.31.1"}},
                "values": {"cloudConfig": {"global": {"auth-url": "https://k/v3"}}},
            },
        }))
        .unwrap();
        (gvk, object)
    }

    /// The places are read once per chart list and then handed out as read; a reading the
    /// cancel flag stopped is not kept, so a later reader reads again.
    #[test]
    fn object_places_are_read_once_per_chart_list() {
        let (gvk, object) = ccm_release();
        let charts = vec!["openstack-cloud-controller-manager".to_owned()];
        let places = ObjectPlaces::new(&gvk, &object);
        let first = places.of(&charts, &Cancel::never());
        assert_eq!(first.len(), 1);
        assert_eq!(
            first[0].path,
            values_places(&gvk, &object, &charts, &Cancel::never())[0].path
        );
        assert!(Rc::ptr_eq(&first, &places.of(&charts, &Cancel::never())));
        let other = vec!["another-chart".to_owned()];
        let none = places.of(&other, &Cancel::never());
        assert!(none.is_empty());
        assert!(Rc::ptr_eq(&first, &places.of(&charts, &Cancel::never())));
        assert!(Rc::ptr_eq(&none, &places.of(&other, &Cancel::never())));

        let stopped = Cancel::new();
        stopped.cancel();
        let fresh = ObjectPlaces::new(&gvk, &object);
        let cut = fresh.of(&charts, &stopped);
        let again = fresh.of(&charts, &Cancel::never());
        assert!(!Rc::ptr_eq(&cut, &again));
        assert!(Rc::ptr_eq(&again, &fresh.of(&charts, &Cancel::never())));
        assert_eq!(fresh.gvk(), &gvk);
        assert!(std::ptr::eq(fresh.object(), &object));
    }

    #[test]
    fn each_resource_is_registered_in_one_scope_and_a_cluster_profile_at_cluster_scope() {
        assert_eq!(
            registered_scope("config.projectsveltos.io", "clusterprofiles"),
            Some(Scope::Cluster)
        );
        assert_eq!(
            registered_scope("config.projectsveltos.io", "profiles"),
            Some(Scope::Namespaced)
        );
        assert_eq!(registered_scope("", "secrets"), Some(Scope::Namespaced));
        assert_eq!(registered_scope("example.org", "clusterprofiles"), None);
        assert_eq!(
            registered_scope("config.projectsveltos.io", "sveltos"),
            None
        );
        let registrations: Vec<&Registration> = REGISTRY
            .iter()
            .filter_map(|path| path.webhook.ok())
            .flatten()
            .collect();
        for r in &registrations {
            for resource in r.resources {
                assert!(
                    registrations
                        .iter()
                        .filter(|o| o.group == r.group && o.resources.contains(resource))
                        .all(|o| o.scope == r.scope),
                    "{}/{resource} is registered in two scopes",
                    r.group
                );
            }
        }
        assert_eq!(Scope::Cluster.as_str(), "Cluster");
        assert_eq!(Scope::Namespaced.as_str(), "Namespaced");
    }

    #[test]
    fn the_carrier_table_says_which_registration_is_cluster_scoped() {
        let table = carriers_markdown();
        let row = table
            .lines()
            .find(|l| l.starts_with("| Sveltos ClusterProfile"))
            .expect("the Sveltos row");
        assert!(
            row.contains("v1beta1: clusterprofiles, cluster-scoped ("),
            "{row}"
        );
        assert!(row.contains("v1beta1: profiles (matchCondition"), "{row}");
        assert_eq!(table.matches(", cluster-scoped (").count(), 1);
    }
}
