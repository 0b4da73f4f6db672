//! `stackgate check`: the engine offline, over manifests and Helm values in a Git repository.
//!
//! Every YAML document that is a Kubernetes object (and every item of a `List`) is evaluated
//! as a CREATE admission request through the same [`Engine`] and policies the webhook uses,
//! so the verdicts, messages and patches are the webhook's. Plain Helm values files are
//! wrapped in a synthetic `stackgate.dev/v1alpha1 HelmValues` object when `--values-for`
//! names their chart (a match inside another chart's directory is skipped), and a Flux
//! HelmRelease's `valuesFrom` and an Argo CD Application's `helm.valueFiles` are resolved from
//! the run's own objects and files first ([`index`]). Findings are located with the YAML
//! parser's spans (`file:line`), and
//! the webhook's JSON Patch is shown, and with `--fix` written, as a minimal edit of the file
//! (one changed or inserted line per edit; comments and formatting kept).
//!
//! Exit codes: 0 clean, 1 denials (or warnings with `--fail-on warning`), 2 usage or input
//! errors. An input error (unreadable file or directory, not UTF-8, not YAML, larger than
//! `--max-file-size`, a FIFO or device named on the command line) is reported with its path
//! and the run goes on with the other inputs; the exit code is then 2, because a file in scope
//! was not checked. Inputs skipped by design while walking a directory (a symbolic link out of
//! the tree, a FIFO, socket or device) are reported as skipped and do not change the exit
//! code, and neither do template files (Helm, Jinja, Terraform; see [`template`]), which are
//! reported once each as a note and not checked. `--exclude GLOB` leaves paths out of the
//! walk. Plain INI cloud configs (`.conf`/`.ini` named on the command line, or `--ini GLOB`)
//! are checked as bare cloud configs ([`ini`]). `--fix` writes regular files only, atomically (a new file renamed over the old).
//! With `--render`, the run's Helm charts are rendered by the `helm` on `PATH` with the values
//! of the objects that deploy them, and the rendered objects are checked as more inputs
//! ([`render`]).

pub mod evaluate;
pub mod facts;
pub mod index;
pub mod ini;
pub mod input;
pub mod render;
pub mod sops;
pub mod template;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use crate::engine::{Engine, Facts};
use crate::policy::exception::{ExceptionError, ExceptionRules, ExceptionSet};
use crate::releases::catalog::{self, ReleaseCatalog};
use crate::report::{self, FileReport, Report};

pub use evaluate::{Checked, check_text, check_text_in};
pub use input::ValuesFor;
/// The output format and failing level, which the `check` flags name.
pub use report::{FailOn, Format};

/// What `stackgate check` checks and how it reports; the `check` flags fill it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOptions {
    /// Files and directories to check (directories recursively); `-` is standard input.
    /// Empty: the current directory.
    pub paths: Vec<PathBuf>,
    /// Output format.
    pub format: Format,
    /// Which findings make the exit code 1.
    pub fail_on: FailOn,
    /// Write the mutating webhook's edits back into the files (never into standard input).
    pub fix: bool,
    /// Files to read as plain Helm values files of a chart.
    pub values_for: Vec<ValuesFor>,
    /// Largest input read, in bytes; a larger one is an input error.
    pub max_file_size: u64,
    /// Bytes of memory the evaluation of one object may hold (the counting allocator's
    /// account, as the webhook's `--max-evaluation-memory`); past it the object is not
    /// evaluated and is an input error.
    pub max_evaluation_memory: usize,
    /// Leave the fix diffs out of text output.
    pub no_diff: bool,
    /// A `ReleaseCatalog` document that replaces the policy set's release catalog.
    pub release_catalog: Option<PathBuf>,
    /// Globs of files read as plain INI cloud configs (`--ini`); files named on the command
    /// line ending in `.conf` or `.ini` are read so too.
    pub ini: Vec<String>,
    /// Globs of paths not read (`--exclude`), matched against the path relative to the
    /// directory walked and against the path as shown.
    pub exclude: Vec<String>,
    /// Render the run's Helm charts with the `helm` on `PATH` and check what they render
    /// (`--render`, [`render`]).
    pub render: bool,
    /// A StackgateException file or directory (`--exceptions`).
    pub exceptions: Option<PathBuf>,
    /// The instant exceptions are judged at (`--now`; None: the system clock).
    pub now: Option<Timestamp>,
    /// Where exceptions are accepted and how long they may live.
    pub exception_rules: ExceptionRules,
}

