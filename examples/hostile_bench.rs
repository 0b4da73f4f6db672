//! Hostile-input benchmark (issue #12, "Measure"): what one tenant's review costs the
//! release `stackgate serve --kube off`, attack by attack.
//!
//! Run it with `scripts/hostilebench.sh`, which builds the release binaries first; by hand:
//!
//! ```text
//! cargo build --release --bin stackgate --example hostile_bench
//! target/release/examples/hostile_bench [--sizes-mib 1.5,3,6] [--copies 16] [--attacks values-list,…] [--json FILE]
//! ```
//!
//! Every measurement gets a fresh server process (so `VmHWM`, a process-lifetime peak,
//! belongs to that measurement alone), on loopback, with the generated dev certificate
//! (`--generated-ca-out`, as in the README quickstart), `--kube off`, the embedded policies,
//! JSON logs at info (as the chart runs it) and `--shutdown-grace 1s`. Then:
//!
//! 1. `copies` keep-alive HTTP/1.1-over-TLS connections are opened (ALPN `http/1.1`, as
//!    kube-apiserver connects), and the same body is sent on all of them at once.
//! 2. While the answers are awaited, a thread samples the server's `VmRSS` every
//!    `--sample-ms`; the peak is the larger of that and `VmHWM`. Above `--rss-kill-mib` the
//!    server is SIGKILLed (a stand-in for the pod's OOM kill, and a bound on this machine).
//! 3. Each answer's time (request written → body read), HTTP status, `allowed` /
//!    `status.code` and size are recorded; a client gives up after `--answer-timeout-secs`.
//! 4. `--settle-secs` after the last answer, `VmRSS` is the retained memory; the server's
//!    CPU time (utime + stime) since the sends began is read too, and the part of it spent
//!    after the last answer (work for requests already answered; issue 31: ≤ 50 ms).
//! 5. SIGTERM; the time until the process is gone is recorded (SIGKILL after
//!    `--exit-wait-secs`).
//!
//! Every loop here is bounded by a time limit, so a server that never answers stops the
//! measurement, not the run. Output: a markdown table on stdout (targets of issue #12
//! checked per row) and, with `--json FILE`, every number.

#[path = "../benches/support/procfs.rs"]
mod procfs;
use procfs::{clock_ticks_per_second, cpu_ticks, readyz_ok, rss_kib};
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Hostile-input benchmark of `stackgate serve` (issue #12).
#[derive(Debug, Parser)]
struct Args {
    /// `stackgate` release binary (default: `release/stackgate` of this example's target
    /// directory).
    #[arg(long)]
    stackgate: Option<PathBuf>,
    /// Body sizes in MiB for the attacks that scale with size.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1.5, 3.0, 6.0])]
    sizes_mib: Vec<f64>,
    /// Copies sent at once in the concurrent measurement (0: single copies only).
    #[arg(long, default_value_t = 16)]
    copies: usize,
    /// Only these attacks (names in the table `ATTACKS`); all by default.
    #[arg(long, value_delimiter = ',')]
    attacks: Vec<String>,
    /// `?timeout=` sent with every review (the apiserver's webhook timeout), seconds.
    #[arg(long, default_value_t = 10)]
    deadline_secs: u64,
    /// A client gives up waiting for its answer after this long.
    #[arg(long, default_value_t = 30.0)]
    answer_timeout_secs: f64,
    /// Retained RSS is read this long after the last answer.
    #[arg(long, default_value_t = 1.5)]
    settle_secs: f64,
    /// RSS sampling period, milliseconds.
    #[arg(long, default_value_t = 2)]
    sample_ms: u64,
    /// SIGKILL the server when its RSS passes this (MiB); recorded as "killed".
    #[arg(long, default_value_t = 4096)]
    rss_kill_mib: u64,
    /// After SIGTERM, wait this long for the exit before SIGKILL.
    #[arg(long, default_value_t = 5.0)]
    exit_wait_secs: f64,
    /// Write all results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Measure nothing: print the table of a JSON file written by `--json` (e.g. after
    /// merging runs).
    #[arg(long)]
    render: Option<PathBuf>,
    /// With `--render`: a JSON file of an earlier run (e.g. the code before a fix); prints
    /// one compact before/after table instead.
    #[arg(long, requires = "render")]
    compare: Option<PathBuf>,
}

/// `--shutdown-grace` given to the server; the issue's target is an exit within grace + 1 s.
const SHUTDOWN_GRACE_SECS: f64 = 1.0;

/// The largest body the apiserver delivers (its 3 MiB request limit): the memory targets
/// of issue #12 apply up to this size.
const APISERVER_MAX_BODY: usize = 3 << 20;

// ---------------------------------------------------------------------------------------
// Attacks

/// How an attack's body grows with the requested size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    /// `n` units fill the size.
    WithSize,
    /// A fixed body (the YAML alias bomb: 342 bytes).
    Fixed,
}

/// One attack of issue #12.
struct Attack {
    /// Short name (table row, `--attacks`).
    name: &'static str,
    /// Issue item it stands for.
    item: &'static str,
    /// Webhook path (without the `?timeout=` query).
    path: &'static str,
    scale: Scale,
    /// The review body with `n` repeated units (ignored for [`Scale::Fixed`]).
    body: fn(usize) -> String,
}

