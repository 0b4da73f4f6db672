//! How a controller resolves the values a delivery names but does not hold, in the
//! controller's order, as pure functions over what a face can look in ([`Inputs`]): the
//! registry ([`super::delivery`]) says where such values are named; this says which ones a
//! release reads and in what order. `stackgate check` implements [`Inputs`] over the files of
//! its run (`check/index.rs`) and builds its merged object and located layers from the answer.
//!
//! Argo CD Application value files (argoproj/argo-cd `reposerver/repository/repository.go`,
//! `getHelmRepoAndValueFiles` / `helmTemplate`): each source's `helm.valueFiles` in list order,
//! a file relative to the source's `path` or, as `$ref/…`, to the root of the source whose
//! `ref` it names; then `helm.valuesObject` when set, else the `helm.values` string, on top.

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

use crate::yaml;

/// What a face can look in to resolve values a delivery names.
pub trait Inputs {
    /// The one input whose path ends with `suffix` (a normalised relative path): its name and
    /// text. None when no input, or more than one, does: which file the controller reads
    /// cannot then be told.
    fn file(&self, suffix: &Path) -> Option<(&str, &str)>;
}

/// One value file of an Argo CD source, as named and as resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueFile<'a> {
    /// The file as the source names it (`values-prod.yaml`, `$values/occm/values.yaml`).
    pub file: &'a str,
    /// The input it is, with its values (an empty file is an empty map); None when it is not
    /// one input of the run or its values are not a map.
    pub found: Option<FoundFile<'a>>,
}

/// The input a value file resolved to.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundFile<'a> {
    /// The input's name.
    pub name: &'a str,
    /// The input's text.
    pub text: &'a str,
    /// Its values.
    pub values: Value,
}

/// The value files of one Argo CD source, in the order Argo CD hands them to Helm.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgoSourceFiles<'a> {
    /// JSON pointer of the source (`/spec/source`, `/spec/sources/0`).
    pub pointer: String,
    /// Its `helm.valueFiles`, in order (never empty).
    pub files: Vec<ValueFile<'a>>,
}

/// The sources of an Argo CD Application that name value files, each file resolved from
/// `inputs`.
pub fn argo_value_files<'a>(
    object: &'a Value,
    inputs: &'a impl Inputs,
) -> Vec<ArgoSourceFiles<'a>> {
    argo_sources(object)
        .into_iter()
        .filter_map(|(pointer, source)| {
            let files: Vec<ValueFile<'a>> = value_files(source)
                .map(|file| ValueFile {
                    file,
                    found: value_file_suffix(source, file)
                        .and_then(|suffix| inputs.file(&suffix))
                        .and_then(|(name, text)| {
                            let values = match yaml::parse_one(text).and_then(|n| n.to_json()) {
                                Ok(Value::Null) => Value::Object(Map::new()),
                                Ok(v @ Value::Object(_)) => v,
                                _ => return None,
                            };
                            Some(FoundFile { name, text, values })
                        }),
                })
                .collect();
            (!files.is_empty()).then_some(ArgoSourceFiles { pointer, files })
        })
        .collect()
}

/// The values Argo CD passes after a source's value files: `valuesObject` when set, else the
/// `values` string parsed; `Null` when neither is set. None when the string is not YAML.
pub fn argo_values_over_files(helm: &Map<String, Value>) -> Option<Value> {
    match (helm.get("valuesObject"), helm.get("values")) {
        (Some(o), _) if !o.is_null() => Some(o.clone()),
        (_, Some(Value::String(t))) => yaml::parse_one(t).and_then(|n| n.to_json()).ok(),
        _ => Some(Value::Null),
    }
}

/// The sources of an Argo CD Application, with their JSON pointers (`/spec/source`,
/// `/spec/sources/0`).
pub fn argo_sources(object: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    if let Some(source) = object.pointer("/spec/source").filter(|s| s.is_object()) {
        out.push(("/spec/source".to_owned(), source));
    }
    if let Some(list) = object.pointer("/spec/sources").and_then(Value::as_array) {
        out.extend(
            list.iter()
                .enumerate()
                .map(|(i, s)| (format!("/spec/sources/{i}"), s)),
        );
    }
    out
}

