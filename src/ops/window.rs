//! Event-time windows as grouping keys: `window(col, '5 minutes')` (tumbling) and
//! `window(col, '10 minutes', '5 minutes')` (sliding), with Spark's optional fourth
//! argument, a start offset (`window(col, '1 hour', '1 hour', '15 minutes')`).
//!
//! Windows are `[start, end)`: an event exactly at a window's end belongs to the next
//! window. Window starts are aligned to the epoch plus the offset:
//! `start = t - ((t - offset) mod slide)` for the last window containing `t`, and a
//! sliding window assigns a row to every window `start - k * slide` that still contains
//! it (`ceil(size / slide)` at most), replicating the row once per window.
//!
//! Spark's `window` column is a struct `window.start` / `window.end`; weir flattens it
//! to two columns, `window_start` and `window_end` (timestamps, microseconds, UTC), so
//! that the result fits a Delta table and a SQL `GROUP BY` without struct access.
//! `window(...) AS w` names them `w_start` and `w_end`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow::compute::kernels::cmp::gt;
use arrow::compute::{concat_batches, filter_record_batch, is_not_null};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType};

use super::watermark::event_time_column;
use crate::error::{Error, Result};

/// A parsed `window(...)` grouping item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSpec {
    /// The event-time column.
    pub column: String,
    pub size_us: i64,
    pub slide_us: i64,
    pub start_offset_us: i64,
    /// `AS` name; the columns are `<alias>_start` / `<alias>_end` (default `window`).
    pub alias: Option<String>,
    /// The duration arguments as written (for the fingerprint and messages).
    pub args: Vec<String>,
}

/// The most windows one row may belong to (`ceil(window / slide)`): a sliding window
/// copies each row once per window, so `window(ts, '100000 days', '1 us')` is refused
/// when the flow is loaded instead of exhausting memory on the first batch.
pub const MAX_WINDOWS_PER_ROW: i64 = 10_000;

/// The timestamp type of window bounds.
pub fn window_bound_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")))
}

impl WindowSpec {
    /// `Some(window)` if `item` is a `window(...)` call (optionally `AS alias`), `None` if
    /// it is another expression, an error if it is a malformed `window(...)`.
    pub fn parse_item(item: &str) -> std::result::Result<Option<WindowSpec>, String> {
        let (expr, alias) = split_alias(item);
        let trimmed = expr.trim();
        let lower = trimmed.to_ascii_lowercase();
        let Some(rest) = lower.strip_prefix("window") else {
            return Ok(None);
        };
        if !rest.trim_start().starts_with('(') || !trimmed.ends_with(')') {
            return Ok(None);
        }
        let open = trimmed.find('(').unwrap_or(0);
        let inner = &trimmed[open + 1..trimmed.len() - 1];
        if matching_paren(trimmed, open) != Some(trimmed.len() - 1) {
            return Ok(None);
        }
        let args = split_top_level(inner, ',');
        if !(2..=4).contains(&args.len()) {
            return Err(format!(
                "`{trimmed}`: window takes a column and one to three durations: window(ts, '5 minutes'), \
                 window(ts, '10 minutes', '5 minutes') or window(ts, '1 hour', '1 hour', '15 minutes')"
            ));
        }
        let column = unquote_ident(args[0].trim());
        let durations = args[1..]
            .iter()
            .map(|a| duration_literal(a.trim()).map_err(|e| format!("`{trimmed}`: {e}")))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let size_us = durations[0].1;
        let slide_us = durations.get(1).map_or(size_us, |d| d.1);
        let start_offset_us = durations.get(2).map_or(0, |d| d.1);
        if size_us <= 0 || slide_us <= 0 {
            return Err(format!("`{trimmed}`: window durations must be positive"));
        }
        if slide_us > size_us {
            return Err(format!(
                "`{trimmed}`: the slide ({}) must not be longer than the window ({})",
                durations[1].0, durations[0].0
            ));
        }
        let windows_per_row = size_us / slide_us + i64::from(size_us % slide_us != 0);
        if windows_per_row > MAX_WINDOWS_PER_ROW {
            return Err(format!(
                "`{trimmed}`: a row would belong to {windows_per_row} windows (window / slide); \
                 at most {MAX_WINDOWS_PER_ROW} are allowed, since each row is copied once per window: \
                 use a longer slide or a shorter window"
            ));
        }
        if start_offset_us.abs() >= slide_us {
            return Err(format!(
                "`{trimmed}`: the start offset must be shorter than the slide (as in Spark)"
            ));
        }
        Ok(Some(WindowSpec {
            column,
            size_us,
            slide_us,
            start_offset_us,
            alias: alias.map(|a| unquote_ident(&a)),
            args: durations.into_iter().map(|d| d.0).collect(),
        }))
    }

    pub fn is_tumbling(&self) -> bool {
        self.slide_us == self.size_us
    }

    fn prefix(&self) -> &str {
        self.alias.as_deref().unwrap_or("window")
    }

