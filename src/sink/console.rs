//! Console sink: prints each batch to stderr (Spark's `console` sink), for debugging.

use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches;

use super::SinkCommit;
use crate::error::{Error, Result};

pub struct ConsoleSink {
    num_rows: usize,
}

impl ConsoleSink {
    pub fn new(num_rows: usize) -> Self {
        ConsoleSink { num_rows }
    }

    pub fn add_batch(&mut self, batch_id: u64, batches: Vec<RecordBatch>) -> Result<SinkCommit> {
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let mut shown = Vec::new();
        let mut left = self.num_rows;
        for b in &batches {
            if left == 0 {
                break;
            }
            let take = left.min(b.num_rows());
            shown.push(b.slice(0, take));
            left -= take;
        }
        let table = pretty_format_batches(&shown).map_err(|source| Error::Arrow {
            context: "formatting a batch for the console sink".into(),
            source,
        })?;
        eprintln!(
            "-------------------------------------------\nBatch: {batch_id}\n-------------------------------------------\n{table}"
        );
        if rows > self.num_rows {
            eprintln!("only showing top {} rows of {rows}", self.num_rows);
        }
        Ok(SinkCommit {
            num_output_rows: rows as u64,
            ..Default::default()
        })
    }
}