const ATTACKS: &[Attack] = &[
    Attack {
        name: "values-list",
        item: "a",
        path: "/validate",
        scale: Scale::WithSize,
        body: values_list,
    },
    Attack {
        name: "values-deep",
        item: "b",
        path: "/validate",
        scale: Scale::WithSize,
        body: values_deep,
    },
    Attack {
        name: "values-wide",
        item: "b",
        path: "/validate",
        scale: Scale::WithSize,
        body: values_wide,
    },
    Attack {
        name: "password-lines",
        item: "c",
        path: "/mutate",
        scale: Scale::WithSize,
        body: password_lines,
    },
    Attack {
        name: "unknown-keys",
        item: "c",
        path: "/mutate",
        scale: Scale::WithSize,
        body: unknown_keys,
    },
    Attack {
        name: "yaml-bomb-helmchart",
        item: "d",
        path: "/validate",
        scale: Scale::Fixed,
        body: yaml_bomb_helmchart,
    },
    Attack {
        name: "yaml-bomb-argo",
        item: "d",
        path: "/validate",
        scale: Scale::Fixed,
        body: yaml_bomb_argo,
    },
    Attack {
        name: "finding-flood",
        item: "e",
        path: "/validate",
        scale: Scale::WithSize,
        body: finding_flood,
    },
    Attack {
        name: "crs-payload-repeat",
        item: "14",
        path: "/validate",
        scale: Scale::Fixed,
        body: crs_payload_repeat,
    },
    Attack {
        name: "argo-list-commas",
        item: "22.3",
        path: "/validate",
        scale: Scale::WithSize,
        body: argo_list_commas,
    },
    Attack {
        name: "argo-list-ones",
        item: "22.3",
        path: "/validate",
        scale: Scale::WithSize,
        body: argo_list_ones,
    },
    Attack {
        name: "argo-index-chain",
        item: "22.1",
        path: "/validate",
        scale: Scale::Fixed,
        body: argo_index_chain,
    },
    Attack {
        name: "helmchart-set",
        item: "22.2",
        path: "/validate",
        scale: Scale::WithSize,
        body: helmchart_set,
    },
    Attack {
        name: "crs-two-values",
        item: "22.3",
        path: "/validate",
        scale: Scale::Fixed,
        body: crs_two_values,
    },
    Attack {
        name: "labelled-values",
        item: "22.3",
        path: "/validate",
        scale: Scale::WithSize,
        body: labelled_values,
    },
    Attack {
        name: "umbrella-values",
        item: "22.3",
        path: "/validate",
        scale: Scale::WithSize,
        body: umbrella_values,
    },
    Attack {
        name: "k0s-values",
        item: "22.3",
        path: "/validate",
        scale: Scale::WithSize,
        body: k0s_values,
    },
    Attack {
        name: "long-name-crs",
        item: "31.1",
        path: "/validate",
        scale: Scale::WithSize,
        body: long_name_crs,
    },
    Attack {
        name: "long-name-crs-mutate",
        item: "31.1",
        path: "/mutate",
        scale: Scale::WithSize,
        body: long_name_crs,
    },
    Attack {
        name: "long-name-argo",
        item: "31.1",
        path: "/validate",
        scale: Scale::WithSize,
        body: long_name_argo,
    },
    Attack {
        name: "long-namespace-labelled",
        item: "31.1",
        path: "/mutate",
        scale: Scale::WithSize,
        body: long_namespace_labelled,
    },
    Attack {
        name: "flow-nesting",
        item: "31.6",
        path: "/validate",
        scale: Scale::Fixed,
        body: flow_nesting,
    },
    Attack {
        name: "json-deep",
        item: "22.1",
        path: "/validate",
        scale: Scale::WithSize,
        body: json_deep,
    },
];

/// An Argo CD Application of the CCM chart with `helm.parameters` `params` (raw JSON).
fn argo_parameters(params: &str) -> String {
    let object = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "occm", "namespace": "argocd"},
        "spec": {
            "project": "default",
            "destination": {"namespace": "kube-system", "server": "https://kubernetes.default.svc"},
            "source": {
                "chart": "openstack-cloud-controller-manager",
                "repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                "targetRevision": "2.31.1",
                "helm": {"parameters": FILL},
            },
        }
    });
    review(object, "argoproj.io", "v1alpha1", "applications").replacen(
        &format!("\"{FILL}\""),
        params,
        1,
    )
}

/// Issue 22 item 3: one parameter whose value is a Helm list literal of `n` empty elements
/// (`{,,,…}`: strvals reads it as a list of `n + 1` empty strings).
fn argo_list_commas(n: usize) -> String {
    argo_parameters(&format!(
        r#"[{{"name":"cloudConfig.global.x","value":"{{{}}}"}}]"#,
        ",".repeat(n)
    ))
}

/// Issue 22 item 3: a list literal of `n` ones (`{1,1,…}`).
fn argo_list_ones(n: usize) -> String {
    let mut list = "1,".repeat(n.max(1));
    list.pop();
    argo_parameters(&format!(
        r#"[{{"name":"cloudConfig.global.x","value":"{{{list}}}"}}]"#
    ))
}

/// Issue 22 item 1: a parameter name `cloudConfig.x[0][0]…` with 7,500 indexes (~30 KB): one
/// recursion per `[i]` in strvals without a depth cap.
fn argo_index_chain(_n: usize) -> String {
    argo_parameters(&format!(
        r#"[{{"name":"cloudConfig.x{}","value":"1"}}]"#,
        "[0]".repeat(7_500)
    ))
}

/// An RKE2/k3s HelmChart of the CCM chart with `spec` fields `fields` (raw JSON members).
fn helmchart_with(fields: &str) -> String {
    let object = json!({
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChart",
        "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
        "spec": {
            "chart": "openstack-cloud-controller-manager",
            "repo": "https://kubernetes.github.io/cloud-provider-openstack",
            "targetNamespace": "kube-system",
            "version": "2.31.1",
            "bootstrap": FILL,
        }
    });
    review(object, "helm.cattle.io", "v1", "helmcharts").replacen(
        &format!("\"bootstrap\":\"{FILL}\""),
        &format!("\"bootstrap\":true,{fields}"),
        1,
    )
}

/// Issue 22 item 2: `n` `spec.set` entries, each a distinct cloud-config key.
fn helmchart_set(n: usize) -> String {
    let mut set = String::with_capacity(48 * n + 16);
    set.push_str("\"set\":{");
    for i in 0..n {
        if i > 0 {
            set.push(',');
        }
        let _ = write!(set, "\"cloudConfig.global.k{i:07}\":\"v\"");
    }
    set.push('}');
    helmchart_with(&set)
}

