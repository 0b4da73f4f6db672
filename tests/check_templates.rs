//! `stackgate check` over a repository with templates (a Helm chart, a Terraform `.tpl`, a
//! Jinja-like file) and `--exclude`: templates are one note each and exit code 0, a manifest
//! that parses with `${VAR}` strings is still checked, excluded paths are never read.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const TEMPLATE_RULE: &str = "template-skipped";

fn stackgate(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stackgate"));
    command
        .arg("check")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("STACKGATE_POLICIES")
        .env_remove("STACKGATE_CHECK_EXCLUDE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("stackgate runs");
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

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// A Helm chart template that is not YAML until rendered.
const HELM_NOT_YAML: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include \"x.fullname\" . }}
  labels:
    {{- include \"x.labels\" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicaCount }}
{{- if .Values.autoscaling.enabled }}
  strategy: {}
{{- end }}
";

/// A chart template that happens to parse as YAML.
const HELM_YAML: &str = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: x-config
data:
  replicas: \"{{ .Values.replicaCount }}\"
";

/// Terraform directives around part of a manifest: not YAML until rendered.
const TERRAFORM_NOT_YAML: &str = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: tf
%{ if enabled }
data:
  a: b
%{ endif }
";

/// A repository with a chart, templates, a Flux manifest with `${CLUSTER_NAME}`, a directory
/// named `templates` that is not in a chart, and a `vendor/` directory with a broken file.
fn repository(root: &Path) {
    write(
        root,
        "charts/x/Chart.yaml",
        "apiVersion: v2\nname: x\nversion: 0.1.0\n",
    );
    write(root, "charts/x/values.yaml", "replicaCount: 1\n");
    write(root, "charts/x/templates/deployment.yaml", HELM_NOT_YAML);
    write(root, "charts/x/templates/configmap.yaml", HELM_YAML);
    write(root, "infra/ccm.yaml", TERRAFORM_NOT_YAML);
    write(
        root,
        "docs/templates/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n",
    );
    let flux = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/gitops/repo/flux/occm-helmrelease.yaml"),
    )
    .expect("flux fixture");
    let flux = flux.replacen(
        "  namespace: kube-system\n",
        "  namespace: kube-system\n  labels:\n    cluster: \"${CLUSTER_NAME}\"\n",
        1,
    );
    assert!(flux.contains("${CLUSTER_NAME}"));
    write(root, "flux/cluster.yaml", &flux);
    write(root, "vendor/broken.yaml", "a: [unclosed\n");
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).expect("JSON report")
}

fn template_files(report: &Value) -> Vec<String> {
    let mut files: Vec<String> = report["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .filter(|s| s["rule"] == TEMPLATE_RULE)
        .map(|s| s["file"].as_str().unwrap_or_default().to_owned())
        .collect();
    files.sort();
    files
}

#[test]
fn templates_are_one_note_each_and_do_not_fail_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    repository(root);
    let root_s = root.to_str().expect("UTF-8 temp path");
    let shown = |rel: &str| format!("{root_s}/{rel}");

    // Without --exclude the broken vendored file is an input error; templates are not.
    let o = stackgate(&[root_s], &[], None);
    let text = stdout(&o);
    assert_eq!(code(&o), 2, "{text}");
    assert_eq!(text.matches("error [input]").count(), 1, "{text}");
    assert!(text.contains(&shown("vendor/broken.yaml")), "{text}");

    let o = stackgate(&["--exclude", "vendor/**", root_s], &[], None);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}");
    assert!(!text.contains("vendor"), "excluded, not read: {text}");
    assert!(!text.contains("error [input]"), "{text}");
    for rel in [
        "charts/x/templates/deployment.yaml",
        "charts/x/templates/configmap.yaml",
        "infra/ccm.yaml",
    ] {
        let line = format!("{}: note [{TEMPLATE_RULE}] skipped: template (", shown(rel));
        assert_eq!(text.matches(&line).count(), 1, "{rel} once: {text}");
    }
    assert!(
        text.contains("pipe `helm template …` or `kustomize build` into `stackgate check -`"),
        "{text}"
    );
    assert!(
        text.contains("in a Helm chart's templates/ directory"),
        "{text}"
    );
    assert!(text.contains("Terraform `%{ }`"), "{text}");
    assert!(!text.contains(".Values"), "no file content: {text}");
    assert!(!text.contains("endif"), "no file content: {text}");
    // `templates/` outside a chart, and the Flux file with `${CLUSTER_NAME}`, are checked.
    assert!(!text.contains(&format!(
        "{}: note [{TEMPLATE_RULE}]",
        shown("docs/templates/cm.yaml")
    )));
    assert!(
        text.contains(&format!("{}:", shown("flux/cluster.yaml")))
            && !text.contains(&format!(
                "{}: note [{TEMPLATE_RULE}]",
                shown("flux/cluster.yaml")
            )),
        "the Flux file is checked: {text}"
    );
    assert!(text.contains("3 skipped"), "{text}");

    // JSON.
    let o = stackgate(
        &["--exclude", "vendor/**", "--format", "json", root_s],
        &[],
        None,
    );
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let report = json(&o);
    assert_eq!(report["summary"]["exitCode"], 0);
    assert_eq!(report["summary"]["inputErrors"], 0);
    assert_eq!(report["summary"]["skipped"], 3);
    assert_eq!(
        template_files(&report),
        vec![
            shown("charts/x/templates/configmap.yaml"),
            shown("charts/x/templates/deployment.yaml"),
            shown("infra/ccm.yaml"),
        ]
    );
    let flux_results = report["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["file"] == shown("flux/cluster.yaml").as_str())
        .count();
    assert!(flux_results > 0, "the Flux file is checked: {report:#}");
    // --fail-on warning: the Flux file's findings fail the run; templates still do not.
    let o = stackgate(
        &["--exclude", "vendor/**", "--fail-on", "warning", root_s],
        &[],
        None,
    );
    assert_eq!(code(&o), 1, "{}", stdout(&o));

    // SARIF: a note-level result of the template rule per template, and the rule itself.
    let o = stackgate(
        &["--exclude", "vendor/**", "--format", "sarif", root_s],
        &[],
        None,
    );
    assert_eq!(code(&o), 0);
    let sarif = json(&o);
    let run = &sarif["runs"][0];
    let notes: Vec<&Value> = run["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["ruleId"] == TEMPLATE_RULE)
        .collect();
    assert_eq!(notes.len(), 3, "{sarif:#}");
    for n in &notes {
        assert_eq!(n["level"], "note");
        let message = n["message"]["text"].as_str().unwrap_or_default();
        assert!(message.starts_with("skipped: template ("), "{message}");
        let index = n["ruleIndex"].as_u64().expect("ruleIndex") as usize;
        assert_eq!(run["tool"]["driver"]["rules"][index]["id"], TEMPLATE_RULE);
    }

    // JUnit: a skipped test case per template.
    let o = stackgate(
        &["--exclude", "vendor/**", "--format", "junit", root_s],
        &[],
        None,
    );
    assert_eq!(code(&o), 0);
    let xml = stdout(&o);
    assert_eq!(
        xml.matches("name=\"template\">\n      <skipped message=\"skipped: template (")
            .count(),
        3,
        "{xml}"
    );

    // The environment variable takes a comma-separated list; a glob matching nothing is a
    // usage error (a typo must not silently change what is checked).
    let o = stackgate(
        &[root_s],
        &[("STACKGATE_CHECK_EXCLUDE", "nothing/**,vendor/**")],
        None,
    );
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--exclude \"nothing/**\" matches no file"),
        "{err}"
    );
    let o = stackgate(
        &[root_s],
        &[("STACKGATE_CHECK_EXCLUDE", "vendor/**,infra/**")],
        None,
    );
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    // A glob over the path as given (absolute) excludes too.
    let absolute = format!("{root_s}/vendor/*.yaml");
    let o = stackgate(&["--exclude", &absolute, root_s], &[], None);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

/// A Terraform template that is YAML with `${…}` markers only inside scalar values is read,
/// named or found walking (issue 33 item 7): a placeholder is an unknown value, the rest is
/// checked (here the HelmChart's values leave serial load-balancer calls unset).
#[test]
fn a_terraform_template_that_reads_as_yaml_is_checked_named_or_walked() {
    let tpl = "tests/fixtures/gitops/templates/os_ccm.yaml.tpl";
    let o = stackgate(&[tpl], &[], None);
    let text = stdout(&o);
    assert!(!text.contains(TEMPLATE_RULE), "{text}");
    assert!(
        text.contains("provider-requires-serial-api-calls"),
        "checked: {text}"
    );
    assert!(!text.contains("auth_url"), "no file content: {text}");
    let dir = tempfile::tempdir().expect("tempdir");
    let content = std::fs::read_to_string(tpl).expect("fixture");
    write(dir.path(), "infra/os_ccm.yaml.tpl", &content);
    let o = stackgate(&[dir.path().to_str().expect("UTF-8")], &[], None);
    let walked = stdout(&o);
    assert!(!walked.contains(TEMPLATE_RULE), "{walked}");
    assert!(
        walked.contains("provider-requires-serial-api-calls"),
        "checked: {walked}"
    );
    // A Go template (`{{ }}`) is not read, named or walked, but noted.
    let o = stackgate(&["-"], &[], Some(HELM_NOT_YAML));
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}");
    assert!(
        text.contains(&format!("<stdin>: note [{TEMPLATE_RULE}] skipped: template (does not parse as YAML and holds template markers: Helm/Go or Jinja `{{{{ }}}}`")),
        "{text}"
    );
}

/// A directory walk notes every template file it meets, whatever its extension (`*.tpl`,
/// `*.yaml.tpl`, `*.tmpl`, `*.j2`, `*.gotmpl`): in real repositories such a file may hold the
/// only cloud config, so skipping it in silence said "clean" about a tree nobody checked.
#[test]
fn a_walk_notes_every_template_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = [
        "infra/cloud.conf.tpl",
        "infra/values.yaml.tpl",
        "infra/secret.yaml.tmpl",
        "infra/occm.tmpl",
        "ansible/cloud.conf.j2",
        "helmfile/values.gotmpl",
    ];
    for rel in files {
        write(dir.path(), rel, HELM_NOT_YAML);
    }
    let root = dir.path().to_str().expect("UTF-8");
    let o = stackgate(&[root, "--format", "json"], &[], None);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let noted = template_files(&json(&o));
    for rel in files {
        assert!(
            noted.iter().any(|f| f.ends_with(rel)),
            "{rel} not noted: {noted:?}"
        );
    }
    assert_eq!(noted.len(), files.len(), "{noted:?}");
}

