//! A flow's detail: seven panes (rates, backlog, watermark, state, batch durations,
//! checkpoint history, timeline), all at once from 100x30 up and one at a time below
//! that; Tab moves the focus, Enter zooms the focused pane.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Cell, Chart, Dataset, GraphType, Paragraph, Row, Table};

use super::overview::{EventRow, event_row, last_sample, matches_filter, max_event_seen};
use super::{Next, SnapCx, block, clamp_scroll, scroll_step};
use crate::console::action::Action;
use crate::console::forecast::forecast;
use crate::console::format;
use crate::console::model::{FlowModel, PHASES, ReplayClock, Sample};
use crate::console::theme::{Role, Theme};
use crate::engine::control::FlowStatus;

/// The panes of the flow detail, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Rates,
    Backlog,
    Watermark,
    State,
    Durations,
    History,
    Timeline,
}

impl Pane {
    pub const ALL: [Pane; 7] = [
        Pane::Rates,
        Pane::Backlog,
        Pane::Watermark,
        Pane::State,
        Pane::Durations,
        Pane::History,
        Pane::Timeline,
    ];

    pub fn index(self) -> usize {
        Pane::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }

    pub fn title(self) -> &'static str {
        match self {
            Pane::Rates => "Rates (rows/s)",
            Pane::Backlog => "Backlog",
            Pane::Watermark => "Watermark",
            Pane::State => "State",
            Pane::Durations => "Batch durations",
            Pane::History => "Checkpoint history",
            Pane::Timeline => "Timeline",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Pane::Rates => "rates",
            Pane::Backlog => "backlog",
            Pane::Watermark => "watermark",
            Pane::State => "state",
            Pane::Durations => "durations",
            Pane::History => "history",
            Pane::Timeline => "timeline",
        }
    }
}

/// Which pane has the focus, whether it is zoomed, how far each pane is scrolled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetailView {
    pub focus: Pane,
    pub zoom: bool,
    /// Scroll offset per pane, in [`Pane::ALL`] order.
    pub scroll: [usize; 7],
}

impl Default for DetailView {
    fn default() -> Self {
        DetailView {
            focus: Pane::Rates,
            zoom: false,
            scroll: [0; 7],
        }
    }
}

/// Moving between the panes, zooming one, scrolling the focused one.
pub fn update(v: &mut DetailView, action: &Action) -> Next {
    if let Some(delta) = scroll_step(action) {
        let slot = &mut v.scroll[v.focus.index()];
        *slot = slot.saturating_add_signed(delta);
        return Next::Stay;
    }
    match action {
        Action::NextPane | Action::PrevPane => {
            let n = Pane::ALL.len();
            let step = if *action == Action::NextPane {
                1
            } else {
                n - 1
            };
            v.focus = Pane::ALL[(v.focus.index() + step) % n];
        }
        Action::Enter => v.zoom = !v.zoom,
        _ => return Next::Pass,
    }
    Next::Stay
}

#[derive(Debug, Clone)]
pub struct DetailSnap {
    pub flow: String,
    pub focus: Pane,
    pub zoom: bool,
    pub rates: ChartSnap,
    pub backlog: BacklogSnap,
    pub watermark: WatermarkSnap,
    pub state: StateSnap,
    pub durations: Vec<DurationRow>,
    pub history: Vec<HistoryRow>,
    pub timeline: Vec<EventRow>,
    pub scroll: [usize; 7],
}

#[derive(Debug, Clone)]
pub struct ChartSnap {
    pub x_bounds: [f64; 2],
    pub x_labels: Vec<String>,
    pub y_bounds: [f64; 2],
    pub y_labels: Vec<String>,
    pub series: Vec<SeriesSnap>,
    /// Why there is nothing to plot.
    pub empty: Option<String>,
}

#[derive(Debug, Clone)]
pub struct SeriesSnap {
    pub name: String,
    /// Runs of points without a gap; x in seconds relative to the window's end.
    pub segments: Vec<Vec<(f64, f64)>>,
    pub index: usize,
}

/// One Kafka partition's lag (the backlog pane of a Kafka flow).
#[derive(Debug, Clone)]
pub struct LagRow {
    pub partition: String,
    pub latest: String,
    pub committed: String,
    pub messages: String,
    pub time: String,
    pub role: Role,
}

#[derive(Debug, Clone)]
pub struct BacklogSnap {
    /// A Kafka flow: per-partition lag, furthest behind first (drawn instead of the charts).
    pub partitions: Option<Vec<LagRow>>,
    pub forecast: String,
    pub forecast_role: Role,
    pub now: String,
    pub files: ChartSnap,
    pub bytes: ChartSnap,
}

#[derive(Debug, Clone)]
pub struct WatermarkSnap {
    /// `(label, value)` lines; empty when the flow has no event time.
    pub lines: Vec<(String, String)>,
    /// A flow of several inputs (a union, a stream-stream join): each input's own
    /// watermark, the one holding the flow's marked, idle ones flagged.
    pub inputs: Vec<InputWatermarkRow>,
    pub chart: ChartSnap,
    pub empty: Option<String>,
}

/// One input of a multi-input flow in the watermark pane.
#[derive(Debug, Clone)]
pub struct InputWatermarkRow {
    /// `left`, `right`, `source 2`...
    pub input: String,
    /// The source's description (`FileStreamSource[...]`).
    pub source: String,
    pub watermark: String,
    /// How far the input's watermark is ahead of the holder's (`+4m 00s`); `0` for the holder.
    pub ahead: String,
    /// Rows it read in the last batch.
    pub rows: String,
    /// `holds watermark`, `idle 3 batches`, `no data yet`.
    pub note: String,
    pub role: Role,
}

#[derive(Debug, Clone)]
pub struct StateSnap {
    pub operators: Vec<OperatorRow>,
    pub note: Option<String>,
    pub empty: Option<String>,
}

