//! The webhooks called in process with the embedded policies, as the apiserver would post a
//! `kubectl create` of an object: shared by the carrier tests that compare them with `check`.

#![allow(dead_code)] // Each test binary uses a part of this module.

use serde_json::Value;
use stackgate::admission::{self, Webhook};
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;

#[path = "review.rs"]
mod review;

/// The engine over the embedded policies.
pub fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

/// `webhook`'s `response` to a CREATE review of `object` with request uid `uid`.
pub fn respond(webhook: Webhook, object: &Value, uid: &str) -> Value {
    let body = review::review_for(object, uid);
    let reply = admission::handle(
        &engine(),
        webhook,
        &serde_json::to_vec(&body).expect("encode"),
        &Metrics::new(),
    );
    assert_eq!(reply.status, 200);
    serde_json::from_slice::<Value>(&reply.body).expect("review")["response"].clone()
}

/// The validating webhook's answer: (allowed, denial message and warnings).
pub fn validate(object: &Value, uid: &str) -> (bool, String) {
    let response = respond(Webhook::Validate, object, uid);
    let allowed = response["allowed"].as_bool().expect("allowed");
    let mut text = response["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for w in response["warnings"].as_array().into_iter().flatten() {
        text.push('\n');
        text.push_str(w.as_str().unwrap_or_default());
    }
    (allowed, text)
}
