//! `stackgate check --render`: renders what the repository renders, so that the objects a
//! chart makes go through the same engine as every file.
//!
//! Each Helm chart directory of the run (a directory holding a `Chart.yaml` found among the
//! inputs; a chart inside another chart's directory is a subchart and is rendered by its
//! parent) is rendered by the `helm` found on `PATH`, once for every object of the run that
//! deploys it, with that object's values:
//! - a Flux `HelmRelease` whose `spec.chart.spec.chart` is a path in a `GitRepository` or
//!   `Bucket` source that ends in the chart directory: `spec.values` merged over its
//!   `valuesFrom`, resolved from the run's own objects ([`ValuesIndex::resolve`]); release name
//!   and namespace as helm-controller derives them (`spec.releaseName`, else
//!   `<targetNamespace>-<name>` or `<name>`; `spec.targetNamespace`, else the release's own);
//! - an Argo CD `Application` whose `spec.source.path` (or one of `spec.sources`) ends in the
//!   chart directory: `helm.valueFiles` (from the run, [`ValuesIndex::resolve`]) with
//!   `helm.valuesObject` or `helm.values` on top; release name `helm.releaseName`, else the
//!   Application's name; namespace `spec.destination.namespace`;
//! - a chart directory no object of the run deploys: once, with its own default values, as
//!   release `<chart name>` in namespace `default`.
//!
//! `helm template <release> <dir> --namespace <ns> --skip-tests -f -` gets the values on its
//! standard input (never in a file or on the command line, where other users could read
//! them). `--skip-tests`: test hooks are Pods `helm test` runs on demand, which neither Flux
//! nor Argo CD applies. Helm is given no `--repo` and no `--dependency-update`, so it never
//! fetches a chart: a dependency that is not vendored in `charts/` is Helm's error.
//!
//! The output is split at its `# Source: <chart>/templates/<file>` comments and each
//! template's documents become one input of the run, named `render of <dir> (<who>):
//! <template>`, with no path: `--fix` never writes one (the report says so), lines are lines
//! of that template's rendered output, and a finding points at the rendered template, not at
//! the values line that set it (Helm's output does not say which value a line came from).
//!
//! Each kustomize overlay of the run (a directory holding `kustomization.yaml` that no other
//! kustomization of the run names in `resources`/`bases`/`components`: a base is rendered
//! through its overlays) is rendered by `kubectl kustomize <dir>` when `kubectl` is on `PATH`,
//! as one input `render of <dir> (kubectl kustomize)`. One that names a remote resource or
//! `helmCharts`, itself or through its bases in the run, is not rendered (a note): kubectl
//! would fetch them.
//!
//! Bounds: at most [`MAX_RENDERS`] runs (Helm and kubectl) per `check`, each stopped after
//! [`HELM_TIMEOUT`], its output read up to `--max-file-size` bytes. Without `helm` on `PATH`
//! the run gets one note and no render; a Helm failure is one input error naming the chart
//! directory and Helm's first error line (cut to [`MAX_ERROR_BYTES`], with every string of
//! the values it was given replaced, as values may hold secrets).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::index::{self, ChartDirs, ValuesIndex};
use super::input::{self, Content, Input};
use crate::yaml;

/// Most Helm runs (chart renders) in one `check`: each costs a process and up to
/// `--max-file-size` of output. Renders past it are reported as one note.
pub const MAX_RENDERS: usize = 32;

/// How long one `helm template` (or `kubectl kustomize`) may run before it is stopped (an input error).
pub const HELM_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest Helm error line shown, in bytes.
pub const MAX_ERROR_BYTES: usize = 300;

/// The name of the run-level `--render` notes.
pub const NOTE_NAME: &str = "--render";

/// The note when there is a chart to render and no `helm` on `PATH`.
pub const HELM_NOT_FOUND: &str = "helm not found on PATH; charts not rendered";

/// Why `--fix` leaves a rendered input alone.
pub const NOT_WRITTEN: &str =
    "not written: rendered by helm, not a file; change the values (or the template) that render it";

/// Stderr kept from Helm (the first line of it is shown).
const STDERR_KEPT: u64 = 4096;

/// How long to wait between looks at a running Helm.
const POLL: Duration = Duration::from_millis(10);

