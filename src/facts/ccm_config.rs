//! Which object each OpenStack CCM container reads as its cloud config: the `CcmConfigSource`
//! fact. Every wrapper that produces a CCM config (the chart's values, a GitOps controller, an
//! umbrella chart, a hand-written manifest) ends in a workload whose CCM container is started
//! with `--cloud-config=<path>` and a volume that puts a Secret or ConfigMap key at that path.
//! Reading that last hop decides the cloud-config sites without knowing any wrapper.
//!
//! The resolution follows the programs that make the path real:
//!
//! 1. **The kubelet's environment** (kubernetes/kubernetes 001a80e975bb880d0fe60b304d30950fe661f278
//!    `pkg/kubelet/kubelet_pods.go`, `makeEnvironmentVariables`): `envFrom` first, then `env` in
//!    order, each `value` expanded with the variables defined before it (and Service
//!    variables); a later entry of the same name replaces an earlier one, `value: ""` included.
//!    `valueFrom` and `envFrom` values are in other objects: unknown here.
//! 2. **The kubelet's `$(VAR)` expansion** of `command` and `args` with the final environment
//!    (`third_party/forked/golang/expansion/expand.go`, [`expand`]; its own test table,
//!    490ffa432a878f5a75e5b5906d820d06e672556e `expand_test.go`, is a differential test here):
//!    `$$` is one `$`, an undefined `$(VAR)` stays as written, `$(` without `)` stays literal.
//!    In `subPathExpr` an undefined or empty variable stops the container instead.
//! 3. **The CCM's flags**: `--cloud-config=<v>` or `--cloud-config <v>`, the last one wins
//!    (pflag); empty by default (kubernetes/cloud-provider 46666112f47d004d76fb91406104f94e6a504b2f
//!    `options/cloudprovider.go` l.40-41). Without it `InitCloudProvider` hands the provider no
//!    config (`plugins.go` l.122-126) and the OpenStack provider refuses it
//!    (cloud-provider-openstack c453fb7c9bbb2091aee763d9d2809cc81fdf31c6 `pkg/openstack/openstack.go`
//!    l.205-208, "no OpenStack cloud provider config file given"; the CCM exits,
//!    `cmd/openstack-cloud-controller-manager/main.go` l.65-75). `OS_*` variables do not stand
//!    in for it (`pkg/client/client.go` l.133-137).
//! 4. **The container's mounts**: the deepest `volumeMounts[].mountPath` that holds the path
//!    (with `subPath` / `subPathExpr`), then the volume: `secret` / `configMap` keys as files,
//!    or `items` mapping a key to a path; `projected` sources merged (a later source wins a
//!    path at run time, so every source that may hold it is a candidate); the kubelet's
//!    `..data/` directory (`pkg/volume/util/atomic_writer.go`) is the same files. `hostPath`
//!    and a path no volume holds (a file of the image) are unseen, and said to be.
//!
//! Init containers are not read: they exit before the CCM starts. The fact is pure: a face
//! hands it objects ([`CcmConfigReads::add_workload`]) and reads it per object
//! ([`CcmConfigReads::reads_of`]).

use std::collections::{BTreeMap, BTreeSet};

use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::ccm_workload::{CcmContainer, CcmMarkers, string_flag_uses};
use crate::short_text::ShortText;
use crate::sites::helm::CcmVersion;
use crate::sites::{SiteKind, SitesDocument};

/// The CCM's flag naming its cloud-config file (k8s.io/cloud-provider `options`).
pub const CLOUD_CONFIG_FLAG: &str = "--cloud-config";

/// Config objects the fact keeps, across every workload (a cluster runs one or two CCMs; a
/// workload names one or two config objects). Past it, further workloads are counted as not
/// kept and [`CcmConfigReads::complete`] is false: a face then says that it cannot see every
/// CCM's config.
pub const MAX_READS: usize = 1024;

/// Bytes of one `$(VAR)` expansion's result. The kubelet's own expansion is unbounded, but the
/// apiserver bounds the object; this keeps a crafted chain of variables that doubles at each
/// step (`B=$(A)$(A)`, `C=$(B)$(B)`, ...) from growing past any use.
pub const MAX_EXPANDED_BYTES: usize = 64 * 1024;

/// One Secret or ConfigMap key, in the workload's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConfigKey {
    /// Secret or ConfigMap.
    pub kind: SiteKind,
    /// Namespace (the workload's; empty when the workload's manifest names none).
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// Data key.
    pub key: String,
}

impl std::fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}/{} key {:?}",
            self.kind.as_str(),
            self.namespace,
            self.name,
            self.key
        )
    }
}

/// Where one CCM container's cloud config comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A key of one of these objects (more than one when a `projected` volume merges several
    /// sources that may each hold the file: whichever does is read).
    Objects(Vec<ConfigKey>),
    /// The container reads a config stackgate cannot see, and why (a `hostPath`, a file of
    /// the image, a path built from a variable of another object).
    Unseen(String),
    /// The CCM would not start with this configuration, and why (no `--cloud-config`, a path
    /// no mounted object holds).
    NotStarting(String),
}

/// What one CCM container of a workload reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRead {
    /// `DaemonSet kube-system/openstack-cloud-controller-manager container "occm"`.
    pub reader: String,
    /// JSON pointer of the container in the object.
    pub pointer: String,
    /// The effective `--cloud-config` value after expansion, when known.
    pub path: Option<String>,
    /// Where it comes from.
    pub source: Source,
    /// The CCM release its image tag pins, when it pins one.
    pub version: Option<CcmVersion>,
}

