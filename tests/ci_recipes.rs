//! The CI recipes of `docs/ci.md` run as written. Each recipe's commands are taken from the
//! document (the GitHub Actions workflow's `run` steps, the GitLab job's `script` and the
//! pre-commit hook's `entry`) and run with bash against three repositories: this project's
//! GitOps fixture (denials), an empty one and a clean one. `docker run … IMAGE ARGS` is the
//! only thing emulated: a shell function runs the binary under test with ARGS in the
//! repository, as the image's entrypoint would in the mounted working directory.
//!
//! A recipe that copies a path of this repository (a `--values-for` glob that another
//! repository does not have) exits 2 in the empty and clean repositories, and fails here.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const DOC: &str = include_str!("../docs/ci.md");

/// The `docker` of the recipes: `docker run [--rm] [-i] [-v M] [-w D] IMAGE ARGS…` runs the
/// binary under test with ARGS; anything else fails loudly.
const FAKE_DOCKER: &str = r#"
docker() {
  if [ "$1" != run ]; then echo "docker $1: not emulated by the test" >&2; return 127; fi
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --rm|-i) shift ;;
      -v|-w) shift 2 ;;
      -*) echo "docker run $1: not emulated by the test" >&2; return 127 ;;
      *) break ;;
    esac
  done
  if [ "$1" != "$RECIPE_IMAGE" ]; then echo "unexpected image $1" >&2; return 127; fi
  shift
  "$STACKGATE_BIN" "$@"
}
"#;

/// The YAML block of `docs/ci.md` whose first line is `# <file>`, parsed.
fn recipe(file: &str) -> Value {
    let marker = format!("```yaml\n# {file}\n");
    let start = DOC
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/ci.md lost the {file} recipe"))
        + "```yaml\n".len();
    let len = DOC[start..].find("```").expect("the block ends");
    serde_saphyr::from_str(&DOC[start..start + len])
        .unwrap_or_else(|e| panic!("the {file} recipe is not valid YAML: {e}"))
}

/// Runs `script` with bash (`-eo pipefail`, as GitHub Actions runs `run:` steps) in `repo`,
/// with `env`; returns the exit code and stderr.
fn run(repo: &Path, script: &str, env: &[(&str, &str)]) -> (i32, String) {
    let mut command = Command::new("bash");
    command
        .args(["--noprofile", "--norc", "-eo", "pipefail", "-c"])
        .arg(format!("{FAKE_DOCKER}\n{script}"))
        .current_dir(repo)
        .env("STACKGATE_BIN", env!("CARGO_BIN_EXE_stackgate"))
        .env("PWD", repo)
        .env_remove("STACKGATE_POLICIES");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("bash runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The three repositories, and the exit code the gate must give in each.
fn repositories() -> (tempfile::TempDir, Vec<(PathBuf, i32)>) {
    let dir = tempfile::tempdir().unwrap();
    let fixture = dir.path().join("fixture");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gitops/repo"),
        &fixture,
    );
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(empty.join("README.md"), "nothing to check\n").unwrap();
    let clean = dir.path().join("clean");
    std::fs::create_dir_all(clean.join("apps")).unwrap();
    std::fs::write(
        clean.join("apps/config.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: default\ndata:\n  a: b\n",
    )
    .unwrap();
    (dir, vec![(fixture, 1), (empty, 0), (clean, 0)])
}

fn string<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"))
}

#[test]
fn the_github_actions_workflow_runs_as_written() {
    let workflow = recipe(".github/workflows/stackgate.yaml");
    let job = &workflow["jobs"]["check"];
    let image = string(&job["env"]["STACKGATE_IMAGE"], "env.STACKGATE_IMAGE");
    let runs: Vec<(&str, &str)> = job["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| Some((s["name"].as_str()?, s["run"].as_str()?)))
        .collect();
    assert_eq!(runs.len(), 2, "a SARIF step and a gate step: {runs:?}");
    let (repos_dir, repos) = repositories();
    for (repo, gate) in &repos {
        let env = [("STACKGATE_IMAGE", image), ("RECIPE_IMAGE", image)];
        // The SARIF step always succeeds (findings are for code scanning) and writes SARIF.
        let (code, err) = run(repo, runs[0].1, &env);
        assert_eq!(
            code,
            0,
            "{}: {} in {}: {err}",
            runs[0].0,
            code,
            repo.display()
        );
        let sarif: Value =
            serde_json::from_str(&std::fs::read_to_string(repo.join("stackgate.sarif")).unwrap())
                .expect("stackgate.sarif is JSON");
        assert_eq!(sarif["version"], "2.1.0");
        let results = sarif["runs"][0]["results"].as_array().unwrap();
        assert_eq!(
            results.iter().any(|r| r["level"] == "error"),
            *gate == 1,
            "{}",
            repo.display()
        );
        // The gate fails the job exactly when there is a denial.
        let (code, err) = run(repo, runs[1].1, &env);
        assert_eq!(code, *gate, "{} in {}: {err}", runs[1].0, repo.display());
    }
    drop(repos_dir);
}

#[test]
fn the_gitlab_job_runs_as_written() {
    let ci = recipe(".gitlab-ci.yml");
    let job = &ci["stackgate"];
    let image = string(
        &job["variables"]["STACKGATE_IMAGE"],
        "variables.STACKGATE_IMAGE",
    );
    let script: Vec<&str> = job["script"]
        .as_array()
        .expect("script")
        .iter()
        .map(|s| string(s, "a script line"))
        .collect();
    assert_eq!(script.len(), 2, "{script:?}");
    assert_eq!(
        string(&job["artifacts"]["reports"]["junit"], "the JUnit report"),
        "stackgate-junit.xml"
    );
    let (repos_dir, repos) = repositories();
    for (repo, gate) in &repos {
        let project = repo.to_str().unwrap();
        let env = [
            ("STACKGATE_IMAGE", image),
            ("RECIPE_IMAGE", image),
            ("CI_PROJECT_DIR", project),
        ];
        let (code, err) = run(repo, script[0], &env);
        assert_eq!(code, 0, "{} in {}: {err}", script[0], repo.display());
        let junit = std::fs::read_to_string(repo.join("stackgate-junit.xml")).unwrap();
        assert!(
            junit.starts_with("<?xml") && junit.contains("<testsuites"),
            "{junit}"
        );
        let (code, err) = run(repo, script[1], &env);
        assert_eq!(code, *gate, "{} in {}: {err}", script[1], repo.display());
    }
    drop(repos_dir);
}

/// pre-commit runs `docker run … ENTRY FILES…` with the changed files that match `files`.
#[test]
fn the_pre_commit_hook_runs_as_written() {
    let config = recipe(".pre-commit-config.yaml");
    let hook = &config["repos"][0]["hooks"][0];
    assert_eq!(hook["language"], "docker_image");
    let entry = string(&hook["entry"], "entry");
    let (image, args) = entry.split_once(' ').expect("IMAGE ARGS");
    let files = regex::Regex::new(string(&hook["files"], "files")).expect("files is a regex");
    let (repos_dir, repos) = repositories();
    for (repo, gate) in &repos {
        let mut changed = Vec::new();
        let mut stack = vec![repo.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(dir).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let rel = path
                        .strip_prefix(repo)
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .to_owned();
                    if files.is_match(&rel) {
                        changed.push(format!("'{rel}'"));
                    }
                }
            }
        }
        changed.sort();
        // One commit that changes every matching file (an empty commit runs nothing).
        if changed.is_empty() {
            continue;
        }
        let script = format!(
            "docker run --rm -v \"$PWD:/src:rw\" -w /src {image} {args} {}",
            changed.join(" ")
        );
        let (code, err) = run(repo, &script, &[("RECIPE_IMAGE", image)]);
        assert_eq!(code, *gate, "{script} in {}: {err}", repo.display());
    }
    drop(repos_dir);
}

