#![no_main]
//! `cargo +nightly fuzz run json_lines`: see `weir::fuzz::json_lines`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| weir::fuzz::json_lines(data));
