//! The SQL pane (`:sql`): a read-only query over the flows' tables and progress
//! (`crate::sql`), run off the UI thread, its rows scrolled by row and column; and
//! the peeks at a flow's latest output (`o`) or input (`i`) rows, which use the same
//! pane without a query line.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};

use super::{Cx, Effect, Next, block};
use crate::console::action::{Action, PeekKind};
use crate::console::format;
use crate::console::theme::{Role, Theme};

/// The SQL pane: the query being typed, the last result, where the view is scrolled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlView {
    /// `Some`: a peek at a flow's rows (no query line).
    pub peek: Option<(String, PeekKind)>,
    pub input: String,
    /// While browsing the history with Up/Down: the index shown.
    pub history_pos: Option<usize>,
    pub run: SqlRun,
    /// First row and first column shown.
    pub row: usize,
    pub col: usize,
}

impl SqlView {
    pub fn new() -> Self {
        SqlView {
            peek: None,
            input: String::new(),
            history_pos: None,
            run: SqlRun::Idle,
            row: 0,
            col: 0,
        }
    }
}

impl Default for SqlView {
    fn default() -> Self {
        SqlView::new()
    }
}

/// Where the pane's query is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlRun {
    Idle,
    Running { id: u64, started_ms: i64 },
    Done(SqlResult),
    Failed(String),
}

/// A query's rows as text, ready to draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlResult {
    /// What the rows are (a peek's title), if more than the query says.
    pub title: Option<String>,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Widest value per column (characters, cut values included).
    pub widths: Vec<usize>,
    /// `12 rows in 35 ms` / `1,000 rows shown (truncated: ...) in 2.1 s`.
    pub summary: String,
    pub truncated: bool,
    /// How long it took, ms.
    pub elapsed_ms: u64,
}

/// The console's SQL: the tables it can query, the history, the limits.
#[derive(Debug, Clone, Default)]
pub struct SqlState {
    pub flows: Vec<crate::sql::FlowTables>,
    /// The names a query can use, as written.
    pub table_names: Vec<String>,
    /// Queries run, oldest first (Up/Down).
    pub history: Vec<String>,
    pub limits: crate::sql::Limits,
    /// The id of the next query or peek (a late answer to an older one is ignored).
    pub next_id: u64,
}

impl SqlState {
    /// The console's SQL over these flows' tables, with the history so far.
    pub fn new(flows: Vec<crate::sql::FlowTables>, history: Vec<String>) -> Self {
        let table_names = crate::sql::name_tables(&flows)
            .entries
            .iter()
            .map(|e| e.name.sql())
            .collect();
        SqlState {
            flows,
            table_names,
            history,
            limits: crate::sql::Limits {
                // The console shares the machine with the flows.
                partitions: 2,
                // Each query in a child process of its own: its memory never the engine's.
                isolated: true,
                ..Default::default()
            },
            next_id: 1,
        }
    }
}

impl SqlView {
    /// A peek at a flow's rows (its first query is the peek action itself).
    pub fn peek(flow: String, kind: PeekKind) -> Self {
        SqlView {
            peek: Some((flow, kind)),
            ..SqlView::new()
        }
    }
}

/// Rows a page of the SQL pane scrolls.
const SQL_PAGE: usize = 10;