/// The sources of every CCM container of `object` (a Pod or a workload with a pod template)
/// that `markers` recognise, in container order; empty for other objects.
pub fn container_reads(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    markers: &CcmMarkers<'_>,
) -> Vec<ContainerRead> {
    let containers = markers.containers(gvk, object);
    if containers.is_empty() {
        return Vec::new();
    }
    let Some(spec) = super::ccm_workload::pod_spec_path(gvk)
        .and_then(|path| path.iter().try_fold(&object.data, |v, t| v.get(t)))
    else {
        return Vec::new();
    };
    let namespace = object.metadata.namespace.as_deref().unwrap_or("");
    containers
        .iter()
        // An init container has exited before the CCM starts.
        .filter(|c| c.list == "containers")
        .map(|c| {
            let (path, source) = source_of(c, spec, namespace);
            ContainerRead {
                reader: ShortText::location(&c.described).into_string(),
                pointer: c.pointer(),
                path,
                source,
                version: c
                    .container
                    .get("image")
                    .and_then(Value::as_str)
                    .and_then(crate::sites::helm::image_version),
            }
        })
        .collect()
}

/// A value of the container's environment, as far as this object tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum EnvValue {
    Known(String),
    /// Set from another object (`valueFrom`, or built from such a value), and how.
    Unknown(String),
}

/// The container's environment as the kubelet builds it, from this object alone.
#[derive(Debug, Default)]
struct Environment {
    vars: BTreeMap<String, EnvValue>,
    /// `envFrom` is set: any name not defined by `env` may come from it.
    env_from: bool,
}

impl Environment {
    /// `makeEnvironmentVariables`: `env` entries in order, each value expanded with the
    /// variables defined before it; the last entry of a name wins.
    fn of(container: &Value) -> Self {
        let mut env = Environment {
            vars: BTreeMap::new(),
            env_from: container
                .get("envFrom")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty()),
        };
        for entry in container
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = entry.get("name").and_then(Value::as_str) else {
                continue;
            };
            let value = entry.get("value").and_then(Value::as_str).unwrap_or("");
            let resolved = if !value.is_empty() {
                env.expand(value)
            } else if entry.get("valueFrom").is_some_and(|v| !v.is_null()) {
                EnvValue::Unknown(format!("{name} is set from valueFrom"))
            } else {
                EnvValue::Known(String::new())
            };
            env.vars.insert(name.to_owned(), resolved);
        }
        env
    }

    /// The value `$(name)` expands to, or None when the kubelet leaves the reference as
    /// written. Unknown when another object may define it.
    fn lookup(&self, name: &str) -> Option<EnvValue> {
        if let Some(value) = self.vars.get(name) {
            return Some(value.clone());
        }
        if self.env_from {
            return Some(EnvValue::Unknown(format!(
                "{name} is not in env and may come from envFrom"
            )));
        }
        if is_service_variable(name) {
            return Some(EnvValue::Unknown(format!(
                "{name} may be a Service's environment variable"
            )));
        }
        None
    }

    /// [`expand`] with this environment; unknown when a reference is unknown.
    fn expand(&self, input: &str) -> EnvValue {
        let mut unknown = None;
        let expanded = expand(input, |name| match self.lookup(name) {
            Some(EnvValue::Known(v)) => Some(v),
            Some(EnvValue::Unknown(why)) => {
                unknown.get_or_insert(why);
                Some(String::new())
            }
            None => None,
        });
        match (unknown, expanded) {
            (Some(why), _) => EnvValue::Unknown(why),
            (None, Some(text)) => EnvValue::Known(text),
            (None, None) => EnvValue::Unknown(format!(
                "its expansion is over {MAX_EXPANDED_BYTES} bytes, or not UTF-8"
            )),
        }
    }
}

/// Whether the kubelet may define `name` from a Service (`enableServiceLinks`, on by default):
/// `<SVC>_SERVICE_HOST`, `<SVC>_SERVICE_PORT[_<PORT>]`, `<SVC>_PORT[_...]`.
fn is_service_variable(name: &str) -> bool {
    name.contains("_SERVICE_HOST") || name.contains("_SERVICE_PORT") || name.contains("_PORT")
}

/// The kubelet's `$(VAR)` expansion of `input` (`expansion.Expand`): `$$` is one `$`;
/// `$(name)` is replaced by `mapping(name)`, or kept as written when it returns None; `$(`
/// with no `)` after it, and `$` followed by anything else, are kept as written — except that
/// Go converts the one byte after such a `$` to a character (`string(input[0])`), so a
/// non-ASCII character there comes out as other bytes. None when the result would pass
/// [`MAX_EXPANDED_BYTES`] or, through that conversion, is not UTF-8 (no mount path names it).
pub fn expand(input: &str, mut mapping: impl FnMut(&str) -> Option<String>) -> Option<String> {
    let bytes = input.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.extend_from_slice(&bytes[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance = match bytes[cursor + 1] {
                b'$' => {
                    out.push(b'$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match mapping(name) {
                            Some(value) => out.extend_from_slice(value.as_bytes()),
                            None => {
                                out.extend_from_slice(b"$(");
                                out.extend_from_slice(name.as_bytes());
                                out.push(b')');
                            }
                        }
                        close + 1
                    }
                    // An incomplete reference: `$(` is kept and the rest read on.
                    None => {
                        out.extend_from_slice(b"$(");
                        1
                    }
                },
                // The operator and the byte after it, that byte as Go's `string(byte)`
                // makes it: the character U+0000..U+00FF of that number.
                byte => {
                    out.push(b'$');
                    let mut utf8 = [0u8; 4];
                    out.extend_from_slice(char::from(byte).encode_utf8(&mut utf8).as_bytes());
                    1
                }
            };
            cursor += advance + 1;
            checkpoint = cursor;
            if out.len() > MAX_EXPANDED_BYTES {
                return None;
            }
        } else {
            cursor += 1;
        }
    }
    out.extend_from_slice(&bytes[checkpoint..]);
    if out.len() > MAX_EXPANDED_BYTES {
        return None;
    }
    String::from_utf8(out).ok()
}

