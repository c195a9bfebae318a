//! The Prometheus endpoint (`weir run --metrics ADDR`, `weir watch --metrics ADDR`):
//! every flow's counters and gauges from its latest snapshot on the board
//! ([`crate::engine::board`]), in the OpenMetrics text format that Prometheus scrapes,
//! encoded by the Prometheus project's `prometheus-client` crate. Names, types, units
//! and labels are listed in docs/operate.md; keep the two in step.
//!
//! A scrape clones the snapshots' `Arc`s and encodes them on the server's own thread
//! ([`server`]): it holds no lock while it writes to the socket, and the engine never
//! waits for it.

pub mod server;

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::engine::board::{AlertStats, DURATION_BUCKETS, FlowSnapshot};
use crate::engine::control::FlowStatus;
use crate::records::{BacklogUnit, HealthState};

/// The `Content-Type` of a scrape's answer.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const STATUSES: [FlowStatus; 7] = [
    FlowStatus::Starting,
    FlowStatus::Running,
    FlowStatus::Idle,
    FlowStatus::Paused,
    FlowStatus::Stopping,
    FlowStatus::Stopped,
    FlowStatus::Failed,
];

/// The snapshots of one scrape, encoded as one collector.
#[derive(Debug)]
struct Scrape {
    flows: Vec<Arc<FlowSnapshot>>,
    alerts: Arc<AlertStats>,
    now_ms: i64,
}

type Value<T> = fn(&FlowSnapshot, i64) -> Option<T>;

fn counter(
    e: &mut DescriptorEncoder<'_>,
    flows: &[Arc<FlowSnapshot>],
    name: &'static str,
    help: &'static str,
    value: fn(&FlowSnapshot) -> u64,
) -> Result<(), std::fmt::Error> {
    if flows.is_empty() {
        return Ok(());
    }
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for f in flows {
        let labels = [("flow", f.flow.as_str())];
        m.encode_family(&labels)?
            .encode_counter::<NoLabelSet, u64, u64>(&value(f), None)?;
    }
    Ok(())
}

/// A figure summed over the stateful operators of the flow's last progress record;
/// `None` for a flow without state.
fn state_total(
    f: &FlowSnapshot,
    figure: impl Fn(&crate::records::StateOperatorProgress) -> f64,
) -> Option<f64> {
    f.last
        .as_ref()
        .filter(|r| !r.state_operators.is_empty())
        .map(|r| r.state_operators.iter().map(figure).sum())
}

fn gauge(
    e: &mut DescriptorEncoder<'_>,
    scrape: &Scrape,
    name: &'static str,
    help: &'static str,
    value: Value<f64>,
) -> Result<(), std::fmt::Error> {
    let values: Vec<(&str, f64)> = scrape
        .flows
        .iter()
        .filter_map(|f| value(f, scrape.now_ms).map(|v| (f.flow.as_str(), v)))
        .collect();
    if values.is_empty() {
        return Ok(());
    }
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (flow, v) in values {
        let labels = [("flow", flow)];
        m.encode_family(&labels)?.encode_gauge(&v)?;
    }
    Ok(())
}

fn backlog_of(f: &FlowSnapshot, unit: BacklogUnit) -> Option<f64> {
    f.backlog()
        .into_iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, n)| n as f64)
}

