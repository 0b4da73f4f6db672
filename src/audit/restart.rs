//! Restart awareness: is the running CCM using the cloud config that is stored now?
//!
//! The OpenStack CCM reads its cloud config once, at start (cloud-provider-openstack
//! `pkg/openstack/openstack.go` l.181-192: the cloud-provider factory calls `ReadConfig`;
//! domain-facts §1.6), and nothing rolls its pods when the Secret or ConfigMap changes: the
//! upstream chart's `checksum/config` pod annotation hashes only the chart's own
//! `cloudConfig` template (chart `templates/daemonset.yaml`; domain-facts §9.1), so a changed
//! `cloudConfigContents`, an external Secret, or stackgate's own mutation leaves the running
//! CCM on the old config until its pods restart.
//!
//! For each workload that runs the CCM (a container whose image or arguments the
//! `ccm-concurrency` policy recognises), this module finds the Secrets and ConfigMaps that
//! container mounts which hold a cloud config (the sites policy decides), takes the time that
//! config last changed — the latest `metadata.managedFields[].time` of the entries that own
//! the data key, else the object's `creationTimestamp` — and compares it with the start time
//! of each pod the workload's selector picks (the latest `startedAt` of its running CCM
//! containers, which a container restart also moves; else the pod's `status.startTime`). A
//! pod that started before the config changed is reported with the restart command.
//!
//! A `managedFields` time is when that manager last changed any field it owns, so it can be
//! later than the last change of the key itself; the message names the manager and says so.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, Selector};
use serde_json::Value;

use super::page::{self, ReadError, ReadLimits};
use crate::engine::Engine;
use crate::rules::ccm_workload::CcmMarkers;

/// Pods read per workload (one page): a CCM runs one pod per control-plane node.
pub const MAX_PODS: u32 = 100;

/// CCM workloads whose pods the audit checks (a cluster runs one or two; each costs a pod
/// list and a read per mounted config). Past it, one input error says so.
pub const MAX_WORKLOADS: usize = 64;

/// A Secret or ConfigMap a CCM container mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mounted {
    /// `Secret` or `ConfigMap`.
    pub kind: &'static str,
    /// Its name (in the workload's namespace).
    pub name: String,
    /// The keys projected into the volume (`items`), or None for all keys.
    pub keys: Option<Vec<String>>,
}

/// A workload that runs the OpenStack CCM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// `DaemonSet` or `Deployment`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The audit's entry name, `kind/namespace/name`.
    pub entry: String,
    /// The pod selector as a label-selector string, when it has one that can be expressed.
    pub selector: Option<String>,
    /// Names of the containers that run the CCM.
    pub containers: Vec<String>,
    /// The Secrets and ConfigMaps those containers mount.
    pub mounts: Vec<Mounted>,
}

impl Workload {
    /// The CCM workload `object` is, or None when no container of it runs the CCM.
    pub fn of(engine: &Engine, gvk: &GroupVersionKind, object: &DynamicObject) -> Option<Self> {
        if !matches!(gvk.kind.as_str(), "DaemonSet" | "Deployment") {
            return None;
        }
        let params = engine.ccm_marker_params();
        let markers = CcmMarkers::new(&params.ccm_images, &params.ccm_args);
        let spec = &object.data["spec"]["template"]["spec"];
        let mut containers = Vec::new();
        let mut volume_names = BTreeSet::new();
        // `containers` only: an init container has exited before the running CCM starts.
        for ccm in markers
            .containers(gvk, object)
            .into_iter()
            .filter(|c| c.list == "containers")
        {
            containers.push(ccm.name.to_owned());
            for mount in ccm.container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if let Some(name) = mount["name"].as_str() {
                    volume_names.insert(name.to_owned());
                }
            }
        }
        if containers.is_empty() {
            return None;
        }
        let mut mounts = Vec::new();
        for volume in spec["volumes"].as_array().into_iter().flatten() {
            if !volume["name"]
                .as_str()
                .is_some_and(|n| volume_names.contains(n))
            {
                continue;
            }
            mounts.extend(mounted(&volume["secret"], "Secret", "secretName"));
            mounts.extend(mounted(&volume["configMap"], "ConfigMap", "name"));
            for source in volume["projected"]["sources"]
                .as_array()
                .into_iter()
                .flatten()
            {
                mounts.extend(mounted(&source["secret"], "Secret", "name"));
                mounts.extend(mounted(&source["configMap"], "ConfigMap", "name"));
            }
        }
        let selector =
            serde_json::from_value::<LabelSelector>(object.data["spec"]["selector"].clone())
                .ok()
                .and_then(|s| Selector::try_from(s).ok())
                .map(|s| s.to_string())
                .filter(|s| !s.is_empty());
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let name = object.metadata.name.clone().unwrap_or_default();
        Some(Workload {
            entry: format!("{}/{namespace}/{name}", gvk.kind),
            kind: gvk.kind.clone(),
            namespace,
            name,
            selector,
            containers,
            mounts,
        })
    }

    /// `kubectl -n NS rollout restart daemonset/NAME`.
    pub fn restart_command(&self) -> String {
        format!(
            "kubectl -n {} rollout restart {}/{}",
            self.namespace,
            self.kind.to_ascii_lowercase(),
            self.name
        )
    }
}

