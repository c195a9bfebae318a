//! Link-time settings for the `weir` binary.
//!
//! On Linux with the GNU C library, the binary is linked with packed relative relocations
//! (`-z pack-relative-relocs`, the ELF `DT_RELR` format): a position-independent executable
//! carries one relocation per pointer in its read-only data (about 150,000 in weir, mostly
//! Arrow's, DataFusion's and sqlparser's vtables and tables), 24 bytes each as `RELA`, a few
//! bytes per run as `RELR`. The stripped dist binary is 3.5 MB smaller and starts as fast.
//! GNU ld (2.38 and later), lld and mold emit `DT_RELR` only when the C library it links
//! against supports it (glibc 2.36 and later) and otherwise link as before, so nothing
//! changes on older systems. BENCHMARKS.md "Binary size" has the figures.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && target_env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
