//! `weir run PIPELINE [--flow NAME] [--headless] [--trigger ...] [--metrics ADDR]`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use tokio::sync::watch;

use super::{EXIT_ABORTED, EXIT_INVALID, EXIT_SCHEMA_CHANGED, init_logging, report, runtime};
use crate::engine::{FlowSummary, RunOptions, run_flow};
use crate::pipeline;
use crate::records::StreamingQueryProgress;
use crate::spec::{FlowSpec, Pipeline, Trigger};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The pipeline file (TOML).
    pub pipeline: PathBuf,
    /// Run only this flow.
    #[arg(long)]
    pub flow: Option<String>,
    /// No console: progress records go to stdout as JSON lines, logs to stderr.
    #[arg(long)]
    pub headless: bool,
    /// Override every flow's trigger: `available-now`, `once`, or an interval like `10s`.
    #[arg(long, value_parser = parse_trigger)]
    pub trigger: Option<Trigger>,
    /// Override `max_files_per_trigger` of the flows' file sources for this run
    /// (the `lagging` playbook's first action); the pipeline file is not changed.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_files_per_trigger: Option<u64>,
    /// Serve Prometheus metrics (OpenMetrics text) at http://ADDR/metrics while the flows
    /// run, e.g. `127.0.0.1:9464` (port 0: any free port, printed on stderr). docs/operate.md.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub metrics_access: MetricsAccessArgs,
    /// Do not evaluate the pipeline's `[alerts]` rules in this process (`weir watch`
    /// evaluates them elsewhere).
    #[arg(long)]
    pub no_alerts: bool,
    #[command(flatten)]
    pub console: crate::console::ConsoleArgs,
}