/// The `text` block of `docs/ci.md` that follows `after`: its lines.
fn text_block(after: &str) -> Vec<&'static str> {
    let at = DOC
        .find(after)
        .unwrap_or_else(|| panic!("docs/ci.md lost {after:?}"));
    let start = at + DOC[at..].find("```text\n").expect("a text block follows") + 8;
    let len = DOC[start..].find("```").expect("the block ends");
    DOC[start..start + len].lines().collect()
}

/// Each line of a documented output is a line of the real output; a line that ends in ` ...`
/// stands for a longer one that starts with what precedes it.
fn assert_shown(doc_lines: &[&str], actual: &str, what: &str) {
    for line in doc_lines {
        let found = match line.strip_suffix(" ...") {
            Some(prefix) => actual.lines().any(|l| l.starts_with(prefix)),
            None => actual.lines().any(|l| l == *line),
        };
        assert!(
            found,
            "docs/ci.md shows a line of {what} that the real output does not have:\n{line}\n--- real output\n{actual}"
        );
    }
}

#[test]
fn the_outputs_shown_in_ci_md_are_real() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gitops/repo");
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args([
            "check",
            "--values-for",
            "openstack-cloud-controller-manager=clusters/*/occm-values.yaml",
            "--values-for",
            "openstack-cloud-controller-manager=base/occm/values.yaml",
            ".",
        ])
        .current_dir(&fixture)
        .env_remove("STACKGATE_POLICIES")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_shown(
        &text_block("What it prints (`--format text`, the default;"),
        &String::from_utf8_lossy(&out.stdout),
        "`stackgate check` on the fixture repository",
    );

    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("charts/occm");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: occm\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/deployment.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args(["check", "."])
        .current_dir(dir.path())
        .env_remove("STACKGATE_POLICIES")
        .output()
        .unwrap();
    assert_shown(
        &text_block("render to. `stackgate check` lists each template once as a note"),
        &String::from_utf8_lossy(&out.stdout),
        "`stackgate check` on a chart's templates",
    );
}
