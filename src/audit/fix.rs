//! `stackgate audit --fix`: the mutating webhook's edits, written through the API.
//!
//! A preview unless `--yes`. Each write is a JSON Patch that starts with a `test` of
//! `metadata.resourceVersion` against the version the edit was computed from, followed by
//! the engine's own patch (the lossless edit the webhook would make), sent with the field
//! manager [`super::FIELD_MANAGER`]: if the object changed since it was read, the API server
//! refuses the whole patch and nothing is written (never a blind overwrite). The write goes
//! through admission like any other. Nothing is restarted; the CCM reads its cloud config
//! only at start, so the summary prints the restart commands.

use std::fmt::Write as _;

use json_patch::{Patch, PatchOperation, TestOperation};
use jsonptr::PointerBuf;
use kube::api::{Api, PatchParams};
use kube::core::DynamicObject;

use super::PendingFix;
use super::restart::{StaleWorkload, Workload};

/// What happened to one pending fix.
#[derive(Debug, Clone)]
pub enum FixResult {
    /// Not written: a preview (`--fix` without `--yes`).
    Previewed,
    /// Written; the object as the API server stored it.
    Written(Box<DynamicObject>),
    /// Not written, and why.
    Failed(String),
}

/// One pending fix and what happened to it.
#[derive(Debug, Clone)]
pub struct FixOutcome {
    /// `kind/namespace/name`.
    pub entry: String,
    /// What happened.
    pub result: FixResult,
}

/// The JSON Patch `--fix --yes` sends: a `test` of the resourceVersion the edit was computed
/// from, then the engine's patch.
pub fn guarded_patch(fix: &PendingFix) -> Patch {
    let mut ops = Vec::with_capacity(fix.patch.len() + 1);
    ops.push(PatchOperation::Test(TestOperation {
        path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
        value: serde_json::Value::String(fix.resource_version.clone()),
    }));
    ops.extend(fix.patch.iter().cloned());
    Patch(ops)
}

/// Writes each fix (with `yes`), one request per object; without `yes` only previews.
pub async fn apply(client: &kube::Client, fixes: &[PendingFix], yes: bool) -> Vec<FixOutcome> {
    let mut out = Vec::with_capacity(fixes.len());
    for fix in fixes {
        let result = if !yes {
            FixResult::Previewed
        } else if fix.resource_version.is_empty() {
            FixResult::Failed(
                "the object as read has no resourceVersion, so the write cannot be made \
                 conditional on it; not written"
                    .to_owned(),
            )
        } else {
            let api: Api<DynamicObject> = match &fix.namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &fix.resource),
                None => Api::all_with(client.clone(), &fix.resource),
            };
            let params = PatchParams {
                field_manager: Some(super::FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            match api
                .patch(
                    &fix.name,
                    &params,
                    &kube::api::Patch::Json::<()>(guarded_patch(fix)),
                )
                .await
            {
                Ok(object) => FixResult::Written(Box::new(object)),
                Err(kube::Error::Api(s)) if matches!(s.code, 409 | 422) => {
                    FixResult::Failed(format!(
                        "{} {}: the object changed since the audit read it (the resourceVersion \
                         test failed) or the API server refused the edit; nothing was written. \
                         Run the audit again",
                        s.code, s.reason
                    ))
                }
                Err(kube::Error::Api(s)) => {
                    FixResult::Failed(format!("{} {}: not written", s.code, s.reason))
                }
                Err(e) => FixResult::Failed(format!("{e}: not written")),
            }
        };
        out.push(FixOutcome {
            entry: fix.entry.clone(),
            result,
        });
    }
    out
}

/// What `--fix` did, for people, with the restart commands of the CCM workloads: those
/// running an older config now, and, when a cloud config was (or would be) written, every
/// CCM workload the audit found (stackgate never restarts anything itself).
pub fn summary(
    outcomes: &[FixOutcome],
    stale: &[StaleWorkload],
    workloads: &[Workload],
    yes: bool,
) -> String {
    let mut out = String::new();
    let written = outcomes
        .iter()
        .filter(|o| matches!(o.result, FixResult::Written(_)))
        .count();
    for o in outcomes {
        match &o.result {
            FixResult::Previewed => {}
            FixResult::Written(_) => {
                let _ = writeln!(
                    out,
                    "{}: fixed: patched through the API (field manager {}, resourceVersion \
                     precondition)",
                    o.entry,
                    super::FIELD_MANAGER
                );
            }
            FixResult::Failed(why) => {
                let _ = writeln!(out, "{}: error [fix] {why}", o.entry);
            }
        }
    }
    if outcomes.is_empty() {
        let _ = writeln!(
            out,
            "stackgate audit --fix: nothing to fix (no object has an edit the mutating webhook \
             would make)"
        );
    } else if yes {
        let _ = writeln!(
            out,
            "stackgate audit --fix: {written} of {} object{} patched",
            outcomes.len(),
            if outcomes.len() == 1 { "" } else { "s" }
        );
    } else {
        let _ = writeln!(
            out,
            "stackgate audit --fix: preview only, nothing written; {} object{} would be patched \
             (add --yes to write them: a JSON Patch with a resourceVersion precondition, field \
             manager {})",
            outcomes.len(),
            if outcomes.len() == 1 { "" } else { "s" },
            super::FIELD_MANAGER
        );
    }
    let mut commands: Vec<String> = stale.iter().map(|s| s.restart_command.clone()).collect();
    if !outcomes.is_empty() && (written > 0 || !yes) {
        commands.extend(workloads.iter().map(Workload::restart_command));
    }
    commands.sort();
    commands.dedup();
    if !commands.is_empty() {
        let _ = writeln!(
            out,
            "The CCM reads its cloud config only at start; stackgate restarts nothing. Once the \
             config is right, restart it:"
        );
        for c in commands {
            let _ = writeln!(out, "  {c}");
        }
    }
    out
}
