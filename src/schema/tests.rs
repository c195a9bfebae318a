//! Schema drift across sequences of files, in every evolution mode, the way the
//! engine chains the pieces: resolve the schema from the schema location (infer +
//! hints on the first batch), decode the batch's files, [`evolve`] with their new
//! fields, then either record a wider version and re-run the batch (the
//! schema-change stop and restart), stop (`fail_on_new_columns`), or commit the good
//! rows and quarantine the corrupt records. Every test ends with the nothing-lost
//! check: rows committed + records quarantined = records in the input, and every
//! input value is in its column or in `_rescued_data`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::Schema;
use serde_json::{Map, Value, json};

use super::evolve::{Decision, NewField, evolve, strings_only};
use super::{SchemaEvent, to_ddl};
use crate::sink::quarantine::{QuarantineWriter, QuarantinedRecord, split_batches};
use crate::source::files::infer::infer_schema;
use crate::source::files::read::test_support::case_file;
use crate::source::files::read::{FileMeta, ReadSpec, decode_file};
use crate::source::files::schema_store::{history_at, record_version, resolve_with};
use crate::spec::EvolutionMode;
use crate::spec::{CsvOptions, FileFormat};

/// A committed row as JSON (data columns, nulls omitted) and its `_rescued_data`.
type Row = (Map<String, Value>, Option<Map<String, Value>>);

/// One flow: a landing directory, a schema location, a "table" and a quarantine.
struct Flow {
    dir: tempfile::TempDir,
    format: FileFormat,
    mode: EvolutionMode,
    typed: bool,
    hints: Option<String>,
    landed: Vec<PathBuf>,
    table: Vec<RecordBatch>,
    quarantine: QuarantineWriter,
    next_batch: u64,
    events: Vec<SchemaEvent>,
    /// Schema-change stops so far (each followed by a restart that re-ran the batch).
    restarts: usize,
}

