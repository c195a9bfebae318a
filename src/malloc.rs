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
//! Likewise glibc serves an allocation of 128 KiB or more with its own `mmap` (given
//! back to the system when freed) only until the first such block is freed: it then
//! raises that threshold up to 32 MiB, and the large Arrow buffers of a batch (a
//! concatenated column, a state table) stay in the arena once freed.
//! `MALLOC_MMAP_THRESHOLD_=131072` keeps the threshold where it starts.
//!
//! glibc reads both once, from the environment, before `main`; weir cannot set them
//! for itself without `unsafe` code (`mallopt`). So the binary starts itself again
//! with `MALLOC_ARENA_MAX=1` and `MALLOC_MMAP_THRESHOLD_=131072` when the environment
//! sets neither: same arguments, same process id (`exec`), the rest of the environment
//! unchanged. When the user sets either (e.g. `MALLOC_ARENA_MAX=8`), weir sets nothing.

/// The environment variable glibc reads its arena limit from.
pub const ARENA_MAX: &str = "MALLOC_ARENA_MAX";
/// The environment variable glibc reads its (then fixed) mmap threshold from, in bytes.
pub const MMAP_THRESHOLD: &str = "MALLOC_MMAP_THRESHOLD_";

/// Re-executes the current program with `MALLOC_ARENA_MAX=1` and
/// `MALLOC_MMAP_THRESHOLD_=131072` unless either is set (call it first thing in
/// `main`, before any thread starts). Returns only when nothing was done: not glibc,
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
        // `exec` only returns on failure.
        let error = command.args(args).env(ARENA_MAX, "1").exec();
        eprintln!(
            "note: could not restart with {ARENA_MAX}=1 ({error}); running with glibc's default malloc arenas"
        );
    }
}
