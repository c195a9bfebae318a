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
    weir::cli::run(weir::cli::Cli::parse())
}
