//! `stackgate` binary: install the crypto provider, parse the command line, run.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;

use stackgate::check::CheckOptions;
use stackgate::cli::{Cli, Command, PoliciesArgs, PoliciesOutput, PolicyArgs};
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;

fn main() -> ExitCode {
    // Exactly one rustls provider (ring) is compiled in; installing it explicitly keeps
    // every TLS user (server, kube client) on it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    if let Err(error) = stackgate::telemetry::init(cli.log.log_format, &cli.log.log_level) {
        eprintln!("stackgate: {error}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Serve(args) => load_policies(&args.policy)
            .and_then(|set| Ok(stackgate::compose::serve(*args, set)?))
            .map(|()| ExitCode::SUCCESS),
        Command::Policies(args) => print_policies(&args),
        Command::Check(args) => face("check", &args.policy, |engine| {
            let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
            let options = CheckOptions::from(&*args);
            let run = stackgate::check::run(&options, engine, &mut input, &mut output);
            Ok(run.unwrap_or_else(|e| {
                eprintln!("stackgate check: {e}");
                2
            }))
        }),
        Command::Audit(args) => face("audit", &args.policy, |engine| {
            Ok(stackgate::compose::audit(&args, engine)?)
        }),
        Command::Rules(args) => load_policies(&args).map(|set| {
            print!("{}", stackgate::engine::docs::markdown(&Engine::new(set)));
            ExitCode::SUCCESS
        }),
        Command::Explain(args) => load_policies(&args.policy).and_then(|set| {
            print!(
                "{}",
                stackgate::cli::explain::explain(&Engine::new(set), &args.code)?
            );
            Ok(ExitCode::SUCCESS)
        }),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "stackgate failed");
            eprintln!("stackgate: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_policies(args: &PolicyArgs) -> anyhow::Result<PolicySet> {
    match &args.policies {
        Some(dir) => PolicySet::load_dir(dir)
            .with_context(|| format!("loading policies from --policies {}", dir.display())),
        None => PolicySet::embedded().context("loading the embedded default policies"),
    }
}

/// `check` and `audit` exit 2 when the policies do not load; otherwise `run` gives the code:
/// 0 clean, 1 denials (or warnings with --fail-on warning), 2 usage, parse, connection or
/// listing errors.
fn face(
    name: &str,
    args: &PolicyArgs,
    run: impl FnOnce(&Engine) -> anyhow::Result<u8>,
) -> anyhow::Result<ExitCode> {
    match load_policies(args) {
        Ok(set) => Ok(ExitCode::from(run(&Engine::new(set))?)),
        Err(e) => {
            eprintln!("stackgate {name}: {e:#}");
            Ok(ExitCode::from(2))
        }
    }
}

fn print_policies(args: &PoliciesArgs) -> anyhow::Result<ExitCode> {
    let set = load_policies(&args.policy)?;
    match args.output {
        PoliciesOutput::PolicySet => {
            print!("# effective policy set ({})\n{}", set.origin, set.to_yaml());
        }
        PoliciesOutput::AdmissionPolicies => {
            let generated = stackgate::admission_policies::generate(&set);
            print!("{}", generated.to_yaml(args.kube_version)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}