impl Flow {
    fn new(format: FileFormat, mode: EvolutionMode) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("landing")).unwrap();
        let quarantine = QuarantineWriter::new(dir.path().join("bad_records"));
        Flow {
            dir,
            format,
            mode,
            typed: true,
            hints: None,
            landed: Vec::new(),
            table: Vec::new(),
            quarantine,
            next_batch: 0,
            events: Vec::new(),
            restarts: 0,
        }
    }

    fn location(&self) -> PathBuf {
        self.dir.path().join("checkpoint")
    }

    /// Lands files (name, bytes) and runs one trigger over them as one batch.
    fn land(&mut self, files: &[(&str, &[u8])]) -> Result<(), String> {
        let mut batch = Vec::new();
        for (name, bytes) in files {
            let path = self
                .dir
                .path()
                .join("landing")
                .join(format!("{:02}_{name}", self.landed.len()));
            std::fs::write(&path, bytes).unwrap();
            self.landed.push(path.clone());
            batch.push(path);
        }
        self.trigger(&batch)
    }

    /// Lands case fixture files.
    fn land_cases(&mut self, files: &[&str]) -> Result<(), String> {
        let contents: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|f| {
                let name = Path::new(f)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                (name, std::fs::read(case_file(f)).unwrap())
            })
            .collect();
        let refs: Vec<(&str, &[u8])> = contents
            .iter()
            .map(|(n, b)| (n.as_str(), b.as_slice()))
            .collect();
        self.land(&refs)
    }

    /// Re-runs the batch of the files landed last (after a failed trigger).
    fn retry(&mut self, files: usize) -> Result<(), String> {
        let batch: Vec<PathBuf> = self.landed[self.landed.len() - files..].to_vec();
        self.trigger(&batch)
    }

    fn schema(&self) -> Schema {
        crate::source::files::schema_store::latest(&self.location())
            .unwrap()
            .unwrap()
            .1
    }

    fn trigger(&mut self, files: &[PathBuf]) -> Result<(), String> {
        let metas: Vec<FileMeta> = files
            .iter()
            .map(|p| FileMeta::from_path(p).unwrap())
            .collect();
        for _attempt in 0..3 {
            // (Re)start: the schema comes from the schema location.
            let (format, typed) = (self.format, self.typed);
            let schema = resolve_with(
                &self.location(),
                self.hints.as_deref(),
                Path::new("landing"),
                || {
                    let schema = infer_schema(
                        &metas,
                        format,
                        &CsvOptions::default(),
                        &crate::spec::TextOptions::default(),
                        typed,
                    )
                    .map_err(|e| crate::Error::Source {
                        path: "landing".into(),
                        message: e.to_string(),
                    })?;
                    Ok(Some((
                        schema,
                        files
                            .iter()
                            .map(|p| p.to_string_lossy().into_owned())
                            .collect(),
                    )))
                },
            )
            .map_err(|e| e.to_string())?
            .ok_or("nothing to infer from")?;
            let spec = ReadSpec::new(self.format, Arc::clone(&schema));
            let mut batches = Vec::new();
            let mut new_fields: Vec<NewField> = Vec::new();
            let mut mismatches = Vec::new();
            for meta in &metas {
                let decoded = decode_file(meta, &spec).map_err(|e| e.to_string())?;
                batches.extend(decoded.batches);
                new_fields.extend(decoded.new_fields);
                mismatches.extend(decoded.type_mismatches);
            }
            if !self.typed {
                new_fields = strings_only(&new_fields);
            }
            match evolve(&schema, &new_fields, self.mode) {
                Decision::Unchanged => {
                    self.events
                        .extend(SchemaEvent::type_mismatches(&mismatches));
                    let batch_id = self.next_batch;
                    let (good, quarantined) = split_batches(batches, batch_id).unwrap();
                    self.quarantine.write(batch_id, &quarantined).unwrap();
                    self.table.extend(good);
                    self.next_batch += 1;
                    return Ok(());
                }
                decision @ Decision::Widen { .. } => {
                    let Decision::Widen {
                        schema,
                        added,
                        files,
                        reason,
                    } = &decision
                    else {
                        unreachable!()
                    };
                    let version =
                        record_version(&self.location(), schema, reason, files, added).unwrap();
                    self.events
                        .extend(SchemaEvent::schema_changed(&decision, version));
                    // Schema-change stop; the restart re-runs the batch with the wider schema.
                    self.restarts += 1;
                }
                Decision::Fail { message } => return Err(message),
            }
        }
        panic!("the batch did not settle after a schema change");
    }

    fn quarantined(&self) -> Vec<QuarantinedRecord> {
        self.quarantine.read_all().unwrap()
    }

    /// Every committed row as JSON (data columns, nulls omitted) and its `_rescued_data`.
    fn rows(&self) -> Vec<Row> {
        let mut out = Vec::new();
        for batch in &self.table {
            let rescued_index = batch.schema().index_of("_rescued_data").unwrap();
            let rescued = batch.column(rescued_index).as_string::<i32>().clone();
            let mut data = batch.clone();
            data.remove_column(rescued_index);
            let mut writer = arrow::json::LineDelimitedWriter::new(Vec::new());
            writer.write(&data).unwrap();
            writer.finish().unwrap();
            let text = String::from_utf8(writer.into_inner()).unwrap();
            for (row, line) in text.lines().enumerate() {
                let Value::Object(object) = serde_json::from_str(line).unwrap() else {
                    panic!("{line}")
                };
                let r = rescued.is_valid(row).then(|| {
                    match serde_json::from_str::<Value>(rescued.value(row)).unwrap() {
                        Value::Object(o) => o,
                        other => panic!("{other}"),
                    }
                });
                out.push((object, r));
            }
        }
        out
    }

    /// One column of every row, as JSON (`null` when absent).
    fn column(&self, name: &str) -> Vec<Value> {
        self.rows()
            .into_iter()
            .map(|(row, _)| row.get(name).cloned().unwrap_or(Value::Null))
            .collect()
    }

    /// Rows committed + records quarantined = records in the input, and every input
    /// value is in its column or in `_rescued_data` (with the file's path).
    fn assert_nothing_lost(&self) {
        let rows = self.rows();
        let quarantined = self.quarantined();
        let mut next_row = 0;
        let mut input_records = 0;
        for path in &self.landed {
            let file = path.to_string_lossy().into_owned();
            for (line_no, record) in input_records_of(path, self.format) {
                input_records += 1;
                let Some(record) = record else {
                    assert!(
                        quarantined
                            .iter()
                            .any(|q| q.file == file && q.line == Some(line_no as u64)),
                        "{file}:{line_no} is neither a row nor quarantined: {quarantined:?}"
                    );
                    continue;
                };
                let (row, rescued) = &rows[next_row];
                next_row += 1;
                if let Some(r) = rescued {
                    assert_eq!(r.get("_file_path"), Some(&json!(file)), "{r:?}");
                }
                let empty = Map::new();
                if let Err(e) = covered(&record, row, rescued.as_ref().unwrap_or(&empty), "") {
                    panic!("{file}:{line_no}: {e}\n row {row:?}\n rescued {rescued:?}");
                }
            }
        }
        assert_eq!(next_row, rows.len(), "rows without an input record");
        assert_eq!(
            rows.len() + quarantined.len(),
            input_records,
            "rows + quarantined = input records"
        );
    }
}

