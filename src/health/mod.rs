//! Health of a flow (DESIGN.md §9): one state out of six, with the evidence
//! that led there.
//!
//! [`classify`] is a pure function of recent progress records, the last error
//! (its kind, [`Domain`] and whether a retry can help), checkpoint problems and
//! the wall clock, so the engine, `weir playbook`, `weir attach` and the
//! console all reach the same verdict from the same facts. The rules, first
//! match wins:
//!
//! ```text
//! checkpoint problem, or error kind checkpoint_corrupt | checkpoint_incompatible -> checkpoint_incompatible
//! error kind schema_changed | schema_mismatch | sink_schema_mismatch            -> schema_mismatch
//! error kind source_unavailable | source_error                                  -> source_unavailable
//! error kind sink_unavailable                                                   -> sink_unavailable
//! rescued rows / input rows over the window > max_rescued_ratio                 -> schema_mismatch
//! over the last `window_batches` records, with files outstanding in each:
//!   backlog grew, or processing rate < input rate, or every batch hit max_files_per_trigger
//!                                                                                -> lagging
//! wall clock - max event time > freshness                                       -> lagging
//! otherwise                                                                      -> healthy
//! ```
//!
//! Errors reach the classifier only after the engine's retries with backoff
//! gave up ([`crate::engine::retry`]): a transient error is not a state.

pub mod tracker;

use std::time::Duration;

use crate::records::{
    BacklogUnit, Domain, ErrorFacts, Evidence, Health, HealthState, StreamingQueryProgress,
};
use crate::spec::HealthConfig;

/// What the classifier looks at.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// Recent progress records, oldest first.
    pub records: &'a [StreamingQueryProgress],
    /// The error that stopped the flow, after retries.
    pub error: Option<&'a ErrorFacts>,
    /// Corrupt, truncated or missing checkpoint files, or an incompatible plan.
    pub checkpoint_problems: &'a [String],
    /// The file the checkpoint problems are about, when they name one.
    pub checkpoint_file: Option<&'a str>,
    pub now_ms: i64,
    pub config: &'a HealthConfig,
}

fn outstanding_files(r: &StreamingQueryProgress) -> Option<u64> {
    r.sources
        .first()
        .and_then(|s| s.metrics.get("numFilesOutstanding"))
        .and_then(|v| v.parse().ok())
}

/// The first source's backlog in its unit ([`crate::records::SourceProgress::backlog`]).
fn backlog_of(r: &StreamingQueryProgress) -> Option<(u64, BacklogUnit)> {
    r.sources.first().and_then(|s| s.backlog())
}

fn outstanding_bytes(r: &StreamingQueryProgress) -> Option<u64> {
    r.sources
        .first()
        .and_then(|s| s.metrics.get("numBytesOutstanding"))
        .and_then(|v| v.parse().ok())
}

