//! The generated reference pages `docs/flags.md` and `docs/metrics.md`: [`flags_markdown`]
//! reads the command line's clap definition, [`metrics_markdown`] a registry in which every
//! component has registered its metrics. `tests/docs_current.rs` fails when a checked-in
//! page differs from them; `STACKGATE_BLESS=1 cargo test --test docs_current` rewrites them.
//! (Not a hidden subcommand: one more subcommand shifts the place of the global flags in
//! every command's `--help`.)

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hash::Hash;
use std::sync::atomic::AtomicI64;

use clap::CommandFactory as _;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::TypedMetric;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::audit::background::AuditMetrics;
use crate::cluster_config::watcher::CloudConfigMetrics;
use crate::guard::GuardMetrics;
use crate::metrics::Metrics;
use crate::platform::watcher::PlatformMetrics;

use super::Cli;

/// One table cell: newlines become spaces and `|` is escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The rows of one command's own arguments (not its subcommands'), hidden ones left out.
fn arg_rows(command: &clap::Command) -> String {
    let mut rows = String::from("| flag | env | default | meaning |\n|---|---|---|---|\n");
    for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
        let name = match arg.get_long() {
            Some(long) => format!("`--{long}`"),
            None => {
                let names = arg.get_value_names().unwrap_or_default();
                let name = names.first().map_or(arg.get_id().as_str(), |n| n.as_str());
                let more = if arg.get_num_args().is_some_and(|n| n.max_values() > 1) {
                    "..."
                } else {
                    ""
                };
                format!("`<{name}>{more}`")
            }
        };
        let env = arg
            .get_env()
            .map_or("—".to_owned(), |e| format!("`{}`", e.to_string_lossy()));
        let takes_value = arg.get_action().takes_values();
        // A default computed from the temporary directory is written as `$TMPDIR/…`, so the
        // page does not depend on the machine that generated it.
        let temp_dir = std::env::temp_dir();
        let defaults: Vec<_> = arg
            .get_default_values()
            .iter()
            .map(|v| match std::path::Path::new(v).strip_prefix(&temp_dir) {
                Ok(rest) if takes_value => format!("`$TMPDIR/{}`", rest.display()),
                _ => format!("`{}`", v.to_string_lossy()),
            })
            .collect();
        let default = match (takes_value, defaults.is_empty(), arg.is_required_set()) {
            (false, _, _) => "off".to_owned(),
            (true, false, _) => defaults.join(", "),
            (true, true, true) => "required".to_owned(),
            (true, true, false) => "—".to_owned(),
        };
        let mut help = cell(
            &arg.get_long_help()
                .or(arg.get_help())
                .map(ToString::to_string)
                .unwrap_or_default(),
        );
        let values: Vec<_> = arg
            .get_possible_values()
            .iter()
            .filter(|v| takes_value && !v.is_hide_set())
            .map(|v| match v.get_help() {
                Some(help) => format!("`{}` ({})", v.get_name(), cell(&help.to_string())),
                None => format!("`{}`", v.get_name()),
            })
            .collect();
        if !values.is_empty() {
            if !help.ends_with('.') {
                help.push('.');
            }
            let _ = write!(help, " One of {}.", values.join(", "));
        }
        let _ = writeln!(rows, "| {name} | {env} | {default} | {help} |");
    }
    rows
}

/// The text of `docs/flags.md`: every visible command with a table of its flags.
pub fn flags_markdown() -> String {
    let cli = Cli::command();
    let mut out = String::from(
        "# Command-line flags\n\n\
         Generated from the command line's definition (`src/cli/`): `cargo test --test \
         docs_current` fails when this file is stale, `STACKGATE_BLESS=1 cargo test --test \
         docs_current` rewrites it. Every flag can also be set from the environment variable \
         shown, which is how the Helm chart configures the server. Durations are written \
         `500ms`, `2s`, `1m`, `1h` (a plain number is seconds).\n\n\
         ## Every command\n\n",
    );
    out.push_str(&arg_rows(&cli));
    for command in cli.get_subcommands().filter(|c| !c.is_hide_set()) {
        let about = command
            .get_long_about()
            .or(command.get_about())
            .map(ToString::to_string)
            .unwrap_or_default();
        let _ = write!(
            out,
            "\n## `stackgate {}`\n\n{}\n\n{}",
            command.get_name(),
            cell(&about),
            arg_rows(command)
        );
    }
    out
}