/// The effective `--cloud-config` of `ccm` and where it comes from.
fn source_of(ccm: &CcmContainer<'_>, spec: &Value, namespace: &str) -> (Option<String>, Source) {
    let env = Environment::of(ccm.container);
    let argv = ccm.argv();
    let mut expanded: Vec<String> = Vec::with_capacity(argv.len());
    let mut unknown: Vec<(usize, String)> = Vec::new();
    for (index, arg) in argv.iter().enumerate() {
        match env.expand(arg) {
            EnvValue::Known(text) => expanded.push(text),
            EnvValue::Unknown(why) => {
                unknown.push((index, why));
                // Kept as written: it is not a `--cloud-config` we can read.
                expanded.push(String::new());
            }
        }
    }
    let words: Vec<&str> = expanded.iter().map(String::as_str).collect();
    let uses = string_flag_uses(&words, CLOUD_CONFIG_FLAG);
    let last = uses.last();
    // An argument whose value stackgate cannot see, after the last `--cloud-config` it can,
    // may set the flag again.
    if let Some((index, why)) = unknown
        .iter()
        .find(|(index, _)| last.is_none_or(|u| *index >= u.index))
    {
        return (
            None,
            Source::Unseen(format!(
                "argument {} ({}) may set {CLOUD_CONFIG_FLAG} and is not known here: {why}",
                index,
                ShortText::location(argv[*index])
            )),
        );
    }
    let Some(last) = last else {
        return (
            None,
            Source::NotStarting(format!("the container has no {CLOUD_CONFIG_FLAG}")),
        );
    };
    let Some(raw) = last.value.as_deref() else {
        return (
            None,
            Source::NotStarting(format!(
                "{CLOUD_CONFIG_FLAG} is the last argument, without a value (the flag parser \
                 refuses it)"
            )),
        );
    };
    let shown = Some(ShortText::location(raw).into_string());
    if raw.is_empty() {
        return (
            shown,
            Source::NotStarting(format!("{CLOUD_CONFIG_FLAG} is empty")),
        );
    }
    if words[last.index].split_whitespace().nth(1).is_some() && raw.contains('$') {
        return (
            shown,
            Source::Unseen(format!(
                "{CLOUD_CONFIG_FLAG} is set in a shell command line from a shell variable"
            )),
        );
    }
    if !raw.starts_with('/') {
        return (
            shown,
            Source::Unseen(format!(
                "{CLOUD_CONFIG_FLAG} is a relative path: it depends on the image's working \
                 directory"
            )),
        );
    }
    let path = clean(raw);
    let source = resolve(ccm.container, spec, &env, &path, namespace);
    (shown, source)
}

/// `path` cleaned lexically as Go's `path.Clean` does for an absolute path: repeated `/`,
/// `.` and `..` resolved (the kernel resolves them the same way before any symlink matters
/// here).
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The part of `path` under `dir` (both clean), None when `path` is not in `dir`.
fn under<'p>(path: &'p str, dir: &str) -> Option<&'p str> {
    if dir == "/" {
        return Some(path.trim_start_matches('/'));
    }
    let rest = path.strip_prefix(dir)?;
    if rest.is_empty() {
        Some("")
    } else {
        rest.strip_prefix('/')
    }
}

/// The object and key the file at `path` comes from, through the container's mounts.
fn resolve(
    container: &Value,
    spec: &Value,
    env: &Environment,
    path: &str,
    namespace: &str,
) -> Source {
    // The deepest mount that holds the path: a mount inside another one hides that part of it.
    let mut best: Option<(usize, &Value, &str)> = None;
    for mount in container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(mount_path) = mount.get("mountPath").and_then(Value::as_str) else {
            continue;
        };
        let mount_path = clean(mount_path);
        if let Some(rest) = under(path, &mount_path)
            && best.is_none_or(|(depth, ..)| mount_path.len() >= depth)
        {
            let rest: &str = &path[path.len() - rest.len()..];
            best = Some((mount_path.len(), mount, rest));
        }
    }
    let Some((_, mount, rest)) = best else {
        return Source::Unseen(format!(
            "{path} is in no mounted volume: a file of the image, which stackgate cannot read"
        ));
    };
    let sub_path = match (
        mount.get("subPath").and_then(Value::as_str),
        mount.get("subPathExpr").and_then(Value::as_str),
    ) {
        (Some(sub), _) if !sub.is_empty() => sub.to_owned(),
        (_, Some(expr)) if !expr.is_empty() => {
            // Unlike in arguments, a variable the container does not define, or defines
            // empty, is an error here: the kubelet does not start the container ("missing
            // value for ..."; kubelet_pods.go, subPathExpr expansion).
            let mut missing = None;
            let mut unknown = None;
            let expanded = expand(expr, |name| match env.lookup(name) {
                Some(EnvValue::Known(value)) if !value.is_empty() => Some(value),
                Some(EnvValue::Unknown(why)) => {
                    unknown.get_or_insert(why);
                    Some(String::new())
                }
                _ => {
                    missing.get_or_insert_with(|| name.to_owned());
                    Some(String::new())
                }
            });
            match (unknown, missing, expanded) {
                (Some(why), ..) => {
                    return Source::Unseen(format!(
                        "the mount's subPathExpr is not known here: {why}"
                    ));
                }
                (None, Some(name), _) => {
                    return Source::NotStarting(format!(
                        "the mount's subPathExpr uses {}, which the container does not set \
                         (the kubelet refuses to start it)",
                        ShortText::key(&name)
                    ));
                }
                (None, None, Some(sub)) => sub,
                (None, None, None) => {
                    return Source::Unseen(format!(
                        "the mount's subPathExpr expands past {MAX_EXPANDED_BYTES} bytes"
                    ));
                }
            }
        }
        _ => String::new(),
    };
    let within = clean(&format!("{sub_path}/{rest}"));
    let within = within.trim_start_matches('/');
    // The kubelet writes a Secret's or ConfigMap's files into `..data/` and links each name
    // to it: both spellings name the same file.
    let within = within.strip_prefix("..data/").unwrap_or(within);
    let volume_name = mount.get("name").and_then(Value::as_str).unwrap_or("");
    let Some(volume) = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(volume_name))
    else {
        return Source::NotStarting(format!(
            "the mount of {path} names volume {:?}, which the pod does not define",
            ShortText::key(volume_name)
        ));
    };
    let mut candidates = Vec::new();
    let in_object = |source: &Value, kind: SiteKind, name_field: &str| -> Option<ConfigKey> {
        let name = source.get(name_field).and_then(Value::as_str)?;
        let key = key_at(source, within)?;
        Some(ConfigKey {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key,
        })
    };
    if let Some(secret) = volume.get("secret") {
        candidates.extend(in_object(secret, SiteKind::Secret, "secretName"));
    } else if let Some(config_map) = volume.get("configMap") {
        candidates.extend(in_object(config_map, SiteKind::ConfigMap, "name"));
    } else if let Some(projected) = volume.get("projected") {
        for source in projected
            .get("sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(secret) = source.get("secret") {
                candidates.extend(in_object(secret, SiteKind::Secret, "name"));
            }
            if let Some(config_map) = source.get("configMap") {
                candidates.extend(in_object(config_map, SiteKind::ConfigMap, "name"));
            }
        }
    } else if let Some(host) = volume.get("hostPath") {
        let host_path = host.get("path").and_then(Value::as_str).unwrap_or("");
        return Source::Unseen(format!(
            "{path} is on the node (hostPath {}), which stackgate cannot read",
            ShortText::location(host_path)
        ));
    } else {
        let kind = volume
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "name"))
            .map_or("unknown", String::as_str);
        return Source::Unseen(format!(
            "{path} is in a {} volume, which stackgate cannot read",
            ShortText::key(kind)
        ));
    }
    if candidates.is_empty() {
        return Source::NotStarting(format!(
            "{path} names no key of the objects its volume {:?} mounts",
            ShortText::key(volume_name)
        ));
    }
    Source::Objects(candidates)
}