fn parse_iso_ms(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Classifies a flow (see the module docs for the rules).
pub fn classify(inputs: Inputs<'_>) -> Health {
    let cfg = inputs.config;
    let last = inputs.records.last();
    let mut evidence = Evidence {
        batch_id: last.map(|r| r.batch_id),
        backlog_files: last.and_then(outstanding_files),
        backlog_bytes: last.and_then(outstanding_bytes),
        backlog: last.and_then(backlog_of).map(|b| b.0),
        backlog_unit: last.and_then(backlog_of).map(|b| b.1),
        ..Default::default()
    };
    if !inputs.checkpoint_problems.is_empty() {
        evidence.reasons = inputs.checkpoint_problems.to_vec();
        evidence.file = inputs.checkpoint_file.map(str::to_string);
        evidence.error = inputs.error.cloned();
        return Health {
            state: HealthState::CheckpointIncompatible,
            evidence,
        };
    }
    if let Some(error) = inputs.error
        && let Some(state) = error.kind.health_state()
    {
        evidence.reasons.push(format!(
            "{} error ({} domain, {}): {}",
            error.kind,
            domain_str(error.domain),
            if error.waiting {
                "waiting for it; nothing was retried or lost"
            } else if error.retryable {
                "retried with backoff, still failing"
            } else {
                "a retry cannot help"
            },
            error.message
        ));
        evidence.file = error.path.clone();
        evidence.error = Some(error.clone());
        return Health { state, evidence };
    }
    if let Some(error) = inputs.error {
        evidence.error = Some(error.clone());
    }

    let n = cfg.window_batches.max(1);
    let window = &inputs.records[inputs.records.len().saturating_sub(n)..];
    if let (Some(first), Some(last)) = (window.first(), window.last()) {
        evidence.window_batches = Some(window.len());
        evidence.batches = Some((first.batch_id, last.batch_id));
        let mean = |f: fn(&StreamingQueryProgress) -> f64| {
            window.iter().map(f).sum::<f64>() / window.len() as f64
        };
        let input_rate = mean(|r| r.input_rows_per_second);
        let processed_rate = mean(|r| r.processed_rows_per_second);
        evidence.input_rows_per_second = Some(input_rate);
        evidence.processed_rows_per_second = Some(processed_rate);

        // Schema: most rows of the window did not fit the schema.
        let input_rows: u64 = window.iter().map(|r| r.num_input_rows).sum();
        let rescued: u64 = window.iter().map(|r| r.weir.num_rows_rescued).sum();
        if input_rows > 0 && rescued as f64 / input_rows as f64 > cfg.max_rescued_ratio {
            evidence.rescued_rows = Some(rescued);
            evidence.input_rows = Some(input_rows);
            evidence.reasons.push(format!(
                "{rescued} of {input_rows} input rows ({:.0}%) over the last {} batch(es) went to _rescued_data (threshold {:.0}%)",
                rescued as f64 * 100.0 / input_rows as f64,
                window.len(),
                cfg.max_rescued_ratio * 100.0
            ));
            evidence.file = last.weir.errors.first().map(|e| e.path.clone());
            return Health {
                state: HealthState::SchemaMismatch,
                evidence,
            };
        }

        // Lagging: a backlog (files, Kafka offsets, Delta versions, rate rows: the unit of
        // the last record) after every batch of a full window.
        let unit = evidence.backlog_unit.unwrap_or(BacklogUnit::Files);
        let backlog: Vec<Option<u64>> = window
            .iter()
            .map(|r| backlog_of(r).filter(|b| b.1 == unit).map(|b| b.0))
            .collect();
        let full = window.len() >= n && n >= 2;
        if full && backlog.iter().all(|b| b.is_some_and(|b| b > 0)) {
            let b: Vec<u64> = backlog.iter().flatten().copied().collect();
            let (b0, b1) = (b[0], b[b.len() - 1]);
            evidence.backlog_start = Some(b0);
            if unit == BacklogUnit::Files {
                evidence.backlog_files_start = Some(b0);
            }
            let files: u64 = window.iter().map(|r| r.weir.num_files).sum();
            let files_per_batch = files as f64 / window.len() as f64;
            evidence.files_per_batch = Some(files_per_batch);
            evidence.max_files_per_trigger = cfg.max_files_per_trigger;
            evidence.catch_up_secs = catch_up_secs(window, b0, b1);
            let grew = b1 > b0 && b.windows(2).all(|w| w[1] >= w[0]);
            let slower = input_rate > 0.0
                && window.iter().all(|r| {
                    r.processed_rows_per_second
                        < r.input_rows_per_second * (1.0 - cfg.rate_tolerance)
                });
            let capped = unit == BacklogUnit::Files
                && cfg
                    .max_files_per_trigger
                    .is_some_and(|cap| window.iter().all(|r| r.weir.num_files >= cap));
            if grew {
                let noun = match unit {
                    BacklogUnit::Files => "file(s)",
                    BacklogUnit::Offsets => "Kafka offsets behind the latest",
                    BacklogUnit::Versions => "Delta versions behind",
                    BacklogUnit::Rows => "rows behind the rate source",
                };
                evidence.reasons.push(format!(
                    "backlog grew from {b0} to {b1} {noun} over the last {} batches",
                    window.len()
                ));
            }
            if slower {
                evidence.reasons.push(format!(
                    "processing rate {processed_rate:.1} rows/s below input rate {input_rate:.1} rows/s in each of the last {} batches",
                    window.len()
                ));
            }
            if capped && let Some(cap) = cfg.max_files_per_trigger {
                evidence.reasons.push(format!(
                    "each of the last {} batches took max_files_per_trigger = {cap} file(s) and left {b1} file(s) outstanding",
                    window.len()
                ));
            }
            if grew || slower || capped {
                return Health {
                    state: HealthState::Lagging,
                    evidence,
                };
            }
        }
    }

    // Freshness: the newest event time seen is older than the target.
    if let Some(freshness) = cfg.freshness {
        let freshness_ms = i64::try_from(freshness.as_millis()).unwrap_or(i64::MAX);
        // The newest event time seen; without one (no-data batches), the watermark.
        let max_event = inputs
            .records
            .iter()
            .rev()
            .find_map(|r| r.event_time.get("max").and_then(|t| parse_iso_ms(t)))
            .or_else(|| {
                inputs.records.iter().rev().find_map(|r| {
                    r.event_time
                        .get("watermark")
                        .and_then(|t| parse_iso_ms(t))
                        .filter(|w| *w > 0)
                })
            });
        if let Some(max_event) = max_event {
            let delay = inputs.now_ms - max_event;
            evidence.event_time_delay_ms = Some(delay);
            evidence.freshness_ms = Some(freshness_ms);
            if delay > freshness_ms {
                evidence.reasons.push(format!(
                    "event-time delay {} (wall clock - max event time) above the freshness target {}",
                    human_ms(delay),
                    human_ms(freshness_ms)
                ));
                return Health {
                    state: HealthState::Lagging,
                    evidence,
                };
            }
        }
    }
    // A note, not a state: an expectation failing many more rows than it did.
    let n = cfg.window_batches.max(1);
    let window = &inputs.records[inputs.records.len().saturating_sub(n)..];
    evidence.reasons.extend(expectation_jumps(window));
    Health {
        state: HealthState::Healthy,
        evidence,
    }
}

/// The expectations whose share of failed rows in the window's last batch is at least
/// twice, and 5 points above, their share over the batches before it (docs/health.md,
/// "Expectations"): one line each, naming the expectation, the batch and both shares.
pub fn expectation_jumps(window: &[StreamingQueryProgress]) -> Vec<String> {
    let Some((last, before)) = window.split_last() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in &last.weir.expectations {
        let total = e.passed_records + e.failed_records;
        let (failed, checked) = before
            .iter()
            .flat_map(|r| r.weir.expectations.iter().filter(|x| x.name == e.name))
            .fold((0u64, 0u64), |(f, t), x| {
                (
                    f + x.failed_records,
                    t + x.passed_records + x.failed_records,
                )
            });
        if total == 0 || checked == 0 {
            continue;
        }
        let now = e.failed_records as f64 / total as f64;
        let then = failed as f64 / checked as f64;
        if now >= 2.0 * then && now - then >= 0.05 {
            out.push(format!(
                "expectation {}: {:.1}% of rows failed in batch {}, up from {:.1}% over the {} batch(es) before it",
                e.name,
                now * 100.0,
                last.batch_id,
                then * 100.0,
                before.len()
            ));
        }
    }
    out
}

/// Seconds to drain `b1` files at the rate the window drained them; `None` when not draining.
fn catch_up_secs(window: &[StreamingQueryProgress], b0: u64, b1: u64) -> Option<f64> {
    if b1 == 0 {
        return Some(0.0);
    }
    let (first, last) = (window.first()?, window.last()?);
    let t0 = parse_iso_ms(&first.timestamp)?;
    let t1 = parse_iso_ms(&last.timestamp)? + last.batch_duration as i64;
    let secs = (t1 - t0) as f64 / 1000.0;
    if b0 <= b1 || secs <= 0.0 {
        return None;
    }
    let per_sec = (b0 - b1) as f64 / secs;
    Some(b1 as f64 / per_sec)
}

pub fn domain_str(d: Domain) -> &'static str {
    match d {
        Domain::User => "user",
        Domain::External => "external",
        Domain::Internal => "internal",
    }
}

