//! End-to-end load benchmark: `stackgate serve` against the do-nothing webhook
//! (`examples/noop_webhook.rs`, same TLS and HTTP stack) in the same run.
//!
//! Run it with `scripts/loadbench.sh`, which builds the two release binaries first; by hand:
//!
//! ```text
//! cargo build --release --bin stackgate --example noop_webhook
//! cargo bench --bench loadbench -- [--duration-secs 5] [--concurrency 1,16,64] [--soak-secs 120]
//! ```
//!
//! What it does:
//! 1. Writes a CA and a `localhost` serving certificate (ECDSA P-256) to a temporary
//!    directory; both servers get them with `--tls-cert`/`--tls-key`.
//! 2. Start-to-ready: starts each server `--ready-runs` times and measures from `spawn` to
//!    the first `200` from `GET /readyz` on its admin port (polled every 0.5 ms), then stops
//!    it with SIGTERM.
//! 3. Starts both servers for good, checks once per case that each answers 200 (and that
//!    stackgate patches where it should), then for every concurrency × case runs the noop
//!    and stackgate one after the other (the order alternates per cell): `concurrency`
//!    keep-alive HTTP/1.1-over-TLS connections (like kube-apiserver: ALPN `http/1.1`), each
//!    sending the captured review back to back for `--warmup-secs`, then measured for
//!    `--duration-secs`.
//! 4. Soak: stackgate alone at `--soak-concurrency` for `--soak-secs`, cycling through the
//!    cases, with its RSS sampled every second (growth = last sample − sample at 10 s).
//! 5. SIGTERM to both, time to exit.
//!
//! Per cell it reports requests/s, p50/p99/p99.9/max latency (client-side, request written
//! → response body read), errors and non-200 answers, server CPU per request (utime+stime
//! from `/proc`), and RSS; the summary gives stackgate/noop throughput ratios and peak RSS
//! (`VmHWM`). The load generator runs on the same machine (`--client-threads` tokio
//! workers), so on a small machine both share the cores: throughput is "what this machine
//! sustains for the pair", identical for both servers, and the ratio is the comparison.
//! `--json FILE` writes every number.

#[path = "support/procfs.rs"]
mod procfs;
use procfs::{clock_ticks_per_second, cpu_ticks, readyz_ok, rss_kib};
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

#[path = "support/cases.rs"]
mod cases;

/// Load benchmark of `stackgate serve` against a do-nothing webhook on the same stack.
#[derive(Debug, Parser)]
struct Args {
    /// `stackgate` release binary (default: `release/stackgate` next to this bench's
    /// target directory).
    #[arg(long)]
    stackgate: Option<PathBuf>,
    /// `noop_webhook` release binary (default: `release/examples/noop_webhook`).
    #[arg(long)]
    noop: Option<PathBuf>,
    /// Measured seconds per cell.
    #[arg(long, default_value_t = 5.0)]
    duration_secs: f64,
    /// Unmeasured seconds before each cell (connections are set up before it).
    #[arg(long, default_value_t = 1.0)]
    warmup_secs: f64,
    /// Concurrency levels (keep-alive connections, one request in flight each).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 16, 64])]
    concurrency: Vec<usize>,
    /// Only these cases (names from `benches/support/cases.rs`); all by default.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// Paced (open-loop) runs: total requests per second, spread evenly over
    /// `--paced-concurrency` connections. A request sent late because the previous answer
    /// came late counts from its scheduled time (no coordinated omission). 0: none.
    #[arg(long, value_delimiter = ',', default_values_t = vec![2000])]
    paced_rps: Vec<u32>,
    /// Connections of the paced runs.
    #[arg(long, default_value_t = 16)]
    paced_concurrency: usize,
    /// Soak length in seconds (0: no soak).
    #[arg(long, default_value_t = 120.0)]
    soak_secs: f64,
    /// Soak concurrency.
    #[arg(long, default_value_t = 16)]
    soak_concurrency: usize,
    /// Start-to-ready measurements per server.
    #[arg(long, default_value_t = 5)]
    ready_runs: usize,
    /// Tokio worker threads of the load generator.
    #[arg(long, default_value_t = 2)]
    client_threads: usize,
    /// Write all results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only write each selected case's request body to `DIR/<case>.json` and stop (for
    /// measuring one review at a time, e.g. under callgrind; see BENCHMARKS.md).
    #[arg(long, value_name = "DIR")]
    write_bodies: Option<PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

// ---------------------------------------------------------------------------------------
// Servers

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stackgate,
    Noop,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Stackgate => "stackgate",
            Kind::Noop => "noop",
        }
    }
}

