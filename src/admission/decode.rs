//! Decoding an AdmissionReview without amplification.
//!
//! A generic `serde_json::Value` tree costs far more than the JSON it came from: a
//! one-entry object such as `{"a":0}` (7 bytes) becomes a B-tree leaf of about 630 bytes.
//! Decoding whole objects that way let one 3 MiB HelmRelease take half a gigabyte (issue 12).
//! So the review is decoded in two steps:
//!
//! 1. The review itself, with `object` and `oldObject` kept as borrowed raw JSON text
//!    ([`RawValue`]): no copy, no tree.
//! 2. Each object, into a tree that holds **only the fields the engine reads**, chosen by the
//!    request's kind ([`Reading`]). Skipped subtrees are scanned, never built: `managedFields`,
//!    `status` (but for Cluster API objects, whose addresses the guard reads), a ConfigMap's or
//!    Secret's data keys that no site names, and the Helm values of charts that are not the
//!    CCM's. What is kept is charged against a decoded-memory budget ([`MAX_DECODED_BYTES`]);
//!    a review that needs more is answered as too complex, never half-read.
//!
//! Where a kept field depends on another one that may come later in the JSON (the data keys
//! depend on the name and labels; whether values are read depends on the chart reference),
//! the object is read twice: first without the dependent part, then the dependent part alone.
//! Scanning raw JSON is cheap next to building trees, and the second pass only runs for
//! objects that are sites. A ConfigMap or Secret whose `metadata` comes before its data (the
//! order the API server writes) is read once: its data keys are decided as soon as its
//! metadata has been read.

use std::cell::{Cell, RefCell};
use std::fmt;

use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, ObjectMeta, TypeMeta};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::budget::{Cancel, Exhausted};
use crate::facts::ccm_config::CcmConfigReads;
use crate::short_text::ShortText;
use crate::sites::{SiteKind, SitesDocument, payload};

/// Most decoded memory (estimated, see `Cost`) the objects of one review may take. Objects
/// the engine reads (cloud-config sites, the CCM chart's values, pod templates, OpenStack
/// service CRs, Machines) are a few hundred KiB decoded at most; 16 MiB leaves room for the
/// largest legitimate ones while keeping a hostile review's cost a small fixed amount.
pub const MAX_DECODED_BYTES: usize = 16 * 1024 * 1024;

/// Arrays and objects that may be nested in one object stackgate reads, its own braces
/// included (in the review envelope, counted from the review's braces). This is serde_json's
/// own recursion limit, which its `Deserializer` applies to everything it builds: it starts
/// at `remaining_depth: 128` and refuses the container that brings it to 0, "recursion limit
/// exceeded" (serde_json 1.0.154, src/de.rs, `check_recursion!`; stackgate does not enable
/// the `unbounded_depth` feature). Subtrees stackgate skips are scanned by serde_json's
/// iterative `ignore_value` and may nest deeper without using stack; what is built is at
/// most this deep, which keeps every recursive walk of a decoded object (conversions, `Drop`
/// of the tree) on a small stack. Kubernetes objects nest a few tens of levels.
pub const MAX_JSON_DEPTH: usize = 127;

/// How often (in decoded JSON values) the decoder looks at the cancellation flag.
const CANCEL_CHECK_EVERY: usize = 4096;

/// Why a review could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON, or not the shape of an AdmissionReview (reduced to category and position by
    /// the caller; the error text itself may quote the body).
    #[error("request body does not decode")]
    Json(#[from] serde_json::Error),
    /// An AdmissionReview without a request.
    #[error("the body is an AdmissionReview without a request")]
    NoRequest,
    /// The fields stackgate reads would take more than the decoded-memory budget.
    #[error(
        "the object is too large or too deeply structured to read: the fields stackgate reads \
         would take more than {limit} bytes in memory"
    )]
    TooComplex {
        /// The budget in bytes ([`MAX_DECODED_BYTES`]).
        limit: usize,
    },
    /// A field stackgate reads nests deeper than [`MAX_JSON_DEPTH`].
    #[error(
        "the object nests deeper than {limit} levels where stackgate reads it, over \
         stackgate's limit (line {line}, column {column})"
    )]
    TooDeep {
        /// The cap ([`MAX_JSON_DEPTH`]).
        limit: usize,
        /// 1-based line of the JSON text where the cap was reached (the object's text, or the
        /// review's when the review itself nests too deep).
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// Decoding stopped: the request deadline passed, or the review's memory budget ran out.
    #[error(transparent)]
    Exhausted(#[from] Exhausted),
}

impl DecodeError {
    /// A serde_json error, told apart when it is the depth cap ([`MAX_JSON_DEPTH`]):
    /// serde_json reports it as a syntax error whose text starts "recursion limit exceeded"
    /// (its `ErrorCode` is private; the text is its `Display`, stable since 1.0).
    fn json(error: serde_json::Error) -> Self {
        if error.to_string().starts_with("recursion limit exceeded") {
            DecodeError::TooDeep {
                limit: MAX_JSON_DEPTH,
                line: error.line(),
                column: error.column(),
            }
        } else {
            DecodeError::Json(error)
        }
    }
}

/// A decoded review: its `apiVersion` and the request with its objects pruned to what the
/// engine reads.
#[derive(Debug)]
pub struct Decoded {
    /// The review's `apiVersion` (only `admission.k8s.io/v1` is evaluated).
    pub api_version: String,
    /// The request, in kube's type, so that responses are built the usual way.
    pub request: AdmissionRequest<DynamicObject>,
    /// Estimated decoded size of both objects, in bytes.
    pub decoded_bytes: usize,
}

#[derive(Deserialize)]
struct WireReview<'a> {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(borrow)]
    request: Option<WireRequest<'a>>,
}

/// `AdmissionRequest` with the objects left as raw JSON text. `options` is not read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest<'a> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    #[serde(default)]
    user_info: k8s_openapi::api::authentication::v1::UserInfo,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
    #[serde(borrow, default)]
    old_object: Option<&'a RawValue>,
    #[serde(default)]
    dry_run: bool,
}

