//! [`StateTable`]: the in-memory state of one operator, a table of rows keyed
//! by their first `num_keys` columns, with the changes since the last commit.
//!
//! Layout (docs/state.md has the memory per key):
//!
//! - **Rows**: one Arrow [`RecordBatch`] (the key columns and the value columns).
//! - **Keys**: the [row format](arrow::row) bytes of every row's key, back to back in
//!   one buffer with one end offset per row (no allocation per key).
//! - **Index**: a hash table from the 64-bit hash of a key's bytes to the row's
//!   position (a `u32`); the rare key whose hash equals another key's goes to a small
//!   second map keyed by its bytes, so a lookup is exact.
//!
//! Row order is deterministic: updates keep a row in place, new keys are appended in
//! the order they are upserted, removals keep the order of the rest. Loading a version
//! from disk (snapshot + deltas) reproduces the same order, so a replayed batch emits its
//! rows in the same order as the original attempt.
//!
//! Changes since the last commit are a flag per row (upserted) and the keys removed, in
//! the order they were removed (a key removed and inserted again is in both: replaying
//! removals then upserts puts it at the end, where the live table has it).

use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::{filter_record_batch, interleave, not};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::HashMap;
use datafusion::common::hash_utils::RandomState as KeyHashState;

use crate::error::{Error, Result};

/// Changes of a [`StateTable`] since the last [`StateTable::clear_changes`].
#[derive(Debug, Clone)]
pub struct Changes {
    /// Rows inserted or replaced (full rows), in table order.
    pub upserts: RecordBatch,
    /// Key columns of removed keys, in the order they were removed.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Replaces the row at this position (from [`StateTable::lookup`]).
    At(usize),
    /// Inserts a key not in the table (the row's key columns are its key).
    New,
}

/// Keys by position, back to back in one buffer.
#[derive(Debug, Default)]
struct KeyBuf {
    bytes: Vec<u8>,
    /// End of key `i` in `bytes` (key `i` starts where key `i - 1` ends).
    ends: Vec<usize>,
}

