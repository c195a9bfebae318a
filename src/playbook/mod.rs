//! Playbooks: `playbooks/<state>.md`, compiled into the binary, with
//! `{{placeholder}}`s bound to a flow's live evidence.
//!
//! A playbook is markdown with fixed sections (what it means, live evidence,
//! safe first checks, actions least to most invasive, escalate). Lines starting
//! with `- [ ]` are steps the console lets the engineer check off. Placeholders
//! ([`PLACEHOLDERS`]) are filled from a [`Health`] verdict and the flow's paths;
//! an unknown value renders as `n/a`, never as the raw placeholder.

use std::collections::BTreeMap;
use std::path::Path;

use crate::health::{domain_str, human_ms};
use crate::records::{BacklogUnit, Health, HealthState};

/// The markdown of a state's playbook.
pub fn text(state: HealthState) -> &'static str {
    match state {
        HealthState::Healthy => include_str!("../../playbooks/healthy.md"),
        HealthState::Lagging => include_str!("../../playbooks/lagging.md"),
        HealthState::SourceUnavailable => include_str!("../../playbooks/source_unavailable.md"),
        HealthState::SinkUnavailable => include_str!("../../playbooks/sink_unavailable.md"),
        HealthState::CheckpointIncompatible => {
            include_str!("../../playbooks/checkpoint_incompatible.md")
        }
        HealthState::SchemaMismatch => include_str!("../../playbooks/schema_mismatch.md"),
    }
}

/// The markdown of a state's playbook for an Apache Spark query (`weir attach --spark`):
/// the same sections, with Spark's options and commands where the remedy differs.
pub fn spark_text(state: HealthState) -> &'static str {
    match state {
        HealthState::Healthy => include_str!("../../playbooks/spark/healthy.md"),
        HealthState::Lagging => include_str!("../../playbooks/spark/lagging.md"),
        HealthState::SourceUnavailable => {
            include_str!("../../playbooks/spark/source_unavailable.md")
        }
        HealthState::SinkUnavailable => include_str!("../../playbooks/spark/sink_unavailable.md"),
        HealthState::CheckpointIncompatible => {
            include_str!("../../playbooks/spark/checkpoint_incompatible.md")
        }
        HealthState::SchemaMismatch => include_str!("../../playbooks/spark/schema_mismatch.md"),
    }
}

/// Every placeholder a playbook may use.
pub const PLACEHOLDERS: &[&str] = &[
    "flow",
    "pipeline",
    "checkpoint",
    "source_path",
    "sink_path",
    "state",
    "reasons",
    "window_batches",
    "batches",
    "backlog_files",
    "backlog_bytes",
    "backlog_files_start",
    "backlog",
    "backlog_start",
    "input_rate",
    "processing_rate",
    "files_per_batch",
    "max_files_per_trigger",
    "catch_up",
    "event_time_delay",
    "freshness",
    "rescued_rows",
    "input_rows",
    "error",
    "error_kind",
    "error_domain",
    "retryable",
    "batch_id",
    "file",
];

/// Where the flow lives (for commands in the playbook).
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub flow: Option<String>,
    pub pipeline: Option<String>,
    pub checkpoint: Option<String>,
    pub source_path: Option<String>,
    pub sink_path: Option<String>,
    /// An Apache Spark query: the Spark playbooks ([`spark_text`]).
    pub spark: bool,
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

impl Context {
    pub fn from_flow(spec: &crate::spec::FlowSpec, pipeline: &Path) -> Self {
        Context {
            flow: Some(spec.name.clone()),
            pipeline: Some(path_str(pipeline)),
            checkpoint: Some(path_str(&spec.checkpoint)),
            source_path: Some(path_str(spec.source.path())),
            sink_path: crate::checkpoint::compat::sink_table(spec).map(path_str),
            spark: false,
        }
    }
}