/// Decodes `body` as an AdmissionReview, reading of each object only what the engine needs
/// for the request's kind, within `limit` bytes of decoded memory.
pub fn decode_review(
    body: &[u8],
    sites: &SitesDocument,
    reads: Option<&CcmConfigReads>,
    limit: usize,
    cancel: &Cancel,
) -> Result<Decoded, DecodeError> {
    let wire: WireReview<'_> = serde_json::from_slice(body).map_err(DecodeError::json)?;
    let request = wire.request.ok_or(DecodeError::NoRequest)?;
    let reading = Reading::for_kind(&request.kind);
    let mut budget = Budget {
        limit,
        spent: 0,
        cancel,
    };
    let object = request
        .object
        .map(|raw| decode_object(raw, &request.kind, reading, (sites, reads), &mut budget))
        .transpose()?;
    let old_object = request
        .old_object
        .map(|raw| decode_object(raw, &request.kind, reading, (sites, reads), &mut budget))
        .transpose()?;
    Ok(Decoded {
        api_version: wire.api_version.clone(),
        decoded_bytes: budget.spent,
        request: AdmissionRequest {
            types: TypeMeta {
                api_version: wire.api_version,
                kind: wire.kind,
            },
            uid: request.uid,
            kind: request.kind,
            resource: request.resource,
            sub_resource: request.sub_resource,
            request_kind: request.request_kind,
            request_resource: request.request_resource,
            request_sub_resource: request.request_sub_resource,
            // The request's own name and namespace, bounded once here: the span, the logs,
            // the Subject and every answer take them from this request.
            name: ShortText::name(&request.name).into_string(),
            namespace: request
                .namespace
                .as_deref()
                .map(|ns| ShortText::name(ns).into_string()),
            operation: request.operation,
            user_info: request.user_info,
            object,
            old_object,
            dry_run: request.dry_run,
            options: None,
        },
    })
}

/// Which fields of an object the engine reads, by the request's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// core/v1 ConfigMap or Secret: metadata, `type`, and the data keys that sites name.
    Site(SiteKind),
    /// Everything but `managedFields`, `status` (kept for Cluster API kinds) and the Helm
    /// values of charts other than the CCM's.
    Object {
        /// Keep `status` (Cluster API: the guard reads a Machine's addresses).
        status: bool,
    },
}

impl Reading {
    fn for_kind(gvk: &GroupVersionKind) -> Self {
        match (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) {
            ("", "v1", "ConfigMap") => Reading::Site(SiteKind::ConfigMap),
            ("", "v1", "Secret") => Reading::Site(SiteKind::Secret),
            (group, _, _) => Reading::Object {
                status: group == "cluster.x-k8s.io",
            },
        }
    }
}

struct Budget<'c> {
    limit: usize,
    spent: usize,
    cancel: &'c Cancel,
}

fn decode_object(
    raw: &RawValue,
    gvk: &GroupVersionKind,
    reading: Reading,
    (sites, reads): (&SitesDocument, Option<&CcmConfigReads>),
    budget: &mut Budget<'_>,
) -> Result<DynamicObject, DecodeError> {
    match reading {
        Reading::Site(kind) => {
            // A ConfigMap may be a ClusterResourceSet payload whatever its metadata says.
            // Asked once per object: the raw text is scanned, and both readers need it.
            let payload = kind == SiteKind::ConfigMap && payload::worth_parsing(raw.get(), sites);
            let before = budget.spent;
            match decode_site_one_pass(raw, kind, payload, (sites, reads), budget) {
                Ok(OnePass::Read(object)) => return Ok(object),
                // The shell is what the two-pass reader's first reading would give: only
                // its second reading is left.
                Ok(OnePass::Shell { root, meta, spent }) => {
                    budget.spent = spent;
                    let keys = site_keys(kind, &meta, sites, reads);
                    return read_site_data(raw, kind, payload, (root, meta, keys), sites, budget);
                }
                Ok(OnePass::Again) => {}
                // Which error a malformed object gets (and where) is the two-pass reader's.
                Err(OnePassError::Retry) => {}
                Err(OnePassError::Final(e)) => return Err(e),
            }
            budget.spent = before;
            decode_site_two_pass(raw, kind, payload, (sites, reads), budget)
        }
        Reading::Object { status } => {
            let before = budget.spent;
            let shell = |path: &[Seg]| object_fields(path, status, false);
            let (root, total) = prune(raw.get(), &shell, budget)?;
            budget.spent = total;
            let meta = metadata_of(&root)?;
            let object = into_object(root, meta)?;
            if !crate::sites::helm::holds_chart_values(gvk, &object, sites) {
                return Ok(object);
            }
            // The CCM chart's values: read again, values included. The first reading is
            // dropped first, so only one of them is ever held.
            drop(object);
            budget.spent = before;
            let full = |path: &[Seg]| object_fields(path, status, true);
            let (root, total) = prune(raw.get(), &full, budget)?;
            budget.spent = total;
            let meta = metadata_of(&root)?;
            into_object(root, meta)
        }
    }
}

/// What the one-pass site reader made of an object.
enum OnePass {
    /// The object, read once.
    Read(DynamicObject),
    /// No data field was read (the data came before the metadata that names its keys, or a
    /// payload Secret's `type` came after its data), so the tree read is the two-pass reader's
    /// shell, charged alike: `spent` is the new total, `meta` the object's last `metadata`.
    Shell {
        root: Value,
        meta: ObjectMeta,
        spent: usize,
    },
    /// Read it again the two-pass way.
    Again,
}

/// Why the one-pass site reader gave up.
enum OnePassError {
    /// An error the two-pass reader would give as well, at the same place.
    Final(DecodeError),
    /// An error the two-pass reader may report differently: read the object again that way.
    Retry,
}

/// What the one-pass site reader has learnt so far about the object it reads.
#[derive(Default)]
struct SiteSight {
    /// The object's metadata (the last `metadata` read) and the data keys it names.
    meta: Option<(ObjectMeta, Vec<String>)>,
    /// `metadata` did not deserialize.
    bad_meta: bool,
    /// A `data` or `stringData` field was met before `metadata`, or `metadata` came again
    /// after one: the keys decided may not be the ones the final metadata names.
    out_of_order: bool,
    /// A `data` or `stringData` field was met.
    data_seen: bool,
    /// A `data` or `stringData` field was read (not skipped): the tree is more than the shell.
    data_read: bool,
}

