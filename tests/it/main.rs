//! Integration tests, one binary (compile time): modules by topic.

mod support;

mod bad_input;
mod cases;
mod change_feed;
mod cli;
mod console;
mod crash;
mod demo_live;
mod disk_full;
mod drill;
mod edges;
mod edges_modes;
mod expectations;
mod fuzz_corpus;
mod generate;
mod health;
mod ingest;
mod kafka;
mod layers;
mod maintenance;
mod multihop;
mod object_store;
mod operate;
mod other_writers;
mod pipeline_files;
mod power;
mod schema_drift;
mod spark;
mod spark_export;
mod spark_live;
mod sql;
mod stateful;
mod stream_join;
mod streamed;
mod union;