/// The records of an input file by line: `Some(object)` when it parses, `None` for a corrupt one.
fn input_records_of(path: &Path, format: FileFormat) -> Vec<(usize, Option<Map<String, Value>>)> {
    let bytes = std::fs::read(path).unwrap();
    let bytes = bytes
        .strip_prefix(b"\xEF\xBB\xBF")
        .unwrap_or(&bytes)
        .to_vec();
    let mut out = Vec::new();
    match format {
        FileFormat::Json => {
            for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let parsed = match serde_json::from_slice::<Value>(line) {
                    Ok(Value::Object(o)) => Some(o),
                    _ => None,
                };
                out.push((i + 1, parsed));
            }
        }
        FileFormat::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .from_reader(bytes.as_slice());
            let mut records = reader.byte_records();
            let header: Vec<String> = match records.next() {
                Some(Ok(h)) => crate::source::files::read::safe_header(
                    &h.iter()
                        .map(|f| String::from_utf8_lossy(f).into())
                        .collect::<Vec<_>>(),
                    None,
                ),
                _ => return out,
            };
            for record in records {
                let record = record.unwrap();
                let line = record.position().unwrap().line() as usize;
                let mut object = Map::new();
                let valid = true;
                for (i, field) in record.iter().enumerate() {
                    // A field that is not UTF-8 is rescued as its bytes in ISO-8859-1.
                    let text: String = match std::str::from_utf8(field) {
                        Ok(t) => t.to_string(),
                        Err(_) => field.iter().map(|&b| char::from(b)).collect(),
                    };
                    if text.is_empty() {
                        continue;
                    }
                    let name = header
                        .get(i)
                        .filter(|n| !n.is_empty())
                        .cloned()
                        .unwrap_or_else(|| format!("_c{i}"));
                    object.insert(name, Value::String(text));
                }
                out.push((line, valid.then_some(object)));
            }
        }
        FileFormat::Parquet => unreachable!("not used here"),
    }
    out
}

/// Whether every non-null value of `input` is in `row` (same place, same value
/// up to the column's representation) or in `rescued` (same place, same JSON).
fn covered(
    input: &Map<String, Value>,
    row: &Map<String, Value>,
    rescued: &Map<String, Value>,
    path: &str,
) -> Result<(), String> {
    let empty = Map::new();
    for (key, value) in input {
        if value.is_null() {
            continue;
        }
        let at = format!("{path}/{key}");
        let column = row.get(key).filter(|v| !v.is_null());
        let kept = rescued.get(key);
        match (value, column) {
            (Value::Object(inner), Some(Value::Object(out))) => covered(
                inner,
                out,
                kept.and_then(Value::as_object).unwrap_or(&empty),
                &at,
            )?,
            _ if kept == Some(value) => {}
            // A number rescued as its literal text (a double would round it).
            (Value::Number(n), _)
                if kept
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<f64>().ok())
                    .zip(n.as_f64())
                    // serde_json's default float parser may be one ulp off for long literals.
                    .is_some_and(|(a, b)| a == b || (a / b - 1.0).abs() < 1e-15) => {}
            (_, Some(out)) if same_value(value, out) => {}
            _ => {
                return Err(format!(
                    "{at} = {value} is neither in the row ({column:?}) nor in _rescued_data ({kept:?})"
                ));
            }
        }
    }
    Ok(())
}

