//! Event-time watermarks (Spark's `withWatermark`): which rows are late, the
//! event-time statistics of a batch, and how the watermark advances.
//!
//! - The watermark of batch N is `max(event time seen through batch N-1) - delay`,
//!   never lower than the previous one ([`next_watermark`]); the engine stores it in
//!   `offsets/N` (`batchWatermarkMs`). It starts at 0, like Spark's.
//! - A row is **late** when its event time is strictly before the watermark
//!   (`event_time < watermark`): an event exactly at the watermark is on time (case B19).
//! - A row whose event time is null or cannot be parsed is neither on time nor late: it is
//!   returned apart ([`Split::invalid`]) so the engine routes it (late-rows table or
//!   rescue); it is never dropped silently.
//!
//! The event-time column may be a timestamp (any unit, with or without a time zone;
//! naive means UTC), a date, or a string parsed as an ISO-8601 timestamp. Times are
//! handled in microseconds; the watermark and the progress statistics are milliseconds.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, Scalar};
use arrow::compute::kernels::cmp::{gt_eq, lt};
use arrow::compute::{CastOptions, cast_with_options, filter_record_batch, is_null};
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use arrow::util::display::FormatOptions;

use crate::error::{Error, Result};
use crate::spec::{WatermarkPolicy, WatermarkSpec};

/// Event-time statistics of the on-time rows of a batch (progress `eventTime`), in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTimeStats {
    pub min_ms: i64,
    pub max_ms: i64,
    pub avg_ms: i64,
    pub count: u64,
}

/// A batch split by the watermark.
#[derive(Debug, Clone, Default)]
pub struct Split {
    /// Rows with `event_time >= watermark`, unchanged (same schema as the input).
    pub on_time: Vec<RecordBatch>,
    /// Rows with `event_time < watermark`.
    pub late: Vec<RecordBatch>,
    /// Rows whose event time is null or not a parseable timestamp.
    pub invalid: Vec<RecordBatch>,
    /// Rows whose event time is beyond the future-skew guard (`max_future`).
    pub future: Vec<RecordBatch>,
    pub num_on_time: u64,
    pub num_late: u64,
    pub num_invalid: u64,
    pub num_future: u64,
    /// Over the on-time rows; `None` when there are none.
    pub event_time: Option<EventTimeStats>,
}

/// Whether a column of this type can carry event time.
pub fn check_event_time_type(
    column: &str,
    data_type: &DataType,
) -> std::result::Result<(), String> {
    match data_type {
        DataType::Timestamp(_, _)
        | DataType::Date32
        | DataType::Date64
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View => Ok(()),
        other => Err(format!(
            "column `{column}` is {other}, which cannot hold an event time: use a timestamp, a date or an \
             ISO-8601 string column (e.g. select `to_timestamp_millis({column}) AS {column}` for epoch milliseconds)"
        )),
    }
}

/// Event time of each row in microseconds since the epoch; null where the value is null
/// or (for strings) not a timestamp.
pub fn event_time_micros(array: &ArrayRef) -> Result<Int64Array> {
    let arrow = |source| Error::Arrow {
        context: "reading the event-time column".into(),
        source,
    };
    let safe = CastOptions {
        safe: true,
        format_options: FormatOptions::default(),
    };
    let ts = match array.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, _) => array.clone(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => cast_with_options(
            array,
            &DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC"))),
            &safe,
        )
        .map_err(arrow)?,
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => cast_with_options(
            array,
            &DataType::Timestamp(TimeUnit::Microsecond, None),
            &safe,
        )
        .map_err(arrow)?,
        other => {
            return Err(arrow(arrow::error::ArrowError::CastError(format!(
                "an event-time column cannot be {other}"
            ))));
        }
    };
    let micros = cast_with_options(&ts, &DataType::Int64, &safe).map_err(arrow)?;
    Ok(micros.as_primitive::<Int64Type>().clone())
}

