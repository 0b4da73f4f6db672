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
    // A repeated key is not an input error: Helm and kubectl keep the last one (go-yaml v2's
    // non-strict Unmarshal), and so does stackgate; the value is never shown either way.
    let o = stackgate(&[dup.to_str().unwrap_or_default()], None);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    assert!(!stdout(&o).contains("hunter"), "{}", stdout(&o));
    for (file, line) in [(&bad, "4:13"), (&binary, "0:0")] {
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
    assert!(stdout(&o).contains("fixed 5 files"), "{}", stdout(&o));
    for rel in [
        "argocd/occm-multi-source.yaml",
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
    // What remains is not fixable: the one warning is ccm-concurrency's (warn by default).
    assert_eq!(v["summary"]["warnings"], 1, "{v}");
    let warned: Vec<&str> = v["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["kind"] == "warning")
        .filter_map(|f| f["policy"].as_str())
        .collect();
    assert_eq!(warned, ["ccm-concurrency"], "{v}");
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

// ---------------------------------------------------------------------------------------
// `stackgate policies`

/// Runs `stackgate <args>` (no subcommand prepended) with `STACKGATE_POLICIES` unset unless
/// `policies_env` is given.
fn stackgate_raw(args: &[&str], policies_env: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stackgate"));
    command
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("STACKGATE_POLICIES")
        .stdin(Stdio::null());
    if let Some(dir) = policies_env {
        command.env("STACKGATE_POLICIES", dir);
    }
    command.output().expect("stackgate runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn policies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("policies")
}

/// The `*.yaml` files of `dir`, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    files.sort();
    files
}

/// A top-level `key: value` of a policy file (the files are flat at the top level).
fn top_level(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .map(|v| v.trim().to_owned())
}

/// The `(kind, name)` of every document a file holds; `name` is empty for the kinds that
/// have none (CloudConfigSites, ReleaseCatalog).
fn file_identity(path: &Path) -> (String, String) {
    let text = std::fs::read_to_string(path).expect("policy file");
    let kind = top_level(&text, "kind").unwrap_or_else(|| panic!("{}: no kind", path.display()));
    let name = if kind == "Policy" {
        top_level(&text, "name").unwrap_or_else(|| panic!("{}: no name", path.display()))
    } else {
        String::new()
    };
    (kind, name)
}

/// Splits `stackgate policies` output into its header line and documents (JSON, which is
/// YAML).
fn printed_documents(out: &str) -> (String, Vec<serde_json::Value>) {
    let (header, rest) = out.split_once('\n').expect("a header line");
    let docs = rest
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect();
    (header.to_owned(), docs)
}

fn identities(docs: &[serde_json::Value]) -> Vec<(String, String)> {
    let mut ids: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_owned(),
                d["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    ids.sort();
    ids
}

/// Without `--policies` the embedded set is printed, and it is exactly what `policies/`
/// holds: one document per file, every Policy under its file's name.
#[test]
fn policies_prints_the_embedded_set_and_every_file_of_the_policies_dir() {
    let o = stackgate_raw(&["policies"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let (header, docs) = printed_documents(&stdout(&o));
    assert_eq!(header, "# effective policy set (embedded)");

    let files = yaml_files(&policies_dir());
    assert!(!files.is_empty());
    let mut expected: Vec<(String, String)> = files.iter().map(|f| file_identity(f)).collect();
    expected.sort();
    assert_eq!(
        identities(&docs),
        expected,
        "printed documents vs policies/"
    );
    for file in &files {
        let (kind, name) = file_identity(file);
        if kind == "Policy" {
            let stem = file
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            assert_eq!(
                name,
                stem,
                "{}: a policy lives in <name>.yaml",
                file.display()
            );
            let doc = docs
                .iter()
                .find(|d| d["name"] == name.as_str())
                .expect("printed");
            let text = std::fs::read_to_string(file).expect("policy file");
            for key in ["rule", "mode"] {
                assert_eq!(
                    doc[key].as_str().map(str::to_owned),
                    top_level(&text, key),
                    "{}: {key}",
                    file.display()
                );
            }
        }
    }
    // The embedded sites list is the one in policies/cloud-config-sites.yaml.
    let sites = docs
        .iter()
        .find(|d| d["kind"] == "CloudConfigSites")
        .expect("sites printed");
    let names: Vec<&str> = sites["sites"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["cloud-config", "cloud-provider-config", "cloud-conf"]
    );
}

/// `--policies DIR` (or `STACKGATE_POLICIES`) replaces the embedded set: a copy of
/// `policies/` with one policy changed prints the change, and a directory holding only that
/// policy prints only it (with the embedded sites and release catalog as defaults).
#[test]
fn policies_with_a_directory_prints_that_set_instead() {
    let embedded = stackgate_raw(&["policies"], None);
    let (_, embedded_docs) = printed_documents(&stdout(&embedded));

    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&policies_dir(), dir.path());
    let serial = dir.path().join("serial-lb-api-calls.yaml");
    let text = std::fs::read_to_string(&serial).expect("copied");
    assert!(text.contains("\nmode: enforce\n"));
    std::fs::write(&serial, text.replace("\nmode: enforce\n", "\nmode: warn\n")).expect("write");
    let root = dir.path().to_str().unwrap_or_default();

    let flag = stackgate_raw(&["policies", "--policies", root], None);
    let env = stackgate_raw(&["policies"], Some(dir.path()));
    for (how, o) in [("--policies", &flag), ("STACKGATE_POLICIES", &env)] {
        assert_eq!(code(o), 0, "{how}: {}", stderr(o));
        let (header, docs) = printed_documents(&stdout(o));
        assert_eq!(header, format!("# effective policy set ({root})"), "{how}");
        assert_eq!(docs.len(), embedded_docs.len(), "{how}");
        // Same documents (the embedded set keeps its own order, a directory is read in
        // file-name order).
        assert_eq!(identities(&docs), identities(&embedded_docs), "{how}");
        for printed in &docs {
            let default = embedded_docs
                .iter()
                .find(|d| d["kind"] == printed["kind"] && d["name"] == printed["name"])
                .expect("same identities");
            if printed["name"] == "serial-lb-api-calls" {
                assert_eq!(printed["mode"], "warn", "{how}");
                let mut changed = printed.clone();
                changed["mode"] = "enforce".into();
                assert_eq!(&changed, default, "{how}: only the mode changed");
            } else {
                assert_eq!(printed, default, "{how}");
            }
        }
    }

    // Only the changed policy in the directory: only it is printed.
    let single = tempfile::tempdir().expect("tempdir");
    std::fs::copy(&serial, single.path().join("serial-lb-api-calls.yaml")).expect("copy");
    let root = single.path().to_str().unwrap_or_default();
    let o = stackgate_raw(&["policies", "--policies", root], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let (header, docs) = printed_documents(&stdout(&o));
    assert_eq!(header, format!("# effective policy set ({root})"));
    let policies: Vec<&serde_json::Value> = docs.iter().filter(|d| d["kind"] == "Policy").collect();
    assert_eq!(policies.len(), 1, "{docs:#?}");
    assert_eq!(policies[0]["name"], "serial-lb-api-calls");
    assert_eq!(policies[0]["mode"], "warn");
    for kind in ["CloudConfigSites", "ReleaseCatalog"] {
        assert_eq!(
            docs.iter().find(|d| d["kind"] == kind),
            embedded_docs.iter().find(|d| d["kind"] == kind),
            "{kind} falls back to the embedded default"
        );
    }
}

/// A policy file the loader rejects: non-zero exit, nothing printed on stdout, and an error
/// that names the file and the line (and column) to fix, for each kind of mistake.
#[test]
fn policies_with_a_bad_file_fails_naming_file_and_line() {
    let original = std::fs::read_to_string(policies_dir().join("serial-lb-api-calls.yaml"))
        .expect("policy file");
    let lines = original.lines().count();
    let mode_line = original
        .lines()
        .position(|l| l == "mode: enforce")
        .expect("mode line")
        + 1;
    // (case, file text, the error mentions)
    let cases: Vec<(&str, String, Vec<String>)> = vec![
        (
            "unknown field",
            format!("{original}bogus: 1\n"),
            vec![format!("line {} column 1", lines + 1), "bogus".to_owned()],
        ),
        (
            "unknown mode",
            original.replace("mode: enforce", "mode: loud"),
            vec![format!("line {mode_line} column"), "loud".to_owned()],
        ),
        (
            "YAML syntax",
            "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\nname: [x\n".to_owned(),
            vec!["line 3 column".to_owned()],
        ),
    ];
    for (case, text, mentions) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        copy_dir(&policies_dir(), dir.path());
        let file = dir.path().join("serial-lb-api-calls.yaml");
        std::fs::write(&file, text).expect("write");
        let o = stackgate_raw(
            &[
                "policies",
                "--policies",
                dir.path().to_str().unwrap_or_default(),
            ],
            None,
        );
        assert_ne!(code(&o), 0, "{case}: {}", stdout(&o));
        assert!(stdout(&o).is_empty(), "{case}: printed {}", stdout(&o));
        let err = stderr(&o);
        let named = format!("{}: line ", file.display());
        assert!(err.contains(&named), "{case}: {named:?} not in {err}");
        for m in &mentions {
            assert!(err.contains(m.as_str()), "{case}: {m:?} not in {err}");
        }
    }
}

/// A Secret whose `data` is base64 wrapped at 76 columns (the `base64` tool's default, which
/// kubectl and the apiserver accept, as Go's decoder skips `\r` and `\n`) is read like any
/// other; other whitespace is refused, as the apiserver refuses it.
#[test]
fn wrapped_base64_secret_data_is_accepted_like_the_apiserver_does() {
    use base64::Engine as _;
    let config = "[Global]\nauth-url=https://keystone.example.test:5000/v3\nregion=RegionOne\n\n[LoadBalancer]\nsubnet-id=9c018814-f2a8-45dd-9679-5400d49b333a\nfloating-network-id=80c9fc78-a2be-45d5-a85b-f17a6c98df92\nlb-provider=amphora\n";
    let encoded = base64::engine::general_purpose::STANDARD.encode(config);
    let wrapped: Vec<String> = encoded
        .as_bytes()
        .chunks(76)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    assert!(wrapped.len() > 2, "the data spans several lines");
    let secret = |data: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\ndata:\n  cloud.conf: {data}\n"
        )
    };
    // `|` keeps the newlines; a double-quoted scalar with `\r\n` escapes as Windows would.
    let block = format!("|\n    {}\n", wrapped.join("\n    "));
    let crlf = format!("\"{}\"", wrapped.join("\\r\\n"));
    for data in [block, crlf] {
        let o = stackgate(&["-", "--format", "json"], Some(&secret(&data)));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
        assert_eq!(code(&o), 0, "{v}");
        assert_eq!(v["summary"]["inputErrors"], 0, "{v}");
        assert!(!stdout(&o).contains("base64"), "{v}");
        let rules: Vec<&str> = v["results"]
            .as_array()
            .expect("results")
            .iter()
            .filter_map(|r| r["rule"].as_str())
            .collect();
        assert!(
            rules.contains(&"serial-lb-api-calls"),
            "the decoded config was evaluated: {v}"
        );
    }
    // A space inside the data is not base64 for Go either.
    let spaced = format!("\"{}\"", wrapped.join(" "));
    let o = stackgate(&["-"], Some(&secret(&spaced)));
    assert!(stdout(&o).contains("not valid base64"), "{}", stdout(&o));
}

/// An unreadable path is named with the words `ls` uses, not Rust's `ErrorKind` names
/// ("entity not found"), and is an input error (exit 2).
#[test]
fn an_unreadable_path_says_why_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("clusters");
    let o = stackgate(&[missing.to_str().unwrap()], None);
    assert_eq!(code(&o), 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "cannot read {}: no such file or directory",
            missing.display()
        )),
        "{err}"
    );
    assert!(!err.contains("entity not found"), "{err}");
    // A file whose bytes are not UTF-8 text, inside a walked directory.
    std::fs::write(dir.path().join("bad.yaml"), [0xff, 0xfe, b'a', b'\n']).unwrap();
    let o = stackgate(&[dir.path().to_str().unwrap()], None);
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    assert!(
        stdout(&o).contains("bad.yaml:0:0: error [input] not UTF-8 text"),
        "{}",
        stdout(&o)
    );
}