/// Issue 22 items 3 and 4: a ClusterResourceSet payload Secret with two ~1 MiB values (under
/// the 1 MiB payload cap each), both repeating a cloud-config Secret with long names.
fn crs_two_values(_n: usize) -> String {
    use base64::Engine as _;
    let long = "n".repeat(200);
    let site = format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
         namespace: kube-system\n  labels:\n    {long}: x\nstringData:\n  cloud.conf: \
         \"[Global]\\n[LoadBalancer]\\ncreate-monitor=maybe\\n\"\n"
    );
    let mut payload = String::new();
    while payload.len() + site.len() < 1000 * 1024 {
        payload.push_str(&site);
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(&payload);
    let object = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "addons.cluster.x-k8s.io/resource-set",
        "metadata": {"name": "crs-payload", "namespace": "default"},
        "data": {"a.yaml": b64, "b.yaml": b64},
    });
    review(object, "", "v1", "secrets")
}

/// `prefix` then `n` lines `kNNNNNNN: v` indented by `indent` (YAML string contents,
/// JSON-escaped).
fn values_lines(prefix: &str, indent: usize, n: usize) -> String {
    let pad = " ".repeat(indent);
    let mut text = String::with_capacity((14 + indent) * n + 64);
    text.push_str(prefix);
    for i in 0..n {
        let _ = write!(text, "{pad}k{i:07}: v\\n");
    }
    text
}

/// Issue 22 item 3: a ConfigMap labelled `stackgate.dev/ccm-values=values.yaml` (the CCM
/// chart's values where they are written) holding `n` keys.
fn labelled_values(n: usize) -> String {
    let object = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "occm-values", "namespace": "kube-system",
            "labels": {"stackgate.dev/ccm-values": "values.yaml"}},
        "data": {"values.yaml": FILL},
    });
    review(object, "", "v1", "configmaps").replacen(
        FILL,
        &values_lines("cloudConfig:\\n  global:\\n", 4, n),
        1,
    )
}

/// Issue 22 item 3: an umbrella chart's HelmChart whose `valuesContent` string holds the CCM
/// subchart's values under its key.
fn umbrella_values(n: usize) -> String {
    let object = json!({
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChart",
        "metadata": {"name": "cluster-addons", "namespace": "kube-system"},
        "spec": {"chart": "openstack-cluster-addons", "targetNamespace": "kube-system",
            "valuesContent": FILL},
    });
    review(object, "helm.cattle.io", "v1", "helmcharts").replacen(
        FILL,
        &values_lines(
            "openstack-cloud-controller-manager:\\n  cloudConfig:\\n    global:\\n",
            6,
            n,
        ),
        1,
    )
}

/// Issue 22 item 3: a k0s ClusterConfig installing the CCM chart with a `values` string.
fn k0s_values(n: usize) -> String {
    let object = json!({
        "apiVersion": "k0s.k0sproject.io/v1beta1",
        "kind": "ClusterConfig",
        "metadata": {"name": "k0s", "namespace": "kube-system"},
        "spec": {"extensions": {"helm": {"charts": [{
            "name": "openstack-cloud-controller-manager",
            "chartname": "openstack/openstack-cloud-controller-manager",
            "version": "2.31.1", "namespace": "kube-system", "values": FILL}]}}},
    });
    review(object, "k0s.k0sproject.io", "v1beta1", "clusterconfigs").replacen(
        FILL,
        &values_lines("cloudConfig:\\n  global:\\n", 4, n),
        1,
    )
}

/// Issue 22 item 1: a Deployment whose `spec` nests `n` arrays (past serde_json's 128 levels:
/// refused at once).
fn json_deep(n: usize) -> String {
    let object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "deep", "namespace": "tenant-a"},
        "spec": FILL,
    });
    review(object, "apps", "v1", "deployments").replacen(
        &format!("\"{FILL}\""),
        &format!("{}{}", "[".repeat(n), "]".repeat(n)),
        1,
    )
}

/// Issue 31 item 1: a ClusterResourceSet payload Secret holding 20 cloud-config Secrets
/// with `provider-requires-serial-api-calls = false`, whose own `metadata.name` fills the
/// body (the apiserver calls webhooks before it validates names).
fn long_name_crs(n: usize) -> String {
    use base64::Engine as _;
    let site = "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                namespace: kube-system\nstringData:\n  cloud.conf: \"[Global]\\n[LoadBalancer]\\n\
                provider-requires-serial-api-calls=false\\n\"\n";
    let b64 = base64::engine::general_purpose::STANDARD.encode(site.repeat(20));
    let object = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "addons.cluster.x-k8s.io/resource-set",
        "metadata": {"name": FILL, "namespace": "default"},
        "data": {"ccm.yaml": b64},
    });
    let body = review(object, "", "v1", "secrets");
    let name = "n".repeat(n.saturating_sub(body.len()) / 2);
    body.replace(FILL, &name)
}

/// Issue 31 item 1: an Argo CD Application with 8 sources of the CCM chart, each with serial
/// `false`, whose `metadata.name` fills the body.
fn long_name_argo(n: usize) -> String {
    let source = json!({
        "chart": "openstack-cloud-controller-manager",
        "repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
        "targetRevision": "2.31.1",
        "helm": {"values": "cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: false\n"},
    });
    let object = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": FILL, "namespace": "argocd"},
        "spec": {
            "project": "default",
            "destination": {"namespace": "kube-system", "server": "https://kubernetes.default.svc"},
            "sources": vec![source; 8],
        }
    });
    let body = review(object, "argoproj.io", "v1alpha1", "applications");
    let name = "n".repeat(n.saturating_sub(body.len()) / 2);
    body.replace(FILL, &name)
}

/// Issue 31 item 1: a labelled CCM values ConfigMap without the serial key (so the mutating
/// webhook patches and warns) in a namespace that fills the body.
fn long_namespace_labelled(n: usize) -> String {
    let object = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "occm-values", "namespace": FILL,
            "labels": {"stackgate.dev/ccm-values": "values.yaml"}},
        "data": {"values.yaml": "cloudConfig:\n  global:\n    auth-url: https://keystone\n"},
    });
    let body = review(object, "", "v1", "configmaps");
    let namespace = "n".repeat(n.saturating_sub(body.len()) / 2);
    body.replace(FILL, &namespace)
}