fn ms_to_s(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let flows = &self.flows;
        counter(
            &mut e,
            flows,
            "weir_flow_batches",
            "Micro-batches the flow committed (this process).",
            |f| f.totals.batches,
        )?;
        counter(
            &mut e,
            flows,
            "weir_flow_input_rows",
            "Rows read by committed batches (numInputRows).",
            |f| f.totals.input_rows,
        )?;
        counter(
            &mut e,
            flows,
            "weir_flow_output_rows",
            "Rows written to the sink by committed batches (sink.numOutputRows).",
            |f| f.totals.output_rows,
        )?;
        counter(
            &mut e,
            flows,
            "weir_flow_input_files",
            "Files read by committed batches.",
            |f| f.totals.files,
        )?;
        counter(
            &mut e,
            flows,
            "weir_flow_input_bytes",
            "Bytes of the files read by committed batches.",
            |f| f.totals.bytes,
        )?;
        counter(
            &mut e,
            flows,
            "weir_flow_rescued_rows",
            "Rows with values in _rescued_data.",
            |f| f.totals.rows_rescued,
        )?;
        counter(
            &mut e,
            flows,
            "weir_flow_corrupt_records",
            "Records that could not be parsed (numRecordsCorrupt).",
            |f| f.totals.records_corrupt,
        )?;
        counter(
            &mut e,
            flows,
            "weir_flow_quarantined_records",
            "Records written to bad_records_path.",
            |f| f.totals.records_quarantined,
        )?;
        counter(
            &mut e,
            flows,
            "weir_flow_failed_files",
            "Files that failed to read (numFilesFailed).",
            |f| f.totals.files_failed,
        )?;
        counter(
            &mut e,
            flows,
            "weir_flow_late_rows",
            "Input rows behind the watermark (numRowsDroppedByWatermark).",
            |f| f.totals.rows_dropped_by_watermark,
        )?;
        counter(
            &mut e,
            flows,
            "weir_flow_expectation_dropped_rows",
            "Rows the drop expectations removed (weir.numRowsDroppedByExpectations).",
            |f| f.totals.rows_dropped_by_expectations,
        )?;
        let expectations: Vec<(&str, &str, u64, u64)> = flows
            .iter()
            .flat_map(|f| {
                f.totals
                    .expectations
                    .iter()
                    .map(|(name, (p, x))| (f.flow.as_str(), name.as_str(), *p, *x))
            })
            .collect();
        for (metric, help, passed) in [
            (
                "weir_flow_expectation_passed_records",
                "Rows that met the expectation (weir.expectations[].passed_records).",
                true,
            ),
            (
                "weir_flow_expectation_failed_records",
                "Rows that violated the expectation: false or NULL (weir.expectations[].failed_records).",
                false,
            ),
        ] {
            if expectations.is_empty() {
                break;
            }
            let mut m = e.encode_descriptor(metric, help, None, MetricType::Counter)?;
            for (flow, name, p, x) in &expectations {
                let labels = [("flow", *flow), ("expectation", *name)];
                m.encode_family(&labels)?
                    .encode_counter::<NoLabelSet, u64, u64>(if passed { p } else { x }, None)?;
            }
        }
        counter(
            &mut e,
            flows,
            "weir_flow_failures",
            "Runs of the flow that stopped on an error (after retries).",
            |f| f.totals.failures,
        )?;

        gauge(
            &mut e,
            self,
            "weir_flow_input_rows_per_second",
            "inputRowsPerSecond of the last batch.",
            |f, _| f.last.as_ref().map(|r| r.input_rows_per_second),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_processed_rows_per_second",
            "processedRowsPerSecond of the last batch.",
            |f, _| f.last.as_ref().map(|r| r.processed_rows_per_second),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_backlog_files",
            "Files listed and not read yet, after the last batch (numFilesOutstanding).",
            |f, _| backlog_of(f, BacklogUnit::Files),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_backlog_bytes",
            "Bytes of the files not read yet, after the last batch (numBytesOutstanding).",
            |f, _| f.backlog_bytes().map(|b| b as f64),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_backlog_offsets",
            "Kafka offsets behind the latest, after the last batch (numOffsetsBehindLatest).",
            |f, _| backlog_of(f, BacklogUnit::Offsets),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_backlog_versions",
            "Delta versions behind, after the last batch (numVersionsBehind).",
            |f, _| backlog_of(f, BacklogUnit::Versions),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_backlog_rows",
            "Rate-source rows behind, after the last batch (numRowsBehindLatest).",
            |f, _| backlog_of(f, BacklogUnit::Rows),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_backlog_seconds",
            "Time the backlog would take at the last batch's pace (+Inf: no progress on it).",
            |f, _| f.backlog_seconds(),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_watermark_timestamp_seconds",
            "The flow's watermark after the last batch, as a Unix time.",
            |f, _| f.watermark_ms().map(ms_to_s),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_watermark_delay_seconds",
            "Wall clock at the scrape minus the flow's watermark.",
            |f, now| f.watermark_ms().map(|w| ms_to_s(now - w)),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_freshness_seconds",
            "Time since the newest row became visible in the flow's table (the end of the last batch that wrote rows).",
            |f, now| f.freshness_ms(now).map(ms_to_s),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_state_rows",
            "Keys held by the flow's stateful operators (numRowsTotal).",
            |f, _| state_total(f, |o| o.num_rows_total as f64),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_state_memory_bytes",
            "Memory of the stateful operators' state (memoryUsedBytes).",
            |f, _| state_total(f, |o| o.memory_used_bytes as f64),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_state_disk_bytes",
            "Bytes on disk of the current state version (stateOnCurrentVersionSizeBytes).",
            |f, _| {
                state_total(f, |o| {
                    o.custom_metrics
                        .get("stateOnCurrentVersionSizeBytes")
                        .map_or(0.0, |b| (*b).max(0) as f64)
                })
            },
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_last_batch_id",
            "The last committed batch id.",
            |f, _| f.last.as_ref().map(|r| r.batch_id as f64),
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_delta_version",
            "The sink table's Delta version after the last batch.",
            |f, _| {
                f.last
                    .as_ref()
                    .and_then(|r| r.weir.delta_version)
                    .map(|v| v as f64)
            },
        )?;
        gauge(
            &mut e,
            self,
            "weir_flow_last_batch_timestamp_seconds",
            "When the last committed batch ended, as a Unix time.",
            |f, _| {
                f.last.as_ref().and_then(|r| {
                    chrono::DateTime::parse_from_rfc3339(&r.timestamp)
                        .ok()
                        .map(|t| ms_to_s(t.timestamp_millis() + r.batch_duration as i64))
                })
            },
        )?;

        // Stage durations of the last batch (Spark's durationMs, in seconds).
        let stages: Vec<(&str, &str, f64)> = flows
            .iter()
            .filter_map(|f| f.last.as_ref().map(|r| (f.flow.as_str(), r)))
            .flat_map(|(flow, r)| {
                r.duration_ms
                    .iter()
                    .map(move |(stage, ms)| (flow, stage.as_str(), *ms as f64 / 1000.0))
            })
            .collect();
        if !stages.is_empty() {
            let mut m = e.encode_descriptor(
                "weir_flow_last_batch_stage_seconds",
                "Time of each stage of the last batch (durationMs: latestOffset, walCommit, getBatch, addBatch, commitOffsets, triggerExecution).",
                None,
                MetricType::Gauge,
            )?;
            for (flow, stage, v) in stages {
                let labels = [("flow", flow), ("stage", stage)];
                m.encode_family(&labels)?.encode_gauge(&v)?;
            }
        }

        // Batch durations: one histogram per flow.
        let timed: Vec<&Arc<FlowSnapshot>> =
            flows.iter().filter(|f| f.durations.count > 0).collect();
        if !timed.is_empty() {
            let mut m = e.encode_descriptor(
                "weir_flow_batch_duration_seconds",
                "Duration of each committed batch (durationMs.triggerExecution).",
                None,
                MetricType::Histogram,
            )?;
            for f in timed {
                let bounds = DURATION_BUCKETS
                    .iter()
                    .copied()
                    .chain(std::iter::once(f64::INFINITY));
                let buckets: Vec<(f64, u64)> =
                    bounds.zip(f.durations.counts.iter().copied()).collect();
                let labels = [("flow", f.flow.as_str())];
                m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                    f.durations.sum_seconds,
                    f.durations.count,
                    &buckets,
                    None,
                )?;
            }
        }

        // Health and status as state gauges: 1 for the current state, 0 for the others.
        let known: Vec<(&str, HealthState)> = flows
            .iter()
            .filter_map(|f| f.health_state().map(|s| (f.flow.as_str(), s)))
            .collect();
        if !known.is_empty() {
            let mut m = e.encode_descriptor(
                "weir_flow_health",
                "The flow's health state (docs/health.md): 1 for the current state, 0 for the others.",
                None,
                MetricType::Gauge,
            )?;
            for (flow, current) in known {
                for state in HealthState::ALL {
                    let labels = [("flow", flow), ("state", state.as_str())];
                    m.encode_family(&labels)?
                        .encode_gauge(&i64::from(state == current))?;
                }
            }
        }
        let statuses: Vec<(&str, FlowStatus)> = flows
            .iter()
            .filter_map(|f| f.status.map(|s| (f.flow.as_str(), s)))
            .collect();
        if !statuses.is_empty() {
            let mut m = e.encode_descriptor(
                "weir_flow_status",
                "Where the flow is in its life: 1 for the current status, 0 for the others.",
                None,
                MetricType::Gauge,
            )?;
            for (flow, current) in statuses {
                for status in STATUSES {
                    let labels = [("flow", flow), ("status", status.label())];
                    m.encode_family(&labels)?
                        .encode_gauge(&i64::from(status == current))?;
                }
            }
        }

        // Alerts (docs/operate.md).
        if !self.alerts.firing.is_empty() {
            let mut m = e.encode_descriptor(
                "weir_alert_firing",
                "Alert rules firing, per rule and flow (1 while firing).",
                None,
                MetricType::Gauge,
            )?;
            for (rule, flow) in &self.alerts.firing {
                let labels = [("rule", rule.as_str()), ("flow", flow.as_str())];
                m.encode_family(&labels)?.encode_gauge(&1i64)?;
            }
        }
        if !self.alerts.notifications.is_empty() {
            let mut m = e.encode_descriptor(
                "weir_alert_notifications",
                "Alert notifications per rule and outcome (delivered, failed, dropped when the queue was full).",
                None,
                MetricType::Counter,
            )?;
            for ((rule, outcome), n) in &self.alerts.notifications {
                let labels = [("rule", rule.as_str()), ("outcome", *outcome)];
                m.encode_family(&labels)?
                    .encode_counter::<NoLabelSet, u64, u64>(n, None)?;
            }
        }
        Ok(())
    }
}