/// What `--render` may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest output read from one render, in bytes (`--max-file-size`).
    pub max_output: u64,
    /// How long one render may run.
    pub timeout: Duration,
    /// Most renders.
    pub max_renders: usize,
}

impl Limits {
    /// The limits of a run whose `--max-file-size` is `max_output`.
    pub fn new(max_output: u64) -> Self {
        Limits {
            max_output,
            timeout: HELM_TIMEOUT,
            max_renders: MAX_RENDERS,
        }
    }
}

/// The note when there is a kustomization to render and no `kubectl` on `PATH`.
pub const KUBECTL_NOT_FOUND: &str = "kubectl not found on PATH; kustomize overlays not rendered";

/// Why one render (`helm template`, `kubectl kustomize`) gave no output to check.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RenderError {
    /// The program is not on `PATH`.
    #[error("not found on PATH")]
    NotFound,
    /// The program could not be started or read.
    #[error("could not be run: {0}")]
    Io(String),
    /// The program failed; its first error line (values hidden by the caller).
    #[error("failed: {0}")]
    Failed(String),
    /// The program ran past the timeout and was stopped.
    #[error("did not finish within {0} s and was stopped")]
    Timeout(u64),
    /// The output was larger than `--max-file-size`.
    #[error("output larger than {0} bytes (--max-file-size); not checked")]
    TooLarge(u64),
}

/// What renders a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    /// `helm template` of a chart.
    Helm,
    /// `kubectl kustomize` of a kustomization.
    Kustomize,
}

impl Tool {
    fn program(self) -> &'static str {
        match self {
            Tool::Helm => "helm",
            Tool::Kustomize => "kubectl",
        }
    }

    /// How errors name it.
    fn command(self) -> &'static str {
        match self {
            Tool::Helm => "helm template",
            Tool::Kustomize => "kubectl kustomize",
        }
    }

    fn not_found(self) -> &'static str {
        match self {
            Tool::Helm => HELM_NOT_FOUND,
            Tool::Kustomize => KUBECTL_NOT_FOUND,
        }
    }
}

/// One render to run: a chart directory and the values an object of the run gives it.
#[derive(Debug, Clone, PartialEq)]
struct Render {
    tool: Tool,
    /// The chart (or kustomization) directory, as the tool is given it.
    dir: PathBuf,
    /// Who deploys it (`HelmRelease flux-system/occm`, `chart defaults`).
    who: String,
    release: String,
    namespace: String,
    /// The values (None: the chart's defaults).
    values: Option<Value>,
    /// Why it is not rendered (its values cannot all be read from the run; a kustomization
    /// that would fetch from the network).
    unresolved: Option<String>,
}

impl Render {
    /// The program's arguments (Helm reads the values from standard input).
    fn args(&self) -> Vec<String> {
        let dir = self.dir.to_string_lossy().into_owned();
        match self.tool {
            Tool::Kustomize => vec!["kustomize".to_owned(), dir],
            Tool::Helm => {
                let mut args = vec![
                    "template".to_owned(),
                    self.release.clone(),
                    dir,
                    "--namespace".to_owned(),
                    self.namespace.clone(),
                    "--skip-tests".to_owned(),
                ];
                if self.values.is_some() {
                    args.extend(["-f".to_owned(), "-".to_owned()]);
                }
                args
            }
        }
    }
}

/// The inputs `--render` adds to a run: every template's rendered documents, and notes and
/// input errors for what could not be rendered. Nothing when the run holds no chart.
pub fn render(inputs: &[Input], limits: Limits) -> Vec<Input> {
    render_with(inputs, limits, &run_tool)
}

/// Runs a program with these arguments and this standard input, within the limits.
type RunTool = dyn Fn(&str, &[String], Option<&[u8]>, Limits) -> Result<String, RenderError>;