/// The data key a `secret`, `configMap` or projected source puts at `within` (a path inside
/// the volume): the `items` entry whose path it is, else (no `items`) the key of that name.
fn key_at(source: &Value, within: &str) -> Option<String> {
    match source.get("items").and_then(Value::as_array) {
        Some(items) if !items.is_empty() => items.iter().find_map(|item| {
            let item_path = item.get("path").and_then(Value::as_str)?;
            let item_path = clean(item_path);
            (item_path.trim_start_matches('/') == within)
                .then(|| item.get("key").and_then(Value::as_str).map(str::to_owned))
                .flatten()
        }),
        // Every key is a file of the volume's top directory; a name no key can have
        // (`[-._a-zA-Z0-9]+`, Kubernetes' rule for ConfigMap and Secret keys) is no file.
        _ => is_data_key(within).then(|| within.to_owned()),
    }
}

/// Whether `name` can be a ConfigMap or Secret data key (Kubernetes
/// `IsConfigMapKey`: at most 253 of `[-._a-zA-Z0-9]`, not `.` or `..`).
fn is_data_key(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// A workload, as the fact keys what it reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadKey {
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl WorkloadKey {
    /// The key of `object`, of kind `gvk`.
    pub fn of(gvk: &GroupVersionKind, object: &DynamicObject) -> Self {
        WorkloadKey {
            kind: gvk.kind.clone(),
            namespace: object.metadata.namespace.clone().unwrap_or_default(),
            name: object.metadata.name.clone().unwrap_or_default(),
        }
    }
}

/// One object key a CCM container reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The key.
    pub object: ConfigKey,
    /// The container that reads it, as [`ContainerRead::reader`].
    pub reader: String,
    /// Its `--cloud-config` path.
    pub path: String,
    /// The CCM release the container's image pins, when it pins one.
    pub version: Option<CcmVersion>,
}

/// The `CcmConfigSource` fact: the config objects every known CCM workload reads, by
/// workload (a watcher replaces or removes one workload's entry as it changes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CcmConfigReads {
    by_workload: BTreeMap<WorkloadKey, Vec<Read>>,
    kept: usize,
    /// Workloads not kept because of [`MAX_READS`].
    dropped: usize,
    /// The ConfigMaps and Secrets of a face's whole input (`check`'s run), when the face
    /// knows them all: a read of another object is then one this input does not hold.
    present: Option<BTreeSet<(&'static str, String, String)>>,
}

