#![no_main]
//! `cargo +nightly fuzz run csv_fast_path`: see `weir::fuzz::csv_fast_path`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| weir::fuzz::csv_fast_path(data));
