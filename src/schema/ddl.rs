//! Spark-style DDL schema strings: `"id BIGINT, ts TIMESTAMP, meta STRUCT<src: STRING>"`.
//!
//! # Grammar
//!
//! ```text
//! schema  := [STRUCT '<'] column (',' column)* ['>']
//! column  := name [':'] type [NOT NULL] [COMMENT 'text']
//! name    := word | `back-quoted` (a doubled `` ` `` inside is one backtick)
//! type    := STRING | VARCHAR(n) | CHAR(n)            -> Utf8
//!          | BIGINT | LONG                            -> Int64
//!          | INT | INTEGER                            -> Int32
//!          | SMALLINT | SHORT                         -> Int16
//!          | TINYINT | BYTE                           -> Int8
//!          | DOUBLE                                   -> Float64
//!          | FLOAT | REAL                             -> Float32
//!          | BOOLEAN                                  -> Boolean
//!          | DATE                                     -> Date32
//!          | TIMESTAMP | TIMESTAMP_LTZ                -> Timestamp(Microsecond, "UTC")
//!          | TIMESTAMP_NTZ                            -> Timestamp(Microsecond, None)
//!          | DECIMAL | DEC | NUMERIC [(p[, s])]       -> Decimal128(p, s), default (10, 0)
//!          | BINARY                                   -> Binary
//!          | ARRAY<type>                              -> List (item field `element`)
//!          | STRUCT<column, ...>                      -> Struct
//!          | MAP<type, type>                          -> Map (`key_value` entries of `key`, `value`)
//! ```
//!
//! Keywords are case-insensitive. `TIMESTAMP` is Spark's instant type: it is stored
//! as microseconds since the epoch in UTC. The list and map child names follow
//! Delta Lake's Arrow mapping (`element`, `key_value`/`key`/`value`) so batches
//! reach the Delta sink without a rename.
//!
//! Every column is nullable: weir reads files the way Spark does, with all columns
//! nullable whatever the declared schema says. `NOT NULL` is therefore accepted
//! (so a schema copied from Spark's `toDDL` parses) and has no effect. `COMMENT`
//! is kept in the field's metadata under the key `comment`.
//!
//! Column names are literal: `geo.lat` is one column named `geo.lat`, never a path.
//! Two columns whose names differ only by case are an error, because the Delta
//! table they land in is case-insensitive.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema, TimeUnit};

use super::SchemaError;

/// The types `parse_ddl` accepts, for error messages.
pub const ALLOWED_TYPES: &str = "STRING, BIGINT (LONG), INT (INTEGER), SMALLINT, TINYINT, \
     DOUBLE, FLOAT (REAL), BOOLEAN, DATE, TIMESTAMP, TIMESTAMP_NTZ, DECIMAL(p,s), BINARY, \
     ARRAY<type>, STRUCT<name: type, ...>, MAP<key type, value type>";

/// Timezone of Spark's `TIMESTAMP` (instant) type in Arrow.
pub const UTC: &str = "UTC";

/// Metadata key holding a column's `COMMENT`.
pub const COMMENT_KEY: &str = "comment";

/// Parses a Spark DDL schema string into an Arrow schema (all fields nullable).
///
/// Errors name the byte position, the column being parsed, and the allowed types.
pub fn parse_ddl(ddl: &str) -> Result<Schema, SchemaError> {
    let tokens = tokenize(ddl)?;
    let mut parser = Parser {
        tokens,
        pos: 0,
        len: ddl.len(),
        column: None,
    };
    // An optional `STRUCT< ... >` wrapper around the whole list (Spark accepts it).
    let wrapped = parser.peek_keyword("STRUCT") && matches!(parser.peek_at(1), Some(Tok::Lt));
    if wrapped {
        parser.pos += 2;
    }
    let fields = parser.columns(if wrapped { Some(Tok::Gt) } else { None })?;
    if wrapped {
        parser.expect(&Tok::Gt, "`>` closing STRUCT<")?;
    }
    if let Some((tok, at)) = parser.next() {
        return Err(parser.error_at(at, format!("unexpected {} after the last column", tok)));
    }
    if fields.is_empty() {
        return Err(SchemaError::Ddl {
            position: 0,
            column: None,
            message: format!(
                "the schema is empty; expected `name TYPE, ...` with types {ALLOWED_TYPES}"
            ),
        });
    }
    Ok(Schema::new(fields))
}