/// Reads a ConfigMap or Secret in one pass over its JSON: the shell, and the data keys sites
/// name as soon as the metadata that names them has been read. The API server writes
/// `metadata` before `data` (Go field order), so this is the path real reviews take. When no
/// data field was read (data before metadata, or a ClusterResourceSet payload Secret, whose
/// `type` follows its data, with no key wanted yet) what was read is the two-pass reader's
/// shell ([`OnePass::Shell`]); any other disorder or an error returns [`OnePass::Again`] or
/// [`OnePassError::Retry`], and the caller reads it the two-pass way, whose result this one
/// equals field for field and byte for byte of the decoded-memory charge.
///
/// `payload`: the ConfigMap may be a ClusterResourceSet payload ([`payload::worth_parsing`]
/// on its raw text); a Secret is one by its `type`, read after its data, so it is first read
/// as not being one.
fn decode_site_one_pass(
    raw: &RawValue,
    kind: SiteKind,
    payload: bool,
    (sites, reads): (&SitesDocument, Option<&CcmConfigReads>),
    budget: &mut Budget<'_>,
) -> Result<OnePass, OnePassError> {
    let sight = RefCell::new(SiteSight::default());
    let decide = |path: &[Seg]| match path {
        [f] if is(f, "data") || is(f, "stringData") => {
            let mut s = sight.borrow_mut();
            s.data_seen = true;
            match &s.meta {
                None => {
                    s.out_of_order = true;
                    Decision::Skip
                }
                // No key wanted: the two-pass reader does not read the data at all.
                Some((_, keys)) if keys.is_empty() && !payload => Decision::Skip,
                Some(_) => {
                    s.data_read = true;
                    Decision::Descend
                }
            }
        }
        [f, _] if is(f, "data") || is(f, "stringData") => match &sight.borrow().meta {
            Some((_, keys)) => site_data(path, keys, payload),
            None => Decision::Skip,
        },
        _ => site_shell(path),
    };
    let on_top = |key: &str, value: &Value| {
        if key != "metadata" {
            return;
        }
        let mut s = sight.borrow_mut();
        if s.data_seen {
            s.out_of_order = true;
        }
        match metadata_from(value) {
            Ok(meta) => {
                let keys = site_keys(kind, &meta, sites, reads);
                s.meta = Some((meta, keys));
            }
            Err(_) => s.bad_meta = true,
        }
    };
    let pruned = prune_with(raw.get(), &decide, Some(&on_top), budget);
    let sight = sight.into_inner();
    let (mut root, total) = match pruned {
        Ok(done) => done,
        Err(e @ DecodeError::Exhausted(_)) => return Err(OnePassError::Final(e)),
        // Before any metadata was read, both readers stop at the same place for the same
        // reason: the shell is all either has decoded.
        Err(e) if sight.meta.is_none() && !sight.bad_meta && !sight.data_seen => {
            return Err(OnePassError::Final(e));
        }
        Err(_) => return Err(OnePassError::Retry),
    };
    let Some((meta, keys)) = sight.meta else {
        return Ok(OnePass::Again);
    };
    let payload_secret = kind == SiteKind::Secret
        && payload::is_payload_secret_type(root.get("type").and_then(Value::as_str));
    if sight.out_of_order || sight.bad_meta || payload_secret {
        if sight.data_read || sight.bad_meta {
            return Ok(OnePass::Again);
        }
        return Ok(OnePass::Shell {
            root,
            meta,
            spent: total,
        });
    }
    let mut spent = total;
    if !keys.is_empty() || payload {
        // The two-pass reader builds the data fields in a second tree and pays for its root
        // (and, once it holds a field, for its map) before merging: charged alike here.
        spent = spent.saturating_add(Cost::VALUE);
        if root.get("data").is_some() || root.get("stringData").is_some() {
            spent = spent.saturating_add(Cost::MAP);
        }
        if spent > budget.limit {
            return Err(OnePassError::Retry);
        }
        if payload {
            // Only the values that may embed a site or a CCM object are kept.
            keep_payload_values(&mut root, &keys, sites);
        }
    }
    budget.spent = spent;
    into_object(root, meta)
        .map(OnePass::Read)
        .map_err(|_| OnePassError::Retry)
}

/// Reads a ConfigMap or Secret in two passes: the shell with its metadata, then the data keys
/// that metadata names. `payload` as for [`decode_site_one_pass`].
fn decode_site_two_pass(
    raw: &RawValue,
    kind: SiteKind,
    payload: bool,
    (sites, reads): (&SitesDocument, Option<&CcmConfigReads>),
    budget: &mut Budget<'_>,
) -> Result<DynamicObject, DecodeError> {
    let (root, total) = prune(raw.get(), &site_shell, budget)?;
    budget.spent = total;
    let meta = metadata_of(&root)?;
    let keys = site_keys(kind, &meta, sites, reads);
    read_site_data(raw, kind, payload, (root, meta, keys), sites, budget)
}

/// The second reading of a ConfigMap or Secret: the data keys in `keys` (every value of a
/// ClusterResourceSet payload) added to the shell `root`, whose metadata is `meta`.
fn read_site_data(
    raw: &RawValue,
    kind: SiteKind,
    payload: bool,
    (mut root, meta, keys): (Value, ObjectMeta, Vec<String>),
    sites: &SitesDocument,
    budget: &mut Budget<'_>,
) -> Result<DynamicObject, DecodeError> {
    // A ClusterResourceSet payload keeps every value: which one embeds a site is
    // known only once it is parsed (`sites::payload`).
    let payload = match kind {
        SiteKind::Secret => {
            payload::is_payload_secret_type(root.get("type").and_then(serde_json::Value::as_str))
        }
        SiteKind::ConfigMap => payload,
    };
    if !keys.is_empty() || payload {
        let wanted = |path: &[Seg]| site_data(path, &keys, payload);
        let (mut data, total) = prune(raw.get(), &wanted, budget)?;
        budget.spent = total;
        if payload && kind == SiteKind::ConfigMap {
            // Only the values that may embed a site or a CCM object are kept.
            keep_payload_values(&mut data, &keys, sites);
        }
        merge(&mut root, data);
    }
    into_object(root, meta)
}