#[test]
fn an_excluded_file_named_on_the_command_line_is_reported_as_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "broken.yaml", "a: [unclosed\n");
    let path = dir.path().join("broken.yaml");
    let path = path.to_str().expect("UTF-8 temp path");
    let o = stackgate(&["--exclude", "*.yaml", path], &[], None);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}");
    assert!(
        text.contains(&format!(
            "{path}: note [skipped] excluded by --exclude \"*.yaml\"; not read"
        )),
        "{text}"
    );
    assert!(!text.contains("error [input]"), "{text}");
}

/// openstack-helm's values overrides hold `%%%REPLACE_…%%%` placeholders that its scripts
/// replace before use (lines as in vexxhost/atmosphere's
/// `charts/memcached/values_overrides/netpol.yaml`, see tests/fixtures/SOURCES.md): a note,
/// not an input error. Without a marker the same broken YAML stays an input error.
#[test]
fn openstack_helm_placeholders_are_template_markers() {
    const OVERRIDE: &str = "\
manifests:
  network_policy: true
network_policy:
  memcached:
    egress:
      - to:
        - ipBlock:
            cidr: %%%REPLACE_API_ADDR%%%/32
        ports:
          - protocol: TCP
            port: %%%REPLACE_API_PORT%%%
";
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "values_overrides/netpol.yaml", OVERRIDE);
    let o = stackgate(&[dir.path().to_str().expect("UTF-8")], &[], None);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}");
    assert!(
        text.contains(&format!(
            "netpol.yaml: note [{TEMPLATE_RULE}] skipped: template (does not parse as YAML and holds template markers: `%%%NAME%%%` placeholder)"
        )),
        "{text}"
    );
    assert!(!text.contains("error [input]"), "{text}");

    let broken = OVERRIDE.replace("%%%", "%");
    write(dir.path(), "values_overrides/netpol.yaml", &broken);
    let o = stackgate(&[dir.path().to_str().expect("UTF-8")], &[], None);
    let text = stdout(&o);
    assert_eq!(code(&o), 2, "{text}");
    assert!(text.contains("netpol.yaml:8:19: error [input]"), "{text}");
}

