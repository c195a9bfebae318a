//! weir: a micro-batch streaming engine for incremental Delta Lake pipelines,
//! with a terminal operations console in front of it.
//!
//! The reference system is Apache Spark Structured Streaming with Databricks
//! Auto Loader and Delta Lake; weir uses their vocabulary (`batch_id`,
//! offsets, commits, watermark, trigger, `_rescued_data`, ...).
//!
//! # Module map
//!
//! ```text
//! cli/         one module per subcommand (run, validate, inspect, schema, demo, attach, check, playbook, checkpoint)
//! spec/        what a flow declares: FlowSpec, sources, sink, trigger, stateful query, joins, units (imports nothing of weir)
//! pipeline/    the TOML file read and checked into spec types (errors point at file:line:key)
//! engine/      micro-batch execution per flow, triggers, control, progress records, failpoints
//! source/      files/ (listing, ledger, csv/json/parquet decoders, schema location)
//! schema/      DDL parsing, typed inference, evolution modes, hints, schema events
//! ops/         where/select (DataFusion), watermark, windows, aggregation, deduplication
//! state/       versioned state store of stateful operators (snapshots + deltas per batch)
//! sink/        delta (idempotent commits), memory, console, quarantine
//! demo/        the live demo: flights replayed as a stream, faults to inject
//! drill/       restart drills on a copy: failpoints, SIGKILLs, compare with a crash-free run
//! generate/    synthetic event files for drills and tests (seeded, reproducible)
//! records/     progress record, health verdict, error kinds: plain serde types
//! durable.rs   durable file writes (survive a power cut); clock.rs: the wall clock in ms
//! delta.rs     Delta tables: open, create, txn version, errors; delta_store.rs: the fsyncing object store they are written through
//! checkpoint/  layout, offsets/commits/metadata logs, lock, progress.jsonl, static restart checks
//! checkpoint_tools/ inspect, diff, check, backup/reset/rollback (built on the engine)
//! health/      classify a flow: six states with evidence; the engine's tracker
//! playbook/    playbooks/*.md compiled in, bound to live evidence
//! console/     the operations console (run, attach): actions, panes, followers, terminal
//! ```
//!
//! Data crosses module boundaries as Arrow `RecordBatch`es and plain serde
//! structs (offsets, progress). See `docs/architecture.md`.
#![forbid(unsafe_code)]

pub mod checkpoint;
pub mod checkpoint_tools;
pub mod cli;
pub mod clock;
pub mod console;
pub mod delta;
pub mod delta_store;
pub mod demo;
pub mod drill;
pub mod durable;
pub mod engine;
pub mod error;
pub mod export;
pub mod generate;
pub mod health;
pub mod ops;
pub mod pipeline;
pub mod playbook;
pub mod records;
pub mod schema;
pub mod sink;
pub mod source;
pub mod spec;
pub mod state;

pub use error::{Error, Result};
