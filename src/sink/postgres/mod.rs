//! The PostgreSQL sink, exactly once (docs/sinks.md): Spark's `foreachBatch` + JDBC
//! pattern with the batch id tracked in the target database.
//!
//! Each batch is one transaction:
//!
//! ```text
//! BEGIN
//!   INSERT INTO weir_sink_commits (query_id, batch_id, ...) VALUES ($query, $N, ...)
//!     ON CONFLICT (query_id) DO UPDATE SET batch_id = $N, ...
//!     WHERE weir_sink_commits.batch_id < $N          -- 0 rows: batch N is in already -> ROLLBACK, skipped
//!   CREATE TABLE IF NOT EXISTS <table> (...)          -- first batch, from the stream's schema
//!   CREATE TEMP TABLE weir_stage (...) ON COMMIT DROP
//!   COPY weir_stage FROM STDIN (FORMAT binary)        -- the batch's rows
//!   INSERT INTO <table> SELECT ... FROM weir_stage    -- append, or with keys:
//!     ... ON CONFLICT (keys) DO UPDATE SET ...        -- upsert, latest row per key
//! COMMIT
//! ```
//!
//! The marker row goes first: it locks the query's row, so a second writer of the same
//! query waits, then finds batch N recorded and writes nothing. A batch re-run after a
//! crash (the engine replays a planned, uncommitted batch with the same rows) finds its
//! marker when the first attempt committed, and is skipped; when it did not commit,
//! nothing of it is in the table and it is written whole. A write retried after a lost
//! connection is the same case. So every row is in the table exactly once, as with the
//! Delta sink's application transactions (`txn`: app id = query id, version = batch id).

pub mod conn;
pub mod test_server;
pub mod types;

use std::time::Instant;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use futures::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::{Client, NoTls};

pub use conn::check_url;
use types::{Cell, Column};

use super::SinkCommit;
use crate::error::{Error, Result};

/// The table of markers, one row per query: the last batch it committed.
pub const COMMITS_TABLE: &str = "weir_sink_commits";

/// A table name as the pipeline gives it: `name` or `schema.name`, each part used as
/// written (quoted in SQL, so case and any character are kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    pub schema: Option<String>,
    pub name: String,
}

