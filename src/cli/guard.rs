//! The control-plane load-balancer guard's `stackgate serve` flags and their conversion into
//! [`GuardConfig`].

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::parse_duration;
use crate::guard::GuardConfig;

/// On or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// `stackgate serve` flags of the guard; flattened into [`super::ServeArgs`].
#[derive(Debug, Clone, Args)]
pub struct GuardArgs {
    /// Control-plane load-balancer guard: before answering a control-plane Machine DELETE,
    /// read the cluster's API load balancer from Octavia. Needs the Kubernetes API (get on
    /// clusters, openstackclusters and the identity secrets) and network access to Keystone
    /// and Octavia.
    #[arg(
        long = "lb-guard",
        env = "STACKGATE_LB_GUARD",
        value_enum,
        default_value = "off"
    )]
    pub lb_guard: Switch,
    /// Deadline of each Keystone or Octavia call, connection set-up included (also capped by
    /// the request deadline).
    #[arg(long, env = "STACKGATE_OPENSTACK_TIMEOUT", default_value = "800ms", value_parser = parse_duration)]
    pub openstack_timeout: Duration,
    /// How long a load balancer's Octavia status tree is reused; 0 disables the cache.
    #[arg(long, env = "STACKGATE_OCTAVIA_CACHE_TTL", default_value = "5s", value_parser = parse_duration)]
    pub octavia_cache_ttl: Duration,
}

impl GuardArgs {
    /// The configuration, or `None` when the guard is off.
    pub fn config(&self) -> Option<GuardConfig> {
        (self.lb_guard == Switch::On).then(|| GuardConfig {
            openstack_timeout: self.openstack_timeout,
            octavia_cache_ttl: self.octavia_cache_ttl,
            ..GuardConfig::default()
        })
    }
}