/// Renders a schema as DDL, the inverse of [`parse_ddl`] for the types it accepts.
///
/// Names are back-quoted only when they are not plain identifiers. Arrow types
/// with no Spark DDL spelling are shown in Arrow's own notation (for display
/// only; such a string does not parse back).
pub fn to_ddl(schema: &Schema) -> String {
    let mut out = String::new();
    for (i, field) in schema.fields().iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_column(&mut out, field, " ");
    }
    out
}

/// Renders one data type as DDL (`BIGINT`, `STRUCT<a: STRING>`, ...).
pub fn type_to_ddl(data_type: &DataType) -> String {
    let mut out = String::new();
    write_type(&mut out, data_type);
    out
}

fn write_column(out: &mut String, field: &Field, separator: &str) {
    write_name(out, field.name());
    out.push_str(separator);
    write_type(out, field.data_type());
    if let Some(comment) = field.metadata().get(COMMENT_KEY) {
        out.push_str(" COMMENT '");
        out.push_str(&comment.replace('\\', "\\\\").replace('\'', "\\'"));
        out.push('\'');
    }
}

/// A column name as DDL writes it: as is when it is a plain identifier, otherwise
/// back-quoted (`` `order id` ``, with a backtick doubled).
pub fn quote_name(name: &str) -> String {
    let mut out = String::new();
    write_name(&mut out, name);
    out
}

fn write_name(out: &mut String, name: &str) {
    let plain = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.bytes().all(|b| b.is_ascii_digit());
    if plain {
        out.push_str(name);
    } else {
        out.push('`');
        out.push_str(&name.replace('`', "``"));
        out.push('`');
    }
}

fn write_type(out: &mut String, data_type: &DataType) {
    match data_type {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => out.push_str("STRING"),
        DataType::Int64 => out.push_str("BIGINT"),
        DataType::Int32 => out.push_str("INT"),
        DataType::Int16 => out.push_str("SMALLINT"),
        DataType::Int8 => out.push_str("TINYINT"),
        DataType::Float64 => out.push_str("DOUBLE"),
        DataType::Float32 => out.push_str("FLOAT"),
        DataType::Boolean => out.push_str("BOOLEAN"),
        DataType::Date32 => out.push_str("DATE"),
        DataType::Timestamp(_, Some(_)) => out.push_str("TIMESTAMP"),
        DataType::Timestamp(_, None) => out.push_str("TIMESTAMP_NTZ"),
        DataType::Decimal128(p, s) => {
            let _ = write!(out, "DECIMAL({p},{s})");
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => out.push_str("BINARY"),
        DataType::List(item) | DataType::LargeList(item) => {
            out.push_str("ARRAY<");
            write_type(out, item.data_type());
            out.push('>');
        }
        DataType::Struct(fields) => {
            out.push_str("STRUCT<");
            for (i, field) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_column(out, field, ": ");
            }
            out.push('>');
        }
        DataType::Map(entries, _) => {
            out.push_str("MAP<");
            if let DataType::Struct(kv) = entries.data_type()
                && kv.len() == 2
            {
                write_type(out, kv[0].data_type());
                out.push_str(", ");
                write_type(out, kv[1].data_type());
            }
            out.push('>');
        }
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

/// A list item field as Delta Lake's Arrow mapping names it.
pub fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("element", item, true)))
}

/// A map type as Delta Lake's Arrow mapping names it (keys are never null).
pub fn map_of(key: DataType, value: DataType) -> DataType {
    let entries = Fields::from(vec![
        Field::new("key", key, false),
        Field::new("value", value, true),
    ]);
    DataType::Map(
        Arc::new(Field::new("key_value", DataType::Struct(entries), false)),
        false,
    )
}

