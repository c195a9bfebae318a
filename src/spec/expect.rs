//! Expectations: data-quality constraints on a flow's input rows (Lakeflow Declarative
//! Pipelines' `expect`, `expect_or_drop`, `expect_or_fail`; docs/expectations.md).

use std::fmt;
use std::path::PathBuf;

use super::PipelineError;

/// What a row that violates an expectation does (Lakeflow's `ON VIOLATION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnViolation {
    /// Kept, and counted (Lakeflow's `expect`).
    #[default]
    Warn,
    /// Removed before the sink, and counted (`expect_or_drop`, `ON VIOLATION DROP ROW`).
    Drop,
    /// The batch stops before anything is written (`expect_or_fail`, `ON VIOLATION FAIL UPDATE`).
    Fail,
}

impl OnViolation {
    /// The words of `on_violation`.
    pub const WORDS: [&'static str; 3] = ["warn", "drop", "fail"];

    pub fn parse(word: &str) -> Option<OnViolation> {
        match word {
            "warn" => Some(OnViolation::Warn),
            "drop" => Some(OnViolation::Drop),
            "fail" => Some(OnViolation::Fail),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OnViolation::Warn => "warn",
            OnViolation::Drop => "drop",
            OnViolation::Fail => "fail",
        }
    }
}

impl fmt::Display for OnViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a key is written in the pipeline file, for errors found after the file was read
/// (a constraint naming a column the source does not have).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyAt {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    /// Dotted key path, e.g. `flow[0].expect[1].constraint`.
    pub key: String,
}

impl KeyAt {
    /// The error of an invalid pipeline at this key.
    pub fn error(&self, message: String) -> PipelineError {
        PipelineError {
            file: self.file.clone(),
            line: self.line,
            column: self.column,
            key: self.key.clone(),
            message,
        }
    }
}

/// One `[[flow.expect]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectationSpec {
    /// Unique within the flow (Lakeflow: unique per dataset).
    pub name: String,
    /// A SQL boolean expression over the input row; a row passes when it is true (false
    /// or NULL violate it).
    pub constraint: String,
    pub on_violation: OnViolation,
    /// Where `constraint` is written.
    pub at: KeyAt,
}
