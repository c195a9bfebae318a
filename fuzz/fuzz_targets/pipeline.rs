#![no_main]
//! `cargo +nightly fuzz run pipeline`: see `weir::fuzz::pipeline`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| weir::fuzz::pipeline(data));