/// A source's `helm.valueFiles`.
pub fn value_files(source: &Value) -> impl Iterator<Item = &str> {
    source
        .pointer("/helm/valueFiles")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The path suffix a value file has in the repository: relative to the source's `path` (a Git
/// source), or after the `$ref/` of a multi-source reference (the referenced repository's
/// root). None for a file inside a packaged chart or at a URL, which no input can be.
pub fn value_file_suffix(source: &Value, file: &str) -> Option<PathBuf> {
    if file.contains("://") {
        return None;
    }
    let suffix = match file.strip_prefix('$') {
        Some(reference) => normalize(Path::new(reference.split_once('/')?.1)),
        None => {
            let base = source.get("path").and_then(Value::as_str)?;
            normalize(&Path::new(base).join(file))
        }
    };
    (!suffix.as_os_str().is_empty() && !suffix.starts_with("..")).then_some(suffix)
}

/// `path` without `.` components and with `..` applied, lexically (the inputs were found by
/// walking, so both sides are spelled the same way).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A value file as named, and the input it resolved to.
    type FileShape<'a> = (&'a str, Option<&'a str>);

    /// Inputs by path: the one whose path ends with the suffix.
    struct Files(Vec<(&'static str, &'static str)>);

    impl Inputs for Files {
        fn file(&self, suffix: &Path) -> Option<(&str, &str)> {
            let mut found = self
                .0
                .iter()
                .filter(|(p, _)| Path::new(p).ends_with(suffix));
            let (path, text) = found.next()?;
            found.next().is_none().then_some((*path, *text))
        }
    }

    #[test]
    fn argo_value_files_resolve_by_source_path_and_ref_in_order() {
        let inputs = Files(vec![
            (
                "repo/occm/values.yaml",
                "cloudConfig: {global: {region: A}}\n",
            ),
            ("repo/occm/empty.yaml", ""),
            ("repo/occm/list.yaml", "- 1\n"),
            (
                "config/prod/values.yaml",
                "cloudConfig: {global: {region: B}}\n",
            ),
        ]);
        let app = json!({"spec": {
            "source": {"path": "occm/./chart/..", "helm": {"valueFiles": [
                "values.yaml", "empty.yaml", "list.yaml", "missing.yaml", "https://x/v.yaml"]}},
            "sources": [
                {"chart": "c", "helm": {"valueFiles": ["$values/prod/values.yaml"]}},
                {"ref": "values", "repoURL": "https://example.org/config"},
            ],
        }});
        let sources = argo_value_files(&app, &inputs);
        let shape: Vec<(&str, Vec<FileShape<'_>>)> = sources
            .iter()
            .map(|s| {
                let files = s
                    .files
                    .iter()
                    .map(|f| (f.file, f.found.as_ref().map(|x| x.name)));
                (s.pointer.as_str(), files.collect())
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (
                    "/spec/source",
                    vec![
                        ("values.yaml", Some("repo/occm/values.yaml")),
                        ("empty.yaml", Some("repo/occm/empty.yaml")),
                        // Not a map: not values Helm merges.
                        ("list.yaml", None),
                        ("missing.yaml", None),
                        ("https://x/v.yaml", None),
                    ]
                ),
                (
                    "/spec/sources/0",
                    vec![("$values/prod/values.yaml", Some("config/prod/values.yaml"))]
                ),
            ]
        );
        let found = |source: usize, file: usize| {
            sources[source].files[file]
                .found
                .as_ref()
                .map(|f| f.values.clone())
        };
        assert_eq!(
            found(0, 0),
            Some(json!({"cloudConfig": {"global": {"region": "A"}}}))
        );
        assert_eq!(found(0, 1), Some(json!({})));
        assert_eq!(
            found(1, 0),
            Some(json!({"cloudConfig": {"global": {"region": "B"}}}))
        );
    }

    #[test]
    fn argo_values_over_files_prefer_the_object_to_the_string() {
        let helm = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert_eq!(
            argo_values_over_files(&helm(json!({"valuesObject": {"a": 1}, "values": "a: 2"}))),
            Some(json!({"a": 1}))
        );
        assert_eq!(
            argo_values_over_files(&helm(json!({"valuesObject": null, "values": "a: 2"}))),
            Some(json!({"a": 2}))
        );
        assert_eq!(argo_values_over_files(&helm(json!({}))), Some(Value::Null));
        assert_eq!(
            argo_values_over_files(&helm(json!({"values": "a: [1"}))),
            None
        );
    }

    #[test]
    fn suffixes_stay_inside_the_repository() {
        let source = json!({"path": "apps/occm"});
        let suffix = |file| value_file_suffix(&source, file);
        assert_eq!(suffix("../../../values.yaml"), None);
        assert_eq!(
            suffix("../../values.yaml"),
            Some(PathBuf::from("values.yaml"))
        );
        assert_eq!(
            suffix("../shared/v.yaml"),
            Some(PathBuf::from("apps/shared/v.yaml"))
        );
        assert_eq!(suffix("$ref"), None);
        assert_eq!(value_file_suffix(&json!({}), "values.yaml"), None);
    }
}
