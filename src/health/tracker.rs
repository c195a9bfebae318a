//! The engine's side of health: keeps the recent records of a flow (also from
//! earlier runs, via `_weir/progress.jsonl`), classifies each new record, and
//! records the latest verdict in `_weir/health.json` so that `weir playbook`,
//! `weir attach` and post-mortems see it after the process is gone.

use std::path::{Path, PathBuf};

use super::{Inputs, classify};
use crate::checkpoint::Checkpoint;
use crate::checkpoint::progress::read_progress;
use crate::durable::write_atomic;
use crate::error::Error;
use crate::records::{
    ErrorFacts, Health, HealthRecord, HealthState, StreamingQueryProgress, iso_millis,
};
use crate::spec::HealthConfig;

pub struct HealthTracker {
    flow: String,
    config: HealthConfig,
    recent: Vec<StreamingQueryProgress>,
    state: Option<HealthState>,
    path: PathBuf,
    last_write_ms: Option<i64>,
}

/// A healthy verdict that did not change is rewritten at most this often (fsyncs cost
/// batch latency); a change of state, and any non-healthy verdict, is written at once.
const REWRITE_HEALTHY_MS: i64 = 10_000;

impl HealthTracker {
    /// Starts from the flow's recorded progress, so windows span restarts.
    pub fn new(flow: &str, config: HealthConfig, checkpoint: &Checkpoint) -> Self {
        let mut recent = read_progress(&checkpoint.progress_path()).unwrap_or_default();
        let keep = config.window_batches.max(1);
        recent.drain(..recent.len().saturating_sub(keep));
        HealthTracker {
            flow: flow.to_string(),
            state: checkpoint.read_health().map(|h| h.health.state),
            config,
            recent,
            path: checkpoint.health_path(),
            last_write_ms: None,
        }
    }

    /// Classifies with `record` as the newest, stores the verdict in it (`weir.health`)
    /// and returns it when the state changed.
    pub fn observe(&mut self, record: &mut StreamingQueryProgress, now_ms: i64) -> Option<Health> {
        self.recent.push(record.clone());
        let keep = self.config.window_batches.max(1);
        self.recent.drain(..self.recent.len().saturating_sub(keep));
        let health = classify(Inputs {
            records: &self.recent,
            error: None,
            checkpoint_problems: &[],
            checkpoint_file: None,
            now_ms,
            config: &self.config,
        });
        record.weir.health = Some(health.clone());
        if let Some(last) = self.recent.last_mut() {
            last.weir.health = Some(health.clone());
        }
        self.settle(health, now_ms)
    }

    /// Classifies the error that stopped the flow (after retries).
    pub fn fail(&mut self, error: &Error, now_ms: i64) -> Health {
        self.classify_error(error, false, now_ms)
    }

    /// Classifies what the flow is waiting for (a landing directory that does not exist
    /// yet): the state of `error`, with evidence that says nothing was retried or lost.
    pub fn wait(&mut self, error: &Error, now_ms: i64) -> Health {
        self.classify_error(error, true, now_ms)
    }

    fn classify_error(&mut self, error: &Error, waiting: bool, now_ms: i64) -> Health {
        let facts = ErrorFacts {
            waiting,
            ..error.facts()
        };
        let problems = match error {
            Error::Checkpoint { .. } | Error::StateIncompatible { .. } => vec![error.to_string()],
            _ => Vec::new(),
        };
        let health = classify(Inputs {
            records: &self.recent,
            error: Some(&facts),
            checkpoint_problems: &problems,
            checkpoint_file: facts.path.as_deref(),
            now_ms,
            config: &self.config,
        });
        let _ = self.settle(health.clone(), now_ms);
        health
    }

    fn settle(&mut self, health: Health, now_ms: i64) -> Option<Health> {
        let changed = self.state != Some(health.state);
        self.state = Some(health.state);
        let stale = self
            .last_write_ms
            .is_none_or(|t| now_ms - t >= REWRITE_HEALTHY_MS);
        if changed || health.state != HealthState::Healthy || stale {
            self.write(&health, now_ms);
            self.last_write_ms = Some(now_ms);
        }
        changed.then_some(health)
    }

    fn write(&self, health: &Health, now_ms: i64) {
        let record = HealthRecord {
            flow: self.flow.clone(),
            at: iso_millis(now_ms),
            health: health.clone(),
        };
        if let Some(dir) = self.path.parent()
            && dir.is_dir()
            && let Ok(text) = serde_json::to_string_pretty(&record)
            && let Err(e) = write_atomic(&self.path, text.as_bytes())
        {
            tracing::warn!(error = %e, "cannot record the flow's health");
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
