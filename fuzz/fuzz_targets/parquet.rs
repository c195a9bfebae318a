#![no_main]
//! `cargo +nightly fuzz run parquet`: see `weir::fuzz::parquet`.
//!
//! weir catches a panic inside the parquet/arrow crates at the file boundary (the file
//! fails alone, named); libFuzzer's panic hook would abort even on a caught panic, so
//! the std hook is put back once: a panic that escapes weir still aborts the run
//! (libfuzzer-sys aborts when the target unwinds).
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    static STD_HOOK: std::sync::Once = std::sync::Once::new();
    STD_HOOK.call_once(|| drop(std::panic::take_hook()));
    weir::fuzz::parquet(data)
});
