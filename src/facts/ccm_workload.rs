//! How an object family finds the OpenStack CCM in a workload and reads its flags: the
//! containers of a Pod, Deployment, DaemonSet, StatefulSet, ReplicaSet, Job or CronJob whose
//! image contains one of the CCM image markers or whose command/args contain one of the CCM
//! argument markers (the same recognition as `ccm-concurrency` and the chart's
//! `runs-openstack-ccm` match condition), and the kubelet's `$(VAR)` expansion of their
//! arguments.

use jsonptr::PointerBuf;
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

/// The path of the pod spec in workload kinds, or None for kinds without one.
pub fn pod_spec_path(gvk: &GroupVersionKind) -> Option<&'static [&'static str]> {
    match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("", "Pod") => Some(&["spec"]),
        ("", "PodTemplate") => Some(&["template", "spec"]),
        ("apps", "Deployment" | "DaemonSet" | "StatefulSet" | "ReplicaSet") | ("batch", "Job") => {
            Some(&["spec", "template", "spec"])
        }
        ("batch", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    }
}

/// One container that runs the OpenStack CCM.
#[derive(Debug, Clone)]
pub struct CcmContainer<'a> {
    /// `containers` or `initContainers`.
    pub list: &'static str,
    /// Index in that list.
    pub index: usize,
    /// The container's name.
    pub name: &'a str,
    /// `command` (strings only).
    pub command: Vec<&'a str>,
    /// `args` (strings only).
    pub args: Vec<&'a str>,
    /// The container object, for `env` lookups.
    pub container: &'a Value,
    /// The path of the container from the object root.
    pub path: Vec<String>,
    /// `Kind namespace/name container "occm"`, for messages.
    pub described: String,
}

impl CcmContainer<'_> {
    /// The container's argv: command followed by args.
    pub fn argv(&self) -> Vec<&str> {
        self.command
            .iter()
            .chain(self.args.iter())
            .copied()
            .collect()
    }

    /// Field (`command` or `args`), index in it, and JSON pointer of argv entry `index`.
    pub fn locate(&self, index: usize) -> (&'static str, usize, String) {
        let (field, at) = match index.checked_sub(self.command.len()) {
            Some(i) => ("args", i),
            None => ("command", index),
        };
        let mut tokens = self.path.clone();
        tokens.extend([field.to_owned(), at.to_string()]);
        (field, at, PointerBuf::from_tokens(tokens).to_string())
    }

    /// JSON pointer of the container.
    pub fn pointer(&self) -> String {
        PointerBuf::from_tokens(self.path.clone()).to_string()
    }

    /// The value the kubelet gives `$(NAME)` in this container's arguments, when it is known
    /// from the container alone: the last `env` entry of that name holds a literal `value`
    /// without references of its own. Unknown (None) when the value comes from `valueFrom`,
    /// from `envFrom` (a ConfigMap or Secret this write does not show), or is not defined.
    pub fn env_literal(&self, name: &str) -> Option<&str> {
        let entry = self
            .container
            .get("env")
            .and_then(Value::as_array)?
            .iter()
            .rev()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(name))?;
        if entry.get("valueFrom").is_some_and(|v| !v.is_null()) {
            return None;
        }
        let value = entry.get("value").and_then(Value::as_str).unwrap_or("");
        (!has_reference(value)).then_some(value)
    }

    /// `text` with its `$(VAR)` references expanded as the kubelet does, when every reference
    /// is known ([`Self::env_literal`]); `$$` is a literal `$`. None when one is unknown.
    pub fn expand(&self, text: &str) -> Option<String> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                out.push('$');
                rest = tail;
            } else if let Some(body) = after.strip_prefix('(')
                && let Some(end) = body.find(')')
            {
                out.push_str(self.env_literal(&body[..end])?);
                rest = &body[end + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        Some(out)
    }
}

/// Image substring that marks the OpenStack CCM when a policy does not say otherwise.
pub const DEFAULT_IMAGE: &str = "openstack-cloud-controller-manager";
/// Argument that marks the OpenStack CCM when a policy does not say otherwise.
pub const DEFAULT_ARG: &str = "--cloud-provider=openstack";

/// Which containers run the OpenStack CCM, as the `ccmImages` and `ccmArgs` params of the
/// policies that read CCM workloads (`ccm-concurrency`, `cluster-name`) say: an empty list
/// stands for its default ([`DEFAULT_IMAGE`], [`DEFAULT_ARG`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CcmMarkers<'p> {
    /// Image substrings.
    pub images: Vec<&'p str>,
    /// Command/args substrings.
    pub args: Vec<&'p str>,
}

