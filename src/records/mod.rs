//! What weir records and reads back, as plain serde types: the progress record of a
//! batch (Spark's `StreamingQueryProgress`), a flow's health verdict, and the
//! vocabulary of errors (domain, kind). The engine writes them, the health classifier,
//! the console, `weir attach` and the tools read them; this module imports nothing
//! else of weir, so all of them can.

pub mod errors;
pub mod health;
pub mod progress;

pub use errors::{Domain, ErrorKind};
pub use health::{ErrorFacts, Evidence, Health, HealthRecord, HealthState};
pub use progress::{
    BacklogUnit, DimensionProgress, ExpectationProgress, FileError, SinkProgress, SourceProgress,
    SourceWatermark, StateOperatorMetrics, StateOperatorProgress, StreamingQueryProgress,
    WeirProgress, iso_millis,
};
