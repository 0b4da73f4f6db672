//! `stackgate` binary: install the crypto provider, parse the command line, run.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;

use stackgate::check::CheckOptions;
use stackgate::cli::{
    AuditArgs, CheckArgs, Cli, Command, PoliciesArgs, PoliciesOutput, PolicyArgs,
};
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
        Command::Check(args) => check(&args),
        Command::Audit(args) => audit(&args),
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

/// `stackgate check`: exit 0 clean, 1 denials (or warnings with --fail-on warning), 2 usage,
/// policy or parse errors.
fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let policies = match load_policies(&args.policy) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stackgate check: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let engine = Engine::new(policies);
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let options = CheckOptions::from(args);
    let code =
        stackgate::check::run(&options, &engine, &mut input, &mut output).unwrap_or_else(|e| {
            eprintln!("stackgate check: {e}");
            2
        });
    Ok(ExitCode::from(code))
}

/// `stackgate audit`: exit 0 clean, 1 denials (or warnings with --fail-on warning), 2 usage,
/// policy, connection or listing errors.
fn audit(args: &AuditArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;
    let policies = match load_policies(&args.policy) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stackgate audit: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let engine = Engine::new(policies);
    let options = stackgate::audit::AuditOptions::from(args);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let code = runtime.block_on(async {
        let client = match kube::Client::try_default().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "stackgate audit: no cluster access (kubeconfig or in-cluster service \
                     account): {e}"
                );
                return 2;
            }
        };
        let terminal = std::io::stderr().is_terminal();
        let mut progress = |kind: &str, objects: usize| {
            if terminal {
                eprint!("\r\x1b[Kstackgate audit: listing {kind}; {objects} objects audited");
            }
        };
        let mut output = std::io::stdout().lock();
        let result =
            stackgate::audit::run(&client, &engine, &options, &mut output, &mut progress).await;
        if terminal {
            eprint!("\r\x1b[K");
        }
        result.unwrap_or_else(|e| {
            eprintln!("stackgate audit: {e}");
            2
        })
    });
    Ok(ExitCode::from(code))
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
