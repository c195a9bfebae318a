//! One console render cycle: snapshot of the app + draw of every pane into a
//! 200x60 `TestBackend`, from the recorded progress fixtures.
//!
//! `cargo bench --bench render`

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use weir::console::action::Action;
use weir::console::app::{App, Mode};
use weir::console::draw;
use weir::console::model::{FlowModel, parse_progress_line};
use weir::console::snapshot::Snapshot;
use weir::console::theme::Theme;
use weir::console::update::update;

fn fixture_app(theme: Theme) -> App {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/progress");
    let mut flows = Vec::new();
    let mut newest = 0;
    for name in ["bronze_events", "windowed_agg", "silver_orders"] {
        let mut f = FlowModel::new(name);
        let text = std::fs::read_to_string(dir.join(format!("{name}.jsonl"))).unwrap_or_default();
        for p in text.lines().filter_map(parse_progress_line) {
            f.ingest_progress(&p, 3_600_000);
        }
        newest = newest.max(f.samples.back().map_or(0, |s| s.t_ms));
        f.set_status(weir::engine::FlowStatus::Running, newest);
        flows.push(f);
    }
    App::new(
        Mode::Run,
        "pipeline.toml",
        flows,
        theme,
        3_600_000,
        newest + 5_000,
    )
}

fn render(c: &mut Criterion) {
    for (label, theme) in [
        (
            "render_200x60_unicode",
            Theme {
                color: true,
                ascii: false,
            },
        ),
        (
            "render_200x60_ascii",
            Theme {
                color: false,
                ascii: true,
            },
        ),
    ] {
        let mut overview = fixture_app(theme);
        let mut detail = fixture_app(theme);
        update(&mut detail, Action::Enter);
        let mut terminal = Terminal::new(TestBackend::new(200, 60)).expect("test backend");
        c.bench_function(&format!("{label}_overview"), |b| {
            b.iter(|| {
                let snap = Snapshot::of(black_box(&overview));
                terminal.draw(|f| draw::draw(f, &snap)).expect("draw");
            })
        });
        c.bench_function(&format!("{label}_detail_all_panes"), |b| {
            b.iter(|| {
                let snap = Snapshot::of(black_box(&detail));
                terminal.draw(|f| draw::draw(f, &snap)).expect("draw");
            })
        });
        overview.tick(0);
        detail.tick(0);
    }
}

criterion_group!(benches, render);
criterion_main!(benches);