/// The type and label names of a family, read from the exposition of a family of type
/// `M` (made by `make`) with one series `sample` (constructing the sample lists every field, so adding a
/// label to a type breaks the build here until the sample names it too).
fn family_of<L, M>(make: fn() -> M, sample: L) -> (String, Vec<String>)
where
    L: EncodeLabelSet + Clone + Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
    M: prometheus_client::registry::Metric + TypedMetric,
{
    let family = Family::<L, M, fn() -> M>::new_with_constructor(make);
    let _ = family.get_or_create(&sample);
    let mut registry = Registry::default();
    registry.register("sample", "", family);
    let mut text = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
    let kind = text
        .lines()
        .find_map(|l| l.strip_prefix("# TYPE sample "))
        .unwrap_or_default()
        .to_owned();
    let labels = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.split_once('{'))
        .and_then(|(_, after)| after.split_once('}'))
        .map_or("", |(labels, _)| labels);
    let names = labels
        .split(',')
        .filter_map(|pair| pair.split_once('=').map(|(name, _)| name.to_owned()))
        .filter(|name| name != "le")
        .collect();
    (kind, names)
}

type IntGauge = Gauge<i64, AtomicI64>;

/// The type and labels of every family that has no samples until it counts something (a
/// labelled family, or a gauge absent until first set), by registered name without the
/// `stackgate_` prefix: the exposition shows neither for them. Each entry names the label
/// type the owning module declares and the metric type it registers.
fn families_without_samples() -> BTreeMap<&'static str, (String, Vec<String>)> {
    use crate::guard::{CacheLabels, CallLabels, DecisionLabels, ErrorLabels, UnavailableLabels};
    use crate::metrics::{
        ConnectionCloseLabels, ConnectionLabels, LimitLabels, ListenerLabels, OutcomeLabels,
        PolicyLabels, ReasonLabels, RequestLabels,
    };
    use crate::releases::metrics::{AnnotationLabels, KeyLabels};
    let policy = || {
        family_of(
            Counter::<u64>::default,
            PolicyLabels {
                policy: String::new(),
                rule: "",
            },
        )
    };
    let annotation = || {
        family_of(
            Counter::<u64>::default,
            AnnotationLabels {
                annotation: String::new(),
                outcome: "",
            },
        )
    };
    let cloud_config_syncs = family_of(
        Counter::<u64>::default,
        crate::cluster_config::watcher::SyncLabels { outcome: "" },
    );
    let platform_syncs = family_of(
        Counter::<u64>::default,
        crate::platform::watcher::SyncLabels { outcome: "" },
    );
    let ccm_config_source_syncs = family_of(
        Counter::<u64>::default,
        crate::fact_watcher::SyncLabels { outcome: "" },
    );
    let release_syncs = family_of(
        Counter::<u64>::default,
        crate::releases::metrics::SyncLabels { outcome: "" },
    );
    BTreeMap::from([
        (
            "admission_requests",
            family_of(
                Counter::<u64>::default,
                RequestLabels {
                    webhook: "",
                    kind: String::new(),
                    operation: "",
                    decision: "",
                },
            ),
        ),
        ("mutations", policy()),
        ("denials", policy()),
        ("warnings", policy()),
        ("exemptions", policy()),
        (
            "http_rejections",
            family_of(Counter::<u64>::default, ReasonLabels { reason: "" }),
        ),
        (
            "input_limits",
            family_of(Counter::<u64>::default, LimitLabels { limit: "" }),
        ),
        (
            "tls_reloads",
            family_of(Counter::<u64>::default, OutcomeLabels { outcome: "" }),
        ),
        (
            "tls_rotations",
            family_of(
                Counter::<u64>::default,
                crate::certs::controller::ActionLabels { action: "" },
            ),
        ),
        (
            "connections",
            family_of(
                Counter::<u64>::default,
                ConnectionLabels {
                    listener: "",
                    outcome: "",
                },
            ),
        ),
        (
            "connection_closes",
            family_of(
                Counter::<u64>::default,
                ConnectionCloseLabels {
                    listener: "",
                    reason: "",
                },
            ),
        ),
        (
            "connections_open",
            family_of(IntGauge::default, ListenerLabels { listener: "" }),
        ),
        ("release_catalog_syncs", release_syncs),
        (
            "exceptions",
            family_of(
                IntGauge::default,
                crate::exceptions_watch::StateLabels {
                    policy: String::new(),
                    state: "",
                },
            ),
        ),
        (
            "release_catalog_snapshot_age_seconds",
            ("gauge".to_owned(), Vec::new()),
        ),
        // Families of gauges with no labels: no series until a certificate's dates are read.
        (
            "tls_certificate_expiry_timestamp_seconds",
            ("gauge".to_owned(), Vec::new()),
        ),
        (
            "tls_certificate_not_before_timestamp_seconds",
            ("gauge".to_owned(), Vec::new()),
        ),
        (
            "release_annotations_added",
            family_of(
                Counter::<u64>::default,
                KeyLabels {
                    annotation: String::new(),
                },
            ),
        ),
        ("release_contradictions", annotation()),
        ("release_unparsable_annotations", annotation()),
        ("cloud_config_syncs", cloud_config_syncs),
        ("openshift_platform_syncs", platform_syncs),
        ("ccm_config_source_syncs", ccm_config_source_syncs),
        (
            "lb_guard_decisions",
            family_of(Counter::<u64>::default, DecisionLabels { outcome: "" }),
        ),
        (
            "lb_guard_unavailable",
            family_of(Counter::<u64>::default, UnavailableLabels { reason: "" }),
        ),
        (
            "openstack_request_duration_seconds",
            family_of(
                || Histogram::new([1.0]),
                CallLabels {
                    service: "",
                    outcome: "",
                },
            ),
        ),
        (
            "openstack_request_errors",
            family_of(
                Counter::<u64>::default,
                ErrorLabels {
                    service: "",
                    reason: "",
                },
            ),
        ),
        (
            "lb_guard_cache_lookups",
            family_of(
                Counter::<u64>::default,
                CacheLabels {
                    cache: "",
                    result: "",
                },
            ),
        ),
        (
            "audit_violations",
            family_of(
                IntGauge::default,
                crate::audit::background::PolicyLabels {
                    policy: String::new(),
                },
            ),
        ),
    ])
}

