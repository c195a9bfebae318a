#![no_main]
//! `cargo +nightly fuzz run delta_log`: see `weir::fuzz::delta_log`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| weir::fuzz::delta_log(data));