fn mounted(source: &Value, kind: &'static str, name_field: &str) -> Option<Mounted> {
    let name = source[name_field].as_str()?;
    let keys = source["items"].as_array().map(|items| {
        items
            .iter()
            .filter_map(|i| i["key"].as_str().map(str::to_owned))
            .collect()
    });
    Some(Mounted {
        kind,
        name: name.to_owned(),
        keys,
    })
}

/// When a data key of an object last changed, as far as the API server records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// The time.
    pub at: Timestamp,
    /// The field manager whose entry gave the time, or None for the creation time.
    pub manager: Option<String>,
}

/// The latest `managedFields[].time` of an entry that owns `data.<key>` (or
/// `stringData`/`binaryData`), else the creation time; None when neither is recorded.
pub fn last_change(metadata: &ObjectMeta, key: &str) -> Option<Changed> {
    let field = format!("f:{key}");
    let owns_key = |fields: &Value| {
        ["f:data", "f:stringData", "f:binaryData"]
            .iter()
            .any(|d| fields.get(*d).and_then(|m| m.get(&field)).is_some())
    };
    let latest = metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.fields_v1.as_ref().is_some_and(|f| owns_key(&f.0)))
        .filter_map(|e| Some((e.time.as_ref()?.0, e.manager.clone())))
        .max_by_key(|(t, _)| *t);
    match latest {
        Some((at, manager)) => Some(Changed {
            at,
            manager: Some(manager.unwrap_or_default()),
        }),
        None => metadata.creation_timestamp.as_ref().map(|t| Changed {
            at: t.0,
            manager: None,
        }),
    }
}

/// When the pod's CCM started reading its config: the latest `startedAt` of the running
/// `containers` among its statuses, else the pod's `status.startTime`.
pub fn pod_started(pod: &Pod, containers: &[String]) -> Option<Timestamp> {
    let status = pod.status.as_ref()?;
    let running = status
        .container_statuses
        .iter()
        .flatten()
        .filter(|c| containers.contains(&c.name))
        .filter_map(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref())
        .map(|t| t.0)
        .max();
    running.or_else(|| status.start_time.as_ref().map(|t| t.0))
}

/// A CCM workload with pods that started before their cloud config last changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleWorkload {
    /// The workload's audit entry (`DaemonSet/kube-system/openstack-cloud-controller-manager`).
    pub entry: String,
    /// `kubectl -n NS rollout restart KIND/NAME`.
    pub restart_command: String,
    /// The config, e.g. `Secret kube-system/cloud-config data[cloud.conf]`.
    pub config: String,
    /// When it last changed.
    pub changed: Changed,
    /// Pods that started before, with their start times.
    pub pods: Vec<(String, Timestamp)>,
}

