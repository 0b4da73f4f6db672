//! The binary's allocator is built as BENCHMARKS.md measured it: mimalloc under the counting
//! allocator, with arenas committed on demand (`.cargo/config.toml` sets the build-time
//! default). Committed eagerly, a burst of large reviews keeps every page it touched
//! (BENCHMARKS.md, "The allocator"); a build that lost the define (an explicit `CFLAGS` in the
//! environment replaces the project's) fails here, not in production.

use std::process::Command;

/// mimalloc's options as the binary starts with them (`MIMALLOC_VERBOSE=1` prints each one on
/// stderr at process start, `option 'NAME': VALUE`).
fn allocator_options() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .arg("--version")
        .env("MIMALLOC_VERBOSE", "1")
        .env_remove("MIMALLOC_ARENA_EAGER_COMMIT")
        .env_remove("MIMALLOC_PURGE_DECOMMITS")
        .output()
        .expect("stackgate runs");
    assert!(out.status.success(), "stackgate --version: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_binary_allocates_with_mimalloc_and_commits_arenas_on_demand() {
    let options = allocator_options();
    assert!(
        options.contains("mimalloc: process init"),
        "the binary's allocator is mimalloc: {options}"
    );
    assert!(
        options.contains("option 'arena_eager_commit': 0"),
        "arenas are committed on demand (.cargo/config.toml CFLAGS): {options}"
    );
    // Freed memory is given back with MADV_DONTNEED, which lowers RSS at once (MADV_FREE
    // leaves it counted until the kernel needs the pages).
    assert!(
        options.contains("option 'purge_decommits': 1"),
        "purges decommit: {options}"
    );
}
