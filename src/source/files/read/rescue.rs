//! Collecting rescued values and corrupt records of one batch, and building the
//! `_rescued_data` column from them. Only rows that rescued something cost any work.

use std::sync::Arc;

use arrow::array::{ArrayRef, StringBuilder};
use serde_json::{Map, Value};

enum Entry {
    Field {
        key: String,
        value: Value,
    },
    Corrupt {
        raw: String,
        error: String,
        line: usize,
    },
}

/// The rescued values of one batch, in any order; sorted when the column is built.
#[derive(Default)]
pub(super) struct Rescues {
    /// (row in the batch, position in the record, entry)
    entries: Vec<(usize, usize, Entry)>,
    /// The first malformed row of the batch and why (`mode = "failfast"`).
    first_malformed: Option<(usize, String)>,
}

/// What [`Rescues::finish`] produced.
pub(super) struct RescueColumn {
    /// The `_rescued_data` column, when enabled.
    pub column: Option<ArrayRef>,
    pub rows_rescued: usize,
    pub records_corrupt: usize,
}

impl Rescues {
    /// A value of `row` that did not fit; `order` sorts the keys of a row (the field's position in the record).
    pub fn field(&mut self, row: usize, order: usize, key: impl Into<String>, value: Value) {
        self.entries.push((
            row,
            order,
            Entry::Field {
                key: key.into(),
                value,
            },
        ));
    }

    /// `row` is a record that could not be parsed (`error` says why); `line` counts from 1.
    pub fn corrupt(&mut self, row: usize, raw: String, error: String, line: usize) {
        self.malformed(row, || error.clone());
        self.entries
            .push((row, 0, Entry::Corrupt { raw, error, line }));
    }

    /// `row` is malformed (a corrupt record, a value that does not fit its column, an
    /// invalid UTF-8 field, a field past the header's width); the earliest row is kept.
    pub fn malformed(&mut self, row: usize, why: impl FnOnce() -> String) {
        if self.first_malformed.as_ref().is_none_or(|(r, _)| row < *r) {
            self.first_malformed = Some((row, why()));
        }
    }

    /// The earliest malformed row and why.
    pub fn first_malformed(&self) -> Option<&(usize, String)> {
        self.first_malformed.as_ref()
    }

    pub fn finish(mut self, num_rows: usize, file_path: &str, enabled: bool) -> RescueColumn {
        self.entries.sort_by_key(|(row, order, _)| (*row, *order));
        let mut rows_rescued = 0;
        let mut records_corrupt = 0;
        let mut builder = enabled.then(|| StringBuilder::with_capacity(num_rows, 0));
        let mut next_row = 0;
        let mut entries = self.entries.into_iter().peekable();
        while let Some((row, _, first)) = entries.next() {
            let mut group = vec![first];
            while let Some((_, _, entry)) = entries.next_if(|(r, _, _)| *r == row) {
                group.push(entry);
            }
            let corrupt = group.iter().find_map(|e| match e {
                Entry::Corrupt { raw, error, line } => Some((raw, error, *line)),
                Entry::Field { .. } => None,
            });
            if corrupt.is_some() {
                records_corrupt += 1;
            } else {
                rows_rescued += 1;
            }
            let Some(builder) = builder.as_mut() else {
                continue;
            };
            while next_row < row {
                builder.append_null();
                next_row += 1;
            }
            let mut object = Map::new();
            if let Some((raw, error, line)) = corrupt {
                // `_corrupt_record` first: the quarantine finds these rows by that prefix.
                object.insert("_corrupt_record".into(), Value::String(raw.clone()));
                object.insert("_error".into(), Value::String(error.clone()));
                object.insert("_file_path".into(), Value::String(file_path.into()));
                object.insert("_line".into(), Value::from(line));
            } else {
                for entry in group {
                    if let Entry::Field { key, value } = entry {
                        object.insert(key, value);
                    }
                }
                object.insert("_file_path".into(), Value::String(file_path.into()));
            }
            builder.append_value(Value::Object(object).to_string());
            next_row = row + 1;
        }
        let column = builder.map(|mut builder| {
            while next_row < num_rows {
                builder.append_null();
                next_row += 1;
            }
            Arc::new(builder.finish()) as ArrayRef
        });
        RescueColumn {
            column,
            rows_rescued,
            records_corrupt,
        }
    }
}