    /// Name of the window-start column (`window_start`).
    pub fn start_column(&self) -> String {
        format!("{}_start", self.prefix())
    }

    /// Name of the window-end column (`window_end`).
    pub fn end_column(&self) -> String {
        format!("{}_end", self.prefix())
    }

    /// Canonical text, e.g. `window(ts, '10 minutes', '5 minutes')`.
    pub fn describe(&self) -> String {
        let args: Vec<String> = self.args.iter().map(|a| format!("'{a}'")).collect();
        format!("window({}, {})", self.column, args.join(", "))
    }

    /// `schema` plus the two window columns.
    pub fn output_schema(&self, schema: &SchemaRef) -> SchemaRef {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(self.start_column(), window_bound_type(), false));
        fields.push(Field::new(self.end_column(), window_bound_type(), false));
        Arc::new(Schema::new(fields))
    }

    /// Appends the window columns to `batch`, one output row per (row, window) pair.
    /// Rows with a null (or unparseable) event time belong to no window: they are left
    /// out and counted (the second value).
    pub fn assign(&self, batch: &RecordBatch) -> Result<(RecordBatch, usize)> {
        let arrow = |source| Error::Arrow {
            context: format!("assigning {}", self.describe()),
            source,
        };
        let schema = self.output_schema(&batch.schema());
        let ts = event_time_column(batch, &self.column)?;
        let (size, slide, offset) = (self.size_us, self.slide_us, self.start_offset_us);
        let last_start: Int64Array =
            ts.unary(|t| t.saturating_sub(t.saturating_sub(offset).rem_euclid(slide)));
        let valid = is_not_null(&ts).map_err(arrow)?;
        let windows_per_row = size / slide + i64::from(size % slide != 0);
        let mut parts = Vec::with_capacity(windows_per_row.clamp(0, MAX_WINDOWS_PER_ROW) as usize);
        for k in 0..windows_per_row {
            let start: Int64Array = last_start.unary(|s| s.saturating_sub(k.saturating_mul(slide)));
            let end: Int64Array = start.unary(|s| s.saturating_add(size));
            let mask = if k == 0 {
                valid.clone()
            } else {
                let contains = gt(&end, &ts).map_err(arrow)?;
                arrow::compute::and(&contains, &valid).map_err(arrow)?
            };
            let mask = if mask.null_count() > 0 {
                arrow::compute::prep_null_mask_filter(&mask)
            } else {
                mask
            };
            if mask.true_count() == 0 {
                continue;
            }
            let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
            columns.push(bound_array(start));
            columns.push(bound_array(end));
            let full = RecordBatch::try_new(schema.clone(), columns).map_err(arrow)?;
            parts.push(if mask.true_count() == full.num_rows() {
                full
            } else {
                filter_record_batch(&full, &mask).map_err(arrow)?
            });
        }
        let assigned = concat_batches(&schema, &parts).map_err(arrow)?;
        Ok((assigned, ts.null_count()))
    }
}

fn bound_array(values: Int64Array) -> ArrayRef {
    let ts: TimestampMicrosecondArray = values.reinterpret_cast::<TimestampMicrosecondType>();
    // Null slots (null event times) are filtered out by the caller; the column is non-nullable.
    let ts = TimestampMicrosecondArray::new(ts.values().clone(), None).with_timezone("UTC");
    Arc::new(ts)
}

/// Splits `expr AS alias` at a top-level `AS` (case-insensitive).
pub(crate) fn split_alias(item: &str) -> (String, Option<String>) {
    let words = split_top_level(item, ' ');
    let words: Vec<&str> = words
        .iter()
        .map(|w| w.trim())
        .filter(|w| !w.is_empty())
        .collect();
    if words.len() >= 3 && words[words.len() - 2].eq_ignore_ascii_case("as") {
        let alias = words[words.len() - 1].to_string();
        let cut = item
            .to_ascii_lowercase()
            .rfind(" as ")
            .unwrap_or(item.len());
        return (item[..cut].trim().to_string(), Some(alias));
    }
    (item.trim().to_string(), None)
}

fn matching_paren(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    for (i, c) in text.char_indices().skip_while(|(i, _)| *i < open) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' | '`' => quote = Some(c),
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            },
        }
    }
    None
}

/// Splits at `sep` outside quotes and parentheses.
fn split_top_level(text: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                current.push(c);
            }
            None => {
                if c == sep && depth == 0 {
                    out.push(std::mem::take(&mut current));
                    continue;
                }
                match c {
                    '\'' | '"' | '`' => quote = Some(c),
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                current.push(c);
            }
        }
    }
    out.push(current);
    out
}

fn unquote_ident(text: &str) -> String {
    let t = text.trim();
    for q in ['"', '`'] {
        if t.len() >= 2 && t.starts_with(q) && t.ends_with(q) {
            return t[1..t.len() - 1].replace(&format!("{q}{q}"), &q.to_string());
        }
    }
    t.to_string()
}