/// Spark's `TIMESTAMP` (an instant): microseconds, UTC.
pub fn timestamp_utc() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Quoted(String),
    Str(String),
    Lt,
    Gt,
    LParen,
    RParen,
    Comma,
    Colon,
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Word(w) => write!(f, "`{w}`"),
            Tok::Quoted(w) => write!(f, "quoted name `{w}`"),
            Tok::Str(s) => write!(f, "string '{s}'"),
            Tok::Lt => f.write_str("`<`"),
            Tok::Gt => f.write_str("`>`"),
            Tok::LParen => f.write_str("`(`"),
            Tok::RParen => f.write_str("`)`"),
            Tok::Comma => f.write_str("`,`"),
            Tok::Colon => f.write_str("`:`"),
        }
    }
}

fn tokenize(ddl: &str) -> Result<Vec<(Tok, usize)>, SchemaError> {
    let mut tokens = Vec::new();
    let mut chars = ddl.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let tok = match c {
            c if c.is_whitespace() => continue,
            '<' => Tok::Lt,
            '>' => Tok::Gt,
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            ',' => Tok::Comma,
            ':' => Tok::Colon,
            '`' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some((_, '`')) => {
                            if matches!(chars.peek(), Some((_, '`'))) {
                                chars.next();
                                name.push('`');
                            } else {
                                break;
                            }
                        }
                        Some((_, c)) => name.push(c),
                        None => {
                            return Err(SchemaError::Ddl {
                                position: at,
                                column: None,
                                message: "unterminated back-quoted name".into(),
                            });
                        }
                    }
                }
                Tok::Quoted(name)
            }
            '\'' | '"' => {
                let quote = c;
                let mut text = String::new();
                loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, c)) => text.push(c),
                            None => break,
                        },
                        Some((_, c)) if c == quote => break,
                        Some((_, c)) => text.push(c),
                        None => {
                            return Err(SchemaError::Ddl {
                                position: at,
                                column: None,
                                message: "unterminated string literal".into(),
                            });
                        }
                    }
                }
                Tok::Str(text)
            }
            c if c.is_alphanumeric() || c == '_' => {
                let mut word = String::from(c);
                while let Some((_, c)) = chars.peek() {
                    if c.is_alphanumeric() || *c == '_' {
                        word.push(*c);
                        chars.next();
                    } else {
                        break;
                    }
                }
                Tok::Word(word)
            }
            other => {
                return Err(SchemaError::Ddl {
                    position: at,
                    column: None,
                    message: format!(
                        "unexpected character `{other}`; quote names with special characters in backticks, e.g. `order id` STRING"
                    ),
                });
            }
        };
        tokens.push((tok, at));
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<(Tok, usize)>,
    pos: usize,
    len: usize,
    /// Path of the column being parsed (`meta.src` inside a struct), for errors.
    column: Option<String>,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|(t, _)| t)
    }

    fn peek_at(&self, ahead: usize) -> Option<&Tok> {
        self.tokens.get(self.pos + ahead).map(|(t, _)| t)
    }

    fn peek_keyword(&self, keyword: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(w)) if w.eq_ignore_ascii_case(keyword))
    }

    fn next(&mut self) -> Option<(Tok, usize)> {
        let tok = self.tokens.get(self.pos).cloned();
        if tok.is_some() {
            self.pos += 1;
        }
        tok
    }

    fn here(&self) -> usize {
        self.tokens.get(self.pos).map_or(self.len, |(_, at)| *at)
    }

    fn error_at(&self, position: usize, message: String) -> SchemaError {
        SchemaError::Ddl {
            position,
            column: self.column.clone(),
            message,
        }
    }

    fn expect(&mut self, want: &Tok, what: &str) -> Result<(), SchemaError> {
        match self.next() {
            Some((tok, _)) if &tok == want => Ok(()),
            Some((tok, at)) => Err(self.error_at(at, format!("expected {what}, found {tok}"))),
            None => Err(self.error_at(self.len, format!("expected {what}, found the end"))),
        }
    }

    /// Columns separated by commas, until the end or `close` (not consumed).
    fn columns(&mut self, close: Option<Tok>) -> Result<Vec<Field>, SchemaError> {
        let mut fields: Vec<Field> = Vec::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        let parent = self.column.clone();
        loop {
            if self.peek().is_none() || (close.is_some() && self.peek() == close.as_ref()) {
                if !fields.is_empty() {
                    let at = self.here();
                    return Err(self.error_at(at, "expected a column after `,`".into()));
                }
                break;
            }
            let at = self.here();
            let name = match self.next() {
                Some((Tok::Word(w), _)) | Some((Tok::Quoted(w), _)) => w,
                Some((tok, at)) => {
                    return Err(self.error_at(at, format!("expected a column name, found {tok}")));
                }
                None => {
                    return Err(self.error_at(self.len, "expected a column name".into()));
                }
            };
            self.column = Some(match &parent {
                Some(p) => format!("{p}.{name}"),
                None => name.clone(),
            });
            if let Some(first) = seen.insert(name.to_lowercase(), name.clone()) {
                return Err(self.error_at(
                    at,
                    format!(
                        "duplicate column `{name}` (same as `{first}` ignoring case; Delta tables are case-insensitive)"
                    ),
                ));
            }
            if matches!(self.peek(), Some(Tok::Colon)) {
                self.pos += 1;
            }
            let data_type = self.data_type()?;
            let mut field = Field::new(name, data_type, true);
            self.modifiers(&mut field)?;
            fields.push(field);
            match self.peek() {
                Some(Tok::Comma) => {
                    self.pos += 1;
                }
                _ => break,
            }
        }
        self.column = parent;
        Ok(fields)
    }

    /// `NOT NULL` (accepted, no effect) and `COMMENT '...'`.
    fn modifiers(&mut self, field: &mut Field) -> Result<(), SchemaError> {
        loop {
            if self.peek_keyword("NOT") {
                let at = self.here();
                self.pos += 1;
                if !self.peek_keyword("NULL") {
                    return Err(self.error_at(at, "expected NULL after NOT".into()));
                }
                self.pos += 1;
            } else if self.peek_keyword("COMMENT") {
                self.pos += 1;
                match self.next() {
                    Some((Tok::Str(text), _)) => {
                        let mut metadata = field.metadata().clone();
                        metadata.insert(COMMENT_KEY.into(), text);
                        field.set_metadata(metadata);
                    }
                    Some((tok, at)) => {
                        return Err(self.error_at(
                            at,
                            format!("expected a quoted comment after COMMENT, found {tok}"),
                        ));
                    }
                    None => {
                        return Err(self
                            .error_at(self.len, "expected a quoted comment after COMMENT".into()));
                    }
                }
            } else {
                return Ok(());
            }
        }
    }

    fn data_type(&mut self) -> Result<DataType, SchemaError> {
        let (word, at) = match self.next() {
            Some((Tok::Word(w), at)) => (w, at),
            Some((tok, at)) => {
                return Err(self.error_at(
                    at,
                    format!("expected a type, found {tok}; allowed types: {ALLOWED_TYPES}"),
                ));
            }
            None => {
                return Err(self.error_at(
                    self.len,
                    format!("expected a type, found the end; allowed types: {ALLOWED_TYPES}"),
                ));
            }
        };
        let upper = word.to_ascii_uppercase();
        let data_type = match upper.as_str() {
            "STRING" => DataType::Utf8,
            "VARCHAR" | "CHAR" => {
                // The length is accepted and not enforced.
                self.optional_numbers(at, &upper, 1)?;
                DataType::Utf8
            }
            "BIGINT" | "LONG" => DataType::Int64,
            "INT" | "INTEGER" => DataType::Int32,
            "SMALLINT" | "SHORT" => DataType::Int16,
            "TINYINT" | "BYTE" => DataType::Int8,
            "DOUBLE" => DataType::Float64,
            "FLOAT" | "REAL" => DataType::Float32,
            "BOOLEAN" | "BOOL" => DataType::Boolean,
            "DATE" => DataType::Date32,
            "TIMESTAMP" | "TIMESTAMP_LTZ" => timestamp_utc(),
            "TIMESTAMP_NTZ" => DataType::Timestamp(TimeUnit::Microsecond, None),
            "BINARY" => DataType::Binary,
            "DECIMAL" | "DEC" | "NUMERIC" => {
                let numbers = self.optional_numbers(at, &upper, 2)?;
                let precision = numbers.first().copied().unwrap_or(10);
                let scale = numbers.get(1).copied().unwrap_or(0);
                if !(1..=38).contains(&precision) || scale > precision {
                    return Err(self.error_at(
                        at,
                        format!(
                            "DECIMAL({precision},{scale}) is out of range: precision must be 1..=38 and scale 0..=precision"
                        ),
                    ));
                }
                // Both fit: precision <= 38, scale <= precision.
                DataType::Decimal128(precision as u8, scale as i8)
            }
            "ARRAY" => {
                self.expect(&Tok::Lt, "`<` after ARRAY")?;
                let item = self.data_type()?;
                self.expect(&Tok::Gt, "`>` closing ARRAY<")?;
                list_of(item)
            }
            "MAP" => {
                self.expect(&Tok::Lt, "`<` after MAP")?;
                let key = self.data_type()?;
                self.expect(&Tok::Comma, "`,` between the MAP key and value types")?;
                let value = self.data_type()?;
                self.expect(&Tok::Gt, "`>` closing MAP<")?;
                map_of(key, value)
            }
            "STRUCT" => {
                self.expect(&Tok::Lt, "`<` after STRUCT")?;
                let fields = self.columns(Some(Tok::Gt))?;
                self.expect(&Tok::Gt, "`>` closing STRUCT<")?;
                DataType::Struct(Fields::from(fields))
            }
            _ => {
                return Err(self.error_at(
                    at,
                    format!("unknown type `{word}`; allowed types: {ALLOWED_TYPES}"),
                ));
            }
        };
        Ok(data_type)
    }

    /// `(n)` or `(n, m)` after a type name, when present: up to `max` numbers.
    fn optional_numbers(
        &mut self,
        at: usize,
        type_name: &str,
        max: usize,
    ) -> Result<Vec<u32>, SchemaError> {
        let mut numbers = Vec::new();
        if !matches!(self.peek(), Some(Tok::LParen)) {
            return Ok(numbers);
        }
        self.pos += 1;
        loop {
            match self.next() {
                Some((Tok::Word(w), num_at)) => match w.parse::<u32>() {
                    Ok(n) if numbers.len() < max => numbers.push(n),
                    _ => {
                        return Err(self.error_at(
                            num_at,
                            format!("{type_name} takes at most {max} whole number(s), found `{w}`"),
                        ));
                    }
                },
                Some((tok, num_at)) => {
                    return Err(self.error_at(
                        num_at,
                        format!("expected a number in {type_name}(...), found {tok}"),
                    ));
                }
                None => {
                    return Err(self.error_at(at, format!("unterminated {type_name}(...)")));
                }
            }
            match self.next() {
                Some((Tok::Comma, _)) => continue,
                Some((Tok::RParen, _)) => return Ok(numbers),
                Some((tok, at)) => {
                    return Err(self.error_at(
                        at,
                        format!("expected `,` or `)` in {type_name}(...), found {tok}"),
                    ));
                }
                None => {
                    return Err(self.error_at(at, format!("unterminated {type_name}(...)")));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let schema = parse_ddl(
            "id BIGINT, ts TIMESTAMP, amount DECIMAL(12,2), name STRING, ok BOOLEAN, d DATE, \
             tags ARRAY<STRING>, meta STRUCT<src: STRING, ver: BIGINT>",
        )
        .unwrap();
        let types: Vec<_> = schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        assert_eq!(
            types,
            vec![
                DataType::Int64,
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                DataType::Decimal128(12, 2),
                DataType::Utf8,
                DataType::Boolean,
                DataType::Date32,
                list_of(DataType::Utf8),
                DataType::Struct(Fields::from(vec![
                    Field::new("src", DataType::Utf8, true),
                    Field::new("ver", DataType::Int64, true),
                ])),
            ]
        );
        assert!(schema.fields().iter().all(|f| f.is_nullable()));
        assert_eq!(
            to_ddl(&schema),
            "id BIGINT, ts TIMESTAMP, amount DECIMAL(12,2), name STRING, ok BOOLEAN, d DATE, \
             tags ARRAY<STRING>, meta STRUCT<src: STRING, ver: BIGINT>"
        );
    }

    #[test]
    fn spark_synonyms_and_case() {
        let schema = parse_ddl(
            "a long, b integer, c short, d byte, e real, f float, g timestamp_ntz, \
             h decimal, i map<string, array<int>>, j binary, k varchar(10), l NUMERIC(5)",
        )
        .unwrap();
        let types: Vec<_> = schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        assert_eq!(types[0], DataType::Int64);
        assert_eq!(types[1], DataType::Int32);
        assert_eq!(types[2], DataType::Int16);
        assert_eq!(types[3], DataType::Int8);
        assert_eq!(types[4], DataType::Float32);
        assert_eq!(types[5], DataType::Float32);
        assert_eq!(types[6], DataType::Timestamp(TimeUnit::Microsecond, None));
        assert_eq!(types[7], DataType::Decimal128(10, 0));
        assert_eq!(types[8], map_of(DataType::Utf8, list_of(DataType::Int32)));
        assert_eq!(types[9], DataType::Binary);
        assert_eq!(types[10], DataType::Utf8);
        assert_eq!(types[11], DataType::Decimal128(5, 0));
        // Round trip through to_ddl.
        assert_eq!(parse_ddl(&to_ddl(&schema)).unwrap(), schema);
    }

    #[test]
    fn nested_closing_brackets_and_struct_wrapper() {
        let schema =
            parse_ddl("struct<a: array<array<int>>, b: struct<c: map<string,long>>>").unwrap();
        assert_eq!(schema.fields().len(), 2);
        assert_eq!(
            schema.field(0).data_type(),
            &list_of(list_of(DataType::Int32))
        );
        assert_eq!(
            to_ddl(&schema),
            "a ARRAY<ARRAY<INT>>, b STRUCT<c: MAP<STRING, BIGINT>>"
        );
    }

    #[test]
    fn quoted_names_are_literal() {
        let schema =
            parse_ddl("`geo.lat` STRING, `order id` BIGINT, `unit price(EUR)` DOUBLE, `k=v` STRING, `a``b` INT")
                .unwrap();
        let names: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            ["geo.lat", "order id", "unit price(EUR)", "k=v", "a`b"]
        );
        assert_eq!(parse_ddl(&to_ddl(&schema)).unwrap(), schema);
    }

    #[test]
    fn not_null_is_ignored_and_comment_kept() {
        let schema = parse_ddl("id BIGINT NOT NULL COMMENT 'the key', name STRING").unwrap();
        assert!(schema.field(0).is_nullable());
        assert_eq!(
            schema
                .field(0)
                .metadata()
                .get(COMMENT_KEY)
                .map(String::as_str),
            Some("the key")
        );
        assert_eq!(to_ddl(&schema), "id BIGINT COMMENT 'the key', name STRING");
    }

    #[test]
    fn errors_name_position_column_and_allowed_types() {
        let err = parse_ddl("id BIGINT, amount DECIMALL(12,2)").unwrap_err();
        let SchemaError::Ddl {
            position,
            column,
            message,
        } = &err
        else {
            panic!("{err}")
        };
        assert_eq!(*position, 18);
        assert_eq!(column.as_deref(), Some("amount"));
        assert!(message.contains("unknown type `DECIMALL`"), "{message}");
        assert!(message.contains("TIMESTAMP_NTZ"), "{message}");
        let text = err.to_string();
        assert!(text.contains("amount") && text.contains("18"), "{text}");

        let err = parse_ddl("meta STRUCT<src: STRNG>").unwrap_err();
        assert!(
            matches!(&err, SchemaError::Ddl { column: Some(c), .. } if c == "meta.src"),
            "{err}"
        );

        for bad in [
            "",
            "id",
            "id BIGINT,",
            "id BIGINT name STRING",
            "a DECIMAL(40,2)",
            "a DECIMAL(5,6)",
            "a ARRAY<INT",
            "a MAP<STRING>",
            "`a STRING",
            "a STRING, A INT",
            "a b.c STRING",
        ] {
            assert!(parse_ddl(bad).is_err(), "{bad:?} should fail");
        }
    }
}