/// A manifest that parses is checked as written even when its cloud config is a Go template
/// (Sveltos, Helm-in-a-Secret): it gets a note that the template's values are not known, and
/// a value that is only a marker is an unknown value, not one the CCM would refuse.
#[test]
fn a_go_templated_secret_holding_a_cloud_config_gets_a_note() {
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                  namespace: kube-system\n  annotations:\n    projectsveltos.io/template: \"true\"\n\
                  stringData:\n  cloud.conf: |\n    [Global]\n    auth-url = {{ .Cluster.spec.authURL }}\n    \
                  [LoadBalancer]\n    provider-requires-serial-api-calls = true\n    \
                  create-monitor = {{ .Values.monitor }}\n";
    let o = stackgate(&["-", "--format", "json"], &[], Some(secret));
    let report = json(&o);
    let results = report["results"].as_array().expect("results");
    let text = serde_json::to_string(results).expect("JSON");
    assert!(
        results
            .iter()
            .any(|r| r["code"] == "cloud-config-integrity/template-markers"
                && r["level"] == "warning"
                && r["message"].as_str().is_some_and(|m| m.contains("2 lines"))),
        "{text}"
    );
    // `create-monitor = {{ … }}` is not a bool as written: an unknown value, not a denial.
    assert!(
        !results.iter().any(|r| r["level"] == "error"),
        "a marker is an unknown value: {text}"
    );
    assert_eq!(code(&o), 0, "{text}");
    assert!(!text.contains(".Values.monitor"), "no file content: {text}");
}
