//! Self-managed TLS (`serve --tls-mode self-managed`): stackgate keeps its own serving
//! certificate and CA bundle in one Secret and rotates them without a failed call.
//!
//! - [`rotation`]: the pure state machine (what the Secret holds, what the webhooks' `caBundle`
//!   says, what the replicas report, and `now` → the next action); every transition is tested
//!   with a clock.
//! - [`pki`]: the Secret's keys, parsed into the machine's input, and the certificates it asks
//!   for (rcgen on ring).
//! - [`controller`]: the adapter. The replica holding the Lease reads and writes the Secret
//!   and patches the `caBundle` of stackgate's own webhook configurations; every replica
//!   watches the Secret, loads the serving certificate and reports what it loaded.

pub mod controller;
pub mod pki;
pub mod rotation;
