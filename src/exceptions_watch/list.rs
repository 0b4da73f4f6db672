//! `stackgate exceptions list`: every StackgateException of a directory or of the cluster's
//! accepted namespaces with its state at an instant, so the platform team sees what ends
//! soon, what has ended and what stackgate refuses, before it bites.

use std::path::Path;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::json;

use super::{Objects, api_resource};
use crate::engine::Engine;
use crate::policy::exception::{
    Exception, ExceptionError, ExceptionRules, ExceptionState, MAX_EXCEPTIONS, exception_files,
    read_error, read_exception_file,
};

/// One exception, or one document stackgate refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// `ns/name`, or the file of a refused document.
    pub id: String,
    /// The policy it exempts from (None: refused before the policy was known to be valid).
    pub policy: Option<String>,
    /// `active`, `expiring`, `expired` or `invalid`.
    pub state: &'static str,
    /// Its `expires` (RFC 3339); None for one that never expires (`expires` not required)
    /// and for a refused one.
    pub expires: Option<String>,
    /// Whole days left while expiring.
    pub days_left: Option<i64>,
    /// Its ticket.
    pub ticket: Option<String>,
    /// Its reason, or why it is refused.
    pub detail: String,
}

/// Why the exceptions could not be listed at all (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The path cannot be read (only [`ExceptionError::Read`] comes from reading files).
    #[error(transparent)]
    Read(#[from] ExceptionError),
    /// A namespace cannot be listed (other than a missing CRD).
    #[error("cannot list StackgateExceptions in {namespace}: {source}")]
    Cluster {
        /// The namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

fn row_of(e: &Exception, rules: &ExceptionRules, now: Timestamp) -> Row {
    let state = e.state(now, rules);
    Row {
        id: format!("{}/{}", e.namespace, e.name),
        policy: Some(e.policy.clone()),
        state: state.as_str(),
        expires: e.expires.map(|t| t.to_string()),
        days_left: match state {
            ExceptionState::Expiring { days_left } => Some(days_left),
            ExceptionState::Active | ExceptionState::Expired => None,
        },
        ticket: e.ticket.clone(),
        detail: e.reason.clone(),
    }
}

fn invalid(id: String, reason: String) -> Row {
    Row {
        id,
        policy: None,
        state: "invalid",
        expires: None,
        days_left: None,
        ticket: None,
        detail: reason,
    }
}

/// The rows of `path` (a file or a directory of `*.yaml` / `*.yml`, each a YAML stream): a
/// file with a refused document is one `invalid` row naming the file and the reason.
pub fn of_files(
    path: &Path,
    engine: &Engine,
    rules: &ExceptionRules,
    now: Timestamp,
) -> Result<Vec<Row>, ListError> {
    let mut rows = Vec::new();
    for file in exception_files(path)? {
        let text = read_exception_file(&file)?;
        let name = file.display().to_string();
        match Exception::parse_all(&name, &text, engine.policies(), rules, now) {
            Ok(exceptions) => rows.extend(exceptions.iter().map(|e| row_of(e, rules, now))),
            Err(error) => rows.push(invalid(name, error.to_string())),
        }
        if rows.len() > MAX_EXCEPTIONS {
            return Err(read_error(path, format!("more than {MAX_EXCEPTIONS} exceptions")).into());
        }
    }
    Ok(rows)
}

/// The rows of the cluster's exceptions in `rules.namespaces` (a missing CRD: none).
pub async fn of_cluster(
    client: &kube::Client,
    engine: &Engine,
    rules: &ExceptionRules,
    now: Timestamp,
) -> Result<Vec<Row>, ListError> {
    let resource = api_resource();
    let mut objects = Objects::default();
    for namespace in &rules.namespaces {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let params = ListParams::default().limit(u32::try_from(MAX_EXCEPTIONS).unwrap_or(u32::MAX));
        match api.list(&params).await {
            Ok(list) => {
                for object in &list.items {
                    objects.apply(object, engine, rules, now);
                }
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(ListError::Cluster {
                    namespace: namespace.clone(),
                    source,
                });
            }
        }
    }
    Ok(objects
        .entries()
        .map(|((ns, name), parsed)| match parsed {
            Ok(e) => row_of(e, rules, now),
            Err(reason) => invalid(format!("{ns}/{name}"), reason.clone()),
        })
        .collect())
}

/// A text table: one line per row, the reason (or refusal) last.
pub fn text(rows: &[Row]) -> String {
    let mut out = String::new();
    let width = rows.iter().map(|r| r.id.len()).max().unwrap_or(4).max(4);
    out.push_str(&format!(
        "{:width$}  {:22}  {:14}  {:20}  DETAIL\n",
        "NAME", "POLICY", "STATE", "EXPIRES"
    ));
    for r in rows {
        let state = match r.days_left {
            Some(days) => format!("{} ({days}d)", r.state),
            None => r.state.to_owned(),
        };
        let detail = match &r.ticket {
            Some(ticket) => format!("{} [{ticket}]", r.detail),
            None => r.detail.clone(),
        };
        out.push_str(&format!(
            "{:width$}  {:22}  {:14}  {:20}  {}\n",
            r.id,
            r.policy.as_deref().unwrap_or("-"),
            state,
            match (&r.expires, r.state) {
                (Some(expires), _) => expires.as_str(),
                (None, "invalid") => "-",
                (None, _) => "no expiry",
            },
            detail.replace('\n', " ")
        ));
    }
    out
}

/// One JSON document: `{"exceptions": [...]}`.
pub fn json(rows: &[Row]) -> String {
    let items: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({"name": r.id, "policy": r.policy, "state": r.state, "expires": r.expires,
                   "daysLeft": r.days_left, "ticket": r.ticket, "detail": r.detail})
        })
        .collect();
    let mut out = serde_json::to_string_pretty(&json!({"exceptions": items})).unwrap_or_default();
    out.push('\n');
    out
}
