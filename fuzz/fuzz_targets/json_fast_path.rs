#![no_main]
//! `cargo +nightly fuzz run json_fast_path`: see `weir::fuzz::json_fast_path`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| weir::fuzz::json_fast_path(data));