/// Issue 31 item 6: 300 levels of flow nesting in a ~0.6 KB values string (Helm reads it;
/// stackgate must answer with its own depth cap, not "not valid YAML").
fn flow_nesting(_n: usize) -> String {
    let object = json!({
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChart",
        "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"chart": "openstack-cloud-controller-manager", "targetNamespace": "kube-system",
            "valuesContent": format!("cloudConfig: {}{}\n", "[".repeat(300), "]".repeat(300))},
    });
    review(object, "helm.cattle.io", "v1", "helmcharts")
}

/// Placeholder replaced by the generated fragment (raw JSON, or JSON string contents).
const FILL: &str = "@@FILL@@";

/// A v1 AdmissionReview for a CREATE of `object` (dry-run, as `kubectl create
/// --dry-run=server` sends it), with `FILL` still in it.
fn review(object: Value, group: &str, version: &str, resource: &str) -> String {
    let kind = object["kind"].clone();
    let name = object["metadata"]["name"].clone();
    let namespace = object["metadata"]["namespace"].clone();
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "1f0e2d3c-4b5a-4697-8877-665544332211",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": name,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "tenant-a", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": true,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"]},
        }
    })
    .to_string()
}

/// A Flux HelmRelease of any chart (`podinfo`) whose `spec.values` is the raw JSON `values`.
fn helmrelease(values: &str) -> String {
    let object = json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": {"name": "podinfo", "namespace": "tenant-a"},
        "spec": {
            "interval": "10m",
            "chart": {"spec": {"chart": "podinfo", "version": "6.7.1",
                "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}},
            "values": FILL,
        }
    });
    review(object, "helm.toolkit.fluxcd.io", "v2", "helmreleases").replacen(
        &format!("\"{FILL}\""),
        values,
        1,
    )
}

/// a. `{"x": [{"a":0}, {"a":0}, …]}`.
fn values_list(n: usize) -> String {
    let mut values = String::with_capacity(8 * n + 8);
    values.push_str("{\"x\":[");
    for i in 0..n {
        if i > 0 {
            values.push(',');
        }
        values.push_str("{\"a\":0}");
    }
    values.push_str("]}");
    helmrelease(&values)
}

/// Nesting of each `{"a":{"a":…}}` chain in [`values_deep`]: with the review's own levels
/// it is the deepest serde_json's recursion limit (128) lets through (probed on the code
/// before issue #12: one level more is refused as invalid JSON).
const CHAIN_DEPTH: usize = 120;

/// b. `{"x": [{"a":{"a":…0…}}, …]}`: chains of [`CHAIN_DEPTH`] maps, `n` of them.
fn values_deep(n: usize) -> String {
    let chain = format!(
        "{}0{}",
        "{\"a\":".repeat(CHAIN_DEPTH),
        "}".repeat(CHAIN_DEPTH)
    );
    let mut values = String::with_capacity((chain.len() + 1) * n + 8);
    values.push_str("{\"x\":[");
    for i in 0..n {
        if i > 0 {
            values.push(',');
        }
        values.push_str(&chain);
    }
    values.push_str("]}");
    helmrelease(&values)
}

/// b. A wide flat map: `{"k0000000":0, "k0000001":0, …}`.
fn values_wide(n: usize) -> String {
    let mut values = String::with_capacity(13 * n + 2);
    values.push('{');
    for i in 0..n {
        if i > 0 {
            values.push(',');
        }
        let _ = write!(values, "\"k{i:07}\":0");
    }
    values.push('}');
    helmrelease(&values)
}

/// A ConfigMap labelled `stackgate.dev/cloud-config: cloud.conf` (a site anywhere) whose
/// `cloud.conf` is `header` then `n` times `line` (both JSON string contents).
fn labelled_configmap(header: &str, n: usize, line: impl Fn(usize) -> String) -> String {
    let object = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "tenant-cloud-config", "namespace": "tenant-a",
            "labels": {"stackgate.dev/cloud-config": "cloud.conf"}},
        "data": {"cloud.conf": FILL},
    });
    let mut conf = String::from(header);
    for i in 0..n {
        conf.push_str(&line(i));
    }
    review(object, "", "v1", "configmaps").replacen(FILL, &conf, 1)
}

/// c. `password=x` on every line (credential rule, one finding per line).
fn password_lines(n: usize) -> String {
    labelled_configmap("[Global]\\n", n, |_| "password=x\\n".to_owned())
}

/// c. `n` distinct keys the CCM does not know (fixed width, so size is linear in `n`).
fn unknown_keys(n: usize) -> String {
    labelled_configmap("[Global]\\n", n, |i| format!("k{i:07}=x\\n"))
}

/// e. One bad line per line: a boolean gcfg cannot read, each its own denial reason.
fn finding_flood(n: usize) -> String {
    labelled_configmap("[LoadBalancer]\\n", n, |_| {
        "create-monitor=maybe\\n".to_owned()
    })
}