impl KeyBuf {
    fn with_capacity(keys: usize, bytes: usize) -> Self {
        KeyBuf {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(keys),
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Frees the buffers (a cleared buffer keeps its capacity).
    fn release(&mut self) {
        *self = KeyBuf::default();
    }

    fn memory_size(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * std::mem::size_of::<usize>()
    }
}

/// A `Hasher` for keys that are already hashes (the index's `u32` keys): spreads the
/// 32 bits over 64 (a multiplication by an odd constant, so no two keys meet), as the
/// hash table takes its control bits from the top of the hash.
#[derive(Debug, Default, Clone, Copy)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `u32` keys (they call `write_u32`); folds anything else in.
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.0 = u64::from(v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The keys of a table and the hash index over them (see the module docs).
struct KeyIndex {
    keys: KeyBuf,
    /// 32-bit hash of a key's bytes -> position of the (first) key with that hash.
    by_hash: HashMap<u32, u32, BuildHasherDefault<Prehashed>>,
    /// Keys whose hash is another key's, by their bytes (rare: about n² / 2³³ of n keys,
    /// ~1,300 of 3.3 M).
    collided: HashMap<Box<[u8]>, u32>,
    hasher: KeyHashState,
    /// All ones; zero in tests that force every key to collide.
    hash_mask: u32,
}

impl Default for KeyIndex {
    fn default() -> Self {
        KeyIndex {
            keys: KeyBuf::default(),
            by_hash: HashMap::default(),
            collided: HashMap::default(),
            // A seed per table (from the standard library's random keys), so that input
            // keys cannot be crafted to collide (results never depend on the hashes).
            hasher: KeyHashState::with_seed(std::hash::RandomState::new().hash_one(0u64)),
            hash_mask: u32::MAX,
        }
    }
}

fn position(p: usize) -> Result<u32> {
    u32::try_from(p).map_err(|_| Error::Arrow {
        context: "state table".into(),
        source: arrow::error::ArrowError::InvalidArgumentError(format!(
            "more than {} keys in one operator's state",
            u32::MAX
        )),
    })
}

impl KeyIndex {
    fn hash(&self, key: &[u8]) -> u32 {
        ((self.hasher.hash_one(key) >> 32) as u32) & self.hash_mask
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn get(&self, key: &[u8]) -> Option<usize> {
        let p = *self.by_hash.get(&self.hash(key))? as usize;
        if self.keys.get(p) == key {
            return Some(p);
        }
        if self.collided.is_empty() {
            return None;
        }
        self.collided.get(key).map(|p| *p as usize)
    }

    /// Appends a key at position `len()`; a key already present now points there.
    fn push(&mut self, key: &[u8]) -> Result<()> {
        let p = position(self.keys.len())?;
        let hash = self.hash(key);
        index_key(
            &mut self.by_hash,
            &mut self.collided,
            &self.keys,
            hash,
            key,
            p,
        );
        self.keys.push(key);
        Ok(())
    }

    fn reserve(&mut self, keys: usize, bytes: usize) {
        self.by_hash.reserve(keys);
        self.keys.ends.reserve(keys);
        self.keys.bytes.reserve(bytes);
    }

    /// Replaces the keys (a key's position is its place in `keys`) and rebuilds the index.
    fn rebuild(&mut self, keys: KeyBuf) -> Result<()> {
        self.by_hash = HashMap::with_capacity_and_hasher(keys.len(), Default::default());
        self.collided = HashMap::default();
        for (p, key) in keys.iter().enumerate() {
            let hash = self.hash(key);
            index_key(
                &mut self.by_hash,
                &mut self.collided,
                &keys,
                hash,
                key,
                position(p)?,
            );
        }
        self.keys = keys;
        Ok(())
    }

    fn memory_size(&self) -> usize {
        // A bucket per entry and control byte; the table holds up to 7/8 of its buckets.
        let bucket = std::mem::size_of::<(u32, u32)>() + 1;
        self.keys.memory_size()
            + self.by_hash.capacity() * 8 / 7 * bucket
            + self
                .collided
                .keys()
                .map(|k| k.len() + std::mem::size_of::<(Box<[u8]>, u32)>() + 1)
                .sum::<usize>()
    }
}

/// Points `hash` at position `p` (key `key`), or records `key` in `collided` when the
/// hash is another key's; `keys` holds the keys of the positions already indexed.
fn index_key(
    by_hash: &mut HashMap<u32, u32, BuildHasherDefault<Prehashed>>,
    collided: &mut HashMap<Box<[u8]>, u32>,
    keys: &KeyBuf,
    hash: u32,
    key: &[u8],
    p: u32,
) {
    use datafusion::common::hash_map::Entry;
    match by_hash.entry(hash) {
        Entry::Vacant(e) => {
            e.insert(p);
        }
        Entry::Occupied(mut e) => {
            if keys.get(*e.get() as usize) == key {
                e.insert(p);
            } else {
                collided.insert(Box::from(key), p);
            }
        }
    }
}

/// A keyed table of state rows with change tracking (see the module docs).
pub struct StateTable {
    schema: SchemaRef,
    num_keys: usize,
    converter: RowConverter,
    data: RecordBatch,
    index: KeyIndex,
    /// Per row: inserted or replaced since the last `clear_changes`.
    changed: Vec<bool>,
    /// Keys removed since the last `clear_changes`, in the order they were removed.
    removed: KeyBuf,
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
            index: KeyIndex::default(),
            changed: Vec::new(),
            removed: KeyBuf::default(),
        })
    }

    /// A table holding `batch` (keys must be unique), with no pending changes.
    pub fn from_batch(schema: SchemaRef, num_keys: usize, batch: RecordBatch) -> Result<Self> {
        let mut table = StateTable::new(schema, num_keys)?;
        if num_keys == 0 {
            table.upsert(&batch)?;
        } else {
            table.check_schema(&batch)?;
            let keys = table.key_rows(&table.key_columns(&batch))?;
            let bytes = (0..batch.num_rows()).map(|i| keys.get(i).len()).sum();
            table.index.reserve(batch.num_rows(), bytes);
            for i in 0..batch.num_rows() {
                table.index.push(keys.get(i))?;
            }
            table.place_rows(&batch, &vec![Slot::New; batch.num_rows()])?;
        }
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

    /// The row-format key of row `p` (`p < len()`).
    pub fn key(&self, p: usize) -> &[u8] {
        self.index.keys.get(p)
    }

    /// Records a key removed from the state outside this table (a spilled key), as a
    /// removal in [`Self::changes`].
    pub fn record_removed(&mut self, key: &[u8]) {
        self.removed.push(key);
    }

    /// Position of a key in [`Self::data`].
    pub fn lookup(&self, key: &[u8]) -> Option<usize> {
        self.index.get(key)
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
        self.check_schema(rows)?;
        let keys = self.key_rows(&self.key_columns(rows))?;
        let n_old = self.len();
        // A new key is indexed at once (at its row-to-be), so a repeat of it in `rows`
        // finds it and replaces that row.
        let mut slots = Vec::with_capacity(rows.num_rows());
        let placed = (|| {
            for i in 0..rows.num_rows() {
                let key = keys.get(i);
                let slot = match self.lookup(key) {
                    Some(p) => Slot::At(p),
                    None => {
                        self.index.push(key)?;
                        Slot::New
                    }
                };
                slots.push(slot);
            }
            self.place_rows(rows, &slots)
        })();
        if placed.is_err() {
            self.rollback(n_old);
        }
        placed
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
        let new: Vec<usize> = (0..slots.len())
            .filter(|&i| slots[i] == Slot::New)
            .collect();
        let placed = (|| {
            if !new.is_empty() {
                let keys = self.key_rows(&self.key_columns(rows))?;
                let bytes = new.iter().map(|&i| keys.get(i).len()).sum();
                self.index.reserve(new.len(), bytes);
                for &i in &new {
                    self.index.push(keys.get(i))?;
                }
            }
            self.place_rows(rows, &slots)
        })();
        if placed.is_err() {
            self.rollback(n_old);
        }
        placed
    }

    /// Inserts the rows of `batches` (schema as the table's) whose key is not in the
    /// table, the first of a key repeated in `batches`, with one append; returns per batch
    /// which rows were inserted. (Deduplication: the rows are read once, the keys encoded
    /// and hashed once.)
    pub fn insert_absent(&mut self, batches: &[RecordBatch]) -> Result<Vec<Vec<bool>>> {
        self.insert_absent_except(batches, |_| Ok(false))
    }

    /// [`Self::insert_absent`] where a key not in the table but for which `held` says
    /// true (a key spilled to disk, [`super::spill`]) counts as present too.
    pub fn insert_absent_except(
        &mut self,
        batches: &[RecordBatch],
        mut held: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<Vec<Vec<bool>>> {
        for batch in batches {
            self.check_schema(batch)?;
        }
        let n_old = self.len();
        let mut inserted: Vec<Vec<bool>> = Vec::with_capacity(batches.len());
        let placed = (|| {
            // The index is sized once for every row possibly new (each key's bytes
            // estimated from the first batch's), not grown step by step.
            let n_rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
            let mut chosen: Vec<(usize, usize)> = Vec::new();
            for (b, batch) in batches.iter().enumerate() {
                // One batch's keys encoded at a time (not every batch's at once).
                let encoded = self.key_rows(&self.key_columns(batch))?;
                if b == 0 && batch.num_rows() > 0 {
                    let bytes = (0..batch.num_rows())
                        .map(|i| encoded.get(i).len())
                        .sum::<usize>();
                    let per_key = bytes.div_ceil(batch.num_rows());
                    self.index.reserve(n_rows, n_rows * per_key);
                }
                let mut mask = Vec::with_capacity(batch.num_rows());
                for i in 0..batch.num_rows() {
                    let key = encoded.get(i);
                    let new = self.index.get(key).is_none() && !held(key)?;
                    if new {
                        self.index.push(key)?;
                        chosen.push((b, i));
                    }
                    mask.push(new);
                }
                inserted.push(mask);
            }
            if chosen.is_empty() {
                return Ok(());
            }
            let columns = (0..self.schema.fields().len())
                .map(|c| {
                    let parts: Vec<&dyn Array> =
                        batches.iter().map(|b| b.column(c).as_ref()).collect();
                    interleave(&parts, &chosen).map_err(arrow_err("inserting state rows"))
                })
                .collect::<Result<Vec<_>>>()?;
            let rows = self.batch(columns, chosen.len())?;
            self.place_rows(&rows, &vec![Slot::New; chosen.len()])
        })();
        if let Err(e) = placed {
            self.rollback(n_old);
            return Err(e);
        }
        Ok(inserted)
    }

    /// Undoes the keys indexed by a failed insert: back to the first `n_old` rows.
    fn rollback(&mut self, n_old: usize) {
        if self.index.len() == n_old && self.changed.len() == n_old {
            return;
        }
        let mut keys = std::mem::take(&mut self.index.keys);
        let end = if n_old == 0 { 0 } else { keys.ends[n_old - 1] };
        keys.ends.truncate(n_old);
        keys.bytes.truncate(end);
        // Rebuilding the index of keys that were indexed before cannot fail.
        let _ = self.index.rebuild(keys);
        self.changed.truncate(n_old);
    }

    /// Puts `rows` in their slots; the keys of `Slot::New` rows are already indexed, in
    /// slot order, after the table's rows.
    fn place_rows(&mut self, rows: &RecordBatch, slots: &[Slot]) -> Result<()> {
        let invalid = |message: String| Error::Arrow {
            context: "state table".into(),
            source: arrow::error::ArrowError::InvalidArgumentError(message),
        };
        if slots.len() != rows.num_rows() {
            return Err(invalid(format!(
                "{} slots for {} rows",
                slots.len(),
                rows.num_rows()
            )));
        }
        let n_old = self.len();
        // (table row, input row) of replaced rows; input row of each appended row.
        let mut replaced: Vec<(usize, usize)> = Vec::new();
        let mut appended: Vec<usize> = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            match *slot {
                Slot::At(p) if p < n_old => replaced.push((p, i)),
                Slot::At(p) if p - n_old < appended.len() => appended[p - n_old] = i,
                Slot::At(p) => {
                    return Err(invalid(format!(
                        "upsert into row {p} of {}",
                        n_old + appended.len()
                    )));
                }
                Slot::New => appended.push(i),
            }
        }
        if self.index.len() != n_old + appended.len() {
            return Err(invalid(format!(
                "{} keys indexed for {} rows",
                self.index.len(),
                n_old + appended.len()
            )));
        }
        let total = n_old + appended.len();
        let columns = if replaced.is_empty() {
            // Appends only: the new rows after the table's, copied once.
            let in_order = appended.len() == rows.num_rows()
                && appended.iter().enumerate().all(|(j, i)| *i == j);
            let new_rows: Vec<ArrayRef> = if in_order {
                rows.columns().to_vec()
            } else {
                let indices = UInt32Array::from(
                    appended
                        .iter()
                        .map(|&i| position(i))
                        .collect::<Result<Vec<u32>>>()?,
                );
                rows.columns()
                    .iter()
                    .map(|c| arrow::compute::take(c.as_ref(), &indices, None))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(arrow_err("updating state rows"))?
            };
            if n_old == 0 {
                new_rows
            } else {
                self.data
                    .columns()
                    .iter()
                    .zip(new_rows.iter())
                    .map(|(old, new)| arrow::compute::concat(&[old.as_ref(), new.as_ref()]))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(arrow_err("updating state rows"))?
            }
        } else {
            let mut indices: Vec<(usize, usize)> = (0..n_old).map(|p| (0, p)).collect();
            for &(p, i) in &replaced {
                indices[p] = (1, i);
            }
            indices.extend(appended.iter().map(|&i| (1, i)));
            (0..self.schema.fields().len())
                .map(|c| {
                    interleave(
                        &[self.data.column(c).as_ref(), rows.column(c).as_ref()],
                        &indices,
                    )
                    .map_err(arrow_err("updating state rows"))
                })
                .collect::<Result<Vec<_>>>()?
        };
        self.data = self.batch(columns, total)?;
        for (p, _) in replaced {
            self.changed[p] = true;
        }
        self.changed.resize(total, true);
        Ok(())
    }

    /// Replaces the values of value column `column` at `positions` with `values` (one
    /// per position) and marks those rows changed; the other columns are not copied.
    pub fn update_column(
        &mut self,
        column: usize,
        positions: &[usize],
        values: &ArrayRef,
    ) -> Result<()> {
        let invalid = |message: String| Error::Arrow {
            context: "state table".into(),
            source: arrow::error::ArrowError::InvalidArgumentError(message),
        };
        let n = self.len();
        if column < self.num_keys || column >= self.schema.fields().len() {
            return Err(invalid(format!("column {column} is not a value column")));
        }
        if positions.len() != values.len() {
            return Err(invalid(format!(
                "{} values for {} rows",
                values.len(),
                positions.len()
            )));
        }
        if positions.is_empty() {
            return Ok(());
        }
        let mut indices: Vec<(usize, usize)> = (0..n).map(|p| (0, p)).collect();
        for (i, &p) in positions.iter().enumerate() {
            if p >= n {
                return Err(invalid(format!("update of row {p} of {n}")));
            }
            indices[p] = (1, i);
        }
        let updated = interleave(
            &[self.data.column(column).as_ref(), values.as_ref()],
            &indices,
        )
        .map_err(arrow_err("updating state rows"))?;
        let mut columns = self.data.columns().to_vec();
        columns[column] = updated;
        self.data = self.batch(columns, n)?;
        for &p in positions {
            self.changed[p] = true;
        }
        Ok(())
    }

    /// Removes the rows where `mask` is true and returns them (in table order).
    pub fn remove_where(&mut self, mask: &BooleanArray) -> Result<RecordBatch> {
        let mask = if mask.null_count() > 0 {
            arrow::compute::prep_null_mask_filter(mask)
        } else {
            mask.clone()
        };
        let n = self.len();
        if mask.len() != n {
            return Err(Error::Arrow {
                context: "state table".into(),
                source: arrow::error::ArrowError::InvalidArgumentError(format!(
                    "a removal mask of {} rows for {n} rows",
                    mask.len()
                )),
            });
        }
        let n_removed = mask.true_count();
        if n_removed == 0 {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        if n_removed == n {
            for key in self.index.keys.iter() {
                self.removed.push(key);
            }
            self.index = KeyIndex {
                hasher: self.index.hasher.clone(),
                hash_mask: self.index.hash_mask,
                ..KeyIndex::default()
            };
            self.changed = Vec::new();
            return Ok(std::mem::replace(
                &mut self.data,
                RecordBatch::new_empty(self.schema.clone()),
            ));
        }
        let removed =
            filter_record_batch(&self.data, &mask).map_err(arrow_err("removing state rows"))?;
        let keep = not(&mask).map_err(arrow_err("removing state rows"))?;
        let kept =
            filter_record_batch(&self.data, &keep).map_err(arrow_err("removing state rows"))?;
        let old = std::mem::take(&mut self.index.keys);
        let removed_bytes: usize = mask.values().set_indices().map(|p| old.get(p).len()).sum();
        let mut keys = KeyBuf::with_capacity(n - n_removed, old.bytes.len() - removed_bytes);
        let mut changed = Vec::with_capacity(n - n_removed);
        for (p, m) in mask.values().iter().enumerate() {
            let key = old.get(p);
            if m {
                self.removed.push(key);
            } else {
                keys.push(key);
                changed.push(self.changed[p]);
            }
        }
        drop(old);
        self.index.rebuild(keys)?;
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
        if num_removals > 0 && !self.is_empty() {
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
    /// keys in the order they were removed).
    pub fn changes(&self) -> Result<Changes> {
        let n_changed = self.changed.iter().filter(|c| **c).count();
        let upserts = if n_changed == self.len() {
            self.data.clone()
        } else if n_changed == 0 {
            RecordBatch::new_empty(self.schema.clone())
        } else {
            filter_record_batch(&self.data, &BooleanArray::from(self.changed.clone()))
                .map_err(arrow_err("collecting state changes"))?
        };
        let removals = self.decode_keys(self.removed.iter())?;
        Ok(Changes {
            upserts,
            removals,
            num_removals: self.removed.len(),
        })
    }

    /// Forgets the changes (after they were persisted).
    pub fn clear_changes(&mut self) {
        self.changed.iter_mut().for_each(|c| *c = false);
        self.removed.release();
    }

    /// Returns and clears the changes since the last call.
    pub fn take_changes(&mut self) -> Result<Changes> {
        let changes = self.changes()?;
        self.clear_changes();
        Ok(changes)
    }

    /// Rows inserted or replaced plus keys removed since the last [`Self::clear_changes`].
    pub fn num_changes(&self) -> usize {
        self.changed.iter().filter(|c| **c).count() + self.removed.len()
    }

    /// Whether anything changed since the last [`Self::clear_changes`].
    pub fn has_changes(&self) -> bool {
        !self.removed.is_empty() || self.changed.iter().any(|c| *c)
    }

    /// Bytes held: the Arrow buffers of the rows, the keys and their index, and the
    /// change tracking.
    pub fn memory_size(&self) -> usize {
        self.data.get_array_memory_size()
            + self.index.memory_size()
            + self.changed.capacity()
            + self.removed.memory_size()
    }

    /// Test hook: every key hashes to the same value, so every lookup goes through the
    /// collision path.
    #[cfg(test)]
    fn force_hash_collisions(&mut self) {
        self.index.hash_mask = 0;
        let keys = std::mem::take(&mut self.index.keys);
        self.index.rebuild(keys).unwrap();
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

    #[test]
    fn insert_absent_keeps_the_first_row_of_each_new_key() {
        let mut t = StateTable::from_batch(schema(), 1, rows(&["a"], &[1])).unwrap();
        let inserted = t
            .insert_absent(&[
                rows(&["b", "a", "b"], &[2, 3, 4]),
                rows(&["c", "b"], &[5, 6]),
            ])
            .unwrap();
        assert_eq!(inserted, vec![vec![true, false, false], vec![true, false]]);
        assert_eq!(
            contents(&t),
            vec![("a".into(), 1), ("b".into(), 2), ("c".into(), 5)]
        );
        let ch = t.take_changes().unwrap();
        assert_eq!(ch.upserts.num_rows(), 2);
        assert_eq!(t.insert_absent(&[]).unwrap(), Vec::<Vec<bool>>::new());
        // A failed insert leaves the table as it was.
        let other = Arc::new(arrow::datatypes::Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, false),
        ]));
        let wrong = RecordBatch::try_new(
            other,
            vec![
                Arc::new(Int64Array::from(vec![9])),
                Arc::new(Int64Array::from(vec![9])),
            ],
        )
        .unwrap();
        assert!(t.insert_absent(&[wrong]).is_err());
        assert_eq!(t.len(), 3);
        let d = t
            .key_rows(&[Arc::new(StringArray::from(vec!["d"]))])
            .unwrap();
        assert_eq!(t.lookup(d.get(0)), None);
    }

    /// Key `k` of every row, in table order.
    fn keys_of(t: &StateTable) -> Vec<String> {
        contents(t).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn a_key_removed_and_inserted_again_replays_to_the_same_order() {
        let mut t = StateTable::from_batch(schema(), 1, rows(&["a", "b"], &[1, 2])).unwrap();
        t.remove_where(&BooleanArray::from(vec![true, false]))
            .unwrap();
        t.upsert(&rows(&["a"], &[10])).unwrap();
        assert_eq!(contents(&t), vec![("b".into(), 2), ("a".into(), 10)]);
        let ch = t.take_changes().unwrap();
        assert_eq!((ch.upserts.num_rows(), ch.num_removals), (1, 1));
        let mut replay = StateTable::from_batch(schema(), 1, rows(&["a", "b"], &[1, 2])).unwrap();
        replay
            .apply(&ch.upserts, &ch.removals, ch.num_removals)
            .unwrap();
        assert_eq!(contents(&replay), contents(&t));
    }

    /// Random upserts and removals against a model (a list of (key, value) in table
    /// order), with every key hashing alike in one run (the collision path), and the
    /// changes of each step replayed on a copy of the previous state.
    #[test]
    fn random_operations_match_a_model() {
        for collide in [false, true] {
            let mut rng = crate::ops::stateful::sim::Lcg(if collide { 7 } else { 3 });
            let mut t = StateTable::new(schema(), 1).unwrap();
            if collide {
                t.force_hash_collisions();
            }
            let mut model: Vec<(String, i64)> = Vec::new();
            for step in 0..60 {
                let before = contents(&t);
                // Upsert a few keys (some repeated within the batch).
                let n = 1 + rng.next(12) as usize;
                let ks: Vec<String> = (0..n).map(|_| format!("k{}", rng.next(40))).collect();
                let vs: Vec<i64> = (0..n).map(|i| (step * 100 + i) as i64).collect();
                let refs: Vec<&str> = ks.iter().map(|k| k.as_str()).collect();
                t.upsert(&rows(&refs, &vs)).unwrap();
                for (k, v) in ks.iter().zip(&vs) {
                    match model.iter_mut().find(|(m, _)| m == k) {
                        Some(row) => row.1 = *v,
                        None => model.push((k.clone(), *v)),
                    }
                }
                // Remove the keys whose number is a multiple of a random divisor.
                let d = 2 + rng.next(9) as usize;
                let gone = |k: &str| k[1..].parse::<usize>().unwrap() % d == 0;
                let mask: BooleanArray = contents(&t).iter().map(|(k, _)| Some(gone(k))).collect();
                let removed = t.remove_where(&mask).unwrap();
                assert_eq!(
                    removed.num_rows(),
                    model.iter().filter(|(k, _)| gone(k)).count()
                );
                model.retain(|(k, _)| !gone(k));
                assert_eq!(contents(&t), model, "step {step}");
                for (p, (k, _)) in model.iter().enumerate() {
                    let key = t
                        .key_rows(&[Arc::new(StringArray::from(vec![k.as_str()]))])
                        .unwrap();
                    assert_eq!(t.lookup(key.get(0)), Some(p), "step {step}: {k}");
                }
                let absent = t
                    .key_rows(&[Arc::new(StringArray::from(vec!["zz"]))])
                    .unwrap();
                assert_eq!(t.lookup(absent.get(0)), None);
                let ch = t.take_changes().unwrap();
                let mut replay = StateTable::from_batch(
                    schema(),
                    1,
                    rows(
                        &before.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
                        &before.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
                    ),
                )
                .unwrap();
                replay
                    .apply(&ch.upserts, &ch.removals, ch.num_removals)
                    .unwrap();
                assert_eq!(keys_of(&replay), keys_of(&t), "replay of step {step}");
                assert_eq!(contents(&replay), contents(&t), "replay of step {step}");
            }
        }
    }

    #[test]
    fn memory_per_key_is_the_keys_bytes_plus_a_fixed_overhead() {
        let n = 100_000usize;
        let keys: Vec<String> = (0..n).map(|i| format!("key-{i:08}")).collect();
        let refs: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        let values: Vec<i64> = (0..n as i64).collect();
        let batch = rows(&refs, &values);
        let t = StateTable::from_batch(schema(), 1, batch.clone()).unwrap();
        let arrow_bytes = t.data().get_array_memory_size();
        let per_key = (t.memory_size() - arrow_bytes) as f64 / n as f64;
        let key_bytes = t.key_rows(&[batch.column(0).clone()]).unwrap();
        let row_key_len = key_bytes.get(0).len() as f64;
        // The row-format key, its end offset (8 bytes), the change flag (1 byte) and the
        // index (a u32 hash, a u32 position and a control byte per bucket, buckets at
        // least 7/16 full): at most key + 30 bytes.
        assert!(
            per_key < row_key_len + 30.0,
            "{per_key:.1} bytes per key beside the rows for {row_key_len}-byte keys"
        );
    }
}