#[derive(Debug, Clone)]
pub struct OperatorRow {
    pub name: String,
    pub rows: String,
    pub updated: String,
    pub removed: String,
    pub dropped: String,
    pub memory: String,
    pub disk: String,
}

#[derive(Debug, Clone)]
pub struct DurationRow {
    pub batch_id: u64,
    pub phases: [u64; 5],
    pub total: u64,
}

#[derive(Debug, Clone)]
pub struct HistoryRow {
    pub batch: String,
    pub offsets: String,
    pub files: String,
    pub input_rows: String,
    pub output_rows: String,
    pub duration: String,
    pub delta_version: String,
    pub state: String,
    pub role: Role,
}

/// A chart's series: name and how to read the value from a sample.
type SeriesSpec<'a> = Vec<(&'a str, Box<dyn Fn(&Sample) -> Option<f64>>)>;

/// How many recent batches the durations and history panes keep.
const TABLE_ROWS: usize = 500;

/// A Kafka flow's backlog pane: the lag of every partition (messages, and the newest
/// message's time minus the oldest unread one's), the furthest behind, and the
/// catch-up forecast over all partitions from the lag's trend (or the processing rate).
fn kafka_backlog(
    backlog: &mut BacklogSnap,
    view: &crate::console::model::KafkaLagView,
    f: &FlowModel,
    last: Option<&Sample>,
    status: Option<FlowStatus>,
    as_of: i64,
) {
    let age = format::duration_ms((as_of - view.at_ms).max(0));
    let lag = match &view.lag {
        Err(e) => {
            backlog.forecast = "source_unavailable: the Kafka cluster cannot be reached".into();
            backlog.forecast_role = Role::Bad;
            backlog.now = format!("lag unknown ({age} ago): {e}");
            backlog.partitions = Some(Vec::new());
            return;
        }
        Ok(l) => l,
    };
    let total: u64 = lag.iter().map(|p| p.messages).sum();
    let mut sorted: Vec<&crate::source::kafka::lag::PartitionLag> = lag.iter().collect();
    sorted.sort_by(|a, b| b.messages.cmp(&a.messages).then(a.tp.cmp(&b.tp)));
    let time = |p: &crate::source::kafka::lag::PartitionLag| {
        p.lag_ms
            .map_or_else(|| "?".to_string(), format::duration_ms)
    };
    backlog.now = match sorted.first() {
        Some(p) if p.messages > 0 => format!(
            "lag {} msgs, {} partitions · furthest: {} {} msgs, {}",
            format::count(total),
            lag.len(),
            p.tp,
            format::count(p.messages),
            time(p)
        ),
        _ => format!("lag 0, {} partitions (measured {age} ago)", lag.len()),
    };
    let (text, role) = if total == 0 {
        ("caught up: no lag".to_string(), Role::Good)
    } else if let Some(
        s @ (FlowStatus::Paused | FlowStatus::Stopped | FlowStatus::Failed | FlowStatus::Stopping),
    ) = status
    {
        (
            format!(
                "not draining: flow is {} with {} msgs waiting",
                s.label(),
                format::count(total)
            ),
            Role::Bad,
        )
    } else {
        // The lag's trend over the last minute, else the processing rate alone.
        let trend = f
            .kafka_lag_trend
            .front()
            .zip(f.kafka_lag_trend.back())
            .and_then(|((t0, l0), (t1, l1))| {
                let dt = (t1 - t0) as f64 / 1000.0;
                (dt >= 5.0).then(|| (*l1 as f64 - *l0 as f64) / dt)
            });
        match (trend, last.map(|s| s.processed_rps)) {
            (Some(slope), _) if slope < 0.0 => (
                format!(
                    "drains in {} at current rates",
                    format::eta(total as f64 / -slope)
                ),
                Role::Warn,
            ),
            (Some(slope), _) => (
                format!("not draining: lag {slope:+.1} msg/s at current rates"),
                Role::Bad,
            ),
            (None, Some(rps)) if rps > 0.0 => (
                format!(
                    "drains in {} at {} (no trend yet)",
                    format::eta(total as f64 / rps),
                    format::rate(rps)
                ),
                Role::Warn,
            ),
            _ => (
                "lag: no estimate until the next batch".to_string(),
                Role::Dim,
            ),
        }
    };
    backlog.forecast = text;
    backlog.forecast_role = role;
    backlog.partitions = Some(
        sorted
            .iter()
            .map(|p| LagRow {
                partition: p.tp.to_string(),
                latest: p.latest.to_string(),
                committed: p.committed.map_or("-".into(), |c| c.to_string()),
                messages: format::count(p.messages),
                time: time(p),
                role: if p.messages == 0 {
                    Role::Good
                } else {
                    Role::Warn
                },
            })
            .collect(),
    );
}

/// The end of a flow's chart window: the view's instant, or the last batch of a flow that no longer runs.
fn window_end(f: &FlowModel, as_of: i64) -> i64 {
    let alive = f
        .status_at(as_of)
        .is_some_and(crate::console::model::status_alive);
    match last_sample(f, as_of) {
        Some(s) if !alive => s.t_ms.min(as_of),
        _ => as_of,
    }
}