/// The same value in its column's representation (a number in a string column is its
/// text; a timestamp is written back in ISO form; a decimal as text).
fn same_value(input: &Value, out: &Value) -> bool {
    let number = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse::<f64>().ok(),
        _ => None,
    };
    match (input, out) {
        (Value::String(a), Value::String(b)) => {
            a == b || (super::infer::looks_like_timestamp(a) && b.len() >= 19)
        }
        // Epoch seconds in a timestamp column, written back as ISO text.
        (Value::Number(n), Value::String(text)) if super::infer::looks_like_timestamp(text) => {
            chrono::DateTime::parse_from_rfc3339(text)
                .is_ok_and(|t| Some(t.timestamp()) == n.as_i64())
        }
        (Value::Number(_), _) | (_, Value::Number(_)) => match (number(input), number(out)) {
            (Some(a), Some(b)) => (a - b).abs() <= f64::EPSILON * a.abs().max(1.0) * 4.0,
            _ => false,
        },
        (Value::Bool(a), Value::Bool(b)) => a == b,
        (Value::Bool(a), Value::String(b)) => &a.to_string() == b,
        (Value::String(a), Value::Bool(b)) => a.eq_ignore_ascii_case(&b.to_string()),
        (Value::Array(a), Value::Array(b)) => a.len() == b.len(),
        (Value::Object(_) | Value::Array(_), Value::String(text)) => {
            serde_json::from_str::<Value>(text).ok().as_ref() == Some(input)
        }
        _ => false,
    }
}

fn versions(flow: &Flow) -> Vec<(String, Vec<String>)> {
    history_at(&flow.location())
        .unwrap()
        .into_iter()
        .map(|(_, v)| (v.ddl, v.added))
        .collect()
}

const MODES: [EvolutionMode; 4] = [
    EvolutionMode::AddNewColumns,
    EvolutionMode::Rescue,
    EvolutionMode::FailOnNewColumns,
    EvolutionMode::None,
];

/// A file per kind of drift, each landed and triggered on its own (with a restart
/// between triggers: the schema is read back from the schema location every time).
const SEQUENCE: [(&str, &str); 7] = [
    (
        "base.json",
        "{\"id\":1,\"qty\":10,\"name\":\"a\",\"meta\":{\"src\":\"web\"}}\n\
         {\"id\":2,\"qty\":20,\"name\":\"b\",\"meta\":{\"src\":\"app\"}}\n",
    ),
    (
        "add_column.json",
        "{\"id\":3,\"qty\":30,\"name\":\"c\",\"meta\":{\"src\":\"web\"},\"coupon\":\"SAVE5\"}\n",
    ),
    (
        "widen_int_to_double.json",
        "{\"id\":4,\"qty\":4.5,\"name\":\"d\",\"meta\":{\"src\":\"web\"}}\n",
    ),
    (
        "change_long_to_string.json",
        "{\"id\":5,\"qty\":\"five\",\"name\":\"e\",\"meta\":{\"src\":\"web\"}}\n",
    ),
    (
        "nested_field.json",
        "{\"id\":6,\"qty\":60,\"name\":\"f\",\"meta\":{\"src\":\"web\",\"ver\":2}}\n",
    ),
    (
        "drop_column.json",
        "{\"id\":7,\"qty\":70,\"meta\":{\"src\":\"app\"}}\n",
    ),
    (
        "broken.json",
        "{\"id\":8,\"qty\":80,\"name\":\"g\",\"meta\":{\"src\":\"web\"}}\n\
         {\"id\":9,\"qty\":\n\
         \n",
    ),
];

