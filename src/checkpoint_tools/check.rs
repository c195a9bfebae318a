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

/// How long `weir check` waits for a Kafka cluster.
const KAFKA_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A Kafka source's offsets a restart starts from: the last committed batch's end
/// offsets, or before the first commit the initial offsets (`sources/<i>/0`).
fn kafka_restart_offsets(
    cp: &Checkpoint,
    index: usize,
) -> Option<(String, crate::source::kafka::KafkaSourceOffset)> {
    match cp.latest_commit().ok().flatten() {
        Some((id, _)) => {
            let seq = cp.read_offsets(id).ok()?;
            let v = seq.offsets.get(index).cloned().flatten()?;
            let o = crate::source::kafka::KafkaSourceOffset::from_json(&v).ok()?;
            Some((format!("offsets/{id}"), o))
        }
        None => {
            let path = crate::engine::input::source_dir(cp, index).join("0");
            let o = crate::source::kafka::read_initial_offsets(&path).ok()??;
            Some((format!("sources/{index}/0"), o))
        }
    }
}

/// The Kafka check: what a restart would find gone from the cluster since the
/// checkpoint's offsets (a partition that went away, a topic recreated, offsets
/// deleted by retention). With `fail_on_data_loss` (Spark's default) a loss is a
/// reason (the restart would fail on it), otherwise a note (the restart skips the lost
/// offsets and counts them in progress). An unreachable cluster is a note: the
/// restart asks again.
async fn check_kafka(
    spec: &FlowSpec,
    cp: &Checkpoint,
    reasons: &mut crate::checkpoint::compat::Problems,
    notes: &mut Vec<String>,
) -> bool {
    let mut lost = false;
    for (index, source) in spec.sources().into_iter().enumerate() {
        let SourceSpec::Kafka(k) = source else {
            continue;
        };
        let Some((at, offsets)) = kafka_restart_offsets(cp, index) else {
            continue;
        };
        let Ok(mut options) = crate::source::kafka::KafkaSourceOptions::from_spec(k) else {
            continue;
        };
        options.connection.request_timeout =
            options.connection.request_timeout.min(KAFKA_CHECK_TIMEOUT);
        let bootstrap = options.connection.bootstrap();
        let fail = options.fail_on_data_loss;
        let Ok(mut kafka) = crate::source::kafka::KafkaSource::new(options) else {
            continue;
        };
        let losses = match kafka.losses_since(&offsets.partitions).await {
            Ok(l) => l,
            Err(e) => {
                notes.push(format!(
                    "kafka {bootstrap}: not checked against the cluster ({e}); the restart checks \
                     the checkpoint's offsets ({at}) again"
                ));
                continue;
            }
        };
        for loss in losses {
            if fail {
                lost = true;
                reasons.push(
                    format!(
                        "kafka {bootstrap}: data loss since {at}: {}; the restart would fail \
                         (fail_on_data_loss = true): set fail_on_data_loss = false to skip the lost \
                         offsets (counted in progress as numOffsetsLost), or start a new checkpoint",
                        loss.message
                    ),
                    Some(&cp.root().join(&at)),
                );
            } else {
                notes.push(format!(
                    "kafka {bootstrap}: data loss since {at}: {}; the restart skips it \
                     (fail_on_data_loss = false)",
                    loss.message
                ));
            }
        }
    }
    lost
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
    // Only a checkpoint that is otherwise fine is checked against the cluster.
    let data_loss =
        reasons.is_empty() && cp.exists() && check_kafka(spec, &cp, &mut reasons, &mut notes).await;
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
        // Lost Kafka offsets: the source's playbook (fail_on_data_loss, a new start).
        playbook: (!compatible).then(|| {
            if data_loss {
                "source_unavailable".to_string()
            } else {
                "checkpoint_incompatible".to_string()
            }
        }),
    })
}