/// Why `stackgate check` could not run at all (exit code 2). Problems inside inputs are part
/// of the report instead.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A path given on the command line cannot be read.
    #[error("cannot read {}: {message}", path.display())]
    Path {
        /// The path.
        path: PathBuf,
        /// The IO error kind.
        message: String,
    },
    /// A fixed file could not be written.
    #[error("cannot write the fix to {}: {message}", path.display())]
    Write {
        /// The path.
        path: PathBuf,
        /// The IO error kind.
        message: String,
    },
    /// The `--release-catalog` file is unreadable or not a valid catalog for the policies.
    #[error("--release-catalog {}: {message}", path.display())]
    ReleaseCatalog {
        /// The path.
        path: PathBuf,
        /// What is wrong (position and field, never file content beyond names).
        message: String,
    },
    /// A glob given with `--values-for`, `--exclude` or `--ini` matched no input path.
    #[error(
        "{flag} {glob:?} matches no file among the paths checked; fix the glob or drop the flag"
    )]
    Unmatched {
        /// The flag.
        flag: &'static str,
        /// The glob as given.
        glob: String,
    },
    /// The `--exceptions` file or directory is unreadable, or an exception in it is refused.
    #[error("--exceptions: {0}")]
    Exceptions(#[source] ExceptionError),
    /// The report could not be written to the output.
    #[error("cannot write the report: {0}")]
    Output(#[source] std::io::Error),
}

/// Runs `stackgate check` with `engine` (built from the same policies and release catalog
/// loading as `stackgate serve`), reading `-` from `stdin` and printing the report to `out`.
/// Returns the exit code (0, 1 or 2).
pub fn run(
    options: &CheckOptions,
    engine: &Engine,
    stdin: &mut dyn Read,
    out: &mut dyn Write,
) -> Result<u8, CheckError> {
    let with_catalog;
    let engine = match &options.release_catalog {
        Some(path) => {
            with_catalog = with_release_catalog(engine, path)?;
            &with_catalog
        }
        None => engine,
    };
    let report = check(options, engine, stdin)?;
    let rendered = match options.format {
        Format::Text => report::render::text(&report, !options.no_diff),
        Format::Json => report::render::json(&report),
        Format::Sarif => report::render::sarif(&report, engine.policies()),
        Format::Junit => report::render::junit(&report),
    };
    out.write_all(rendered.as_bytes())
        .map_err(CheckError::Output)?;
    out.flush().map_err(CheckError::Output)?;
    Ok(report.exit_code())
}

/// `engine` with its policy set's release catalog replaced by the `ReleaseCatalog` in `path`,
/// validated like the policy loader validates the embedded one.
pub fn with_release_catalog(engine: &Engine, path: &std::path::Path) -> Result<Engine, CheckError> {
    let fail = |message: String| CheckError::ReleaseCatalog {
        path: path.to_path_buf(),
        message,
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| fail(input::io_reason(&e).into_owned()))?;
    let catalog: ReleaseCatalog = serde_saphyr::from_str(&text)
        .map_err(|e| fail(e.to_string().lines().next().unwrap_or_default().to_owned()))?;
    if catalog.api_version != crate::policy::API_VERSION || catalog.kind != catalog::KIND {
        return Err(fail(format!(
            "expected apiVersion {} and kind {}",
            crate::policy::API_VERSION,
            catalog::KIND
        )));
    }
    catalog.validate().map_err(|e| fail(e.to_string()))?;
    let policies = engine
        .policies()
        .with_release_catalog(catalog)
        .map_err(|e| fail(e.to_string()))?;
    Ok(Engine::with_releases(
        policies,
        Arc::new(engine.releases().clone()),
    ))
}

/// The `--exceptions` set at the run's instant (`--now`, else the system clock), read before
/// any input so that a refused exception stops the run (exit code 2) instead of checking the
/// tree without it.
fn exceptions(
    options: &CheckOptions,
    engine: &Engine,
) -> Result<Option<crate::policy::exception::ExceptionsAt>, CheckError> {
    let Some(path) = &options.exceptions else {
        return Ok(None);
    };
    let now = options.now.unwrap_or_else(Timestamp::now);
    let set = ExceptionSet::load_path(
        path,
        engine.policies(),
        options.exception_rules.clone(),
        now,
    )
    .map_err(CheckError::Exceptions)?;
    Ok(Some(Arc::new(set).at(now)))
}

/// Checks the inputs and, with `--fix`, writes the fixes; returns the report.
pub fn check(
    options: &CheckOptions,
    engine: &Engine,
    stdin: &mut dyn Read,
) -> Result<Report, CheckError> {
    let mut inputs = input::collect(
        &options.paths,
        stdin,
        options.max_file_size,
        &options.exclude,
        &options.ini,
    )?;
    // SOPS-encrypted files are noted and left out of everything else: their ciphertext is no
    // config, and a release reading them through `valuesFrom` must say they are unseen.
    for inp in &mut inputs {
        if matches!(&inp.content, input::Content::Text(t) if sops::is_encrypted(t)) {
            inp.content = input::Content::Skipped(sops::encrypted_note());
        }
    }
    // What the run's charts render is checked as more inputs of the run, after the files.
    if options.render {
        let rendered = render::render(&inputs, render::Limits::new(options.max_file_size));
        inputs.extend(rendered);
    }
    if let Some(v) = options.values_for.iter().find(|v| {
        !inputs
            .iter()
            .any(|i| input::glob_matches_path(&v.glob, &i.name))
    }) {
        return Err(CheckError::Unmatched {
            flag: "--values-for",
            glob: v.glob.clone(),
        });
    }
    // A file named on the command line (not found while walking): the user asked for it, so
    // a name that only looks like a template's does not keep it unread.
    let named = |inp: &input::Input| {
        inp.path
            .as_ref()
            .is_some_and(|p| options.paths.iter().any(|given| given == p))
    };
    // Helm chart directories, so that a `--values-for` glob does not take another chart's
    // values file for the one it names, and an umbrella chart's values file is read under
    // the key of the chart it names.
    let charts = index::ChartDirs::build(&inputs);
    let target = |inp: &'_ input::Input| {
        if inp.rendered {
            return None;
        }
        input::values_chart(&inp.name, &options.values_for).map(|spec| {
            let subchart = charts.subchart(inp.path.as_deref(), &spec.chart);
            input::ValuesTarget {
                chart: &spec.chart,
                subchart,
                version: spec
                    .version
                    .as_deref()
                    .or_else(|| subchart.and_then(|d| d.version.as_deref())),
            }
        })
    };
    // Facts about the cluster (its cloud config), from the whole input.
    let texts: Vec<facts::Input<'_>> = inputs
        .iter()
        .filter_map(|inp| match &inp.content {
            input::Content::Text(t)
                if template::input_template_reason(
                    inp.path.as_deref(),
                    t,
                    named(inp),
                    input::is_ini(&inp.name, inp.path.as_deref(), &options.ini),
                )
                .is_none() =>
            {
                Some((inp.name.as_str(), t.as_str(), target(inp)))
            }
            _ => None,
        })
        .collect();
    let mut cluster_facts = facts::from_inputs(&texts, engine);
    drop(texts);
    if let Some(exceptions) = exceptions(options, engine)? {
        cluster_facts.merge(Facts::of_exceptions(Arc::new(exceptions)));
    }
    // Objects that HelmReleases take values from (`valuesFrom`), from every input of the run.
    let index = index::ValuesIndex::build(&inputs);
    let mut files = Vec::with_capacity(inputs.len());
    for inp in inputs {
        let text = match &inp.content {
            input::Content::Text(t) => t,
            input::Content::Error(message) => {
                files.push(FileReport {
                    problems: vec![report::Problem {
                        line: 0,
                        column: 0,
                        message: message.clone(),
                    }],
                    ..FileReport::new(&inp.name)
                });
                continue;
            }
            input::Content::Skipped(message) => {
                files.push(FileReport {
                    skipped: Some(message.clone()),
                    ..FileReport::new(&inp.name)
                });
                continue;
            }
        };
        let ini = input::is_ini(&inp.name, inp.path.as_deref(), &options.ini);
        if let Some(reason) =
            template::input_template_reason(inp.path.as_deref(), text, named(&inp), ini)
        {
            files.push(FileReport {
                template: Some(template::template_note(&reason)),
                ..FileReport::new(&inp.name)
            });
            continue;
        }
        let chart = target(&inp);
        if let Some(reason) = chart.and_then(|c| charts.foreign(inp.path.as_deref(), c.chart)) {
            files.push(FileReport {
                skipped: Some(reason),
                ..FileReport::new(&inp.name)
            });
            continue;
        }
        let check_one = |text: &str| {
            if ini {
                ini::check_ini(engine, &inp.name, text)
            } else {
                check_text_in(
                    engine,
                    &inp.name,
                    text,
                    chart,
                    &index,
                    &cluster_facts,
                    options.max_evaluation_memory,
                )
            }
        };
        let mut checked = check_one(text);
        if inp.rendered {
            // Helm's output is no file: the fix belongs in the values or the chart.
            for o in &mut checked.objects {
                o.fixable_in_place = false;
            }
            files.push(FileReport {
                problems: checked.problems,
                objects: checked.objects,
                not_written: (options.fix && checked.fixed.is_some())
                    .then(|| render::NOT_WRITTEN.to_owned()),
                ..FileReport::new(&inp.name)
            });
            continue;
        }
        let diff = checked.shown.as_ref().map(|shown| {
            report::mask::masked_diff(
                text,
                shown,
                &inp.name,
                report::mask::MaskMode::File {
                    secret_lines: &checked.secret_lines,
                },
            )
        });
        let written = match (&checked.fixed, &inp.path, options.fix) {
            (Some(fixed), Some(path), true) => match input::write_fix(path, inp.identity, fixed)? {
                None => Some(fixed),
                Some(reason) => {
                    files.push(FileReport {
                        problems: checked.problems,
                        objects: checked.objects,
                        diff,
                        not_written: Some(reason),
                        ..FileReport::new(&inp.name)
                    });
                    continue;
                }
            },
            _ => None,
        };
        match written {
            Some(fixed) => {
                let after = check_one(fixed);
                let mut objects = after.objects;
                // Keep the Secret diffs of what was written.
                for (o, before) in objects.iter_mut().zip(&checked.objects) {
                    if o.secret_diffs.is_empty() {
                        o.secret_diffs = before.secret_diffs.clone();
                    }
                }
                files.push(FileReport {
                    problems: after.problems,
                    objects,
                    diff,
                    written: true,
                    ..FileReport::new(&inp.name)
                });
            }
            None => files.push(FileReport {
                problems: checked.problems,
                objects: checked.objects,
                diff,
                ..FileReport::new(&inp.name)
            }),
        }
    }
    Ok(Report {
        files,
        fail_on: options.fail_on,
        fix: options.fix,
        omitted: report::Counts::default(),
    })
}
