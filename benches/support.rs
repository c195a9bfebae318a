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

/// What [`measured_cpu`] reports of one command.
pub struct Measured {
    /// Wall time, seconds.
    pub secs: f64,
    /// Peak RSS, KiB.
    pub max_rss_kib: u64,
    /// CPU time (user + system) of the command and its children, seconds.
    pub cpu_s: f64,
    pub stdout: Vec<u8>,
}

/// Runs `cmd` as a child of a fresh process so getrusage(RUSAGE_CHILDREN) is this
/// child's alone; returns (seconds, max RSS in KiB, stdout).
pub fn measured(cmd: &mut std::process::Command) -> (f64, u64, Vec<u8>) {
    let m = measured_cpu(cmd);
    (m.secs, m.max_rss_kib, m.stdout)
}

/// [`measured`] with the command's CPU time too.
pub fn measured_cpu(cmd: &mut std::process::Command) -> Measured {
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
    let cpu_s = stderr
        .lines()
        .find_map(|l| l.strip_prefix("CPU_S "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    Measured {
        secs,
        max_rss_kib: rss,
        cpu_s,
        stdout: out.stdout,
    }
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
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    eprintln!(
        "CPU_S {:.3}",
        secs(usage.user_time()) + secs(usage.system_time())
    );
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
