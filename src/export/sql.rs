//! weir's SQL (DataFusion's dialect) rewritten as Spark SQL, or refused.
//!
//! The text is kept as the user wrote it, token by token, except where the two dialects
//! differ:
//!
//! | weir (DataFusion) | Spark SQL |
//! |---|---|
//! | `"order id"` (a quoted identifier) | `` `order id` `` (in Spark `"..."` is a string) |
//! | `'a\b'` (backslash is literal) | `'a\\b'` (Spark reads backslash escapes) |
//! | `approx_distinct(x)` | `approx_count_distinct(x)` |
//! | `to_timestamp_millis(x)` / `_micros` / `_seconds` | `timestamp_millis(x)` / `timestamp_micros` / `timestamp_seconds` |
//! | `starts_with(s, p)`, `ends_with(s, p)` | `startswith(s, p)`, `endswith(s, p)` |
//! | `now()` | `current_timestamp()` |
//!
//! A function outside [`SAME`] and the renames is refused: its Spark namesake may not
//! exist or may mean something else (`concat` ignores nulls in DataFusion and returns
//! null in Spark), and a script that runs but computes another value is worse than no
//! script. `a / b` is refused unless one side is visibly fractional (a decimal literal, a
//! cast to DOUBLE/FLOAT/DECIMAL, or an `avg`/`stddev`-like aggregate): DataFusion divides
//! two integers as integers, Spark as doubles.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, visit_expressions};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// Functions that exist under the same name with the same meaning in DataFusion and Spark.
pub const SAME: &[&str] = &[
    // aggregates
    "count",
    "sum",
    "avg",
    "mean",
    "min",
    "max",
    "stddev",
    "stddev_samp",
    "stddev_pop",
    "var_samp",
    "var_pop",
    "variance",
    "first_value",
    "last_value",
    "bool_and",
    "bool_or",
    "every",
    "median",
    // scalars
    "abs",
    "ceil",
    "floor",
    "round",
    "sqrt",
    "exp",
    "ln",
    "log10",
    "log2",
    "power",
    "pow",
    "sign",
    "signum",
    "coalesce",
    "nullif",
    "nvl",
    "ifnull",
    "greatest",
    "least",
    "lower",
    "upper",
    "trim",
    "ltrim",
    "rtrim",
    "btrim",
    "substr",
    "substring",
    "concat_ws",
    "replace",
    "length",
    "char_length",
    "character_length",
    "octet_length",
    "bit_length",
    "lpad",
    "rpad",
    "left",
    "right",
    "reverse",
    "repeat",
    "initcap",
    "ascii",
    "chr",
    "split_part",
    "regexp_replace",
    "regexp_like",
    "md5",
    "current_timestamp",
    "current_date",
    "date_trunc",
    "date_part",
    "to_date",
    "to_timestamp",
    "from_unixtime",
    "unix_timestamp",
    "named_struct",
    "struct",
    "array",
    "cardinality",
    "isnan",
    "nanvl",
    "window",
];

/// DataFusion name -> Spark name.
pub const RENAMED: &[(&str, &str)] = &[
    ("approx_distinct", "approx_count_distinct"),
    ("to_timestamp_millis", "timestamp_millis"),
    ("to_timestamp_micros", "timestamp_micros"),
    ("to_timestamp_seconds", "timestamp_seconds"),
    ("starts_with", "startswith"),
    ("ends_with", "endswith"),
    ("now", "current_timestamp"),
];

/// Aggregates and functions whose result is fractional whatever their input.
const FRACTIONAL: &[&str] = &[
    "avg",
    "mean",
    "stddev",
    "stddev_samp",
    "stddev_pop",
    "var_samp",
    "var_pop",
    "variance",
    "median",
    "sqrt",
    "exp",
    "ln",
    "log10",
    "log2",
    "power",
    "pow",
];

/// What kind of SQL text is translated (the parser entry point).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A boolean or scalar expression (`where`, join conditions).
    Expr,
    /// A `select` item or aggregate: an expression with an optional `AS name`, or `*`.
    SelectItem,
}