impl<'p> CcmMarkers<'p> {
    /// The markers from a policy's `ccmImages` and `ccmArgs`, defaults filled in.
    pub fn new(ccm_images: &'p [String], ccm_args: &'p [String]) -> Self {
        let or_default = |list: &'p [String], default: &'static str| -> Vec<&'p str> {
            if list.is_empty() {
                vec![default]
            } else {
                list.iter().map(String::as_str).collect()
            }
        };
        Self {
            images: or_default(ccm_images, DEFAULT_IMAGE),
            args: or_default(ccm_args, DEFAULT_ARG),
        }
    }

    /// The containers of `object` these markers recognise ([`ccm_containers`]).
    pub fn containers<'a>(
        &self,
        gvk: &GroupVersionKind,
        object: &'a DynamicObject,
    ) -> Vec<CcmContainer<'a>> {
        ccm_containers(gvk, object, &self.images, &self.args)
    }
}

/// The containers of `object` that run the OpenStack CCM: image containing one of `images`,
/// or command/args containing one of `markers`.
pub fn ccm_containers<'a>(
    gvk: &GroupVersionKind,
    object: &'a DynamicObject,
    images: &[&str],
    markers: &[&str],
) -> Vec<CcmContainer<'a>> {
    let mut out = Vec::new();
    let Some(path) = pod_spec_path(gvk) else {
        return out;
    };
    let Some(spec) = path.iter().try_fold(&object.data, |v, t| v.get(t)) else {
        return out;
    };
    let object_name = format!(
        "{} {}/{}",
        gvk.kind,
        object.metadata.namespace.as_deref().unwrap_or(""),
        object.metadata.name.as_deref().unwrap_or("")
    );
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get(list).and_then(Value::as_array) else {
            continue;
        };
        for (index, container) in containers.iter().enumerate() {
            let strings = |field: &str| -> Vec<&'a str> {
                container
                    .get(field)
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default()
            };
            let command = strings("command");
            let args = strings("args");
            let image = container.get("image").and_then(Value::as_str).unwrap_or("");
            let is_ccm = images.iter().any(|m| image.contains(m))
                || (command
                    .iter()
                    .chain(args.iter())
                    .any(|a| markers.iter().any(|m| a.contains(m)))
                    && !runs_in_tree_component(image, &command, &args));
            if !is_ccm {
                continue;
            }
            let name = container.get("name").and_then(Value::as_str).unwrap_or("");
            let mut tokens: Vec<String> = path.iter().map(|t| (*t).to_owned()).collect();
            tokens.extend([list.to_owned(), index.to_string()]);
            out.push(CcmContainer {
                list,
                index,
                name,
                command,
                args,
                container,
                path: tokens,
                described: format!("{object_name} container {name:?}"),
            });
        }
    }
    out
}

/// Kubernetes components that take `--cloud-provider=openstack` for the in-tree provider
/// (removed in Kubernetes 1.26; older clusters and static Pod manifests still carry it) and are
/// not the external CCM: what the CCM rules would say about them (a cluster name, service
/// syncs) is about another program, and their fixes would stop the apiserver.
pub const IN_TREE_COMPONENTS: &[&str] = &["kube-apiserver", "kube-controller-manager", "hyperkube"];

/// Whether a container runs an in-tree component ([`IN_TREE_COMPONENTS`]): its image's name
/// (`registry.k8s.io/kube-apiserver:v1.25.0`) is one, or the program its command (or, without
/// a command, its args) starts is one (`/usr/local/bin/kube-apiserver`, `kube-apiserver
/// --cloud-provider=openstack` in one shell line, `hyperkube kube-apiserver`).
pub fn runs_in_tree_component(image: &str, command: &[&str], args: &[&str]) -> bool {
    let image_name = image.rsplit('/').next().unwrap_or("");
    let image_name = image_name.split(['@', ':']).next().unwrap_or(image_name);
    let program = |word: &str| {
        let base = word.rsplit('/').next().unwrap_or(word);
        IN_TREE_COMPONENTS.contains(&base)
    };
    let starts = if command.is_empty() { args } else { command };
    IN_TREE_COMPONENTS.contains(&image_name)
        || starts
            .iter()
            .take(3)
            .filter_map(|a| a.split_whitespace().next())
            .any(program)
}

/// One setting of a string flag in an argument list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringFlag {
    /// Index of the argument holding the flag.
    pub index: usize,
    /// The value as written (None: `--flag` was the last word, so pflag refuses it).
    pub value: Option<String>,
}

