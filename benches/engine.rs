//! Criterion micro benchmarks of the engine, one case per rule family (see
//! `support/cases.rs`, `ENGINE_CASES`):
//!
//! * `evaluate/<case>`: `Engine::evaluate` on an already decoded request's subject — the policy cost
//!   (budget: ≤ 20 µs for a typical ConfigMap cloud config);
//! * `handle/<case>`: `admission::handle` on the request bytes — decode, evaluate, encode,
//!   span and metrics: everything the server does per review besides HTTP and TLS.
//!
//! ```text
//! cargo bench --bench engine
//! cargo bench --bench engine --features counting-allocator   # as `serve` runs: counted
//! ```
//!
//! With the `counting-allocator` feature the bench installs the binary's global allocator
//! (`alloc_account::Counting`) and runs each iteration inside a memory scope of the default
//! budget, so the difference between the two runs is the memory budget's overhead.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use stackgate::admission::{self, Webhook};
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;

#[path = "support/cases.rs"]
mod cases;

#[cfg(feature = "counting-allocator")]
#[global_allocator]
static ALLOCATOR: alloc_account::Counting = alloc_account::Counting::SYSTEM;

/// The memory account `serve` opens around each review, when the bench counts.
fn account() -> Option<stackgate::budget::MemoryScope> {
    cfg!(feature = "counting-allocator").then(|| {
        stackgate::budget::MemoryScope::enter(stackgate::server::DEFAULT_MAX_EVALUATION_MEMORY)
    })
}

/// The engine the load bench's server runs: the embedded policies, with the namespace
/// `openstack` pinned to a static release so the Glance case is annotated.
fn engine() -> Engine {
    let policies = PolicySet::from_files(cases::bench_policy_files(), "bench".to_owned())
        .expect("bench policies load");
    Engine::new(policies)
}

fn webhook(path: &str) -> Webhook {
    if path.starts_with("/validate") {
        Webhook::Validate
    } else {
        Webhook::Mutate
    }
}

fn decode(body: &[u8]) -> AdmissionRequest<DynamicObject> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).expect("fixture is an AdmissionReview");
    review.try_into().expect("fixture has a request")
}

fn bench_engine(c: &mut Criterion) {
    let engine = engine();
    let metrics = Metrics::new();
    let mut loaded = Vec::new();
    for case in cases::ENGINE_CASES {
        match case.body() {
            Ok(body) => loaded.push((case, body)),
            Err(why) => eprintln!("engine bench: skipping {}: {why}", case.name),
        }
    }

    let mut group = c.benchmark_group("evaluate");
    for (case, body) in &loaded {
        let request = decode(body);
        let subject = stackgate::admission::subject_of(&request);
        let verdict = engine.evaluate(&subject);
        eprintln!(
            "engine bench: {} ({} bytes): {} patch ops, {} denials, {} warnings — {}",
            case.name,
            body.len(),
            verdict.patch.len(),
            verdict.denials.len(),
            verdict.warnings.len(),
            case.about
        );
        group.bench_function(case.name, |b| {
            b.iter(|| {
                let _account = account();
                engine.evaluate(black_box(&subject))
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("handle");
    for (case, body) in &loaded {
        let hook = webhook(case.path);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(case.name, |b| {
            b.iter(|| {
                let _account = account();
                admission::handle(&engine, hook, black_box(body), &metrics)
            })
        });
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
        targets = bench_engine
    }
}
criterion_main!(entry::benches);
