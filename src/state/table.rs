//! [`StateTable`]: the in-memory state of one operator, a table of rows keyed
//! by their first `num_keys` columns, with the changes since the last commit.
//!
//! Rows live in one Arrow [`RecordBatch`] (so memory is the Arrow size of the
//! open keys and their values, nothing per input row) plus a hash index from
//! the key's [row format](arrow::row) bytes to the row's position. Row order is
//! deterministic: updates keep a row in place, new keys are appended in the order
//! they are upserted, removals keep the order of the rest. Loading a version from
//! disk (snapshot + deltas) reproduces the same order, so a replayed batch emits
//! its rows in the same order as the original attempt.
//!
//! Changes since the last commit are a flag per row (upserted) and the set of
//! removed keys, so tracking them costs no hashing or allocation per update.

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::{filter_record_batch, interleave, not, take_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::{HashMap, HashSet};

use crate::error::{Error, Result};

/// Changes of a [`StateTable`] since the last [`StateTable::clear_changes`].
#[derive(Debug, Clone)]
pub struct Changes {
    /// Rows inserted or replaced (full rows), in table order.
    pub upserts: RecordBatch,
    /// Key columns of removed keys (sorted by their row-format bytes, for determinism).
    pub removals: Vec<ArrayRef>,
    /// Number of removed keys (`removals` may have no columns when the table has no key).
    pub num_removals: usize,
}

/// Encoded keys of a batch, from [`StateTable::key_rows`].
pub struct KeyRows(Option<Rows>);

impl KeyRows {
    /// The key of row `i` (empty for a table without key columns).
    pub fn get(&self, i: usize) -> &[u8] {
        match &self.0 {
            Some(rows) => rows.row(i).data(),
            None => &[],
        }
    }
}

/// Where a row of [`StateTable::upsert_slots`] goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// Replaces the row at this position (from [`StateTable::lookup`]).
    At(usize),
    /// Inserts a key not in the table (its row-format bytes).
    New(Box<[u8]>),
}

/// A keyed table of state rows with change tracking (see the module docs).
pub struct StateTable {
    schema: SchemaRef,
    num_keys: usize,
    converter: RowConverter,
    data: RecordBatch,
    index: HashMap<Box<[u8]>, usize>,
    key_bytes: usize,
    /// Per row: inserted or replaced since the last `clear_changes`.
    changed: Vec<bool>,
    /// Keys removed since the last `clear_changes`.
    removed: HashSet<Box<[u8]>>,
}

/// A key column with its floating-point values normalised as Spark's
/// `NormalizeFloatingNumbers` does for grouping, deduplication and join keys: `-0.0`
/// becomes `0.0` and every NaN the one canonical NaN, so that `0.0 = -0.0` and
/// `NaN = NaN` as keys (Arrow's row format compares the bits, which tells them apart).
/// Columns of other types are returned as they are.
pub fn normalize_float_key(column: &ArrayRef) -> ArrayRef {
    use arrow::array::{AsArray, Float32Array, Float64Array};
    use arrow::datatypes::{DataType, Float32Type, Float64Type};
    match column.data_type() {
        DataType::Float64 => {
            let a = column.as_primitive::<Float64Type>();
            if !a.values().iter().any(|v| v.is_nan() || *v == 0.0) {
                return column.clone();
            }
            let values: Float64Array = a.unary(|v| {
                if v.is_nan() {
                    f64::NAN
                } else if v == 0.0 {
                    0.0
                } else {
                    v
                }
            });
            std::sync::Arc::new(values)
        }
        DataType::Float32 => {
            let a = column.as_primitive::<Float32Type>();
            if !a.values().iter().any(|v| v.is_nan() || *v == 0.0) {
                return column.clone();
            }
            let values: Float32Array = a.unary(|v| {
                if v.is_nan() {
                    f32::NAN
                } else if v == 0.0 {
                    0.0
                } else {
                    v
                }
            });
            std::sync::Arc::new(values)
        }
        _ => column.clone(),
    }
}

fn arrow_err(context: &str) -> impl Fn(arrow::error::ArrowError) -> Error + '_ {
    move |source| Error::Arrow {
        context: context.to_string(),
        source,
    }
}