/// [`render`] with the process that renders one chart given (tests use a fake one).
fn render_with(inputs: &[Input], limits: Limits, run: &RunTool) -> Vec<Input> {
    let mut renders = plan(inputs);
    renders.extend(plan_kustomize(inputs));
    let mut out = Vec::new();
    let mut missing: Vec<Tool> = Vec::new();
    for (n, r) in renders.iter().enumerate() {
        if missing.contains(&r.tool) {
            continue;
        }
        let shown = format!("render of {} ({})", input::display(&r.dir), r.who);
        if n == limits.max_renders {
            out.push(note(format!(
                "{} more renders not run (at most {} per run)",
                renders.len() - n,
                limits.max_renders
            )));
            break;
        }
        if let Some(reason) = &r.unresolved {
            out.push(Input {
                name: shown,
                path: None,
                content: Content::Skipped(format!("not rendered: {reason}")),
                identity: None,
                rendered: true,
            });
            continue;
        }
        let values = r.values.as_ref().map(|v| v.to_string().into_bytes());
        match run(r.tool.program(), &r.args(), values.as_deref(), limits) {
            Ok(text) => out.extend(split(&text).into_iter().map(|(source, text)| Input {
                name: match source {
                    Some(s) => format!("{shown}: {s}"),
                    None => shown.clone(),
                },
                path: None,
                content: Content::Text(text),
                identity: None,
                rendered: true,
            })),
            Err(RenderError::NotFound) => {
                // One note per program: every other render would say the same.
                let count = renders.iter().filter(|o| o.tool == r.tool).count();
                out.push(note(format!(
                    "{} ({count} render{})",
                    r.tool.not_found(),
                    if count == 1 { "" } else { "s" }
                )));
                missing.push(r.tool);
            }
            Err(e) => {
                let e = match e {
                    RenderError::Failed(line) => {
                        RenderError::Failed(hide_values(&line, r.values.as_ref(), MAX_ERROR_BYTES))
                    }
                    other => other,
                };
                out.push(Input {
                    name: shown,
                    path: None,
                    content: Content::Error(format!("{} {e}", r.tool.command())),
                    identity: None,
                    rendered: true,
                });
            }
        }
    }
    out
}

/// A run-level `--render` note.
fn note(message: String) -> Input {
    Input {
        name: NOTE_NAME.to_owned(),
        path: None,
        content: Content::Skipped(message),
        identity: None,
        rendered: true,
    }
}

/// The renders of a run: for each chart directory (subcharts excepted), one per object of the
/// run that deploys it, or one with its defaults when none does. In input order.
fn plan(inputs: &[Input]) -> Vec<Render> {
    let charts = ChartDirs::build(inputs);
    let dirs: Vec<(&Path, &str)> = charts
        .dirs()
        .filter(|(dir, _)| {
            // A subchart (below another chart's directory) renders as part of its parent.
            !dir.ancestors()
                .skip(1)
                .any(|a| charts.dirs().any(|(d, _)| d == a))
        })
        .collect();
    if dirs.is_empty() {
        return Vec::new();
    }
    let index = ValuesIndex::build(inputs);
    let mut renders = Vec::new();
    let mut deployed: HashSet<&Path> = HashSet::new();
    for inp in inputs {
        let Content::Text(text) = &inp.content else {
            continue;
        };
        if !(text.contains("HelmRelease") || text.contains("Application")) {
            continue;
        }
        let Ok(docs) = yaml::parse_stream(text) else {
            continue;
        };
        for doc in docs {
            let Ok(json) = doc.root.to_json() else {
                continue;
            };
            for (chart_path, render) in deployments(&json, &index) {
                for (dir, _) in dirs.iter().filter(|(d, _)| ends_with(d, &chart_path)) {
                    deployed.insert(dir);
                    renders.push(Render {
                        dir: dir.to_path_buf(),
                        ..render.clone()
                    });
                }
            }
        }
    }
    for (dir, name) in &dirs {
        if !deployed.contains(dir) {
            renders.push(Render {
                tool: Tool::Helm,
                dir: dir.to_path_buf(),
                who: "chart defaults".to_owned(),
                release: (*name).to_owned(),
                namespace: "default".to_owned(),
                values: None,
                unresolved: None,
            });
        }
    }
    renders.sort_by(|a, b| a.dir.cmp(&b.dir));
    renders
}

/// The file names kustomize reads as a kustomization.
const KUSTOMIZATION_FILES: &[&str] = &["kustomization.yaml", "kustomization.yml"];