/// Flow `f`'s panes as of `cx.as_of`, over the window `cx.window_ms` ending then.
pub fn snap(v: &DetailView, cx: &SnapCx, f: &FlowModel) -> DetailSnap {
    let as_of = cx.as_of;
    let end = window_end(f, as_of);
    let start = end - cx.window_ms;
    let upto = f.samples_until(as_of);
    let first = f.samples.partition_point(|s| s.t_ms < start);
    // One point before the window so lines enter it from the left edge.
    let from = first.saturating_sub(1);
    let window: Vec<&Sample> = f.samples.range(from..upto.max(from)).collect();
    let all_until: Vec<&Sample> = f.samples.range(..upto).collect();
    let x_labels = vec![
        format::offset_label(-cx.window_ms as f64 / 1000.0),
        format::offset_label(-cx.window_ms as f64 / 2000.0),
        if end == cx.now_ms {
            "now".to_string()
        } else {
            format::clock(end)
        },
    ];
    let chart = |series: SeriesSpec, empty: &str, label: fn(f64) -> String| -> ChartSnap {
        build_chart(&window, start, end, &x_labels, series, empty, label)
    };
    let rates = chart(
        vec![
            ("input", Box::new(|s: &Sample| Some(s.input_rps))),
            ("processing", Box::new(|s: &Sample| Some(s.processed_rps))),
        ],
        "no batches in this window",
        format::compact,
    );
    let status = f.status_at(as_of);
    let recent: Vec<&Sample> = all_until.iter().rev().take(64).rev().copied().collect();
    let fc = forecast(&recent, status);
    let forecast_role = match fc {
        crate::console::forecast::Forecast::CaughtUp => Role::Good,
        crate::console::forecast::Forecast::Drains { .. } => Role::Warn,
        crate::console::forecast::Forecast::Unknown => Role::Dim,
        _ => Role::Bad,
    };
    let last = all_until.last().copied();
    // A source without a file count (Kafka, Delta, rate): its backlog from Spark's latest
    // offset, in its own unit, takes the files chart.
    let other_unit = last
        .filter(|s| s.backlog_files.is_none())
        .and_then(|s| s.backlog_unit)
        .filter(|u| *u != crate::records::BacklogUnit::Files);
    let now_text = match (last, other_unit) {
        (Some(s), Some(u)) => format!(
            "behind the latest offset after batch {}: {}",
            s.batch_id,
            s.backlog.map_or("?".into(), |v| u.count(v))
        ),
        (Some(s), None) if s.backlog_files.is_none() => {
            format!("after batch {}: backlog unknown", s.batch_id)
        }
        (Some(s), None) => format!(
            "outstanding after batch {}: {} file(s), {}",
            s.batch_id,
            s.backlog_files.map_or("?".into(), |v| v.to_string()),
            s.backlog_bytes.map_or("? bytes".into(), format::bytes)
        ),
        (None, _) => "no batch yet".into(),
    };
    let files_chart = match other_unit {
        Some(u) => chart(
            vec![(
                u.noun(),
                Box::new(move |s: &Sample| {
                    s.backlog
                        .filter(|_| s.backlog_unit == Some(u))
                        .map(|v| v as f64)
                }),
            )],
            "no backlog metric in this window",
            format::compact,
        ),
        None => chart(
            vec![(
                "files",
                Box::new(|s: &Sample| s.backlog_files.map(|v| v as f64)),
            )],
            "no backlog metric in this window",
            format::compact,
        ),
    };
    let mut backlog = BacklogSnap {
        partitions: None,
        forecast: fc.text(),
        forecast_role,
        now: now_text,
        files: files_chart,
        bytes: chart(
            vec![(
                "bytes",
                Box::new(|s: &Sample| s.backlog_bytes.map(|v| v as f64)),
            )],
            "no backlog metric in this window",
            |v| format::bytes(v as u64),
        ),
    };
    if let Some(view) = &f.kafka_lag {
        kafka_backlog(&mut backlog, view, f, last, status, as_of);
    }
    // A replay's event times are its own: delays against its simulated clock.
    let clock = cx.replay_clock;
    let (wm_series, max_series) = if clock.is_some() {
        ("replay - watermark", "replay - max event")
    } else {
        ("wall - watermark", "wall - max event")
    };
    // Before the replay's clock started there is no simulated time: no point.
    let at = move |t: i64| match &clock {
        Some(c) => c.at(t),
        None => Some(t),
    };
    let mut watermark = watermark_snap(
        last,
        max_event_seen(f, as_of),
        end,
        clock.as_ref(),
        chart(
            vec![
                (
                    wm_series,
                    Box::new(move |s: &Sample| {
                        // Before its first data a watermark is the epoch: no point.
                        s.watermark_ms
                            .filter(|w| *w > 0)
                            .zip(at(s.t_ms))
                            .map(|(w, now)| (now - w) as f64 / 1000.0)
                    }),
                ),
                (
                    max_series,
                    Box::new(move |s: &Sample| {
                        s.max_event_ms
                            .zip(at(s.t_ms))
                            .map(|(m, now)| (now - m) as f64 / 1000.0)
                    }),
                ),
            ],
            "no event time in this window",
            |v| format::duration_ms((v * 1000.0) as i64),
        ),
    );
    watermark.inputs = input_watermarks(&all_until, f);
    let state = state_snap(f, last, cx.frozen);
    let durations = all_until
        .iter()
        .rev()
        .take(TABLE_ROWS)
        .map(|s| DurationRow {
            batch_id: s.batch_id,
            phases: s.phases,
            total: s.duration_ms,
        })
        .collect();
    let mut history: Vec<HistoryRow> = Vec::new();
    let live = !cx.frozen;
    if let Some(pending) = f.batches.pending().filter(|_| live)
        && last.is_none_or(|s| s.batch_id < pending)
    {
        history.push(HistoryRow {
            batch: pending.to_string(),
            offsets: f
                .batches
                .last_committed
                .map_or("-".into(), |c| c.to_string())
                + cx.theme.arrow()
                + &pending.to_string(),
            files: "-".into(),
            input_rows: "-".into(),
            output_rows: "-".into(),
            duration: f.batches.pending_since_ms.map_or("-".into(), |t| {
                format!("{} so far", format::duration_ms(cx.now_ms - t))
            }),
            delta_version: "-".into(),
            state: "pending".into(),
            role: Role::Warn,
        });
    }
    history.extend(all_until.iter().rev().take(TABLE_ROWS).map(|s| HistoryRow {
        batch: s.batch_id.to_string(),
        offsets: format!(
            "{}{}{}",
            s.start_offset.as_deref().unwrap_or("-"),
            cx.theme.arrow(),
            s.end_offset.as_deref().unwrap_or("-")
        ),
        files: s.files.to_string(),
        input_rows: format::count(s.input_rows),
        output_rows: if s.output_rows < 0 {
            "?".into()
        } else {
            format::count(s.output_rows as u64)
        },
        duration: format::duration_ms(s.duration_ms as i64),
        delta_version: s.delta_version.map_or("-".into(), |v| v.to_string()),
        state: if s.replayed {
            "committed (re-run)".into()
        } else {
            "committed".into()
        },
        role: if s.files_failed > 0 {
            Role::Bad
        } else {
            Role::Plain
        },
    }));
    history.retain(|h| matches_filter(cx.filter, &[&h.batch, &h.state, &h.delta_version]));
    let timeline = f
        .timeline
        .iter()
        .rev()
        .filter(|e| e.t_ms <= as_of)
        .filter(|e| matches_filter(cx.filter, &[&e.text, e.kind.label()]))
        .map(event_row)
        .collect();
    DetailSnap {
        flow: f.name.clone(),
        focus: v.focus,
        zoom: v.zoom,
        rates,
        backlog,
        watermark,
        state,
        durations,
        history,
        timeline,
        scroll: v.scroll,
    }
}

