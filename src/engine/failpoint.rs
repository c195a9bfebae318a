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

use std::sync::OnceLock;

/// The steps of the batch protocol that can be crashed at.
pub const FAILPOINTS: [&str; 5] = [
    "after_offsets",
    "after_read",
    "after_sink_commit",
    "after_state",
    "before_commit",
];

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
        Some(a) if !FAILPOINTS.contains(&a.name.as_str()) => Err(format!(
            "WEIR_FAILPOINT={:?} is not a failpoint; allowed: {}",
            a.name,
            FAILPOINTS.join(", ")
        )),
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
