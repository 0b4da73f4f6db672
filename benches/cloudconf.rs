//! Criterion micro benchmarks of the lossless gcfg reader/editor (`stackgate::cloudconf`) on
//! two inputs:
//!
//! * `upstream`: cloud-provider-openstack's example cloud config
//!   (`tests/fixtures/cloudconf/cpo-cloud-config.ini`, 10 lines);
//! * `large`: a generated config with `[Global]`, `[LoadBalancer]` and 500
//!   `[LoadBalancerClass "class-N"]` subsections of 5 keys each (about 100 KB).
//!
//! Operations: `parse`, `edit` (insert `provider-requires-serial-api-calls = true` into
//! `[LoadBalancer]` on a clone of the parsed document, as the serial rule does), `serialize`
//! (`to_text`) and `check` (the CCM schema pass the integrity rule runs).
//!
//! `hostile/<shape>/<lines>`: parse plus the four cloud-config rule families (what the engine
//! runs per config) on generated hostile configs at 20 000 and 200 000 lines. The time per
//! line must stay flat between the two sizes (issue #12: the credential rule was quadratic in
//! repeated keys, the did-you-mean search in name length); `tests/hostile_rules.rs` holds the
//! generous regression bound.
//!
//! ```text
//! cargo bench --bench cloudconf
//! cargo bench --bench cloudconf -- hostile
//! ```

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use stackgate::cloudconf::{self, Document};
use stackgate::rules::{self, ConfigView, RuleOutput};

/// The generated config: many subsections, the `[LoadBalancer]` section first so the edit
/// inserts in the middle of the text.
fn large_config(classes: usize) -> String {
    let mut text = String::from(
        "[Global]\nauth-url = https://keystone.example.com:5000/v3\n\
         application-credential-id = 0123456789abcdef\n\
         application-credential-secret = not-a-real-secret\nregion = RegionOne\n\n\
         [LoadBalancer]\nuse-octavia = true\nfloating-network-id = 1d5f0c2e-9ab1-4f0e-8f5e-2b6f1c1d0e11\n\
         subnet-id = 7a1c9e55-3f2b-4c4e-9d8e-5b7a6c1d2e33\nlb-provider = amphora\n\n",
    );
    for n in 0..classes {
        text.push_str(&format!(
            "[LoadBalancerClass \"class-{n}\"]\n\
             floating-network-id = 1d5f0c2e-9ab1-4f0e-8f5e-{n:012}\n\
             floating-subnet-id = 2e6a1d3f-8bc2-4a1f-9e6f-{n:012}\n\
             subnet-id = 7a1c9e55-3f2b-4c4e-9d8e-{n:012}\n\
             member-subnet-id = 8b2d0f66-4a3c-4d5f-8e9f-{n:012}\n\
             network-id = 9c3e1a77-5b4d-4e6a-9f0a-{n:012} ; class {n}\n\n"
        ));
    }
    text
}

fn inputs() -> Vec<(&'static str, String)> {
    let upstream =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cloudconf/cpo-cloud-config.ini");
    let upstream = std::fs::read_to_string(&upstream)
        .unwrap_or_else(|e| panic!("{}: {e}", upstream.display()));
    vec![("upstream", upstream), ("large", large_config(500))]
}

fn bench_cloudconf(c: &mut Criterion) {
    for (name, text) in inputs() {
        let doc = Document::parse(&text).expect("benchmark input parses");
        let mut group = c.benchmark_group(format!("cloudconf/{name}"));
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function("parse", |b| b.iter(|| Document::parse(black_box(&text))));
        group.bench_function("edit", |b| {
            b.iter_batched(
                || doc.clone(),
                |mut d| {
                    let summary =
                        d.set("LoadBalancer", "provider-requires-serial-api-calls", "true");
                    (summary, d)
                },
                BatchSize::SmallInput,
            )
        });
        group.bench_function("serialize", |b| b.iter(|| black_box(&doc).to_text()));
        group.bench_function("check", |b| b.iter(|| cloudconf::check(black_box(&doc))));
        group.finish();
    }
}

/// `n` lines made by `line(i)` under `header`.
fn lines(header: &str, n: usize, line: impl Fn(usize) -> String) -> String {
    let mut text = String::from(header);
    for i in 0..n {
        text.push_str(&line(i));
        text.push('\n');
    }
    text
}

/// The hostile shapes of `tests/hostile_rules.rs`, `n` lines each.
fn hostile(n: usize) -> Vec<(&'static str, String)> {
    vec![
        (
            "repeated-password",
            lines("[Global]\n", n, |i| format!("password=s3cr3t-{i}")),
        ),
        (
            "unknown-keys",
            lines("[Global]\n", n, |i| format!("unknown-key-{i}=v")),
        ),
        (
            "did-you-mean",
            lines("[Global]\n", n, |i| {
                format!("domain-{}={i}", ["ia", "nme", "idd", "nam"][i % 4])
            }),
        ),
        (
            "unknown-sections",
            lines("", n / 2, |i| format!("[Section{i}]\nk=v")),
        ),
        (
            "repeated-sections",
            lines("", n / 2, |_| {
                "[LoadBalancer]\nlb-method=ROUND_ROBIN".to_owned()
            }),
        ),
        (
            // A hundredth of the lines, each 1 000 characters long: the same bytes per line
            // count as the others at ten times fewer lines.
            "long-lines",
            lines("[Global]\n", n / 100, |i| {
                format!("{}{i}=v", "x".repeat(1_000))
            }),
        ),
        (
            "wrapped-credentials",
            lines("[Global]\n", n / 2, |i| format!("password =\nS3cr3t-{i}")),
        ),
    ]
}

/// Parse plus every cloud-config rule family, as the engine runs them on a ConfigMap.
fn all_rules(text: &str) -> Vec<RuleOutput> {
    let Ok(doc) = Document::parse(text) else {
        return Vec::new();
    };
    let view = ConfigView {
        doc: Ok(&doc),
        secret: false,
        configmap: true,
        values_source: false,
        ccm_version: None,
    };
    vec![
        rules::serial::check(&view),
        rules::integrity::check(&view),
        rules::known_bad::check(&view),
        rules::credentials::check(&view),
    ]
}

fn bench_hostile(c: &mut Criterion) {
    let mut group = c.benchmark_group("hostile");
    group.sample_size(10);
    for n in [20_000, 200_000] {
        for (name, text) in hostile(n) {
            // Per line: flat between the sizes means linear.
            group.throughput(Throughput::Elements(n as u64));
            group.bench_function(format!("{name}/{n}"), |b| {
                b.iter(|| all_rules(black_box(&text)))
            });
        }
    }
    group.finish();
}

/// The criterion group (in a module: the macro generates an undocumented `pub fn`).
mod entry {
    use super::*;

    criterion_group! {
        name = benches;
        // Short runs: the machine this is tuned for has 2 shared cores.
        config = Criterion::default()
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(50);
        targets = bench_cloudconf, bench_hostile
    }
}
criterion_main!(entry::benches);
