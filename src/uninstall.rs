//! `stackgate uninstall`: what the chart's pre-delete hook runs before Helm deletes the
//! release, so that an uninstall leaves nothing of stackgate behind and never leaves the
//! apiserver calling a webhook whose pods are gone.
//!
//! Order matters: the webhook configurations go first (while the pods still answer), then
//! the reports the background audit wrote (they would keep reading FAIL for a tool that is
//! gone), then the audit's Lease, then the report CRDs, but only those this release installed
//! and only when no other tool's report is left in them (deleting a CRD deletes every object
//! of it). Everything is deleted by name: the chart's RBAC for the hook names each object.
//! An object already gone, or a report API the cluster does not serve, is not an error.

use k8s_openapi::Resource;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams};
use kube::core::{DynamicObject, ObjectMeta};

use crate::audit::background::{FIELD_MANAGER, MANAGED_BY_LABEL, REPORT_NAME, ReportFormat};

/// The Helm annotation naming the release that owns an object.
pub const HELM_RELEASE_NAME: &str = "meta.helm.sh/release-name";
/// The Helm annotation naming that release's namespace.
pub const HELM_RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";
/// The report CRDs the chart installs with `audit.installCRDs`, each with whether it holds
/// the cluster-scoped kind.
pub const REPORT_CRDS: [(&str, bool); 2] = [
    ("policyreports.wgpolicyk8s.io", false),
    ("clusterpolicyreports.wgpolicyk8s.io", true),
];

/// What to remove; the chart's hook fills it from the release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UninstallPlan {
    /// Name of the MutatingWebhookConfiguration and of the ValidatingWebhookConfiguration.
    pub webhook_configuration: String,
    /// Namespace of the background audit's Lease (the release namespace).
    pub lease_namespace: String,
    /// Name of the background audit's Lease.
    pub lease_name: String,
    /// The Helm release (`meta.helm.sh/release-name`) whose report CRDs may be removed.
    pub release: String,
    /// The release's namespace (`meta.helm.sh/release-namespace`).
    pub release_namespace: String,
    /// Remove the report CRDs this release installed (when no other report is left).
    pub crds: bool,
}

/// What happened to one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Deleted.
    Deleted,
    /// It did not exist.
    Absent,
    /// The cluster does not serve its API.
    NotServed,
    /// Kept on purpose, with the reason.
    Kept(String),
}

/// One line of the uninstall's account: which object and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `Kind name` or `Kind namespace/name`.
    pub object: String,
    /// What happened.
    pub outcome: Outcome,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.outcome {
            Outcome::Deleted => write!(f, "deleted {}", self.object),
            Outcome::Absent => write!(f, "{}: not found (nothing to delete)", self.object),
            Outcome::NotServed => write!(f, "{}: API not served (nothing to delete)", self.object),
            Outcome::Kept(why) => write!(f, "kept {}: {why}", self.object),
        }
    }
}

/// Why the uninstall stopped. Objects deleted before the error stay deleted; running it
/// again continues (every step is idempotent).
#[derive(Debug, thiserror::Error)]
pub enum UninstallError {
    /// A request the hook's RBAC should allow failed.
    #[error("{action} {object}")]
    Request {
        /// `deleting`, `listing` or `reading`.
        action: &'static str,
        /// The object or resource.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Whether a report CRD may be deleted: this release installed it (Helm's ownership
/// annotations name it) and no report is left in it after stackgate's were deleted.
pub fn crd_removable(
    meta: &ObjectMeta,
    release: &str,
    release_namespace: &str,
    reports_left: usize,
) -> Result<(), String> {
    let annotation = |key: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    if annotation(HELM_RELEASE_NAME) != Some(release)
        || annotation(HELM_RELEASE_NAMESPACE) != Some(release_namespace)
    {
        return Err(format!(
            "not installed by release {release_namespace}/{release} (another tool's CRD)"
        ));
    }
    if reports_left > 0 {
        return Err(format!(
            "{reports_left} report(s) of another tool still in it; delete the CRD yourself once none is left"
        ));
    }
    Ok(())
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// Deletes `name` through `api`; 404 is [`Outcome::Absent`].
async fn delete_named<K>(api: &Api<K>, object: String, name: &str) -> Result<Step, UninstallError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let outcome = match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Outcome::Deleted,
        Err(error) if is_status(&error, 404) => Outcome::Absent,
        Err(source) => {
            return Err(UninstallError::Request {
                action: "deleting",
                object,
                source,
            });
        }
    };
    Ok(Step { object, outcome })
}

/// Deletes stackgate's reports of one API (`format`): every namespaced report named
/// [`REPORT_NAME`] with the managed-by label, and the cluster report.
async fn delete_reports(
    client: &kube::Client,
    format: ReportFormat,
) -> Result<Vec<Step>, UninstallError> {
    let namespaced = format.resource(false);
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &namespaced);
    let selector = format!("{MANAGED_BY_LABEL}={FIELD_MANAGER}");
    let listed = match all
        .list_metadata(&ListParams::default().labels(&selector))
        .await
    {
        Ok(list) => list,
        // 404: the cluster does not serve this report API, so stackgate wrote none.
        Err(error) if is_status(&error, 404) => {
            return Ok(vec![Step {
                object: format!("{} {}", format.api_version(), format.kind(false)),
                outcome: Outcome::NotServed,
            }]);
        }
        Err(source) => {
            return Err(UninstallError::Request {
                action: "listing",
                object: format!("{} ({selector})", namespaced.plural),
                source,
            });
        }
    };
    let mut steps = Vec::new();
    for report in listed.items {
        let (Some(ns), Some(REPORT_NAME)) = (
            report.metadata.namespace.as_deref(),
            report.metadata.name.as_deref(),
        ) else {
            continue;
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &namespaced);
        let object = format!("{} {ns}/{REPORT_NAME}", format.kind(false));
        steps.push(delete_named(&api, object, REPORT_NAME).await?);
    }
    let cluster: Api<DynamicObject> = Api::all_with(client.clone(), &format.resource(true));
    let object = format!("{} {REPORT_NAME}", format.kind(true));
    steps.push(delete_named(&cluster, object, REPORT_NAME).await?);
    Ok(steps)
}

