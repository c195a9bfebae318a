#![no_main]
//! `cargo +nightly fuzz run parquet`: see `weir::fuzz::parquet`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| weir::fuzz::parquet(data));