impl CcmConfigReads {
    /// Reads `object` (any kind; only CCM workloads add anything) and returns what each of
    /// its CCM containers reads, unseen sources included, for the face to report.
    pub fn add_workload(
        &mut self,
        gvk: &GroupVersionKind,
        object: &DynamicObject,
        markers: &CcmMarkers<'_>,
    ) -> Vec<ContainerRead> {
        let reads = container_reads(gvk, object, markers);
        let key = WorkloadKey::of(gvk, object);
        self.remove(&key);
        let kept: Vec<Read> = reads
            .iter()
            .flat_map(|read| match &read.source {
                Source::Objects(objects) => objects
                    .iter()
                    .map(|object| Read {
                        object: object.clone(),
                        reader: read.reader.clone(),
                        path: read.path.clone().unwrap_or_default(),
                        version: read.version.clone(),
                    })
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        if !kept.is_empty() {
            self.keep(key, kept);
        }
        reads
    }

    /// Keeps `reads` as what `workload` reads (replacing what it read before), unless that
    /// passes [`MAX_READS`]: then the workload is counted as dropped.
    fn keep(&mut self, workload: WorkloadKey, reads: Vec<Read>) {
        self.remove(&workload);
        if self.kept + reads.len() > MAX_READS {
            self.dropped += 1;
        } else {
            self.kept += reads.len();
            self.by_workload.insert(workload, reads);
        }
    }

    /// Forgets what `workload` reads (it was deleted, or no longer runs the CCM).
    pub fn remove(&mut self, workload: &WorkloadKey) {
        if let Some(old) = self.by_workload.remove(workload) {
            self.kept -= old.len();
        }
    }

    /// Every read of an object of `kind` named `namespace/name`.
    pub fn reads_of<'s>(
        &'s self,
        kind: SiteKind,
        namespace: &'s str,
        name: &'s str,
    ) -> impl Iterator<Item = &'s Read> + 's {
        self.by_workload.values().flatten().filter(move |read| {
            read.object.kind == kind
                && read.object.namespace == namespace
                && read.object.name == name
        })
    }

    /// The CCM releases that read an object of `kind` named `namespace/name`, as one range
    /// (its source names the readers' image tags): None when no CCM container is known to
    /// read it, or one that does runs an image whose tag pins no release.
    pub fn version_of(&self, kind: SiteKind, namespace: &str, name: &str) -> Option<CcmVersion> {
        let mut out: Option<CcmVersion> = None;
        for read in self.reads_of(kind, namespace, name) {
            let version = read.version.as_ref()?;
            out = Some(match out {
                None => CcmVersion {
                    source: format!("{} of {}", version.source, read.reader),
                    ..version.clone()
                },
                Some(mut range) => {
                    range.min_minor = range.min_minor.min(version.min_minor);
                    range.max_minor = range.max_minor.max(version.max_minor);
                    range
                }
            });
        }
        out
    }

    /// Every read, workload by workload.
    pub fn reads(&self) -> impl Iterator<Item = &Read> {
        self.by_workload.values().flatten()
    }

    /// Whether every CCM workload seen is kept (none dropped by [`MAX_READS`]).
    pub fn complete(&self) -> bool {
        self.dropped == 0
    }

    /// The sites document for `object` with the keys CCM containers read from it added
    /// ([`SitesDocument::with_reads`]), or None when `object` is not a ConfigMap or Secret, or
    /// no CCM container reads it (the policy's document applies unchanged).
    pub fn sites_for(
        &self,
        gvk: &GroupVersionKind,
        object: &DynamicObject,
        sites: &SitesDocument,
    ) -> Option<SitesDocument> {
        let kind = crate::sites::data_kind(gvk)?;
        let namespace = object.metadata.namespace.as_deref().unwrap_or("");
        let name = object.metadata.name.as_deref().unwrap_or("");
        let mut found = self.reads_of(kind, namespace, name).peekable();
        found.peek()?;
        Some(sites.with_reads(found.map(|read| {
            (
                kind,
                namespace,
                name,
                read.object.key.as_str(),
                format!("{} (--cloud-config={})", read.reader, read.path),
            )
        })))
    }

    /// Records that the face's input holds `object` (a ConfigMap or Secret; other kinds are
    /// ignored). Once called, [`Self::not_in_input`] answers.
    pub fn add_present(&mut self, gvk: &GroupVersionKind, object: &DynamicObject) {
        let present = self.present.get_or_insert_with(BTreeSet::new);
        if let Some(kind) = crate::sites::data_kind(gvk) {
            present.insert((
                kind.as_str(),
                object.metadata.namespace.clone().unwrap_or_default(),
                object.metadata.name.clone().unwrap_or_default(),
            ));
        }
    }

    /// The reads of `workload` whose object the face's input does not hold (empty when the
    /// face did not record its input, [`Self::add_present`]).
    pub fn not_in_input(&self, workload: &WorkloadKey) -> Vec<&Read> {
        let (Some(present), Some(reads)) = (&self.present, self.by_workload.get(workload)) else {
            return Vec::new();
        };
        reads
            .iter()
            .filter(|read| {
                !present.contains(&(
                    read.object.kind.as_str(),
                    read.object.namespace.clone(),
                    read.object.name.clone(),
                ))
            })
            .collect()
    }

    /// Whether no workload is known to read a config.
    pub fn is_empty(&self) -> bool {
        self.by_workload.is_empty()
    }

    /// What `workload` is kept as reading, None when it is not kept.
    pub fn workload(&self, workload: &WorkloadKey) -> Option<&[Read]> {
        self.by_workload.get(workload).map(Vec::as_slice)
    }

    /// Adds every workload `other` keeps, under the same [`MAX_READS`] (a watcher keeps one
    /// fact per listed resource and hands reviews their union); `other`'s dropped workloads
    /// stay counted as dropped.
    pub fn extend(&mut self, other: &CcmConfigReads) {
        self.dropped += other.dropped;
        for (key, reads) in &other.by_workload {
            self.keep(key.clone(), reads.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const IMAGE: &str = "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0";

    fn daemonset(container: Value, volumes: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [container], "volumes": volumes}}}
        }))
        .unwrap()
    }

    fn reads(object: &DynamicObject) -> Vec<ContainerRead> {
        let gvk = GroupVersionKind::gvk("apps", "v1", "DaemonSet");
        container_reads(&gvk, object, &CcmMarkers::new(&[], &[]))
    }

    fn key(kind: SiteKind, name: &str, key: &str) -> ConfigKey {
        ConfigKey {
            kind,
            namespace: "kube-system".into(),
            name: name.into(),
            key: key.into(),
        }
    }

    /// The upstream chart's shape: `--cloud-config=$(CLOUD_CONFIG)`, the variable from `env`,
    /// the Secret mounted at `/etc/config`.
    fn chart_container(env: Value, extra_args: &[&str]) -> Value {
        let mut args = vec![
            "./openstack-cloud-controller-manager".to_owned(),
            "--cloud-config=$(CLOUD_CONFIG)".to_owned(),
            "--cluster-name=$(CLUSTER_NAME)".to_owned(),
        ];
        args.extend(extra_args.iter().map(|a| (*a).to_owned()));
        json!({"name": "openstack-cloud-controller-manager", "image": IMAGE, "args": args,
            "env": env,
            "volumeMounts": [
                {"name": "cloud-config-volume", "mountPath": "/etc/config", "readOnly": true},
                {"name": "alt", "mountPath": "/etc/alt"}]})
    }

    fn chart_volumes() -> Value {
        json!([{"name": "cloud-config-volume", "secret": {"secretName": "cloud-config"}},
               {"name": "alt", "configMap": {"name": "alt-config"}}])
    }

    #[test]
    fn the_charts_daemonset_reads_its_secret_and_extra_env_moves_it() {
        let env = json!([{"name": "CLOUD_CONFIG", "value": "/etc/config/cloud.conf"},
                         {"name": "CLUSTER_NAME", "value": "kubernetes"}]);
        let read = &reads(&daemonset(chart_container(env, &[]), chart_volumes()))[0];
        assert_eq!(read.path.as_deref(), Some("/etc/config/cloud.conf"));
        assert_eq!(
            read.source,
            Source::Objects(vec![key(SiteKind::Secret, "cloud-config", "cloud.conf")])
        );
        assert!(
            read.reader.contains("DaemonSet kube-system/occm"),
            "{read:?}"
        );
        // Case 1 of the issue: `extraEnv` appends a second CLOUD_CONFIG; the last one wins.
        let env = json!([{"name": "CLOUD_CONFIG", "value": "/etc/config/cloud.conf"},
                         {"name": "CLOUD_CONFIG", "value": "/etc/alt/cloud.conf"}]);
        let read = &reads(&daemonset(chart_container(env, &[]), chart_volumes()))[0];
        assert_eq!(
            read.source,
            Source::Objects(vec![key(SiteKind::ConfigMap, "alt-config", "cloud.conf")])
        );
    }

    #[test]
    fn the_last_cloud_config_flag_wins_in_both_forms() {
        let env = json!([{"name": "CLOUD_CONFIG", "value": "/etc/config/cloud.conf"}]);
        // Case 2: `controllerExtraArgs` appends another `--cloud-config`.
        for extra in [
            &["--cloud-config=/etc/alt/other.conf"][..],
            &["--cloud-config", "/etc/alt/other.conf"][..],
        ] {
            let read = &reads(&daemonset(
                chart_container(env.clone(), extra),
                chart_volumes(),
            ))[0];
            assert_eq!(
                read.source,
                Source::Objects(vec![key(SiteKind::ConfigMap, "alt-config", "other.conf")]),
                "{extra:?}"
            );
        }
    }

    #[test]
    fn mounts_sub_paths_items_and_projected_sources() {
        let container = |mounts: Value| {
            json!({"name": "c", "image": IMAGE,
                "args": ["--cloud-config=/etc/kubernetes/cloud.conf"], "volumeMounts": mounts})
        };
        // subPath: the mount is the file itself.
        let object = daemonset(
            container(
                json!([{"name": "v", "mountPath": "/etc/kubernetes/cloud.conf",
                              "subPath": "config"}]),
            ),
            json!([{"name": "v", "configMap": {"name": "cm"}}]),
        );
        assert_eq!(
            reads(&object)[0].source,
            Source::Objects(vec![key(SiteKind::ConfigMap, "cm", "config")])
        );
        // items: the key at that path.
        let object = daemonset(
            container(json!([{"name": "v", "mountPath": "/etc/kubernetes"}])),
            json!([{"name": "v", "secret": {"secretName": "s",
                "items": [{"key": "other", "path": "x"}, {"key": "ini", "path": "cloud.conf"}]}}]),
        );
        assert_eq!(
            reads(&object)[0].source,
            Source::Objects(vec![key(SiteKind::Secret, "s", "ini")])
        );
        // items that do not put a file there: the CCM cannot open it.
        let object = daemonset(
            container(json!([{"name": "v", "mountPath": "/etc/kubernetes"}])),
            json!([{"name": "v", "secret": {"secretName": "s",
                "items": [{"key": "other", "path": "x"}]}}]),
        );
        assert!(matches!(reads(&object)[0].source, Source::NotStarting(_)));
        // projected: every source that may hold it.
        let object = daemonset(
            container(json!([{"name": "v", "mountPath": "/etc/kubernetes"}])),
            json!([{"name": "v", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token"}},
                {"secret": {"name": "a"}},
                {"configMap": {"name": "b", "items": [{"key": "k", "path": "cloud.conf"}]}}]}}]),
        );
        assert_eq!(
            reads(&object)[0].source,
            Source::Objects(vec![
                key(SiteKind::Secret, "a", "cloud.conf"),
                key(SiteKind::ConfigMap, "b", "k")
            ])
        );
        // The deepest mount wins, and `..data/` is the same file.
        let object = serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": IMAGE,
                "args": ["--cloud-config", "/etc//kubernetes/./x/..data/cloud.conf"],
                "volumeMounts": [{"name": "outer", "mountPath": "/etc"},
                                 {"name": "inner", "mountPath": "/etc/kubernetes/x/"}]}],
                "volumes": [{"name": "outer", "hostPath": {"path": "/etc"}},
                            {"name": "inner", "secret": {"secretName": "deep"}}]}}}
        }))
        .unwrap();
        assert_eq!(
            reads(&object)[0].source,
            Source::Objects(vec![key(SiteKind::Secret, "deep", "cloud.conf")])
        );
    }

    #[test]
    fn sub_path_expr_is_expanded_and_a_missing_variable_stops_the_container() {
        let with = |env: Value| {
            daemonset(
                json!({"name": "c", "image": IMAGE, "env": env,
                    "args": ["--cloud-config=/etc/kubernetes/cloud.conf"],
                    "volumeMounts": [{"name": "v", "mountPath": "/etc/kubernetes",
                                      "subPathExpr": "$(NODE)"}]}),
                json!([{"name": "v", "configMap": {"name": "per-node",
                    "items": [{"key": "a", "path": "node-a/cloud.conf"}]}}]),
            )
        };
        assert_eq!(
            reads(&with(json!([{"name": "NODE", "value": "node-a"}])))[0].source,
            Source::Objects(vec![key(SiteKind::ConfigMap, "per-node", "a")])
        );
        for env in [json!([]), json!([{"name": "NODE", "value": ""}])] {
            assert!(
                matches!(&reads(&with(env.clone()))[0].source,
                    Source::NotStarting(why) if why.contains("NODE")),
                "{env}"
            );
        }
        // An empty subPath is no subPath: the expression counts.
        let object = daemonset(
            json!({"name": "c", "image": IMAGE, "env": [{"name": "NODE", "value": "node-a"}],
                "args": ["--cloud-config=/etc/kubernetes/cloud.conf"],
                "volumeMounts": [{"name": "v", "mountPath": "/etc/kubernetes",
                                  "subPath": "", "subPathExpr": "$(NODE)"}]}),
            json!([{"name": "v", "configMap": {"name": "per-node",
                "items": [{"key": "a", "path": "node-a/cloud.conf"}]}}]),
        );
        assert_eq!(
            reads(&object)[0].source,
            Source::Objects(vec![key(SiteKind::ConfigMap, "per-node", "a")])
        );
        let from =
            json!([{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]);
        assert!(matches!(reads(&with(from))[0].source, Source::Unseen(_)));
    }

    #[test]
    fn a_shell_variable_in_a_shell_line_is_unseen_and_a_dollar_in_a_path_is_a_file() {
        let with = |args: Value| {
            daemonset(
                json!({"name": "c", "image": IMAGE, "command": ["/bin/sh", "-c"], "args": args,
                    "volumeMounts": [{"name": "v", "mountPath": "/etc/config"}]}),
                json!([{"name": "v", "secret": {"secretName": "s"}}]),
            )
        };
        let read = &reads(&with(json!([
            "exec /bin/openstack-cloud-controller-manager --cloud-config=$CONFIG"
        ])))[0];
        assert!(
            matches!(&read.source, Source::Unseen(why) if why.contains("shell")),
            "{read:?}"
        );
        // A shell line without a variable is read like arguments.
        let read = &reads(&with(json!([
            "exec /bin/openstack-cloud-controller-manager --cloud-config=/etc/config/cloud.conf"
        ])))[0];
        assert_eq!(
            read.source,
            Source::Objects(vec![key(SiteKind::Secret, "s", "cloud.conf")])
        );
        // One argument (no shell): a `$` is part of the file name, which no key can have.
        let read = &reads(&with(json!(["--cloud-config=/etc/config/a$b"])))[0];
        assert!(matches!(read.source, Source::NotStarting(_)), "{read:?}");
    }

    #[test]
    fn other_volume_kinds_are_named_and_empty_items_mean_every_key() {
        let with = |volume: Value| {
            daemonset(
                json!({"name": "c", "image": IMAGE, "args": ["--cloud-config=/etc/config/cloud.conf"],
                    "volumeMounts": [{"name": "v", "mountPath": "/etc/config"}]}),
                json!([volume]),
            )
        };
        let read = &reads(&with(json!({"name": "v", "emptyDir": {}})))[0];
        assert!(
            matches!(&read.source, Source::Unseen(why) if why.contains("emptyDir volume")),
            "{read:?}"
        );
        let read = &reads(&with(
            json!({"name": "v", "secret": {"secretName": "s", "items": []}}),
        ))[0];
        assert_eq!(
            read.source,
            Source::Objects(vec![key(SiteKind::Secret, "s", "cloud.conf")])
        );
    }

    #[test]
    fn the_fact_keeps_at_most_max_reads() {
        let gvk = GroupVersionKind::gvk("apps", "v1", "DaemonSet");
        let markers = CcmMarkers::new(&[], &[]);
        let env = json!([{"name": "CLOUD_CONFIG", "value": "/etc/config/cloud.conf"}]);
        let mut fact = CcmConfigReads::default();
        for i in 0..=MAX_READS {
            let mut object = daemonset(chart_container(env.clone(), &[]), chart_volumes());
            object.metadata.name = Some(format!("occm-{i}"));
            fact.add_workload(&gvk, &object, &markers);
            assert_eq!(fact.complete(), i < MAX_READS, "workload {i}");
        }
        assert_eq!(fact.reads().count(), MAX_READS);
    }

    #[test]
    fn undefined_variables_are_kept_and_service_variables_are_unknown() {
        let with = |arg: &str| {
            daemonset(
                json!({"name": "c", "image": IMAGE, "args": [arg],
                    "volumeMounts": [{"name": "v", "mountPath": "/etc/config"}]}),
                json!([{"name": "v", "secret": {"secretName": "s"}}]),
            )
        };
        // Kept as written: a file name no key can have, so the CCM cannot open it.
        let read = &reads(&with("--cloud-config=/etc/config/$(UNDEFINED)"))[0];
        assert_eq!(read.path.as_deref(), Some("/etc/config/$(UNDEFINED)"));
        assert!(matches!(read.source, Source::NotStarting(_)), "{read:?}");
        // The kubelet may define these from Services (enableServiceLinks).
        for name in [
            "OCCM_SERVICE_HOST",
            "OCCM_SERVICE_PORT_HTTPS",
            "OCCM_PORT_443_TCP",
        ] {
            let read = &reads(&with(&format!("--cloud-config=/etc/config/$({name})")))[0];
            assert!(
                matches!(&read.source, Source::Unseen(why) if why.contains("Service")),
                "{name}: {read:?}"
            );
        }
        assert!(is_data_key("cloud.conf") && is_data_key("a-b_c.1"));
        assert!(!is_data_key("..") && !is_data_key("a b") && !is_data_key(&"k".repeat(254)));
    }

    #[test]
    fn what_cannot_be_seen_is_said_to_be_unseen() {
        let with = |args: Value, env: Value, volumes: Value| {
            daemonset(
                json!({"name": "c", "image": IMAGE, "args": args, "env": env,
                    "volumeMounts": [{"name": "v", "mountPath": "/etc/kubernetes"}]}),
                volumes,
            )
        };
        let host = json!([{"name": "v", "hostPath": {"path": "/etc/kubernetes"}}]);
        let secret = json!([{"name": "v", "secret": {"secretName": "s"}}]);
        let unseen = |o: &DynamicObject| match &reads(o)[0].source {
            Source::Unseen(why) => why.clone(),
            other => panic!("{other:?}"),
        };
        assert!(
            unseen(&with(
                json!(["--cloud-config=/etc/kubernetes/cloud.conf"]),
                json!([]),
                host
            ))
            .contains("hostPath /etc/kubernetes")
        );
        assert!(
            unseen(&with(
                json!(["--cloud-config=/opt/cloud.conf"]),
                json!([]),
                secret.clone()
            ))
            .contains("file of the image")
        );
        // valueFrom: the value is in another object.
        let from = json!([{"name": "CLOUD_CONFIG", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}]);
        assert!(
            unseen(&with(
                json!(["--cloud-config=$(CLOUD_CONFIG)"]),
                from,
                secret.clone()
            ))
            .contains("valueFrom")
        );
        // An unknown argument after the last `--cloud-config` may set it again.
        let object = daemonset(
            json!({"name": "c", "image": IMAGE, "envFrom": [{"configMapRef": {"name": "e"}}],
                "args": ["--cloud-config=/etc/kubernetes/cloud.conf", "$(EXTRA)"],
                "volumeMounts": [{"name": "v", "mountPath": "/etc/kubernetes"}]}),
            secret.clone(),
        );
        assert!(unseen(&object).contains("envFrom"));
        // Before it, it cannot.
        let object = daemonset(
            json!({"name": "c", "image": IMAGE, "envFrom": [{"configMapRef": {"name": "e"}}],
                "args": ["$(EXTRA)", "--cloud-config=/etc/kubernetes/cloud.conf"],
                "volumeMounts": [{"name": "v", "mountPath": "/etc/kubernetes"}]}),
            secret,
        );
        assert!(matches!(reads(&object)[0].source, Source::Objects(_)));
    }

    #[test]
    fn without_the_flag_the_ccm_does_not_start_and_init_containers_are_not_read() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"template": {"spec": {
                "initContainers": [{"name": "i", "image": IMAGE,
                    "args": ["--cloud-config=/etc/x/cloud.conf"]}],
                "containers": [{"name": "c", "image": IMAGE, "args": ["--v=2"]},
                               {"name": "d", "image": IMAGE, "args": ["--cloud-config"]},
                               {"name": "e", "image": IMAGE, "args": ["--cloud-config="]}]}}}
        }))
        .unwrap();
        let all = reads(&object);
        assert_eq!(all.len(), 3);
        assert!(
            all.iter()
                .all(|r| matches!(r.source, Source::NotStarting(_))),
            "{all:?}"
        );
    }

    #[test]
    fn the_fact_keeps_reads_by_workload_and_forgets_them() {
        let env = json!([{"name": "CLOUD_CONFIG", "value": "/etc/config/cloud.conf"}]);
        let object = daemonset(chart_container(env, &[]), chart_volumes());
        let gvk = GroupVersionKind::gvk("apps", "v1", "DaemonSet");
        let mut fact = CcmConfigReads::default();
        fact.add_workload(&gvk, &object, &CcmMarkers::new(&[], &[]));
        assert_eq!(
            fact.reads_of(SiteKind::Secret, "kube-system", "cloud-config")
                .count(),
            1
        );
        assert_eq!(
            fact.reads_of(SiteKind::Secret, "other", "cloud-config")
                .count(),
            0
        );
        // Adding the same workload again replaces its entry.
        fact.add_workload(&gvk, &object, &CcmMarkers::new(&[], &[]));
        assert_eq!(fact.reads().count(), 1);
        // Presence: unknown until the face records its input.
        let workload = WorkloadKey::of(&gvk, &object);
        assert!(fact.not_in_input(&workload).is_empty());
        fact.add_present(&gvk, &object);
        assert_eq!(fact.not_in_input(&workload).len(), 1);
        let secret: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1",
            "kind": "Secret", "metadata": {"name": "cloud-config", "namespace": "kube-system"}}))
        .unwrap();
        fact.add_present(&GroupVersionKind::gvk("", "v1", "Secret"), &secret);
        assert!(fact.not_in_input(&workload).is_empty());
        fact.remove(&workload);
        assert!(fact.is_empty());
        assert!(fact.complete());
    }

    #[test]
    fn expansion_follows_the_kubelet() {
        let map = |name: &str| match name {
            "VAR_A" => Some("A".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let cases = [
            ("$(VAR_A)", "A"),
            ("___$(VAR_A)___", "___A___"),
            ("$(VAR_A)$(VAR_A)", "AA"),
            ("$$(VAR_A)", "$(VAR_A)"),
            ("$$$(VAR_A)", "$A"),
            ("$(UNDEFINED)", "$(UNDEFINED)"),
            ("$(EMPTY)x", "x"),
            ("$(VAR_A", "$(VAR_A"),
            ("$VAR_A", "$VAR_A"),
            ("$", "$"),
            ("x$", "x$"),
            ("$-x", "$-x"),
            ("$()", "$()"),
        ];
        for (input, expected) in cases {
            assert_eq!(expand(input, map).as_deref(), Some(expected), "{input}");
        }
        // Go's `string(byte)` after a lone `$`: `é` (C3 A9) becomes `Ã` then the byte A9,
        // which is not UTF-8 any more.
        assert_eq!(expand("$é", map), None);
        assert_eq!(expand("$\u{7f}", map).as_deref(), Some("$\u{7f}"));
        // The bound is the result's size: exactly at it is an answer.
        let at_bound = "x".repeat(MAX_EXPANDED_BYTES / 2);
        assert_eq!(
            expand("$(B)$(B)", |_| Some(at_bound.clone())).map(|t| t.len()),
            Some(MAX_EXPANDED_BYTES)
        );
        // A doubling chain stops at the bound instead of growing.
        let big = "x".repeat(MAX_EXPANDED_BYTES);
        assert_eq!(expand("$(B)$(B)", |_| Some(big.clone())), None);
    }
}