/// Who may read `--metrics` and over what (docs/operate.md has the matching Prometheus
/// `scrape_config`). Secrets come from files or the environment, never from the command
/// line, where `ps` would show them.
#[derive(Debug, Clone, Default, Args)]
pub struct MetricsAccessArgs {
    /// Require `Authorization: Bearer <token>`; the token is this file's content
    /// (whitespace trimmed), else $WEIR_METRICS_BEARER_TOKEN.
    #[arg(long, value_name = "FILE")]
    pub metrics_bearer_token_file: Option<PathBuf>,
    /// Require HTTP basic auth with this user; the password is
    /// --metrics-basic-auth-password-file's content, else $WEIR_METRICS_BASIC_AUTH_PASSWORD.
    #[arg(long, value_name = "USER")]
    pub metrics_basic_auth_user: Option<String>,
    /// The file holding the basic-auth password (whitespace trimmed).
    #[arg(long, value_name = "FILE")]
    pub metrics_basic_auth_password_file: Option<PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (and --metrics-tls-key's PEM key).
    #[arg(long, value_name = "FILE")]
    pub metrics_tls_cert: Option<PathBuf>,
    /// The PEM private key of --metrics-tls-cert.
    #[arg(long, value_name = "FILE")]
    pub metrics_tls_key: Option<PathBuf>,
    /// Require client certificates that chain to this PEM CA (mutual TLS).
    #[arg(long, value_name = "FILE")]
    pub metrics_tls_client_ca: Option<PathBuf>,
}

/// Starts the metrics endpoint on `addr` with `access`, and says where it is (and what
/// its exposure risks) on stderr.
pub(crate) fn start_metrics(
    addr: &str,
    access: &MetricsAccessArgs,
    board: Arc<crate::engine::board::Board>,
) -> Result<crate::metrics::server::MetricsServer, String> {
    use crate::metrics::server::{AccessFiles, MetricsServer, ServerOptions};
    let files = AccessFiles {
        bearer_token_file: access.metrics_bearer_token_file.as_deref(),
        basic_auth_user: access.metrics_basic_auth_user.as_deref(),
        basic_auth_password_file: access.metrics_basic_auth_password_file.as_deref(),
        tls_cert: access.metrics_tls_cert.as_deref(),
        tls_key: access.metrics_tls_key.as_deref(),
        tls_client_ca: access.metrics_tls_client_ca.as_deref(),
    };
    let options = ServerOptions::load(&files, |k| std::env::var(k).ok())?;
    let server = MetricsServer::start_with(addr, board, options)?;
    eprintln!(
        "weir: metrics at {}://{}/metrics",
        server.scheme(),
        server.addr()
    );
    if let Some(w) = server.exposure_warning() {
        eprintln!("warning: {w}");
        tracing::warn!("{w}");
    }
    Ok(server)
}

fn parse_trigger(s: &str) -> Result<Trigger, String> {
    Trigger::parse(s)
}

pub fn run(args: &RunArgs) -> ExitCode {
    init_logging();
    match crate::engine::failpoint::check_env() {
        Ok(Some(armed)) => {
            eprintln!("warning: {armed}");
            tracing::warn!("{armed}");
        }
        Ok(None) => {}
        Err(m) => {
            eprintln!("error: {m}");
            return ExitCode::from(EXIT_INVALID);
        }
    }
    let pipeline = match pipeline::load(&args.pipeline) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    let flows = match select_flows(&pipeline, args.flow.as_deref()) {
        Ok(mut f) => {
            if let Some(n) = args.max_files_per_trigger {
                for flow in &mut f {
                    match &mut flow.source {
                        crate::spec::SourceSpec::Files(src) => src.max_files_per_trigger = n,
                        crate::spec::SourceSpec::Delta(src) => src.max_files_per_trigger = n,
                        crate::spec::SourceSpec::Kafka(_) => {}
                    }
                    flow.health.max_files_per_trigger = Some(n);
                }
            }
            f
        }
        Err(m) => {
            eprintln!("error: {m}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    // The metrics endpoint and the alert rules read the flows' snapshots on the board.
    let alert_rules = !args.no_alerts && !pipeline.alerts.rules.is_empty();
    let board = crate::engine::board::global();
    if args.metrics.is_some() || alert_rules {
        board.enable();
    }
    let _metrics = match &args.metrics {
        Some(addr) => match start_metrics(addr, &args.metrics_access, board.clone()) {
            Ok(server) => Some(server),
            Err(m) => {
                eprintln!("error: {m}");
                return ExitCode::from(EXIT_INVALID);
            }
        },
        None => None,
    };
    let alerts = if alert_rules {
        let options = crate::alerts::AlertOptions {
            spec: pipeline.alerts.clone(),
            pipeline: args.pipeline.clone(),
            flows: flows
                .iter()
                .map(|f| (f.name.clone(), f.checkpoint.clone()))
                .collect(),
            by: crate::alerts::Evaluator::Run,
            print: false,
            refresh: None,
        };
        match crate::alerts::start(options, board.clone()) {
            Ok(handle) => Some(handle),
            Err(e) => {
                eprintln!("error: cannot start the alert rules: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let unavailable = crate::console::terminal_unavailable_reason();
    let console = !args.headless && unavailable.is_none();
    if let (false, Some(why)) = (args.headless, &unavailable) {
        tracing::warn!("{why}; running headless (progress records as JSON lines on stdout)");
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let results = if console {
        let title = args.pipeline.display().to_string();
        let run = crate::console::run_flows(&title, &flows, args.trigger, &args.console);
        match rt.block_on(run) {
            Ok(outcome) if outcome.aborted => {
                eprintln!("weir: aborted; the next run re-runs any unfinished batch");
                std::process::exit(i32::from(EXIT_ABORTED));
            }
            Ok(outcome) => outcome.results,
            Err(e) => {
                report(&e);
                return ExitCode::FAILURE;
            }
        }
    } else {
        rt.block_on(run_flows(&flows, args.trigger, true))
    };
    // The last evaluation (a flow that just failed fires now) and the queued deliveries.
    if let Some(alerts) = alerts {
        alerts.finish();
    }
    for (_, result) in &results {
        if let Ok(summary) = result {
            print_summary(summary);
        }
    }
    exit_code(&results)
}

/// 0 when every flow succeeded; 3 when the only failures are schema changes (restart to
/// continue with the wider schema, Auto Loader's behaviour); 1 otherwise. Reports failures.
pub fn exit_code(results: &[(String, crate::Result<FlowSummary>)]) -> ExitCode {
    let mut schema_changed = false;
    let mut failed = false;
    for (name, result) in results {
        if let Err(e) = result {
            eprint!("flow {name}: ");
            report(e);
            if e.kind() == crate::error::ErrorKind::SchemaChanged {
                schema_changed = true;
            } else {
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else if schema_changed {
        ExitCode::from(EXIT_SCHEMA_CHANGED)
    } else {
        ExitCode::SUCCESS
    }
}

/// The flows a run covers, in file order.
pub fn select_flows(pipeline: &Pipeline, only: Option<&str>) -> Result<Vec<FlowSpec>, String> {
    match only {
        None => Ok(pipeline.flows.clone()),
        Some(name) => pipeline
            .flow(name)
            .cloned()
            .map(|f| vec![f])
            .ok_or_else(|| {
                format!(
                    "{}: no flow named {name:?}; flows in this file: {}",
                    pipeline.path.display(),
                    pipeline
                        .flows
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }),
    }
}

/// Installs SIGINT/SIGTERM handling: the first signal asks for a graceful stop,
/// the second aborts at once.
pub fn stop_on_signals() -> watch::Receiver<bool> {
    stop_channel().1
}

/// [`stop_on_signals`], with a sender for other reasons to stop (a closed stdout).
fn stop_channel() -> (Arc<watch::Sender<bool>>, watch::Receiver<bool>) {
    let (tx, rx) = watch::channel(false);
    let tx = Arc::new(tx);
    let signals = tx.clone();
    tokio::spawn(async move {
        let tx = signals;
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        for n in 0..2 {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            if n == 0 {
                eprintln!(
                    "weir: stopping after the current batch (send the signal again to abort now)"
                );
                let _ = tx.send(true);
            } else {
                eprintln!("weir: aborting; the next run re-runs the unfinished batch");
                std::process::exit(i32::from(EXIT_ABORTED));
            }
        }
    });
    (tx, rx)
}

/// Prints each progress record on stdout as one JSON line. When stdout is closed (the
/// reader of a pipe went away: `weir run --headless ... | head -1`), the progress output
/// ends and the run stops after the current batch, as a first SIGINT does: like `tail`
/// or `yes`, weir does not keep working for a reader that is gone, but it never dies
/// mid-batch (the batch in flight commits, and nothing is lost). Shared by all flows.
pub fn progress_to_stdout(
    stop: Arc<watch::Sender<bool>>,
    closed: Arc<std::sync::atomic::AtomicBool>,
) -> crate::engine::ProgressCallback {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    Box::new(move |p: &StreamingQueryProgress| {
        if closed.load(Ordering::Relaxed) {
            return;
        }
        let Ok(line) = serde_json::to_string(p) else {
            return;
        };
        let mut out = std::io::stdout().lock();
        if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush())
            && !closed.swap(true, Ordering::Relaxed)
        {
            eprintln!(
                "weir: stdout is closed ({e}); no more progress records; stopping after the current batch"
            );
            let _ = stop.send(true);
        }
    })
}

/// Runs flows: one after the other in dependency order with `available_now`/`once`
/// (each drains before the next starts), concurrently otherwise.
pub async fn run_flows(
    flows: &[FlowSpec],
    trigger: Option<Trigger>,
    print_progress: bool,
) -> Vec<(String, crate::Result<FlowSummary>)> {
    let (stop_tx, stop) = stop_channel();
    let stdout_closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let make_options = |stop: watch::Receiver<bool>| RunOptions {
        trigger,
        stop: Some(stop),
        on_progress: print_progress
            .then(|| progress_to_stdout(stop_tx.clone(), stdout_closed.clone())),
        ..Default::default()
    };
    let draining = flows.iter().all(|f| {
        matches!(
            trigger.unwrap_or(f.trigger),
            Trigger::AvailableNow | Trigger::Once
        )
    });
    let mut results = Vec::new();
    if draining {
        // Upstream first: bronze drains before silver reads it, silver before gold.
        let ordered = crate::spec::dependency_order(flows).unwrap_or_else(|_| flows.to_vec());
        for flow in &ordered {
            let r = run_flow(flow, make_options(stop.clone())).await;
            let stop_now = *stop.borrow();
            results.push((flow.name.clone(), r));
            if stop_now {
                break;
            }
        }
    } else {
        let mut set = tokio::task::JoinSet::new();
        for flow in flows.iter().cloned() {
            let options = make_options(stop.clone());
            set.spawn(async move {
                let r = run_flow(&flow, options).await;
                (flow.name.clone(), r)
            });
        }
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok(r) => results.push(r),
                Err(e) => results.push((
                    "?".into(),
                    Err(crate::Error::Source {
                        path: Path::new("").into(),
                        message: format!("flow task panicked: {e}"),
                    }),
                )),
            }
        }
    }
    results
}

/// A human summary on stderr.
pub fn print_summary(s: &FlowSummary) {
    let secs = s.elapsed_ms as f64 / 1000.0;
    let rate = if secs > 0.0 {
        s.num_input_rows as f64 / secs
    } else {
        0.0
    };
    eprintln!(
        "flow {}: {} batch(es) ({} replayed), {} file(s), {} input rows, {} output rows, {} failed file(s), Delta version {}, {:.1} s, {:.0} rows/s{}",
        s.flow,
        s.batches,
        s.replayed_batches,
        s.num_files,
        s.num_input_rows,
        s.num_output_rows,
        s.num_files_failed,
        s.delta_version.map_or("-".to_string(), |v| v.to_string()),
        secs,
        rate,
        if s.stopped_by_request {
            " (stopped on request)"
        } else {
            ""
        }
    );
}
