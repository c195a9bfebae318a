#![no_main]
//! `cargo +nightly fuzz run checkpoint`: see `weir::fuzz::checkpoint`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| weir::fuzz::checkpoint(data));