#[test]
fn every_mode_over_add_widen_change_nest_drop_sequence() {
    for mode in MODES {
        let mut flow = Flow::new(FileFormat::Json, mode);
        for (i, (name, text)) in SEQUENCE.iter().enumerate() {
            let result = flow.land(&[(name, text.as_bytes())]);
            match (mode, i) {
                // fail_on_new_columns stops until the schema is updated (here with
                // hints, which record a new version), then the batch is re-run.
                (EvolutionMode::FailOnNewColumns, 1) => {
                    let message = result.unwrap_err();
                    assert!(message.contains("coupon STRING"), "{message}");
                    assert!(message.contains("add_column.json"), "{message}");
                    flow.hints = Some("coupon STRING".into());
                    flow.retry(1).unwrap();
                }
                (EvolutionMode::FailOnNewColumns, 4) => {
                    let message = result.unwrap_err();
                    assert!(message.contains("meta.ver BIGINT"), "{message}");
                    flow.hints = Some("coupon STRING, meta.ver BIGINT".into());
                    flow.retry(1).unwrap();
                }
                _ => result.unwrap_or_else(|e| panic!("{mode} step {i}: {e}")),
            }
        }
        // A corrupt line in the last file: 1 record + 1 corrupt line (+ a blank line).
        let final_ddl = to_ddl(&flow.schema());
        match mode {
            EvolutionMode::AddNewColumns | EvolutionMode::FailOnNewColumns => {
                assert_eq!(
                    final_ddl,
                    "id BIGINT, qty BIGINT, name STRING, meta STRUCT<src: STRING, ver: BIGINT>, \
                     coupon STRING",
                    "{mode}"
                );
            }
            EvolutionMode::Rescue | EvolutionMode::None => {
                assert_eq!(
                    final_ddl, "id BIGINT, qty BIGINT, name STRING, meta STRUCT<src: STRING>",
                    "{mode}"
                );
            }
        }
        if mode == EvolutionMode::AddNewColumns {
            assert_eq!(
                versions(&flow)
                    .into_iter()
                    .map(|(_, added)| added)
                    .collect::<Vec<_>>(),
                [
                    vec![],
                    vec!["coupon".to_string()],
                    vec!["meta.ver".to_string()]
                ]
            );
            assert_eq!(flow.restarts, 2);
            let changed: Vec<&SchemaEvent> = flow
                .events
                .iter()
                .filter(|e| e.kind() == "schema_changed")
                .collect();
            assert_eq!(changed.len(), 2);
            assert!(
                matches!(changed[1], SchemaEvent::SchemaChanged { added, version: 2, file }
                if added == &["meta.ver"] && file.ends_with("nested_field.json"))
            );
        } else {
            assert_eq!(flow.restarts, 0, "{mode}");
        }
        // The type changes never widen: 4.5 and "five" are rescued and reported.
        let mismatches: Vec<(String, String)> = flow
            .events
            .iter()
            .filter_map(|e| match e {
                SchemaEvent::TypeMismatch { field, file, count } => {
                    assert_eq!(*count, 1);
                    Some((
                        field.clone(),
                        Path::new(file).file_name()?.to_string_lossy().into(),
                    ))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            mismatches,
            [
                ("qty".to_string(), "02_widen_int_to_double.json".to_string()),
                (
                    "qty".to_string(),
                    "03_change_long_to_string.json".to_string()
                )
            ],
            "{mode}"
        );
        let rows = flow.rows();
        assert_eq!(rows.len(), 8, "{mode}");
        assert_eq!(
            rows[3].0.get("qty"),
            None,
            "{mode}: 4.5 is never truncated to 4"
        );
        assert_eq!(rows[3].1.as_ref().unwrap()["qty"], json!(4.5));
        assert_eq!(rows[4].1.as_ref().unwrap()["qty"], json!("five"));
        assert_eq!(
            rows[6].0.get("name"),
            None,
            "{mode}: dropped column is null"
        );
        assert_eq!(rows[6].0["meta"], json!({"src": "app"}));
        let coupon = &rows[2];
        let nested = &rows[5];
        match mode {
            EvolutionMode::AddNewColumns | EvolutionMode::FailOnNewColumns => {
                assert_eq!(coupon.0["coupon"], json!("SAVE5"), "{mode}");
                assert!(coupon.1.is_none(), "{mode}");
                assert_eq!(nested.0["meta"], json!({"src": "web", "ver": 2}), "{mode}");
                assert!(nested.1.is_none(), "{mode}");
            }
            EvolutionMode::Rescue | EvolutionMode::None => {
                assert_eq!(
                    coupon.1.as_ref().unwrap()["coupon"],
                    json!("SAVE5"),
                    "{mode}"
                );
                assert_eq!(nested.0["meta"], json!({"src": "web"}), "{mode}");
                assert_eq!(
                    nested.1.as_ref().unwrap()["meta"],
                    json!({"ver": 2}),
                    "{mode}: the nested value keeps its path"
                );
            }
        }
        let quarantined = flow.quarantined();
        assert_eq!(quarantined.len(), 1, "{mode}");
        assert_eq!(quarantined[0].line, Some(2));
        assert_eq!(quarantined[0].raw, "{\"id\":9,\"qty\":");
        assert!(quarantined[0].file.ends_with("broken.json"));
        flow.assert_nothing_lost();
    }
}

#[test]
fn b01_types_that_differ_between_files() {
    let mut flow = Flow::new(FileFormat::Json, EvolutionMode::AddNewColumns);
    flow.land_cases(&["B01/step1/orders_1.json"]).unwrap();
    assert_eq!(
        to_ddl(&flow.schema()),
        "order_id BIGINT, user_id STRING, qty BIGINT"
    );
    flow.land_cases(&["B01/step2/orders_2.json"]).unwrap();
    assert_eq!(versions(&flow).len(), 1, "schema unchanged");
    assert_eq!(
        flow.column("user_id"),
        [
            Value::Null,
            Value::Null,
            json!("u-17"),
            json!("u-18"),
            json!("19")
        ]
    );
    assert_eq!(
        flow.column("qty"),
        [json!(1), json!(2), Value::Null, json!(4), Value::Null]
    );
    let rows = flow.rows();
    assert_eq!(rows[2].1.as_ref().unwrap()["qty"], json!("3"));
    assert_eq!(rows[4].1.as_ref().unwrap()["qty"], json!(5.5));
    flow.assert_nothing_lost();

    // All-strings inference: nothing is rescued.
    let mut flow = Flow::new(FileFormat::Json, EvolutionMode::AddNewColumns);
    flow.typed = false;
    flow.land_cases(&["B01/step1/orders_1.json"]).unwrap();
    flow.land_cases(&["B01/step2/orders_2.json"]).unwrap();
    assert_eq!(
        flow.column("qty"),
        [json!("1"), json!("2"), json!("3"), json!("4"), json!("5.5")]
    );
    assert!(flow.rows().iter().all(|(_, r)| r.is_none()));
    flow.assert_nothing_lost();
}

#[test]
fn b02_case_only_collisions_never_become_columns() {
    for mode in MODES {
        let mut flow = Flow::new(FileFormat::Json, mode);
        for step in ["B02/step1/a.json", "B02/step2/b.json", "B02/step3/c.json"] {
            flow.land_cases(&[step]).unwrap();
        }
        assert_eq!(to_ddl(&flow.schema()), "id BIGINT, Photo STRING", "{mode}");
        assert_eq!(versions(&flow).len(), 1);
        let rows = flow.rows();
        assert_eq!(
            flow.column("Photo"),
            [json!("p1.png"), Value::Null, json!("p3.png")]
        );
        assert_eq!(rows[1].1.as_ref().unwrap()["photo"], json!("p2.png"));
        assert_eq!(rows[2].1.as_ref().unwrap()["photo"], json!("p3-thumb.png"));
        flow.assert_nothing_lost();
    }
    let mut flow = Flow::new(FileFormat::Json, EvolutionMode::AddNewColumns);
    flow.land_cases(&["B02/variant_single_object/d.json"])
        .unwrap();
    assert_eq!(to_ddl(&flow.schema()), "Code STRING, Qty BIGINT");
    assert_eq!(flow.rows()[0].1.as_ref().unwrap()["qty"], json!(7));
    flow.assert_nothing_lost();
}

#[test]
fn b03_dotted_and_odd_names_stay_literal() {
    let mut flow = Flow::new(FileFormat::Json, EvolutionMode::AddNewColumns);
    flow.land(&[("geo.json", b"{\"id\":0,\"geo\":{\"lat\":\"n0\"}}\n")])
        .unwrap();
    flow.land_cases(&["B03/step1/names.json"]).unwrap();
    assert_eq!(
        to_ddl(&flow.schema()),
        "id BIGINT, geo STRUCT<lat: STRING>, `geo.lat` STRING, `order id` BIGINT, \
         `unit price(EUR)` DOUBLE, `k=v` STRING"
    );
    assert_eq!(
        versions(&flow)[1].1,
        ["`geo.lat`", "`order id`", "`unit price(EUR)`", "`k=v`"]
    );
    let rows = flow.rows();
    assert_eq!(rows[1].0["geo.lat"], json!("dotted"));
    assert_eq!(rows[1].0["geo"], json!({"lat": "nested"}));
    assert_eq!(rows[1].0["order id"], json!(7));
    flow.assert_nothing_lost();
}

#[test]
fn b04_nested_struct_in_every_mode() {
    for mode in MODES {
        let mut flow = Flow::new(FileFormat::Json, mode);
        flow.land_cases(&["B04/step1/n1.json"]).unwrap();
        assert_eq!(
            to_ddl(&flow.schema()),
            "id BIGINT, meta STRUCT<src: STRING>"
        );
        let step2 = flow.land_cases(&["B04/step2/n2.json"]);
        if mode == EvolutionMode::FailOnNewColumns {
            assert!(step2.unwrap_err().contains("meta.ver BIGINT"));
            flow.hints = Some("meta.ver BIGINT".into());
            flow.retry(1).unwrap();
        } else {
            step2.unwrap();
        }
        flow.land_cases(&["B04/step3/n3.json"]).unwrap();
        let rows = flow.rows();
        assert_eq!(rows.len(), 4, "{mode}");
        match mode {
            EvolutionMode::AddNewColumns | EvolutionMode::FailOnNewColumns => {
                assert_eq!(
                    to_ddl(&flow.schema()),
                    "id BIGINT, meta STRUCT<src: STRING, ver: BIGINT>"
                );
                assert_eq!(rows[2].0["meta"], json!({"src": "app", "ver": 2}));
            }
            EvolutionMode::Rescue | EvolutionMode::None => {
                assert_eq!(rows[2].0["meta"], json!({"src": "app"}));
                assert_eq!(rows[2].1.as_ref().unwrap()["meta"], json!({"ver": 2}));
            }
        }
        assert_eq!(rows[3].0.get("meta"), None);
        assert_eq!(rows[3].1.as_ref().unwrap()["meta"], json!("legacy-string"));
        flow.assert_nothing_lost();
    }
}

#[test]
fn b06_null_only_column_waits_for_a_typed_value() {
    let mut flow = Flow::new(FileFormat::Json, EvolutionMode::AddNewColumns);
    flow.land_cases(&["B06/step1/t1.json"]).unwrap();
    flow.land_cases(&["B06/step2/t2.json"]).unwrap();
    assert_eq!(
        versions(&flow).len(),
        1,
        "no void column, no version for a null-only field"
    );
    assert_eq!(to_ddl(&flow.schema()), "id BIGINT, amount BIGINT");
    flow.land_cases(&["B06/step3/t3.json"]).unwrap();
    assert_eq!(
        to_ddl(&flow.schema()),
        "id BIGINT, amount BIGINT, coupon STRING"
    );
    assert_eq!(
        flow.column("coupon"),
        [Value::Null, Value::Null, json!("SAVE5")]
    );
    assert!(flow.rows().iter().all(|(_, r)| r.is_none()));
    flow.assert_nothing_lost();
}

#[test]
fn b07_mixed_int_float_and_decimal_hints_too_wide() {
    let mut flow = Flow::new(FileFormat::Json, EvolutionMode::AddNewColumns);
    flow.land_cases(&["B07/step1/p1.json"]).unwrap();
    flow.land_cases(&["B07/step2/p2.json"]).unwrap();
    assert_eq!(
        to_ddl(&flow.schema()),
        "sku STRING, price DOUBLE, rate DOUBLE"
    );
    assert_eq!(flow.column("price")[2], json!(0.1));
    assert!(flow.rows().iter().all(|(_, r)| r.is_none()));
    flow.assert_nothing_lost();

    // "Prefer decimal" by hints: the 41-digit price does not fit DECIMAL(21,1) and
    // is rescued with its text, never truncated.
    let mut flow = Flow::new(FileFormat::Json, EvolutionMode::AddNewColumns);
    flow.hints = Some("price DECIMAL(21,1), rate DECIMAL(21,1)".into());
    flow.land_cases(&["B07/step1/p1.json"]).unwrap();
    flow.land_cases(&["B07/step2/p2.json"]).unwrap();
    assert_eq!(
        to_ddl(&flow.schema()),
        "sku STRING, price DECIMAL(21,1), rate DECIMAL(21,1)"
    );
    let price = flow.column("price");
    assert_eq!(price[2].to_string().trim_matches('"'), "0.1");
    assert_eq!(price[3], Value::Null);
    let rows = flow.rows();
    assert_eq!(
        rows[3].1.as_ref().unwrap()["price"],
        "1234567890123456789012345678901234567890.5",
        "rescued as its literal text, not a rounded double"
    );
    assert!(flow.events.iter().any(|e| matches!(e,
        SchemaEvent::TypeMismatch { field, count: 1, .. } if field == "price")));
    flow.assert_nothing_lost();
}

#[test]
fn b08_csv_header_drift_in_every_mode() {
    for mode in MODES {
        let mut flow = Flow::new(FileFormat::Csv, mode);
        flow.land_cases(&["B08/step1/h1.csv"]).unwrap();
        flow.land_cases(&["B08/step2/h2.csv"]).unwrap();
        let step3 = flow.land_cases(&["B08/step3/h3.csv"]);
        if mode == EvolutionMode::FailOnNewColumns {
            assert!(step3.unwrap_err().contains("salinity DOUBLE"));
            flow.hints = Some("salinity DOUBLE".into());
            flow.retry(1).unwrap();
        } else {
            step3.unwrap();
        }
        flow.land_cases(&["B08/step4/h4.csv"]).unwrap();
        assert_eq!(
            flow.column("id"),
            [json!(1), json!(2), json!(3), json!(4), json!(5)]
        );
        assert_eq!(
            flow.column("temp"),
            [
                json!(20.5),
                json!(21.0),
                json!(19.5),
                json!(18.0),
                json!(17.5)
            ]
        );
        assert_eq!(
            flow.column("depth"),
            [json!(3), json!(4), json!(5), json!(6), Value::Null]
        );
        let rows = flow.rows();
        match mode {
            EvolutionMode::AddNewColumns | EvolutionMode::FailOnNewColumns => {
                assert_eq!(
                    to_ddl(&flow.schema()),
                    "id BIGINT, temp DOUBLE, depth BIGINT, salinity DOUBLE"
                );
                assert_eq!(
                    flow.column("salinity"),
                    [
                        Value::Null,
                        Value::Null,
                        Value::Null,
                        json!(35.1),
                        Value::Null
                    ]
                );
            }
            EvolutionMode::Rescue | EvolutionMode::None => {
                assert_eq!(rows[3].1.as_ref().unwrap()["salinity"], json!("35.1"));
            }
        }
        flow.assert_nothing_lost();
    }
}

#[test]
fn bom_files_infer_clean_names_and_new_columns() {
    let mut flow = Flow::new(FileFormat::Csv, EvolutionMode::AddNewColumns);
    flow.land_cases(&["B09/step1/bom.csv"]).unwrap();
    flow.land_cases(&["B09/step2/nobom.csv"]).unwrap();
    flow.land(&[("bom_extra.csv", b"\xEF\xBB\xBFid,name,score\n4,Di,7\n")])
        .unwrap();
    assert_eq!(
        to_ddl(&flow.schema()),
        "id BIGINT, name STRING, score BIGINT"
    );
    assert_eq!(flow.column("id"), [json!(1), json!(2), json!(3), json!(4)]);
    assert_eq!(flow.column("score")[3], json!(7));
    flow.assert_nothing_lost();

    let mut flow = Flow::new(FileFormat::Json, EvolutionMode::AddNewColumns);
    flow.land_cases(&["B09/variant_json/bom.json"]).unwrap();
    assert_eq!(to_ddl(&flow.schema()), "id BIGINT, name STRING");
    assert!(flow.quarantined().is_empty());
    flow.assert_nothing_lost();
}

#[test]
fn latin1_field_is_rescued_losslessly_and_the_rest_of_the_row_kept() {
    let mut flow = Flow::new(FileFormat::Csv, EvolutionMode::AddNewColumns);
    flow.land(&[("utf8.csv", "id,city\n1,Zürich\n".as_bytes())])
        .unwrap();
    flow.land(&[("latin1.csv", b"id,city\n2,Z\xfcrich\n3,Paris\n")])
        .unwrap();
    assert_eq!(
        flow.column("city"),
        [json!("Zürich"), Value::Null, json!("Paris")]
    );
    assert_eq!(flow.column("id"), [json!(1), json!(2), json!(3)]);
    assert!(flow.quarantined().is_empty());
    flow.assert_nothing_lost();
}

#[test]
fn hints_pin_types_so_a_double_is_not_a_mismatch() {
    let mut flow = Flow::new(FileFormat::Json, EvolutionMode::AddNewColumns);
    flow.hints = Some("qty DOUBLE, ts TIMESTAMP, extra.note STRING".into());
    flow.land(&[(
        "a.json",
        b"{\"id\":1,\"qty\":1,\"ts\":1704164645}\n{\"id\":2,\"qty\":2,\"ts\":\"2024-01-02T03:04:05Z\"}\n",
    )])
    .unwrap();
    assert_eq!(
        to_ddl(&flow.schema()),
        "id BIGINT, qty DOUBLE, ts TIMESTAMP, extra STRUCT<note: STRING>"
    );
    flow.land(&[(
        "b.json",
        b"{\"id\":3,\"qty\":4.5,\"extra\":{\"note\":\"n\",\"more\":1}}\n",
    )])
    .unwrap();
    assert_eq!(
        to_ddl(&flow.schema()),
        "id BIGINT, qty DOUBLE, ts TIMESTAMP, extra STRUCT<note: STRING, more: BIGINT>"
    );
    assert_eq!(flow.column("qty"), [json!(1.0), json!(2.0), json!(4.5)]);
    let ts = flow.column("ts");
    assert_eq!(
        ts[0], ts[1],
        "epoch seconds and ISO text are the same instant"
    );
    assert!(
        flow.events.iter().all(|e| e.kind() != "type_mismatch"),
        "{:?}",
        flow.events
    );
    flow.assert_nothing_lost();
}