fn watermark_snap(
    last: Option<&Sample>,
    max_seen: Option<i64>,
    end: i64,
    clock: Option<&ReplayClock>,
    chart: ChartSnap,
) -> WatermarkSnap {
    let Some(s) = last.filter(|s| s.watermark_ms.is_some() || s.max_event_ms.is_some()) else {
        return WatermarkSnap {
            lines: Vec::new(),
            inputs: Vec::new(),
            chart,
            empty: Some("no event time: this flow has no watermark".into()),
        };
    };
    let opt_dt = |v: Option<i64>| v.map_or("-".to_string(), format::datetime);
    let gap = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => format::duration_ms(a - b),
        _ => "-".into(),
    };
    let mut lines = vec![
        ("max event time".into(), opt_dt(s.max_event_ms)),
        ("watermark".into(), opt_dt(s.watermark_ms)),
    ];
    match clock.and_then(|c| c.at(end)) {
        // A replay: its simulated clock is the one event times are compared with.
        Some(sim) => lines.extend([
            ("replay clock".into(), format::datetime(sim)),
            ("replay - watermark".into(), gap(Some(sim), s.watermark_ms)),
            ("wall clock".into(), format::datetime(end)),
        ]),
        None => lines.extend([
            ("wall clock".into(), format::datetime(end)),
            ("wall - watermark".into(), gap(Some(end), s.watermark_ms)),
        ]),
    }
    lines.extend([
        (
            "event-time lag".into(),
            match (max_seen, s.watermark_ms) {
                (Some(m), Some(w)) => format!("{} (max - wm)", format::duration_ms(m - w)),
                _ => "-".into(),
            },
        ),
        (
            "dropped (late)".into(),
            s.dropped_by_watermark.map_or("-".into(), |d| {
                format!("{} row(s) in batch {}", d, s.batch_id)
            }),
        ),
        (
            "late rows written".into(),
            format!("{} in batch {}", s.late_rows_written, s.batch_id),
        ),
    ]);
    WatermarkSnap {
        lines,
        inputs: Vec::new(),
        chart,
        empty: None,
    }
}

/// A source's short name: the last part of the path in its description
/// (`FileStreamSource[/srv/landing/eu]` → `eu`, `files:json landing/us` → `us`).
fn short_source(description: &str) -> String {
    let inner = match (description.find('['), description.rfind(']')) {
        (Some(a), Some(b)) if a < b => &description[a + 1..b],
        _ => description,
    };
    inner
        .rsplit(['/', ' ', ','])
        .find(|p| !p.is_empty())
        .unwrap_or(inner)
        .to_string()
}

/// A flow of several inputs: each input's own watermark after the last batch, how far
/// it is ahead of the flow's, its rows, and whether it is idle (no rows for the last
/// batches) or holds the flow's watermark (the minimum, under the default policy).
fn input_watermarks(samples: &[&Sample], f: &FlowModel) -> Vec<InputWatermarkRow> {
    let Some(s) = samples.last() else {
        return Vec::new();
    };
    if s.source_watermarks.len() < 2 {
        return Vec::new();
    }
    let join = f
        .inputs
        .iter()
        .any(|i| i.role == crate::console::model::InputRole::JoinRight);
    // The flow's next watermark is the holder's (the others are ahead of it).
    let flow_wm = s
        .source_watermarks
        .iter()
        .find(|(source, _)| s.watermark_held_by.as_deref() == Some(source.as_str()))
        .and_then(|(_, w)| *w);
    s.source_watermarks
        .iter()
        .enumerate()
        .map(|(i, (source, wm))| {
            let holds = s.watermark_held_by.as_deref() == Some(source.as_str());
            // Batches in a row, newest first, in which this input read nothing.
            let idle = samples
                .iter()
                .rev()
                .take_while(|b| b.source_rows.get(i).is_some_and(|r| *r == 0))
                .count();
            let mut notes = Vec::new();
            if holds {
                notes.push("holds watermark".to_string());
            }
            if wm.is_none() {
                notes.push("no data yet".to_string());
            } else if idle > 0 {
                notes.push(format!(
                    "idle {idle} batch{}",
                    if idle == 1 { "" } else { "es" }
                ));
            }
            InputWatermarkRow {
                input: match (join, i) {
                    (true, 0) => format!("left {}", short_source(source)),
                    (true, _) => format!("right {}", short_source(source)),
                    (false, i) => format!("{} {}", i + 1, short_source(source)),
                },
                source: source.clone(),
                watermark: wm.map_or("-".into(), format::month_day_time),
                ahead: match (wm, flow_wm) {
                    (Some(w), Some(f)) if *w > f => format!("+{}", format::duration_ms(w - f)),
                    (Some(_), Some(_)) => "0".into(),
                    _ => "-".into(),
                },
                rows: s
                    .source_rows
                    .get(i)
                    .map_or("-".into(), |r| format::count(*r)),
                note: notes.join(", "),
                role: if holds && (idle > 0 || wm.is_none()) {
                    Role::Bad
                } else if holds {
                    Role::Warn
                } else if idle > 0 || wm.is_none() {
                    Role::Dim
                } else {
                    Role::Plain
                },
            }
        })
        .collect()
}

