//! glibc malloc's arenas (issue #16, the demo pipeline's memory).
//!
//! glibc gives threads their own malloc arenas, up to 8 per core. A micro-batch's
//! Arrow buffers are allocated by one thread (a reader task, a DataFusion task) and
//! freed by another, and memory freed in an arena is kept by that arena: after a
//! batch of a few hundred MB the process holds several arenas' worth of free memory
//! that the next flow cannot reuse. On flights x10 the demo pipeline peaked at
//! 3,130 MiB with glibc's defaults and at 1,416 MiB with the settings below (medians
//! of 3; BENCHMARKS.md, "Demo pipeline memory").
//!
//! glibc reads its settings once, from the environment, before `main`; weir cannot set
//! them for itself without `unsafe` code (`mallopt`). So the binary starts itself again
//! with `MALLOC_ARENA_MAX=1` (and fixed mmap and trim thresholds, [`FIXED_THRESHOLDS`],
//! each unless set) when the environment sets neither `MALLOC_ARENA_MAX` nor
//! `MALLOC_MMAP_THRESHOLD_`: same arguments, same process id (`exec`), the rest of the
//! environment unchanged. When the user sets either (e.g. `MALLOC_ARENA_MAX=8`), weir
//! sets nothing. (mimalloc as the global allocator was measured too: 1,687 MiB, and
//! slower in silver. So was jemalloc, tikv-jemallocator 0.7, on 2026-12-03: with its
//! default decay the 3-hop latency median fell from ~450 to 244 ms, but the demo
//! pipeline peaked at 2.36 GB and took 18.4 s instead of 12.3 s; with
//! `dirty_decay_ms:0,muzzy_decay_ms:0` the peak matched the one arena's, 1,432 MiB, and
//! the latency median was 274 ms, but the bronze ingest took 30% longer, 2.1 s of it in
//! `madvise`. BENCHMARKS.md, "Multi-hop latency".)

/// The environment variable glibc reads its arena limit from.
pub const ARENA_MAX: &str = "MALLOC_ARENA_MAX";
/// The environment variable glibc reads its mmap threshold from (a user's own tuning).
pub const MMAP_THRESHOLD: &str = "MALLOC_MMAP_THRESHOLD_";
/// The environment variable glibc reads its trim threshold from.
pub const TRIM_THRESHOLD: &str = "MALLOC_TRIM_THRESHOLD_";

/// The thresholds weir starts with (each unless the environment sets it): 32 MiB each.
///
/// glibc's defaults adapt: an allocation over the mmap threshold (128 KiB at first) is
/// mapped and unmapped on its own, the threshold rising to the size of each such block
/// freed (up to 32 MiB), and the heap's free top is given back to the kernel past twice
/// that. A streamed bronze batch allocates blocks of 1-5 MiB per file (the CSV
/// decoder's buffers, Parquet's pages and upload parts) and frees them a few ms later,
/// so the heap's top went back and forth: 60 K page faults a run of flights x10, the
/// kernel zeroing each page again, 0.3 s of system CPU. With both fixed at 32 MiB: 19 K
/// faults, 0.17 s, the run ~4% faster (8 pairs); the demo pipeline's peak 1,385-1,437
/// MiB (silver's, 3 runs; 1,383-1,437 before; at most 32 MiB more of free heap is
/// kept).
/// BENCHMARKS.md, "Bronze ingest: the batch boundaries".
pub const FIXED_THRESHOLDS: [(&str, &str); 2] =
    [(MMAP_THRESHOLD, "33554432"), (TRIM_THRESHOLD, "33554432")];

/// Re-executes the current program with `MALLOC_ARENA_MAX=1` and
/// [`FIXED_THRESHOLDS`] unless `MALLOC_ARENA_MAX` or `MALLOC_MMAP_THRESHOLD_` is set
/// (call it first thing in `main`, before any thread starts). Returns only when nothing was done: not glibc,
/// a variable is set, or the `exec` failed (the program then runs on with glibc's
/// defaults).
pub fn use_one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if std::env::var_os(ARENA_MAX).is_some() || std::env::var_os(MMAP_THRESHOLD).is_some() {
            return;
        }
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut args = std::env::args_os();
        let mut command = std::process::Command::new(exe);
        if let Some(arg0) = args.next() {
            command.arg0(arg0);
        }
        command.args(args).env(ARENA_MAX, "1");
        for (name, value) in FIXED_THRESHOLDS {
            if std::env::var_os(name).is_none() {
                command.env(name, value);
            }
        }
        // `exec` only returns on failure.
        let error = command.exec();
        eprintln!(
            "note: could not restart with {ARENA_MAX}=1 ({error}); running with glibc's default malloc arenas"
        );
    }
}