/// Decodes `json` pruned by `decide`, charging from `budget.spent`; returns the value and the
/// new total spent (`budget.spent` counts both objects of a review).
fn prune(
    json: &str,
    decide: &dyn Fn(&[Seg]) -> Decision,
    budget: &Budget<'_>,
) -> Result<(Value, usize), DecodeError> {
    prune_with(json, decide, None, budget)
}

/// Called with each top-level field of an object as soon as it is decoded.
type OnTop<'c> = &'c dyn Fn(&str, &Value);

/// [`prune`], calling `on_top` with each top-level field as soon as it is decoded (so that
/// `decide` can depend on it for the fields that follow).
fn prune_with(
    json: &str,
    decide: &dyn Fn(&[Seg]) -> Decision,
    on_top: Option<OnTop<'_>>,
    budget: &Budget<'_>,
) -> Result<(Value, usize), DecodeError> {
    let ctx = Ctx {
        decide,
        on_top,
        path: RefCell::new(Vec::new()),
        spent: Cell::new(budget.spent),
        limit: budget.limit,
        nodes: Cell::new(0),
        cancel: budget.cancel,
        stop: Cell::new(None),
    };
    let mut de = serde_json::Deserializer::from_str(json);
    let result = Node {
        ctx: &ctx,
        mode: Decision::Descend,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match (result, ctx.stop.get()) {
        (_, Some(Stop::Budget)) => Err(DecodeError::TooComplex {
            limit: budget.limit,
        }),
        (_, Some(Stop::Cancelled)) => Err(DecodeError::Exhausted(
            budget.cancel.check().err().unwrap_or(Exhausted::Deadline),
        )),
        (Err(e), None) => Err(DecodeError::json(e)),
        (Ok(v), None) => Ok((v, ctx.spent.get())),
    }
}

/// The object's metadata, its name and namespace cut where they enter
/// ([`crate::rules::bound_names`]): every finding and log line names the object.
fn metadata_of(root: &Value) -> Result<ObjectMeta, DecodeError> {
    root.get("metadata")
        .map_or_else(|| Ok(ObjectMeta::default()), metadata_from)
}

/// [`metadata_of`] from the `metadata` value itself.
fn metadata_from(metadata: &Value) -> Result<ObjectMeta, DecodeError> {
    let mut meta = match metadata {
        Value::Null => ObjectMeta::default(),
        m => ObjectMeta::deserialize(m)?,
    };
    crate::rules::bound_names(&mut meta);
    Ok(meta)
}

fn into_object(root: Value, metadata: ObjectMeta) -> Result<DynamicObject, DecodeError> {
    let mut fields = match root {
        Value::Object(map) => map,
        other => {
            // The same error serde gives for a non-object where an object is expected.
            return Err(DecodeError::Json(
                <serde_json::Error as de::Error>::invalid_type(unexpected(&other), &"an object"),
            ));
        }
    };
    fields.remove("metadata");
    let string = |v: Option<Value>| match v {
        Some(Value::String(s)) => Ok(Some(s)),
        None | Some(Value::Null) => Ok(None),
        Some(other) => Err(DecodeError::Json(
            <serde_json::Error as de::Error>::invalid_type(unexpected(&other), &"a string"),
        )),
    };
    let api_version = string(fields.remove("apiVersion"))?;
    let kind = string(fields.remove("kind"))?;
    let types = match (api_version, kind) {
        (None, None) => None,
        (a, k) => Some(TypeMeta {
            api_version: a.unwrap_or_default(),
            kind: k.unwrap_or_default(),
        }),
    };
    Ok(DynamicObject {
        types,
        metadata,
        data: Value::Object(fields),
    })
}

fn unexpected(v: &Value) -> de::Unexpected<'_> {
    match v {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(_) => de::Unexpected::Other("a number"),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

/// Moves the top-level fields of `from` into `into` (both objects).
fn merge(into: &mut Value, from: Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        into.extend(from);
    }
}

/// The data keys of a ConfigMap or Secret that sites name: by name and namespace, the values
/// of the site label and the values label, and the keys CCM containers read (`reads`, the
/// `CcmConfigSource` fact).
fn site_keys(
    kind: SiteKind,
    meta: &ObjectMeta,
    sites: &SitesDocument,
    reads: Option<&CcmConfigReads>,
) -> Vec<String> {
    let name = meta.name.as_deref().unwrap_or("");
    let namespace = meta.namespace.as_deref().unwrap_or("");
    let mut keys: Vec<String> = sites
        .sites
        .iter()
        .filter(|s| s.kind == kind && s.name == name && s.namespace == namespace)
        .map(|s| s.key.clone())
        .collect();
    // The site label names a cloud config's key, the values label a key holding the CCM
    // chart's values (`sites::labelled_values`).
    for label in [&sites.label, &sites.values_label].into_iter().flatten() {
        if let Some(key) = meta.labels.as_ref().and_then(|l| l.get(label))
            && !keys.contains(key)
        {
            keys.push(key.clone());
        }
    }
    for read in reads
        .into_iter()
        .flat_map(|r| r.reads_of(kind, namespace, name))
    {
        if !keys.contains(&read.object.key) {
            keys.push(read.object.key.clone());
        }
    }
    keys
}

/// Drops the `data` values of a ConfigMap read as a possible ClusterResourceSet payload that
/// are neither site keys nor text that may embed a site or a CCM object.
fn keep_payload_values(data: &mut serde_json::Value, keys: &[String], sites: &SitesDocument) {
    if let Some(map) = data
        .get_mut("data")
        .and_then(serde_json::Value::as_object_mut)
    {
        map.retain(|k, v| {
            keys.contains(k) || v.as_str().is_some_and(|t| payload::worth_parsing(t, sites))
        });
    }
}

/// One step of a path inside an object. Array indices are not told apart: no reading
/// depends on the position of an element.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index,
}

/// What to do with the value at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Decode it and everything below it.
    Keep,
    /// Scan past it without building anything.
    Skip,
    /// Decode the container, asking again for each child (a scalar here is kept).
    Descend,
}