/// Values of the placeholders for a verdict.
pub fn bindings(health: &Health, cx: &Context) -> BTreeMap<&'static str, String> {
    let e = &health.evidence;
    let mut m = BTreeMap::new();
    let mut put = |k: &'static str, v: Option<String>| {
        if let Some(v) = v {
            m.insert(k, v);
        }
    };
    put("flow", cx.flow.clone());
    put("pipeline", cx.pipeline.clone());
    put("checkpoint", cx.checkpoint.clone());
    put("source_path", cx.source_path.clone());
    put("sink_path", cx.sink_path.clone());
    put("state", Some(health.state.to_string()));
    put(
        "reasons",
        (!e.reasons.is_empty()).then(|| e.reasons.join("; ")),
    );
    put("window_batches", e.window_batches.map(|w| w.to_string()));
    put(
        "batches",
        e.batches.map(|(a, b)| format!("batches {a}..={b}")),
    );
    put("backlog_files", e.backlog_files.map(|v| v.to_string()));
    put(
        "backlog_bytes",
        e.backlog_bytes
            .map(|v| bytesize::ByteSize(v).display().si().to_string()),
    );
    put(
        "backlog_files_start",
        e.backlog_files_start.map(|v| v.to_string()),
    );
    // The backlog in its unit: `12 files / 3.4 MB`, `420 Kafka offsets`, `23 Delta versions`.
    let in_unit = |n: u64| {
        Some(match e.backlog_unit {
            None | Some(BacklogUnit::Files) => format!("{n} file(s)"),
            Some(BacklogUnit::Offsets) => format!("{n} Kafka offsets behind the latest"),
            Some(BacklogUnit::Versions) => format!("{n} Delta versions behind"),
            Some(BacklogUnit::Rows) => format!("{n} rows behind the rate source"),
        })
    };
    put(
        "backlog",
        e.backlog.or(e.backlog_files).and_then(in_unit).map(|t| {
            match (e.backlog_unit, e.backlog_bytes) {
                (None | Some(BacklogUnit::Files), Some(b)) => {
                    format!("{t}, {}", bytesize::ByteSize(b).display().si())
                }
                _ => t,
            }
        }),
    );
    put(
        "backlog_start",
        e.backlog_start.or(e.backlog_files_start).and_then(in_unit),
    );
    put(
        "input_rate",
        e.input_rows_per_second.map(|v| format!("{v:.1} rows/s")),
    );
    put(
        "processing_rate",
        e.processed_rows_per_second
            .map(|v| format!("{v:.1} rows/s")),
    );
    put(
        "files_per_batch",
        e.files_per_batch.map(|v| format!("{v:.1}")),
    );
    put(
        "max_files_per_trigger",
        e.max_files_per_trigger.map(|v| v.to_string()),
    );
    put(
        "catch_up",
        match (e.catch_up_secs, e.backlog.or(e.backlog_files)) {
            (Some(s), _) => Some(format!(
                "{} at current rates",
                human_ms((s * 1000.0) as i64)
            )),
            (None, Some(b))
                if b > 0 && (e.backlog_start.is_some() || e.backlog_files_start.is_some()) =>
            {
                Some("never at current rates".to_string())
            }
            _ => None,
        },
    );
    put("event_time_delay", e.event_time_delay_ms.map(human_ms));
    put("freshness", e.freshness_ms.map(human_ms));
    put("rescued_rows", e.rescued_rows.map(|v| v.to_string()));
    put("input_rows", e.input_rows.map(|v| v.to_string()));
    if let Some(err) = &e.error {
        put("error", Some(err.message.clone()));
        put("error_kind", Some(err.kind.to_string()));
        put("error_domain", Some(domain_str(err.domain).to_string()));
        put(
            "retryable",
            Some(if err.retryable { "yes" } else { "no" }.to_string()),
        );
    }
    put("batch_id", e.batch_id.map(|v| v.to_string()));
    put("file", e.file.clone());
    m
}

/// Replaces every `{{name}}` with its value (`n/a` when unknown).
pub fn fill(template: &str, values: &BTreeMap<&'static str, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let key = after[..end].trim();
                out.push_str(values.get(key).map_or("n/a", String::as_str));
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The playbook of `state` with the evidence of `health` filled in.
pub fn render(state: HealthState, health: &Health, cx: &Context) -> String {
    let template = if cx.spark {
        spark_text(state)
    } else {
        text(state)
    };
    fill(template, &bindings(health, cx))
}

/// The checkable steps of a rendered playbook (`- [ ] ...` lines), in order.
pub fn steps(rendered: &str) -> Vec<String> {
    rendered
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- [ ] "))
        .map(str::to_string)
        .collect()
}

/// A checkpoint action a playbook step names, runnable from the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepAction {
    Backup,
    /// Back to the last committed batch.
    Rollback,
    Reset {
        truncate_target: bool,
    },
}

impl StepAction {
    fn from_command(cmd: &str) -> Option<Self> {
        let cmd = cmd.trim();
        if cmd.starts_with("weir checkpoint backup") && !cmd.contains("--dry-run") {
            Some(StepAction::Backup)
        } else if cmd.starts_with("weir checkpoint rollback") && !cmd.contains("--dry-run") {
            Some(StepAction::Rollback)
        } else if cmd.starts_with("weir checkpoint reset") && !cmd.contains("--dry-run") {
            Some(StepAction::Reset {
                truncate_target: cmd.contains("--truncate-target"),
            })
        } else {
            None
        }
    }
}

