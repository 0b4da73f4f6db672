//! `cluster-name`: the OpenStack CCM's `--cluster-name` must be unique per OpenStack project
//! and must not change on a running cluster.
//!
//! Facts (domain-facts §9.1): the CCM names Octavia load balancers after `--cluster-name`
//! (default `kubernetes`; the upstream chart's `cluster.name` defaults to `kubernetes`) and
//! adopts the ones whose names match. Two clusters in one project that both keep the default
//! adopt and rewrite each other's load balancers (cloud-provider-openstack #3102, #2241,
//! #2571, #2624). Renaming a running cluster makes the CCM create new load balancers with new
//! IPs and orphan the old ones (kubermatic #5322).
//!
//! Where the name is read:
//! * CCM workloads (Pod, Deployment, DaemonSet, StatefulSet, ReplicaSet, Job, CronJob): the
//!   containers recognised like `ccm-concurrency` does (image contains one of `ccmImages`,
//!   default `openstack-cloud-controller-manager`, or command/args contain one of `ccmArgs`,
//!   default `--cloud-provider=openstack`); the last `--cluster-name` of command + args, in
//!   both `--cluster-name=x` and `--cluster-name x` forms. A `$(VAR)` reference is expanded
//!   from the container's own `env` when that holds a literal value (what the kubelet does);
//!   from `valueFrom` or `envFrom` it is unknown at admission and only warned about.
//! * The CCM chart's values in every carrier the sites read (Flux HelmRelease, Argo CD
//!   Application, RKE2/k3s HelmChart and HelmChartConfig, values files in `check`):
//!   `cluster.name` (the chart passes it as `--cluster-name=$(CLUSTER_NAME)`), overridden by a
//!   `--cluster-name` in `controllerExtraArgs` (the chart appends those after its own args).
//!
//! A CCM that runs no service controller creates no load balancers, so its name matters to
//! none: a container whose `--controllers` leave the service controller off, and chart values
//! whose `enabledControllers` (the chart's `--controllers`, with `controllerExtraArgs` after
//! it) do, are not sources ([`runs_service_controller`]).
//!
//! CREATE: the default or an empty name warns (params.defaultName: deny makes it a denial).
//! UPDATE: a change of the effective name denies in enforce mode.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ccm_workload::{
    CcmContainer, CcmMarkers, has_reference, pod_spec_path, string_flag_uses,
};
use super::{
    Check, Example, Family, ObjectInput, Operation, RuleId, RuleOutput, Severity, Violation,
    parse_params,
};
use crate::sites::ObjectPlaces;
use crate::sites::helm::{self, ChartValues};

/// The family: reads CCM workloads and the CCM chart's values.
pub static FAMILY: Family = Family {
    id: RuleId::new("cluster-name"),
    check: Check::Object(check),
    facts: &[],
    params: &["ccmImages", "ccmArgs", "defaultName"],
    parse_params: parse_params::<ClusterNameParams>,
    codes: &[CODE_DEFAULT, CODE_RENAMED, CODE_UNKNOWN],
    example: || {
        Some(Example::create(
            serde_json::json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
            "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager"}},
                "values": {"cloudConfig": {"global": {"auth-url": "https://keystone.example:5000/v3"}}}}}),
        ))
    },
    embedded: true,
    default_policy: (
        "cluster-name.yaml",
        include_str!("../../policies/cluster-name.yaml"),
    ),
};

/// The default (`kubernetes`) or an empty cluster name on a new CCM.
pub const CODE_DEFAULT: &str = "default-name";
/// An update changes the effective cluster name.
pub const CODE_RENAMED: &str = "renamed";
/// The name is a `$(VAR)` reference stackgate cannot resolve, or `--cluster-name` has no value.
pub const CODE_UNKNOWN: &str = "unknown-name";

/// The CCM's flag.
pub const FLAG: &str = "--cluster-name";
/// The CCM's and the chart's default cluster name.
pub const DEFAULT_NAME: &str = "kubernetes";