fn is(seg: &Seg, key: &str) -> bool {
    matches!(seg, Seg::Key(k) if k == key)
}

/// First reading of a ConfigMap or Secret: everything but the data maps.
fn site_shell(path: &[Seg]) -> Decision {
    match path {
        [m] if is(m, "metadata") => Decision::Descend,
        [m, f] if is(m, "metadata") && is(f, "managedFields") => Decision::Skip,
        [m, _] if is(m, "metadata") => Decision::Keep,
        [f] if is(f, "apiVersion") || is(f, "kind") || is(f, "type") || is(f, "immutable") => {
            Decision::Keep
        }
        _ => Decision::Skip,
    }
}

/// Second reading of a ConfigMap or Secret: only the data keys in `keys` (every key of a
/// ClusterResourceSet payload, `all`).
fn site_data(path: &[Seg], keys: &[String], all: bool) -> Decision {
    match path {
        [f] if is(f, "data") || is(f, "stringData") => Decision::Descend,
        [f, Seg::Key(k)] if (is(f, "data") || is(f, "stringData")) && (all || keys.contains(k)) => {
            Decision::Keep
        }
        _ => Decision::Skip,
    }
}

/// Any other kind: everything but `metadata.managedFields`, `status` (unless `status`) and,
/// unless `values`, the Helm values subtrees of the GitOps carriers (Flux `spec.values`,
/// Argo CD `helm.valuesObject`, a values file's `values`).
fn object_fields(path: &[Seg], status: bool, values: bool) -> Decision {
    use Decision::{Descend, Keep, Skip};
    let key = |i: usize, k: &str| path.get(i).is_some_and(|s| is(s, k));
    match path.len() {
        1 if key(0, "metadata") => Descend,
        2 if key(0, "metadata") && key(1, "managedFields") => Skip,
        1 if key(0, "status") && !status => Skip,
        _ if values => Keep,
        1 if key(0, "values") => Skip,
        1 if key(0, "spec") => Descend,
        // Another chart's values: only the CCM chart's subchart values inside them (an
        // umbrella chart's `openstack-cloud-controller-manager:` key) are read.
        2 if key(0, "spec") && key(1, "values") => Descend,
        3 if key(0, "spec") && key(1, "values") => subchart_values(&path[2]),
        2 if key(0, "spec") && (key(1, "source") || key(1, "sources")) => Descend,
        3 if key(0, "spec") && key(1, "source") && key(2, "helm") => Descend,
        4 if key(0, "spec") && key(1, "source") && key(2, "helm") && key(3, "valuesObject") => {
            Descend
        }
        5 if key(0, "spec") && key(1, "source") && key(2, "helm") && key(3, "valuesObject") => {
            subchart_values(&path[4])
        }
        3 if key(0, "spec") && key(1, "sources") => Descend,
        4 if key(0, "spec") && key(1, "sources") && key(3, "helm") => Descend,
        5 if key(0, "spec") && key(1, "sources") && key(3, "helm") && key(4, "valuesObject") => {
            Descend
        }
        6 if key(0, "spec") && key(1, "sources") && key(3, "helm") && key(4, "valuesObject") => {
            subchart_values(&path[5])
        }
        _ => Keep,
    }
}

/// Inside another chart's values: the CCM chart's values as a subchart (the key is the chart
/// name, Helm's default alias) are kept, everything else skipped.
fn subchart_values(seg: &Seg) -> Decision {
    let ccm = crate::sites::helm::DEFAULT_CHARTS
        .iter()
        .any(|chart| is(seg, chart));
    if ccm { Decision::Keep } else { Decision::Skip }
}

/// Why pruning stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Budget,
    Cancelled,
}

struct Ctx<'c> {
    decide: &'c dyn Fn(&[Seg]) -> Decision,
    on_top: Option<OnTop<'c>>,
    path: RefCell<Vec<Seg>>,
    spent: Cell<usize>,
    limit: usize,
    nodes: Cell<usize>,
    cancel: &'c Cancel,
    stop: Cell<Option<Stop>>,
}

/// Estimated heap cost of decoded JSON, close to what `serde_json::Value` allocates:
/// a B-tree map allocates leaves of 11 entries (~630 bytes) however few it holds.
struct Cost;

impl Cost {
    const VALUE: usize = 32;
    const MAP: usize = 632;
    const MAP_ENTRY: usize = 58;
    const STRING: usize = 16;
}

impl Ctx<'_> {
    fn charge<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        let spent = self.spent.get().saturating_add(bytes);
        self.spent.set(spent);
        if spent > self.limit {
            self.stop.set(Some(Stop::Budget));
            return Err(E::custom("decoded-memory budget exceeded"));
        }
        let nodes = self.nodes.get() + 1;
        self.nodes.set(nodes);
        if nodes.is_multiple_of(CANCEL_CHECK_EVERY) && self.cancel.is_cancelled() {
            self.stop.set(Some(Stop::Cancelled));
            return Err(E::custom("cancelled"));
        }
        Ok(())
    }

    fn decide(&self, mode: Decision) -> Decision {
        match mode {
            Decision::Keep => Decision::Keep,
            _ => (self.decide)(&self.path.borrow()),
        }
    }
}

/// Decodes one value, pruned by the context's decisions, into a `Value`.
struct Node<'a, 'c> {
    ctx: &'a Ctx<'c>,
    mode: Decision,
}

