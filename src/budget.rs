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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The evaluation ran past its budget (the request deadline passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the evaluation ran out of time (request deadline passed)")]
pub struct Exhausted;

/// A cancellation flag: cheap to clone (one `Arc`), cheap to check (one relaxed load).
/// The second field is set only by [`Cancel::after_looks`] (tests).
#[derive(Debug, Clone, Default)]
pub struct Cancel(Option<Arc<AtomicBool>>, Option<Arc<Tripwire>>);

/// The looks at a flag made with [`Cancel::after_looks`], and the look that fires it.
#[derive(Debug)]
struct Tripwire {
    fire_at: usize,
    looks: AtomicUsize,
}

impl Cancel {
    /// A flag that can be cancelled with [`Cancel::cancel`].
    pub fn new() -> Self {
        Self(Some(Arc::new(AtomicBool::new(false))), None)
    }

    /// A flag that never fires (the `check` CLI, tests, benchmarks). Same as `default()`.
    pub fn never() -> Self {
        Self(None, None)
    }

    /// Fires the flag: every evaluation holding a clone stops at its next check.
    pub fn cancel(&self) {
        if let Some(flag) = &self.0 {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the flag has fired.
    pub fn is_cancelled(&self) -> bool {
        if let Some(wire) = &self.1
            && wire.looks.fetch_add(1, Ordering::Relaxed) + 1 >= wire.fire_at
        {
            self.cancel();
        }
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

    /// A flag that fires itself at its `look`-th look ([`Cancel::is_cancelled`] or
    /// [`Cancel::check`], counted over all clones): tests stop an evaluation at a chosen
    /// point without a clock, and count with [`Cancel::looks`] how much it still looked after.
    pub fn after_looks(look: usize) -> Self {
        let wire = Tripwire {
            fire_at: look,
            looks: AtomicUsize::new(0),
        };
        Self(Some(Arc::new(AtomicBool::new(false))), Some(Arc::new(wire)))
    }

    /// The looks at a flag made with [`Cancel::after_looks`] so far (0 for any other flag).
    pub fn looks(&self) -> usize {
        self.1
            .as_ref()
            .map_or(0, |wire| wire.looks.load(Ordering::Relaxed))
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

    #[test]
    fn a_tripwire_fires_at_its_look_for_every_clone() {
        let a = Cancel::after_looks(3);
        let b = a.clone();
        assert_eq!((a.check(), b.is_cancelled()), (Ok(()), false));
        assert_eq!(b.check(), Err(Exhausted));
        assert!(a.is_cancelled());
        assert_eq!((a.looks(), Cancel::new().looks()), (4, 0));
    }
}
