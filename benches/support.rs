//! What the benchmarks share (`mod support;` in each that needs it; not a bench target
//! itself: `autobenches = false` in Cargo.toml).
//!
//! Peak memory of a measured command: the bench re-runs itself as a wrapper
//! (`--measure CMD ARGS...`) that starts the command, waits for it and prints
//! getrusage(RUSAGE_CHILDREN)'s max RSS, so the figure is that command's alone.

#![allow(dead_code)]

use std::time::Instant;

/// Call first in `main`: in the wrapper process, runs the command and exits.
pub fn measure_mode_if_asked() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--measure") {
        measure_mode(&args[1..]);
    }
}

/// Runs `cmd` as a child of a fresh process so getrusage(RUSAGE_CHILDREN) is this
/// child's alone; returns (seconds, max RSS in KiB, stdout).
pub fn measured(cmd: &mut std::process::Command) -> (f64, u64, Vec<u8>) {
    let start = Instant::now();
    let exe = std::env::current_exe().expect("current exe");
    let mut wrapper = std::process::Command::new(exe);
    wrapper
        .arg("--measure")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            wrapper.env(k, v);
        }
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapper.current_dir(dir);
    }
    let out = wrapper
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("measure");
    let secs = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "benchmarked command failed: {stderr}");
    let rss = stderr
        .lines()
        .find_map(|l| l.strip_prefix("MAXRSS_KIB "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    (secs, rss, out.stdout)
}

/// The wrapper: runs `args[0]` with the rest, prints its peak RSS, exits with its code.
pub fn measure_mode(args: &[String]) -> ! {
    let status = std::process::Command::new(&args[0])
        .args(&args[1..])
        .status()
        .expect("spawn");
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("rusage");
    eprintln!("MAXRSS_KIB {}", usage.max_rss());
    std::process::exit(status.code().unwrap_or(1));
}

/// The median of `v` (the upper one of an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

pub fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