impl<'de> DeserializeSeed<'de> for Node<'_, '_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.ctx.charge::<E>(Cost::VALUE)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.ctx.charge::<E>(Cost::VALUE)?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.ctx.charge::<E>(Cost::VALUE)?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.ctx.charge::<E>(Cost::VALUE)?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.ctx.charge::<E>(Cost::VALUE + Cost::STRING + v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.ctx.charge::<E>(Cost::VALUE + Cost::STRING + v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.ctx.charge::<E>(Cost::VALUE)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.ctx.charge::<A::Error>(Cost::VALUE)?;
        let mut out = Vec::new();
        loop {
            self.ctx.path.borrow_mut().push(Seg::Index);
            let decision = self.ctx.decide(self.mode);
            let next = match decision {
                Decision::Skip => seq.next_element::<IgnoredAny>().map(|o| o.map(|_| None)),
                mode => seq
                    .next_element_seed(Node {
                        ctx: self.ctx,
                        mode,
                    })
                    .map(|o| o.map(Some)),
            };
            self.ctx.path.borrow_mut().pop();
            match next? {
                None => break,
                Some(None) => {}
                Some(Some(v)) => {
                    self.ctx.charge::<A::Error>(Cost::VALUE)?;
                    out.push(v);
                }
            }
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.ctx.charge::<A::Error>(Cost::VALUE)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.ctx.path.borrow_mut().push(Seg::Key(key));
            let decision = self.ctx.decide(self.mode);
            let value = match decision {
                Decision::Skip => map.next_value::<IgnoredAny>().map(|_| None),
                mode => map
                    .next_value_seed(Node {
                        ctx: self.ctx,
                        mode,
                    })
                    .map(Some),
            };
            let key = match self.ctx.path.borrow_mut().pop() {
                Some(Seg::Key(k)) => k,
                _ => String::new(),
            };
            if let Some(value) = value? {
                if let Some(on_top) = self.ctx.on_top
                    && self.ctx.path.borrow().is_empty()
                {
                    on_top(&key, &value);
                }
                let first = out.is_empty();
                let cost = Cost::MAP_ENTRY + key.len() + if first { Cost::MAP } else { 0 };
                self.ctx.charge::<A::Error>(cost)?;
                out.insert(key, value);
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sites() -> SitesDocument {
        crate::policy::PolicySet::embedded()
            .expect("embedded policies load")
            .sites
    }

    fn review(kind: (&str, &str, &str), object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": kind.0, "version": kind.1, "kind": kind.2},
                "resource": {"group": kind.0, "version": kind.1, "resource": "things"},
                "name": "x",
                "namespace": "ns",
                "operation": "CREATE",
                "userInfo": {"username": "someone"},
                "object": object,
                "oldObject": null,
                "dryRun": false,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
            }
        }))
        .expect("serializes")
    }

    fn decode(body: &[u8]) -> Result<Decoded, DecodeError> {
        decode_review(body, &sites(), None, MAX_DECODED_BYTES, &Cancel::never())
    }

    #[test]
    fn configmap_keeps_only_site_keys() {
        let body = review(
            ("", "v1", "ConfigMap"),
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "data": {"cloud.conf": "[Global]\n", "other": "x"},
                "binaryData": {"b": "AAAA"},
                "metadata": {"name": "cm", "namespace": "ns",
                    "labels": {"stackgate.dev/cloud-config": "cloud.conf"},
                    "managedFields": [{"manager": "kubectl"}]},
            }),
        );
        let d = decode(&body).expect("decodes");
        let o = d.request.object.expect("object");
        assert_eq!(o.metadata.name.as_deref(), Some("cm"));
        assert!(o.metadata.managed_fields.is_none());
        assert_eq!(o.data, json!({"data": {"cloud.conf": "[Global]\n"}}));
        assert_eq!(o.types.expect("types").kind, "ConfigMap");
        assert_eq!(d.request.uid, "u-1");
        assert_eq!(d.request.types.api_version, "admission.k8s.io/v1");
    }

    #[test]
    fn a_labelled_values_secret_keeps_only_its_values_key() {
        let body = review(
            ("", "v1", "Secret"),
            json!({"metadata": {"name": "occm-values", "namespace": "ns",
                    "labels": {"stackgate.dev/ccm-values": "hardened.yaml"}},
                "type": "Opaque",
                "data": {"hardened.yaml": "Y2xvdWRDb25maWc6IHt9Cg==", "other": "eA=="}}),
        );
        let o = decode(&body).expect("decodes").request.object.expect("o");
        assert_eq!(
            o.data,
            json!({"type": "Opaque", "data": {"hardened.yaml": "Y2xvdWRDb25maWc6IHt9Cg=="}})
        );
    }

    #[test]
    fn crs_payloads_keep_the_values_that_may_embed_a_site() {
        let manifest = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n";
        let body = review(
            ("", "v1", "ConfigMap"),
            json!({"metadata": {"name": "crs", "namespace": "ns"},
                "data": {"p.yaml": manifest, "cni.yaml": "kind: DaemonSet\n"}}),
        );
        let o = decode(&body).expect("decodes").request.object.expect("o");
        assert_eq!(o.data, json!({"data": {"p.yaml": manifest}}));
        // A value that may embed a CCM object (for the object families) is kept too.
        let ccm = "kind: DaemonSet\nimage: openstack-cloud-controller-manager:v1\n";
        let body = review(
            ("", "v1", "ConfigMap"),
            json!({"metadata": {"name": "crs", "namespace": "ns"},
                "data": {"ccm.yaml": ccm, "cni.yaml": "kind: DaemonSet\n"}}),
        );
        let o = decode(&body).expect("decodes").request.object.expect("o");
        assert_eq!(o.data, json!({"data": {"ccm.yaml": ccm}}));
        let body = review(
            ("", "v1", "Secret"),
            json!({"metadata": {"name": "crs", "namespace": "ns"},
                "type": "addons.cluster.x-k8s.io/resource-set",
                "data": {"a": "eA==", "b": "eQ=="}}),
        );
        let o = decode(&body).expect("decodes").request.object.expect("o");
        assert_eq!(o.data["data"], json!({"a": "eA==", "b": "eQ=="}));
    }

    /// Decodes `object` (raw JSON, fields in the order written) as `kind` both ways within
    /// `limit`: the result of `decode_object` (one pass, or two on its fallback) and that of
    /// the two-pass reader, each with the decoded-memory charge.
    fn both_ways(
        kind: SiteKind,
        object: &str,
        limit: usize,
    ) -> [(Result<String, String>, usize); 2] {
        let sites = sites();
        let raw = RawValue::from_string(object.to_owned()).expect("raw JSON");
        let gvk = GroupVersionKind::gvk(
            "",
            "v1",
            if kind == SiteKind::Secret {
                "Secret"
            } else {
                "ConfigMap"
            },
        );
        let cancel = Cancel::never();
        let show = |r: Result<DynamicObject, DecodeError>| {
            r.map(|o| format!("{o:?}")).map_err(|e| format!("{e:?}"))
        };
        let mut budget = Budget {
            limit,
            spent: 100,
            cancel: &cancel,
        };
        let one = show(decode_object(
            &raw,
            &gvk,
            Reading::Site(kind),
            (&sites, None),
            &mut budget,
        ));
        let one_spent = budget.spent;
        let mut budget = Budget {
            limit,
            spent: 100,
            cancel: &cancel,
        };
        let payload = kind == SiteKind::ConfigMap && payload::worth_parsing(raw.get(), &sites);
        let two = show(decode_site_two_pass(
            &raw,
            kind,
            payload,
            (&sites, None),
            &mut budget,
        ));
        [(one, one_spent), (two, budget.spent)]
    }

    #[test]
    fn one_pass_site_reading_equals_the_two_pass_reading() {
        use SiteKind::{ConfigMap, Secret};
        let label = r#""labels": {"stackgate.dev/cloud-config": "cloud.conf"}"#;
        let values = r#""labels": {"stackgate.dev/ccm-values": "v.yaml"}"#;
        let manifest = r#""apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n""#;
        // (kind, object, how the one-pass reader ends: "read" once, the two-pass reader's
        // "shell" only, or "again" the two-pass way)
        let cases: Vec<(SiteKind, String, &str)> = vec![
            // The API server's order: metadata, then data.
            (ConfigMap, format!(r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "cm", "namespace": "ns", {label}, "managedFields": [{{"manager": "x"}}]}}, "data": {{"cloud.conf": "[Global]\n", "other": "x"}}, "binaryData": {{"b": "AAAA"}}}}"#), "read"),
            (ConfigMap, r#"{"metadata": {"name": "cm"}, "data": {"a": "b"}}"#.to_owned(), "read"),
            (ConfigMap, format!(r#"{{"metadata": {{"name": "crs", "namespace": "ns"}}, "data": {{"p.yaml": {manifest}, "cni.yaml": "kind: DaemonSet\n"}}}}"#), "read"),
            (ConfigMap, format!(r#"{{"metadata": {{"name": "cm", {label}}}, "data": null, "stringData": {{"cloud.conf": "x"}}}}"#), "read"),
            (Secret, format!(r#"{{"metadata": {{"name": "v", "namespace": "ns", {values}}}, "data": {{"v.yaml": "eA==", "o": "eQ=="}}, "type": "Opaque"}}"#), "read"),
            (Secret, format!(r#"{{"metadata": {{"name": "v", {values}}}, "type": "Opaque", "data": {{"x": "eA=="}}}}"#), "read"),
            // Data before metadata (the order of a re-serialized JSON map, sorted by key), a
            // payload Secret with no key named: the shell was read, its data is left.
            (ConfigMap, format!(r#"{{"data": {{"cloud.conf": "x"}}, "metadata": {{"name": "cm", {label}}}}}"#), "shell"),
            (ConfigMap, r#"{"apiVersion": "v1", "data": {"a": "b"}, "kind": "ConfigMap", "metadata": {"name": "cm"}}"#.to_owned(), "shell"),
            (ConfigMap, format!(r#"{{"data": {{"p.yaml": {manifest}, "cni.yaml": "kind: DaemonSet\n"}}, "metadata": {{"name": "crs", "namespace": "ns"}}}}"#), "shell"),
            (Secret, r#"{"metadata": {"name": "crs"}, "data": {"a": "eA==", "b": "eQ=="}, "type": "addons.cluster.x-k8s.io/resource-set"}"#.to_owned(), "shell"),
            (Secret, format!(r#"{{"data": {{"v.yaml": "eA=="}}, "metadata": {{"name": "v", {values}}}, "type": "Opaque"}}"#), "shell"),
            // Metadata again after data read by the first one, a payload Secret whose data was
            // read, bad metadata, errors: read again.
            (ConfigMap, format!(r#"{{"metadata": {{"name": "cm", {label}}}, "data": {{"cloud.conf": "x"}}, "metadata": {{"name": "cm"}}}}"#), "again"),
            (Secret, format!(r#"{{"metadata": {{"name": "crs", {values}}}, "data": {{"v.yaml": "eA==", "b": "eQ=="}}, "type": "addons.cluster.x-k8s.io/resource-set"}}"#), "again"),
            (ConfigMap, r#"{"metadata": {"name": 7}, "data": {"a": "b"}}"#.to_owned(), "again"),
            (ConfigMap, format!(r#"{{"metadata": {{"name": "cm", {label}}}, "data": {{"cloud.conf": [[[1]]]}}, "kind": 3}}"#), "again"),
        ];
        for (kind, object, ends) in &cases {
            for limit in [MAX_DECODED_BYTES, 2_000, 1_500, 900] {
                let [one, two] = both_ways(*kind, object, limit);
                assert_eq!(one, two, "{object} within {limit}");
            }
            let sites = sites();
            let raw = RawValue::from_string(object.clone()).expect("raw JSON");
            let cancel = Cancel::never();
            let mut budget = Budget {
                limit: MAX_DECODED_BYTES,
                spent: 0,
                cancel: &cancel,
            };
            let payload = *kind == ConfigMap && payload::worth_parsing(raw.get(), &sites);
            let read = decode_site_one_pass(&raw, *kind, payload, (&sites, None), &mut budget);
            let ended = match read {
                Ok(OnePass::Read(_)) => "read",
                Ok(OnePass::Shell { .. }) => "shell",
                Ok(OnePass::Again) | Err(OnePassError::Retry) => "again",
                Err(OnePassError::Final(_)) => "error",
            };
            assert_eq!(ended, *ends, "{object}");
        }
    }

    #[test]
    fn configmap_that_is_no_site_keeps_no_data() {
        let body = review(
            ("", "v1", "ConfigMap"),
            json!({"metadata": {"name": "cm"}, "data": {"a": "b"}}),
        );
        let o = decode(&body).expect("decodes").request.object.expect("o");
        assert_eq!(o.data, json!({}));
    }

    #[test]
    fn foreign_chart_values_are_skipped_and_ccm_values_kept() {
        let hr = |chart: &str| {
            review(
                ("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
                json!({
                    "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                    "metadata": {"name": "r"},
                    "spec": {"values": {"x": [{"a": 0}]},
                             "chart": {"spec": {"chart": chart}}},
                    "status": {"history": [1, 2, 3]},
                }),
            )
        };
        let o = decode(&hr("podinfo"))
            .expect("d")
            .request
            .object
            .expect("o");
        assert_eq!(
            o.data,
            json!({"spec": {"values": {}, "chart": {"spec": {"chart": "podinfo"}}}})
        );
        let o = decode(&hr("openstack-cloud-controller-manager"))
            .expect("d")
            .request
            .object
            .expect("o");
        assert_eq!(o.data["spec"]["values"], json!({"x": [{"a": 0}]}));
        assert!(o.data.get("status").is_none());
    }

    /// An umbrella chart's values are read whole once they hold the CCM subchart's key: a
    /// condition or tag of the umbrella's `Chart.yaml` may read any value in them (issue 33
    /// item 3). Without the key they stay unread.
    #[test]
    fn umbrella_chart_values_are_read_whole_once_they_hold_the_ccm_subchart() {
        let values = json!({"big": [1, 2, 3], "tags": {"cloud": false},
            "openstack-cloud-controller-manager": {"cloudConfig": {"global": {"region": "r"}}}});
        let body = review(
            ("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
            json!({"metadata": {"name": "r"}, "spec": {"chart": {"spec": {"chart": "addons"}},
                "values": values}}),
        );
        let o = decode(&body).expect("d").request.object.expect("o");
        assert_eq!(o.data["spec"]["values"], values);
        let body = review(
            ("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
            json!({"metadata": {"name": "r"}, "spec": {"chart": {"spec": {"chart": "addons"}},
                "values": {"big": [1, 2, 3], "tags": {"cloud": false}}}}),
        );
        let o = decode(&body).expect("d").request.object.expect("o");
        assert_eq!(o.data["spec"]["values"], json!({}));
    }

    #[test]
    fn argo_values_object_skipped_per_source() {
        let body = review(
            ("argoproj.io", "v1alpha1", "Application"),
            json!({"metadata": {"name": "a"}, "spec": {"sources": [
                {"chart": "podinfo", "helm": {"valuesObject": {"big": [1]}, "values": "a: 1"}},
            ]}}),
        );
        let o = decode(&body).expect("d").request.object.expect("o");
        assert_eq!(
            o.data,
            json!({"spec": {"sources": [{"chart": "podinfo", "helm": {"valuesObject": {}, "values": "a: 1"}}]}})
        );
    }

    #[test]
    fn machine_status_is_kept() {
        let body = review(
            ("cluster.x-k8s.io", "v1beta1", "Machine"),
            json!({"metadata": {"name": "m"}, "status": {"addresses": [{"address": "10.0.0.1"}]}}),
        );
        let o = decode(&body).expect("d").request.object.expect("o");
        assert_eq!(o.data["status"]["addresses"][0]["address"], "10.0.0.1");
    }

    #[test]
    fn budget_refuses_amplifying_values_of_the_ccm_chart() {
        let items: Vec<Value> = (0..100_000).map(|_| json!({"a": 0})).collect();
        let body = review(
            ("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
            json!({"metadata": {"name": "r"}, "spec": {"values": {"x": items},
                "chart": {"spec": {"chart": "openstack-cloud-controller-manager"}}}}),
        );
        assert!(matches!(
            decode(&body),
            Err(DecodeError::TooComplex {
                limit: MAX_DECODED_BYTES
            })
        ));
    }

    #[test]
    fn cancelled_decoding_stops() {
        let items: Vec<Value> = (0..10_000).map(|i| json!(i)).collect();
        let body = review(("apps", "v1", "Deployment"), json!({"spec": {"x": items}}));
        let cancel = Cancel::new();
        cancel.cancel();
        assert!(matches!(
            decode_review(&body, &sites(), None, MAX_DECODED_BYTES, &cancel),
            Err(DecodeError::Exhausted(Exhausted::Deadline))
        ));
    }

    /// A Deployment whose `spec` holds `levels - 1` nested arrays: `levels` containers with
    /// the object's own braces.
    fn nested(levels: usize) -> Vec<u8> {
        let inner = levels - 1;
        let object = format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"x"}},"spec":{}{},"status":{}{}}}"#,
            "[".repeat(inner),
            "]".repeat(inner),
            // Skipped (not read for a Deployment): scanned, never built, so any depth.
            "[".repeat(100_000),
            "]".repeat(100_000),
        );
        let body = String::from_utf8(review(("apps", "v1", "Deployment"), json!("@@"))).unwrap();
        body.replacen("\"@@\"", &object, 1).into_bytes()
    }

    #[test]
    fn nesting_is_capped_at_the_json_depth_limit() {
        let decoded = decode(&nested(MAX_JSON_DEPTH)).expect("at the limit");
        let mut depth = 1;
        let mut v = &decoded.request.object.as_ref().unwrap().data["spec"];
        while let Some(inner) = v.get(0) {
            depth += 1;
            v = inner;
        }
        assert_eq!(depth, MAX_JSON_DEPTH - 1, "spec's arrays");
        match decode(&nested(MAX_JSON_DEPTH + 1)) {
            Err(e @ DecodeError::TooDeep { limit, line: 1, .. }) => {
                assert_eq!(limit, MAX_JSON_DEPTH);
                assert!(e.to_string().contains("over stackgate's limit"), "{e}");
            }
            other => panic!("expected TooDeep, got {other:?}"),
        }
    }

    #[test]
    fn shapes_that_are_not_objects_are_data_errors() {
        let body = review(("apps", "v1", "Deployment"), json!([1, 2]));
        match decode(&body) {
            Err(DecodeError::Json(e)) => {
                assert_eq!(e.classify(), serde_json::error::Category::Data)
            }
            other => panic!("expected a data error, got {other:?}"),
        }
        let body = review(
            ("", "v1", "ConfigMap"),
            json!({"metadata": {"labels": "not-a-map"}}),
        );
        assert!(matches!(decode(&body), Err(DecodeError::Json(_))));
    }
}
