//! The `stackgate check` binary: exit codes, standard input, `--fail-on`, `--fix` (minimal,
//! idempotent, byte-preserving edits), JSON files, and input errors that never echo content.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const REPO: &str = "tests/fixtures/gitops/repo";
const VALUES_FOR: &str = "openstack-cloud-controller-manager=clusters/*/occm-values.yaml";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(REPO).join(rel)
}

fn stackgate(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .arg("check")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("STACKGATE_POLICIES")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("stackgate runs");
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(stdin.unwrap_or_default().as_bytes())
            .expect("write stdin");
    }
    child.wait_with_output().expect("stackgate exits")
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
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
fn exit_codes() {
    let clean = repo("argocd/occm-values-object.yaml");
    let denied = repo("rke2/occm-helmchart.yaml");
    let warned = repo("flux/occm-helmrelease.yaml");
    let o = stackgate(&[clean.to_str().unwrap_or_default()], None);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let o = stackgate(&[denied.to_str().unwrap_or_default()], None);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let o = stackgate(&[warned.to_str().unwrap_or_default()], None);
    assert_eq!(code(&o), 0, "warnings alone pass: {}", stdout(&o));
    let o = stackgate(
        &["--fail-on", "warning", warned.to_str().unwrap_or_default()],
        None,
    );
    assert_eq!(code(&o), 1, "--fail-on warning: {}", stdout(&o));
    // Usage errors.
    assert_eq!(
        code(&stackgate(&["--values-for", "no-equals-sign", REPO], None)),
        2
    );
    assert_eq!(code(&stackgate(&["--format", "xml", REPO], None)), 2);
    let o = stackgate(&["does/not/exist.yaml"], None);
    assert_eq!(code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("does/not/exist.yaml"));
}

#[test]
fn input_errors_exit_2_with_position_and_no_content() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Secret\nstringData:\n  password: [hunter2-secret\n",
    )
    .expect("write");
    let dup = dir.path().join("dup.yaml");
    std::fs::write(
        &dup,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: hunter3-secret, a: y}\n",
    )
    .expect("write");
    let binary = dir.path().join("bin.yaml");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).expect("write");
    for (file, line) in [(&bad, "4:13"), (&dup, "4:"), (&binary, "0:0")] {
        let o = stackgate(&[file.to_str().unwrap_or_default()], None);
        assert_eq!(code(&o), 2, "{}", stdout(&o));
        let out = stdout(&o);
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        assert!(out.contains(&format!("{name}:{line}")), "{out}");
        assert!(out.contains("error [input]"), "{out}");
        assert!(!out.contains("hunter"), "{out}");
    }
}

/// `kustomize build | stackgate check -`: a multi-document stream on standard input, with
/// lines counted in the stream.
#[test]
fn standard_input_stream() {
    let helmchart = std::fs::read_to_string(repo("rke2/occm-helmchart.yaml")).expect("fixture");
    let object = std::fs::read_to_string(repo("argocd/occm-values-object.yaml")).expect("fixture");
    let stream = format!("{object}---\n{helmchart}");
    let o = stackgate(&["-", "--format", "json"], Some(&stream));
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let denial = v["results"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["level"] == "error"))
        .expect("a denial")
        .clone();
    assert_eq!(denial["file"], "<stdin>");
    let line = denial["line"].as_u64().expect("line") as usize;
    assert_eq!(
        stream.lines().nth(line - 1).map(str::trim),
        Some("provider-requires-serial-api-calls: \"false\"")
    );
    assert_eq!(v["summary"]["objects"], 2);
}

