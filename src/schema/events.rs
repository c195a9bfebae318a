//! Typed schema-drift events, for the engine's event channel and the console's
//! schema-mismatch playbook: each names the fields involved and the file (or
//! table) that showed them, so no log text has to be parsed.
//!
//! Serialised with an `event` tag in snake case, like the engine's flow events:
//!
//! ```json
//! {"event":"schema_changed","added":["coupon","meta.ver"],"file":"/l/t3.json","version":2}
//! {"event":"type_mismatch","field":"qty","file":"/l/orders_2.json","count":2}
//! {"event":"sink_schema_mismatch","table":"/lake/t","message":"..."}
//! ```

use serde::{Deserialize, Serialize};

use super::evolve::{Decision, FieldMismatch};

/// Something schema drift did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SchemaEvent {
    /// A new schema version was recorded: `added` are field paths
    /// ([`crate::schema::evolve::path_to_string`]), `file` the first file that showed them.
    SchemaChanged {
        added: Vec<String>,
        file: String,
        version: u64,
    },
    /// `count` values of `field` in `file` did not fit its type and were rescued.
    TypeMismatch {
        field: String,
        file: String,
        count: u64,
    },
    /// The sink's table cannot take the batch's schema; nothing was written.
    SinkSchemaMismatch { table: String, message: String },
}

impl SchemaEvent {
    /// The event's name (`schema_changed`, `type_mismatch`, `sink_schema_mismatch`).
    pub fn kind(&self) -> &'static str {
        match self {
            SchemaEvent::SchemaChanged { .. } => "schema_changed",
            SchemaEvent::TypeMismatch { .. } => "type_mismatch",
            SchemaEvent::SinkSchemaMismatch { .. } => "sink_schema_mismatch",
        }
    }

    /// One `type_mismatch` per field and file.
    pub fn type_mismatches(mismatches: &[FieldMismatch]) -> Vec<SchemaEvent> {
        mismatches
            .iter()
            .map(|m| SchemaEvent::TypeMismatch {
                field: m.path_string(),
                file: m.file.clone(),
                count: m.count as u64,
            })
            .collect()
    }

    /// The `schema_changed` event of a [`Decision::Widen`] recorded as `version`.
    pub fn schema_changed(decision: &Decision, version: u64) -> Option<SchemaEvent> {
        match decision {
            Decision::Widen { added, files, .. } => Some(SchemaEvent::SchemaChanged {
                added: added.clone(),
                file: files.first().cloned().unwrap_or_default(),
                version,
            }),
            Decision::Unchanged | Decision::Fail { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::datatypes::{DataType, Schema};
    use serde_json::json;

    use super::*;

    #[test]
    fn serialised_with_an_event_tag() {
        let events = [
            SchemaEvent::SchemaChanged {
                added: vec!["coupon".into(), "meta.ver".into()],
                file: "/l/t3.json".into(),
                version: 2,
            },
            SchemaEvent::TypeMismatch {
                field: "qty".into(),
                file: "/l/o.json".into(),
                count: 2,
            },
            SchemaEvent::SinkSchemaMismatch {
                table: "/lake/t".into(),
                message: "qty: BIGINT -> STRING".into(),
            },
        ];
        let json: Vec<serde_json::Value> = events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        assert_eq!(
            json,
            [
                json!({"event":"schema_changed","added":["coupon","meta.ver"],"file":"/l/t3.json","version":2}),
                json!({"event":"type_mismatch","field":"qty","file":"/l/o.json","count":2}),
                json!({"event":"sink_schema_mismatch","table":"/lake/t","message":"qty: BIGINT -> STRING"}),
            ]
        );
        for (event, value) in events.iter().zip(json) {
            assert_eq!(value["event"], event.kind());
            assert_eq!(
                &serde_json::from_value::<SchemaEvent>(value).unwrap(),
                event
            );
        }
    }

    #[test]
    fn built_from_decoder_and_evolution_output() {
        let mismatches = [FieldMismatch {
            path: vec!["meta".into(), "ver".into()],
            file: "/l/n.json".into(),
            count: 3,
            expected: DataType::Int64,
            found: DataType::Utf8,
        }];
        assert_eq!(
            SchemaEvent::type_mismatches(&mismatches),
            [SchemaEvent::TypeMismatch {
                field: "meta.ver".into(),
                file: "/l/n.json".into(),
                count: 3
            }]
        );
        let decision = Decision::Widen {
            schema: Schema::empty(),
            added: vec!["x".into()],
            files: vec!["/l/a.json".into(), "/l/b.json".into()],
            reason: String::new(),
        };
        assert_eq!(
            SchemaEvent::schema_changed(&decision, 1),
            Some(SchemaEvent::SchemaChanged {
                added: vec!["x".into()],
                file: "/l/a.json".into(),
                version: 1
            })
        );
        assert_eq!(SchemaEvent::schema_changed(&Decision::Unchanged, 1), None);
    }
}
