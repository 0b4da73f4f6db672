//! `stackgate` binary: install the crypto provider, parse the command line, set up logging
//! and dispatch. The commands run in `stackgate::cli::run` and `stackgate::compose`.

use std::process::ExitCode;

use clap::Parser as _;

use stackgate::cli::run::{self, face_engine, load_policies};
use stackgate::cli::{Cli, Command};

/// Every allocation goes through mimalloc and, while a review is evaluated on a thread, onto
/// that review's memory account (`budget::MemoryScope`, `--max-evaluation-memory`).
#[global_allocator]
static ALLOCATOR: alloc_account::Counting<mimalloc::MiMalloc> =
    alloc_account::Counting::over(mimalloc::MiMalloc);

fn main() -> ExitCode {
    // Exactly one rustls provider (ring) is compiled in; installing it explicitly keeps
    // every TLS user (server, kube client) on it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let logs = match stackgate::telemetry::init(cli.log.log_format, &cli.log.log_level) {
        Ok(logs) => logs,
        Err(error) => {
            eprintln!("stackgate: {error}");
            return ExitCode::from(2);
        }
    };
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "stackgate failed");
            // The log line first, then the plain one, as they were logged.
            logs.flush();
            eprintln!("stackgate: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `command`. An error (printed with its sources) exits 1; `check` and `audit` give
/// their own codes: 0 clean, 1 denials (or warnings with --fail-on warning), 2 when the
/// policies do not load and on usage, parse, connection or listing errors.
fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(args) => {
            let set = load_policies(&args.policy)?;
            stackgate::compose::serve(*args, set)?;
        }
        Command::Check(args) => return Ok(ExitCode::from(run::check(&args))),
        Command::Audit(args) => {
            return Ok(ExitCode::from(match face_engine("audit", &args.policy) {
                Ok(engine) => stackgate::compose::audit(&args, &engine)?,
                Err(code) => code,
            }));
        }
        Command::Policies(args) => {
            return Ok(ExitCode::from(if args.from_cluster {
                stackgate::compose::policies_from_cluster(&args)?
            } else {
                run::policies_exit(&args, None)
            }));
        }
        Command::Rules(args) => run::rules(&args)?,
        Command::Explain(args) => run::explain(&args)?,
        Command::Exceptions(args) => {
            let stackgate::cli::ExceptionsCommand::List(list) = &args.command;
            return Ok(ExitCode::from(
                match face_engine("exceptions", &list.policy) {
                    Ok(engine) => stackgate::compose::exceptions(&args, &engine)?,
                    Err(code) => code,
                },
            ));
        }
        Command::Uninstall(args) => {
            return Ok(ExitCode::from(stackgate::compose::uninstall(&args)?));
        }
    }
    Ok(ExitCode::SUCCESS)
}