/// The event-time column of a batch, by name.
pub fn event_time_column(batch: &RecordBatch, column: &str) -> Result<Int64Array> {
    let array = batch.column_by_name(column).ok_or_else(|| Error::Arrow {
        context: "reading the event-time column".into(),
        source: arrow::error::ArrowError::SchemaError(format!(
            "the watermark column `{column}` is not in the batch"
        )),
    })?;
    event_time_micros(array)
}

/// Splits batches into on-time, late and invalid rows by `watermark_ms` and computes
/// the on-time rows' event-time statistics. Vectorised: one comparison kernel and one
/// filter per batch and part.
pub fn split_late(
    batches: &[RecordBatch],
    spec: &WatermarkSpec,
    watermark_ms: i64,
) -> Result<Split> {
    split_late_at(batches, spec, watermark_ms, None)
}

/// [`split_late`] with the future-skew guard: with `now_ms` and the spec's
/// `max_future_ms`, rows whose event time is after `now + max_future` go to
/// [`Split::future`] and are left out of the event-time statistics, so a clock error
/// upstream (a year 2099 timestamp) cannot move the watermark past every real row.
pub fn split_late_at(
    batches: &[RecordBatch],
    spec: &WatermarkSpec,
    watermark_ms: i64,
    now_ms: Option<i64>,
) -> Result<Split> {
    let arrow = |source| Error::Arrow {
        context: format!("splitting late rows by the watermark on `{}`", spec.column),
        source,
    };
    let watermark_us = Scalar::new(Int64Array::from(vec![watermark_ms.saturating_mul(1000)]));
    let mut split = Split::default();
    let (mut min, mut max, mut sum, mut count) = (i64::MAX, i64::MIN, 0i128, 0u64);
    for batch in batches {
        if batch.num_rows() == 0 {
            continue;
        }
        let ts = event_time_column(batch, &spec.column)?;
        let mut on_time = without_nulls(gt_eq(&ts, &watermark_us).map_err(arrow)?);
        let future = match (now_ms, spec.max_future_ms) {
            (Some(now), Some(skew)) => {
                let limit_us = now.saturating_add(skew).saturating_mul(1000);
                let future = without_nulls(
                    arrow::compute::kernels::cmp::gt(
                        &ts,
                        &Scalar::new(Int64Array::from(vec![limit_us])),
                    )
                    .map_err(arrow)?,
                );
                on_time =
                    arrow::compute::and(&on_time, &arrow::compute::not(&future).map_err(arrow)?)
                        .map_err(arrow)?;
                future
            }
            _ => BooleanArray::from(vec![false; batch.num_rows()]),
        };
        let late = without_nulls(lt(&ts, &watermark_us).map_err(arrow)?);
        let invalid = is_null(&ts).map_err(arrow)?;
        for (mask, out, n) in [
            (&on_time, &mut split.on_time, &mut split.num_on_time),
            (&late, &mut split.late, &mut split.num_late),
            (&invalid, &mut split.invalid, &mut split.num_invalid),
            (&future, &mut split.future, &mut split.num_future),
        ] {
            let rows = mask.true_count();
            if rows == 0 {
                continue;
            }
            *n += rows as u64;
            if rows == batch.num_rows() {
                out.push(batch.clone());
            } else {
                out.push(filter_record_batch(batch, mask).map_err(arrow)?);
            }
        }
        let on_time_ts = arrow::compute::filter(&ts, &on_time).map_err(arrow)?;
        let on_time_ts = on_time_ts.as_primitive::<Int64Type>();
        if let (Some(lo), Some(hi)) = (
            arrow::compute::min(on_time_ts),
            arrow::compute::max(on_time_ts),
        ) {
            min = min.min(lo);
            max = max.max(hi);
            sum += on_time_ts
                .values()
                .iter()
                .map(|&v| i128::from(v))
                .sum::<i128>();
            count += on_time_ts.len() as u64;
        }
    }
    if count > 0 {
        let avg_us = i64::try_from(sum / i128::from(count)).unwrap_or(i64::MAX);
        split.event_time = Some(EventTimeStats {
            min_ms: min.div_euclid(1000),
            max_ms: max.div_euclid(1000),
            avg_ms: avg_us.div_euclid(1000),
            count,
        });
    }
    Ok(split)
}

