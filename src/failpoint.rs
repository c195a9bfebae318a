//! Crash drills: `WEIR_FAILPOINT=<name>[:<batch_id>][@<flow>]` aborts the process
//! (no cleanup, no destructors, like `kill -9`) when the batch protocol reaches
//! the named step, in the given batch or in the first batch that reaches it, of
//! the named flow or of any flow.
//!
//! | name | the process dies after ... |
//! |---|---|
//! | `after_offsets` | `offsets/N` is written (batch planned, nothing read) |
//! | `after_read` | the batch's files are read and their outcomes in the ledger (a streamed batch: its Parquet files written, in no commit) |
//! | `after_sink_commit` | the sink committed batch N (Delta version written) |
//! | `after_state` | state version N is written (stateful flows; stateless: same point as below) |
//! | `before_commit` | everything but `commits/N` |
//!
//! Pauses ([`PAUSES`]) stop the batch instead of the process, until a file appears:
//! `WEIR_FAILPOINT=pause_before_sink_commit[:<batch_id>]` with
//! `WEIR_FAILPOINT_RESUME=<file>` waits, after the batch's Parquet files are written and
//! before the Delta commit that adds them, until `<file>` exists (it writes
//! `<file>.paused` when it starts waiting). A test runs another tool in that window
//! (issue #46: a VACUUM between the write and the commit).

use std::sync::OnceLock;

/// The steps of the batch protocol that can be crashed at.
pub const FAILPOINTS: [&str; 5] = [
    "after_offsets",
    "after_read",
    "after_sink_commit",
    "after_state",
    "before_commit",
];

/// The steps where the batch can be paused (see the module doc).
pub const PAUSES: [&str; 1] = ["pause_before_sink_commit"];

/// The environment variable naming the file whose creation ends a pause.
pub const RESUME_ENV: &str = "WEIR_FAILPOINT_RESUME";

struct Armed {
    name: String,
    batch: Option<u64>,
    flow: Option<String>,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let value = std::env::var("WEIR_FAILPOINT").ok()?;
            let (value, flow) = match value.split_once('@') {
                Some((v, f)) => (v.to_string(), Some(f.to_string())),
                None => (value, None),
            };
            let (name, batch) = match value.split_once(':') {
                Some((n, b)) => (n.to_string(), b.parse().ok()),
                None => (value.clone(), None),
            };
            Some(Armed { name, batch, flow })
        })
        .as_ref()
}

/// Validates `WEIR_FAILPOINT` so a typo does not silently disarm a drill, and says
/// loudly when one is armed: failpoints are in every build (`weir drill` crashes the
/// real binary with them), so a variable left set in a production shell must not go
/// unnoticed. Returns the announcement to print, if armed.
pub fn check_env() -> Result<Option<String>, String> {
    match armed() {
        Some(a) if !FAILPOINTS.contains(&a.name.as_str()) && !PAUSES.contains(&a.name.as_str()) => {
            Err(format!(
                "WEIR_FAILPOINT={:?} is not a failpoint; allowed: {}, {}",
                a.name,
                FAILPOINTS.join(", "),
                PAUSES.join(", ")
            ))
        }
        Some(a) if PAUSES.contains(&a.name.as_str()) && std::env::var_os(RESUME_ENV).is_none() => {
            Err(format!(
                "WEIR_FAILPOINT={} pauses until a file appears: set {RESUME_ENV} to its path",
                a.name
            ))
        }
        Some(a) if PAUSES.contains(&a.name.as_str()) => Ok(Some(format!(
            "WEIR_FAILPOINT is armed: this process pauses at step {} of {} until the file in {RESUME_ENV} exists. \
             This is a test drill; unset WEIR_FAILPOINT for a normal run",
            a.name,
            a.batch
                .map_or_else(|| "every batch".to_string(), |b| format!("batch {b}")),
        ))),
        Some(a) => Ok(Some(format!(
            "WEIR_FAILPOINT is armed: this process aborts (like kill -9) at step {} of {} of {}. \
             This is a crash drill; unset WEIR_FAILPOINT for a normal run",
            a.name,
            a.batch.map_or_else(
                || "the first batch that reaches it".to_string(),
                |b| format!("batch {b}")
            ),
            a.flow
                .as_deref()
                .map_or_else(|| "any flow".to_string(), |f| format!("flow {f}")),
        ))),
        None => Ok(None),
    }
}

/// Aborts the process if the failpoint `name` is armed for `batch_id` of `flow`.
pub fn hit(name: &str, flow: &str, batch_id: u64) {
    if let Some(a) = armed()
        && a.name == name
        && a.batch.is_none_or(|b| b == batch_id)
        && a.flow.as_deref().is_none_or(|f| f == flow)
    {
        eprintln!("weir: failpoint {name} hit in batch {batch_id} of flow {flow}; aborting");
        std::process::abort();
    }
}

/// Pauses the batch if the pause `name` is armed for `batch_id` (any flow): waits until
/// the file named by [`RESUME_ENV`] exists, having written `<file>.paused`.
pub async fn pause(name: &str, batch_id: u64) {
    let Some(a) = armed() else { return };
    if a.name != name || a.batch.is_some_and(|b| b != batch_id) {
        return;
    }
    let Some(resume) = std::env::var_os(RESUME_ENV).map(std::path::PathBuf::from) else {
        return;
    };
    let mut paused = resume.clone().into_os_string();
    paused.push(".paused");
    if let Err(e) = std::fs::write(&paused, batch_id.to_string()) {
        eprintln!("weir: failpoint {name}: cannot write {paused:?}: {e}");
    }
    eprintln!(
        "weir: failpoint {name} paused batch {batch_id}; waiting for {}",
        resume.display()
    );
    while !resume.exists() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
