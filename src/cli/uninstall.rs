//! `stackgate uninstall` flags and their conversion into [`UninstallPlan`].

use clap::Args;

use crate::audit::background::DEFAULT_LEASE_NAME;
use crate::uninstall::UninstallPlan;

/// `stackgate uninstall` flags: what the chart's pre-delete hook removes before Helm deletes
/// the release. The cluster is the kubeconfig's current context or, inside a pod, its
/// service account.
#[derive(Debug, Clone, Args)]
pub struct UninstallArgs {
    /// Name of stackgate's MutatingWebhookConfiguration and ValidatingWebhookConfiguration.
    #[arg(
        long,
        env = "STACKGATE_UNINSTALL_WEBHOOK_CONFIGURATION",
        default_value = "stackgate"
    )]
    pub webhook_configuration: String,
    /// The Helm release; the report CRDs are removed only when its annotations name it.
    #[arg(long, env = "STACKGATE_UNINSTALL_RELEASE", default_value = "stackgate")]
    pub release: String,
    /// The release namespace: where the audit's Lease is, and the CRDs' owner namespace.
    #[arg(
        long,
        env = "STACKGATE_UNINSTALL_NAMESPACE",
        default_value = "stackgate"
    )]
    pub namespace: String,
    /// Name of the background audit's Lease.
    #[arg(long, env = "STACKGATE_UNINSTALL_LEASE_NAME", default_value = DEFAULT_LEASE_NAME)]
    pub lease_name: String,
    /// Also remove the wgpolicyk8s.io report CRDs that this release installed, when no
    /// other tool's report is left in them.
    #[arg(long, env = "STACKGATE_UNINSTALL_CRDS")]
    pub crds: bool,
}

impl From<&UninstallArgs> for UninstallPlan {
    fn from(args: &UninstallArgs) -> Self {
        UninstallPlan {
            webhook_configuration: args.webhook_configuration.clone(),
            lease_namespace: args.namespace.clone(),
            lease_name: args.lease_name.clone(),
            release: args.release.clone(),
            release_namespace: args.namespace.clone(),
            crds: args.crds,
        }
    }
}