fn without_nulls(mask: BooleanArray) -> BooleanArray {
    if mask.null_count() > 0 {
        arrow::compute::prep_null_mask_filter(&mask)
    } else {
        mask
    }
}

/// Merges the event-time statistics of several sources' rows.
pub fn merge_stats(stats: &[Option<EventTimeStats>]) -> Option<EventTimeStats> {
    let all: Vec<&EventTimeStats> = stats.iter().flatten().filter(|s| s.count > 0).collect();
    let count: u64 = all.iter().map(|s| s.count).sum();
    if count == 0 {
        return stats.iter().flatten().next().cloned();
    }
    let sum: i128 = all.iter().map(|s| s.avg_ms as i128 * s.count as i128).sum();
    Some(EventTimeStats {
        min_ms: all.iter().map(|s| s.min_ms).min().unwrap_or_default(),
        max_ms: all.iter().map(|s| s.max_ms).max().unwrap_or_default(),
        avg_ms: (sum / count as i128) as i64,
        count,
    })
}

/// The watermarks of a flow of several sources after a batch (Spark's `WatermarkTracker`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermarks {
    /// Each source's own: `max(its previous, its max event time - its delay)`; `None`
    /// while it has had no data (counted as 0, as Spark does).
    pub per_source: Vec<Option<i64>>,
    /// The flow's next watermark: the policy over the sources', never lower than before.
    pub next_ms: i64,
    /// The source whose watermark the policy chose (`None` without any watermark).
    pub held_by: Option<usize>,
}

/// Combines source watermarks as Spark's `WatermarkTracker.updateWatermark` with
/// `spark.sql.streaming.multipleWatermarkPolicy`: `prev[i]` is source `i`'s watermark
/// before the batch, `stats[i]` its batch's on-time event times, `delays[i]` its delay
/// (`None`: the source has no watermark and takes no part).
pub fn combine_watermarks(
    policy: WatermarkPolicy,
    current_ms: i64,
    prev: &[Option<i64>],
    stats: &[Option<EventTimeStats>],
    delays: &[Option<i64>],
) -> Watermarks {
    let mut per_source = Vec::with_capacity(delays.len());
    let mut candidates: Vec<(usize, i64)> = Vec::new();
    for (i, delay) in delays.iter().enumerate() {
        let before = prev.get(i).copied().flatten();
        let Some(delay) = delay else {
            per_source.push(None);
            continue;
        };
        let seen = stats
            .get(i)
            .and_then(Option::as_ref)
            .filter(|s| s.count > 0)
            .map(|s| s.max_ms.saturating_sub(*delay));
        let now = match (before, seen) {
            (Some(b), Some(s)) => Some(b.max(s)),
            (b, s) => b.or(s),
        };
        per_source.push(now);
        candidates.push((i, now.unwrap_or(0)));
    }
    let chosen = match policy {
        WatermarkPolicy::Min => candidates.iter().min_by_key(|(_, w)| *w),
        WatermarkPolicy::Max => candidates.iter().rev().max_by_key(|(_, w)| *w),
    };
    Watermarks {
        per_source,
        next_ms: chosen.map_or(current_ms, |(_, w)| current_ms.max(*w)),
        held_by: chosen.map(|(i, _)| *i),
    }
}

