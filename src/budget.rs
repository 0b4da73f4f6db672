//! The evaluation budget: a cancellation flag shared by the adapter that owns the clock and
//! the pure evaluation that must stop when the request deadline passes, and the memory
//! account of the evaluation running on the current thread.
//!
//! The engine reads no clock (ARCHITECTURE.md, invariant 1). The webhook sets the flag when
//! the request deadline passes; long loops in decoding, parsing and the rules call
//! [`Cancel::check`] and give up with [`Exhausted::Deadline`]. A review that runs out of time
//! is answered by the transport with the failure-policy semantics (mutate admits unchanged
//! with a warning, validate denies with a retry code), and its evaluation slot is freed as
//! soon as the evaluation notices the flag.
//!
//! Memory: the binary's global allocator ([`alloc_account::Counting`], installed in
//! `src/main.rs`) keeps an account of the bytes held by the work running on each thread while
//! a [`MemoryScope`] is active there. [`Cancel::check`] also fails, with
//! [`Exhausted::Memory`], once that account's peak passed the scope's limit, so every shape of
//! input stops at the same per-review budget, whether or not a cap names it. The allocator
//! cannot refuse an allocation (Rust aborts on allocation failure), so the evaluation stops
//! at its next check: the overshoot is what it allocates between two checks. Without the
//! counting allocator (tests, benchmarks without it) the account stays at zero.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The memory account of the evaluation on the current thread: created with
/// `MemoryScope::enter(limit_bytes)`, ended when dropped. Evaluations are synchronous, so
/// everything they allocate from entering to the end is on this thread's account.
pub use alloc_account::Scope as MemoryScope;

/// Default memory budget of one evaluation (`--max-evaluation-memory` of `serve`, and of
/// `audit` per object): 32 MiB (docs/limits.md, "Memory per review").
pub const DEFAULT_MAX_EVALUATION_MEMORY: usize = 32 * 1024 * 1024;

/// Why an evaluation stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Exhausted {
    /// The request deadline passed (the flag fired).
    #[error("the evaluation ran out of time (request deadline passed)")]
    Deadline,
    /// The evaluation held more memory than its per-review budget.
    #[error(
        "evaluating this object needed more than {limit} bytes of memory, over stackgate's \
         limit per review (--max-evaluation-memory)"
    )]
    Memory {
        /// The budget, in bytes.
        limit: usize,
    },
}

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

    /// Whether the evaluation must stop: the flag has fired, or the current thread's memory
    /// account is over its limit (see [`Self::check`]).
    pub fn is_cancelled(&self) -> bool {
        self.fired() || alloc_account::over_limit()
    }

    /// Whether the flag itself has fired (a look: counted by a flag made with
    /// [`Cancel::after_looks`], which fires itself at its chosen look).
    fn fired(&self) -> bool {
        if let Some(wire) = &self.1
            && wire.looks.fetch_add(1, Ordering::Relaxed) + 1 >= wire.fire_at
        {
            self.cancel();
        }
        self.0.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
    }

    /// `Err` once the evaluation must stop; call it in loops over input. Memory comes first:
    /// a review over its budget would be over it again on a retry, so that is the answer
    /// that helps. Both conditions are sticky (the flag never resets, the account's peak
    /// never goes down), so every later check gives the same answer.
    pub fn check(&self) -> Result<(), Exhausted> {
        if alloc_account::over_limit() {
            let limit = alloc_account::usage().map_or(0, |usage| usage.limit);
            return Err(Exhausted::Memory { limit });
        }
        if self.fired() {
            return Err(Exhausted::Deadline);
        }
        Ok(())
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
        assert_eq!(b.check(), Err(Exhausted::Deadline));
        assert!(b.is_cancelled());
        let never = Cancel::never();
        never.cancel();
        assert!(never.check().is_ok());
    }

    #[test]
    fn a_tripwire_fires_at_its_look_for_every_clone() {
        let a = Cancel::after_looks(3);
        let b = a.clone();
        assert_eq!((a.check(), b.is_cancelled()), (Ok(()), false));
        assert_eq!(b.check(), Err(Exhausted::Deadline));
        assert!(a.is_cancelled());
        assert_eq!((a.looks(), Cancel::new().looks()), (4, 0));
    }
}