impl StateTable {
    /// An empty table. The first `num_keys` fields of `schema` are the key.
    pub fn new(schema: SchemaRef, num_keys: usize) -> Result<Self> {
        if num_keys > schema.fields().len() {
            return Err(Error::Arrow {
                context: "state table".into(),
                source: arrow::error::ArrowError::SchemaError(format!(
                    "{num_keys} key columns but the schema has {} fields",
                    schema.fields().len()
                )),
            });
        }
        let converter = RowConverter::new(
            schema.fields()[..num_keys]
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )
        .map_err(arrow_err("state key encoding"))?;
        Ok(StateTable {
            data: RecordBatch::new_empty(schema.clone()),
            schema,
            num_keys,
            converter,
            index: HashMap::default(),
            key_bytes: 0,
            changed: Vec::new(),
            removed: HashSet::default(),
        })
    }

    /// A table holding `batch` (keys must be unique), with no pending changes.
    pub fn from_batch(schema: SchemaRef, num_keys: usize, batch: RecordBatch) -> Result<Self> {
        let mut table = StateTable::new(schema, num_keys)?;
        table.upsert(&batch)?;
        table.clear_changes();
        Ok(table)
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn num_keys(&self) -> usize {
        self.num_keys
    }

    /// Number of keys (rows) held.
    pub fn len(&self) -> usize {
        self.data.num_rows()
    }

    pub fn is_empty(&self) -> bool {
        self.data.num_rows() == 0
    }

    /// All rows, in table order.
    pub fn data(&self) -> &RecordBatch {
        &self.data
    }

    /// Row-format keys of key columns (one array per key field), without copying them
    /// per row (see [`KeyRows::get`]); float keys are normalised first ([`normalize_float_key`]).
    pub fn key_rows(&self, keys: &[ArrayRef]) -> Result<KeyRows> {
        if self.num_keys == 0 {
            return Ok(KeyRows(None));
        }
        let keys: Vec<ArrayRef> = keys.iter().map(normalize_float_key).collect();
        self.converter
            .convert_columns(&keys)
            .map(|rows| KeyRows(Some(rows)))
            .map_err(arrow_err("encoding state keys"))
    }

    /// Decodes row-format keys back to key columns.
    pub fn decode_keys<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Vec<ArrayRef>> {
        if self.num_keys == 0 {
            return Ok(Vec::new());
        }
        let parser = self.converter.parser();
        let rows: Vec<_> = keys.into_iter().map(|k| parser.parse(k)).collect();
        self.converter
            .convert_rows(rows)
            .map_err(arrow_err("decoding state keys"))
    }

    /// Position of a key in [`Self::data`].
    pub fn lookup(&self, key: &[u8]) -> Option<usize> {
        self.index.get(key).copied()
    }

    fn key_columns(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        batch.columns()[..self.num_keys].to_vec()
    }

    /// Inserts or replaces rows (schema as the table's; a key repeated in `rows` keeps
    /// its last row).
    pub fn upsert(&mut self, rows: &RecordBatch) -> Result<()> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        let keys = self.key_rows(&self.key_columns(rows))?;
        let n_old = self.len();
        let mut new_keys: HashMap<&[u8], usize> = HashMap::default();
        let mut slots = Vec::with_capacity(rows.num_rows());
        for i in 0..rows.num_rows() {
            let key = keys.get(i);
            let slot = match self.lookup(key) {
                Some(p) => Slot::At(p),
                None => match new_keys.get(key) {
                    Some(&p) => Slot::At(p),
                    None => {
                        new_keys.insert(key, n_old + new_keys.len());
                        Slot::New(Box::from(key))
                    }
                },
            };
            slots.push(slot);
        }
        self.upsert_slots(rows, slots)
    }

