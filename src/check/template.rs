//! Template files (Helm/Go, Jinja, Terraform) that `stackgate check` meets in a repository.
//!
//! A template is not a manifest: its YAML (if it parses at all) is not what reaches the
//! cluster, so checking it gives parser noise or findings about text that rendering replaces.
//! Such a file is reported once, as a note, and does not fail the run; the note says how to
//! check the rendered manifests instead.
//!
//! Which files are templates, and why the rules differ:
//! - by path, always (even when the text parses as YAML): a name ending in a template
//!   extension (`.tpl`, `.tmpl`, `.j2`, `.jinja`, `.gotmpl`), or a file below a Helm chart's
//!   `templates/` directory (a directory named `templates` whose parent holds `Chart.yaml`);
//! - by content, only when the text does not parse as YAML: template markers (`{{ }}`,
//!   `{% %}`, `%{ }`, `${ }`, openstack-helm's `%%%NAME%%%`). A manifest that parses keeps
//!   being checked even when a string in it holds `${VAR}` (Flux `postBuild` substitution,
//!   clusterctl variables): those files are applied as they are, apart from the substituted
//!   strings. A template file by name that parses with only `${ }` markers (a Terraform
//!   `templatefile`) is read too ([`input_template_reason`]).

use std::path::Path;

/// File name endings of template files.
/// File name endings of template files; a directory walk reads files with these to note each
/// (a `values.yaml.tpl` or `cloud.conf.tmpl` may hold a repository's only cloud config).
pub const TEMPLATE_EXTENSIONS: &[&str] = &["tpl", "tmpl", "j2", "jinja", "gotmpl"];

/// A template marker: the syntax it belongs to, and its opening and closing text.
struct Marker {
    name: &'static str,
    open: &'static str,
    close: &'static str,
}

/// The markers looked for, in the order the note names them.
const MARKERS: &[Marker] = &[
    Marker {
        name: "Helm/Go or Jinja `{{ }}`",
        open: "{{",
        close: "}}",
    },
    Marker {
        name: "Jinja `{% %}`",
        open: "{%",
        close: "%}",
    },
    Marker {
        name: "Terraform `%{ }`",
        open: "%{",
        close: "}",
    },
    Marker {
        name: INTERPOLATION,
        open: "${",
        close: "}",
    },
    // openstack-helm's values overrides (`values_overrides/*.yaml`) hold placeholders such as
    // `%%%REPLACE_API_ADDR%%%` that its deployment scripts replace with `sed` before use; a
    // `%` cannot start a plain YAML scalar, so such a file does not parse until then.
    Marker {
        name: "`%%%NAME%%%` placeholder",
        open: "%%%",
        close: "%%%",
    },
];

/// The marker of Terraform's (and envsubst's) `${…}` interpolation: it stands for a value
/// inside a scalar, never for structure (`%{ }` directives are another marker).
const INTERPOLATION: &str = "`${ }` interpolation";

/// Why a file is taken for a template, for the note.
pub fn template_reason(path: Option<&Path>, text: &str) -> Option<String> {
    let by_path = path.and_then(path_reason);
    let markers = markers_in(text);
    match by_path {
        Some(reason) if markers.is_empty() => Some(reason),
        Some(reason) => Some(format!("{reason}; markers: {}", markers.join(", "))),
        // A file that parses is checked whatever strings it holds; see the module docs.
        None if !markers.is_empty() && !reads_as_yaml_data(text) => Some(format!(
            "does not parse as YAML and holds template markers: {}",
            markers.join(", ")
        )),
        None => None,
    }
}

/// Whether `text` reads as YAML data, as kubectl would take it: it parses, and every document
/// converts to JSON. The second half matters for placeholders such as `- {{ url }}`, which parse
/// as a flow mapping used as a key and only fail when converted (go-yaml rejects them too).
fn reads_as_yaml_data(text: &str) -> bool {
    crate::yaml::parse_stream(text)
        .is_ok_and(|docs| docs.iter().all(|doc| doc.root.to_json().is_ok()))
}

/// [`template_reason`] for an input of a run: a file named on the command line (`named`) that
/// reads as YAML data and holds no template marker is what the user asked to check, whatever
/// its name or place says (a `values.yaml.tpl` that is plain YAML); a template that reads as
/// YAML data with only `${…}` markers (a Terraform `templatefile`) is read, named or walked:
/// the markers are inside its scalars, and a placeholder is an unknown value; `ini`: the file is read as
/// an INI cloud config (named `.conf`/`.ini`, or matched by `--ini`), where `${NAME}`
/// placeholders are unknown values ([`crate::cloudconf::schema::holds_placeholder`]), not
/// template syntax, so only a template name keeps it unread.
pub fn input_template_reason(
    path: Option<&Path>,
    text: &str,
    named: bool,
    ini: bool,
) -> Option<String> {
    if ini {
        return path.and_then(path_reason).filter(|_| !named);
    }
    let reason = template_reason(path, text)?;
    let markers = markers_in(text);
    let interpolation_only = !markers.is_empty() && markers.iter().all(|m| *m == INTERPOLATION);
    let read = (named && markers.is_empty() || interpolation_only) && reads_as_yaml_data(text);
    (!read).then_some(reason)
}