/// Upstream sources, cited in every message.
const SOURCES: &str = "cloud-provider-openstack #3102, #2241, #2571, #2624";
const RENAME_SOURCE: &str = "kubermatic #5322";

/// What the default name gives on CREATE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DefaultName {
    /// A warning (the default: existing single-cluster projects are fine).
    #[default]
    Warn,
    /// A denial in enforce mode.
    Deny,
}

/// `params` of a cluster-name policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterNameParams {
    /// A container runs the OpenStack CCM when its image contains one of these (empty: the
    /// default `openstack-cloud-controller-manager`).
    #[serde(default)]
    pub ccm_images: Vec<String>,
    /// ... or when its args/command contain one of these (empty: `--cloud-provider=openstack`).
    #[serde(default)]
    pub ccm_args: Vec<String>,
    /// `warn` (default) or `deny` for the default or an empty name on CREATE.
    #[serde(default)]
    pub default_name: DefaultName,
}

/// The effective cluster name one source gives the CCM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Name {
    /// Known: the flag's value, the values' `cluster.name`, or the default.
    Known {
        /// The name.
        name: String,
        /// Set explicitly (false: nothing sets it, the default applies).
        explicit: bool,
    },
    /// Not known at admission: a `$(VAR)` from outside the container, or a flag without value.
    Unknown(String),
}

/// One place that sets (or would set) the CCM's cluster name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameSource {
    /// Identifies the source across old and new object (container or values carrier).
    pub key: String,
    /// Where, for messages: `Deployment kube-system/occm container "occm" args[2]`.
    pub location: String,
    /// JSON pointer of the field.
    pub pointer: String,
    /// The name.
    pub name: Name,
    /// What else may set the name that this write does not show, for messages.
    pub caveat: Option<Caveat>,
}

/// What may set the name where a write does not show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caveat {
    /// Another values file or `--set` of the same release (a plain values file is one of
    /// them): a note of the finding.
    OtherValues,
    /// A RKE2/k3s HelmChartConfig of the same name over a HelmChart: the finding's
    /// `unseen_overlay`, which a face that merged the HelmChartConfig in leaves out.
    HelmChartConfig,
}

impl Caveat {
    /// The sentence the caveat adds to a finding.
    fn sentence(self) -> String {
        let clause = match self {
            Caveat::OtherValues => {
                "unless another values file or --set of the same release sets cluster.name, \
                 which this file does not show"
            }
            Caveat::HelmChartConfig => {
                "unless a HelmChartConfig of the same name sets cluster.name, which this write \
                 does not show"
            }
        };
        format!("This holds {clause}.")
    }
}

fn check(input: &ObjectInput<'_>) -> RuleOutput {
    let defaults = ClusterNameParams::default();
    let params = input.params.get().unwrap_or(&defaults);
    let subject = input.subject;
    let cancel = input.context.cancel;
    let sources = name_sources_in(input.places, params, cancel);
    let mut out = RuleOutput::default();
    if sources.is_empty() {
        return out;
    }
    let old = match subject.operation {
        Operation::Update => subject
            .old_object
            .map(|old| name_sources_in(&ObjectPlaces::new(subject.kind, old), params, cancel)),
        _ => None,
    };
    for source in &sources {
        if let Name::Unknown(why) = &source.name {
            out.violations.push(unknown(source, why));
            continue;
        }
        let Name::Known { name, explicit } = &source.name else {
            continue;
        };
        match &old {
            None => {
                if name == DEFAULT_NAME || name.is_empty() {
                    let severity = match params.default_name {
                        DefaultName::Warn => Severity::Warn,
                        DefaultName::Deny => Severity::Deny,
                    };
                    out.violations
                        .push(default_name(source, name, *explicit, severity));
                }
            }
            Some(old) => {
                let before = old.iter().find(|o| o.key == source.key).map(|o| &o.name);
                if let Some(Name::Known { name: was, .. }) = before
                    && was != name
                {
                    out.violations.push(renamed(source, was, name));
                }
            }
        }
    }
    out
}