/// Whether a `resources`/`components` entry is fetched from the network by kustomize (a URL,
/// a `git::`/`git@` address, a `github.com/…`-style repository path).
fn is_remote(entry: &str) -> bool {
    entry.contains("://")
        || entry.contains("?ref=")
        || entry.contains(".git//")
        || [
            "git@",
            "git::",
            "gh:",
            "github.com/",
            "gitlab.com/",
            "bitbucket.org/",
        ]
        .iter()
        .any(|p| entry.starts_with(p))
}

/// The kustomize overlays of a run: every directory holding a kustomization that no other
/// kustomization of the run uses (a base is rendered through its overlays), in path order.
/// One that uses, directly or through its bases in the run, a remote resource or a
/// `helmCharts` entry is not rendered (`kubectl kustomize` would fetch it).
fn plan_kustomize(inputs: &[Input]) -> Vec<Render> {
    // Directory → (its local references, whether it fetches by itself).
    let mut dirs: Vec<(PathBuf, Vec<PathBuf>, bool)> = Vec::new();
    for inp in inputs {
        let (Some(path), Content::Text(text)) = (inp.path.as_deref(), &inp.content) else {
            continue;
        };
        if !path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| KUSTOMIZATION_FILES.contains(&n))
        {
            continue;
        }
        let Ok(json) = yaml::parse_one(text).and_then(|n| n.to_json()) else {
            continue;
        };
        let field = |k: &str| json.get(k).and_then(Value::as_str);
        // A Flux `Kustomization` object, or a kustomize `Component` (rendered by its users).
        if field("apiVersion").is_some_and(|a| !a.starts_with("kustomize.config.k8s.io/"))
            || field("kind").is_some_and(|k| k != "Kustomization")
        {
            continue;
        }
        let dir = index::normalize(path.parent().unwrap_or(Path::new("")));
        let entries: Vec<&str> = ["resources", "bases", "components"]
            .iter()
            .filter_map(|k| json.get(*k).and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let fetches = entries.iter().any(|e| is_remote(e))
            || json
                .get("helmCharts")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
        let local = entries
            .iter()
            .filter(|e| !is_remote(e))
            .map(|e| index::normalize(&dir.join(e)))
            .collect();
        dirs.push((dir, local, fetches));
    }
    let known = |d: &Path| dirs.iter().position(|(k, _, _)| k == d);
    let used: HashSet<usize> = dirs
        .iter()
        .flat_map(|(_, local, _)| local.iter().filter_map(|d| known(d)))
        .collect();
    let mut renders: Vec<Render> = (0..dirs.len())
        .filter(|i| !used.contains(i))
        .map(|root| {
            // Everything the overlay reaches in the run, each once (a cycle ends).
            let mut seen = HashSet::from([root]);
            let mut pending = vec![root];
            let mut fetches = false;
            while let Some(i) = pending.pop() {
                fetches |= dirs[i].2;
                for next in dirs[i].1.iter().filter_map(|d| known(d)) {
                    if seen.insert(next) {
                        pending.push(next);
                    }
                }
            }
            Render {
                tool: Tool::Kustomize,
                dir: dirs[root].0.clone(),
                who: "kubectl kustomize".to_owned(),
                release: String::new(),
                namespace: String::new(),
                values: None,
                unresolved: fetches.then(|| {
                    "it uses remote resources or helmCharts, which kubectl kustomize would fetch"
                        .to_owned()
                }),
            }
        })
        .collect();
    renders.sort_by(|a, b| a.dir.cmp(&b.dir));
    renders
}

/// Whether chart directory `dir` is the repository path `chart_path` (a suffix of it at a
/// segment boundary: the repository's root is not known).
fn ends_with(dir: &Path, chart_path: &Path) -> bool {
    !chart_path.as_os_str().is_empty() && dir.ends_with(chart_path)
}