fn state_snap(f: &FlowModel, last: Option<&Sample>, frozen: bool) -> StateSnap {
    let live_record = f
        .last_progress
        .as_ref()
        .filter(|p| last.is_some_and(|s| s.batch_id == p.batch_id));
    match (live_record, last) {
        (Some(p), _) if !p.state_operators.is_empty() => StateSnap {
            operators: p
                .state_operators
                .iter()
                .map(|o| OperatorRow {
                    name: o.operator_name.clone(),
                    rows: format::count(o.num_rows_total),
                    updated: format::count(o.num_rows_updated),
                    removed: format::count(o.num_rows_removed),
                    dropped: format::count(o.num_rows_dropped_by_watermark),
                    memory: format::bytes(o.memory_used_bytes),
                    disk: o
                        .custom_metrics
                        .get("rocksdbSstFileSize")
                        .or_else(|| o.custom_metrics.get("stateOnCurrentVersionSizeBytes"))
                        .map_or("-".into(), |v| format::bytes((*v).max(0) as u64)),
                })
                .collect(),
            note: Some(format!("as of batch {}", p.batch_id)),
            empty: None,
        },
        (_, Some(s)) if s.state_rows.is_some() => StateSnap {
            operators: vec![OperatorRow {
                name: "all operators".into(),
                rows: s.state_rows.map_or("-".into(), format::count),
                updated: "-".into(),
                removed: "-".into(),
                dropped: s.dropped_by_watermark.map_or("-".into(), format::count),
                memory: s.state_memory.map_or("-".into(), format::bytes),
                disk: "-".into(),
            }],
            note: Some(if frozen {
                format!("batch {} (per operator only in the live view)", s.batch_id)
            } else {
                format!("as of batch {}", s.batch_id)
            }),
            empty: None,
        },
        _ => StateSnap {
            operators: Vec::new(),
            note: None,
            empty: Some("stateless flow: no state operators".into()),
        },
    }
}

/// A chart: the series over `[start, end]`, broken where batches are far apart.
fn build_chart(
    window: &[&Sample],
    start: i64,
    end: i64,
    x_labels: &[String],
    series: SeriesSpec,
    empty: &str,
    label: fn(f64) -> String,
) -> ChartSnap {
    let span = ((end - start) as f64 / 1000.0).max(1.0);
    let gap_ms = gap_threshold(window);
    let mut out = Vec::new();
    let mut y_max: f64 = 0.0;
    let mut any = false;
    for (index, (name, value)) in series.into_iter().enumerate() {
        let mut segments: Vec<Vec<(f64, f64)>> = Vec::new();
        let mut prev_t: Option<i64> = None;
        for s in window {
            let Some(v) = value(s).filter(|v| v.is_finite()) else {
                prev_t = None;
                continue;
            };
            if s.t_ms >= start {
                any = true;
                y_max = y_max.max(v);
            }
            let x = ((s.t_ms - end) as f64 / 1000.0).max(-span);
            match (prev_t, segments.last_mut()) {
                (Some(p), Some(seg)) if s.t_ms - p <= gap_ms => seg.push((x, v)),
                _ => segments.push(vec![(x, v)]),
            }
            prev_t = Some(s.t_ms);
        }
        out.push(SeriesSnap {
            name: name.to_string(),
            segments,
            index,
        });
    }
    let top = nice_ceiling(y_max * 1.1);
    ChartSnap {
        x_bounds: [-span, 0.0],
        x_labels: x_labels.to_vec(),
        y_bounds: [0.0, top],
        y_labels: vec!["0".into(), label(top / 2.0), label(top)],
        series: out,
        empty: (!any).then(|| empty.to_string()),
    }
}

/// Batches further apart than this leave a gap: 3× the median interval, at least 10 s.
fn gap_threshold(window: &[&Sample]) -> i64 {
    let mut d: Vec<i64> = window.windows(2).map(|w| w[1].t_ms - w[0].t_ms).collect();
    if d.is_empty() {
        return i64::MAX;
    }
    d.sort_unstable();
    (d[d.len() / 2] * 3).max(10_000)
}