/// Certificate files for both servers.
struct Pki {
    ca_pem: String,
    cert: PathBuf,
    key: PathBuf,
}

fn write_pki(dir: &Path) -> Pki {
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "loadbench CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("server key");
    let mut leaf = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("server params");
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf.signed_by(&key, &issuer).expect("server certificate");
    let pki = Pki {
        ca_pem: ca_cert.pem(),
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    std::fs::write(&pki.cert, leaf.pem()).expect("write tls.crt");
    std::fs::write(&pki.key, key.serialize_pem()).expect("write tls.key");
    pki
}

/// A free loopback port (bound and released; a race with other processes is possible but
/// harmless for a benchmark: the server would fail to start and the run stops).
fn free_port() -> SocketAddr {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
}

/// A running server process.
struct Server {
    kind: Kind,
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Server {
    /// Starts the server and waits until `/readyz` answers 200; returns it and the
    /// start-to-ready time.
    fn start(kind: Kind, bin: &Path, pki: &Pki, dir: &Path) -> (Server, Duration) {
        let addr = free_port();
        let admin = free_port();
        let log = dir.join(format!("{}.log", kind.name()));
        let log_file = std::fs::File::create(&log).expect("create server log");
        let mut command = Command::new(bin);
        if kind == Kind::Stackgate {
            // As the Helm chart runs it: JSON logs at info, no cluster (--kube off), and the
            // policies with a static release for the Glance case's namespace.
            let policies = dir.join("policies");
            if !policies.exists() {
                std::fs::create_dir(&policies).expect("create the bench policy directory");
                for (name, text) in cases::bench_policy_files() {
                    std::fs::write(policies.join(name), text).expect("write a bench policy");
                }
            }
            command.args(["serve", "--log-format", "json", "--log-level", "info"]);
            command.args(["--kube", "off", "--policies"]).arg(&policies);
        }
        command
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--admin-listen")
            .arg(admin.to_string())
            .arg("--tls-cert")
            .arg(&pki.cert)
            .arg("--tls-key")
            .arg(&pki.key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file));
        let started = Instant::now();
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let limit = started + Duration::from_secs(30);
        loop {
            if readyz_ok(admin) {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{} exited with {status} before it was ready; log: {}",
                    kind.name(),
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < limit, "{} not ready in 30 s", kind.name());
            std::thread::sleep(Duration::from_micros(500));
        }
        let ready = started.elapsed();
        (
            Server {
                kind,
                child,
                addr,
                log,
            },
            ready,
        )
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits for the exit; returns how long the drain took.
    fn stop(mut self) -> Duration {
        let started = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let limit = started + Duration::from_secs(30);
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return started.elapsed();
            }
            if Instant::now() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return started.elapsed();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

// ---------------------------------------------------------------------------------------
// Load generator

/// One request body and where it goes.
#[derive(Clone)]
struct Target {
    path: &'static str,
    body: Bytes,
}

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

fn request(target: &Target) -> Request<Full<Bytes>> {
    Request::post(target.path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, */*")
        .header("user-agent", "kube-apiserver-admission")
        .header("content-length", target.body.len())
        .body(Full::new(target.body.clone()))
        .expect("request")
}

/// Sends one request; status and body.
async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    target: &Target,
) -> Result<(StatusCode, Bytes), String> {
    sender.ready().await.map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request(target))
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// What one connection measured.
#[derive(Default)]
struct WorkerResult {
    latencies_ns: Vec<u64>,
    errors: u64,
    non_ok: u64,
    first_error: Option<String>,
}

/// Sends until `end`, back to back (`interval: None`) or one request every `interval`
/// starting at `first` (paced); records requests scheduled at or after `measure_from`.
/// Paced latency counts from the scheduled time when the worker is behind schedule
/// (no coordinated omission), else from the actual send.
async fn worker(
    mut sender: SendRequest<Full<Bytes>>,
    targets: Arc<Vec<Target>>,
    offset: usize,
    schedule: Schedule,
) -> WorkerResult {
    let mut out = WorkerResult::default();
    let mut i = offset;
    let mut next = schedule.first;
    loop {
        let started = match schedule.interval {
            Some(interval) => {
                let scheduled = next;
                next += interval;
                if Instant::now() >= scheduled {
                    // Behind schedule (the previous answer came late): the wait counts.
                    scheduled
                } else {
                    // On time: count from the actual send, so the timer's own lateness
                    // (tokio timers have millisecond granularity) is not charged.
                    tokio::time::sleep_until(scheduled.into()).await;
                    Instant::now()
                }
            }
            None => Instant::now(),
        };
        if started >= schedule.end {
            break;
        }
        let target = &targets[i % targets.len()];
        i += 1;
        match exchange(&mut sender, target).await {
            Ok((status, _)) => {
                if status != StatusCode::OK {
                    out.non_ok += 1;
                }
                if started >= schedule.measure_from {
                    out.latencies_ns
                        .push(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
                }
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert(e);
                break;
            }
        }
    }
    out
}

/// When a worker sends.
#[derive(Clone, Copy)]
struct Schedule {
    /// First send (paced).
    first: Instant,
    /// Requests before this are warm-up.
    measure_from: Instant,
    /// No request is started at or after this.
    end: Instant,
    /// `None`: back to back.
    interval: Option<Duration>,
}

/// One measured cell.
struct Cell {
    server: Kind,
    case: String,
    concurrency: usize,
    /// Paced rate (requests/s), `None` for closed loop.
    rate: Option<u32>,
    requests: usize,
    seconds: f64,
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    errors: u64,
    non_ok: u64,
    cpu_us_per_request: f64,
    rss_kib: u64,
}

impl Cell {
    fn to_json(&self) -> Value {
        json!({
            "server": self.server.name(), "case": self.case, "concurrency": self.concurrency,
            "paced_rps": self.rate,
            "requests": self.requests, "seconds": self.seconds, "rps": self.rps,
            "p50_us": self.p50_us, "p99_us": self.p99_us, "p99_9_us": self.p999_us,
            "max_us": self.max_us, "errors": self.errors, "non_200": self.non_ok,
            "server_cpu_us_per_request": self.cpu_us_per_request, "rss_kib": self.rss_kib,
        })
    }
}

/// The latency at quantile `q` of sorted nanoseconds, in microseconds.
fn quantile_us(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1e3
}

struct Load<'a> {
    server: &'a Server,
    case: String,
    targets: Arc<Vec<Target>>,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
    /// Total requests per second (paced), or `None` (closed loop).
    rate: Option<u32>,
}

async fn run_load(load: Load<'_>, tls: Arc<ClientConfig>, ticks_per_second: f64) -> Cell {
    let mut senders = Vec::with_capacity(load.concurrency);
    for _ in 0..load.concurrency {
        senders.push(
            connect(load.server.addr, Arc::clone(&tls))
                .await
                .unwrap_or_else(|e| panic!("connect to {}: {e}", load.server.kind.name())),
        );
    }
    let start = Instant::now();
    let measure_from = start + load.warmup;
    let end = measure_from + load.duration;
    let interval = load
        .rate
        .map(|rate| Duration::from_secs_f64(load.concurrency as f64 / f64::from(rate.max(1))));
    let mut tasks = Vec::new();
    for (i, sender) in senders.into_iter().enumerate() {
        // Paced workers are staggered evenly over one interval.
        let first =
            start + interval.map_or(Duration::ZERO, |iv| iv * i as u32 / load.concurrency as u32);
        tasks.push(tokio::spawn(worker(
            sender,
            Arc::clone(&load.targets),
            i,
            Schedule {
                first,
                measure_from,
                end,
                interval,
            },
        )));
    }
    let pid = load.server.pid();
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu_before = cpu_ticks(pid);
    tokio::time::sleep_until(end.into()).await;
    let cpu_after = cpu_ticks(pid);
    let mut latencies = Vec::new();
    let (mut errors, mut non_ok, mut first_error) = (0, 0, None);
    for task in tasks {
        let r = task.await.expect("worker does not panic");
        latencies.extend(r.latencies_ns);
        errors += r.errors;
        non_ok += r.non_ok;
        if first_error.is_none() {
            first_error = r.first_error;
        }
    }
    if let Some(e) = first_error {
        eprintln!(
            "loadbench: {} {} c={}: {errors} errors, first: {e}",
            load.server.kind.name(),
            load.case,
            load.concurrency
        );
    }
    latencies.sort_unstable();
    let seconds = load.duration.as_secs_f64();
    let cpu_seconds = cpu_after.saturating_sub(cpu_before) as f64 / ticks_per_second;
    Cell {
        server: load.server.kind,
        case: load.case,
        concurrency: load.concurrency,
        rate: load.rate,
        requests: latencies.len(),
        seconds,
        rps: latencies.len() as f64 / seconds,
        p50_us: quantile_us(&latencies, 0.50),
        p99_us: quantile_us(&latencies, 0.99),
        p999_us: quantile_us(&latencies, 0.999),
        max_us: latencies.last().map_or(f64::NAN, |&n| n as f64 / 1e3),
        errors,
        non_ok,
        cpu_us_per_request: if latencies.is_empty() {
            f64::NAN
        } else {
            cpu_seconds * 1e6 / latencies.len() as f64
        },
        rss_kib: rss_kib(pid).0,
    }
}

/// One request per case to each server: both answer 200 with the request's uid; prints
/// what stackgate did (patch, warnings, denial) so the report shows which cases exercise
/// a rule.
async fn sanity_check(
    servers: &[&Server],
    cases: &[(cases::Case, Target)],
    tls: &Arc<ClientConfig>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for (case, target) in cases {
        let uid = serde_json::from_slice::<Value>(&target.body)
            .ok()
            .and_then(|v| v["request"]["uid"].as_str().map(str::to_owned))
            .unwrap_or_default();
        for server in servers {
            let mut sender = connect(server.addr, Arc::clone(tls))
                .await
                .expect("connect for the sanity check");
            let (status, body) = exchange(&mut sender, target)
                .await
                .expect("sanity-check exchange");
            let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            assert_eq!(
                status,
                StatusCode::OK,
                "{} {}: {review}",
                server.kind.name(),
                case.name
            );
            assert_eq!(
                review["response"]["uid"].as_str(),
                Some(uid.as_str()),
                "{} {}: uid",
                server.kind.name(),
                case.name
            );
            let r = &review["response"];
            if server.kind == Kind::Stackgate {
                assert_eq!(
                    r.get("patch").is_some(),
                    case.patches,
                    "stackgate {}: patch expected: {}; {review}",
                    case.name,
                    case.patches
                );
            }
            let summary = json!({
                "server": server.kind.name(), "case": case.name,
                "allowed": r["allowed"], "patch": r.get("patch").is_some(),
                "warnings": r["warnings"].as_array().map_or(0, Vec::len),
                "response_bytes": body.len(), "request_bytes": target.body.len(),
            });
            eprintln!("loadbench: sanity {summary}");
            out.push(summary);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Report

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
        "rustc": command("rustc", &["-V"]),
        "memory": command("sh", &["-c", "grep MemTotal /proc/meminfo"]),
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn markdown(cells: &[Cell]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| case | c | server | req/s | p50 | p99 | p99.9 | max | CPU/req | RSS | errors | ratio |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for cell in cells {
        let baseline = cells.iter().find(|b| {
            b.server == Kind::Noop
                && b.case == cell.case
                && b.concurrency == cell.concurrency
                && b.rate == cell.rate
        });
        let ratio = match (cell.server, baseline) {
            (Kind::Stackgate, Some(b)) if b.rps > 0.0 => format!("{:.2}×", cell.rps / b.rps),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {:.0} µs | {:.1} MiB | {} | {} |",
            cell.case,
            match cell.rate {
                Some(rate) => format!("{} @ {rate}/s", cell.concurrency),
                None => cell.concurrency.to_string(),
            },
            cell.server.name(),
            cell.rps,
            fmt_us(cell.p50_us),
            fmt_us(cell.p99_us),
            fmt_us(cell.p999_us),
            fmt_us(cell.max_us),
            cell.cpu_us_per_request,
            cell.rss_kib as f64 / 1024.0,
            cell.errors + cell.non_ok,
            ratio
        );
    }
    out
}

fn default_binary(name: &str) -> PathBuf {
    // This bench runs as <target>/release/deps/loadbench-<hash>.
    let exe = std::env::current_exe().expect("current exe");
    let release = exe
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    release.join(name)
}

/// Writes the selected cases' bodies to `dir/<case>.json`.
fn write_bodies(dir: &Path, names: &[String]) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for case in cases::LOAD_CASES {
        if !names.is_empty() && !names.iter().any(|n| n == case.name) {
            continue;
        }
        match case.body() {
            Ok(body) => {
                let path = dir.join(format!("{}.json", case.name));
                std::fs::write(&path, body).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                eprintln!("loadbench: wrote {}", path.display());
            }
            Err(why) => eprintln!("loadbench: skipping {}: {why}", case.name),
        }
    }
}

fn main() {
    let args = Args::parse();
    if let Some(dir) = &args.write_bodies {
        write_bodies(dir, &args.cases);
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let stackgate = args
        .stackgate
        .clone()
        .unwrap_or_else(|| default_binary("stackgate"));
    let noop = args
        .noop
        .clone()
        .unwrap_or_else(|| default_binary("examples/noop_webhook"));
    // A plain `cargo bench` builds `stackgate` but not the example: skip instead of failing,
    // so that the criterion benches can be run together with this one.
    if let Some(missing) = [&stackgate, &noop].into_iter().find(|bin| !bin.exists()) {
        eprintln!(
            "loadbench: skipped: {} not found; run scripts/loadbench.sh (or `cargo build \
             --release --bin stackgate --example noop_webhook` first)",
            missing.display()
        );
        return;
    }
    let selected: Vec<(cases::Case, Target)> = cases::LOAD_CASES
        .iter()
        .filter(|c| args.cases.is_empty() || args.cases.iter().any(|n| n == c.name))
        .filter_map(|case| match case.body() {
            Ok(body) => Some((
                *case,
                Target {
                    path: case.path,
                    body: Bytes::from(body),
                },
            )),
            Err(why) => {
                eprintln!("loadbench: skipping {}: {why}", case.name);
                None
            }
        })
        .collect();
    assert!(!selected.is_empty(), "no case selected");

    let dir = tempfile::tempdir().expect("temporary directory");
    let pki = write_pki(dir.path());
    let ticks = clock_ticks_per_second();
    let machine = machine();
    let load_at_start = loadavg();
    eprintln!("loadbench: machine {machine}");
    eprintln!("loadbench: loadavg at start: {load_at_start}");

    // Start-to-ready, several times each, alternating.
    let mut ready: Vec<(Kind, Vec<f64>)> = vec![(Kind::Stackgate, vec![]), (Kind::Noop, vec![])];
    for _ in 0..args.ready_runs {
        for (kind, times) in &mut ready {
            let bin = if *kind == Kind::Stackgate {
                &stackgate
            } else {
                &noop
            };
            let (server, took) = Server::start(*kind, bin, &pki, dir.path());
            times.push(took.as_secs_f64() * 1e3);
            server.stop();
        }
    }
    for (kind, times) in &mut ready {
        times.sort_by(f64::total_cmp);
        eprintln!(
            "loadbench: start-to-ready {}: {:?} ms",
            kind.name(),
            times
                .iter()
                .map(|t| (t * 100.0).round() / 100.0)
                .collect::<Vec<_>>()
        );
    }

    let (sg, _) = Server::start(Kind::Stackgate, &stackgate, &pki, dir.path());
    let (noop_server, _) = Server::start(Kind::Noop, &noop, &pki, dir.path());
    let idle_rss = [rss_kib(sg.pid()).0, rss_kib(noop_server.pid()).0];

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads.max(1))
        .enable_all()
        .build()
        .expect("client runtime");
    let tls = client_config(&pki.ca_pem);
    let sanity = runtime.block_on(sanity_check(&[&sg, &noop_server], &selected, &tls));

    let mut cells = Vec::new();
    let mut plan: Vec<(usize, Option<u32>)> = args.concurrency.iter().map(|&c| (c, None)).collect();
    plan.extend(
        args.paced_rps
            .iter()
            .filter(|&&rate| rate > 0)
            .map(|&rate| (args.paced_concurrency, Some(rate))),
    );
    let mut cell_index = 0usize;
    for &(concurrency, rate) in &plan {
        for (case, target) in &selected {
            let order: [&Server; 2] = if cell_index.is_multiple_of(2) {
                [&noop_server, &sg]
            } else {
                [&sg, &noop_server]
            };
            cell_index += 1;
            for server in order {
                let cell = runtime.block_on(run_load(
                    Load {
                        server,
                        case: case.name.to_owned(),
                        targets: Arc::new(vec![target.clone()]),
                        concurrency,
                        warmup: Duration::from_secs_f64(args.warmup_secs),
                        duration: Duration::from_secs_f64(args.duration_secs),
                        rate,
                    },
                    Arc::clone(&tls),
                    ticks,
                ));
                eprintln!(
                    "loadbench: {:<9} {:<20} c={:<3} rate={:<5} {:>8.0} req/s p50 {:>9} p99 {:>9} p99.9 {:>9} cpu/req {:>5.0} µs rss {:>6.1} MiB errors {} non-200 {} (loadavg {})",
                    cell.server.name(),
                    cell.case,
                    cell.concurrency,
                    cell.rate
                        .map_or_else(|| "max".to_owned(), |r| r.to_string()),
                    cell.rps,
                    fmt_us(cell.p50_us),
                    fmt_us(cell.p99_us),
                    fmt_us(cell.p999_us),
                    cell.cpu_us_per_request,
                    cell.rss_kib as f64 / 1024.0,
                    cell.errors,
                    cell.non_ok,
                    loadavg()
                );
                cells.push(cell);
            }
        }
    }

    // Soak: stackgate alone, all cases mixed, RSS every second.
    let mut soak = json!(null);
    if args.soak_secs > 0.0 {
        let targets: Arc<Vec<Target>> = Arc::new(selected.iter().map(|(_, t)| t.clone()).collect());
        let pid = sg.pid();
        let soak_secs = args.soak_secs;
        let concurrency = args.soak_concurrency;
        let samples = Arc::new(std::sync::Mutex::new(Vec::<(f64, u64)>::new()));
        let sampler_samples = Arc::clone(&samples);
        let cell = runtime.block_on(async {
            let start = Instant::now();
            let sampler = tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let t = start.elapsed().as_secs_f64();
                    if t > soak_secs + 1.5 {
                        break;
                    }
                    let mut s = sampler_samples.lock().unwrap_or_else(|e| e.into_inner());
                    s.push((t, rss_kib(pid).0));
                }
            });
            let cell = run_load(
                Load {
                    server: &sg,
                    case: "soak-mixed".to_owned(),
                    targets,
                    concurrency,
                    warmup: Duration::ZERO,
                    duration: Duration::from_secs_f64(soak_secs),
                    rate: None,
                },
                Arc::clone(&tls),
                ticks,
            )
            .await;
            sampler.abort();
            cell
        });
        let samples = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let at = |t: f64| {
            samples
                .iter()
                .find(|(s, _)| *s >= t)
                .or(samples.last())
                .map_or(0, |(_, r)| *r)
        };
        let after_warmup = at(10.0);
        let last = samples.last().map_or(0, |(_, r)| *r);
        let max = samples.iter().map(|(_, r)| *r).max().unwrap_or(0);
        eprintln!(
            "loadbench: soak {:.0} s c={concurrency}: {:.0} req/s p99 {} p99.9 {}; RSS at 10 s {:.1} MiB, last {:.1} MiB, max {:.1} MiB, errors {}",
            soak_secs,
            cell.rps,
            fmt_us(cell.p99_us),
            fmt_us(cell.p999_us),
            after_warmup as f64 / 1024.0,
            last as f64 / 1024.0,
            max as f64 / 1024.0,
            cell.errors + cell.non_ok
        );
        soak = json!({
            "cell": cell.to_json(),
            "rss_kib_at_10s": after_warmup, "rss_kib_last": last, "rss_kib_max": max,
            "rss_samples": samples.iter().map(|(t, r)| json!([t, r])).collect::<Vec<_>>(),
        });
    }

    let peak = [rss_kib(sg.pid()).1, rss_kib(noop_server.pid()).1];
    let log_bytes = std::fs::metadata(&sg.log).map_or(0, |m| m.len());
    let drain_sg = sg.stop();
    let drain_noop = noop_server.stop();
    let load_at_end = loadavg();

    let report = markdown(&cells);
    println!("\n## Load benchmark\n");
    println!("machine: {machine}\nloadavg at start: {load_at_start}; at end: {load_at_end}\n");
    println!(
        "start-to-ready (ms, sorted): stackgate {:?}, noop {:?}",
        ready[0].1, ready[1].1
    );
    println!(
        "RSS idle: stackgate {:.1} MiB, noop {:.1} MiB; peak (VmHWM): stackgate {:.1} MiB, noop {:.1} MiB",
        idle_rss[0] as f64 / 1024.0,
        idle_rss[1] as f64 / 1024.0,
        peak[0] as f64 / 1024.0,
        peak[1] as f64 / 1024.0
    );
    println!(
        "SIGTERM to exit: stackgate {:.1} ms, noop {:.1} ms; stackgate log written: {:.1} MiB\n",
        drain_sg.as_secs_f64() * 1e3,
        drain_noop.as_secs_f64() * 1e3,
        log_bytes as f64 / 1048576.0
    );
    println!("{report}");

    if let Some(path) = &args.json {
        let value = json!({
            "machine": machine,
            "loadavg_start": load_at_start, "loadavg_end": load_at_end,
            "args": format!("{args:?}"),
            "start_to_ready_ms": {"stackgate": ready[0].1, "noop": ready[1].1},
            "rss_idle_kib": {"stackgate": idle_rss[0], "noop": idle_rss[1]},
            "rss_peak_kib": {"stackgate": peak[0], "noop": peak[1]},
            "sigterm_to_exit_ms": {"stackgate": drain_sg.as_secs_f64() * 1e3, "noop": drain_noop.as_secs_f64() * 1e3},
            "sanity": sanity,
            "cells": cells.iter().map(Cell::to_json).collect::<Vec<_>>(),
            "soak": soak,
        });
        std::fs::write(
            path,
            serde_json::to_vec_pretty(&value).expect("JSON report"),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("loadbench: wrote {}", path.display());
    }
}
