//! The `tenantplane` binary: the offline CLI and the admission webhook server; the
//! controller joins them.

mod cli;
mod connect;
mod controller;
mod dns;
mod kube_client;
mod kubelet;
mod logging;
mod output;
mod render;
mod status;
mod up;
mod webhook;
mod webhook_certificate;
mod webhook_metrics;
mod why;

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        // Usage errors too are one line, like every other error.
        Err(err) if err.use_stderr() => {
            let text = err.render().to_string();
            let line: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("Usage:"))
                .collect();
            eprintln!("{}", line.join(" "));
            return ExitCode::from(2);
        }
        // --help and --version.
        Err(err) => err.exit(),
    };
    match cli::run(cli) {
        Ok(text) => {
            // Print only after everything succeeded, so a failure never leaves half a
            // document for `kubectl apply -f -` to act on.
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                Ok(()) => ExitCode::SUCCESS,
                // A closed pipe (`| head`) is not worth a second error line.
                Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("error: writing output: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(err) => {
            // One line: the error and its causes, joined.
            eprintln!("error: {}", format!("{err:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}