/// A round number (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) at least `v`, at least 1.
fn nice_ceiling(v: f64) -> f64 {
    if v.is_nan() || v <= 1.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

/// Whether the flow detail shows all panes at once at this size.
pub fn wide(area: Rect) -> bool {
    area.width >= 100 && area.height >= 30
}

pub fn draw(frame: &mut Frame, area: Rect, d: &DetailSnap, theme: Theme) {
    if d.zoom {
        draw_pane(frame, area, d, d.focus, true, theme);
        return;
    }
    if !wide(Rect::new(0, 0, area.width, area.height + 3)) {
        let [bar, rest] =
            Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
        let mut spans = vec![Span::raw(" ")];
        for (i, p) in Pane::ALL.iter().enumerate() {
            let style = if *p == d.focus {
                theme.style(Role::Selected)
            } else {
                theme.style(Role::Dim)
            };
            spans.push(Span::styled(format!("{} {}", i + 1, p.short()), style));
            spans.push(Span::raw(" "));
        }
        frame.render_widget(Paragraph::new(Line::from(spans)), bar);
        draw_pane(frame, rest, d, d.focus, true, theme);
        return;
    }
    let [r1, r2, r3, r4] = Layout::vertical([
        Constraint::Percentage(32),
        Constraint::Percentage(24),
        Constraint::Percentage(24),
        Constraint::Fill(1),
    ])
    .areas(area);
    let halves = |r: Rect| -> [Rect; 2] {
        Layout::horizontal([Constraint::Percentage(50), Constraint::Fill(1)]).areas(r)
    };
    let [a, b] = halves(r1);
    let [c, e] = halves(r2);
    let [f, g] = halves(r3);
    for (pane, rect) in [
        (Pane::Rates, a),
        (Pane::Backlog, b),
        (Pane::Watermark, c),
        (Pane::State, e),
        (Pane::Durations, f),
        (Pane::History, g),
        (Pane::Timeline, r4),
    ] {
        draw_pane(frame, rect, d, pane, pane == d.focus, theme);
    }
}

fn draw_pane(
    frame: &mut Frame,
    area: Rect,
    d: &DetailSnap,
    pane: Pane,
    focused: bool,
    theme: Theme,
) {
    let b = block(pane.title(), focused, theme);
    let inner = b.inner(area);
    frame.render_widget(b, area);
    if inner.width < 4 || inner.height < 1 {
        return;
    }
    let scroll = d.scroll[pane.index()];
    match pane {
        Pane::Rates => draw_chart(frame, inner, &d.rates, theme),
        Pane::Backlog => {
            let [l1, l2, rest] = Layout::vertical([
                Constraint::Length(1),
                Constraint::Length(1),
                Constraint::Fill(1),
            ])
            .areas(inner);
            frame.render_widget(
                Paragraph::new(Span::styled(
                    d.backlog.forecast.clone(),
                    theme.style(d.backlog.forecast_role),
                )),
                l1,
            );
            frame.render_widget(
                Paragraph::new(Span::styled(d.backlog.now.clone(), theme.style(Role::Dim))),
                l2,
            );
            if let Some(rows) = &d.backlog.partitions {
                draw_lag(frame, rest, rows, scroll, theme);
            } else if rest.height >= 12 {
                let [top, bottom] =
                    Layout::vertical([Constraint::Percentage(50), Constraint::Fill(1)]).areas(rest);
                draw_chart(frame, top, &d.backlog.files, theme);
                draw_chart(frame, bottom, &d.backlog.bytes, theme);
            } else {
                draw_chart(frame, rest, &d.backlog.files, theme);
            }
        }
        Pane::Watermark => {
            if let Some(msg) = &d.watermark.empty {
                frame.render_widget(
                    Paragraph::new(msg.as_str()).style(theme.style(Role::Dim)),
                    inner,
                );
                return;
            }
            let text: Vec<Line> = d
                .watermark
                .lines
                .iter()
                .map(|(k, v)| {
                    Line::from(vec![
                        Span::styled(format!("{k:<22}"), theme.style(Role::Dim)),
                        Span::raw(v.clone()),
                    ])
                })
                .collect();
            // A flow of several inputs: their watermarks below, the chart above.
            let inner = if d.watermark.inputs.is_empty() {
                inner
            } else {
                let n = (d.watermark.inputs.len() as u16 + 1).min(inner.height / 2);
                let [top, bottom] =
                    Layout::vertical([Constraint::Fill(1), Constraint::Length(n)]).areas(inner);
                draw_input_watermarks(frame, bottom, &d.watermark.inputs, theme);
                top
            };
            if inner.width >= 76 {
                let [left, right] =
                    Layout::horizontal([Constraint::Length(45), Constraint::Fill(1)]).areas(inner);
                frame.render_widget(Paragraph::new(text), left);
                draw_chart(frame, right, &d.watermark.chart, theme);
            } else {
                let n = text.len() as u16;
                let [top, rest] =
                    Layout::vertical([Constraint::Length(n), Constraint::Fill(1)]).areas(inner);
                frame.render_widget(Paragraph::new(text), top);
                if rest.height >= 5 {
                    draw_chart(frame, rest, &d.watermark.chart, theme);
                }
            }
        }
        Pane::State => {
            if let Some(msg) = &d.state.empty {
                frame.render_widget(
                    Paragraph::new(msg.as_str()).style(theme.style(Role::Dim)),
                    inner,
                );
                return;
            }
            let [note, rest] =
                Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(inner);
            frame.render_widget(
                Paragraph::new(Span::styled(
                    d.state.note.clone().unwrap_or_default(),
                    theme.style(Role::Dim),
                )),
                note,
            );
            let header = Row::new(["OPERATOR", "ROWS", "UPD", "REM", "LATE", "MEMORY", "DISK"])
                .style(theme.style(Role::Title));
            let visible = rest.height.saturating_sub(1) as usize;
            let skip = clamp_scroll(scroll, d.state.operators.len(), visible);
            let rows = d.state.operators.iter().skip(skip).map(|o| {
                Row::new([
                    o.name.clone(),
                    o.rows.clone(),
                    o.updated.clone(),
                    o.removed.clone(),
                    o.dropped.clone(),
                    o.memory.clone(),
                    o.disk.clone(),
                ])
            });
            let widths = [
                Constraint::Fill(1),
                Constraint::Length(6),
                Constraint::Length(5),
                Constraint::Length(5),
                Constraint::Length(5),
                Constraint::Length(8),
                Constraint::Length(8),
            ];
            frame.render_widget(Table::new(rows, widths).header(header), rest);
        }
        Pane::Durations => draw_durations(frame, inner, d, scroll, theme),
        Pane::History => {
            if d.history.is_empty() {
                frame.render_widget(
                    Paragraph::new("no batch yet").style(theme.style(Role::Dim)),
                    inner,
                );
                return;
            }
            let full = inner.width >= 70;
            let mut head = vec!["BATCH"];
            if full {
                head.push("OFFSETS");
            }
            head.extend(["FILES", "IN", "OUT", "TIME", "DELTA", "STATE"]);
            let visible = inner.height.saturating_sub(1) as usize;
            let skip = clamp_scroll(scroll, d.history.len(), visible);
            let rows = d.history.iter().skip(skip).take(visible).map(|h| {
                let mut cells = vec![Cell::from(h.batch.clone())];
                if full {
                    cells.push(Cell::from(h.offsets.clone()));
                }
                cells.extend([
                    Cell::from(h.files.clone()),
                    Cell::from(h.input_rows.clone()),
                    Cell::from(h.output_rows.clone()),
                    Cell::from(h.duration.clone()),
                    Cell::from(h.delta_version.clone()),
                    Cell::from(Span::styled(h.state.clone(), theme.style(h.role))),
                ]);
                Row::new(cells)
            });
            let mut widths = vec![Constraint::Length(6)];
            if full {
                widths.push(Constraint::Length(11));
            }
            widths.extend([
                Constraint::Length(5),
                Constraint::Length(6),
                Constraint::Length(6),
                Constraint::Length(10),
                Constraint::Length(5),
                Constraint::Fill(1),
            ]);
            frame.render_widget(
                Table::new(rows, widths).header(Row::new(head).style(theme.style(Role::Title))),
                inner,
            );
        }
        Pane::Timeline => {
            // The pane's block is already drawn: list rows without another border.
            if d.timeline.is_empty() {
                frame.render_widget(
                    Paragraph::new("nothing yet").style(theme.style(Role::Dim)),
                    inner,
                );
                return;
            }
            let visible = inner.height as usize;
            let skip = clamp_scroll(scroll, d.timeline.len(), visible);
            let rows = d.timeline.iter().skip(skip).take(visible).map(|e| {
                Row::new([
                    Cell::from(e.time.clone()),
                    Cell::from(Span::styled(e.kind, theme.style(e.role))),
                    Cell::from(e.text.clone()),
                ])
            });
            frame.render_widget(
                Table::new(
                    rows,
                    [
                        Constraint::Length(9),
                        Constraint::Length(8),
                        Constraint::Fill(1),
                    ],
                ),
                inner,
            );
        }
    }
}

/// Each input's own watermark (a union, a stream-stream join), the holder marked.
fn draw_input_watermarks(frame: &mut Frame, area: Rect, rows: &[InputWatermarkRow], theme: Theme) {
    let wide = area.width >= 100;
    let mut head = vec!["INPUT", "WATERMARK", "AHEAD", "ROWS", "NOTE"];
    let mut widths = vec![
        Constraint::Length(15),
        Constraint::Length(15),
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Fill(1),
    ];
    if wide {
        head.push("SOURCE");
        widths[4] = Constraint::Length(32);
        widths.push(Constraint::Fill(1));
    }
    let table_rows = rows.iter().map(|r| {
        let style = theme.style(r.role);
        let mut cells = vec![
            Cell::from(Span::styled(r.input.clone(), style)),
            Cell::from(r.watermark.clone()),
            Cell::from(r.ahead.clone()),
            Cell::from(r.rows.clone()),
            Cell::from(Span::styled(r.note.clone(), style)),
        ];
        if wide {
            cells.push(Cell::from(r.source.clone()));
        }
        Row::new(cells)
    });
    frame.render_widget(
        Table::new(table_rows, widths).header(Row::new(head).style(theme.style(Role::Title))),
        area,
    );
}

/// A Kafka flow's partitions, furthest behind first.
fn draw_lag(frame: &mut Frame, area: Rect, rows: &[LagRow], scroll: usize, theme: Theme) {
    let header = Row::new(["PARTITION", "LATEST", "COMMITTED", "LAG", "LAG TIME"])
        .style(theme.style(Role::Title));
    let visible = area.height.saturating_sub(1) as usize;
    let skip = clamp_scroll(scroll, rows.len(), visible);
    let body = rows.iter().skip(skip).take(visible).map(|r| {
        Row::new([
            Cell::from(r.partition.clone()),
            Cell::from(r.latest.clone()),
            Cell::from(r.committed.clone()),
            Cell::from(Span::styled(r.messages.clone(), theme.style(r.role))),
            Cell::from(r.time.clone()),
        ])
    });
    let widths = [
        Constraint::Fill(1),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(8),
        Constraint::Length(9),
    ];
    frame.render_widget(Table::new(body, widths).header(header), area);
}

fn draw_durations(frame: &mut Frame, area: Rect, d: &DetailSnap, scroll: usize, theme: Theme) {
    if d.durations.is_empty() {
        frame.render_widget(
            Paragraph::new("no batch yet").style(theme.style(Role::Dim)),
            area,
        );
        return;
    }
    let [legend, rest] = Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    let short = ["latest", "get", "add", "wal", "commit"];
    let mut spans = Vec::new();
    for (i, name) in PHASES.iter().enumerate() {
        spans.push(Span::styled(
            theme.phase_glyph(i).to_string(),
            theme.style(Role::Phase(i)),
        ));
        spans.push(Span::raw(format!(
            " {} ",
            if area.width >= 80 { name } else { short[i] }
        )));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), legend);
    let numbers = rest.width >= 50;
    let fixed: u16 = if numbers { 6 + 7 * 6 + 7 } else { 6 + 8 };
    let bar_w = rest.width.saturating_sub(fixed + 1);
    let max_total = d
        .durations
        .iter()
        .map(|r| r.total.max(r.phases.iter().sum()))
        .max()
        .unwrap_or(1)
        .max(1);
    let visible = rest.height.saturating_sub(1) as usize;
    let skip = clamp_scroll(scroll, d.durations.len(), visible);
    let rows = d.durations.iter().skip(skip).take(visible).map(|r| {
        let mut cells = vec![Cell::from(r.batch_id.to_string())];
        if numbers {
            cells.extend(
                r.phases
                    .iter()
                    .map(|v| Cell::from(format::duration_ms(*v as i64))),
            );
        }
        cells.push(Cell::from(format::duration_ms(r.total as i64)));
        if bar_w >= 4 {
            let mut bar = Vec::new();
            let mut used = 0u16;
            for (i, v) in r.phases.iter().enumerate() {
                let n = ((*v as f64 / max_total as f64) * f64::from(bar_w)).round() as u16;
                let n = n.min(bar_w - used);
                used += n;
                if n > 0 {
                    bar.push(Span::styled(
                        theme.phase_glyph(i).repeat(usize::from(n)),
                        theme.style(Role::Phase(i)),
                    ));
                }
            }
            cells.push(Cell::from(Line::from(bar)));
        }
        Row::new(cells)
    });
    let mut head = vec!["BATCH"];
    let mut widths = vec![Constraint::Length(6)];
    if numbers {
        head.extend(short);
        widths.extend([Constraint::Length(7); 5]);
    }
    head.push("TOTAL");
    widths.push(Constraint::Length(7));
    if bar_w >= 4 {
        head.push("");
        widths.push(Constraint::Length(bar_w));
    }
    frame.render_widget(
        Table::new(rows, widths).header(Row::new(head).style(theme.style(Role::Title))),
        rest,
    );
}