/// The SQL pane or a peek has the keyboard: it keeps it until Esc.
pub fn update(v: &mut SqlView, cx: &mut Cx, action: &Action) -> Next {
    let history_len = cx.sql.history.len();
    let now = cx.now_ms;
    let rows = match &v.run {
        SqlRun::Done(r) => r.rows.len(),
        _ => 0,
    };
    let columns = match &v.run {
        SqlRun::Done(r) => r.columns.len(),
        _ => 0,
    };
    let peeking = v.peek.is_some();
    let scroll = |row: &mut usize, delta: isize| {
        *row = row.saturating_add_signed(delta).min(rows.saturating_sub(1));
    };
    match action {
        Action::InputChar(c) if !peeking => {
            v.input.push(*c);
            v.history_pos = None;
        }
        Action::InputBackspace if !peeking => {
            v.input.pop();
            v.history_pos = None;
        }
        Action::ClearInput if !peeking => {
            v.input.clear();
            v.history_pos = None;
        }
        Action::Up if !peeking && history_len > 0 => {
            let pos = match v.history_pos {
                Some(p) => p.saturating_sub(1),
                None => history_len - 1,
            };
            v.history_pos = Some(pos);
            v.input = cx.sql.history[pos].clone();
        }
        Action::Up if !peeking => {}
        Action::Down if !peeking => match v.history_pos {
            Some(p) if p + 1 < history_len => {
                v.history_pos = Some(p + 1);
                v.input = cx.sql.history[p + 1].clone();
            }
            Some(_) => {
                v.history_pos = None;
                v.input.clear();
            }
            None => {}
        },
        Action::Up => scroll(&mut v.row, -1),
        Action::Down => scroll(&mut v.row, 1),
        Action::PageUp => scroll(&mut v.row, -(SQL_PAGE as isize)),
        Action::PageDown => scroll(&mut v.row, SQL_PAGE as isize),
        Action::Top => v.row = 0,
        Action::Bottom => v.row = rows.saturating_sub(1),
        Action::ColumnLeft => v.col = v.col.saturating_sub(1),
        Action::ColumnRight => v.col = (v.col + 1).min(columns.saturating_sub(1)),
        Action::InputSubmit if !peeking => {
            let sql = v.input.trim().to_string();
            if sql.is_empty() {
                cx.complain("type a query first, e.g. SELECT count(*) FROM progress");
                return Next::Stay;
            }
            if matches!(v.run, SqlRun::Running { .. }) {
                cx.effects.push(Effect::CancelSql);
            }
            let id = cx.sql.next_id;
            cx.sql.next_id += 1;
            v.run = SqlRun::Running {
                id,
                started_ms: now,
            };
            v.history_pos = None;
            if cx.sql.history.last() != Some(&sql) {
                cx.sql.history.push(sql.clone());
                let excess = cx
                    .sql
                    .history
                    .len()
                    .saturating_sub(crate::sql::HISTORY_KEPT);
                cx.sql.history = cx.sql.history.split_off(excess);
            }
            cx.effects.push(Effect::RunSql { id, sql });
        }
        Action::Peek(kind) if peeking => {
            let Some((flow, _)) = v.peek.clone() else {
                return Next::Stay;
            };
            if matches!(v.run, SqlRun::Running { .. }) {
                cx.effects.push(Effect::CancelSql);
            }
            let id = cx.sql.next_id;
            cx.sql.next_id += 1;
            v.peek = Some((flow.clone(), *kind));
            v.run = SqlRun::Running {
                id,
                started_ms: now,
            };
            cx.effects.push(Effect::Peek {
                id,
                flow,
                kind: *kind,
            });
        }
        Action::InputCancel => {
            if matches!(v.run, SqlRun::Running { .. }) {
                cx.effects.push(Effect::CancelSql);
            }
            return Next::Close;
        }
        _ => {}
    }
    Next::Stay
}

/// The SQL pane: the query line, a status line, the rows from the scroll position.
#[derive(Debug, Clone)]
pub struct SqlSnap {
    pub title: String,
    /// The query being typed; `None` for a peek.
    pub input: Option<String>,
    pub status: String,
    pub status_role: Role,
    pub columns: Vec<String>,
    pub widths: Vec<usize>,
    /// Rows from `first_row`, at most [`SQL_ROWS_SHOWN`].
    pub rows: Vec<Vec<String>>,
    pub first_row: usize,
    pub total_rows: usize,
    pub first_col: usize,
}

/// Rows a frame of the SQL pane carries (more than any terminal shows).
pub const SQL_ROWS_SHOWN: usize = 200;

/// `now_ms`: the clock (how long a query has run).
pub fn snap(v: &SqlView, sql: &SqlState, now_ms: i64) -> SqlSnap {
    let limits = &sql.limits;
    let title = match &v.peek {
        Some((flow, PeekKind::Output)) => {
            format!("Peek: latest output rows of {flow} (o: refresh, i: input)")
        }
        Some((flow, PeekKind::Input)) => {
            format!("Peek: last input rows of {flow} (i: refresh, o: output)")
        }
        None => format!(
            "SQL, read-only: at most {} rows, {}",
            crate::sql::grouped(limits.max_rows),
            humantime::format_duration(limits.timeout)
        ),
    };
    let mut snap = SqlSnap {
        title,
        input: v.peek.is_none().then(|| v.input.clone()),
        status: String::new(),
        status_role: Role::Dim,
        columns: Vec::new(),
        widths: Vec::new(),
        rows: Vec::new(),
        first_row: v.row,
        total_rows: 0,
        first_col: v.col,
    };
    match &v.run {
        SqlRun::Idle => {
            snap.status = format!(
                "Enter runs the query; tables: {}",
                if sql.table_names.is_empty() {
                    "none known".to_string()
                } else {
                    sql.table_names.join(", ")
                }
            );
        }
        SqlRun::Running { started_ms, .. } => {
            snap.status = format!(
                "running for {} (Esc cancels; the limit is {})",
                format::span_ms((now_ms - started_ms).max(0)),
                humantime::format_duration(limits.timeout)
            );
            snap.status_role = Role::Warn;
        }
        SqlRun::Failed(e) => {
            snap.status = format!("error: {e}");
            snap.status_role = Role::Bad;
        }
        SqlRun::Done(r) => {
            snap.status = match &r.title {
                Some(t) => format!("{t}: {}", r.summary),
                None => r.summary.clone(),
            };
            snap.status_role = if r.truncated { Role::Warn } else { Role::Good };
            snap.columns = r.columns.clone();
            snap.widths = r.widths.clone();
            snap.total_rows = r.rows.len();
            snap.rows = r
                .rows
                .iter()
                .skip(v.row)
                .take(SQL_ROWS_SHOWN)
                .cloned()
                .collect();
        }
    }
    snap
}