/// Per checkable step: the checkpoint action it names (in its own text, or on the
/// `Command:` line of its section), if any.
pub fn step_actions(rendered: &str) -> Vec<Option<StepAction>> {
    let mut out: Vec<Option<StepAction>> = Vec::new();
    let mut in_step = false;
    for line in rendered.lines() {
        let t = line.trim_start();
        if t.starts_with("#") {
            in_step = false;
            continue;
        }
        let is_step = t.starts_with("- [ ] ");
        if is_step {
            out.push(None);
            in_step = true;
        }
        if !in_step {
            continue;
        }
        if let Some(slot) = out.last_mut()
            && slot.is_none()
        {
            *slot = line
                .split('`')
                .skip(1)
                .step_by(2)
                .find_map(StepAction::from_command);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{ErrorFacts, Evidence};

    #[test]
    fn every_playbook_has_the_sections_and_only_known_placeholders() {
        let all = HealthState::ALL
            .iter()
            .map(|s| (*s, text(*s)))
            .chain(HealthState::ALL.iter().map(|s| (*s, spark_text(*s))));
        for (state, t) in all {
            for section in [
                "## What it means",
                "## Live evidence",
                "## Safe first checks",
                "## Actions (least to most invasive)",
                "## Escalate",
            ] {
                assert!(t.contains(section), "{state}: missing {section}");
            }
            let mut rest = t;
            while let Some(i) = rest.find("{{") {
                let end = rest[i..].find("}}").expect("closed placeholder") + i;
                let key = &rest[i + 2..end];
                assert!(
                    PLACEHOLDERS.contains(&key),
                    "{state}: unknown {{{{{key}}}}}"
                );
                rest = &rest[end + 2..];
            }
            assert!(!steps(t).is_empty(), "{state}: no checkable steps");
            if state != HealthState::Healthy {
                for part in ["Changes:", "Command:", "Dry run:", "Verify:"] {
                    assert!(t.contains(part), "{state}: actions need {part}");
                }
            }
        }
    }

    #[test]
    fn kafka_sources_have_their_checks_and_actions() {
        let source = text(HealthState::SourceUnavailable);
        let steps = steps(source);
        assert!(
            steps
                .iter()
                .any(|s| s.contains("Kafka: are the brokers reachable"))
        );
        assert!(steps.iter().any(|s| s.contains("partition gone")));
        assert!(source.contains("`fail_on_data_loss = false`"));
        assert!(source.contains("numOffsetsLost"));
        assert!(text(HealthState::Lagging).contains("max_offsets_per_trigger"));
        assert!(text(HealthState::CheckpointIncompatible).contains("kafka:Subscribe["));
    }

    #[test]
    fn evidence_is_filled_and_unknowns_say_na() {
        let health = Health {
            state: HealthState::Lagging,
            evidence: Evidence {
                reasons: vec!["backlog grew from 3 to 9 file(s) over the last 5 batches".into()],
                window_batches: Some(5),
                batches: Some((10, 14)),
                backlog_files: Some(9),
                backlog_files_start: Some(3),
                input_rows_per_second: Some(1200.0),
                processed_rows_per_second: Some(800.0),
                ..Default::default()
            },
        };
        let cx = Context {
            flow: Some("bronze".into()),
            pipeline: Some("/p/pipeline.toml".into()),
            checkpoint: Some("/p/_checkpoints/bronze".into()),
            ..Default::default()
        };
        let out = render(HealthState::Lagging, &health, &cx);
        assert!(
            out.contains("Backlog: 9 file(s), n/a outstanding (was 3 at the start of the window)")
        );
        assert!(out.contains("Input rate 1200.0 rows/s vs processing rate 800.0 rows/s"));
        assert!(out.contains("Catch-up estimate at current rates: never at current rates"));
        assert!(out.contains("weir run /p/pipeline.toml --flow bronze --trigger available-now"));
        assert!(!out.contains("{{"));
    }

    #[test]
    fn steps_name_their_checkpoint_actions() {
        let cx = Context {
            checkpoint: Some("/c".into()),
            pipeline: Some("/p.toml".into()),
            flow: Some("f".into()),
            ..Default::default()
        };
        let text = render(HealthState::CheckpointIncompatible, &Health::default(), &cx);
        let actions = step_actions(&text);
        assert_eq!(actions.len(), steps(&text).len());
        assert_eq!(
            actions[1],
            Some(StepAction::Backup),
            "safe check 2 backs up"
        );
        assert!(actions.contains(&Some(StepAction::Rollback)));
        assert!(actions.contains(&Some(StepAction::Reset {
            truncate_target: true
        })));
        assert_eq!(actions[0], None);
    }

    #[test]
    fn error_evidence_fills_domain_and_retry() {
        let health = Health {
            state: HealthState::SinkUnavailable,
            evidence: Evidence {
                error: Some(ErrorFacts {
                    kind: crate::records::ErrorKind::SinkUnavailable,
                    domain: crate::error::Domain::External,
                    retryable: true,
                    message: "delta table /t: Not a directory".into(),
                    path: Some("/t".into()),
                    waiting: false,
                }),
                ..Default::default()
            },
        };
        let out = render(HealthState::SinkUnavailable, &health, &Context::default());
        assert!(out.contains("Error kind sink_unavailable, domain external, retry can help: yes"));
    }
}