/// `--fix` inserts exactly one line per missing key, changes nothing else, and a second run
/// finds nothing more to fix.
#[test]
fn fix_is_minimal_and_idempotent() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(REPO),
        dir.path(),
    );
    let root = dir.path().to_str().unwrap_or_default();
    let o = stackgate(&["--values-for", VALUES_FOR, "--fix", root], None);
    assert_eq!(code(&o), 1, "denials remain after fixing: {}", stdout(&o));
    assert!(stdout(&o).contains("fixed 4 files"), "{}", stdout(&o));
    for rel in [
        "argocd/occm-values-string.yaml",
        "clusters/customer-b/occm-values.yaml",
        "flux/occm-helmrelease.yaml",
        "manifests/cloud-config.yaml",
    ] {
        let before = std::fs::read_to_string(repo(rel)).expect("original");
        let after = std::fs::read_to_string(dir.path().join(rel)).expect("fixed");
        let diff = similar::TextDiff::from_lines(&before, &after);
        let mut inserted = Vec::new();
        for change in diff.iter_all_changes() {
            match change.tag() {
                similar::ChangeTag::Equal => {}
                similar::ChangeTag::Insert => inserted.push(change.value().trim().to_owned()),
                similar::ChangeTag::Delete => {
                    panic!("{rel}: a line was removed: {:?}", change.value())
                }
            }
        }
        assert_eq!(inserted.len(), 1, "{rel}: {inserted:?}");
        assert!(
            inserted[0].starts_with("provider-requires-serial-api-calls"),
            "{rel}: {inserted:?}"
        );
    }
    let unchanged = [
        "argocd/occm-values-object.yaml",
        "base/occm/values.yaml",
        "rke2/occm-helmchart.yaml",
    ];
    for rel in unchanged {
        assert_eq!(
            std::fs::read(repo(rel)).ok(),
            std::fs::read(dir.path().join(rel)).ok(),
            "{rel}"
        );
    }
    let snapshot: Vec<Vec<u8>> = ["flux/occm-helmrelease.yaml", "manifests/cloud-config.yaml"]
        .iter()
        .filter_map(|r| std::fs::read(dir.path().join(r)).ok())
        .collect();
    let o = stackgate(
        &[
            "--values-for",
            VALUES_FOR,
            "--fix",
            "--format",
            "json",
            root,
        ],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(v["summary"]["fixed"], 0, "{v}");
    assert_eq!(v["summary"]["warnings"], 0, "{v}");
    let again: Vec<Vec<u8>> = ["flux/occm-helmrelease.yaml", "manifests/cloud-config.yaml"]
        .iter()
        .filter_map(|r| std::fs::read(dir.path().join(r)).ok())
        .collect();
    assert_eq!(snapshot, again);
}

/// A HelmRelease written as JSON stays JSON after `--fix`.
#[test]
fn json_manifests_are_fixed_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("occm.json");
    let text = r#"{
  "apiVersion": "helm.toolkit.fluxcd.io/v2",
  "kind": "HelmRelease",
  "metadata": {"name": "occm", "namespace": "kube-system"},
  "spec": {
    "chart": {"spec": {"chart": "openstack-cloud-controller-manager"}},
    "values": {
      "cloudConfig": {"global": {"region": "RegionOne"}}
    }
  }
}
"#;
    std::fs::write(&file, text).expect("write");
    let o = stackgate(&["--fix", file.to_str().unwrap_or_default()], None);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let fixed = std::fs::read_to_string(&file).expect("fixed");
    let v: serde_json::Value = serde_json::from_str(&fixed).expect("still JSON");
    assert_eq!(
        v["spec"]["values"]["cloudConfig"]["loadBalancer"]["provider-requires-serial-api-calls"],
        true
    );
    assert_eq!(
        fixed.lines().count(),
        text.lines().count(),
        "one line changed:\n{fixed}"
    );
}

/// `--release-catalog FILE` replaces the policy set's release catalog; a file that is not a
/// valid catalog is a usage error.
#[test]
fn release_catalog_flag() {
    let catalog = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/release-catalog.yaml");
    let file = repo("argocd/occm-values-object.yaml");
    let o = stackgate(
        &[
            "--release-catalog",
            catalog.to_str().unwrap_or_default(),
            file.to_str().unwrap_or_default(),
        ],
        None,
    );
    assert_eq!(
        code(&o),
        0,
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("catalog.yaml");
    std::fs::write(&bad, "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\n").expect("write");
    let o = stackgate(
        &[
            "--release-catalog",
            bad.to_str().unwrap_or_default(),
            file.to_str().unwrap_or_default(),
        ],
        None,
    );
    assert_eq!(code(&o), 2);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--release-catalog"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
