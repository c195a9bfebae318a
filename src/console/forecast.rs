//! The catch-up forecast of the backlog pane: will the backlog drain at the
//! current rates, and when?
//!
//! File sources know their backlog in files and bytes, not rows. Over the
//! recent samples (the last [`FORECAST_SPAN_MS`]) the forecast takes the
//! backlog's slope (files/s) and the rows the flow consumed per second; rows
//! per file (from the same batches) turns the slope into the arrival rate:
//! `arrival = consumed + slope × rows/file`. A falling backlog drains in
//! `backlog / -slope`; a flat or rising one does not drain. With one sample
//! the forecast assumes nothing new arrives.

use crate::engine::control::FlowStatus;
use crate::records::BacklogUnit;

use super::format;
use super::model::Sample;

/// A sample's backlog in the unit the forecast counts.
type BacklogOf = Box<dyn Fn(&Sample) -> Option<u64>>;

/// How far back the forecast looks.
pub const FORECAST_SPAN_MS: i64 = 120_000;

#[derive(Debug, Clone, PartialEq)]
pub enum Forecast {
    /// No backlog metric in the records.
    Unknown,
    CaughtUp,
    Drains {
        eta_secs: f64,
    },
    NotDraining {
        input_rps: f64,
        processing_rps: f64,
    },
    /// Not draining, and rows per unit is unknown (records without file counts, Delta versions).
    Growing {
        per_min: f64,
        unit: BacklogUnit,
    },
    /// A single batch without file counts: no estimate yet.
    NoEstimate,
    /// There is a backlog but the flow does not run batches.
    Halted {
        status: FlowStatus,
        waiting: u64,
        unit: BacklogUnit,
    },
}

impl Forecast {
    pub fn text(&self) -> String {
        match self {
            Forecast::Unknown => "no backlog metric for this source".into(),
            Forecast::CaughtUp => "caught up: no backlog".into(),
            Forecast::Drains { eta_secs } => {
                format!("drains in {} at current rates", format::eta(*eta_secs))
            }
            Forecast::NotDraining {
                input_rps,
                processing_rps,
            } => format!(
                "not draining: input {} {} processing {}",
                format::rate(*input_rps),
                if input_rps > processing_rps {
                    ">"
                } else {
                    ">="
                },
                format::rate(*processing_rps)
            ),
            Forecast::Growing { per_min, unit } => {
                format!(
                    "not draining: backlog {:+.1} {}/min at current rates",
                    per_min,
                    unit.noun()
                )
            }
            Forecast::NoEstimate => "backlog: no estimate until the next batch".into(),
            Forecast::Halted {
                status,
                waiting,
                unit,
            } => {
                let what = match unit {
                    BacklogUnit::Files => format!("{waiting} file(s)"),
                    u => u.count(*waiting),
                };
                format!(
                    "not draining: flow is {} with {what} waiting",
                    status.label()
                )
            }
        }
    }
}