/// The charts `object` deploys from a repository path: (path, render without its directory).
fn deployments(object: &Value, index: &ValuesIndex) -> Vec<(PathBuf, Render)> {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str);
    let api = text("/apiVersion").unwrap_or_default();
    let kind = text("/kind").unwrap_or_default();
    let name = text("/metadata/name").unwrap_or_default();
    let own_namespace = text("/metadata/namespace");
    let who = |k: &str| match own_namespace {
        Some(ns) => format!("{k} {ns}/{name}"),
        None => format!("{k} {name}"),
    };
    let resolved = index.resolve(object);
    let unresolved = |what: &str| {
        resolved
            .as_ref()
            .filter(|r| r.sources.is_none())
            .map(|_| format!("its {what} are not all in this run (its own finding names them)"))
    };
    if api.starts_with("helm.toolkit.fluxcd.io/") && kind == "HelmRelease" {
        let source = text("/spec/chart/spec/sourceRef/kind").unwrap_or_default();
        let Some(chart) = text("/spec/chart/spec/chart") else {
            return Vec::new();
        };
        if !matches!(source, "GitRepository" | "Bucket") {
            return Vec::new();
        }
        // helm-controller (api/v2 `HelmRelease.GetReleaseName`, `GetReleaseNamespace`).
        let target = text("/spec/targetNamespace").filter(|t| !t.is_empty());
        let release = match (text("/spec/releaseName").filter(|r| !r.is_empty()), target) {
            (Some(r), _) => r.to_owned(),
            (None, Some(t)) => format!("{t}-{name}"),
            (None, None) => name.to_owned(),
        };
        let merged = resolved.as_ref().map_or(object, |r| &r.object);
        return vec![(
            index::normalize(Path::new(chart)),
            Render {
                tool: Tool::Helm,
                dir: PathBuf::new(),
                who: who(kind),
                release,
                namespace: target.or(own_namespace).unwrap_or("default").to_owned(),
                values: merged
                    .pointer("/spec/values")
                    .filter(|v| v.is_object())
                    .cloned(),
                unresolved: unresolved("valuesFrom sources"),
            },
        )];
    }
    if api == "argoproj.io/v1alpha1" && kind == "Application" {
        let merged = resolved.as_ref().map_or(object, |r| &r.object);
        let namespace = text("/spec/destination/namespace")
            .filter(|n| !n.is_empty())
            .unwrap_or("default");
        return index::argo_sources(merged)
            .into_iter()
            .filter(|(_, s)| s.get("chart").is_none())
            .filter_map(|(_, source)| {
                let path = source.get("path")?.as_str()?;
                let helm = source.get("helm");
                let field = |k: &str| helm.and_then(|h| h.get(k));
                // Argo CD passes `valuesObject` when set, else the `values` string.
                let values = match (field("valuesObject"), field("values")) {
                    (Some(o), _) if o.is_object() => Some(o.clone()),
                    (_, Some(Value::String(t))) => yaml::parse_one(t)
                        .and_then(|n| n.to_json())
                        .ok()
                        .filter(Value::is_object),
                    _ => None,
                };
                let release = field("releaseName")
                    .and_then(Value::as_str)
                    .filter(|r| !r.is_empty())
                    .unwrap_or(name);
                Some((
                    index::normalize(Path::new(path)),
                    Render {
                        tool: Tool::Helm,
                        dir: PathBuf::new(),
                        who: who(kind),
                        release: release.to_owned(),
                        namespace: namespace.to_owned(),
                        values,
                        unresolved: unresolved("helm.valueFiles"),
                    },
                ))
            })
            .collect();
    }
    Vec::new()
}

/// The documents of Helm's output grouped by the template each comes from (its
/// `# Source:` comment), in output order.
fn split(output: &str) -> Vec<(Option<String>, String)> {
    let mut groups: Vec<(Option<String>, String)> = Vec::new();
    let mut doc = String::new();
    let mut source: Option<String> = None;
    let mut flush = |doc: &mut String, source: &mut Option<String>| {
        if doc.trim().is_empty() {
            doc.clear();
            return;
        }
        let text = std::mem::take(doc);
        match groups.iter_mut().find(|(s, _)| s == source) {
            Some((_, t)) => {
                t.push_str("---\n");
                t.push_str(&text);
            }
            None => groups.push((source.take(), text)),
        }
        *source = None;
    };
    for line in output.split_inclusive('\n') {
        // A block scalar's lines are indented, so `---` at the start of a line is always a
        // document separator.
        if line == "---\n" || line == "---" || line.starts_with("--- ") {
            flush(&mut doc, &mut source);
            continue;
        }
        if source.is_none()
            && doc.trim().is_empty()
            && let Some(s) = line.strip_prefix("# Source: ")
        {
            source = Some(s.trim().to_owned());
        }
        doc.push_str(line);
    }
    flush(&mut doc, &mut source);
    groups
}