/// Every setting of `flag` in `args`, in order: `--flag=v` and `--flag v` (the value in the
/// same argument or the next one); a shell command line inside one argument is split on
/// whitespace. pflag parses in order, so the last one is the one that counts.
pub fn string_flag_uses(args: &[&str], flag: &str) -> Vec<StringFlag> {
    let mut uses = Vec::new();
    for (index, arg) in args.iter().enumerate() {
        let words: Vec<&str> = arg.split_whitespace().collect();
        for (w, word) in words.iter().enumerate() {
            let value = if let Some(v) = word.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                Some(v)
            } else if *word == flag {
                if words.len() > 1 {
                    // A shell command line: the next word of the same line.
                    words.get(w + 1).copied()
                } else {
                    // An argv entry: the next entry, whole.
                    args.get(index + 1).copied()
                }
            } else {
                continue;
            };
            let value = value.map(|v| {
                if words.len() > 1 {
                    v.trim_matches(['"', '\'']).to_owned()
                } else {
                    v.to_owned()
                }
            });
            uses.push(StringFlag { index, value });
        }
    }
    uses
}

/// True when `s` holds a Kubernetes `$(VAR)` reference (`$$(VAR)` is an escaped literal).
pub fn has_reference(s: &str) -> bool {
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        let after = &rest[at + 1..];
        if after.starts_with('(') {
            return true;
        }
        // `$$` is one literal `$`: skip both.
        rest = after.strip_prefix('$').unwrap_or(after);
    }
    false
}

#[cfg(test)]
mod tests {

    #[test]
    fn in_tree_components_are_told_from_the_ccm() {
        assert!(runs_in_tree_component(
            "registry.k8s.io/kube-apiserver:v1.25.0",
            &[],
            &[]
        ));
        assert!(runs_in_tree_component(
            "",
            &["/usr/local/bin/kube-controller-manager"],
            &[]
        ));
        assert!(runs_in_tree_component(
            "",
            &["sh", "-c", "kube-apiserver --x"],
            &[]
        ));
        assert!(runs_in_tree_component(
            "",
            &[],
            &["kube-apiserver", "--cloud-provider=openstack"]
        ));
        assert!(!runs_in_tree_component(
            "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0",
            &["/bin/openstack-cloud-controller-manager"],
            &["--cloud-provider=openstack"]
        ));
        assert!(!runs_in_tree_component(
            "example.test/kube-apiserver-proxy:1",
            &[],
            &[]
        ));
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn string_flags_in_both_forms_and_in_shell_lines() {
        let uses = string_flag_uses(
            &["--cluster-name=a", "--cluster-name", "b c", "--v=2"],
            "--cluster-name",
        );
        assert_eq!(
            uses,
            vec![
                StringFlag {
                    index: 0,
                    value: Some("a".into())
                },
                StringFlag {
                    index: 1,
                    value: Some("b c".into())
                }
            ]
        );
        let uses = string_flag_uses(
            &["exec occm \\\n --cluster-name=\"x\" \\\n --cluster-name y"],
            "--cluster-name",
        );
        let values: Vec<_> = uses.iter().map(|u| u.value.as_deref()).collect();
        assert_eq!(values, vec![Some("x"), Some("y")]);
        assert_eq!(
            string_flag_uses(&["--cluster-name"], "--cluster-name")[0].value,
            None
        );
        assert!(string_flag_uses(&["--cluster-names=a"], "--cluster-name").is_empty());
    }

    #[test]
    fn expansion_uses_literal_env_only() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "o", "namespace": "k"},
            "spec": {"template": {"spec": {"containers": [{"name": "c",
                "image": "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.36.0",
                "env": [{"name": "A", "value": "old"}, {"name": "A", "value": "one"},
                        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                        {"name": "R", "value": "$(A)"}]}]}}}
        }))
        .unwrap();
        let gvk = GroupVersionKind::gvk("apps", "v1", "DaemonSet");
        let found = ccm_containers(&gvk, &object, &["openstack-cloud-controller-manager"], &[]);
        assert_eq!(found.len(), 1);
        let c = &found[0];
        assert_eq!(c.expand("x-$(A)").as_deref(), Some("x-one"));
        assert_eq!(c.expand("$$(A)").as_deref(), Some("$(A)"));
        assert_eq!(c.expand("$(S)"), None);
        assert_eq!(c.expand("$(R)"), None);
        assert_eq!(c.expand("$(MISSING)"), None);
        assert_eq!(c.pointer(), "/spec/template/spec/containers/0");
    }
}
