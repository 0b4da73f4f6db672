//! `stackgate check --render`: the run's Helm charts rendered by the real `helm` on PATH with
//! the values of the Flux HelmRelease / Argo CD Application that deploys them, and the
//! rendered objects checked like files. Tests that need Helm skip (with the reason printed)
//! when no `helm` is on PATH; `.ci/run` runs this file with the pinned Helm on PATH.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const FIXTURES: &str = "tests/fixtures/render";

/// The directory holding `helm` on PATH, or None (the caller prints why it skips).
fn helm_dir() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|d| d.join("helm").is_file())
}

macro_rules! require_helm {
    () => {
        if helm_dir().is_none() {
            eprintln!(
                "skipped: no `helm` on PATH (.ci/run puts the pinned Helm v3.17.2 from target/tools there)"
            );
            return;
        }
    };
}

/// The directory holding `kubectl` on PATH, or None.
fn kubectl_dir() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|d| d.join("kubectl").is_file())
}

/// `stackgate check --render ARGS` in `dir`, with `path` as PATH (None: the test's own).
fn check(dir: &Path, args: &[&str], path: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stackgate"));
    command
        .arg("check")
        .arg("--render")
        .args(args)
        .current_dir(dir)
        .env_remove("STACKGATE_POLICIES")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let mut child = command.spawn().expect("stackgate runs");
    drop(child.stdin.take());
    child.wait_with_output().expect("stackgate exits")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURES)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// The report lines that start with `prefix`.
fn lines_of<'a>(out: &'a str, prefix: &str) -> Vec<&'a str> {
    out.lines().filter(|l| l.starts_with(prefix)).collect()
}

const SERIAL_FALSE: &str = "error [serial-lb-api-calls/false] Secret kube-system/cloud-config stringData[\"cloud.conf\"] line 4: [LoadBalancer] provider-requires-serial-api-calls is set to a false value";

#[test]
fn a_helm_release_renders_the_chart_with_its_values_and_the_secret_is_denied() {
    require_helm!();
    let o = check(&fixtures().join("repo"), &["charts", "flux"], None);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}");
    let secret = lines_of(
        &out,
        "render of charts/occm (HelmRelease flux-system/occm): occm/templates/secret.yaml:13: ",
    );
    assert_eq!(secret.len(), 1, "{out}");
    assert!(secret[0].contains(SERIAL_FALSE), "{out}");
    // The release name and namespace helm-controller gives it: `<targetNamespace>-<name>`.
    assert!(
        out.contains("occm/templates/daemonset.yaml:17: warning [cluster-name/default-name] DaemonSet kube-system/kube-system-occm"),
        "{out}"
    );
    // `--skip-tests`: the test hook Pod is not rendered.
    assert!(!out.contains("occm-test"), "{out}");
    assert!(
        out.ends_with(
            "stackgate check: 8 files, 4 objects: 1 error, 1 warning, 0 notes, 3 skipped\n"
        ),
        "{out}"
    );
}

#[test]
fn an_argo_application_renders_with_its_value_files_and_release_name() {
    require_helm!();
    let o = check(&fixtures().join("repo"), &["charts", "argo"], None);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}");
    let secret = lines_of(
        &out,
        "render of charts/occm (Application argocd/occm): occm/templates/secret.yaml:13: ",
    );
    assert_eq!(secret.len(), 1, "{out}");
    assert!(secret[0].contains(SERIAL_FALSE), "{out}");
    assert!(out.contains("DaemonSet kube-system/occm-argo"), "{out}");
    assert!(!out.contains("chart defaults"), "{out}");
}