/// Whether any report of `format` (its cluster kind when `cluster`) is left in the cluster:
/// 0 or 1, from one list of at most one object, as any report keeps its CRD.
async fn reports_left(
    client: &kube::Client,
    format: ReportFormat,
    cluster: bool,
) -> Result<usize, UninstallError> {
    let resource = format.resource(cluster);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(list) => Ok(list.items.len()),
        Err(error) if is_status(&error, 404) => Ok(0),
        Err(source) => Err(UninstallError::Request {
            action: "listing",
            object: resource.plural,
            source,
        }),
    }
}

/// Runs the uninstall `plan` in order; returns one [`Step`] per object.
pub async fn run(client: &kube::Client, plan: &UninstallPlan) -> Result<Vec<Step>, UninstallError> {
    let mut steps = Vec::new();
    let name = plan.webhook_configuration.as_str();

    // 1. The webhooks, first: after this no apiserver call depends on stackgate's pods.
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let object = format!("{} {name}", ValidatingWebhookConfiguration::KIND);
    steps.push(delete_named(&validating, object, name).await?);
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let object = format!("{} {name}", MutatingWebhookConfiguration::KIND);
    steps.push(delete_named(&mutating, object, name).await?);

    // 2. The audit's reports, in both report APIs it may have written.
    for format in [ReportFormat::Wgpolicyk8s, ReportFormat::Openreports] {
        steps.extend(delete_reports(client, format).await?);
    }

    // 3. The audit's Lease.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &plan.lease_namespace);
    let object = format!(
        "{} {}/{}",
        Lease::KIND,
        plan.lease_namespace,
        plan.lease_name
    );
    steps.push(delete_named(&leases, object, &plan.lease_name).await?);

    // 4. The report CRDs this release installed, when nothing else is in them.
    if plan.crds {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for (crd, cluster) in REPORT_CRDS {
            let object = format!("{} {crd}", CustomResourceDefinition::KIND);
            let found = match crds.get_metadata_opt(crd).await {
                Ok(found) => found,
                Err(source) => {
                    return Err(UninstallError::Request {
                        action: "reading",
                        object,
                        source,
                    });
                }
            };
            let Some(found) = found else {
                steps.push(Step {
                    object,
                    outcome: Outcome::Absent,
                });
                continue;
            };
            let left = reports_left(client, ReportFormat::Wgpolicyk8s, cluster).await?;
            match crd_removable(
                &found.metadata,
                &plan.release,
                &plan.release_namespace,
                left,
            ) {
                Ok(()) => steps.push(delete_named(&crds, object, crd).await?),
                Err(why) => steps.push(Step {
                    object,
                    outcome: Outcome::Kept(why),
                }),
            }
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn owned_by(release: &str, namespace: &str) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(BTreeMap::from([
                (HELM_RELEASE_NAME.to_string(), release.to_string()),
                (HELM_RELEASE_NAMESPACE.to_string(), namespace.to_string()),
            ])),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_crd_of_this_release_with_no_report_left_is_removed() {
        assert_eq!(
            crd_removable(
                &owned_by("stackgate", "stackgate"),
                "stackgate",
                "stackgate",
                0
            ),
            Ok(())
        );
    }

    #[test]
    fn a_crd_with_reports_of_other_tools_is_kept() {
        let why = crd_removable(
            &owned_by("stackgate", "stackgate"),
            "stackgate",
            "stackgate",
            1,
        )
        .unwrap_err();
        assert!(
            why.contains("1 report(s) of another tool still in it"),
            "{why}"
        );
    }

    #[test]
    fn a_crd_another_release_or_tool_installed_is_kept() {
        for meta in [
            owned_by("kyverno", "kyverno"),
            owned_by("stackgate", "other-namespace"),
            owned_by("other", "stackgate"),
            ObjectMeta::default(),
        ] {
            let why = crd_removable(&meta, "stackgate", "stackgate", 0).unwrap_err();
            assert!(
                why.contains("not installed by release stackgate/stackgate"),
                "{why}"
            );
        }
    }

    #[test]
    fn steps_read_as_what_happened() {
        let step = |outcome| Step {
            object: "Lease stackgate/stackgate-audit".to_string(),
            outcome,
        };
        assert_eq!(
            step(Outcome::Deleted).to_string(),
            "deleted Lease stackgate/stackgate-audit"
        );
        assert_eq!(
            step(Outcome::Absent).to_string(),
            "Lease stackgate/stackgate-audit: not found (nothing to delete)"
        );
        assert_eq!(
            step(Outcome::NotServed).to_string(),
            "Lease stackgate/stackgate-audit: API not served (nothing to delete)"
        );
        assert_eq!(
            step(Outcome::Kept("why".into())).to_string(),
            "kept Lease stackgate/stackgate-audit: why"
        );
    }
}
