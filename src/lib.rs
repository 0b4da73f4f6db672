//! stackgate keeps OpenStack-on-Kubernetes platforms out of known failure modes.
//!
//! One engine, two faces: `stackgate serve` (an HTTPS admission webhook, mutating and
//! validating) and `stackgate check` (the same engine over files in a Git repository).
//!
//! ```text
//! HTTPS ─► server ─► admission (decode) ─► engine::Engine::evaluate ─► admission (encode)
//!                                              │
//!                       policy::PolicySet + sites + rules + cloudconf (pure, no IO)
//! ```
//!
//! See `ARCHITECTURE.md` for the code map and the invariants.

pub mod admission;
pub mod admission_policies;
pub mod audit;
pub mod budget;
pub mod ccm_config_watch;
pub mod certs;
pub mod check;
pub mod cli;
pub mod cloudconf;
pub mod cluster_config;
pub mod compose;
pub mod engine;
pub mod exceptions_watch;
pub mod fact_watcher;
pub mod facts;
pub mod guard;
pub mod json_text;
pub mod log_writer;
pub mod metrics;
pub mod platform;
pub mod policy;
pub mod releases;
pub mod report;
pub mod rules;
pub mod secret_text;
pub mod server;
pub mod short_text;
pub mod sites;
pub mod telemetry;
#[cfg(test)]
mod test_rng;
pub mod uninstall;
pub mod yaml;