impl StaleWorkload {
    /// The finding's message: what, why, when, and the command that fixes it.
    pub fn message(&self) -> String {
        let by = match &self.changed.manager {
            Some(m) => format!(
                "last written at {} by field manager {m:?} (the time that manager last changed a \
                 field it owns, which may be later than the last change of this key)",
                self.changed.at
            ),
            None => format!("created at {} and not changed since", self.changed.at),
        };
        let pods: Vec<String> = self
            .pods
            .iter()
            .map(|(name, at)| format!("{name} (started {at})"))
            .collect();
        format!(
            "the running CCM uses an older cloud config than the stored one until it restarts: \
             {} was {by}, and {} started before that: {}. The OpenStack CCM reads its cloud \
             config only at start (cloud-provider-openstack pkg/openstack/openstack.go \
             l.181-192, ReadConfig) and no controller restarts it when a Secret or ConfigMap \
             changes (the chart's checksum/config annotation covers only its own cloudConfig \
             template), so settings such as provider-requires-serial-api-calls are not in \
             effect. Fix: `{}`",
            self.config,
            if self.pods.len() == 1 {
                "its pod"
            } else {
                "its pods"
            },
            pods.join(", "),
            self.restart_command
        )
    }
}

/// What checking one workload gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Pods run an older config.
    Stale(StaleWorkload),
    /// Something needed for the comparison could not be read.
    Unseen {
        /// The workload's audit entry.
        entry: String,
        /// What could not be read, and why.
        message: String,
    },
}

fn api_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(s) if s.code == 403 => {
            "403 Forbidden: this account has no RBAC permission to read it".to_owned()
        }
        kube::Error::Api(s) => format!("{} {}", s.code, s.reason),
        other => other.to_string(),
    }
}

/// Compares each workload's pods with the cloud configs they mount. `requests` counts the
/// API requests made.
pub async fn check_workloads(
    client: &kube::Client,
    engine: &Engine,
    workloads: Vec<Workload>,
    limits: &ReadLimits,
    requests: &mut usize,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    for workload in workloads {
        match check_workload(client, engine, &workload, limits, requests).await {
            Ok(Some(stale)) => out.push(Outcome::Stale(stale)),
            Ok(None) => {}
            Err(message) => out.push(Outcome::Unseen {
                entry: workload.entry.clone(),
                message,
            }),
        }
    }
    out
}