/// Forecast from samples in time order (the last one is "now"); `status` is the flow's.
pub fn forecast(samples: &[&Sample], status: Option<FlowStatus>) -> Forecast {
    let Some(last) = samples.last() else {
        return Forecast::Unknown;
    };
    // Files when the source counts files; otherwise the backlog in its own unit (Kafka
    // offsets and rate rows are rows one for one; Delta versions have no row count).
    let (unit, value): (BacklogUnit, BacklogOf) = match (last.backlog_files, last.backlog_unit) {
        (Some(_), _) => (BacklogUnit::Files, Box::new(|s: &Sample| s.backlog_files)),
        (None, Some(u)) => (
            u,
            Box::new(move |s: &Sample| s.backlog.filter(|_| s.backlog_unit == Some(u))),
        ),
        (None, None) => return Forecast::Unknown,
    };
    let Some(backlog) = value(last) else {
        return Forecast::Unknown;
    };
    if backlog == 0 {
        return Forecast::CaughtUp;
    }
    if let Some(
        s @ (FlowStatus::Paused | FlowStatus::Stopped | FlowStatus::Failed | FlowStatus::Stopping),
    ) = status
    {
        return Forecast::Halted {
            status: s,
            waiting: backlog,
            unit,
        };
    }
    let recent: Vec<&Sample> = samples
        .iter()
        .copied()
        .filter(|s| s.t_ms >= last.t_ms - FORECAST_SPAN_MS && value(s).is_some())
        .collect();
    let rows_per_file = match unit {
        BacklogUnit::Files => {
            let (rows, files): (u64, u64) = recent
                .iter()
                .fold((0, 0), |(r, f), s| (r + s.input_rows, f + s.files));
            (files > 0).then(|| rows as f64 / files as f64)
        }
        BacklogUnit::Offsets | BacklogUnit::Rows => Some(1.0),
        BacklogUnit::Versions => None,
    };
    let first = recent.first().copied().unwrap_or(last);
    let dt = (last.t_ms - first.t_ms) as f64 / 1000.0;
    if recent.len() < 2 || dt <= 0.0 {
        // One batch: assume nothing new arrives.
        let consumed = last.input_rps;
        return match rows_per_file {
            Some(rpf) if consumed > 0.0 => Forecast::Drains {
                eta_secs: backlog as f64 * rpf / consumed,
            },
            _ => Forecast::NoEstimate,
        };
    }
    let consumed_rows: u64 = recent.iter().skip(1).map(|s| s.input_rows).sum();
    let consumed = consumed_rows as f64 / dt;
    let slope = (backlog as f64 - value(first).unwrap_or(backlog) as f64) / dt;
    if slope < 0.0 {
        return Forecast::Drains {
            eta_secs: backlog as f64 / -slope,
        };
    }
    match rows_per_file {
        Some(rpf) => Forecast::NotDraining {
            input_rps: consumed + slope * rpf,
            processing_rps: consumed,
        },
        None => Forecast::Growing {
            per_min: slope * 60.0,
            unit,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_s: i64, rows: u64, files: u64, backlog: u64) -> Sample {
        Sample {
            t_ms: t_s * 1000,
            batch_id: t_s as u64,
            input_rps: rows as f64 / 10.0,
            processed_rps: rows as f64 / 5.0,
            input_rows: rows,
            output_rows: rows as i64,
            files,
            bytes: 0,
            backlog_files: Some(backlog),
            backlog_bytes: None,
            backlog: Some(backlog),
            backlog_unit: Some(BacklogUnit::Files),
            max_event_ms: None,
            watermark_ms: None,
            state_rows: None,
            state_memory: None,
            dropped_by_watermark: None,
            duration_ms: 5000,
            phases: [0; 5],
            delta_version: None,
            start_offset: None,
            end_offset: None,
            replayed: false,
            files_failed: 0,
            late_rows_written: 0,
            watermark_held_by: None,
            source_watermarks: Vec::new(),
            source_rows: Vec::new(),
        }
    }

    #[test]
    fn draining_backlog_gives_an_eta() {
        // 10 files/batch every 10 s, backlog falls by 5 files per 10 s: 100 files in 200 s.
        let s: Vec<Sample> = (0..5)
            .map(|i| sample(i * 10, 1000, 10, 120 - 5 * i as u64))
            .collect();
        let refs: Vec<&Sample> = s.iter().collect();
        match forecast(&refs, Some(FlowStatus::Running)) {
            Forecast::Drains { eta_secs } => assert!((eta_secs - 200.0).abs() < 1e-6, "{eta_secs}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Forecast::Drains { eta_secs: 200.0 }.text(),
            "drains in ~3 min at current rates"
        );
    }

    #[test]
    fn growing_backlog_names_both_rates() {
        // Consumes 1000 rows / 10 s = 100 rows/s; backlog grows by 2 files / 10 s at 100 rows/file = 20 rows/s.
        let s: Vec<Sample> = (0..4)
            .map(|i| sample(i * 10, 1000, 10, 50 + 2 * i as u64))
            .collect();
        let refs: Vec<&Sample> = s.iter().collect();
        let f = forecast(&refs, Some(FlowStatus::Idle));
        assert_eq!(f.text(), "not draining: input 120/s > processing 100/s");
    }

    #[test]
    fn kafka_offsets_and_delta_versions_forecast_in_their_unit() {
        let other = |t: i64, rows: u64, behind: u64, unit: BacklogUnit| {
            let mut s = sample(t, rows, 0, 0);
            s.backlog_files = None;
            s.backlog = Some(behind);
            s.backlog_unit = Some(unit);
            s
        };
        // Kafka: 1000 records / 10 s consumed, 200 more offsets behind per 10 s: 120/s arrive.
        let s: Vec<Sample> = (0..4)
            .map(|i| other(i * 10, 1000, 5000 + 200 * i as u64, BacklogUnit::Offsets))
            .collect();
        let refs: Vec<&Sample> = s.iter().collect();
        let f = forecast(&refs, Some(FlowStatus::Idle));
        assert_eq!(f.text(), "not draining: input 120/s > processing 100/s");
        // Delta: versions behind grow; no rows per version.
        let s: Vec<Sample> = (0..4)
            .map(|i| other(i * 10, 5, 3 + i as u64, BacklogUnit::Versions))
            .collect();
        let refs: Vec<&Sample> = s.iter().collect();
        assert_eq!(
            forecast(&refs, Some(FlowStatus::Idle)).text(),
            "not draining: backlog +6.0 versions/min at current rates"
        );
        assert_eq!(
            forecast(&refs, Some(FlowStatus::Failed)).text(),
            "not draining: flow is failed with 6 versions waiting"
        );
    }

    #[test]
    fn edge_cases() {
        assert_eq!(forecast(&[], None), Forecast::Unknown);
        let caught = sample(0, 10, 1, 0);
        assert_eq!(forecast(&[&caught], None), Forecast::CaughtUp);
        let paused = sample(0, 10, 1, 7);
        assert_eq!(
            forecast(&[&paused], Some(FlowStatus::Paused)).text(),
            "not draining: flow is paused with 7 file(s) waiting"
        );
        // One sample: 7 files × 10 rows/file at 1 row/s.
        match forecast(&[&paused], Some(FlowStatus::Running)) {
            Forecast::Drains { eta_secs } => assert!((eta_secs - 70.0).abs() < 1e-6),
            other => panic!("{other:?}"),
        }
    }
}
