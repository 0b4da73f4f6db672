//! `ccm-config-source`: the cloud config a CCM container reads must be one stackgate can see.
//!
//! stackgate guards the object the CCM reads as its `--cloud-config` (the `CcmConfigSource`
//! fact, [`crate::facts::ccm_config`]). This family reports, on the workload, the containers
//! for which that object cannot be known: a `hostPath` (a file on the node), a path no volume
//! holds (a file of the image), a path built from a variable of another object (`valueFrom`,
//! `envFrom`), a relative path; and the containers whose CCM would not start (no
//! `--cloud-config`, a path no mounted key provides). Nothing there is checked for
//! `provider-requires-serial-api-calls` or the settings that crash the CCM, so the workload
//! is the place to say so, once. Warn only: the workload may be right (a config written by
//! node provisioning), and the fix is in another object.

use super::ccm_workload::{CcmMarkers, pod_spec_path};
use super::concurrency::ConcurrencyParams;
use super::{
    Check, Example, Family, ObjectInput, RuleId, RuleOutput, Severity, Violation, parse_params,
};
use crate::facts::ccm_config::{self, Source};

/// The family: reads CCM workloads.
pub static FAMILY: Family = Family {
    id: RuleId::new("ccm-config-source"),
    check: Check::Object(check_object),
    facts: &[],
    params: &["ccmImages", "ccmArgs"],
    parse_params: parse_params::<ConcurrencyParams>,
    codes: &[CODE_UNSEEN, CODE_NOT_STARTING],
    example: || {
        Some(Example::create(
            serde_json::json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
            "spec": {"template": {"spec": {
                "containers": [{"name": "occm",
                    "image": "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0",
                    "args": ["--cloud-provider=openstack",
                             "--cloud-config=/etc/kubernetes/cloud.conf"],
                    "volumeMounts": [{"name": "k8s", "mountPath": "/etc/kubernetes"}]}],
                "volumes": [{"name": "k8s", "hostPath": {"path": "/etc/kubernetes"}}]}}}}),
        ))
    },
    embedded: true,
    default_policy: (
        "ccm-config-source.yaml",
        include_str!("../../policies/ccm-config-source.yaml"),
    ),
};

/// The CCM reads a cloud config stackgate cannot see.
pub const CODE_UNSEEN: &str = "unseen";
/// The CCM would not start: no cloud config, or a path no mounted object holds.
pub const CODE_NOT_STARTING: &str = "not-starting";

fn check_object(input: &ObjectInput<'_>) -> RuleOutput {
    let defaults = ConcurrencyParams::default();
    let mut out = RuleOutput::default();
    if pod_spec_path(input.subject.kind).is_none() {
        // No pod spec, no container that reads a config: the markers are not built for
        // nothing (this runs on every review).
        return out;
    }
    let params = input.params.get().unwrap_or(&defaults);
    let markers = CcmMarkers::new(&params.ccm_images, &params.ccm_args);
    for read in ccm_config::container_reads(input.subject.kind, input.object, &markers) {
        let flag = read
            .path
            .as_deref()
            .map(|path| format!("--cloud-config={path}: "))
            .unwrap_or_default();
        let (code, what, fix, why) = match read.source {
            Source::Objects(_) => continue,
            Source::Unseen(reason) => (
                CODE_UNSEEN,
                "stackgate cannot see the cloud config this CCM reads".to_owned(),
                "mount it from a Secret or ConfigMap, or exempt this workload".to_owned(),
                format!(
                    "{flag}{reason}. stackgate checks the CCM's config in the \
                     object its --cloud-config volume mounts; this one is not checked for \
                     provider-requires-serial-api-calls or for settings that stop the CCM."
                ),
            ),
            Source::NotStarting(reason) => (
                CODE_NOT_STARTING,
                "this CCM would not start: its cloud config cannot be read".to_owned(),
                "pass --cloud-config with a path a mounted Secret or ConfigMap key provides"
                    .to_owned(),
                format!(
                    "{flag}{reason}. The OpenStack provider refuses to start \
                     without a cloud config (cloud-provider-openstack pkg/openstack/openstack.go, \
                     ReadConfig: \"no OpenStack cloud provider config file given\")."
                ),
            ),
        };
        out.violations.push(Violation {
            severity: Severity::Warn,
            code,
            line: None,
            pointer: Some(read.pointer),
            location: Some(read.reader),
            what,
            fix,
            why,
            notes: Vec::new(),
            unseen_overlay: None,
            fixed_by_edit: false,
        });
    }
    out
}
