//! `weir check`: whether a flow can restart from its checkpoint. The static and sink
//! checks of `checkpoint::compat` (what the engine refuses at start), then the stateful
//! check: the flow planned as the engine plans it (`engine::plan`) against its saved
//! state, read-only.

use serde::Serialize;

use crate::checkpoint::Checkpoint;
use crate::checkpoint::compat::{check_sink, check_static};
use crate::error::{Error, Result};
use crate::spec::{FlowSpec, SourceSpec};

/// `weir check`'s answer for one flow.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Verdict {
    pub flow: String,
    pub checkpoint: std::path::PathBuf,
    pub compatible: bool,
    /// Why not (empty when compatible).
    pub reasons: Vec<String>,
    /// The first file a reason is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<std::path::PathBuf>,
    /// Worth knowing, not blocking.
    pub notes: Vec<String>,
    /// The playbook to follow when incompatible.
    pub playbook: Option<String>,
}

/// The stateful check: plans the flow as the engine does at start
/// (`engine::plan::plan_operator`), over the schemas its sources have without running
/// them (a files source's given or recorded schema, a Delta table's current one), with
/// the operator built against its saved state, read-only.
async fn check_state(spec: &FlowSpec, cp: &Checkpoint) -> Option<Error> {
    if !spec.stateful.is_stateful() && spec.stream_join.is_none() {
        return None;
    }
    let last_commit = cp.latest_commit().ok().flatten().map(|(id, _)| id)?;
    let mut schemas = Vec::new();
    for (index, source) in spec.sources().into_iter().enumerate() {
        let location = match source {
            SourceSpec::Files(options) => Some(crate::engine::input::files::schema_location(
                options, index, cp,
            )),
            SourceSpec::Delta(_) | SourceSpec::Kafka(_) => None,
        };
        match crate::engine::plan::known_batch_schema(source, location.as_deref()).await {
            Ok(Some(schema)) => schemas.push(schema),
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
    let state = crate::engine::plan::StateAt::of(cp, Some(last_commit));
    crate::engine::plan::plan_operator(spec, &schemas, &state)
        .await
        .err()
}

/// Everything `weir check` looks at, for one flow.
pub async fn check(spec: &FlowSpec) -> Result<Verdict> {
    let cp = Checkpoint::at(&spec.checkpoint);
    let (mut reasons, mut notes) = check_static(spec, &cp)?;
    if reasons.is_empty()
        && let Some(e) = check_state(spec, &cp).await
    {
        reasons.error(&e);
    }
    if reasons.is_empty() && cp.exists() {
        reasons.extend(check_sink(spec, &cp).await);
    }
    if !cp.exists() {
        notes.push("no checkpoint yet: the flow starts from the beginning of its source".into());
    }
    let compatible = reasons.is_empty();
    Ok(Verdict {
        flow: spec.name.clone(),
        checkpoint: spec.checkpoint.clone(),
        compatible,
        reasons: reasons.reasons,
        file: reasons.file,
        notes,
        playbook: (!compatible).then(|| "checkpoint_incompatible".to_string()),
    })
}
