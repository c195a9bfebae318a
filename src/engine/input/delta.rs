//! A Delta table in the batch protocol (Spark's `DeltaSource`; the source itself is
//! `source::delta`). Its offsets are its whole record: nothing to recover or settle.

use arrow::datatypes::SchemaRef;

use super::{Backlog, BatchFiles, Planned};
use crate::error::{Error, Result};
use crate::source::delta::{DeltaFile, DeltaOffset, DeltaSource, PlanBounds};
use crate::source::delta_cdf::{CdfRange, CdfSource};
use crate::source::files::BatchRead;
use crate::spec::DeltaSourceOptions;
use crate::spec::Trigger;

/// A Delta source with the bound an `available_now` run pinned at its start.
pub struct DeltaInput {
    pub source: DeltaSource,
    /// `available_now`: the table's latest version when the run started.
    pub until_version: Option<u64>,
    /// `read_change_feed = true`: the table's change data feed is read instead of its
    /// files (`source` then only names the table).
    pub cdf: Option<CdfSource>,
}

impl DeltaInput {
    /// `None` while no table exists at the path.
    pub async fn open(options: &DeltaSourceOptions) -> Result<Option<DeltaInput>> {
        if options.read_change_feed {
            let mut cdf = CdfSource::new(options.clone());
            return Ok(cdf.refresh().await?.map(|_| DeltaInput {
                source: DeltaSource::new(options.clone()),
                until_version: None,
                cdf: Some(cdf),
            }));
        }
        let mut source = DeltaSource::new(options.clone());
        Ok(source.refresh().await?.map(|_| DeltaInput {
            source,
            until_version: None,
            cdf: None,
        }))
    }

    pub fn batch_schema(&self) -> Result<SchemaRef> {
        let schema = match &self.cdf {
            Some(cdf) => cdf.schema(),
            None => self.source.schema(),
        };
        schema.ok_or_else(|| Error::Source {
            path: self.source.options().path.clone(),
            message: "the Delta table has not been loaded yet".into(),
        })
    }

    pub async fn plan(
        &mut self,
        trigger: Trigger,
        prev_end: Option<&serde_json::Value>,
    ) -> Result<Option<Planned>> {
        let from = prev_end
            .map(DeltaOffset::from_json)
            .transpose()
            .map_err(|e| Error::Source {
                path: self.source.options().path.clone(),
                message: format!(
                    "the checkpoint's last offset is not a Delta source offset ({e}); \
                     was this checkpoint written by another source? Start the flow with a new checkpoint"
                ),
            })?;
        let bounds = match trigger {
            Trigger::Once => PlanBounds {
                unbounded: true,
                until_version: None,
            },
            Trigger::AvailableNow => {
                if self.until_version.is_none() {
                    self.until_version = match self.cdf.as_mut() {
                        Some(cdf) => cdf.refresh().await?,
                        None => self.source.refresh().await?,
                    };
                }
                PlanBounds {
                    unbounded: false,
                    until_version: self.until_version,
                }
            }
            Trigger::ProcessingTime(_) => PlanBounds::default(),
        };
        if let Some(cdf) = self.cdf.as_mut() {
            let Some(planned) = cdf.plan(from.as_ref(), bounds).await? else {
                return Ok(None);
            };
            return Ok(Some(Planned {
                end_offset: Some(planned.end.to_json()),
                backlog: Backlog {
                    files: 0,
                    bytes: 0,
                    versions: Some(planned.versions_behind),
                    offsets_behind: None,
                },
                latest_offset: None,
                num_modified: 0,
                files: BatchFiles::DeltaChanges(Some(planned.range)),
            }));
        }
        let Some(planned) = self.source.plan_with(from.as_ref(), bounds).await? else {
            return Ok(None);
        };
        Ok(Some(Planned {
            end_offset: Some(planned.end.to_json()),
            backlog: Backlog {
                files: planned.backlog.files,
                bytes: planned.backlog.bytes,
                versions: Some(planned.backlog.versions_behind),
                offsets_behind: None,
            },
            latest_offset: None,
            num_modified: 0,
            files: BatchFiles::Delta(planned.files),
        }))
    }

