#![no_main]
//! `cargo +nightly fuzz run gzip`: see `weir::fuzz::gzip`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| weir::fuzz::gzip(data));