/// The note for a skipped template. Names markers and paths only, never file content.
pub fn template_note(reason: &str) -> String {
    format!(
        "skipped: template ({reason}); stackgate checks rendered manifests: pipe `helm template …` or `kustomize build` into `stackgate check -`"
    )
}

/// Why `path` is a template by its name or place, if it is.
fn path_reason(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_string_lossy();
    if let Some((_, ext)) = name.rsplit_once('.')
        && TEMPLATE_EXTENSIONS
            .iter()
            .any(|x| x.eq_ignore_ascii_case(ext))
    {
        return Some(format!("a .{} file", ext.to_ascii_lowercase()));
    }
    let in_chart_templates = path.ancestors().skip(1).any(|dir| {
        dir.file_name().is_some_and(|n| n == "templates")
            && dir
                .parent()
                .is_some_and(|chart| chart.join("Chart.yaml").is_file())
    });
    in_chart_templates.then(|| "in a Helm chart's templates/ directory".to_owned())
}

/// The names of the markers found in `text`: an opening followed, on the same line, by its
/// closing. Linear in the text: only the first opening of a line is looked at, because a
/// closing after any later opening is also after the first one.
fn markers_in(text: &str) -> Vec<&'static str> {
    MARKERS
        .iter()
        .filter(|m| {
            text.lines().any(|line| {
                line.find(m.open)
                    .is_some_and(|i| line[i + m.open.len()..].contains(m.close))
            })
        })
        .map(|m| m.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_found_only_when_closed_on_the_line() {
        assert_eq!(
            markers_in("image: {{ .Values.image }}"),
            vec!["Helm/Go or Jinja `{{ }}`"]
        );
        assert_eq!(
            markers_in("%{ if x }\na: 1\n%{ endif }"),
            vec!["Terraform `%{ }`"]
        );
        assert_eq!(markers_in("{% if a %}"), vec!["Jinja `{% %}`"]);
        assert_eq!(
            markers_in("cidr: %%%REPLACE_API_ADDR%%%/32"),
            vec!["`%%%NAME%%%` placeholder"]
        );
        assert!(markers_in("a: '100%%%'").is_empty());
        assert!(markers_in("a: '{{'\nb: }}").is_empty());
        assert!(markers_in("a: {b: 1}").is_empty());
    }

    #[test]
    fn a_long_line_of_openings_is_scanned_in_linear_time() {
        let line = "{{".repeat(4 * 1024 * 1024);
        let started = std::time::Instant::now();
        assert!(markers_in(&line).is_empty());
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn a_template_by_name_names_its_markers_only_when_it_has_some() {
        let path = Path::new("values.yaml.tpl");
        assert_eq!(
            template_reason(Some(path), "a: 1\n").as_deref(),
            Some("a .tpl file")
        );
        assert_eq!(
            template_reason(Some(path), "a: {{ .Values.a }}\n").as_deref(),
            Some("a .tpl file; markers: Helm/Go or Jinja `{{ }}`")
        );
    }

    #[test]
    fn a_plain_yaml_template_is_read_when_named_and_skipped_when_walked() {
        let path = Path::new("values.yaml.tpl");
        assert_eq!(
            input_template_reason(Some(path), "a: 1\n", true, false),
            None
        );
        assert_eq!(
            input_template_reason(Some(path), "a: 1\n", false, false).as_deref(),
            Some("a .tpl file")
        );
        // Only `${…}` inside scalars: read, named or walked.
        let terraform = "a: ${A}\n";
        assert_eq!(
            input_template_reason(Some(path), terraform, false, false),
            None
        );
    }

    #[test]
    fn an_ini_template_is_read_when_named_and_skipped_when_walked() {
        let path = Path::new("cloud.conf.tpl");
        let text = "[Global]\nauth-url = ${AUTH_URL}\n";
        assert_eq!(input_template_reason(Some(path), text, true, true), None);
        assert_eq!(
            input_template_reason(Some(path), text, false, true).as_deref(),
            Some("a .tpl file")
        );
        assert_eq!(
            input_template_reason(Some(Path::new("cloud.conf")), text, false, true),
            None
        );
    }

    #[test]
    fn a_parsing_file_with_variables_is_not_a_template() {
        assert_eq!(
            template_reason(None, "metadata:\n  name: ${CLUSTER_NAME}-occm\n"),
            None
        );
        assert!(template_reason(None, "a: 1\n{{- if .Values.x }}\nb: 2\n{{- end }}\n").is_some());
        // Parses (a flow mapping as a key) but is not YAML data: a Jinja placeholder in a list,
        // as in cloud-provider-openstack's examples/webhook/keystone-deployment.yaml.
        assert!(
            template_reason(
                None,
                "args:\n  - --keystone-url\n  - {{ keystone_server_url }}\n"
            )
            .is_some()
        );
        assert!(template_reason(Some(Path::new("x/os_ccm.yaml.tpl")), "a: 1\n").is_some());
        assert_eq!(template_reason(Some(Path::new("x/a.yaml")), "a: 1\n"), None);
    }
}