/// Rewrites `sql` for Spark, or says why it cannot be. `qualify` lists column names that
/// weir resolves unambiguously through `USING` and Spark needs qualified, with the
/// qualifier (`origin` -> `batch.origin`).
pub fn to_spark(sql: &str, kind: Kind, qualify: &[(&str, &str)]) -> Result<String, String> {
    check_division(sql, kind)?;
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize()
        .map_err(|e| format!("cannot read `{sql}`: {e}"))?;
    let mut out = String::with_capacity(sql.len() + 8);
    for (i, token) in tokens.iter().enumerate() {
        let prev = previous_significant(&tokens, i);
        let next = next_significant(&tokens, i);
        match token {
            Token::Word(w) if w.quote_style == Some('"') => {
                out.push('`');
                out.push_str(&w.value.replace('`', "``"));
                out.push('`');
            }
            Token::Word(w)
                if w.quote_style.is_none()
                    && matches!(next, Some(Token::LParen))
                    && prev != Some(&Token::Period) =>
            {
                let lower = w.value.to_ascii_lowercase();
                if let Some((_, spark)) = RENAMED.iter().find(|(df, _)| *df == lower) {
                    out.push_str(spark);
                } else if SAME.contains(&lower.as_str()) || is_keyword_call(&lower) {
                    out.push_str(&w.value);
                } else {
                    return Err(format!(
                        "the function `{}` has no verified Spark equivalent (exported functions: {}, and {}); \
                         rewrite the expression with those, or compute it upstream",
                        w.value,
                        SAME.join(", "),
                        RENAMED
                            .iter()
                            .map(|(a, b)| format!("{a} (Spark's {b})"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
            Token::Word(w)
                if w.quote_style.is_none()
                    && !matches!(prev, Some(Token::Word(p)) if p.value.eq_ignore_ascii_case("as"))
                    && prev != Some(&Token::Period)
                    && next != Some(&Token::Period)
                    && next != Some(&Token::LParen) =>
            {
                match qualify.iter().find(|(col, _)| *col == w.value) {
                    Some((col, qualifier)) => {
                        out.push_str(qualifier);
                        out.push('.');
                        out.push_str(col);
                    }
                    None => out.push_str(&w.value),
                }
            }
            Token::SingleQuotedString(s) => {
                out.push('\'');
                out.push_str(&s.replace('\\', "\\\\").replace('\'', "\\'"));
                out.push('\'');
            }
            Token::DoubleQuotedString(s) => {
                // GenericDialect reads "..." as an identifier; kept for completeness.
                out.push('`');
                out.push_str(&s.replace('`', "``"));
                out.push('`');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    Ok(out)
}

/// Keywords the tokenizer reads as words followed by `(` that are syntax, not functions.
fn is_keyword_call(lower: &str) -> bool {
    matches!(
        lower,
        "cast"
            | "try_cast"
            | "extract"
            | "in"
            | "exists"
            | "filter"
            | "over"
            | "and"
            | "or"
            | "not"
            | "as"
            | "interval"
            | "distinct"
            | "between"
            | "when"
            | "then"
            | "else"
            | "is"
            | "like"
            | "ilike"
    )
}

fn previous_significant(tokens: &[Token], i: usize) -> Option<&Token> {
    tokens[..i]
        .iter()
        .rev()
        .find(|t| !matches!(t, Token::Whitespace(_)))
}

fn next_significant(tokens: &[Token], i: usize) -> Option<&Token> {
    tokens[i + 1..]
        .iter()
        .find(|t| !matches!(t, Token::Whitespace(_)))
}

/// Refuses `a / b` unless one side is visibly fractional.
fn check_division(sql: &str, kind: Kind) -> Result<(), String> {
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect)
        .try_with_sql(sql)
        .map_err(|e| format!("cannot read `{sql}`: {e}"))?;
    let expr = match kind {
        Kind::Expr => parser.parse_expr(),
        Kind::SelectItem => {
            use datafusion::sql::sqlparser::ast::SelectItem;
            match parser.parse_select_item() {
                Ok(SelectItem::UnnamedExpr(e)) | Ok(SelectItem::ExprWithAlias { expr: e, .. }) => {
                    Ok(e)
                }
                Ok(_) => return Ok(()),
                Err(e) => Err(e),
            }
        }
    }
    .map_err(|e| format!("cannot read `{sql}`: {e}"))?;
    let found = visit_expressions(&expr, |e| match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Divide,
            right,
        } if !fractional(left) && !fractional(right) => ControlFlow::Break(e.to_string()),
        _ => ControlFlow::Continue(()),
    });
    match found {
        ControlFlow::Break(division) => Err(format!(
            "`{division}`: DataFusion divides two integers as integers (7 / 2 = 3) and Spark as doubles \
             (3.5), so the two engines could disagree; make one side fractional, e.g. CAST(a AS DOUBLE) / b \
             for a fraction, or use floor(...) of it for a whole quotient"
        )),
        ControlFlow::Continue(()) => Ok(()),
    }
}

fn fractional(e: &Expr) -> bool {
    match e {
        Expr::Nested(inner) => fractional(inner),
        Expr::Value(v) => {
            let text = v.to_string();
            text.contains('.') || text.contains('e') || text.contains('E')
        }
        Expr::Cast { data_type, .. } => {
            let t = data_type.to_string().to_ascii_uppercase();
            ["DOUBLE", "FLOAT", "REAL", "DECIMAL", "NUMERIC"]
                .iter()
                .any(|k| t.starts_with(k))
        }
        Expr::Function(f) => {
            let name = f.name.to_string().to_ascii_lowercase();
            FRACTIONAL.contains(&name.as_str())
        }
        Expr::BinaryOp { left, op, right } => {
            matches!(
                op,
                BinaryOperator::Plus
                    | BinaryOperator::Minus
                    | BinaryOperator::Multiply
                    | BinaryOperator::Divide
            ) && (fractional(left) || fractional(right))
        }
        _ => false,
    }
}

/// The output name of a select item or group key: its `AS` alias, or the column it is.
pub fn output_name(item: &str) -> Option<String> {
    use datafusion::sql::sqlparser::ast::SelectItem;
    if let Some(name) = plain_identifier(item) {
        return Some(name);
    }
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect).try_with_sql(item).ok()?;
    match parser.parse_select_item().ok()? {
        SelectItem::ExprWithAlias { alias, .. } => Some(alias.value),
        SelectItem::UnnamedExpr(Expr::Identifier(id)) => Some(id.value),
        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(ids)) => {
            ids.last().map(|i| i.value.clone())
        }
        _ => None,
    }
}

/// `item` if it is a bare column name (also one the parser reads as a keyword, like `user`).
pub fn plain_identifier(item: &str) -> Option<String> {
    let t = item.trim();
    let mut chars = t.chars();
    let first = chars.next()?;
    ((first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
    .then(|| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_plain_sql() {
        assert_eq!(
            to_spark("batch.dep_time IS NOT NULL", Kind::Expr, &[]).unwrap(),
            "batch.dep_time IS NOT NULL"
        );
        assert_eq!(
            to_spark("_metadata.file_path AS source_file", Kind::SelectItem, &[]).unwrap(),
            "_metadata.file_path AS source_file"
        );
        assert_eq!(
            to_spark("count(*) AS departures", Kind::SelectItem, &[]).unwrap(),
            "count(*) AS departures"
        );
    }

    #[test]
    fn quoted_identifiers_become_backticks_and_strings_escape_backslashes() {
        assert_eq!(
            to_spark(r#""order id" = 'a\b''c'"#, Kind::Expr, &[]).unwrap(),
            r"`order id` = 'a\\b\'c'"
        );
    }

    #[test]
    fn renames_functions() {
        assert_eq!(
            to_spark("approx_distinct(tailnum) AS planes", Kind::SelectItem, &[]).unwrap(),
            "approx_count_distinct(tailnum) AS planes"
        );
        assert_eq!(
            to_spark("to_timestamp_millis(ms) AS t", Kind::SelectItem, &[]).unwrap(),
            "timestamp_millis(ms) AS t"
        );
    }

    #[test]
    fn refuses_unknown_functions() {
        let e = to_spark("concat(a, b)", Kind::Expr, &[]).unwrap_err();
        assert!(
            e.contains("`concat` has no verified Spark equivalent"),
            "{e}"
        );
        let e = to_spark("arrow_cast(a, 'Int64')", Kind::Expr, &[]).unwrap_err();
        assert!(e.contains("arrow_cast"), "{e}");
    }

    #[test]
    fn refuses_integer_division_only() {
        let e = to_spark("sum(x) / count(*) AS mean", Kind::SelectItem, &[]).unwrap_err();
        assert!(e.contains("divides two integers"), "{e}");
        assert!(
            to_spark(
                "CAST(sum(x) AS DOUBLE) / count(*) AS mean",
                Kind::SelectItem,
                &[]
            )
            .is_ok()
        );
        assert!(to_spark("x / 2.0", Kind::Expr, &[]).is_ok());
        assert!(to_spark("avg(x) / 60", Kind::Expr, &[]).is_ok());
    }

    #[test]
    fn qualifies_using_keys() {
        assert_eq!(
            to_spark(
                "origin = 'EWR' AND weather.origin IS NOT NULL",
                Kind::Expr,
                &[("origin", "batch")]
            )
            .unwrap(),
            "batch.origin = 'EWR' AND weather.origin IS NOT NULL"
        );
    }

    #[test]
    fn output_names() {
        assert_eq!(output_name("origin").as_deref(), Some("origin"));
        assert_eq!(output_name("upper(origin) AS o").as_deref(), Some("o"));
        assert_eq!(output_name("upper(origin)"), None);
        assert_eq!(output_name("user").as_deref(), Some("user"));
    }
}
