//! The commands that need no cluster: `check`, `policies`, `rules` and `explain`, and the policy loading every command shares. `serve` and `audit` run in
//! [`crate::compose`]; `main` dispatches to both and prints a [`RunError`] with its sources.

use std::path::PathBuf;

use crate::admission_policies::served::{self, Family, ServedApis};
use crate::admission_policies::{AdmissionPoliciesError, KubeVersion};
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

impl RunError {
    /// The exit code of a command that failed with this error: 2 when the target of
    /// `stackgate policies` cannot take what it would write (so nothing was written), 1
    /// otherwise.
    pub fn exit_code(&self) -> u8 {
        use AdmissionPoliciesError as E;
        match self {
            RunError::AdmissionPolicies(
                E::NotServed(_) | E::Unsupported(_) | E::StaticUnsupported(_) | E::BadApiVersion(_),
            ) => 2,
            _ => 1,
        }
    }
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

/// What `stackgate policies` writes admission policies for: a Kubernetes version and what
/// its apiserver serves.
#[derive(Debug, Clone)]
pub struct PoliciesTarget {
    /// The version (static manifests need 1.36).
    pub version: KubeVersion,
    /// What it serves.
    pub served: ServedApis,
}

impl PoliciesTarget {
    /// The target the flags describe without a cluster: a default apiserver of
    /// `--kube-version`, plus `--api-versions`.
    pub fn from_flags(args: &PoliciesArgs) -> Result<Self, RunError> {
        let mut served = ServedApis::default_server(args.kube_version);
        served.add_entries(&args.api_versions)?;
        Ok(PoliciesTarget {
            version: args.kube_version,
            served,
        })
    }
}

/// `stackgate policies` for `target` (the flags' target when `None`), printing an error as
/// `stackgate policies: error: sources` to stderr. Returns the exit code: 0 written, 2 when the
/// target does not serve what the output needs (or no such target), 1 on any other error.
pub fn policies_exit(args: &PoliciesArgs, target: Option<PoliciesTarget>) -> u8 {
    match policies(args, target) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("stackgate policies: {}", with_sources(&error));
            error.exit_code()
        }
    }
}

/// `stackgate policies`: prints the effective policy set, or the admission policies
/// generated from it for `target` (the flags' target when `None`), as YAML.
pub fn policies(args: &PoliciesArgs, target: Option<PoliciesTarget>) -> Result<(), RunError> {
    let set = load_policies(&args.policy)?;
    let target = match (args.output, target) {
        (PoliciesOutput::PolicySet, _) => {
            print!("# effective policy set ({})\n{}", set.origin, set.to_yaml());
            return Ok(());
        }
        (_, Some(target)) => target,
        (_, None) => PoliciesTarget::from_flags(args)?,
    };
    let generated = crate::admission_policies::generate(&set);
    let only = args.only.map(Family::from);
    if args.output == PoliciesOutput::StaticManifests {
        let dir = args.dir.as_ref().ok_or(RunError::NoStaticDir)?;
        crate::admission_policies::static_manifests::supported(target.version)?;
        let choice = served::choose_static(&generated, &target.served, only)?;
        return write_static_manifests(&generated, args, &target, choice, dir);
    }
    let choice = served::choose(&generated, &target.served, only)?;
    print!("{}", generated.to_yaml(choice, target.served.origin()));
    Ok(())
}

/// Writes the static manifests of `generated` to `dir`: validated first (the generator refuses
/// what the apiserver's loader would), so a directory the apiserver refuses is never written.
fn write_static_manifests(
    generated: &crate::admission_policies::AdmissionPolicies,
    args: &PoliciesArgs,
    target: &PoliciesTarget,
    choice: served::ApiChoice,
    dir: &std::path::Path,
) -> Result<(), RunError> {
    use crate::admission_policies::static_manifests::{
        ADMISSION_CONFIGURATION_FILE, MANIFEST_FILE, StaticManifests,
    };
    let manifests =
        StaticManifests::new(generated, target.version, &args.break_glass_group, choice)?;
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