fn draw_chart(frame: &mut Frame, area: Rect, c: &ChartSnap, theme: Theme) {
    if area.height < 4 || area.width < 12 {
        return;
    }
    if let Some(msg) = &c.empty {
        frame.render_widget(
            Paragraph::new(msg.as_str()).style(theme.style(Role::Dim)),
            area,
        );
        return;
    }
    // A key line instead of a legend box: small charts keep all their rows for data.
    let [key, area] = Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    let mut spans = Vec::new();
    let mut datasets = Vec::new();
    for s in &c.series {
        let role = if s.index == 0 {
            Role::Series1
        } else {
            Role::Series2
        };
        spans.push(Span::styled(
            format!("{} ", theme.series_key(s.index)),
            theme.style(role),
        ));
        spans.push(Span::raw(format!("{}  ", s.name)));
        for seg in &s.segments {
            datasets.push(
                Dataset::default()
                    .data(seg)
                    .marker(theme.marker(s.index))
                    .graph_type(if seg.len() == 1 {
                        GraphType::Scatter
                    } else {
                        GraphType::Line
                    })
                    .style(theme.style(role)),
            );
        }
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), key);
    let axis_style = theme.style(Role::Dim);
    let chart = Chart::new(datasets)
        .x_axis(
            Axis::default()
                .bounds(c.x_bounds)
                .labels(c.x_labels.clone())
                .style(axis_style),
        )
        .y_axis(
            Axis::default()
                .bounds(c.y_bounds)
                .labels(c.y_labels.clone())
                .style(axis_style),
        )
        .legend_position(None);
    frame.render_widget(chart, area);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::pane::overview::delay_clock;

    #[test]
    fn the_watermark_pane_names_the_source_holding_a_unions_watermark() {
        let record = |ts: &str, eu_rows: u64, us_wm: Option<&str>| {
            let mut p = crate::records::StreamingQueryProgress {
                timestamp: ts.into(),
                ..Default::default()
            };
            p.event_time
                .insert("watermark".into(), "2024-05-01T10:00:25.000Z".into());
            p.event_time
                .insert("max".into(), "2024-05-01T10:01:25.000Z".into());
            for (name, rows) in [
                ("files:json landing/eu", eu_rows),
                ("files:json landing/us", 7),
            ] {
                p.sources.push(crate::records::SourceProgress {
                    description: name.into(),
                    num_input_rows: rows,
                    ..Default::default()
                });
            }
            p.weir.watermark_held_by = Some("files:json landing/eu".into());
            p.weir.source_watermarks = vec![
                crate::records::SourceWatermark {
                    source: "files:json landing/eu".into(),
                    watermark: Some("2024-05-01T10:00:25.000Z".into()),
                    holds_watermark: true,
                },
                crate::records::SourceWatermark {
                    source: "files:json landing/us".into(),
                    watermark: us_wm.map(str::to_string),
                    holds_watermark: false,
                },
            ];
            Sample::from_progress(&p).unwrap()
        };
        let older = record("2024-05-01T10:00:20.000Z", 0, None);
        let sample = record(
            "2024-05-01T10:00:30.000Z",
            0,
            Some("2024-05-01T10:04:25.000Z"),
        );
        let chart = ChartSnap {
            x_bounds: [0.0, 1.0],
            x_labels: Vec::new(),
            y_bounds: [0.0, 1.0],
            y_labels: Vec::new(),
            series: Vec::new(),
            empty: None,
        };
        let snap = watermark_snap(Some(&sample), sample.max_event_ms, sample.t_ms, None, chart);
        let lines: Vec<String> = snap
            .lines
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        assert!(
            lines.contains(&"event-time lag: 1m 00s (max - wm)".to_string()),
            "{lines:?}"
        );
        let inputs = input_watermarks(&[&older, &sample], &FlowModel::new("u"));
        assert_eq!(inputs.len(), 2);
        assert_eq!(inputs[0].input, "1 eu");
        assert_eq!(inputs[0].note, "holds watermark, idle 2 batches");
        assert_eq!(
            inputs[0].role,
            Role::Bad,
            "an idle input holding the watermark"
        );
        assert_eq!(inputs[0].ahead, "0");
        assert_eq!(inputs[1].ahead, "+4m 00s");
        assert_eq!(inputs[1].rows, "7");
        assert_eq!(inputs[1].note, "");
    }

    #[test]
    fn a_replay_measures_delays_against_its_simulated_clock() {
        let clock = ReplayClock {
            clock: Some(crate::demo::replay::SimulatedClock {
                wall_start_ms: 1_000_000,
                sim_start_ms: 50_000,
                speed: 3600.0,
            }),
            last_landed_ms: 3_600_000,
            done: false,
        };
        // One wall second later the simulated clock has moved an hour.
        assert_eq!(clock.at(1_001_000), Some(50_000 + 3_600_000));
        let done = ReplayClock {
            done: true,
            ..clock
        };
        assert_eq!(
            done.at(9_000_000),
            Some(3_600_000),
            "a finished replay's clock stops"
        );
        assert_eq!(delay_clock(None, 42), 42);
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.3), 4.0);
        assert_eq!(nice_ceiling(1100.0), 1500.0);
        assert_eq!(nice_ceiling(100.0), 100.0);
    }
}
