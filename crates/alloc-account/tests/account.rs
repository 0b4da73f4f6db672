//! The account as the allocator keeps it: this test binary installs [`Counting`] as its
//! global allocator. Each test runs on its own thread, so the accounts do not mix.

use std::hint::black_box;

use alloc_account::{Counting, Scope, over_limit, usage};

#[global_allocator]
static ALLOCATOR: Counting = Counting::SYSTEM;

fn live() -> isize {
    usage().expect("a scope is active").live
}

fn peak() -> usize {
    usage().expect("a scope is active").peak
}

#[test]
fn nothing_is_counted_outside_a_scope() {
    let v = black_box(vec![0u8; 1 << 20]);
    assert_eq!(usage(), None);
    assert!(!over_limit());
    drop(v);
}

#[test]
fn allocations_and_frees_in_the_scope_are_counted_and_the_peak_kept() {
    let scope = Scope::enter(1 << 20);
    assert_eq!((live(), peak()), (0, 0));
    let a = black_box(Vec::<u8>::with_capacity(1000));
    assert_eq!(live(), 1000);
    let b = black_box(vec![1u64; 100]);
    assert_eq!((live(), peak()), (1800, 1800));
    drop(a);
    assert_eq!((live(), peak()), (800, 1800));
    drop(b);
    assert_eq!((live(), peak()), (0, 1800));
    assert!(!over_limit());
    drop(scope);
    assert_eq!(usage(), None);
}

#[test]
fn growth_by_realloc_counts_the_new_capacity() {
    let _scope = Scope::enter(1 << 20);
    let mut v: Vec<u8> = black_box(Vec::with_capacity(16));
    v.extend_from_slice(&[7; 4000]);
    assert_eq!(live(), isize::try_from(v.capacity()).unwrap());
    v.shrink_to(100);
    v.truncate(100);
    v.shrink_to_fit();
    assert_eq!(live(), 100);
    assert!(peak() >= 4000);
}

#[test]
fn the_account_is_over_its_limit_once_the_peak_passes_it_and_stays_over() {
    let scope = Scope::enter(1000);
    let at_limit = black_box(vec![0u8; 1000]);
    assert!(!over_limit(), "at the limit is not over it");
    assert!(
        !usage().unwrap().over_limit(),
        "at the limit is not over it"
    );
    let one_more = black_box(vec![0u8; 1]);
    assert!(over_limit());
    assert!(usage().unwrap().over_limit());
    drop((at_limit, one_more));
    assert_eq!(live(), 0);
    assert!(
        over_limit(),
        "the peak passed the limit: freeing does not undo it"
    );
    drop(scope);
    assert!(!over_limit(), "no scope, no limit");
    let _next = Scope::enter(1000);
    assert!(!over_limit(), "a new scope starts a fresh account");
}

#[test]
fn freeing_memory_allocated_before_the_scope_lowers_the_account() {
    let before = black_box(vec![0u8; 4096]);
    let _scope = Scope::enter(100);
    drop(before);
    assert_eq!((live(), peak()), (-4096, 0));
    let after = black_box(vec![0u8; 4000]);
    assert_eq!((live(), peak()), (-96, 0));
    assert!(!over_limit());
    drop(after);
}

#[test]
fn a_nested_scope_has_its_own_account_and_adds_to_the_enclosing_one() {
    let _outer = Scope::enter(10_000);
    let a = black_box(vec![0u8; 100]);
    let kept = {
        let _inner = Scope::enter(50);
        assert_eq!(live(), 0, "the inner account starts fresh");
        let kept = black_box(vec![0u8; 200]);
        let temporary = black_box(vec![0u8; 300]);
        assert!(over_limit(), "the inner limit applies inside");
        drop(temporary);
        kept
    };
    // Outer: 100 before, then the inner scope's 200 kept, its peak 500 on top of the 100.
    assert_eq!((live(), peak()), (300, 600));
    assert!(!over_limit(), "the outer limit applies again");
    drop((a, kept));
    assert_eq!(live(), 0);
}

#[test]
fn other_threads_are_not_counted_and_have_their_own_account() {
    let _scope = Scope::enter(512 * 1024);
    let other = std::thread::spawn(|| {
        assert_eq!(
            usage(),
            None,
            "the scope is this thread's, not the spawner's"
        );
        let _own = Scope::enter(1024);
        let big = black_box(vec![0u8; 1 << 20]);
        let over = over_limit();
        drop(big);
        over
    });
    assert!(
        other.join().unwrap(),
        "the other thread's own account saw its megabyte"
    );
    // Spawning and joining allocate a little here (the thread's handle); the megabyte the
    // other thread allocated is not on this account.
    assert!(peak() < 64 * 1024, "peak {}", peak());
    assert!(!over_limit());
}
