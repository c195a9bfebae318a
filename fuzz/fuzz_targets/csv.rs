#![no_main]
//! `cargo +nightly fuzz run csv`: see `weir::fuzz::csv`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| weir::fuzz::csv(data));
