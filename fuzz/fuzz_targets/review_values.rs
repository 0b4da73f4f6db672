//! Fuzz target `review_values`: see `fuzz/checks.rs` for the properties and docs/fuzzing.md for
//! how to run it.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::review_values(data));