/// `90000` -> `"1m 30s"`.
pub fn human_ms(ms: i64) -> String {
    let d = Duration::from_millis(ms.unsigned_abs());
    let secs = d.as_secs();
    let text = if secs == 0 {
        format!("{}ms", d.as_millis())
    } else {
        humantime::format_duration(Duration::from_secs(secs)).to_string()
    };
    if ms < 0 { format!("-{text}") } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ErrorKind;
    use crate::records::SourceProgress;

    fn record(
        batch_id: u64,
        backlog: u64,
        files: u64,
        input: f64,
        processed: f64,
    ) -> StreamingQueryProgress {
        let mut r = StreamingQueryProgress {
            batch_id,
            num_input_rows: 100,
            input_rows_per_second: input,
            processed_rows_per_second: processed,
            timestamp: crate::records::iso_millis(1_700_000_000_000 + batch_id as i64 * 1000),
            batch_duration: 500,
            ..Default::default()
        };
        let mut s = SourceProgress::default();
        s.metrics
            .insert("numFilesOutstanding".into(), backlog.to_string());
        s.metrics
            .insert("numBytesOutstanding".into(), (backlog * 10).to_string());
        r.sources.push(s);
        r.weir.num_files = files;
        r
    }

    /// A healthy flow whose expectation fails many more rows in its last batch than
    /// before gets a note naming it; a steady rate, or a small rise, does not.
    #[test]
    fn an_expectation_failing_many_more_rows_is_noted() {
        let with = |batch_id, failed| {
            let mut r = record(batch_id, 0, 1, 10.0, 10.0);
            r.weir
                .expectations
                .push(crate::records::ExpectationProgress {
                    name: "has_dep_time".into(),
                    dataset: "bronze".into(),
                    passed_records: 100 - failed,
                    failed_records: failed,
                });
            r
        };
        let cfg = HealthConfig::default();
        let steady = [with(0, 1), with(1, 2), with(2, 2)];
        assert!(run(&steady, None, &cfg).evidence.reasons.is_empty());
        let jump = [with(0, 1), with(1, 1), with(2, 30)];
        let h = run(&jump, None, &cfg);
        assert_eq!(h.state, HealthState::Healthy);
        assert_eq!(
            h.evidence.reasons,
            [
                "expectation has_dep_time: 30.0% of rows failed in batch 2, up from 1.0% over the 2 batch(es) before it"
            ]
        );
    }

    fn run(
        records: &[StreamingQueryProgress],
        error: Option<&ErrorFacts>,
        cfg: &HealthConfig,
    ) -> Health {
        classify(Inputs {
            records,
            error,
            checkpoint_problems: &[],
            checkpoint_file: None,
            now_ms: 1_700_000_100_000,
            config: cfg,
        })
    }

    fn err(kind: &str, retryable: bool) -> ErrorFacts {
        ErrorFacts {
            kind: kind.into(),
            domain: Domain::External,
            retryable,
            message: format!("{kind} at /data/x: boom"),
            path: Some("/data/x".into()),
            waiting: false,
        }
    }

    #[test]
    fn healthy_when_the_backlog_drains() {
        let recs: Vec<_> = (0..5).map(|i| record(i, 0, 3, 100.0, 400.0)).collect();
        let h = run(&recs, None, &HealthConfig::default());
        assert_eq!(h.state, HealthState::Healthy);
        assert_eq!(h.evidence.window_batches, Some(5));
        assert_eq!(h.evidence.backlog_files, Some(0));
        assert!(h.evidence.reasons.is_empty());
    }

    #[test]
    fn lagging_when_the_backlog_grows_over_the_window() {
        let recs: Vec<_> = (0..6)
            .map(|i| record(i, 10 + i * 2, 3, 100.0, 400.0))
            .collect();
        let h = run(&recs, None, &HealthConfig::default());
        assert_eq!(h.state, HealthState::Lagging);
        assert_eq!(h.evidence.batches, Some((1, 5)));
        assert_eq!(h.evidence.backlog_files_start, Some(12));
        assert_eq!(h.evidence.backlog_files, Some(20));
        assert_eq!(
            h.evidence.catch_up_secs, None,
            "a growing backlog never drains"
        );
        assert!(
            h.evidence.reasons[0]
                .contains("backlog grew from 12 to 20 file(s) over the last 5 batches")
        );
    }

    #[test]
    fn lagging_on_kafka_offsets_or_delta_versions_behind() {
        // A Spark Kafka source: no files, offsets behind the latest growing.
        let with = |i: u64, metric: &str, v: u64| {
            let mut r = record(i, 0, 0, 100.0, 400.0);
            r.sources[0].metrics.clear();
            r.sources[0].metrics.insert(metric.into(), v.to_string());
            r
        };
        let recs: Vec<_> = (0..6)
            .map(|i| with(i, "numOffsetsBehindLatest", 1000 + i * 500))
            .collect();
        let h = run(&recs, None, &HealthConfig::default());
        assert_eq!(h.state, HealthState::Lagging);
        assert_eq!(h.evidence.backlog, Some(3500));
        assert_eq!(h.evidence.backlog_start, Some(1500));
        assert_eq!(h.evidence.backlog_unit, Some(BacklogUnit::Offsets));
        assert_eq!(h.evidence.backlog_files, None);
        assert!(
            h.evidence.reasons[0].contains(
                "backlog grew from 1500 to 3500 Kafka offsets behind the latest over the last 5 batches"
            ),
            "{:?}",
            h.evidence.reasons
        );
        // Delta versions behind, draining: healthy, with the backlog as evidence.
        let recs: Vec<_> = (0..6)
            .map(|i| with(i, "numVersionsBehind", 10 - i))
            .collect();
        let h = run(&recs, None, &HealthConfig::default());
        assert_eq!(h.state, HealthState::Healthy);
        assert_eq!(h.evidence.backlog, Some(5));
        assert_eq!(h.evidence.backlog_unit, Some(BacklogUnit::Versions));
        // Files win over the other units when a source reports both (weir's Delta source).
        let mut r = with(0, "numVersionsBehind", 3);
        r.sources[0]
            .metrics
            .insert("numFilesOutstanding".into(), "7".into());
        assert_eq!(r.sources[0].backlog(), Some((7, BacklogUnit::Files)));
    }

    #[test]
    fn lagging_when_processing_is_slower_than_input() {
        let recs: Vec<_> = (0..5).map(|i| record(i, 5, 3, 1000.0, 500.0)).collect();
        let h = run(&recs, None, &HealthConfig::default());
        assert_eq!(h.state, HealthState::Lagging);
        assert_eq!(h.evidence.input_rows_per_second, Some(1000.0));
        assert!(
            h.evidence.reasons[0]
                .contains("processing rate 500.0 rows/s below input rate 1000.0 rows/s")
        );
    }

    #[test]
    fn lagging_when_capped_by_max_files_per_trigger_with_catch_up_estimate() {
        let recs: Vec<_> = (0..5).map(|i| record(i, 40 - i, 1, 100.0, 400.0)).collect();
        let cfg = HealthConfig {
            max_files_per_trigger: Some(1),
            ..Default::default()
        };
        let h = run(&recs, None, &cfg);
        assert_eq!(h.state, HealthState::Lagging);
        // 4 files drained in 4.5 s; 36 left -> 40.5 s.
        let eta = h.evidence.catch_up_secs.unwrap();
        assert!((eta - 40.5).abs() < 0.01, "{eta}");
        // Without the cap the same numbers are a draining backlog: healthy.
        assert_eq!(
            run(&recs, None, &HealthConfig::default()).state,
            HealthState::Healthy
        );
        // A window shorter than configured does not decide.
        assert_eq!(run(&recs[..3], None, &cfg).state, HealthState::Healthy);
    }

    #[test]
    fn lagging_when_event_time_is_older_than_the_freshness_target() {
        let mut recs: Vec<_> = (0..2).map(|i| record(i, 0, 1, 10.0, 100.0)).collect();
        recs[1].event_time.insert(
            "max".into(),
            crate::records::iso_millis(1_700_000_100_000 - 20 * 60_000),
        );
        let cfg = HealthConfig {
            freshness: Some(Duration::from_secs(15 * 60)),
            ..Default::default()
        };
        let h = run(&recs, None, &cfg);
        assert_eq!(h.state, HealthState::Lagging);
        assert_eq!(h.evidence.event_time_delay_ms, Some(20 * 60_000));
        assert_eq!(h.evidence.freshness_ms, Some(15 * 60_000));
        let fresh = HealthConfig {
            freshness: Some(Duration::from_secs(30 * 60)),
            ..Default::default()
        };
        assert_eq!(run(&recs, None, &fresh).state, HealthState::Healthy);
        // Without a max event time (no-data batches) the watermark stands in.
        recs[1].event_time.clear();
        recs[1].event_time.insert(
            "watermark".into(),
            crate::records::iso_millis(1_700_000_100_000 - 40 * 60_000),
        );
        let h = run(&recs, None, &fresh);
        assert_eq!(h.state, HealthState::Lagging);
        assert_eq!(h.evidence.event_time_delay_ms, Some(40 * 60_000));
    }

    #[test]
    fn source_unavailable_from_a_source_error() {
        let e = err("source_unavailable", true);
        let h = run(&[], Some(&e), &HealthConfig::default());
        assert_eq!(h.state, HealthState::SourceUnavailable);
        assert_eq!(h.evidence.file.as_deref(), Some("/data/x"));
        assert!(h.evidence.reasons[0].contains("external domain, retried with backoff"));
    }

    #[test]
    fn a_wait_for_the_source_says_so_not_that_retries_failed() {
        let e = ErrorFacts {
            waiting: true,
            ..err("source_unavailable", true)
        };
        let h = run(&[], Some(&e), &HealthConfig::default());
        assert_eq!(h.state, HealthState::SourceUnavailable);
        assert!(h.evidence.reasons[0].contains("waiting for it; nothing was retried or lost"));
        assert!(!h.evidence.reasons[0].contains("retried with backoff"));
    }

    #[test]
    fn sink_unavailable_from_a_sink_error() {
        let e = err("sink_unavailable", true);
        let recs = vec![record(7, 0, 1, 1.0, 1.0)];
        let h = run(&recs, Some(&e), &HealthConfig::default());
        assert_eq!(h.state, HealthState::SinkUnavailable);
        assert_eq!(h.evidence.batch_id, Some(7));
        assert_eq!(
            h.evidence.error.as_ref().unwrap().kind,
            ErrorKind::SinkUnavailable
        );
    }

    #[test]
    fn checkpoint_incompatible_from_problems_or_errors() {
        let problems = vec!["checkpoint /c/offsets/3: truncated".to_string()];
        let h = classify(Inputs {
            records: &[],
            error: None,
            checkpoint_problems: &problems,
            checkpoint_file: Some("/c/offsets/3"),
            now_ms: 0,
            config: &HealthConfig::default(),
        });
        assert_eq!(h.state, HealthState::CheckpointIncompatible);
        assert_eq!(h.evidence.file.as_deref(), Some("/c/offsets/3"));
        let e = err("checkpoint_incompatible", false);
        let h = run(&[], Some(&e), &HealthConfig::default());
        assert_eq!(h.state, HealthState::CheckpointIncompatible);
        assert!(h.evidence.reasons[0].contains("a retry cannot help"));
    }

    #[test]
    fn schema_mismatch_from_errors_and_rescued_rows() {
        for kind in ["schema_changed", "schema_mismatch", "sink_schema_mismatch"] {
            let h = run(&[], Some(&err(kind, false)), &HealthConfig::default());
            assert_eq!(h.state, HealthState::SchemaMismatch, "{kind}");
        }
        let mut recs: Vec<_> = (0..3).map(|i| record(i, 0, 1, 1.0, 1.0)).collect();
        for r in &mut recs {
            r.weir.num_rows_rescued = 80;
        }
        let h = run(&recs, None, &HealthConfig::default());
        assert_eq!(h.state, HealthState::SchemaMismatch);
        assert_eq!(h.evidence.rescued_rows, Some(240));
        assert_eq!(h.evidence.input_rows, Some(300));
    }

    #[test]
    fn errors_without_a_playbook_keep_the_progress_verdict() {
        let e = err("checkpoint_locked", false);
        let h = run(
            &[record(0, 0, 1, 1.0, 1.0)],
            Some(&e),
            &HealthConfig::default(),
        );
        assert_eq!(h.state, HealthState::Healthy);
        assert_eq!(
            h.evidence.error.as_ref().unwrap().kind,
            ErrorKind::CheckpointLocked
        );
    }

    #[test]
    fn states_round_trip_through_their_names() {
        for s in HealthState::ALL {
            assert_eq!(HealthState::parse(s.as_str()), Some(s));
        }
        assert_eq!(
            HealthState::parse("source-unavailable"),
            Some(HealthState::SourceUnavailable)
        );
        assert_eq!(HealthState::parse("sick"), None);
    }
}