/// d. Billion laughs: 9 levels of 9 aliases, 342 bytes, 9^9 (387 M) strings expanded.
fn yaml_bomb() -> String {
    let mut lines =
        vec![r#"a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]"#.to_owned()];
    let names: Vec<char> = "abcdefghi".chars().collect();
    for pair in names.windows(2) {
        let (prev, this) = (pair[0], pair[1]);
        let aliases = vec![format!("*{prev}"); 9].join(",");
        lines.push(format!("{this}: &{this} [{aliases}]"));
    }
    let mut bomb = lines.join("\n");
    bomb.push('\n');
    bomb
}

/// d. The bomb as a k3s/RKE2 HelmChart's `spec.valuesContent` for the CCM chart.
fn yaml_bomb_helmchart(_n: usize) -> String {
    let object = json!({
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChart",
        "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
        "spec": {
            "chart": "openstack-cloud-controller-manager",
            "repo": "https://kubernetes.github.io/cloud-provider-openstack",
            "targetNamespace": "kube-system",
            "version": "2.31.1",
            "valuesContent": yaml_bomb(),
        }
    });
    review(object, "helm.cattle.io", "v1", "helmcharts")
}

/// Issue 14: a ClusterResourceSet payload Secret (base64 `data`) whose ~950 KiB payload, just
/// under stackgate's 1 MiB payload cap, repeats the `kube-system/cloud-config` Secret and a CCM
/// DaemonSet: thousands of embedded sites and objects in one value.
fn crs_payload_repeat(_n: usize) -> String {
    use base64::Engine as _;
    let site = "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                namespace: kube-system\nstringData:\n  cloud.conf: \"[Global]\\n\"\n";
    let ccm = "---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: occm\nspec:\n  \
               template:\n    spec:\n      containers:\n      - image: \
               openstack-cloud-controller-manager\n        args: [--concurrent-service-syncs=4]\n";
    let mut payload = String::new();
    while payload.len() < 950 * 1024 {
        payload.push_str(site);
        payload.push_str(ccm);
    }
    let object = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "addons.cluster.x-k8s.io/resource-set",
        "metadata": {"name": "crs-payload", "namespace": "default"},
        "data": {"payload.yaml": base64::engine::general_purpose::STANDARD.encode(&payload)},
    });
    review(object, "", "v1", "secrets")
}

/// d. The bomb as an Argo CD Application's `spec.source.helm.values` for the CCM chart.
fn yaml_bomb_argo(_n: usize) -> String {
    let object = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "occm", "namespace": "argocd"},
        "spec": {
            "project": "default",
            "destination": {"namespace": "kube-system", "server": "https://kubernetes.default.svc"},
            "source": {
                "chart": "openstack-cloud-controller-manager",
                "repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                "targetRevision": "2.31.1",
                "helm": {"releaseName": "openstack-cloud-controller-manager", "values": yaml_bomb()},
            },
        }
    });
    review(object, "argoproj.io", "v1alpha1", "applications")
}

/// The largest body of `attack` that is at most `target` bytes (binary search on the
/// number of units; a body is a few milliseconds to build).
fn fill(attack: &Attack, target: usize) -> String {
    let (mut lo, mut hi) = (0usize, 1024usize);
    while (attack.body)(hi).len() <= target {
        lo = hi;
        hi *= 2;
    }
    // Invariant: body(lo) fits (or lo = 0), body(hi) does not.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if (attack.body)(mid).len() <= target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (attack.body)(lo)
}

// ---------------------------------------------------------------------------------------
// Server process

/// A free loopback port (bound and released; a race is harmless for a benchmark: the
/// server would fail to start and the run stops).
fn free_port() -> SocketAddr {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
}

struct Server {
    child: Child,
    addr: SocketAddr,
    ca_pem: String,
    log: PathBuf,
}

impl Server {
    fn start(bin: &Path, extra: &[&str], dir: &Path, index: usize) -> Server {
        let addr = free_port();
        let admin = free_port();
        let ca = dir.join(format!("ca-{index}.pem"));
        let log = dir.join(format!("server-{index}.log"));
        let log_file = std::fs::File::create(&log).expect("create server log");
        let mut child = Command::new(bin)
            .args([
                "serve",
                "--kube",
                "off",
                "--log-format",
                "json",
                "--log-level",
                "info",
            ])
            .arg("--shutdown-grace")
            .arg(format!("{SHUTDOWN_GRACE_SECS}s"))
            .args(extra)
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--admin-listen")
            .arg(admin.to_string())
            .arg("--generated-ca-out")
            .arg(&ca)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file))
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let limit = Instant::now() + Duration::from_secs(30);
        while !readyz_ok(admin) {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "stackgate exited with {status} before it was ready; log: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < limit, "stackgate not ready in 30 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        let ca_pem = std::fs::read_to_string(&ca).expect("generated CA written at start");
        Server {
            child,
            addr,
            ca_pem,
            log,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits up to `wait` for the exit (SIGKILL after it). Returns the time to
    /// exit, or `None` when it had to be killed (or was killed before).
    fn stop(mut self, wait: Duration) -> Option<Duration> {
        if let Ok(Some(_)) = self.child.try_wait() {
            return None;
        }
        let started = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Some(started.elapsed());
            }
            if started.elapsed() > wait {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Samples `VmRSS` every `period` until stopped; SIGKILLs `pid` above `kill_kib`.
struct Sampler {
    stop: Arc<AtomicBool>,
    max_kib: Arc<AtomicU64>,
    killed: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32, period: Duration, kill_kib: u64) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let max_kib = Arc::new(AtomicU64::new(0));
        let killed = Arc::new(AtomicBool::new(false));
        let (s, m, k) = (Arc::clone(&stop), Arc::clone(&max_kib), Arc::clone(&killed));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let (rss, _) = rss_kib(pid);
                m.fetch_max(rss, Ordering::Relaxed);
                if rss > kill_kib && !k.swap(true, Ordering::Relaxed) {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
                std::thread::sleep(period);
            }
        });
        Sampler {
            stop,
            max_kib,
            killed,
            thread,
        }
    }

    /// Stops sampling; `(max VmRSS seen in KiB, killed)`.
    fn finish(self) -> (u64, bool) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        (
            self.max_kib.load(Ordering::Relaxed),
            self.killed.load(Ordering::Relaxed),
        )
    }
}

// ---------------------------------------------------------------------------------------
// Client

fn client_config(ca_pem: &str) -> Arc<ClientConfig> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    // kube-apiserver offers HTTP/1.1 to webhooks.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

async fn connect(
    addr: SocketAddr,
    tls: Arc<ClientConfig>,
) -> Result<SendRequest<Full<Bytes>>, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").expect("server name");
    let stream = TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    Ok(sender)
}

/// What one copy got back.
#[derive(Debug, Clone)]
struct Answer {
    /// Request written → body read.
    seconds: f64,
    /// `200 allow`, `200 deny 403`, `413`, `no answer`, `error`.
    outcome: String,
    response_bytes: usize,
    /// Warnings in the review response.
    warnings: usize,
}

