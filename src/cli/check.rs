//! `stackgate check` flags and their conversion into [`CheckOptions`].

use std::path::PathBuf;

use clap::Args;

use super::PolicyArgs;
use crate::check::input::{DEFAULT_MAX_FILE_SIZE, ValuesFor};
use crate::check::{CheckOptions, FailOn, Format};

/// `stackgate check` flags.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Files and directories to check (directories recursively: *.yaml, *.yml, *.json);
    /// `-` reads a YAML stream from standard input (e.g. `kustomize build | stackgate check -`).
    /// Default: the current directory.
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(
        long,
        env = "STACKGATE_CHECK_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub format: Format,
    /// Which findings make the exit code 1.
    #[arg(
        long,
        env = "STACKGATE_CHECK_FAIL_ON",
        value_enum,
        default_value = "error"
    )]
    pub fail_on: FailOn,
    /// Write the edits the mutating webhook would make back into the files (minimal edits;
    /// standard input is never written). The report then describes the fixed files.
    #[arg(long, env = "STACKGATE_CHECK_FIX")]
    pub fix: bool,
    /// Treat files matching GLOB as plain Helm values files of CHART, e.g.
    /// `openstack-cloud-controller-manager='clusters/*/values/occm*.yaml'`; with `@VERSION`
    /// (`openstack-cloud-controller-manager@2.31.1=…`) read as that chart version reads them,
    /// else as every version could (an umbrella's file: as its dependency's `version`).
    /// Repeatable.
    #[arg(
        long = "values-for",
        env = "STACKGATE_CHECK_VALUES_FOR",
        value_name = "CHART[@VERSION]=GLOB"
    )]
    pub values_for: Vec<ValuesFor>,
    /// Largest file (and standard input) read, in bytes. A larger input is not checked and
    /// is reported as "skipped: larger than N bytes", an input error (exit code 2).
    #[arg(
        long,
        env = "STACKGATE_CHECK_MAX_FILE_SIZE",
        value_name = "BYTES",
        default_value_t = DEFAULT_MAX_FILE_SIZE
    )]
    pub max_file_size: u64,
    /// Bytes of memory the evaluation of one object may hold (as the webhook's
    /// `--max-evaluation-memory`); past it the object is not evaluated and is reported as an
    /// input error (exit code 2).
    #[arg(long, env = "STACKGATE_CHECK_MAX_EVALUATION_MEMORY", value_name = "BYTES", default_value_t = crate::budget::DEFAULT_MAX_EVALUATION_MEMORY, value_parser = super::parse_positive)]
    pub max_evaluation_memory: usize,
    /// Do not print fix diffs in text output.
    #[arg(long, env = "STACKGATE_CHECK_NO_DIFF")]
    pub no_diff: bool,
    /// A `ReleaseCatalog` document (the format of `policies/release-catalog.yaml`) that
    /// replaces the policy set's release catalog for the release-annotation rules.
    #[arg(long, env = "STACKGATE_RELEASE_CATALOG", value_name = "FILE")]
    pub release_catalog: Option<PathBuf>,
    /// Do not read paths matching GLOB: matched against the path relative to the directory
    /// walked and against the path as given (`*` within a segment, `**` across segments, `?`,
    /// `[abc]`; a glob not starting with `/` also matches a trailing part of the path), e.g.
    /// `--exclude 'vendor/**'`. A matching directory is not entered; a matching file named on
    /// the command line is reported as skipped. Repeatable; the environment variable takes a
    /// comma-separated list.
    #[arg(
        long,
        env = "STACKGATE_CHECK_EXCLUDE",
        value_name = "GLOB",
        value_delimiter = ','
    )]
    pub exclude: Vec<String>,
    /// Read files matching GLOB as plain INI cloud configs (`cloud.conf`): every
    /// cloud-config rule runs on them and `--fix` edits them. Also matched while walking a
    /// directory (which otherwise reads only YAML and JSON). A file named on the command line
    /// ending in `.conf` or `.ini` is read as INI without it. Repeatable; the environment
    /// variable takes a comma-separated list.
    #[arg(
        long,
        env = "STACKGATE_CHECK_INI",
        value_name = "GLOB",
        value_delimiter = ','
    )]
    pub ini: Vec<String>,
    /// Render each Helm chart directory of the run (a `Chart.yaml`) with the `helm` on PATH,
    /// with the values of each Flux HelmRelease or Argo CD Application of the run that deploys
    /// it (else its defaults), and check the rendered objects like files (named `render of
    /// DIR (WHO): TEMPLATE`; `--fix` never writes them). Kustomize overlays are rendered by
    /// `kubectl kustomize`. Without helm or kubectl: one note. Bounds in docs/limits.md.
    #[arg(long, env = "STACKGATE_CHECK_RENDER")]
    pub render: bool,
    /// A StackgateException file, or a directory of them (`*.yaml`, `*.yml`; each a YAML
    /// stream), applied as the webhook applies the cluster's: a finding an exception covers is
    /// reported as excepted and does not fail the run. Read strictly: a refused exception is
    /// an input error (exit code 2), never "exempt everything".
    #[arg(long, env = "STACKGATE_CHECK_EXCEPTIONS", value_name = "PATH")]
    pub exceptions: Option<PathBuf>,
    /// The instant exceptions are judged at (RFC 3339, e.g. `2027-01-01T00:00:00Z`): to
    /// reproduce a CI run, or to ask whether the tree still passes once an exception has
    /// expired. Default: the system clock.
    #[arg(long, env = "STACKGATE_CHECK_NOW", value_name = "RFC3339", value_parser = super::exceptions::parse_now)]
    pub now: Option<k8s_openapi::jiff::Timestamp>,
    /// Where exceptions are accepted and how long they may live.
    #[command(flatten)]
    pub exception_rules: super::ExceptionArgs,
    /// Policy source.
    #[command(flatten)]
    pub policy: PolicyArgs,
}