/// The watermark of the next batch: `max(current, max_event_time - delay)`.
pub fn next_watermark(current_ms: i64, max_event_time_ms: Option<i64>, delay_ms: i64) -> i64 {
    match max_event_time_ms {
        Some(max) => current_ms.max(max.saturating_sub(delay_ms)),
        None => current_ms,
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{StringArray, TimestampMillisecondArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;
    use crate::spec::WatermarkSpec;

    fn ms(text: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    fn strings(values: &[Option<&str>]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("ts", DataType::Utf8, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(values.to_vec()))]).unwrap()
    }

    #[test]
    fn late_is_strictly_before_the_watermark() {
        // B19: with a 0 s delay, an event equal to the watermark is on time.
        let spec = WatermarkSpec::new("ts", "0 s").unwrap();
        let batch = strings(&[
            Some("2024-05-01T10:00:05Z"),
            Some("2024-05-01T10:00:04.999Z"),
            Some("2024-05-01T10:00:10Z"),
            None,
            Some("not a time"),
        ]);
        let split = split_late(&[batch], &spec, ms("2024-05-01T10:00:05Z")).unwrap();
        assert_eq!(
            (split.num_on_time, split.num_late, split.num_invalid),
            (2, 1, 2)
        );
        let stats = split.event_time.unwrap();
        assert_eq!(stats.min_ms, ms("2024-05-01T10:00:05Z"));
        assert_eq!(stats.max_ms, ms("2024-05-01T10:00:10Z"));
        assert_eq!(stats.avg_ms, ms("2024-05-01T10:00:07.500Z"));
        assert_eq!(split.on_time[0].num_rows(), 2);
        assert_eq!(split.invalid[0].num_rows(), 2);
    }

    #[test]
    fn several_sources_min_and_max_policies() {
        let stats = |max_ms| {
            Some(EventTimeStats {
                min_ms: max_ms,
                max_ms,
                avg_ms: max_ms,
                count: 1,
            })
        };
        let delays = [Some(1_000), Some(5_000)];
        // Source 1 has no data yet: under min it holds the watermark at 0.
        let w = combine_watermarks(
            WatermarkPolicy::Min,
            0,
            &[],
            &[stats(10_000), None],
            &delays,
        );
        assert_eq!(w.per_source, [Some(9_000), None]);
        assert_eq!((w.next_ms, w.held_by), (0, Some(1)));
        let w = combine_watermarks(
            WatermarkPolicy::Max,
            0,
            &[],
            &[stats(10_000), None],
            &delays,
        );
        assert_eq!((w.next_ms, w.held_by), (9_000, Some(0)));
        // Both have data: min is the slower source's; an idle batch keeps each as it was.
        let w = combine_watermarks(
            WatermarkPolicy::Min,
            0,
            &[Some(9_000), None],
            &[None, stats(8_000)],
            &delays,
        );
        assert_eq!(w.per_source, [Some(9_000), Some(3_000)]);
        assert_eq!((w.next_ms, w.held_by), (3_000, Some(1)));
        // Never backwards.
        let w = combine_watermarks(
            WatermarkPolicy::Min,
            7_000,
            &w.per_source,
            &[None, None],
            &delays,
        );
        assert_eq!(w.next_ms, 7_000);
        let merged = merge_stats(&[stats(1_000), None, stats(3_000)]).unwrap();
        assert_eq!(
            (merged.min_ms, merged.max_ms, merged.avg_ms, merged.count),
            (1_000, 3_000, 2_000, 2)
        );
    }

    #[test]
    fn timestamp_units_and_next_watermark() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "t",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            true,
        )]));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(TimestampMillisecondArray::from(vec![
                Some(1_000),
                Some(3_000),
                None,
            ]))],
        )
        .unwrap();
        let spec = WatermarkSpec::new("t", "1 second").unwrap();
        let split = split_late(&[batch], &spec, 2_000).unwrap();
        assert_eq!(
            (split.num_on_time, split.num_late, split.num_invalid),
            (1, 1, 1)
        );
        let max = split.event_time.map(|s| s.max_ms);
        assert_eq!(next_watermark(2_000, max, spec.delay_ms), 2_000);
        assert_eq!(next_watermark(0, Some(10_000), spec.delay_ms), 9_000);
        assert_eq!(next_watermark(9_500, None, spec.delay_ms), 9_500);
        assert!(check_event_time_type("x", &DataType::Int64).is_err());
    }
}
