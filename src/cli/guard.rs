//! The control-plane load-balancer guard's `stackgate serve` flags and their conversion into
//! [`GuardConfig`].

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::parse_duration;
use crate::guard::GuardConfig;

// Duration defaults as `--help` shows them; each parses to the guard's constant
// (`tests::guard_defaults_are_the_guard_constants`).

/// [`crate::guard::DEFAULT_OPENSTACK_TIMEOUT`].
const OPENSTACK_TIMEOUT: &str = "800ms";
/// [`crate::guard::DEFAULT_OCTAVIA_CACHE_TTL`].
const OCTAVIA_CACHE_TTL: &str = "5s";

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
    /// clusters, machines, openstackclusters, openstackclusteridentities, namespaces and the
    /// identity secrets; list on machines) and network access to Keystone and Octavia.
    #[arg(
        long = "lb-guard",
        env = "STACKGATE_LB_GUARD",
        value_enum,
        default_value = "off"
    )]
    pub lb_guard: Switch,
    /// Deadline of each Keystone or Octavia call, connection set-up included (also capped by
    /// the request deadline).
    #[arg(long, env = "STACKGATE_OPENSTACK_TIMEOUT", default_value = OPENSTACK_TIMEOUT, value_parser = parse_duration)]
    pub openstack_timeout: Duration,
    /// How long a load balancer's Octavia status tree is kept; 0 disables the cache. A
    /// cached tree only ever serves a refusal: admitting always reads Octavia again.
    #[arg(long, env = "STACKGATE_OCTAVIA_CACHE_TTL", default_value = OCTAVIA_CACHE_TTL, value_parser = parse_duration)]
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

#[cfg(test)]
mod tests {
    use crate::cli::Command;
    use crate::cli::tests::parse;
    use crate::guard::{self, GuardConfig};

    fn guard_config(argv: &[&str]) -> Option<GuardConfig> {
        match parse(argv).command {
            Command::Serve(args) => args.guard.config(),
            other => panic!("{argv:?}: not serve: {other:?}"),
        }
    }

    #[test]
    fn guard_defaults_are_the_guard_constants() {
        assert_eq!(
            guard_config(&["stackgate", "serve"]),
            None,
            "off by default"
        );
        let on = guard_config(&["stackgate", "serve", "--lb-guard=on"]).expect("on");
        assert_eq!(on.openstack_timeout, guard::DEFAULT_OPENSTACK_TIMEOUT);
        assert_eq!(on.octavia_cache_ttl, guard::DEFAULT_OCTAVIA_CACHE_TTL);
        assert_eq!(on, GuardConfig::default());
    }
}