/// `line` with every string of `values` (of 4 bytes or more) replaced, cut to `max` bytes.
fn hide_values(line: &str, values: Option<&Value>, max: usize) -> String {
    fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::String(s) if s.len() >= 4 => out.push(s),
            Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            Value::Object(m) => m.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    if let Some(v) = values {
        strings(v, &mut found);
    }
    // Longest first, so that a value containing another is replaced whole.
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut line = line.to_owned();
    for s in found {
        line = line.replace(s, "<value not shown>");
    }
    if line.len() > max {
        let mut cut = max;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push('…');
    }
    line
}

/// Runs `program` with `args` and `values` on its standard input, within `limits`.
fn run_tool(
    program: &str,
    args: &[String],
    values: Option<&[u8]>,
    limits: Limits,
) -> Result<String, RenderError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RenderError::NotFound,
            kind => RenderError::Io(kind.to_string()),
        })?;
    let stdin = child.stdin.take();
    let values = values.map(<[u8]>::to_vec);
    // Written from a thread: Helm may not read its input before writing output.
    let writer = std::thread::spawn(move || {
        if let (Some(mut pipe), Some(values)) = (stdin, values) {
            // A Helm that stops early closes the pipe; its exit status says why.
            let _ = pipe.write_all(&values);
        }
    });
    let stdout = child.stdout.take();
    let max = limits.max_output;
    let reader = std::thread::spawn(move || read_bounded(stdout, max));
    let stderr = child.stderr.take();
    let errors = std::thread::spawn(move || read_bounded(stderr, STDERR_KEPT));
    let deadline = Instant::now() + limits.timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                // Best effort: the child may have exited in between.
                let _ = child.kill();
                let _ = child.wait();
                break Err(RenderError::Timeout(limits.timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => break Err(RenderError::Io(e.kind().to_string())),
        }
    };
    let _ = writer.join();
    let out = reader.join().unwrap_or(Err(std::io::ErrorKind::Other));
    let err = errors.join().unwrap_or(Err(std::io::ErrorKind::Other));
    let status = status?;
    if !status.success() {
        let err = err.unwrap_or_default();
        let text = String::from_utf8_lossy(&err);
        let first = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no error message");
        return Err(RenderError::Failed(format!("{first} ({status})")));
    }
    let out = out.map_err(|k| RenderError::Io(k.to_string()))?;
    if out.len() as u64 > max {
        return Err(RenderError::TooLarge(max));
    }
    String::from_utf8(out).map_err(|_| RenderError::Io("output is not UTF-8".to_owned()))
}