    /// A read that failed because VACUUM removed data files the stream had not read yet
    /// (typically a `starting_version` older than the retention): the error says from
    /// which version on the table is still whole, to start a new checkpoint there.
    async fn explain_vacuumed(&mut self, error: Error, files: &[DeltaFile]) -> Error {
        let Ok(reader) = self.source.reader() else {
            return error;
        };
        let missing: Vec<&DeltaFile> = files
            .iter()
            .filter(|f| reader.resolve(f).is_ok_and(|p| !p.exists()))
            .collect();
        let Some(first) = missing.first() else {
            return error;
        };
        let path = self.source.options().path.clone();
        let suggestion = match self.source.earliest_readable_version().await {
            Ok(Some(v)) => format!(
                "the earliest version whose files are all still there is {v}: start a new checkpoint with \
                 starting_version = {v} (the rows of the versions before it are gone from this table), or read the \
                 table's current snapshot (no starting_version)"
            ),
            _ => "no version of the table has all its files any more; read the table's current snapshot \
                  (no starting_version) with a new checkpoint"
                .to_string(),
        };
        Error::Source {
            path,
            message: format!(
                "{} data file(s) of this batch are gone (first: {}, added at version {}): VACUUM removed them \
                 before the stream read them; {suggestion}",
                missing.len(),
                first.path,
                first.version
            ),
        }
    }

    pub async fn replay(
        &mut self,
        batch_id: u64,
        prev_end: Option<&serde_json::Value>,
        end: Option<&serde_json::Value>,
    ) -> Result<BatchFiles> {
        let parse = |v: &serde_json::Value| {
            DeltaOffset::from_json(v).map_err(|e| Error::Source {
                path: self.source.options().path.clone(),
                message: format!("batch {batch_id}: not a Delta source offset: {e}"),
            })
        };
        let start = prev_end.map(parse).transpose()?;
        let Some(end) = end.map(parse).transpose()? else {
            return Ok(match self.cdf {
                Some(_) => BatchFiles::DeltaChanges(None),
                None => BatchFiles::Delta(Vec::new()),
            });
        };
        if let Some(cdf) = self.cdf.as_mut() {
            if start.as_ref() == Some(&end) {
                return Ok(BatchFiles::DeltaChanges(None));
            }
            return Ok(BatchFiles::DeltaChanges(
                cdf.range_between(start.as_ref(), &end).await?,
            ));
        }
        if start.as_ref() == Some(&end) {
            // A no-data batch: the offset did not move.
            return Ok(BatchFiles::Delta(Vec::new()));
        }
        Ok(BatchFiles::Delta(
            self.source.files_between(start.as_ref(), &end).await?,
        ))
    }

    pub async fn read(&mut self, files: &[DeltaFile]) -> Result<BatchRead> {
        let reader = self.source.reader()?;
        let batches = if files.is_empty() {
            Vec::new()
        } else {
            match reader.read(files).await {
                Ok(b) => b,
                Err(e) => return Err(self.explain_vacuumed(e, files).await),
            }
        };
        Ok(BatchRead {
            num_rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
            num_bytes: files.iter().map(|f| f.size).sum(),
            batches,
            ..Default::default()
        })
    }

    /// Reads the change rows of a batch's versions (`read_change_feed`).
    pub async fn read_changes(&mut self, range: Option<&CdfRange>) -> Result<BatchRead> {
        let (Some(cdf), Some(range)) = (self.cdf.as_ref(), range) else {
            return Ok(BatchRead::default());
        };
        let batches = cdf.read(range).await?;
        Ok(BatchRead {
            num_rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
            num_bytes: range.bytes,
            batches,
            ..Default::default()
        })
    }
}
