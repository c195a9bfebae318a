//! Async work off the caller's runtime: a named thread driving a tokio runtime of its
//! own (alert rules, the console's Kafka lag and SQL), and a future run to completion
//! from synchronous code.

use std::future::Future;
use std::io;
use std::thread::JoinHandle;

/// The runtime a [`spawn`]ed thread drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// The thread itself runs every task (a current-thread runtime).
    Caller,
    /// One worker thread (`<name>-worker`) runs the tasks while the thread waits for the
    /// future, so a task that does not yield cannot stop the thread from seeing a time
    /// limit; tasks still running when the future ends are abandoned, not awaited.
    One,
}

/// Starts thread `name` running `work()` to completion on a runtime of its own; when no
/// runtime can be built, `failed` is told why on that thread instead.
pub fn spawn<W, Fut, E>(
    name: &str,
    workers: Workers,
    work: W,
    failed: E,
) -> io::Result<JoinHandle<()>>
where
    W: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
    E: FnOnce(io::Error) + Send + 'static,
{
    let worker_name = format!("{name}-worker");
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let runtime = match workers {
                Workers::Caller => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build(),
                Workers::One => tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(worker_name)
                    .enable_all()
                    .build(),
            };
            match runtime {
                Ok(runtime) => {
                    runtime.block_on(work());
                    if workers == Workers::One {
                        runtime.shutdown_background();
                    }
                }
                Err(e) => failed(e),
            }
        })
}

/// Runs `fut` to completion from synchronous code: on the current runtime when it has
/// worker threads to spare for it, else on a current-thread runtime of its own.
pub fn block_on<F: Future>(fut: F) -> io::Result<F::Output> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            Ok(tokio::task::block_in_place(|| h.block_on(fut)))
        }
        _ => Ok(tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(fut)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_thread_runs_its_future_on_either_runtime() {
        for workers in [Workers::Caller, Workers::One] {
            let (tx, rx) = std::sync::mpsc::channel();
            let handle = spawn(
                "weir-test",
                workers,
                move || async move {
                    let on = std::thread::current().name().map(str::to_string);
                    let n = tokio::spawn(async { 41 }).await.unwrap_or(0) + 1;
                    tx.send((n, on)).unwrap();
                },
                |e| panic!("{e}"),
            )
            .unwrap();
            handle.join().unwrap();
            assert_eq!(rx.recv().unwrap(), (42, Some("weir-test".to_string())));
        }
    }

    #[test]
    fn block_on_works_with_and_without_a_runtime() {
        assert_eq!(block_on(async { 1 }).unwrap(), 1);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let inside = rt.block_on(async {
            tokio::spawn(async { block_on(async { 2 }).unwrap() })
                .await
                .unwrap()
        });
        assert_eq!(inside, 2);
    }
}