async fn send(
    mut sender: SendRequest<Full<Bytes>>,
    path: String,
    body: Bytes,
    limit: Duration,
) -> Answer {
    let started = Instant::now();
    let request = Request::post(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, */*")
        .header("user-agent", "kube-apiserver-admission")
        .header("content-length", body.len())
        .body(Full::new(body))
        .expect("request");
    let exchange = async {
        sender.ready().await.map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok::<_, String>((status, bytes))
    };
    let result = tokio::time::timeout(limit, exchange).await;
    let seconds = started.elapsed().as_secs_f64();
    match result {
        Err(_) => Answer {
            seconds,
            outcome: "no answer".into(),
            response_bytes: 0,
            warnings: 0,
        },
        Ok(Err(e)) => Answer {
            seconds,
            outcome: format!("error ({})", e.chars().take(60).collect::<String>()),
            response_bytes: 0,
            warnings: 0,
        },
        Ok(Ok((status, bytes))) => {
            let review: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let response = &review["response"];
            let outcome = if status != StatusCode::OK {
                status.as_u16().to_string()
            } else if response["allowed"] == json!(true) {
                "200 allow".to_owned()
            } else {
                format!(
                    "200 deny {}",
                    response["status"]["code"]
                        .as_u64()
                        .map_or_else(|| "-".to_owned(), |c| c.to_string())
                )
            };
            Answer {
                seconds,
                outcome,
                response_bytes: bytes.len(),
                warnings: response["warnings"].as_array().map_or(0, Vec::len),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// One measurement

struct Row {
    attack: &'static str,
    item: &'static str,
    path: &'static str,
    body_bytes: usize,
    copies: usize,
    idle_kib: u64,
    peak_kib: u64,
    retained_kib: u64,
    killed: bool,
    cpu_seconds: f64,
    /// Server CPU time from the last answer to the end of the settle time: work the server
    /// did for requests already answered (issue 31 target: ≤ 50 ms).
    cpu_after_answer_seconds: f64,
    exit_seconds: Option<f64>,
    answers: Vec<Answer>,
}

impl Row {
    fn max_seconds(&self) -> f64 {
        self.answers.iter().map(|a| a.seconds).fold(0.0, f64::max)
    }

    fn max_response(&self) -> usize {
        self.answers
            .iter()
            .map(|a| a.response_bytes)
            .max()
            .unwrap_or(0)
    }

    /// `16× 200 deny 403` or `12× 200 allow, 4× no answer`.
    fn outcomes(&self) -> String {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for answer in &self.answers {
            match counts.iter_mut().find(|(o, _)| *o == answer.outcome) {
                Some((_, n)) => *n += 1,
                None => counts.push((answer.outcome.clone(), 1)),
            }
        }
        counts
            .iter()
            .map(|(o, n)| {
                if self.copies == 1 {
                    o.clone()
                } else {
                    format!("{n}× {o}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Targets of issue #12 this row misses (empty: all met). Memory targets apply to
    /// bodies the apiserver can deliver (≤ 3 MiB).
    fn misses(&self, deadline: f64) -> Vec<&'static str> {
        let mut out = Vec::new();
        let deliverable = self.body_bytes <= APISERVER_MAX_BODY;
        let mib = |kib: u64| kib as f64 / 1024.0;
        if deliverable && self.copies == 1 && (self.killed || mib(self.peak_kib) > 96.0) {
            out.push("peak>96");
        }
        if deliverable && self.copies == 1 && (self.killed || mib(self.retained_kib) > 32.0) {
            out.push("retained>32");
        }
        if deliverable && self.copies > 1 && (self.killed || mib(self.peak_kib) > 200.0) {
            out.push("peak>200");
        }
        if self
            .answers
            .iter()
            .any(|a| a.seconds > deadline || !a.outcome.starts_with(char::is_numeric))
        {
            out.push("deadline");
        }
        if self.cpu_after_answer_seconds > 0.05 {
            out.push("cpu-after-answer>50ms");
        }
        if self.max_response() > 1 << 20 {
            out.push("response>1MiB");
        }
        // A server the sampler killed has no shutdown to judge.
        if !self.killed
            && self
                .exit_seconds
                .is_none_or(|s| s > SHUTDOWN_GRACE_SECS + 1.0)
        {
            out.push("exit>grace+1s");
        }
        out
    }

    /// Whether a client gave up while the server was still at work (then the "retained"
    /// RSS is read during that work).
    fn unanswered(&self) -> bool {
        self.answers.iter().any(|a| a.outcome == "no answer")
    }

    /// The inverse of [`Row::to_json`] (attack metadata from [`ATTACKS`]).
    fn from_json(v: &Value) -> Option<Row> {
        let attack = ATTACKS.iter().find(|a| v["attack"] == a.name)?;
        let kib = |k: &str| v[k].as_u64().unwrap_or(0);
        let answers = v["answers"]
            .as_array()?
            .iter()
            .map(|a| Answer {
                seconds: a["seconds"].as_f64().unwrap_or(0.0),
                outcome: a["outcome"].as_str().unwrap_or("").to_owned(),
                response_bytes: a["response_bytes"].as_u64().unwrap_or(0) as usize,
                warnings: a["warnings"].as_u64().unwrap_or(0) as usize,
            })
            .collect();
        Some(Row {
            attack: attack.name,
            item: attack.item,
            path: attack.path,
            body_bytes: v["body_bytes"].as_u64()? as usize,
            copies: v["copies"].as_u64()? as usize,
            idle_kib: kib("idle_rss_kib"),
            peak_kib: kib("peak_rss_kib"),
            retained_kib: kib("retained_rss_kib"),
            killed: v["killed_at_rss_limit"].as_bool().unwrap_or(false),
            cpu_seconds: v["server_cpu_seconds"].as_f64().unwrap_or(0.0),
            cpu_after_answer_seconds: v["server_cpu_after_answer_seconds"].as_f64().unwrap_or(0.0),
            exit_seconds: v["sigterm_to_exit_seconds"].as_f64(),
            answers,
        })
    }

    fn to_json(&self) -> Value {
        json!({
            "attack": self.attack, "item": self.item, "path": self.path,
            "body_bytes": self.body_bytes, "copies": self.copies,
            "idle_rss_kib": self.idle_kib, "peak_rss_kib": self.peak_kib,
            "retained_rss_kib": self.retained_kib, "killed_at_rss_limit": self.killed,
            "server_cpu_seconds": self.cpu_seconds,
            "server_cpu_after_answer_seconds": self.cpu_after_answer_seconds,
            "sigterm_to_exit_seconds": self.exit_seconds,
            "answers": self.answers.iter().map(|a| json!({
                "seconds": a.seconds, "outcome": a.outcome,
                "response_bytes": a.response_bytes, "warnings": a.warnings,
            })).collect::<Vec<_>>(),
        })
    }
}

struct Run<'a> {
    args: &'a Args,
    bin: &'a Path,
    /// Flags only some versions of the binary know.
    extra: &'a [&'a str],
    dir: &'a Path,
    ticks: f64,
    runtime: &'a tokio::runtime::Runtime,
    index: usize,
}

impl Run<'_> {
    fn measure(&mut self, attack: &Attack, body: &Bytes, copies: usize) -> Row {
        self.index += 1;
        let server = Server::start(self.bin, self.extra, self.dir, self.index);
        let pid = server.pid();
        let tls = client_config(&server.ca_pem);
        let path = format!("{}?timeout={}s", attack.path, self.args.deadline_secs);
        let limit = Duration::from_secs_f64(self.args.answer_timeout_secs);
        // Connections first, so the answer time is the review's, not the handshake's.
        let senders = self.runtime.block_on(async {
            let mut senders = Vec::with_capacity(copies);
            for _ in 0..copies {
                senders.push(
                    connect(server.addr, Arc::clone(&tls))
                        .await
                        .expect("connect to stackgate"),
                );
            }
            senders
        });
        std::thread::sleep(Duration::from_millis(100));
        let idle_kib = rss_kib(pid).0;
        let sampler = Sampler::start(
            pid,
            Duration::from_millis(self.args.sample_ms.max(1)),
            self.args.rss_kill_mib.saturating_mul(1024),
        );
        let cpu_before = cpu_ticks(pid);
        let answers = self.runtime.block_on(async {
            let tasks: Vec<_> = senders
                .into_iter()
                .map(|s| tokio::spawn(send(s, path.clone(), body.clone(), limit)))
                .collect();
            let mut answers = Vec::with_capacity(tasks.len());
            for task in tasks {
                answers.push(task.await.expect("client task"));
            }
            answers
        });
        let cpu_at_answer = cpu_ticks(pid);
        std::thread::sleep(Duration::from_secs_f64(self.args.settle_secs));
        let (retained_kib, hwm_kib) = rss_kib(pid);
        let cpu_end = cpu_ticks(pid);
        let cpu_seconds = cpu_end.saturating_sub(cpu_before) as f64 / self.ticks;
        let cpu_after_answer_seconds = cpu_end.saturating_sub(cpu_at_answer) as f64 / self.ticks;
        let (sampled_kib, killed) = sampler.finish();
        let log_hint = server.log.clone();
        let exit = server.stop(Duration::from_secs_f64(self.args.exit_wait_secs));
        let row = Row {
            attack: attack.name,
            item: attack.item,
            path: attack.path,
            body_bytes: body.len(),
            copies,
            idle_kib,
            peak_kib: hwm_kib.max(sampled_kib),
            retained_kib: if killed { 0 } else { retained_kib },
            killed,
            cpu_seconds,
            cpu_after_answer_seconds,
            exit_seconds: exit.map(|d| d.as_secs_f64()),
            answers,
        };
        eprintln!(
            "hostile_bench: {:<20} {:>9} B ×{:<2} {:<32} max {:>7.3} s  resp {:>10} B  peak {:>7.1} MiB{}  retained {:>7.1} MiB  cpu {:>6.2} s ({:.0} ms after)  exit {}  (log {})",
            row.attack,
            row.body_bytes,
            row.copies,
            row.outcomes(),
            row.max_seconds(),
            row.max_response(),
            row.peak_kib as f64 / 1024.0,
            if killed { " KILLED" } else { "" },
            row.retained_kib as f64 / 1024.0,
            row.cpu_seconds,
            row.cpu_after_answer_seconds * 1e3,
            row.exit_seconds
                .map_or_else(|| "SIGKILL".to_owned(), |s| format!("{:.0} ms", s * 1e3)),
            log_hint.display()
        );
        row
    }
}

// ---------------------------------------------------------------------------------------
// Report

fn fmt_bytes(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.2} MiB", n as f64 / 1048576.0)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn markdown(rows: &[Row], deadline: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| attack | item | path | body | copies | answers | slowest | largest response | peak RSS | retained RSS | server CPU (after the answer) | SIGTERM → exit | targets missed |"
    );
    let _ = writeln!(
        out,
        "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"
    );
    for row in rows {
        let misses = row.misses(deadline);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.2} s | {} | {} | {} | {:.2} s ({:.0} ms after) | {} | {} |",
            row.attack,
            row.item,
            row.path,
            fmt_bytes(row.body_bytes),
            row.copies,
            row.outcomes(),
            row.max_seconds(),
            fmt_bytes(row.max_response()),
            if row.killed {
                format!("> {:.0} MiB (killed)", row.peak_kib as f64 / 1024.0)
            } else {
                format!("{:.1} MiB", row.peak_kib as f64 / 1024.0)
            },
            if row.killed {
                "—".to_owned()
            } else if row.unanswered() {
                format!("{:.1} MiB (still busy)", row.retained_kib as f64 / 1024.0)
            } else {
                format!("{:.1} MiB", row.retained_kib as f64 / 1024.0)
            },
            row.cpu_seconds,
            row.cpu_after_answer_seconds * 1e3,
            row.exit_seconds
                .map_or_else(|| "SIGKILL".to_owned(), |s| format!("{:.0} ms", s * 1e3)),
            match (misses.is_empty(), row.body_bytes > APISERVER_MAX_BODY) {
                (true, false) => "none".to_owned(),
                (true, true) => "none (> 3 MiB: no memory target)".to_owned(),
                (false, false) => misses.join(", "),
                (false, true) => format!("{} (> 3 MiB: no memory target)", misses.join(", ")),
            }
        );
    }
    out
}

/// `answers; slowest; largest response; peak; retained` of one row, compact.
fn compact(row: &Row) -> [String; 5] {
    let mib = |kib: u64| format!("{:.0} MiB", kib as f64 / 1024.0);
    [
        row.outcomes(),
        format!("{:.2} s", row.max_seconds()),
        fmt_bytes(row.max_response()),
        if row.killed {
            format!("> {} (killed)", mib(row.peak_kib))
        } else {
            mib(row.peak_kib)
        },
        if row.killed {
            "—".to_owned()
        } else if row.unanswered() {
            format!("{} (busy)", mib(row.retained_kib))
        } else {
            mib(row.retained_kib)
        },
    ]
}

/// One table, a row per measurement of `after`, with the same attack, size (to 0.1 MiB)
/// and copies of `before` next to it.
fn comparison(before: &[Row], after: &[Row], deadline: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| attack | body | copies | before: answers | slowest | response | peak RSS | retained | after: answers | slowest | response | peak RSS | retained | targets missed after |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"
    );
    let size = |r: &Row| (r.body_bytes as f64 / 104857.6).round() as i64;
    for row in after {
        let old = before
            .iter()
            .find(|b| b.attack == row.attack && b.copies == row.copies && size(b) == size(row))
            .map_or_else(|| std::array::from_fn(|_| "—".to_owned()), compact);
        let new = compact(row);
        let misses = row.misses(deadline);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            row.attack,
            fmt_bytes(row.body_bytes),
            row.copies,
            old.join(" | "),
            new.join(" | "),
            if misses.is_empty() {
                "none".to_owned()
            } else {
                misses.join(", ")
            }
        );
    }
    out
}

/// The rows of a report written by `--json`.
fn read_rows(path: &Path) -> (Value, Vec<Row>) {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let report: Value = serde_json::from_slice(&text).expect("a JSON report of --json");
    let rows = report["rows"]
        .as_array()
        .map(|rows| rows.iter().filter_map(Row::from_json).collect())
        .unwrap_or_default();
    (report, rows)
}

fn default_binary(name: &str) -> PathBuf {
    // This example runs as <target>/release/examples/hostile_bench.
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .map(|release| release.join(name))
        .unwrap_or_else(|| PathBuf::from(name))
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let command = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    json!({
        "cpu": model,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "kernel": command("uname", &["-r"]),
        "memory": command("sh", &["-c", "grep MemTotal /proc/meminfo"]),
        "loadavg": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
    })
}

fn main() {
    let args = Args::parse();
    if let Some(path) = &args.render {
        let (report, rows) = read_rows(path);
        if let Some(before) = &args.compare {
            let (old, before) = read_rows(before);
            println!("before: {} on {}", old["binary"], old["machine"]);
            println!("after: {} on {}\n", report["binary"], report["machine"]);
            println!("{}", comparison(&before, &rows, args.deadline_secs as f64));
            return;
        }
        println!(
            "binary: {}\nmachine: {}\n",
            report["binary"], report["machine"]
        );
        println!("{}", markdown(&rows, args.deadline_secs as f64));
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bin = args
        .stackgate
        .clone()
        .unwrap_or_else(|| default_binary("stackgate"));
    assert!(
        bin.exists(),
        "{} not found; run scripts/hostilebench.sh (or `cargo build --release --bin stackgate` first)",
        bin.display()
    );
    let attacks: Vec<&Attack> = ATTACKS
        .iter()
        .filter(|a| args.attacks.is_empty() || args.attacks.iter().any(|n| n == a.name))
        .collect();
    assert!(!attacks.is_empty(), "no attack selected");
    let dir = tempfile::tempdir().expect("temporary directory");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime");
    let machine_start = machine();
    eprintln!("hostile_bench: {} on {machine_start}", bin.display());
    // Builds with a pre-stop delay (keep serving after SIGTERM while endpoints update) get
    // none here: SIGTERM → exit then measures the grace bound alone, the same for every
    // build.
    let help = Command::new(&bin)
        .args(["serve", "--help"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let extra: &[&str] = if help.contains("--shutdown-delay") {
        &["--shutdown-delay", "0s"]
    } else {
        &[]
    };
    let mut run = Run {
        args: &args,
        bin: &bin,
        extra,
        dir: dir.path(),
        ticks: clock_ticks_per_second(),
        runtime: &runtime,
        index: 0,
    };
    let mut rows = Vec::new();
    for attack in attacks {
        let bodies: Vec<String> = match attack.scale {
            Scale::Fixed => vec![(attack.body)(0)],
            Scale::WithSize => args
                .sizes_mib
                .iter()
                .map(|mib| fill(attack, (mib * 1048576.0) as usize))
                .collect(),
        };
        for body in bodies {
            let body = Bytes::from(body);
            rows.push(run.measure(attack, &body, 1));
            if args.copies > 1 {
                rows.push(run.measure(attack, &body, args.copies));
            }
        }
    }
    let deadline = args.deadline_secs as f64;
    println!("\n## Hostile-input benchmark\n");
    println!(
        "binary: {}\nmachine: {machine_start}\nat end: {}\n",
        bin.display(),
        machine()["loadavg"]
    );
    println!("{}", markdown(&rows, deadline));
    if let Some(path) = &args.json {
        let value = json!({
            "binary": bin.display().to_string(),
            "machine": machine_start,
            "args": format!("{args:?}"),
            "rows": rows.iter().map(Row::to_json).collect::<Vec<_>>(),
        });
        std::fs::write(
            path,
            serde_json::to_vec_pretty(&value).expect("JSON report"),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("hostile_bench: wrote {}", path.display());
    }
}