/// One metric family.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Described {
    /// Registered name without the `stackgate_` prefix.
    name: String,
    /// `counter`, `gauge`, `histogram`, or empty when the exposition does not show it.
    kind: String,
    /// The help text as exported (the client appends a period).
    help: String,
    /// The label names the exposition shows (empty families show none).
    labels: Vec<String>,
}

/// Reads one Rust `Debug` string literal from the start of `text` (after its opening quote):
/// the text up to the closing quote, unescaped, and the rest after it.
fn debug_string(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &text[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// Every family registered in `registry`, in registration order.
///
/// prometheus-client 0.25 has no public way to list what a registry holds, and its
/// exposition leaves out families that have no series yet (every labelled family until it
/// counts something), so names and help come from the registry's `Debug` form
/// (`Descriptor { name: "…", help: "…", … }`), and type and labels from the exposition
/// where it shows them. The tests below fail if either stops finding what the other does.
fn describe(registry: &Registry) -> Vec<Described> {
    let debug = format!("{registry:?}");
    let mut text = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    let mut families = Vec::new();
    let mut rest = debug.as_str();
    while let Some((_, after)) = rest.split_once("Descriptor { name: \"") {
        let Some((name, after)) = debug_string(after) else {
            break;
        };
        let Some((help, after)) = after.strip_prefix(", help: \"").and_then(debug_string) else {
            break;
        };
        rest = after;
        let prefixed = format!("stackgate_{name}");
        let kind = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# TYPE {prefixed} ")))
            .unwrap_or_default()
            .to_owned();
        let labels = text
            .lines()
            .filter(|l| l.starts_with(&prefixed) && !l.starts_with('#'))
            .find_map(|l| l.split_once('{'))
            .and_then(|(_, after)| after.split_once('}'))
            .map(|(labels, _)| {
                labels
                    .split(',')
                    .filter_map(|pair| pair.split_once('=').map(|(n, _)| n.to_owned()))
                    .filter(|n| n != "le")
                    .collect()
            })
            .unwrap_or_default();
        families.push(Described {
            name,
            kind,
            help,
            labels,
        });
    }
    families
}

/// Every metric family with the component that registers it, in `/metrics` order: the
/// server's own first (always registered), then each optional component's as
/// `crate::compose` registers them. Families the exposition does not show get their type
/// and labels from [`families_without_samples`].
fn every_metric() -> Vec<(Described, &'static str)> {
    let without_samples = families_without_samples();
    let mut metrics = Metrics::new();
    let mut out: Vec<(Described, &'static str)> = Vec::new();
    let mut add = |metrics: &mut Metrics, component: &'static str| {
        for mut family in describe(metrics.registry_mut()) {
            if out.iter().any(|(known, _)| known.name == family.name) {
                continue;
            }
            if family.kind.is_empty()
                && let Some((kind, labels)) = without_samples.get(family.name.as_str())
            {
                family.kind.clone_from(kind);
                family.labels.clone_from(labels);
            }
            out.push((family, component));
        }
    };
    add(&mut metrics, "always");
    CloudConfigMetrics::default().register(metrics.registry_mut());
    add(&mut metrics, "`--cloud-config-object`");
    PlatformMetrics::default().register(metrics.registry_mut());
    add(&mut metrics, "`--openshift-platform auto`");
    crate::fact_watcher::FactMetrics::<crate::facts::ccm_workloads::CcmWorkloads>::default()
        .register(metrics.registry_mut());
    add(&mut metrics, "`--ccm-config-source auto`");
    GuardMetrics::default().register(metrics.registry_mut());
    add(&mut metrics, "`--lb-guard on`");
    AuditMetrics::default().register(metrics.registry_mut());
    add(&mut metrics, "`--background-audit`");
    crate::certs::controller::RotationMetrics::default().register(metrics.registry_mut());
    add(&mut metrics, "`--tls-mode self-managed`");
    crate::exceptions_watch::ExceptionMetrics::default().register(metrics.registry_mut());
    add(&mut metrics, "`--watch-exceptions`");
    out
}

/// The name users query: counters carry `_total`, histograms `_bucket`, `_sum` and `_count`.
fn sample_name(family: &Described) -> String {
    match family.kind.as_str() {
        "counter" => format!("`stackgate_{}_total`", family.name),
        "histogram" => format!("`stackgate_{}_bucket`, `_sum`, `_count`", family.name),
        _ => format!("`stackgate_{}`", family.name),
    }
}

/// The text of `docs/metrics.md`: every metric stackgate registers.
pub fn metrics_markdown() -> String {
    let mut out = String::from(
        "# Metrics\n\n\
         Generated from the metrics registry (`src/metrics.rs` and the components that \
         register their own): `cargo test --test docs_current` fails when this file is stale, \
         `STACKGATE_BLESS=1 cargo test --test docs_current` rewrites it. The admin listener serves them \
         on `/metrics` in the OpenMetrics text format; a labelled metric appears there once \
         it has counted something. Labels come from closed sets or from the policy files; \
         names, namespaces, uids and contents never become labels. \
         [operations.md](operations.md) has the alerts and what each outcome means.\n\n\
         | metric | type | labels | registered when | meaning |\n|---|---|---|---|---|\n",
    );
    for (family, component) in every_metric() {
        let labels = match family.labels.is_empty() {
            true => "—".to_owned(),
            false => family
                .labels
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {labels} | {component} | {} |",
            sample_name(&family),
            family.kind,
            cell(&family.help)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_a_type_and_every_listed_family_is_registered() {
        let all = every_metric();
        assert!(all.len() >= 30, "only {} families found", all.len());
        let untyped: Vec<_> = all
            .iter()
            .filter(|(f, _)| f.kind.is_empty())
            .map(|(f, _)| f.name.as_str())
            .collect();
        assert!(
            untyped.is_empty(),
            "add these to families_without_samples: {untyped:?}"
        );
        for name in families_without_samples().keys() {
            assert!(
                all.iter().any(|(f, _)| f.name == *name),
                "{name} is not registered"
            );
        }
    }

    #[test]
    fn the_registry_listing_finds_every_family_the_exposition_shows() {
        let mut metrics = Metrics::new();
        GuardMetrics::default().register(metrics.registry_mut());
        let listed = describe(metrics.registry_mut());
        let exposition = metrics.encode();
        let shown: Vec<_> = exposition
            .lines()
            .filter_map(|l| l.strip_prefix("# HELP stackgate_"))
            .map(|l| l.split_once(' ').map_or(l, |(name, _)| name))
            .collect();
        assert!(!shown.is_empty());
        for name in shown {
            assert!(listed.iter().any(|f| f.name == name), "{name} not listed");
        }
        let help = |name: &str| {
            listed
                .iter()
                .find(|f| f.name == name)
                .map(|f| f.help.clone())
        };
        assert_eq!(
            help("lb_guard_cache_lookups").as_deref(),
            Some("Token and status-tree cache lookups, by cache and result.")
        );
    }

    #[test]
    fn types_and_labels_come_from_the_types() {
        assert_eq!(
            family_of(
                Counter::<u64>::default,
                crate::metrics::ConnectionLabels {
                    listener: "",
                    outcome: ""
                }
            ),
            (
                "counter".to_owned(),
                vec!["listener".to_owned(), "outcome".to_owned()]
            )
        );
        let all = every_metric();
        let find = |name: &str| all.iter().find(|(f, _)| f.name == name).cloned();
        let (build, component) = find("build_info").unwrap();
        assert_eq!((build.kind.as_str(), component), ("gauge", "always"));
        assert_eq!(build.labels, ["version"]);
        let (calls, component) = find("openstack_request_duration_seconds").unwrap();
        assert_eq!(
            (calls.kind.as_str(), component),
            ("histogram", "`--lb-guard on`")
        );
        assert_eq!(calls.labels, ["service", "outcome"]);
        assert_eq!(find("audit_leader").unwrap().1, "`--background-audit`");
    }

    #[test]
    fn the_flags_page_has_every_command() {
        let page = flags_markdown();
        for command in ["serve", "policies", "rules", "check", "audit", "explain"] {
            assert!(
                page.contains(&format!("## `stackgate {command}`")),
                "{command}"
            );
        }
        assert!(page.contains("| `--log-level` | `STACKGATE_LOG_LEVEL` | `info` |"));
    }
}
