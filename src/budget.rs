//! The evaluation budget: a cancellation flag shared by the adapter that owns the clock and
//! the pure evaluation that must stop when the request deadline passes.
//!
//! The engine reads no clock (ARCHITECTURE.md, invariant 1). The webhook sets the flag when
//! the request deadline passes; long loops in decoding, parsing and the rules call
//! [`Cancel::check`] and give up with [`Exhausted`]. A review that runs out of budget is
//! answered by the transport with the failure-policy semantics (mutate admits unchanged with
//! a warning, validate denies with a retry code), and its evaluation slot is freed as soon as
//! the evaluation notices the flag.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The evaluation ran past its budget (the request deadline passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the evaluation ran out of time (request deadline passed)")]
pub struct Exhausted;

/// A cancellation flag: cheap to clone (one `Arc`), cheap to check (one relaxed load).
#[derive(Debug, Clone, Default)]
pub struct Cancel(Option<Arc<AtomicBool>>);

impl Cancel {
    /// A flag that can be cancelled with [`Cancel::cancel`].
    pub fn new() -> Self {
        Self(Some(Arc::new(AtomicBool::new(false))))
    }

    /// A flag that never fires (the `check` CLI, tests, benchmarks). Same as `default()`.
    pub fn never() -> Self {
        Self(None)
    }

    /// Fires the flag: every evaluation holding a clone stops at its next check.
    pub fn cancel(&self) {
        if let Some(flag) = &self.0 {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the flag has fired.
    pub fn is_cancelled(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
    }

    /// `Err(Exhausted)` once the flag has fired; call it in loops over input.
    pub fn check(&self) -> Result<(), Exhausted> {
        if self.is_cancelled() {
            Err(Exhausted)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_flag() {
        let a = Cancel::new();
        let b = a.clone();
        assert!(b.check().is_ok());
        a.cancel();
        assert_eq!(b.check(), Err(Exhausted));
        let never = Cancel::never();
        never.cancel();
        assert!(never.check().is_ok());
    }
}