/// `text` without a leading `INTERVAL` keyword (case-insensitive; never slices inside a
/// character of user text).
fn strip_interval(text: &str) -> &str {
    match (text.get(..8), text.get(8..)) {
        (Some(head), Some(rest)) if !rest.is_empty() && head.eq_ignore_ascii_case("interval") => {
            rest.trim()
        }
        _ => text,
    }
}

/// `'10 minutes'` or `INTERVAL '10 minutes'` -> ("10 minutes", microseconds).
fn duration_literal(text: &str) -> std::result::Result<(String, i64), String> {
    let t = strip_interval(text.trim());
    let inner = t
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .ok_or_else(|| format!("{text} is not a duration string such as '5 minutes'"))?;
    let inner = strip_interval(inner.trim());
    let d = crate::spec::units::HumanDuration::parse(inner)?;
    let us = i64::try_from(d.0.as_micros()).map_err(|_| format!("{text} is too long"))?;
    Ok((inner.to_string(), us))
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, StringArray};

    use super::*;

    fn ts_batch(times: &[Option<&str>]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("ts", DataType::Utf8, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(times.to_vec()))]).unwrap()
    }

    fn bounds(batch: &RecordBatch) -> Vec<(i64, i64)> {
        let s = batch.column(1).as_primitive::<TimestampMicrosecondType>();
        let e = batch.column(2).as_primitive::<TimestampMicrosecondType>();
        let mut v: Vec<_> = (0..batch.num_rows())
            .map(|i| (s.value(i), e.value(i)))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn parse_window_items() {
        let w = WindowSpec::parse_item("window(ts, '10 seconds')")
            .unwrap()
            .unwrap();
        assert_eq!(
            (w.size_us, w.slide_us, w.start_offset_us),
            (10_000_000, 10_000_000, 0)
        );
        assert_eq!(
            (w.start_column(), w.end_column()),
            ("window_start".into(), "window_end".into())
        );
        let w = WindowSpec::parse_item(
            "WINDOW(\"Event Time\", INTERVAL '10 minutes', '5 minutes') AS w",
        )
        .unwrap()
        .unwrap();
        assert_eq!(w.column, "Event Time");
        assert_eq!((w.size_us, w.slide_us), (600_000_000, 300_000_000));
        assert_eq!(w.start_column(), "w_start");
        assert_eq!(
            w.describe(),
            "window(Event Time, '10 minutes', '5 minutes')"
        );
        assert_eq!(WindowSpec::parse_item("origin").unwrap(), None);
        assert_eq!(WindowSpec::parse_item("window_start").unwrap(), None);
        assert!(WindowSpec::parse_item("window(ts)").is_err());
        assert!(WindowSpec::parse_item("window(ts, '1 minute', '2 minutes')").is_err());
        assert!(WindowSpec::parse_item("window(ts, 'soon')").is_err());
    }

    #[test]
    fn tumbling_windows_are_end_exclusive() {
        let w = WindowSpec::parse_item("window(ts, '10 seconds')")
            .unwrap()
            .unwrap();
        let (out, nulls) = w
            .assign(&ts_batch(&[
                Some("1970-01-01T00:00:09.999Z"),
                Some("1970-01-01T00:00:10Z"),
                Some("1969-12-31T23:59:59Z"),
                None,
            ]))
            .unwrap();
        assert_eq!(nulls, 1);
        assert_eq!(
            bounds(&out),
            vec![(-10_000_000, 0), (0, 10_000_000), (10_000_000, 20_000_000)]
        );
    }

    #[test]
    fn sliding_windows_replicate_rows() {
        let w = WindowSpec::parse_item("window(ts, '10 seconds', '5 seconds')")
            .unwrap()
            .unwrap();
        let (out, _) = w
            .assign(&ts_batch(&[Some("1970-01-01T00:00:07Z")]))
            .unwrap();
        assert_eq!(bounds(&out), vec![(0, 10_000_000), (5_000_000, 15_000_000)]);
        // Size not a multiple of the slide: starts are multiples of 4 s; [-4 s, 6 s) misses 7 s.
        let w = WindowSpec::parse_item("window(ts, '10 seconds', '4 seconds')")
            .unwrap()
            .unwrap();
        let (out, _) = w
            .assign(&ts_batch(&[Some("1970-01-01T00:00:07Z")]))
            .unwrap();
        assert_eq!(bounds(&out), vec![(0, 10_000_000), (4_000_000, 14_000_000)]);
        // With an offset of 1 s: windows start at 1, 5, 9, ... (and -3).
        let w = WindowSpec::parse_item("window(ts, '8 seconds', '4 seconds', '1 second')")
            .unwrap()
            .unwrap();
        let (out, _) = w
            .assign(&ts_batch(&[Some("1970-01-01T00:00:05Z")]))
            .unwrap();
        assert_eq!(
            bounds(&out),
            vec![(1_000_000, 9_000_000), (5_000_000, 13_000_000)]
        );
    }
}