/// The SQL pane (or a peek) over the body: the query line, a status line, then the
/// rows from the scroll position, the columns from the first one shown.
pub fn draw(frame: &mut Frame, body: Rect, q: &SqlSnap, theme: Theme) {
    frame.render_widget(Clear, body);
    let b = block(&q.title, true, theme);
    let inner = b.inner(body);
    frame.render_widget(b, body);
    if inner.height == 0 || inner.width == 0 {
        return;
    }
    let width = usize::from(inner.width);
    let mut y = inner.y;
    if let Some(input) = &q.input {
        let prompt = "SQL> ";
        let room = width.saturating_sub(prompt.len() + 1);
        let n = input.chars().count();
        let shown: String = input.chars().skip(n.saturating_sub(room)).collect();
        let x = inner.x + (prompt.len() + shown.chars().count()) as u16;
        frame.render_widget(
            Paragraph::new(Line::from(vec![
                Span::styled(prompt, theme.style(Role::Focus)),
                Span::raw(shown),
            ])),
            Rect::new(inner.x, y, inner.width, 1),
        );
        frame.set_cursor_position((x.min(inner.right().saturating_sub(1)), y));
        y += 1;
    }
    // Which columns fit, from the first shown.
    let mut cols: Vec<(usize, usize)> = Vec::new();
    let mut used = 0usize;
    for (i, w) in q.widths.iter().enumerate().skip(q.first_col) {
        let w = (*w).max(1);
        let need = if cols.is_empty() { w } else { w + 2 };
        if used + need > width {
            if cols.is_empty() {
                cols.push((i, width));
            }
            break;
        }
        used += need;
        cols.push((i, w));
    }
    // The status line with which rows and columns are shown; its height decides the
    // rows' room, which the line names (settles in two passes at most).
    let mut status_h: u16 = 1;
    let mut status = String::new();
    for _ in 0..3 {
        let rows_room = usize::from(inner.bottom().saturating_sub(y + status_h)).saturating_sub(1);
        let shown_rows = q.rows.len().min(rows_room);
        status = q.status.clone();
        if q.total_rows > 0 {
            status.push_str(&format!(
                " · rows {}-{} of {}",
                q.first_row + 1,
                q.first_row + shown_rows,
                q.total_rows
            ));
        }
        if let (Some(first), Some(last)) = (cols.first(), cols.last())
            && (first.0 > 0 || last.0 + 1 < q.columns.len())
        {
            status.push_str(&format!(
                " · columns {}-{} of {}",
                first.0 + 1,
                last.0 + 1,
                q.columns.len()
            ));
        }
        let h = (status.chars().count().div_ceil(width.max(1)) as u16)
            .clamp(1, 4)
            .min(inner.bottom().saturating_sub(y).max(1));
        if h == status_h {
            break;
        }
        status_h = h;
    }
    let status_h = status_h.min(inner.bottom().saturating_sub(y));
    frame.render_widget(
        Paragraph::new(Span::styled(status, theme.style(q.status_role))).wrap(Wrap { trim: false }),
        Rect::new(inner.x, y, inner.width, status_h),
    );
    y += status_h;
    if q.columns.is_empty() || y >= inner.bottom() {
        return;
    }
    let cell = |text: &str, w: usize| -> String {
        let n = text.chars().count();
        if n > w {
            let mut t: String = text.chars().take(w.saturating_sub(1)).collect();
            t.push('…');
            t
        } else {
            format!("{text}{}", " ".repeat(w - n))
        }
    };
    let line_of = |values: &[String]| -> String {
        cols.iter()
            .map(|(i, w)| cell(values.get(*i).map(String::as_str).unwrap_or(""), *w))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut lines = vec![Line::from(Span::styled(
        line_of(&q.columns),
        theme.style(Role::Title),
    ))];
    let room = usize::from(inner.bottom() - y).saturating_sub(1);
    lines.extend(q.rows.iter().take(room).map(|r| Line::from(line_of(r))));
    frame.render_widget(
        Paragraph::new(lines),
        Rect::new(inner.x, y, inner.width, inner.bottom() - y),
    );
}