/// Every place in `object` that gives the CCM a cluster name.
pub fn name_sources(
    gvk: &kube::core::GroupVersionKind,
    object: &kube::core::DynamicObject,
    params: &ClusterNameParams,
) -> Vec<NameSource> {
    name_sources_in(
        &ObjectPlaces::new(gvk, object),
        params,
        &crate::budget::Cancel::never(),
    )
}

/// [`name_sources`] of the object whose values places `places` reads, that stops reading
/// chart values once `cancel` fires (the engine then
/// discards the verdict).
fn name_sources_in(
    places: &ObjectPlaces<'_>,
    params: &ClusterNameParams,
    cancel: &crate::budget::Cancel,
) -> Vec<NameSource> {
    let (gvk, object) = (places.gvk(), places.object());
    // Named only for values that name the cluster (most objects hold no chart values).
    let holder = std::cell::OnceCell::new();
    // A plain values file (`check --values-for`) is one of the release's values files: others,
    // `--set`, or a tool that renders more values over it (Cluster Stacks' overwrite.yaml) may
    // set the name where this file does not show it.
    let values_file = gvk.kind == helm::VALUES_FILE_KIND;
    let mut out: Vec<NameSource> = helm::chart_values_all_in(places, cancel)
        .iter()
        .filter(|values| values_run_service_controller(values))
        .filter_map(|values| {
            values_source(
                holder.get_or_init(|| helm::object_name(gvk, object)),
                values,
            )
        })
        .map(|mut source| {
            if values_file && source.caveat.is_none() {
                source.caveat = Some(Caveat::OtherValues);
            }
            source
        })
        .collect();
    if pod_spec_path(gvk).is_none() {
        // No pod spec, no container: the markers (two lists) are not built for nothing.
        return out;
    }
    let markers = CcmMarkers::new(&params.ccm_images, &params.ccm_args);
    for container in markers.containers(gvk, object) {
        if runs_service_controller(&container.argv()) {
            out.push(container_source(&container));
        }
    }
    out
}

/// The CCM's controller flag: which controllers it runs (default `*`, every controller).
pub const CONTROLLERS_FLAG: &str = "--controllers";

/// The names the CCM's `--controllers` knows its service (load-balancer) controller by:
/// `service`, and `service-lb-controller` (k8s.io/cloud-provider `names.ServiceLBController`,
/// accepted as an alias since Kubernetes 1.28).
const SERVICE_CONTROLLER: &[&str] = &["service", "service-lb-controller"];

/// Whether a CCM started with `argv` runs its service controller, the one that creates
/// load balancers. `--controllers` is a string slice: each use adds its comma-separated
/// entries (the first replaces the default `*`), and k8s.io/controller-manager
/// `app/helper.go` `IsControllerEnabled` reads them in order: an entry naming the controller
/// enables it, `-name` disables it, the first of those decides, else a `*` enables it. A use
/// whose value this object does not show (none, a `$(VAR)`) may run it.
pub fn runs_service_controller(argv: &[&str]) -> bool {
    let uses = string_flag_uses(argv, CONTROLLERS_FLAG);
    if uses.is_empty() {
        return true;
    }
    let mut entries: Vec<String> = Vec::new();
    for u in uses {
        match u.value {
            Some(v) if !has_reference(&v) => {
                entries.extend(v.split(',').map(|e| e.trim().to_owned()));
            }
            _ => return true,
        }
    }
    controller_enabled(&entries)
}

/// `IsControllerEnabled` for the service controller over `--controllers` entries.
fn controller_enabled(entries: &[String]) -> bool {
    let mut star = false;
    for entry in entries {
        if SERVICE_CONTROLLER.contains(&entry.as_str()) {
            return true;
        }
        if entry
            .strip_prefix('-')
            .is_some_and(|name| SERVICE_CONTROLLER.contains(&name))
        {
            return false;
        }
        star |= entry == "*";
    }
    star
}

