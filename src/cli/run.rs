//! The commands that need no cluster: `check`, `policies`, `rules` and `explain`, and the policy loading every command shares. `serve` and `audit` run in
//! [`crate::compose`]; `main` dispatches to both and prints a [`RunError`] with its sources.

use std::path::PathBuf;

use crate::admission_policies::AdmissionPoliciesError;
use crate::check::CheckOptions;
use crate::engine::Engine;
use crate::policy::{PolicyError, PolicySet};

use super::explain::{ExplainArgs, ExplainError};
use super::{CheckArgs, PoliciesArgs, PoliciesOutput, PolicyArgs};

/// Why a command could not do its work (the binary prints it and exits 1).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `--policies DIR` does not load.
    #[error("loading policies from --policies {}", dir.display())]
    PoliciesDir {
        /// The directory given.
        dir: PathBuf,
        /// What is wrong with it.
        #[source]
        source: PolicyError,
    },
    /// The policies compiled into the binary do not load (a build defect).
    #[error("loading the embedded default policies")]
    EmbeddedPolicies(#[source] PolicyError),
    /// `stackgate explain` was asked for a code it does not know.
    #[error(transparent)]
    Explain(#[from] ExplainError),
    /// The admission policies could not be written for the requested Kubernetes version.
    #[error(transparent)]
    AdmissionPolicies(#[from] AdmissionPoliciesError),
    /// `--output static-manifests` was given no directory.
    #[error(
        "--output static-manifests needs a directory: stackgate policies --output static-manifests --kube-version 1.36 DIR"
    )]
    NoStaticDir,
    /// The static manifests could not be written.
    #[error("writing {}", path.display())]
    WriteStatic {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The policy set `args` names: the `--policies` directory, or the embedded default set.
pub fn load_policies(args: &PolicyArgs) -> Result<PolicySet, RunError> {
    match &args.policies {
        Some(dir) => PolicySet::load_dir(dir).map_err(|source| RunError::PoliciesDir {
            dir: dir.clone(),
            source,
        }),
        None => PolicySet::embedded().map_err(RunError::EmbeddedPolicies),
    }
}

/// The engine of a face (`check`, `audit`) named `face`. When the policies do not load it
/// prints `stackgate FACE: error: sources…` to stderr and gives the face's exit code, 2
/// (the same code as a usage, parse, connection or listing error).
pub fn face_engine(face: &str, args: &PolicyArgs) -> Result<Engine, u8> {
    load_policies(args).map(Engine::new).map_err(|error| {
        eprintln!("stackgate {face}: {}", with_sources(&error));
        2
    })
}

/// `stackgate check`: reads the paths (or stdin) and writes the report to stdout. Exit code
/// 0 clean, 1 denials (or warnings with `--fail-on warning`), 2 when the policies do not load
/// or on a usage or parse error.
pub fn check(args: &CheckArgs) -> u8 {
    let engine = match face_engine("check", &args.policy) {
        Ok(engine) => engine,
        Err(code) => return code,
    };
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let options = CheckOptions::from(args);
    crate::check::run(&options, &engine, &mut input, &mut output).unwrap_or_else(|error| {
        eprintln!("stackgate check: {error}");
        2
    })
}

/// `stackgate policies`: prints the effective policy set, or the admission policies
/// generated from it, as YAML.
pub fn policies(args: &PoliciesArgs) -> Result<(), RunError> {
    let set = load_policies(&args.policy)?;
    match args.output {
        PoliciesOutput::PolicySet => {
            print!("# effective policy set ({})\n{}", set.origin, set.to_yaml());
        }
        PoliciesOutput::AdmissionPolicies => {
            let generated = crate::admission_policies::generate(&set);
            print!("{}", generated.to_yaml(args.kube_version)?);
        }
        PoliciesOutput::StaticManifests => {
            let dir = args.dir.as_ref().ok_or(RunError::NoStaticDir)?;
            write_static_manifests(&set, args, dir)?;
        }
    }
    Ok(())
}

/// Writes the static manifests of `set` to `dir`: validated first (the generator refuses what
/// the apiserver's loader would), so a directory the apiserver refuses is never written.
fn write_static_manifests(
    set: &PolicySet,
    args: &PoliciesArgs,
    dir: &std::path::Path,
) -> Result<(), RunError> {
    use crate::admission_policies::static_manifests::{
        ADMISSION_CONFIGURATION_FILE, MANIFEST_FILE, StaticManifests,
    };
    let generated = crate::admission_policies::generate(set);
    let manifests = StaticManifests::new(&generated, args.kube_version, &args.break_glass_group)?;
    let write_error = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| RunError::WriteStatic { path, source }
    };
    std::fs::create_dir_all(dir).map_err(write_error(dir))?;
    let root = std::fs::canonicalize(dir).map_err(write_error(dir))?;
    let configuration = manifests.admission_configuration(&root.to_string_lossy())?;
    for plugin in &manifests.dirs {
        let sub = root.join(plugin.subdir);
        std::fs::create_dir_all(&sub).map_err(write_error(&sub))?;
        let file = sub.join(MANIFEST_FILE);
        std::fs::write(&file, StaticManifests::manifest_yaml(plugin))
            .map_err(write_error(&file))?;
        println!("wrote {}", file.display());
    }
    let file = root.join(ADMISSION_CONFIGURATION_FILE);
    std::fs::write(&file, configuration).map_err(write_error(&file))?;
    println!("wrote {}", file.display());
    Ok(())
}

/// `stackgate rules`: prints every rule as Markdown (the text of `docs/rules.md`).
pub fn rules(args: &PolicyArgs) -> Result<(), RunError> {
    let engine = Engine::new(load_policies(args)?);
    print!("{}", crate::engine::docs::markdown(&engine));
    Ok(())
}

/// `stackgate explain CODE`: prints everything about one finding code.
pub fn explain(args: &ExplainArgs) -> Result<(), RunError> {
    let engine = Engine::new(load_policies(&args.policy)?);
    print!("{}", super::explain::explain(&engine, &args.code)?);
    Ok(())
}

/// `error` and its sources joined by `: ` (how the binary prints every error).
pub fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_policy_directory_names_the_flag_and_the_cause() {
        let args = PolicyArgs {
            policies: Some(PathBuf::from("/nonexistent/stackgate-policies")),
        };
        let error = load_policies(&args).unwrap_err();
        let text = with_sources(&error);
        assert!(
            text.starts_with("loading policies from --policies /nonexistent/stackgate-policies: "),
            "{text}"
        );
        assert!(
            text.matches(": ").count() >= 2,
            "the sources follow: {text}"
        );
    }

    #[test]
    fn a_face_whose_policies_do_not_load_exits_2() {
        let args = PolicyArgs {
            policies: Some(PathBuf::from("/nonexistent/stackgate-policies")),
        };
        assert_eq!(face_engine("check", &args).err(), Some(2));
        assert!(face_engine("check", &PolicyArgs { policies: None }).is_ok());
    }
}