#[test]
fn a_chart_nothing_deploys_renders_once_with_its_defaults() {
    require_helm!();
    let o = check(&fixtures().join("repo"), &["charts", "--format=json"], None);
    let out = stdout(&o);
    // Namespace `default`: the Secret is no cloud-config site, and the defaults leave the
    // serial line out; only the CCM's cluster name is warned about.
    assert_eq!(code(&o), 0, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    let text = report.to_string();
    assert!(
        text.contains("render of charts/occm (chart defaults): occm/templates/daemonset.yaml"),
        "{out}"
    );
    assert!(text.contains("DaemonSet default/occm"), "{out}");
    // The rendered Secret and DaemonSet; not the test hook Pod.
    assert_eq!(report["summary"]["objects"], 2, "{out}");
}

#[test]
fn without_helm_one_note_and_no_failure() {
    let empty = tempfile::tempdir().expect("tempdir");
    let o = check(&fixtures().join("repo"), &["."], Some(empty.path()));
    let out = stdout(&o);
    // The files themselves are still checked (the HelmRelease's values hold serial false).
    let notes = lines_of(&out, "--render: ");
    assert_eq!(
        notes,
        vec!["--render: note [skipped] helm not found on PATH; charts not rendered (2 renders)"],
        "{out}"
    );
    assert!(!out.contains("render of"), "{out}");
    assert_ne!(code(&o), 2, "{out}");
}

#[test]
fn a_helm_error_is_one_input_error_per_chart_and_never_shows_values() {
    require_helm!();
    let o = check(&fixtures().join("broken"), &["."], None);
    let out = stdout(&o);
    assert_eq!(code(&o), 2, "{out}");
    let missing = lines_of(
        &out,
        "render of charts/needs-dep (chart defaults):0:0: error [input] helm template failed: Error: An error occurred while checking for chart dependencies.",
    );
    assert_eq!(missing.len(), 1, "{out}");
    assert!(
        missing[0].contains("missing in charts/ directory: common"),
        "{out}"
    );
    let failed = lines_of(
        &out,
        "render of charts/fails (HelmRelease flux-system/fails):0:0: error [input] helm template failed: Error: execution error at (fails/templates/fail.yaml:1:4): cannot use password <value not shown> here",
    );
    assert_eq!(failed.len(), 1, "{out}");
    assert!(!out.contains("canary-hunter2"), "{out}");
    assert!(!String::from_utf8_lossy(&o.stderr).contains("canary-hunter2"));
}

/// Every file below `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let entry = entry.expect("entry");
            if entry.file_type().expect("type").is_dir() {
                pending.push(entry.path());
            } else {
                out.push((entry.path(), std::fs::read(entry.path()).expect("read")));
            }
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

#[test]
fn fix_never_writes_a_render_and_says_so() {
    require_helm!();
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixtures().join("repo/charts"), &dir.path().join("charts"));
    // Values that leave the serial line out of the rendered Secret: the mutating webhook
    // would add it, but the Secret is Helm's output, not a file.
    let mut release = std::fs::File::create(dir.path().join("occm.yaml")).expect("create");
    release
        .write_all(
            b"apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: occm\n  namespace: kube-system\nspec:\n  chart:\n    spec:\n      chart: ./charts/occm\n      sourceRef: {kind: GitRepository, name: platform}\n  values:\n    cloud:\n      authUrl: https://keystone.example.test/v3\n",
        )
        .expect("write");
    drop(release);
    let before = snapshot(dir.path());
    let o = check(dir.path(), &["--fix", "."], None);
    let out = stdout(&o);
    assert_eq!(snapshot(dir.path()), before, "--fix wrote a file: {out}");
    let prefix = "render of charts/occm (HelmRelease kube-system/occm): occm/templates/secret.yaml";
    assert!(
        out.contains(&format!("{prefix}:12: note [serial-lb-api-calls/mutation]")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{prefix}: note [fix] not written: rendered by helm, not a file; change the values (or the template) that render it"
        )),
        "{out}"
    );
    assert!(!out.contains("fixed: wrote"), "{out}");
}

#[test]
fn a_kustomize_overlay_is_rendered_by_kubectl_and_its_base_only_through_it() {
    if kubectl_dir().is_none() {
        eprintln!("skipped: no `kubectl` on PATH");
        return;
    }
    let o = check(&fixtures().join("kustomize"), &["."], None);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}");
    let rendered = lines_of(&out, "render of ");
    assert_eq!(rendered.len(), 1, "{out}");
    assert!(
        rendered[0].starts_with(&format!(
            "render of overlays/prod (kubectl kustomize):11: {SERIAL_FALSE}"
        )),
        "{out}"
    );
}

#[test]
fn without_kubectl_one_note() {
    let empty = tempfile::tempdir().expect("tempdir");
    let o = check(&fixtures().join("kustomize"), &["."], Some(empty.path()));
    let out = stdout(&o);
    assert_eq!(
        lines_of(&out, "--render: "),
        vec![
            "--render: note [skipped] kubectl not found on PATH; kustomize overlays not rendered (1 render)"
        ],
        "{out}"
    );
    assert_eq!(code(&o), 0, "{out}");
}