/// Whether the CCM the chart values deploy runs its service controller: the chart passes
/// `--controllers=` with `enabledControllers` joined (default: every controller, the service
/// one included), then the `controllerExtraArgs`. A list that is not a list of strings may
/// run it.
fn values_run_service_controller(values: &ChartValues) -> bool {
    let mut argv: Vec<String> = Vec::new();
    match values.values.get("enabledControllers") {
        None | Some(Value::Null) => return true,
        Some(Value::Array(list)) => {
            let names: Option<Vec<&str>> = list.iter().map(Value::as_str).collect();
            let Some(names) = names else { return true };
            argv.push(format!("{CONTROLLERS_FLAG}={}", names.join(",")));
        }
        Some(_) => return true,
    }
    if let Some(extra) = helm::controller_extra_args(&values.values) {
        argv.extend(extra);
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    runs_service_controller(&argv)
}

fn container_source(container: &CcmContainer<'_>) -> NameSource {
    let key = format!("{}/{}", container.list, container.name);
    let argv = container.argv();
    let Some(last) = string_flag_uses(&argv, FLAG).pop() else {
        return NameSource {
            key,
            location: container.described.clone(),
            pointer: container.pointer(),
            name: Name::Known {
                name: DEFAULT_NAME.to_owned(),
                explicit: false,
            },
            caveat: None,
        };
    };
    let (field, at, pointer) = container.locate(last.index);
    let location = format!("{} {field}[{at}]", container.described);
    let name = match last.value {
        None => Name::Unknown("has no value".to_owned()),
        Some(v) if has_reference(&v) => match container.expand(&v) {
            Some(name) => Name::Known {
                name,
                explicit: true,
            },
            None => Name::Unknown(
                "is a $(VAR) reference to a variable whose value this write does not show \
                 (valueFrom, envFrom or undefined)"
                    .to_owned(),
            ),
        },
        Some(v) => Name::Known {
            name: v.replace("$$", "$"),
            explicit: true,
        },
    };
    NameSource {
        key,
        location,
        pointer,
        name,
        caveat: None,
    }
}

fn values_source(holder: &str, values: &ChartValues) -> Option<NameSource> {
    let key = format!("values {}", values.field);
    // controllerExtraArgs come after the chart's own `--cluster-name`, so the last one wins.
    if let Some(args) = helm::controller_extra_args(&values.values) {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Some(last) = string_flag_uses(&argv, FLAG).pop() {
            let at = values.describe(&format!("controllerExtraArgs[{}]", last.index));
            let name = match last.value {
                None => Name::Unknown("has no value".to_owned()),
                Some(v) if has_reference(&v) => Name::Unknown(
                    "is a $(VAR) reference, which the kubelet expands in the CCM container"
                        .to_owned(),
                ),
                Some(v) => Name::Known {
                    name: v,
                    explicit: true,
                },
            };
            return Some(NameSource {
                key,
                location: format!("{holder} {at}"),
                pointer: values.pointer(&["controllerExtraArgs"]),
                name,
                caveat: None,
            });
        }
    }
    // A `spec.set` entry applies over every values file, a HelmChartConfig's too
    // (helm-controller passes `spec.set` last): the name is where it is set.
    let set_entry = values.set_entry_for(&["cluster", "name"]);
    let (location, pointer) = match set_entry {
        Some(entry) => (format!("{holder} {}", entry.name), entry.pointer.clone()),
        None => (
            format!("{holder} {}", values.describe("cluster.name")),
            values.pointer(&["cluster", "name"]),
        ),
    };
    // Argo CD `helm.parameters` override every values source.
    if let Some((_, value)) = values
        .parameters
        .iter()
        .rev()
        .find(|(name, _)| name == "cluster.name")
    {
        return Some(NameSource {
            key,
            location: format!("{holder} helm.parameters cluster.name"),
            pointer,
            name: Name::Known {
                name: value.clone(),
                explicit: true,
            },
            caveat: None,
        });
    }
    let set = values.values.get("cluster").and_then(|c| c.get("name"));
    let name = match set {
        None => {
            if let Some(from) = &values.merged_from {
                Name::Unknown(format!(
                    "is not set in these values; it may be set in {from}, which this write does \
                     not show"
                ))
            } else if values.overlay {
                // A HelmChartConfig that does not set it leaves the HelmChart's name.
                return None;
            } else {
                Name::Known {
                    name: DEFAULT_NAME.to_owned(),
                    explicit: false,
                }
            }
        }
        // Null deletes the chart's default: Helm renders it empty.
        Some(Value::Null) => Name::Known {
            name: String::new(),
            explicit: true,
        },
        Some(Value::String(s)) => Name::Known {
            name: s.clone(),
            explicit: true,
        },
        Some(other) => Name::Known {
            name: crate::sites::render::go_value(other),
            explicit: true,
        },
    };
    let caveat = (values.overridable && set_entry.is_none()).then_some(Caveat::HelmChartConfig);
    Some(NameSource {
        key,
        location,
        pointer,
        name,
        caveat,
    })
}

/// A name for messages: quoted, cut at 100 characters.
fn shown(name: &str) -> String {
    // The first 100 characters, borrowed (a name of at most 100 bytes is all of them).
    let cut = (name.len() > 100)
        .then(|| name.char_indices().nth(100))
        .flatten();
    match cut {
        Some((at, _)) => format!("{:?}…", &name[..at]),
        None => format!("{name:?}"),
    }
}

fn default_name(source: &NameSource, name: &str, explicit: bool, severity: Severity) -> Violation {
    let what = match (name.is_empty(), explicit) {
        (true, _) => "the OpenStack CCM runs with an empty cluster name".to_owned(),
        (false, _) => format!("the CCM runs with the default cluster name {}", shown(name)),
    };
    let unset = if explicit {
        String::new()
    } else {
        format!("The default applies: nothing here sets {FLAG} or the chart's cluster.name. ")
    };
    Violation {
        severity,
        code: CODE_DEFAULT,
        line: None,
        pointer: Some(source.pointer.clone()),
        location: Some(source.location.clone()),
        what,
        fix: format!("set {FLAG} (chart: cluster.name) to a name unique in the project"),
        why: format!(
            "{unset}The OpenStack CCM names Octavia load balancers after it and adopts every load balancer \
             whose name matches, so two clusters in one OpenStack project that keep the default \
             take over and rewrite each other's load balancers ({SOURCES}). Set it before the \
             first Service of type LoadBalancer exists (renaming later recreates every load \
             balancer)."
        ),
        notes: source
            .caveat
            .filter(|c| *c == Caveat::OtherValues)
            .map(Caveat::sentence)
            .into_iter()
            .collect(),
        unseen_overlay: source
            .caveat
            .filter(|c| *c == Caveat::HelmChartConfig)
            .map(Caveat::sentence),
        fixed_by_edit: false,
    }
}

fn renamed(source: &NameSource, was: &str, name: &str) -> Violation {
    Violation {
        severity: Severity::Deny,
        code: CODE_RENAMED,
        line: None,
        pointer: Some(source.pointer.clone()),
        location: Some(source.location.clone()),
        what: format!(
            "this changes the OpenStack CCM's cluster name from {} to {}",
            shown(was),
            shown(name)
        ),
        fix: format!(
            "keep {}; rename only in a planned migration of every LoadBalancer Service",
            shown(was)
        ),
        why: format!(
            "The CCM finds its Octavia load balancers by that name, so this recreates every \
             Service load balancer and changes its IP, and leaves the old ones orphaned in \
             Octavia ({RENAME_SOURCE}; {SOURCES})."
        ),
        notes: Vec::new(),
        unseen_overlay: None,
        fixed_by_edit: false,
    }
}

fn unknown(source: &NameSource, why: &str) -> Violation {
    Violation {
        severity: Severity::Warn,
        code: CODE_UNKNOWN,
        line: None,
        pointer: Some(source.pointer.clone()),
        location: Some(source.location.clone()),
        what: format!("the CCM's {FLAG} {why}, so stackgate cannot check it at admission"),
        fix: "make sure it is a name unique in the project and unchanged".to_owned(),
        why: format!(
            "The CCM names and adopts Octavia load balancers by it: the default \"kubernetes\" \
             shared by two clusters in one OpenStack project makes them take over each other's \
             load balancers ({SOURCES}), and changing it recreates every load balancer with a \
             new IP ({RENAME_SOURCE})."
        ),
        notes: Vec::new(),
        unseen_overlay: None,
        fixed_by_edit: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name is shown quoted, its first 100 characters and `…` when longer: at and around
    /// 100 in bytes and in characters, with characters Debug escapes.
    #[test]
    fn names_are_shown_quoted_and_cut_at_100_characters() {
        let reference = |name: &str| {
            let cut: String = name.chars().take(100).collect();
            if cut.len() < name.len() {
                format!("{cut:?}…")
            } else {
                format!("{cut:?}")
            }
        };
        for c in ["a", "é", "\"", "\n"] {
            for n in [0, 1, 50, 99, 100, 101, 150] {
                let name = c.repeat(n);
                assert_eq!(shown(&name), reference(&name), "{name:?}");
                let mixed = format!("{}{name}", "a".repeat(60));
                assert_eq!(shown(&mixed), reference(&mixed), "{mixed:?}");
            }
        }
        assert_eq!(shown("kubernetes"), "\"kubernetes\"");
        assert_eq!(shown(&"x".repeat(101)), format!("\"{}\"…", "x".repeat(100)));
    }
    use kube::core::{DynamicObject, GroupVersionKind};
    use serde_json::json;

    fn sources(v: Value) -> Vec<NameSource> {
        let api = v["apiVersion"].as_str().unwrap().to_owned();
        let kind = v["kind"].as_str().unwrap().to_owned();
        let (g, ver) = api.split_once('/').unwrap_or(("", api.as_str()));
        let gvk = GroupVersionKind::gvk(g, ver, &kind);
        let object: DynamicObject = serde_json::from_value(v).unwrap();
        name_sources(&gvk, &object, &ClusterNameParams::default())
    }

    fn deployment(container: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [container]}}}})
    }

    fn known(name: &str, explicit: bool) -> Name {
        Name::Known {
            name: name.into(),
            explicit,
        }
    }

    #[test]
    fn workload_flag_forms_last_wins_and_env_expansion() {
        let image = "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.36.0";
        let s = sources(deployment(json!({"name": "occm", "image": image,
            "args": ["--cluster-name=a", "--cluster-name", "b"]})));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name, known("b", true));
        assert_eq!(s[0].pointer, "/spec/template/spec/containers/0/args/1");
        assert!(s[0].location.ends_with("container \"occm\" args[1]"));
        let s = sources(deployment(
            json!({"name": "occm", "image": image, "args": ["--v=2"]}),
        ));
        assert_eq!(s[0].name, known(DEFAULT_NAME, false));
        // The upstream manifest: `$(CLUSTER_NAME)` from a literal env entry.
        let s = sources(deployment(json!({"name": "occm", "image": image,
            "args": ["--cluster-name=$(CLUSTER_NAME)"],
            "env": [{"name": "CLUSTER_NAME", "value": "kubernetes"}]})));
        assert_eq!(s[0].name, known("kubernetes", true));
        let s = sources(deployment(json!({"name": "occm", "image": image,
            "args": ["--cluster-name=$(CLUSTER_NAME)"],
            "envFrom": [{"configMapRef": {"name": "x"}}]})));
        assert!(matches!(s[0].name, Name::Unknown(_)));
        // Not a CCM container: nothing.
        assert!(sources(deployment(json!({"name": "x", "image": "nginx"}))).is_empty());
    }

    #[test]
    fn chart_values_cluster_name_and_extra_args() {
        let hr = |values: Value| {
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "occm", "namespace": "kube-system"},
                "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager"}},
                    "values": values}})
        };
        let s = sources(hr(json!({})));
        assert_eq!(s[0].name, known(DEFAULT_NAME, false));
        assert_eq!(
            s[0].location,
            "HelmRelease kube-system/occm spec.values.cluster.name"
        );
        assert_eq!(s[0].pointer, "/spec/values/cluster/name");
        let s = sources(hr(json!({"cluster": {"name": "prod-a"}})));
        assert_eq!(s[0].name, known("prod-a", true));
        let s = sources(hr(json!({"cluster": {"name": "prod-a"},
            "controllerExtraArgs": "- --cluster-name=prod-b\n"})));
        assert_eq!(s[0].name, known("prod-b", true));
        assert_eq!(
            s[0].location,
            "HelmRelease kube-system/occm spec.values.controllerExtraArgs[0]"
        );
        let s = sources(
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": "openstack-cloud-controller-manager",
                "valuesContent": "cluster:\n  name: 42\n"}}),
        );
        assert_eq!(s[0].name, known("42", true));
        assert_eq!(
            s[0].location,
            "HelmChart kube-system/occm spec.valuesContent, cluster.name"
        );
        assert_eq!(s[0].pointer, "/spec/valuesContent");
    }

    #[test]
    fn caveats_name_what_may_set_the_name_where_the_write_does_not_show_it() {
        const CHART: &str = "openstack-cloud-controller-manager";
        let chart = |spec: Value| {
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
                "metadata": {"name": "occm", "namespace": "kube-system"}, "spec": spec})
        };
        let caveats = |source: &NameSource| {
            let v = default_name(source, DEFAULT_NAME, false, Severity::Warn);
            (v.unseen_overlay, v.notes)
        };
        // A HelmChart: a HelmChartConfig this write does not show may set it (the overlay).
        let s = sources(chart(
            json!({"chart": CHART, "valuesContent": "cloudConfig: {}\n"}),
        ));
        assert_eq!(s[0].caveat, Some(Caveat::HelmChartConfig));
        assert_eq!(
            caveats(&s[0]),
            (
                Some(
                    "This holds unless a HelmChartConfig of the same name sets cluster.name, \
                     which this write does not show."
                        .to_owned()
                ),
                Vec::new()
            )
        );
        // Its `spec.set` entry wins over a HelmChartConfig: nothing to say.
        let s = sources(chart(
            json!({"chart": CHART, "set": {"cluster.name": "kubernetes"}}),
        ));
        assert_eq!(s[0].caveat, None);
        assert_eq!(caveats(&s[0]), (None, Vec::new()));
        // A plain values file: another values file of the release may (a note).
        let s = sources(json!({"apiVersion": helm::VALUES_FILE_API_VERSION,
            "kind": helm::VALUES_FILE_KIND, "metadata": {"name": "values.yaml"},
            "chart": CHART, "values": {}}));
        assert_eq!(s[0].caveat, Some(Caveat::OtherValues));
        assert_eq!(
            caveats(&s[0]),
            (
                None,
                vec![
                    "This holds unless another values file or --set of the same release sets \
                     cluster.name, which this file does not show."
                        .to_owned()
                ]
            )
        );
        // A Flux HelmRelease's values are every values source of its release: neither.
        let s = sources(
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": {"spec": {"chart": CHART}}, "values": {}}}),
        );
        assert_eq!(s[0].caveat, None);
        assert_eq!(caveats(&s[0]), (None, Vec::new()));
    }
}
