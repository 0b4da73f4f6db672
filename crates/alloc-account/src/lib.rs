//! A counting global allocator with a per-thread account of live bytes.
//!
//! [`Counting`] delegates every call to the allocator it wraps ([`std::alloc::System`] unless
//! another is given, [`Counting::over`]). While a [`Scope`] is active on
//! the current thread it adds the size of each allocation to that thread's account and
//! subtracts the size of each deallocation (net live bytes since the scope was entered,
//! signed, saturating) and records the peak. [`over_limit`] is one thread-local read: the
//! caller (stackgate's `budget::Cancel::check`) polls it and stops its work; the allocator
//! itself never fails an allocation, because an allocation failure in Rust aborts the
//! process instead of unwinding.
//!
//! The account is per thread, so the work it measures must run on one thread from
//! [`Scope::enter`] to the scope's end (a synchronous call). Memory freed in the scope that was
//! allocated before it lowers the account (it may go below zero); memory allocated in the
//! scope and freed after it is not counted again.
//!
//! The allocator's per-thread state is `const`-initialised [`Cell`]s of plain integers with no
//! destructor, so reading it never allocates, never registers a destructor and never panics.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::marker::PhantomData;

/// The current thread's account.
struct Account {
    /// Whether a scope is active on this thread; nothing is counted otherwise.
    active: Cell<bool>,
    /// Bytes allocated minus bytes deallocated since the scope was entered.
    live: Cell<isize>,
    /// The highest `live` seen since the scope was entered (at least 0).
    peak: Cell<isize>,
    /// The scope's limit in bytes: the account is over it once `peak` passes it.
    limit: Cell<isize>,
}

thread_local! {
    static ACCOUNT: Account = const {
        Account {
            active: Cell::new(false),
            live: Cell::new(0),
            peak: Cell::new(0),
            limit: Cell::new(isize::MAX),
        }
    };
}

/// Adds `delta` bytes to the current thread's account when a scope is active.
#[inline]
fn record(delta: isize) {
    // `try_with` cannot fail for a `const` thread-local without a destructor; if it ever did
    // (thread teardown), the bytes are simply not counted.
    let _ = ACCOUNT.try_with(|account| {
        if account.active.get() {
            let live = account.live.get().saturating_add(delta);
            account.live.set(live);
            if live > account.peak.get() {
                account.peak.set(live);
            }
        }
    });
}

/// Bytes as a signed count (a `Layout`'s size never exceeds `isize::MAX`).
#[inline]
fn signed(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

/// The global allocator: the allocator it wraps plus the current thread's account. Install it
/// with `#[global_allocator] static ALLOCATOR: alloc_account::Counting =
/// alloc_account::Counting::SYSTEM;`, or over another allocator with [`Counting::over`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Counting<A = System> {
    inner: A,
}

impl Counting<System> {
    /// Counting over the system allocator.
    pub const SYSTEM: Self = Counting { inner: System };
}

impl<A> Counting<A> {
    /// Counting over `inner`: every call goes to `inner`, and its sizes onto the account.
    pub const fn over(inner: A) -> Self {
        Counting { inner }
    }
}

// SAFETY: every method forwards its arguments unchanged to the wrapped allocator `A`, which
// upholds the `GlobalAlloc` contract (it is itself a `GlobalAlloc`), and returns what it
// returned; a pointer given back to this allocator was therefore made by `A`. The bookkeeping
// around each call only reads and writes this thread's `Cell`s of integers: it does not
// allocate (so it cannot recurse into the allocator), cannot panic (saturating arithmetic,
// `try_with`) and does not touch the memory being allocated or freed.
#[allow(unsafe_code)]
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
        let ptr = unsafe { self.inner.alloc(layout) };
        if !ptr.is_null() {
            record(signed(layout.size()));
        }
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { self.inner.alloc_zeroed(layout) };
        if !ptr.is_null() {
            record(signed(layout.size()));
        }
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` was allocated by this allocator (so by `A`)
        // with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) };
        record(-signed(layout.size()));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `ptr` was allocated by `A` with `layout` and that
        // `new_size` is valid for `layout`'s alignment.
        let new = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            record(signed(new_size).saturating_sub(signed(layout.size())));
        }
        new
    }
}

/// The current thread's account while a [`Scope`] is active.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes allocated minus bytes freed since the scope was entered (negative when the scope
    /// freed more memory from before it than it allocated).
    pub live: isize,
    /// The highest `live` reached since the scope was entered (never below 0).
    pub peak: usize,
    /// The scope's limit.
    pub limit: usize,
}

impl Usage {
    /// Whether the peak passed the limit.
    pub fn over_limit(&self) -> bool {
        self.peak > self.limit
    }
}

/// The current thread's account, or `None` when no scope is active (or [`Counting`] is not
/// the global allocator: then nothing is ever counted and the peak stays 0).
pub fn usage() -> Option<Usage> {
    ACCOUNT
        .try_with(|account| {
            account.active.get().then(|| Usage {
                live: account.live.get(),
                peak: account.peak.get().max(0).unsigned_abs(),
                limit: account.limit.get().unsigned_abs(),
            })
        })
        .ok()
        .flatten()
}

/// Whether a scope is active on this thread and its account's peak passed its limit. One
/// thread-local read: cheap enough for every iteration of a loop over input. Sticky until
/// the scope ends: the peak never goes down.
#[inline]
pub fn over_limit() -> bool {
    ACCOUNT
        .try_with(|account| account.active.get() && account.peak.get() > account.limit.get())
        .unwrap_or(false)
}

/// An active account on the current thread; dropping it ends the account. Not `Send`: the
/// account belongs to the thread that entered it.
///
/// Scopes nest: entering one saves the enclosing account and starts a fresh one; when the
/// inner scope ends, what it still holds is added to the enclosing account and its peak
/// counts toward the enclosing peak, so the outer limit still sees everything.
#[derive(Debug)]
#[must_use = "the account ends when the scope is dropped"]
pub struct Scope {
    saved: Saved,
    _not_send: PhantomData<*const ()>,
}

/// The enclosing account, restored when a nested scope ends.
#[derive(Debug, Clone, Copy)]
struct Saved {
    active: bool,
    live: isize,
    peak: isize,
    limit: isize,
}

impl Scope {
    /// Starts a fresh account on this thread (live and peak 0) that is over its limit once
    /// its peak passes `limit` bytes.
    pub fn enter(limit: usize) -> Self {
        let limit = signed(limit);
        let saved = ACCOUNT
            .try_with(|account| {
                let saved = Saved {
                    active: account.active.get(),
                    live: account.live.get(),
                    peak: account.peak.get(),
                    limit: account.limit.get(),
                };
                account.live.set(0);
                account.peak.set(0);
                account.limit.set(limit);
                account.active.set(true);
                saved
            })
            .unwrap_or(Saved {
                active: false,
                live: 0,
                peak: 0,
                limit: isize::MAX,
            });
        Self {
            saved,
            _not_send: PhantomData,
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let saved = self.saved;
        let _ = ACCOUNT.try_with(|account| {
            let (live, peak) = (account.live.get(), account.peak.get());
            if saved.active {
                // The inner scope's bytes were the outer scope's bytes too.
                account.live.set(saved.live.saturating_add(live));
                account
                    .peak
                    .set(saved.peak.max(saved.live.saturating_add(peak)));
            } else {
                account.live.set(0);
                account.peak.set(0);
            }
            account.limit.set(saved.limit);
            account.active.set(saved.active);
        });
    }
}
