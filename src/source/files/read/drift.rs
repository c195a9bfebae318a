//! What one file shows beyond its schema: fields the schema lacks (with the type
//! their values infer to) and values of known fields that did not fit. Only the
//! rescue paths of the decoders touch it.

use std::collections::{HashMap, HashSet};

use arrow::datatypes::{DataType, Schema};
use serde_json::Value;

use super::DecodedFile;
use crate::schema::evolve::{FieldMismatch, NewField, type_at};
use crate::schema::infer::InferredType;

/// How a field's type is known: from its values, or declared (Parquet).
#[derive(Debug, Clone, Default)]
struct Typed {
    values: InferredType,
    declared: Option<DataType>,
}

impl Typed {
    fn values(&mut self) -> &mut InferredType {
        &mut self.values
    }

    fn into_arrow(self) -> DataType {
        match self.declared {
            Some(t) => t,
            None => self.values.into_arrow(),
        }
    }
}

/// The drift of one file.
#[derive(Debug, Default)]
pub(super) struct Drift {
    new: Vec<(Vec<String>, Typed)>,
    new_index: HashMap<Vec<String>, usize>,
    /// Lower-cased paths of the new fields: a later case variant is not a new field.
    new_folded: HashSet<Vec<String>>,
    mismatches: Vec<(Vec<String>, usize, Typed)>,
    mismatch_index: HashMap<Vec<String>, usize>,
    /// The first misfit since [`Drift::take_first_mismatch`]: its path and value text.
    first_mismatch: Option<(Vec<String>, String)>,
}

/// A new field's slot in [`Drift`].
pub(super) type Slot = usize;

impl Drift {
    /// The slot of the new field at `path`; `None` when the path is a case variant of
    /// a new field seen earlier in the file (first spelling wins).
    pub fn new_field(&mut self, path: Vec<String>) -> Option<Slot> {
        if let Some(&slot) = self.new_index.get(&path) {
            return Some(slot);
        }
        let folded: Vec<String> = path.iter().map(|s| s.to_lowercase()).collect();
        if !self.new_folded.insert(folded) {
            return None;
        }
        let slot = self.new.len();
        self.new_index.insert(path.clone(), slot);
        self.new.push((path, Typed::default()));
        Some(slot)
    }

    /// A JSON value of a new field (null only marks it as seen).
    pub fn new_json(&mut self, slot: Slot, value: &Value) {
        if let Some((_, typed)) = self.new.get_mut(slot) {
            typed.values().absorb_json(value);
        }
    }

    /// A CSV text value of a new field (never null).
    pub fn new_text(&mut self, slot: Slot, text: &str) {
        if let Some((_, typed)) = self.new.get_mut(slot) {
            let t = typed.values();
            if t.is_open() {
                t.absorb_text(text);
            }
        }
    }

    /// Whether a CSV value of this new field can still change its type.
    pub fn new_is_open(&self, slot: Slot) -> bool {
        self.new
            .get(slot)
            .is_some_and(|(_, t)| t.declared.is_none() && t.values.is_open())
    }

    /// The declared type of a new field (Parquet).
    pub fn new_declared(&mut self, slot: Slot, data_type: DataType) {
        if let Some((_, typed)) = self.new.get_mut(slot) {
            typed.declared = Some(data_type);
        }
    }

    fn mismatch_slot(&mut self, path: &[&str]) -> &mut (Vec<String>, usize, Typed) {
        let owned: Vec<String> = path.iter().map(|s| (*s).to_string()).collect();
        let slot = match self.mismatch_index.get(&owned) {
            Some(&slot) => slot,
            None => {
                let slot = self.mismatches.len();
                self.mismatch_index.insert(owned.clone(), slot);
                self.mismatches.push((owned, 0, Typed::default()));
                slot
            }
        };
        &mut self.mismatches[slot]
    }

    /// The first value that did not fit since the last call (`mode = "failfast"`):
    /// its field's path and the value's text.
    pub fn take_first_mismatch(&mut self) -> Option<(Vec<String>, String)> {
        self.first_mismatch.take()
    }

    fn note_first(&mut self, path: &[&str], text: impl FnOnce() -> String) {
        if self.first_mismatch.is_none() {
            self.first_mismatch = Some((path.iter().map(|s| (*s).to_string()).collect(), text()));
        }
    }

    /// A JSON value of the known field at `path` that did not fit.
    pub fn mismatch_json(&mut self, path: &[&str], value: &Value) {
        self.note_first(path, || crate::schema::infer::display_json(value));
        let entry = self.mismatch_slot(path);
        entry.1 += 1;
        entry.2.values().absorb_json(value);
    }

    /// A CSV text value of the known field at `path` that did not fit.
    pub fn mismatch_text(&mut self, path: &[&str], text: &str) {
        self.note_first(path, || format!("{text:?}"));
        let entry = self.mismatch_slot(path);
        entry.1 += 1;
        let t = entry.2.values();
        if t.is_open() {
            t.absorb_text(text);
        }
    }

    /// `count` values of the known field at `path`, of the file's `found` type, did not fit.
    pub fn mismatch_declared(&mut self, path: &[&str], count: usize, found: DataType) {
        let entry = self.mismatch_slot(path);
        entry.1 += count;
        entry.2.declared = Some(found);
    }

    /// Moves the findings into `out`, in first-seen order.
    pub fn finish(self, schema: &Schema, file: &str, out: &mut DecodedFile) {
        out.new_fields = self
            .new
            .into_iter()
            .map(|(path, typed)| NewField {
                path,
                data_type: typed.into_arrow(),
                file: file.to_string(),
            })
            .collect();
        out.type_mismatches = self
            .mismatches
            .into_iter()
            .map(|(path, count, typed)| FieldMismatch {
                expected: type_at(schema, &path).cloned().unwrap_or(DataType::Null),
                path,
                file: file.to_string(),
                count,
                found: typed.into_arrow(),
            })
            .collect();
    }
}
