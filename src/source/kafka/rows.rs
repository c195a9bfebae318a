//! Kafka records as rows of Spark's Kafka source schema, in Arrow:
//!
//! | column | Spark type | Arrow type |
//! |---|---|---|
//! | `key` | binary | `Binary` |
//! | `value` | binary | `Binary` |
//! | `topic` | string | `Utf8` |
//! | `partition` | int | `Int32` |
//! | `offset` | bigint | `Int64` |
//! | `timestamp` | timestamp | `Timestamp(Microsecond, "UTC")` |
//! | `timestampType` | int | `Int32` (0 CreateTime, 1 LogAppendTime) |
//! | `headers` (with `include_headers`) | array<struct<key: string, value: binary>> | `List<Struct<key: Utf8, value: Binary>>` |
//!
//! Every column is nullable, as in Spark's `KafkaRecordToRowConverter.kafkaSchema`.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder, StructBuilder,
    TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};

/// Kafka's `TimestampType.CREATE_TIME` id, as Spark's `timestampType` column holds it.
pub const CREATE_TIME: i32 = 0;

fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, true),
        Field::new("value", DataType::Binary, true),
    ])
}

fn headers_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "item",
        DataType::Struct(header_fields()),
        true,
    )))
}

/// Spark's Kafka source schema; `headers` only with `include_headers` (Spark's `includeHeaders`).
pub fn kafka_schema(include_headers: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("topic", DataType::Utf8, true),
        Field::new("partition", DataType::Int32, true),
        Field::new("offset", DataType::Int64, true),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("timestampType", DataType::Int32, true),
    ];
    if include_headers {
        fields.push(Field::new("headers", headers_type(), true));
    }
    Arc::new(Schema::new(fields))
}

/// Builds record batches of one partition's records.
pub struct RowsBuilder {
    schema: SchemaRef,
    topic: String,
    partition: i32,
    key: BinaryBuilder,
    value: BinaryBuilder,
    topic_col: StringBuilder,
    partition_col: Int32Builder,
    offset: Int64Builder,
    timestamp: TimestampMicrosecondBuilder,
    timestamp_type: Int32Builder,
    headers: Option<ListBuilder<StructBuilder>>,
    rows: usize,
    bytes: u64,
}

impl RowsBuilder {
    pub fn new(topic: &str, partition: i32, include_headers: bool) -> Self {
        RowsBuilder {
            schema: kafka_schema(include_headers),
            topic: topic.to_string(),
            partition,
            key: BinaryBuilder::new(),
            value: BinaryBuilder::new(),
            topic_col: StringBuilder::new(),
            partition_col: Int32Builder::new(),
            offset: Int64Builder::new(),
            timestamp: TimestampMicrosecondBuilder::new().with_timezone("UTC"),
            timestamp_type: Int32Builder::new(),
            headers: include_headers.then(|| {
                ListBuilder::new(StructBuilder::from_fields(header_fields(), 0)).with_field(
                    Arc::new(Field::new("item", DataType::Struct(header_fields()), true)),
                )
            }),
            rows: 0,
            bytes: 0,
        }
    }

    /// Rows appended since the last [`RowsBuilder::finish`].
    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Key, value and header bytes appended since the last finish.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn append(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        offset: i64,
        timestamp_ms: i64,
        headers: &mut dyn Iterator<Item = (&str, &[u8])>,
    ) {
        self.key.append_option(key);
        self.value.append_option(value);
        self.bytes += (key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len)) as u64;
        self.topic_col.append_value(&self.topic);
        self.partition_col.append_value(self.partition);
        self.offset.append_value(offset);
        self.timestamp
            .append_value(timestamp_ms.saturating_mul(1000));
        self.timestamp_type.append_value(CREATE_TIME);
        if let Some(list) = self.headers.as_mut() {
            let entries = list.values();
            for (k, v) in headers {
                self.bytes += (k.len() + v.len()) as u64;
                if let Some(b) = entries.field_builder::<StringBuilder>(0) {
                    b.append_value(k);
                }
                if let Some(b) = entries.field_builder::<BinaryBuilder>(1) {
                    b.append_value(v);
                }
                entries.append(true);
            }
            list.append(true);
        }
        self.rows += 1;
    }

    /// The rows appended so far as one batch; the builder is empty again.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.key.finish()),
            Arc::new(self.value.finish()),
            Arc::new(self.topic_col.finish()),
            Arc::new(self.partition_col.finish()),
            Arc::new(self.offset.finish()),
            Arc::new(self.timestamp.finish()),
            Arc::new(self.timestamp_type.finish()),
        ];
        if let Some(h) = self.headers.as_mut() {
            columns.push(Arc::new(h.finish()));
        }
        self.rows = 0;
        self.bytes = 0;
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|source| Error::Arrow {
            context: format!("kafka rows of {}-{}", self.topic, self.partition),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Int32Type, Int64Type, TimestampMicrosecondType};

    #[test]
    fn rows_have_sparks_kafka_schema() {
        let mut b = RowsBuilder::new("events", 3, true);
        b.append(
            Some(b"k1"),
            Some(b"{\"a\":1}"),
            41,
            1_700_000_000_123,
            &mut [("trace", b"x".as_slice()), ("trace", b"y".as_slice())].into_iter(),
        );
        b.append(None, None, 42, 1_700_000_000_124, &mut std::iter::empty());
        assert_eq!(b.len(), 2);
        let batch = b.finish().unwrap();
        assert!(b.is_empty());
        let schema = batch.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "key",
                "value",
                "topic",
                "partition",
                "offset",
                "timestamp",
                "timestampType",
                "headers"
            ]
        );
        assert_eq!(batch.column(0).as_binary::<i32>().value(0), b"k1");
        assert!(batch.column(0).is_null(1));
        assert_eq!(batch.column(2).as_string::<i32>().value(1), "events");
        assert_eq!(batch.column(3).as_primitive::<Int32Type>().value(0), 3);
        assert_eq!(batch.column(4).as_primitive::<Int64Type>().value(1), 42);
        assert_eq!(
            batch
                .column(5)
                .as_primitive::<TimestampMicrosecondType>()
                .value(0),
            1_700_000_000_123_000
        );
        assert_eq!(batch.column(6).as_primitive::<Int32Type>().value(0), 0);
        let headers = batch.column(7).as_list::<i32>();
        assert_eq!(headers.value(0).len(), 2);
        assert_eq!(headers.value(1).len(), 0);
        let first = headers.value(0);
        let s = first.as_struct();
        assert_eq!(s.column(0).as_string::<i32>().value(1), "trace");
        assert_eq!(s.column(1).as_binary::<i32>().value(1), b"y");
        assert_eq!(kafka_schema(false).fields().len(), 7);
    }
}