/// The exposition of these snapshots at `now_ms` (OpenMetrics text, ending in `# EOF`).
pub fn encode(
    flows: Vec<Arc<FlowSnapshot>>,
    alerts: Arc<AlertStats>,
    now_ms: i64,
) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        flows,
        alerts,
        now_ms,
    }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Health, StreamingQueryProgress};

    #[test]
    fn names_types_and_values_follow_the_conventions() {
        let mut s = FlowSnapshot::new("bronze");
        let mut r = StreamingQueryProgress {
            num_input_rows: 30,
            batch_duration: 700,
            timestamp: "2026-01-01T00:00:00.000Z".into(),
            ..Default::default()
        };
        r.sink.num_output_rows = 30;
        r.duration_ms.insert("triggerExecution".into(), 700);
        r.weir.health = Some(Health::default());
        r.weir
            .expectations
            .push(crate::records::ExpectationProgress {
                name: "has_id".into(),
                dataset: "bronze".into(),
                passed_records: 28,
                failed_records: 2,
            });
        r.weir.num_rows_dropped_by_expectations = 2;
        s.observe_record(&r, 1_000);
        s.status = Some(FlowStatus::Idle);
        let text = encode(vec![Arc::new(s)], Arc::new(AlertStats::default()), 4_000).unwrap();
        for line in [
            "# TYPE weir_flow_input_rows counter",
            "weir_flow_input_rows_total{flow=\"bronze\"} 30",
            "weir_flow_output_rows_total{flow=\"bronze\"} 30",
            "weir_flow_batches_total{flow=\"bronze\"} 1",
            "# TYPE weir_flow_batch_duration_seconds histogram",
            "weir_flow_batch_duration_seconds_bucket{le=\"0.5\",flow=\"bronze\"} 0",
            "weir_flow_batch_duration_seconds_bucket{le=\"1.0\",flow=\"bronze\"} 1",
            "weir_flow_batch_duration_seconds_bucket{le=\"+Inf\",flow=\"bronze\"} 1",
            "weir_flow_batch_duration_seconds_count{flow=\"bronze\"} 1",
            "weir_flow_health{flow=\"bronze\",state=\"healthy\"} 1",
            "weir_flow_health{flow=\"bronze\",state=\"lagging\"} 0",
            "weir_flow_status{flow=\"bronze\",status=\"idle\"} 1",
            "weir_flow_freshness_seconds{flow=\"bronze\"} 3.0",
            "# TYPE weir_flow_expectation_failed_records counter",
            "weir_flow_expectation_passed_records_total{flow=\"bronze\",expectation=\"has_id\"} 28",
            "weir_flow_expectation_failed_records_total{flow=\"bronze\",expectation=\"has_id\"} 2",
            "weir_flow_expectation_dropped_rows_total{flow=\"bronze\"} 2",
            "# EOF",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