/// Up to `max + 1` bytes of `pipe`; the rest is read and dropped, so that the writer never
/// blocks on a full pipe.
fn read_bounded(pipe: Option<impl Read>, max: u64) -> Result<Vec<u8>, std::io::ErrorKind> {
    let Some(mut pipe) = pipe else {
        return Ok(Vec::new());
    };
    let mut kept = Vec::new();
    (&mut pipe)
        .take(max.saturating_add(1))
        .read_to_end(&mut kept)
        .map_err(|e| e.kind())?;
    std::io::copy(&mut pipe, &mut std::io::sink()).map_err(|e| e.kind())?;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text_input(path: &str, text: &str) -> Input {
        Input {
            name: path.to_owned(),
            path: Some(PathBuf::from(path)),
            content: Content::Text(text.to_owned()),
            identity: None,
            rendered: false,
        }
    }

    const CHART: &str = "apiVersion: v2\nname: occm\nversion: 0.1.0\n";

    #[test]
    fn splits_helm_output_by_template() {
        let out = "---\n# Source: c/templates/a.yaml\nkind: A\n---\n# Source: c/templates/b.yaml\nkind: B\n---\n# Source: c/templates/a.yaml\nkind: A2\n";
        assert_eq!(
            split(out),
            vec![
                (
                    Some("c/templates/a.yaml".to_owned()),
                    "# Source: c/templates/a.yaml\nkind: A\n---\n# Source: c/templates/a.yaml\nkind: A2\n"
                        .to_owned()
                ),
                (
                    Some("c/templates/b.yaml".to_owned()),
                    "# Source: c/templates/b.yaml\nkind: B\n".to_owned()
                ),
            ]
        );
        assert_eq!(split("kind: X\n"), vec![(None, "kind: X\n".to_owned())]);
        assert!(split("---\n\n---\n").is_empty());
    }

    #[test]
    fn error_lines_hide_values_and_are_cut() {
        let values = json!({"a": {"password": "hunter2-secret"}, "n": 1, "s": "abc"});
        let shown = hide_values("Error: bad value hunter2-secret at abc", Some(&values), 300);
        assert_eq!(shown, "Error: bad value <value not shown> at abc");
        let long = "é".repeat(400);
        let cut = hide_values(&long, None, 301);
        assert!(cut.len() <= 301 + '…'.len_utf8(), "{}", cut.len());
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn plans_one_render_per_deploying_object_else_defaults() {
        let inputs = vec![
            text_input("repo/charts/occm/Chart.yaml", CHART),
            text_input(
                "repo/charts/occm/charts/sub/Chart.yaml",
                "apiVersion: v2\nname: sub\nversion: 1.0.0\n",
            ),
            text_input(
                "repo/charts/other/Chart.yaml",
                "apiVersion: v2\nname: other\nversion: 1.0.0\n",
            ),
            text_input(
                "repo/flux.yaml",
                "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: occm, namespace: flux-system}\nspec:\n  targetNamespace: kube-system\n  chart: {spec: {chart: ./charts/occm, sourceRef: {kind: GitRepository, name: r}}}\n  values: {a: 1}\n---\napiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: repo-chart, namespace: x}\nspec:\n  chart: {spec: {chart: occm, sourceRef: {kind: HelmRepository, name: r}}}\n",
            ),
            text_input(
                "repo/app.yaml",
                "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: app, namespace: argocd}\nspec:\n  source: {path: charts/occm, helm: {values: \"b: 2\"}}\n  destination: {namespace: ns}\n",
            ),
        ];
        let renders = plan(&inputs);
        let summary: Vec<(String, &str, &str, &str, Option<&Value>)> = renders
            .iter()
            .map(|r| {
                (
                    input::display(&r.dir),
                    r.who.as_str(),
                    r.release.as_str(),
                    r.namespace.as_str(),
                    r.values.as_ref(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "repo/charts/occm".to_owned(),
                    "HelmRelease flux-system/occm",
                    "kube-system-occm",
                    "kube-system",
                    Some(&json!({"a": 1}))
                ),
                (
                    "repo/charts/occm".to_owned(),
                    "Application argocd/app",
                    "app",
                    "ns",
                    Some(&json!({"b": 2}))
                ),
                (
                    "repo/charts/other".to_owned(),
                    "chart defaults",
                    "other",
                    "default",
                    None
                ),
            ]
        );
    }

    #[test]
    fn release_name_and_namespace_as_helm_controller_derives_them() {
        let release = |spec: Value| {
            let object = json!({
                "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "occm", "namespace": "flux-system"},
                "spec": spec,
            });
            let found = deployments(&object, &ValuesIndex::default());
            found
                .into_iter()
                .map(|(p, r)| (input::display(&p), r.release, r.namespace))
                .collect::<Vec<_>>()
        };
        let chart = json!({"spec": {"chart": "charts/occm", "sourceRef": {"kind": "Bucket"}}});
        assert_eq!(
            release(json!({"chart": chart, "releaseName": "mine", "targetNamespace": "t"})),
            vec![("charts/occm".to_owned(), "mine".to_owned(), "t".to_owned())]
        );
        assert_eq!(
            release(json!({"chart": chart})),
            vec![(
                "charts/occm".to_owned(),
                "occm".to_owned(),
                "flux-system".to_owned()
            )]
        );
    }

    #[test]
    fn helm_missing_is_one_note_and_failures_are_input_errors() {
        let inputs = vec![
            text_input("a/Chart.yaml", CHART),
            text_input("b/Chart.yaml", CHART),
        ];
        let missing = render_with(&inputs, Limits::new(100), &|_, _, _, _| {
            Err(RenderError::NotFound)
        });
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert_eq!(missing[0].name, NOTE_NAME);
        assert_eq!(
            missing[0].content,
            Content::Skipped(format!("{HELM_NOT_FOUND} (2 renders)"))
        );
        let failed = render_with(&inputs, Limits::new(100), &|_, args, _, _| {
            if args[2] == "a" {
                Err(RenderError::Failed("Error: broken".to_owned()))
            } else {
                Ok("---\n# Source: occm/templates/x.yaml\nkind: X\n".to_owned())
            }
        });
        let shown: Vec<(&str, &Content)> = failed
            .iter()
            .map(|i| (i.name.as_str(), &i.content))
            .collect();
        assert_eq!(
            shown,
            vec![
                (
                    "render of a (chart defaults)",
                    &Content::Error("helm template failed: Error: broken".to_owned())
                ),
                (
                    "render of b (chart defaults): occm/templates/x.yaml",
                    &Content::Text("# Source: occm/templates/x.yaml\nkind: X\n".to_owned())
                ),
            ]
        );
        assert!(failed.iter().all(|i| i.rendered && i.path.is_none()));
    }

    #[test]
    fn a_release_whose_values_are_not_all_in_the_run_is_not_rendered() {
        let inputs = vec![
            text_input("charts/occm/Chart.yaml", CHART),
            text_input(
                "flux.yaml",
                "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: occm, namespace: fs}\nspec:\n  chart: {spec: {chart: ./charts/occm, sourceRef: {kind: GitRepository, name: r}}}\n  valuesFrom: [{kind: Secret, name: absent}]\n",
            ),
        ];
        let out = render_with(&inputs, Limits::new(100), &|_, _, _, _| {
            panic!("helm must not run")
        });
        let shown: Vec<(&str, &Content)> =
            out.iter().map(|i| (i.name.as_str(), &i.content)).collect();
        assert_eq!(
            shown,
            vec![(
                "render of charts/occm (HelmRelease fs/occm)",
                &Content::Skipped(
                    "not rendered: its valuesFrom sources are not all in this run (its own finding names them)"
                        .to_owned()
                )
            )]
        );
    }

    #[test]
    fn kustomize_renders_overlays_not_their_bases_nor_what_would_fetch() {
        let k = |res: &str| {
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: {res}\n"
            )
        };
        let inputs = vec![
            text_input("k/base/kustomization.yaml", &k("[secret.yaml]")),
            text_input("k/overlays/a/kustomization.yaml", &k("[../../base]")),
            text_input(
                "k/overlays/b/kustomization.yml",
                &k("[../../base, ../../remote]"),
            ),
            text_input(
                "k/remote/kustomization.yaml",
                &k("[https://github.com/org/repo//deploy?ref=v1]"),
            ),
            text_input(
                "k/helm/kustomization.yaml",
                "helmCharts: [{name: x, repo: https://charts.example.test}]\n",
            ),
            text_input(
                "k/flux/kustomization.yaml",
                "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: x}\n",
            ),
            text_input(
                "k/component/kustomization.yaml",
                "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n",
            ),
        ];
        let plan: Vec<(String, Option<String>)> = plan_kustomize(&inputs)
            .into_iter()
            .map(|r| (input::display(&r.dir), r.unresolved))
            .collect();
        let fetch = Some(
            "it uses remote resources or helmCharts, which kubectl kustomize would fetch"
                .to_owned(),
        );
        assert_eq!(
            plan,
            vec![
                ("k/helm".to_owned(), fetch.clone()),
                ("k/overlays/a".to_owned(), None),
                ("k/overlays/b".to_owned(), fetch),
            ]
        );
        assert!(is_remote("git@github.com:org/repo.git"));
        // Each form alone (no scheme, no known host).
        assert!(is_remote("git.example.test/org/repo.git//deploy"));
        assert!(is_remote("git.example.test/org/repo/deploy?ref=v1"));
        assert!(is_remote("https://git.example.test/deploy.yaml"));
        assert!(!is_remote("../base"));
    }

    #[test]
    fn renders_past_the_bound_are_one_note() {
        let inputs: Vec<Input> = (0..3)
            .map(|i| text_input(&format!("c{i}/Chart.yaml"), CHART))
            .collect();
        let limits = Limits {
            max_renders: 2,
            ..Limits::new(100)
        };
        let out = render_with(&inputs, limits, &|_, _, _, _| Ok(String::new()));
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(
            out[0].content,
            Content::Skipped("1 more renders not run (at most 2 per run)".to_owned())
        );
    }
}