/// `name` as a quoted SQL identifier.
pub fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl TableName {
    pub fn parse(text: &str) -> Result<TableName, String> {
        let parts: Vec<&str> = text.split('.').collect();
        let bad = || {
            format!(
                "the postgres sink's table {text:?} is not `name` or `schema.name` \
                 (each part as written, e.g. \"bronze_flights\" or \"lake.bronze_flights\")"
            )
        };
        match parts.as_slice() {
            [name] if !name.trim().is_empty() => Ok(TableName {
                schema: None,
                name: name.to_string(),
            }),
            [schema, name] if !schema.trim().is_empty() && !name.trim().is_empty() => {
                Ok(TableName {
                    schema: Some(schema.to_string()),
                    name: name.to_string(),
                })
            }
            _ => Err(bad()),
        }
    }

    /// The table, quoted for SQL.
    pub fn sql(&self) -> String {
        match &self.schema {
            Some(s) => format!("{}.{}", quote(s), quote(&self.name)),
            None => quote(&self.name),
        }
    }

    /// The marker table in the same schema.
    fn commits_sql(&self) -> String {
        match &self.schema {
            Some(s) => format!("{}.{}", quote(s), COMMITS_TABLE),
            None => COMMITS_TABLE.to_string(),
        }
    }

    pub fn display(&self) -> String {
        match &self.schema {
            Some(s) => format!("{s}.{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A PostgreSQL table written once per batch.
pub struct PostgresSink {
    url: String,
    table: TableName,
    keys: Vec<String>,
    order_by: Option<String>,
    query_id: String,
    target: conn::Target,
    client: Option<Client>,
    /// The target table and the marker table are known to exist.
    created: bool,
}

impl PostgresSink {
    /// Connects (libpq's environment applied) and creates the marker table if absent.
    pub async fn open(
        url: &str,
        table: &str,
        keys: Vec<String>,
        order_by: Option<String>,
        query_id: &str,
    ) -> Result<Self> {
        Self::open_with_env(url, table, keys, order_by, query_id, &|k| {
            std::env::var(k).ok()
        })
        .await
    }

    /// [`PostgresSink::open`] with libpq's environment read by `env`.
    pub async fn open_with_env(
        url: &str,
        table: &str,
        keys: Vec<String>,
        order_by: Option<String>,
        query_id: &str,
        env: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<Self> {
        let table_name = TableName::parse(table).map_err(|message| Error::Postgres {
            table: table.to_string(),
            target: String::new(),
            code: "42602".into(),
            message,
        })?;
        let target = conn::resolve(url, env).map_err(|message| Error::Postgres {
            table: table.to_string(),
            target: String::new(),
            code: "08001".into(),
            message,
        })?;
        let mut sink = PostgresSink {
            url: url.to_string(),
            table: table_name,
            keys,
            order_by,
            query_id: query_id.to_string(),
            target,
            client: None,
            created: false,
        };
        sink.connect().await?;
        Ok(sink)
    }

    pub fn description(&self) -> String {
        let mut d = format!("PostgresSink[{}, table={}", self.url, self.table.display());
        if !self.keys.is_empty() {
            d.push_str(&format!(", keys={}", self.keys.join(",")));
        }
        d.push(']');
        d
    }

    /// The error of `e` from a statement on the table: its SQLSTATE, or `08006`
    /// (connection_failure) when the connection was lost or the server gave none.
    fn error(&self, doing: &str, e: tokio_postgres::Error) -> Error {
        let code = e
            .code()
            .map(|c| c.code().to_string())
            .unwrap_or_else(|| "08006".to_string());
        let message = match e.as_db_error() {
            Some(db) => {
                let mut m = format!("{doing}: {}", db.message());
                if let Some(detail) = db.detail() {
                    m.push_str(&format!(" ({detail})"));
                }
                if let Some(hint) = db.hint() {
                    m.push_str(&format!("; hint: {hint}"));
                }
                m
            }
            // tokio-postgres's message includes its cause (the I/O error).
            None => format!("{doing}: {e}"),
        };
        let advice = match code.as_str() {
            "21000" => {
                "; two rows of one key in the batch: give order_by (the latest row per key wins)"
            }
            "42P10" => {
                "; the table has no unique index on keys: create one (CREATE UNIQUE INDEX ... (keys)), or let the sink create the table"
            }
            "42703" | "42804" => {
                "; the table's columns do not fit the stream's: alter the table, or select the stream's columns to fit it"
            }
            c if crate::error::postgres_retryable(c) => {
                "; nothing of the batch is committed: it is retried, then re-run on restart"
            }
            _ => "",
        };
        Error::Postgres {
            table: self.table.display(),
            target: self.target.label.clone(),
            code,
            message: format!("{message}{advice}"),
        }
    }

    async fn connect(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        if self.client.is_none() {
            let (client, connection) = self.target.config.connect(NoTls).await.map_err(|e| {
                let code = e.code().map(|c| c.code().to_string());
                let mut err = self.error("connect", e);
                if let (Error::Postgres { code: c, .. }, None) = (&mut err, code) {
                    // libpq's "could not connect" (sqlclient_unable_to_establish_sqlconnection).
                    *c = "08001".into();
                }
                err
            })?;
            let label = self.target.label.clone();
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(server = %label, error = %e, "postgres connection closed");
                }
            });
            let commits = self.table.commits_sql();
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS {commits} (\
                   query_id text PRIMARY KEY, \
                   batch_id bigint NOT NULL, \
                   table_name text NOT NULL, \
                   num_output_rows bigint NOT NULL, \
                   committed_at timestamptz NOT NULL DEFAULT now())"
            );
            match client.batch_execute(&ddl).await {
                Ok(()) => {}
                // Two flows creating it at once: one wins, the other's is a unique violation.
                Err(e) if e.code().is_some_and(|c| c.code() == "23505") => {}
                Err(e) => return Err(self.error(&format!("create {commits}"), e)),
            }
            self.client = Some(client);
        }
        match self.client.as_mut() {
            Some(c) => Ok(c),
            None => Err(Error::Postgres {
                table: self.table.display(),
                target: self.target.label.clone(),
                code: "08003".into(),
                message: "no connection".into(),
            }),
        }
    }

    /// Writes batch `batch_id` in one transaction with its marker row, at most once;
    /// `overwrite` replaces the table's rows (output mode complete); `schema` is the
    /// flow's output schema (the table is created from it).
    pub async fn add_batch(
        &mut self,
        batch_id: u64,
        batches: Vec<RecordBatch>,
        overwrite: bool,
        schema: Option<&SchemaRef>,
    ) -> Result<SinkCommit> {
        let started = Instant::now();
        let schema = match (schema, batches.first()) {
            (Some(s), _) => s.clone(),
            (None, Some(b)) => b.schema(),
            (None, None) => {
                return Ok(SinkCommit {
                    skipped: false,
                    ..Default::default()
                });
            }
        };
        let columns = schema
            .fields()
            .iter()
            .map(|f| Column::of(f))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|message| Error::SinkSchemaMismatch {
                path: format!("postgres table {}", self.table.display()),
                message,
            })?;
        for key in self.keys.iter().chain(self.order_by.as_ref()) {
            if !columns.iter().any(|c| &c.name == key) {
                return Err(Error::SinkSchemaMismatch {
                    path: format!("postgres table {}", self.table.display()),
                    message: format!(
                        "column {key:?} of keys/order_by is not in the flow's output ({})",
                        columns
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
        }
        // Dictionary columns are written as their values.
        let batches = batches
            .into_iter()
            .map(|b| undictionary(b, &schema))
            .collect::<Result<Vec<_>>>()?;
        let num_rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let statements = Statements::new(self, &columns, overwrite);
        let query_id = self.query_id.clone();
        let table_label = self.table.display();
        let created = self.created;
        let client = self.connect().await?;
        let outcome = write_transaction(
            client,
            &statements,
            &columns,
            &batches,
            &query_id,
            batch_id,
            &table_label,
            num_rows,
            created,
        )
        .await;
        match outcome {
            Ok(Outcome::Ahead(recorded)) => Err(Error::StateIncompatible {
                path: std::path::PathBuf::from(format!(
                    "postgres table {table_label} at {}",
                    self.target.label
                )),
                message: format!(
                    "the sink table is ahead of this checkpoint: {commits} records batch {recorded} of query \
                     {query_id}, but the checkpoint is writing batch {batch_id}. Batches up to {recorded} would be \
                     skipped as already written while their input is marked ingested, so their rows would never \
                     reach the table. This is what restoring an older checkpoint backup, or deleting offsets/ and \
                     commits/, looks like. Nothing was written. Restore the checkpoint that wrote batch {recorded} \
                     (its newest backup), or start over as `weir playbook checkpoint_incompatible` describes",
                    commits = self.table.commits_sql(),
                ),
            }),
            Ok(outcome) => {
                let written = outcome == Outcome::Written;
                self.created |= written;
                tracing::debug!(table = %table_label, batch_id, rows = num_rows, skipped = !written,
                    ms = started.elapsed().as_millis() as u64, "postgres batch");
                Ok(SinkCommit {
                    num_output_rows: if written { num_rows as u64 } else { 0 },
                    delta_version: None,
                    skipped: !written,
                })
            }
            Err((doing, e)) => {
                let err = self.error(&doing, e);
                if self.client.as_ref().is_some_and(Client::is_closed) {
                    self.client = None;
                }
                Err(err)
            }
        }
    }
}

/// The SQL of one batch's transaction.
struct Statements {
    marker: String,
    /// The query's recorded batch (when the marker was not updated).
    recorded: String,
    create: String,
    stage: String,
    copy: String,
    delete: Option<String>,
    insert: String,
}

impl Statements {
    fn new(sink: &PostgresSink, columns: &[Column], overwrite: bool) -> Statements {
        let table = sink.table.sql();
        let commits = sink.table.commits_sql();
        let names: Vec<String> = columns.iter().map(|c| quote(&c.name)).collect();
        let list = names.join(", ");
        let mut defs: Vec<String> = columns
            .iter()
            .map(|c| {
                format!(
                    "{} {}{}",
                    quote(&c.name),
                    c.target,
                    if c.nullable { "" } else { " NOT NULL" }
                )
            })
            .collect();
        let keys: Vec<String> = sink.keys.iter().map(|k| quote(k)).collect();
        if !keys.is_empty() {
            // UNIQUE, not PRIMARY KEY: a row with a null key is inserted as a row of its own
            // (SQL's `=` matches no null), as the delta_merge sink does.
            defs.push(format!("UNIQUE ({})", keys.join(", ")));
        }
        let staged: Vec<String> = columns
            .iter()
            .map(|c| format!("{} {}", quote(&c.name), staged_type(c)))
            .collect();
        let selected: Vec<String> = columns
            .iter()
            .map(|c| match c.cast() {
                Some(ty) => format!("{0}::{ty} AS {0}", quote(&c.name)),
                None => quote(&c.name),
            })
            .collect();
        let insert = if keys.is_empty() {
            format!(
                "INSERT INTO {table} ({list}) SELECT {} FROM weir_stage ORDER BY weir_arrival",
                selected.join(", ")
            )
        } else {
            let updates: Vec<String> = names
                .iter()
                .filter(|n| !keys.contains(n))
                .map(|n| format!("{n} = EXCLUDED.{n}"))
                .collect();
            let keys_list = keys.join(", ");
            // Within the batch: the latest row per key (greatest order_by, nulls oldest,
            // ties to the later arrival); without order_by a key's second row makes
            // PostgreSQL refuse the statement (21000), failing the batch.
            let (pick, order) = match &sink.order_by {
                Some(o) => (
                    format!("DISTINCT ON ({keys_list}) "),
                    format!(
                        " ORDER BY {keys_list}, {} DESC NULLS LAST, weir_arrival DESC",
                        quote(o)
                    ),
                ),
                None => (String::new(), " ORDER BY weir_arrival".to_string()),
            };
            let action = if updates.is_empty() {
                "DO NOTHING".to_string()
            } else {
                let newer = match &sink.order_by {
                    Some(o) => {
                        let o = quote(o);
                        format!(" WHERE weir_t.{o} IS NULL OR EXCLUDED.{o} >= weir_t.{o}")
                    }
                    None => String::new(),
                };
                format!("DO UPDATE SET {}{newer}", updates.join(", "))
            };
            format!(
                "INSERT INTO {table} AS weir_t ({list}) SELECT {list} FROM (SELECT {pick}{} FROM weir_stage{order}) AS s \
                 ON CONFLICT ({keys_list}) {action}",
                selected.join(", ")
            )
        };
        Statements {
            marker: format!(
                "INSERT INTO {commits} AS m (query_id, batch_id, table_name, num_output_rows, committed_at) \
                 VALUES ($1, $2, $3, $4, now()) \
                 ON CONFLICT (query_id) DO UPDATE SET batch_id = EXCLUDED.batch_id, \
                 table_name = EXCLUDED.table_name, num_output_rows = EXCLUDED.num_output_rows, \
                 committed_at = EXCLUDED.committed_at \
                 WHERE m.batch_id < EXCLUDED.batch_id"
            ),
            create: format!("CREATE TABLE IF NOT EXISTS {table} ({})", defs.join(", ")),
            stage: format!(
                "CREATE TEMP TABLE weir_stage ({}, weir_arrival bigint GENERATED ALWAYS AS IDENTITY) ON COMMIT DROP",
                staged.join(", ")
            ),
            copy: format!("COPY weir_stage ({list}) FROM STDIN (FORMAT binary)"),
            recorded: format!("SELECT batch_id FROM {commits} WHERE query_id = $1"),
            delete: overwrite.then(|| format!("DELETE FROM {table}")),
            insert,
        }
    }
}

fn staged_type(c: &Column) -> &str {
    match c.cast() {
        Some(_) => "text",
        None => &c.target,
    }
}

fn undictionary(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if !batch
        .columns()
        .iter()
        .any(|c| matches!(c.data_type(), arrow::datatypes::DataType::Dictionary(..)))
    {
        return Ok(batch);
    }
    let arrow_err = |e| Error::Arrow {
        context: "postgres sink: decode a dictionary column".into(),
        source: e,
    };
    let columns = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            arrow::datatypes::DataType::Dictionary(_, value) => {
                arrow::compute::cast(c, value).map_err(arrow_err)
            }
            _ => Ok(c.clone()),
        })
        .collect::<Result<Vec<_>>>()?;
    let fields: Vec<arrow::datatypes::Field> = schema
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
        .collect();
    RecordBatch::try_new(
        std::sync::Arc::new(arrow::datatypes::Schema::new(fields)),
        columns,
    )
    .map_err(arrow_err)
}

/// The batch's transaction, unless the marker says the batch is in already.
#[allow(clippy::too_many_arguments)]
async fn write_transaction(
    client: &mut Client,
    sql: &Statements,
    columns: &[Column],
    batches: &[RecordBatch],
    query_id: &str,
    batch_id: u64,
    table: &str,
    num_rows: usize,
    created: bool,
) -> std::result::Result<Outcome, (String, tokio_postgres::Error)> {
    let at = |doing: &str| {
        let doing = doing.to_string();
        move |e| (doing, e)
    };
    let tx = client.transaction().await.map_err(at("begin"))?;
    let marked = tx
        .execute(
            &sql.marker,
            &[&query_id, &(batch_id as i64), &table, &(num_rows as i64)],
        )
        .await
        .map_err(at("record the batch in weir_sink_commits"))?;
    if marked == 0 {
        // Held: batch N (a replay whose first attempt committed) or a later one.
        let row = tx
            .query_one(&sql.recorded, &[&query_id])
            .await
            .map_err(at("read the batch's marker in weir_sink_commits"))?;
        let recorded: i64 = row.get(0);
        tx.rollback().await.map_err(at("rollback"))?;
        return Ok(if recorded > batch_id as i64 {
            Outcome::Ahead(recorded)
        } else {
            Outcome::Held
        });
    }
    if !created {
        tx.batch_execute(&sql.create)
            .await
            .map_err(at("create the table"))?;
    }
    if let Some(delete) = &sql.delete {
        tx.batch_execute(delete)
            .await
            .map_err(at("delete the table's rows (output mode complete)"))?;
    }
    if num_rows > 0 {
        tx.batch_execute(&sql.stage)
            .await
            .map_err(at("create the staging table"))?;
        let sink = tx.copy_in(&sql.copy).await.map_err(at("COPY"))?;
        let types: Vec<_> = columns.iter().map(|c| c.staged.clone()).collect();
        let writer = BinaryCopyInWriter::new(sink, &types);
        pin_mut!(writer);
        let mut cells: Vec<Cell<'_>> = Vec::with_capacity(columns.len());
        for batch in batches {
            for row in 0..batch.num_rows() {
                // One row's cells, read from the Arrow columns as they are encoded.
                cells.clear();
                for (c, a) in columns.iter().zip(batch.columns()) {
                    cells.push(Cell {
                        array: a.as_ref(),
                        enc: c.enc,
                        row,
                    });
                }
                writer
                    .as_mut()
                    .write_raw(cells.iter())
                    .await
                    .map_err(at("COPY the batch's rows"))?;
            }
        }
        writer.finish().await.map_err(at("COPY the batch's rows"))?;
        tx.batch_execute(&sql.insert)
            .await
            .map_err(at("insert the staged rows into the table"))?;
    }
    tx.commit().await.map_err(at("commit"))?;
    Ok(Outcome::Written)
}

/// What a batch's transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Written,
    /// The marker holds this batch: nothing written.
    Held,
    /// The marker holds a later batch of the query (this one): the checkpoint is behind
    /// the table. Nothing written.
    Ahead(i64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_one_or_two_parts_quoted_as_written() {
        let t = TableName::parse("lake.Bronze Flights").unwrap();
        assert_eq!(t.sql(), "\"lake\".\"Bronze Flights\"");
        assert_eq!(t.commits_sql(), "\"lake\".weir_sink_commits");
        assert!(TableName::parse("a.b.c").is_err());
        assert!(TableName::parse("").is_err());
    }
}
