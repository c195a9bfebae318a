//! The `weir` binary: parses the command line and hands over to the library.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    if let Err(e) = color_eyre::install() {
        eprintln!("warning: could not install the error reporter: {e}");
    }
    weir::cli::run(weir::cli::Cli::parse())
}