async fn check_workload(
    client: &kube::Client,
    engine: &Engine,
    workload: &Workload,
    limits: &ReadLimits,
    requests: &mut usize,
) -> Result<Option<StaleWorkload>, String> {
    // The newest change among the cloud configs the CCM mounts.
    let mut newest: Option<(String, Changed)> = None;
    for mount in &workload.mounts {
        let gvk = GroupVersionKind::gvk("", "v1", mount.kind);
        let ar = ApiResource::from_gvk(&gvk);
        *requests += 1;
        let read = page::get(client, &ar, Some(&workload.namespace), &mount.name, limits).await;
        let object = match read {
            Ok(Some(o)) => o,
            // Absent: the pod could not have started with it; nothing to compare.
            Ok(None) => continue,
            Err(ReadError::Api(e)) => {
                return Err(format!(
                    "cannot tell whether the running CCM uses the current cloud config: reading \
                     {} {}/{}: {}; this run cannot see it",
                    mount.kind,
                    workload.namespace,
                    mount.name,
                    api_error(&e)
                ));
            }
            Err(other) => {
                return Err(format!(
                    "cannot tell whether the running CCM uses the current cloud config: reading \
                     {} {}/{}: {other}; this run cannot see it",
                    mount.kind, workload.namespace, mount.name,
                ));
            }
        };
        for site in engine.configs(&crate::engine::Subject::create(&gvk, &object)) {
            let pointer = site.pointer();
            let Some(key) = pointer
                .strip_prefix("/data/")
                .or_else(|| pointer.strip_prefix("/stringData/"))
            else {
                continue;
            };
            let key = key.replace("~1", "/").replace("~0", "~");
            if mount.keys.as_ref().is_some_and(|k| !k.contains(&key)) {
                continue;
            }
            if let Some(changed) = last_change(&object.metadata, &key)
                && newest.as_ref().is_none_or(|(_, n)| changed.at > n.at)
            {
                let config = format!(
                    "{} {}/{} data[{key}]",
                    mount.kind, workload.namespace, mount.name
                );
                newest = Some((config, changed));
            }
        }
    }
    let Some((config, changed)) = newest else {
        return Ok(None);
    };
    let Some(selector) = &workload.selector else {
        return Err(format!(
            "cannot tell whether the running CCM uses the current cloud config: {} has no pod \
             selector this run can read, so its pods cannot be found",
            workload.entry
        ));
    };
    *requests += 1;
    let cannot = |why: String| {
        format!(
            "cannot tell whether the running CCM uses the current cloud config: listing its pods \
             in {}: {why}; this run cannot see them",
            workload.namespace
        )
    };
    let pods_resource = ApiResource::erase::<Pod>(&());
    let page = page::list_in(
        client,
        &pods_resource,
        Some(&workload.namespace),
        &ListParams::default().labels(selector).limit(MAX_PODS),
        limits,
    )
    .await
    .map_err(|e| match e {
        ReadError::Api(e) => cannot(api_error(&e)),
        other => cannot(other.to_string()),
    })?;
    let raw = page.parse().map_err(|e| cannot(e.to_string()))?;
    // One pod decoded at a time; a pod over the object cap is not one the CCM runs in.
    let stale: Vec<(String, Timestamp)> = raw
        .items
        .iter()
        .filter(|item| item.get().len() <= limits.max_object_bytes)
        .filter_map(|item| serde_json::from_str::<Pod>(item.get()).ok())
        .filter_map(|pod| {
            let started = pod_started(&pod, &workload.containers)?;
            (started < changed.at).then(|| (pod.metadata.name.clone().unwrap_or_default(), started))
        })
        .collect();
    if stale.is_empty() {
        return Ok(None);
    }
    Ok(Some(StaleWorkload {
        entry: workload.entry.clone(),
        restart_command: workload.restart_command(),
        config,
        changed,
        pods: stale,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(v: Value) -> ObjectMeta {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn last_change_takes_the_latest_entry_owning_the_key() {
        let m = meta(json!({
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "managedFields": [
                {"manager": "kubectl-create", "operation": "Update", "time": "2025-01-01T00:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}, "f:cloud.conf": {}}, "f:type": {}}},
                {"manager": "kubectl-label", "operation": "Update", "time": "2025-06-01T00:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}},
                {"manager": "kubectl-edit", "operation": "Update", "time": "2025-03-01T00:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:cloud.conf": {}}}}
            ]
        }));
        let c = last_change(&m, "cloud.conf").unwrap();
        assert_eq!(c.at.to_string(), "2025-03-01T00:00:00Z");
        assert_eq!(c.manager.as_deref(), Some("kubectl-edit"));
        // A key no entry owns: the creation time.
        let c = last_change(&m, "other").unwrap();
        assert_eq!(c.at.to_string(), "2025-01-01T00:00:00Z");
        assert_eq!(c.manager, None);
    }

    #[test]
    fn pod_start_prefers_the_running_ccm_container() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "occm-1"},
            "status": {"startTime": "2025-01-01T00:00:00Z", "containerStatuses": [
                {"name": "occm", "image": "i", "imageID": "", "ready": true, "restartCount": 1,
                 "state": {"running": {"startedAt": "2025-02-01T00:00:00Z"}}},
                {"name": "sidecar", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                 "state": {"running": {"startedAt": "2025-05-01T00:00:00Z"}}}
            ]}
        }))
        .unwrap();
        let t = pod_started(&pod, &["occm".to_owned()]).unwrap();
        assert_eq!(t.to_string(), "2025-02-01T00:00:00Z");
        let t = pod_started(&pod, &["other".to_owned()]).unwrap();
        assert_eq!(t.to_string(), "2025-01-01T00:00:00Z");
    }
}
