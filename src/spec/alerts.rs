//! Alert rules of a pipeline (`[alerts]`, docs/operate.md): when a flow's health,
//! freshness, backlog or failures cross a threshold, notify a command or a URL, once
//! when the condition starts and once when it ends.

use std::time::Duration;

/// `[alerts]`: the rules and how notifications are delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertsSpec {
    pub rules: Vec<AlertRule>,
    /// How often the rules are evaluated (also after every batch).
    pub evaluate_every: Duration,
    /// Notifications waiting per rule; beyond it a notification is dropped (and counted).
    pub queue: usize,
}

impl Default for AlertsSpec {
    fn default() -> Self {
        AlertsSpec {
            rules: Vec::new(),
            evaluate_every: DEFAULT_EVALUATE_EVERY,
            queue: DEFAULT_ALERT_QUEUE,
        }
    }
}

pub const DEFAULT_EVALUATE_EVERY: Duration = Duration::from_secs(5);
pub const DEFAULT_ALERT_QUEUE: usize = 64;
pub const DEFAULT_ALERT_TIMEOUT: Duration = Duration::from_secs(10);

/// `[[alerts.rule]]`: one condition, one target.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRule {
    pub name: String,
    /// The flows the rule watches (empty: every flow of the pipeline).
    pub flows: Vec<String>,
    pub condition: AlertCondition,
    pub target: AlertTarget,
    /// How long one delivery may take (the command runs, the POST waits) before it is given up.
    pub timeout: Duration,
}

impl AlertRule {
    pub fn watches(&self, flow: &str) -> bool {
        self.flows.is_empty() || self.flows.iter().any(|f| f == flow)
    }
}

/// What makes a rule fire.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertCondition {
    /// The flow's health state is one of these (snake_case names, e.g. `lagging`).
    Health(Vec<String>),
    /// No new row became visible in the flow's table for longer than this.
    Freshness(Duration),
    /// The flow's backlog would take longer than this many seconds at its recent pace.
    BacklogSeconds(f64),
    /// At least this many batch attempts failed since the last committed batch.
    FailedBatches(u64),
}

impl AlertCondition {
    /// The pipeline key that sets it.
    pub fn key(&self) -> &'static str {
        match self {
            AlertCondition::Health(_) => "health",
            AlertCondition::Freshness(_) => "freshness",
            AlertCondition::BacklogSeconds(_) => "backlog_seconds",
            AlertCondition::FailedBatches(_) => "failed_batches",
        }
    }
}

/// Where a rule's notifications go.
#[derive(Debug, Clone, PartialEq)]
pub enum AlertTarget {
    /// A program and its arguments (no shell); the notification is its stdin (JSON).
    Command(Vec<String>),
    /// An `http://` or `https://` URL; the notification is POSTed as JSON.
    Url(String),
}