    /// Inserts or replaces rows whose places the caller resolved: row `i` of `rows` goes
    /// to `slots[i]`. `Slot::At(p)` may name a row appended earlier in the same call
    /// (`p >= len()`), which it replaces.
    pub fn upsert_slots(&mut self, rows: &RecordBatch, slots: Vec<Slot>) -> Result<()> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        self.check_schema(rows)?;
        let n_old = self.len();
        let mut indices: Vec<(usize, usize)> = (0..n_old).map(|p| (0, p)).collect();
        for (i, slot) in slots.into_iter().enumerate() {
            match slot {
                Slot::At(p) if p < indices.len() => {
                    indices[p] = (1, i);
                    self.changed[p] = true;
                }
                Slot::At(p) => {
                    return Err(Error::Arrow {
                        context: "state table".into(),
                        source: arrow::error::ArrowError::InvalidArgumentError(format!(
                            "upsert into row {p} of {}",
                            indices.len()
                        )),
                    });
                }
                Slot::New(key) => {
                    if !self.removed.is_empty() {
                        self.removed.remove(&key);
                    }
                    self.key_bytes += key.len();
                    self.index.insert(key, indices.len());
                    indices.push((1, i));
                    self.changed.push(true);
                }
            }
        }
        let columns = (0..self.schema.fields().len())
            .map(|c| {
                interleave(
                    &[self.data.column(c).as_ref(), rows.column(c).as_ref()],
                    &indices,
                )
                .map_err(arrow_err("updating state rows"))
            })
            .collect::<Result<Vec<_>>>()?;
        self.data = self.batch(columns, indices.len())?;
        Ok(())
    }

    /// Removes the rows where `mask` is true and returns them (in table order).
    pub fn remove_where(&mut self, mask: &BooleanArray) -> Result<RecordBatch> {
        let mask = if mask.null_count() > 0 {
            arrow::compute::prep_null_mask_filter(mask)
        } else {
            mask.clone()
        };
        if mask.true_count() == 0 {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        let removed =
            filter_record_batch(&self.data, &mask).map_err(arrow_err("removing state rows"))?;
        let keep = not(&mask).map_err(arrow_err("removing state rows"))?;
        let kept =
            filter_record_batch(&self.data, &keep).map_err(arrow_err("removing state rows"))?;
        let keys = self.key_rows(&self.key_columns(&removed))?;
        for i in 0..removed.num_rows() {
            if let Some((key, _)) = self.index.remove_entry(keys.get(i)) {
                self.key_bytes -= key.len();
                self.removed.insert(key);
            }
        }
        let mut new_pos = Vec::with_capacity(mask.len());
        let mut next = 0usize;
        let mut changed = Vec::with_capacity(kept.num_rows());
        for (p, m) in mask.values().iter().enumerate() {
            new_pos.push(next);
            if !m {
                next += 1;
                changed.push(self.changed[p]);
            }
        }
        for pos in self.index.values_mut() {
            *pos = new_pos[*pos];
        }
        self.changed = changed;
        self.data = kept;
        Ok(removed)
    }

    /// Applies a delta read from disk: removes `removal_keys`, then upserts `upserts`.
    pub fn apply(
        &mut self,
        upserts: &RecordBatch,
        removal_keys: &[ArrayRef],
        num_removals: usize,
    ) -> Result<()> {
        if num_removals > 0 {
            let keys = if self.num_keys == 0 {
                KeyRows(None)
            } else {
                self.key_rows(removal_keys)?
            };
            let mut mask = vec![false; self.len()];
            for i in 0..num_removals {
                if let Some(p) = self.lookup(keys.get(i)) {
                    mask[p] = true;
                }
            }
            self.remove_where(&BooleanArray::from(mask))?;
        }
        self.upsert(upserts)
    }

    /// The changes since the last [`Self::clear_changes`] (rows in table order, removed
    /// keys sorted).
    pub fn changes(&self) -> Result<Changes> {
        let positions: Vec<u32> = self
            .changed
            .iter()
            .enumerate()
            .filter(|(_, c)| **c)
            .map(|(p, _)| u32::try_from(p).unwrap_or(u32::MAX))
            .collect();
        let upserts = take_record_batch(&self.data, &UInt32Array::from(positions))
            .map_err(arrow_err("collecting state changes"))?;
        let mut removed: Vec<&Box<[u8]>> = self.removed.iter().collect();
        removed.sort();
        let num_removals = removed.len();
        let removals = self.decode_keys(removed.into_iter().map(|k| &k[..]))?;
        Ok(Changes {
            upserts,
            removals,
            num_removals,
        })
    }

    /// Forgets the changes (after they were persisted).
    pub fn clear_changes(&mut self) {
        self.changed.iter_mut().for_each(|c| *c = false);
        self.removed.clear();
    }

    /// Returns and clears the changes since the last call.
    pub fn take_changes(&mut self) -> Result<Changes> {
        let changes = self.changes()?;
        self.clear_changes();
        Ok(changes)
    }

    /// Whether anything changed since the last [`Self::clear_changes`].
    pub fn has_changes(&self) -> bool {
        !self.removed.is_empty() || self.changed.iter().any(|c| *c)
    }

    /// Bytes held: the Arrow buffers of the rows plus the key index.
    pub fn memory_size(&self) -> usize {
        let entry = std::mem::size_of::<(Box<[u8]>, usize)>() + 1;
        self.data.get_array_memory_size()
            + self.key_bytes
            + self.index.capacity() * entry
            + self.changed.capacity()
    }

    fn check_schema(&self, rows: &RecordBatch) -> Result<()> {
        let ours = self.schema.fields();
        let theirs = rows.schema();
        if theirs.fields().len() != ours.len()
            || ours
                .iter()
                .zip(theirs.fields().iter())
                .any(|(a, b)| a.data_type() != b.data_type())
        {
            return Err(Error::Arrow {
                context: "state table".into(),
                source: arrow::error::ArrowError::SchemaError(format!(
                    "rows with schema {theirs:?} do not match the state schema {:?}",
                    self.schema
                )),
            });
        }
        Ok(())
    }

    fn batch(&self, columns: Vec<ArrayRef>, num_rows: usize) -> Result<RecordBatch> {
        RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(num_rows)),
        )
        .map_err(arrow_err("building state rows"))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, false),
        ]))
    }

    fn rows(keys: &[&str], values: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(StringArray::from(keys.to_vec())),
                Arc::new(Int64Array::from(values.to_vec())),
            ],
        )
        .unwrap()
    }

    fn contents(t: &StateTable) -> Vec<(String, i64)> {
        let k = t
            .data()
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let v = t
            .data()
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        (0..t.len())
            .map(|i| (k.value(i).to_string(), v.value(i)))
            .collect()
    }

    #[test]
    fn upsert_remove_and_changes() {
        let mut t = StateTable::new(schema(), 1).unwrap();
        t.upsert(&rows(&["a", "b"], &[1, 2])).unwrap();
        t.upsert(&rows(&["b", "c"], &[20, 3])).unwrap();
        assert_eq!(
            contents(&t),
            vec![("a".into(), 1), ("b".into(), 20), ("c".into(), 3)]
        );
        let ch = t.take_changes().unwrap();
        assert_eq!(ch.upserts.num_rows(), 3);
        assert_eq!(ch.num_removals, 0);

        let removed = t
            .remove_where(&BooleanArray::from(vec![true, false, false]))
            .unwrap();
        assert_eq!(removed.num_rows(), 1);
        assert_eq!(contents(&t), vec![("b".into(), 20), ("c".into(), 3)]);
        let c = t
            .key_rows(&[Arc::new(StringArray::from(vec!["c"]))])
            .unwrap();
        assert_eq!(t.lookup(c.get(0)), Some(1));
        t.upsert(&rows(&["c", "d"], &[30, 4])).unwrap();
        let ch = t.take_changes().unwrap();
        assert_eq!(ch.upserts.num_rows(), 2);
        assert_eq!(ch.num_removals, 1);
        let removed_keys = ch.removals[0]
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(removed_keys.value(0), "a");

        // Replaying the changes on the previous state gives the same table, in the same order.
        let mut replay =
            StateTable::from_batch(schema(), 1, rows(&["a", "b", "c"], &[1, 20, 3])).unwrap();
        replay
            .apply(&ch.upserts, &ch.removals, ch.num_removals)
            .unwrap();
        assert_eq!(contents(&replay), contents(&t));
        assert!(t.memory_size() > 0);
    }

    #[test]
    fn keyless_table_holds_one_row() {
        let s = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let mut t = StateTable::new(s.clone(), 0).unwrap();
        let b = RecordBatch::try_new(s.clone(), vec![Arc::new(Int64Array::from(vec![5]))]).unwrap();
        t.upsert(&b).unwrap();
        t.upsert(&b).unwrap();
        assert_eq!(t.len(), 1);
        let ch = t.take_changes().unwrap();
        assert_eq!(ch.upserts.num_rows(), 1);
    }
}