impl From<&CheckArgs> for CheckOptions {
    /// Every flag but the policy source, which the caller loads into the engine.
    fn from(args: &CheckArgs) -> Self {
        // Destructured, so that a new flag cannot be forgotten here silently.
        let CheckArgs {
            paths,
            format,
            fail_on,
            fix,
            values_for,
            max_file_size,
            max_evaluation_memory,
            no_diff,
            release_catalog,
            exclude,
            ini,
            render,
            exceptions,
            now,
            exception_rules,
            policy: _,
        } = args;
        CheckOptions {
            paths: paths.clone(),
            format: *format,
            fail_on: *fail_on,
            fix: *fix,
            values_for: values_for.clone(),
            max_file_size: *max_file_size,
            max_evaluation_memory: *max_evaluation_memory,
            no_diff: *no_diff,
            release_catalog: release_catalog.clone(),
            exclude: exclude.clone(),
            ini: ini.clone(),
            render: *render,
            exceptions: exceptions.clone(),
            now: *now,
            exception_rules: exception_rules.rules(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Command;
    use crate::cli::tests::parse;

    fn options(argv: &[&str]) -> CheckOptions {
        match parse(argv).command {
            Command::Check(args) => CheckOptions::from(&*args),
            other => panic!("{argv:?}: not check: {other:?}"),
        }
    }

    #[test]
    fn check_defaults() {
        let defaults = options(&["stackgate", "check"]);
        assert_eq!(
            defaults,
            CheckOptions {
                paths: Vec::new(),
                format: Format::Text,
                fail_on: FailOn::Error,
                fix: false,
                values_for: Vec::new(),
                max_file_size: DEFAULT_MAX_FILE_SIZE,
                max_evaluation_memory: crate::budget::DEFAULT_MAX_EVALUATION_MEMORY,
                no_diff: false,
                release_catalog: None,
                exclude: Vec::new(),
                ini: Vec::new(),
                render: false,
                exceptions: None,
                now: None,
                exception_rules: crate::policy::exception::ExceptionRules::default(),
            }
        );
    }

    #[test]
    fn every_check_flag_reaches_the_options() {
        let given = options(&[
            "stackgate",
            "check",
            "a.yaml",
            "-",
            "--format=sarif",
            "--fail-on=warning",
            "--fix",
            "--values-for=occm=v/*.yaml",
            "--values-for=ccm@2.31.1=w/*.yaml",
            "--max-file-size=10",
            "--max-evaluation-memory=7",
            "--no-diff",
            "--release-catalog=c.yaml",
            "--exclude=charts/**",
            "--exclude=a/*.tpl,b/**",
            "--ini=**/cloud.conf,x.ini",
            "--render",
            "--exceptions=exc/",
            "--now=2027-01-01T00:00:00Z",
            "--exception-namespaces=platform,ops",
            "--exception-max-lifetime-days=30",
            "--exception-warn-days=3",
        ]);
        assert_eq!(
            given,
            CheckOptions {
                paths: vec!["a.yaml".into(), "-".into()],
                format: Format::Sarif,
                fail_on: FailOn::Warning,
                fix: true,
                values_for: vec![
                    ValuesFor {
                        chart: "occm".to_owned(),
                        version: None,
                        glob: "v/*.yaml".to_owned(),
                    },
                    ValuesFor {
                        chart: "ccm".to_owned(),
                        version: Some("2.31.1".to_owned()),
                        glob: "w/*.yaml".to_owned(),
                    }
                ],
                max_file_size: 10,
                max_evaluation_memory: 7,
                no_diff: true,
                release_catalog: Some("c.yaml".into()),
                exclude: vec![
                    "charts/**".to_owned(),
                    "a/*.tpl".to_owned(),
                    "b/**".to_owned()
                ],
                ini: vec!["**/cloud.conf".to_owned(), "x.ini".to_owned()],
                render: true,
                exceptions: Some("exc/".into()),
                now: Some("2027-01-01T00:00:00Z".parse().unwrap()),
                exception_rules: crate::policy::exception::ExceptionRules {
                    namespaces: vec!["platform".to_owned(), "ops".to_owned()],
                    expires_required: true,
                    max_lifetime: k8s_openapi::jiff::SignedDuration::from_hours(24 * 30),
                    warn_within: k8s_openapi::jiff::SignedDuration::from_hours(24 * 3),
                },
            }
        );
    }
}
