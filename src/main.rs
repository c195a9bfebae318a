//! The `weir` binary: parses the command line and hands over to the library.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // One malloc arena: what a batch frees is reused by the next (src/malloc.rs).
    weir::malloc::use_one_arena();
    if let Err(e) = color_eyre::install() {
        eprintln!("warning: could not install the error reporter: {e}");
    }
    // A panic a library raises and catches by design is not a crash to print.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = (payload.downcast_ref::<&str>().copied())
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        if weir::error::is_caught_library_panic(message, info.location().map(|l| l.file())) {
            tracing::debug!(?message, "a library's own caught panic (not printed)");
            return;
        }
        hook(info)
    }));
    weir::cli::run(weir::cli::Cli::parse())
}
