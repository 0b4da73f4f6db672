//! Decoding an AdmissionReview without amplification.
//!
//! A generic `serde_json::Value` tree costs far more than the JSON it came from: a
//! one-entry object such as `{"a":0}` (7 bytes) becomes a B-tree leaf of about 630 bytes.
//! Decoding whole objects that way let one 3 MiB HelmRelease take half a gigabyte (issue 12).
//! So each object of a review is decoded into a tree that holds **only the fields the engine
//! reads**, chosen by the request's kind ([`Reading`]). Skipped subtrees are scanned, never
//! built: `managedFields`, kubectl's last-applied-configuration annotation ([`LAST_APPLIED`]),
//! `status` (but for Cluster API objects, whose addresses the guard
//! reads), a ConfigMap's or Secret's data keys that no site names, and the Helm values of
//! charts that are not the CCM's. What is kept is charged against a decoded-memory budget
//! ([`MAX_DECODED_BYTES`]); a review that needs more is answered as too complex, never
//! half-read.
//!
//! The reading this is defined by takes two steps ([`decode_in_two_passes`]):
//!
//! 1. The review itself, with `object` and `oldObject` kept as borrowed raw JSON text
//!    ([`RawValue`]): no copy, no tree.
//! 2. Each object, pruned, from its raw text.
//!
//! Where a kept field depends on another one that may come later in the JSON (the data keys
//! depend on the name and labels; whether values are read depends on the chart reference),
//! the object is read twice: first without the dependent part, then the dependent part alone.
//! Scanning raw JSON is cheap next to building trees, and the second pass only runs for
//! objects that are sites. A ConfigMap or Secret whose `metadata` comes before its data (the
//! order the API server writes) is read once: its data keys are decided as soon as its
//! metadata has been read.
//!
//! Reviews as the API server writes them (the request's `kind` before its objects, `object`
//! before `oldObject`) are read in one pass over the body instead ([`decode_in_one_pass`]):
//! each object is pruned by the same reader while the envelope is read, so its text is not
//! scanned first to be kept as raw text. The Helm values its first reading leaves out are set
//! aside as text ([`Decision::Raw`]: where they stand, where their text is) and, when the
//! object turns out to hold the CCM chart's values, read alone and put back ([`put_back`])
//! instead of the whole object a second time. Its raw text is still found where a reading
//! needs it (a ConfigMap's payload prefilter, asked only when a data key no site names is
//! met, [`PayloadQuestion`]; a site reader's fallbacks): from the end of the object's key, by
//! a brace count ([`object_end`]). Whatever that pass cannot settle exactly as the two-step
//! reading would (another field order, an escaped key, an object nested too deep to build
//! inside the envelope, malformed JSON, a body that is not UTF-8) is read the two-step way
//! from the start: the result, the error and its position, and the decoded-memory charge are
//! always the two-step reading's.

use std::borrow::Cow;
use std::cell::{Cell, OnceCell, RefCell};
use std::fmt;

use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, ObjectMeta, TypeMeta};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::budget::{Cancel, Exhausted};
use crate::facts::ccm_config::CcmConfigReads;
use crate::json_text::find_any;
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
    match decode_in_one_pass(body, (sites, reads), limit, cancel) {
        Some(decoded) => decoded,
        None => decode_in_two_passes(body, sites, reads, limit, cancel),
    }
}

/// The review's fields besides its objects.
struct Envelope {
    api_version: String,
    kind: String,
    request: RequestFields,
}

/// The request's fields besides its objects ([`WireRequest`]'s).
struct RequestFields {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    sub_resource: Option<String>,
    request_kind: Option<GroupVersionKind>,
    request_resource: Option<GroupVersionResource>,
    request_sub_resource: Option<String>,
    name: String,
    namespace: Option<String>,
    operation: Operation,
    user_info: k8s_openapi::api::authentication::v1::UserInfo,
    dry_run: bool,
}

/// The first step of the two-pass reading: the envelope, with the objects as raw text.
fn read_envelope(body: &[u8]) -> Result<(Envelope, [Option<&RawValue>; 2]), DecodeError> {
    let wire: WireReview<'_> = serde_json::from_slice(body).map_err(DecodeError::json)?;
    let request = wire.request.ok_or(DecodeError::NoRequest)?;
    let envelope = Envelope {
        api_version: wire.api_version,
        kind: wire.kind,
        request: RequestFields {
            uid: request.uid,
            kind: request.kind,
            resource: request.resource,
            sub_resource: request.sub_resource,
            request_kind: request.request_kind,
            request_resource: request.request_resource,
            request_sub_resource: request.request_sub_resource,
            name: request.name,
            namespace: request.namespace,
            operation: request.operation,
            user_info: request.user_info,
            dry_run: request.dry_run,
        },
    };
    Ok((envelope, [request.object, request.old_object]))
}

/// The reading [`decode_review`] is defined by: the envelope with the objects as raw text,
/// then each object from its text.
fn decode_in_two_passes(
    body: &[u8],
    sites: &SitesDocument,
    reads: Option<&CcmConfigReads>,
    limit: usize,
    cancel: &Cancel,
) -> Result<Decoded, DecodeError> {
    let (envelope, [object, old_object]) = read_envelope(body)?;
    let gvk = &envelope.request.kind;
    let reading = Reading::for_kind(gvk);
    let mut budget = Budget {
        limit,
        spent: 0,
        cancel,
    };
    let object = object
        .map(|raw| decode_object(raw.get(), gvk, reading, (sites, reads), &mut budget))
        .transpose()?;
    let old_object = old_object
        .map(|raw| decode_object(raw.get(), gvk, reading, (sites, reads), &mut budget))
        .transpose()?;
    Ok(assemble(envelope, [object, old_object], budget.spent))
}

/// The decoded review from its parts.
fn assemble(
    envelope: Envelope,
    [object, old_object]: [Option<DynamicObject>; 2],
    decoded_bytes: usize,
) -> Decoded {
    let Envelope {
        api_version,
        kind,
        request,
    } = envelope;
    Decoded {
        api_version: api_version.clone(),
        decoded_bytes,
        request: AdmissionRequest {
            types: TypeMeta { api_version, kind },
            uid: request.uid,
            kind: request.kind,
            resource: request.resource,
            sub_resource: request.sub_resource,
            request_kind: request.request_kind,
            request_resource: request.request_resource,
            request_sub_resource: request.request_sub_resource,
            // The request's own name and namespace, bounded once here: the span, the logs,
            // the Subject and every answer take them from this request.
            name: bound_name(request.name),
            namespace: request.namespace.map(bound_name),
            operation: request.operation,
            user_info: request.user_info,
            object,
            old_object,
            dry_run: request.dry_run,
            options: None,
        },
    }
}

/// `name` cut as [`ShortText::name`] cuts it; kept as it is (no copy) when it fits, as the
/// request's own names almost always do.
fn bound_name(name: String) -> String {
    if name.len() <= crate::short_text::NAME_MAX_BYTES {
        name
    } else {
        ShortText::name(&name).into_string()
    }
}

/// Reads the review in one pass over `body`, each object pruned while the envelope is read.
/// `None` when this pass cannot settle the review exactly as [`decode_in_two_passes`] would:
/// read it that way then. `Some` is that reading's result: the decoded review, or the error
/// an object's reading ended with (a stop for the budget or the deadline, or an error of a
/// reading from the object's raw text), given once the envelope is known to decode.
fn decode_in_one_pass(
    body: &[u8],
    (sites, reads): (&SitesDocument, Option<&CcmConfigReads>),
    limit: usize,
    cancel: &Cancel,
) -> Option<Result<Decoded, DecodeError>> {
    // The two-pass reading checks each object's raw text for UTF-8 whole, skipped strings
    // included, where a skipping reader would not: checked here for the whole body.
    let text = std::str::from_utf8(body).ok()?;
    let review = OnePassReview {
        body: text,
        sites,
        reads,
        budget: RefCell::new(Budget {
            limit,
            spent: 0,
            cancel,
        }),
        key_end: Cell::new(None),
        settled: RefCell::new(None),
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let read = ReviewSeed(&review)
        .deserialize(&mut de)
        .and_then(|read| de.end().map(|()| read));
    match read {
        Ok((envelope, objects)) => {
            let spent = review.budget.into_inner().spent;
            Some(Ok(assemble(envelope, objects, spent)))
        }
        Err(_) => {
            let settled = review.settled.into_inner()?;
            // The two-pass reading reads the whole envelope before any object.
            Some(read_envelope(body).and(Err(settled)))
        }
    }
}

/// The one-pass reading of a review: what its objects' readings share.
struct OnePassReview<'de, 'c> {
    body: &'de str,
    sites: &'c SitesDocument,
    reads: Option<&'c CcmConfigReads>,
    /// Both objects' charges, `object`'s first (the order of [`decode_in_two_passes`]).
    budget: RefCell<Budget<'c>>,
    /// Where the key of the object being read ends in `body` (its closing quote), when the
    /// key was read from the body as written.
    key_end: Cell<Option<usize>>,
    /// The error an object's reading ended with, the two-pass reading's too.
    settled: RefCell<Option<DecodeError>>,
}

/// A map key, borrowed from the body when it holds no escape (its place there is then known).
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl<'de> Key<'de> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(k) => k,
            Key::Owned(k) => k,
        }
    }

    fn into_cow(self) -> Cow<'de, str> {
        match self {
            Key::Borrowed(k) => Cow::Borrowed(k),
            Key::Owned(k) => Cow::Owned(k),
        }
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key<'de>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Key<'de>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key::Owned(v.to_owned()))
    }
}

/// The one-pass reading gives up (the review is read the two-pass way): the error's text is
/// never shown.
fn give_up<E: de::Error>() -> E {
    E::custom("read the review in two passes")
}

/// Sets a field read once (serde's derived readers refuse a field given twice).
fn once<T, E: de::Error>(slot: &mut Option<T>, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(give_up());
    }
    *slot = Some(value);
    Ok(())
}

/// The review, as [`WireReview`] reads it.
struct ReviewSeed<'a, 'de, 'c>(&'a OnePassReview<'de, 'c>);

impl<'de> DeserializeSeed<'de> for ReviewSeed<'_, 'de, '_> {
    type Value = (Envelope, [Option<DynamicObject>; 2]);

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ReviewSeed<'_, 'de, '_> {
    type Value = (Envelope, [Option<DynamicObject>; 2]);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionReview")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut api_version, mut kind, mut request) = (None, None, None);
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key.as_str() {
                "apiVersion" => once(&mut api_version, map.next_value::<String>()?)?,
                "kind" => once(&mut kind, map.next_value::<String>()?)?,
                "request" => once(&mut request, map.next_value_seed(RequestSeed(self.0))?)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // No request: the two-pass reading says so.
        let Some((request, objects)) = request.flatten() else {
            return Err(give_up());
        };
        let envelope = Envelope {
            api_version: api_version.unwrap_or_default(),
            kind: kind.unwrap_or_default(),
            request,
        };
        Ok((envelope, objects))
    }
}

/// The request, as [`WireRequest`] reads it, its objects read as they come.
struct RequestSeed<'a, 'de, 'c>(&'a OnePassReview<'de, 'c>);

impl<'de> DeserializeSeed<'de> for RequestSeed<'_, 'de, '_> {
    type Value = Option<(RequestFields, [Option<DynamicObject>; 2])>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for RequestSeed<'_, 'de, '_> {
    type Value = Option<(RequestFields, [Option<DynamicObject>; 2])>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionRequest")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let review = self.0;
        let (mut uid, mut kind, mut resource, mut sub_resource) = (None, None, None, None);
        let (mut request_kind, mut request_resource, mut request_sub_resource) = (None, None, None);
        let (mut name, mut namespace, mut operation, mut user_info) = (None, None, None, None);
        let (mut object, mut old_object, mut dry_run) = (None, None, None);
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key.as_str() {
                "uid" => once(&mut uid, map.next_value::<String>()?)?,
                "kind" => once(&mut kind, map.next_value::<GroupVersionKind>()?)?,
                "resource" => once(&mut resource, map.next_value::<GroupVersionResource>()?)?,
                "subResource" => once(&mut sub_resource, map.next_value::<Option<String>>()?)?,
                "requestKind" => once(&mut request_kind, map.next_value()?)?,
                "requestResource" => once(&mut request_resource, map.next_value()?)?,
                "requestSubResource" => once(&mut request_sub_resource, map.next_value()?)?,
                "name" => once(&mut name, map.next_value::<String>()?)?,
                "namespace" => once(&mut namespace, map.next_value::<Option<String>>()?)?,
                "operation" => once(&mut operation, map.next_value::<Operation>()?)?,
                "userInfo" => once(&mut user_info, map.next_value()?)?,
                "dryRun" => once(&mut dry_run, map.next_value::<bool>()?)?,
                field @ ("object" | "oldObject") => {
                    let old = field == "oldObject";
                    // The objects are read knowing the kind, `object` first (the order of
                    // the two-pass reading's charges).
                    let (Some(gvk), false) = (&kind, !old && old_object.is_some()) else {
                        return Err(give_up());
                    };
                    review.key_end.set(match &key {
                        Key::Borrowed(k) => offset_in(review.body, k).map(|start| start + k.len()),
                        Key::Owned(_) => None,
                    });
                    // An error of `oldObject` read before `object` is met may not be the
                    // two-pass reading's: a later `object` is read first there.
                    let settles = !old || object.is_some();
                    let seed = ObjectSeed {
                        review,
                        gvk,
                        settles,
                    };
                    let slot = if old { &mut old_object } else { &mut object };
                    once(slot, map.next_value_seed(seed)?)?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let (Some(uid), Some(kind), Some(resource), Some(operation)) =
            (uid, kind, resource, operation)
        else {
            return Err(give_up());
        };
        let request = RequestFields {
            uid,
            kind,
            resource,
            sub_resource: sub_resource.flatten(),
            request_kind: request_kind.flatten(),
            request_resource: request_resource.flatten(),
            request_sub_resource: request_sub_resource.flatten(),
            name: name.unwrap_or_default(),
            namespace: namespace.flatten(),
            operation,
            user_info: user_info.unwrap_or_default(),
            dry_run: dry_run.unwrap_or_default(),
        };
        Ok(Some((request, [object.flatten(), old_object.flatten()])))
    }
}

/// Where `part` (a slice of `body`) starts in `body`.
fn offset_in(body: &str, part: &str) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    (start + part.len() <= body.len()).then_some(start)
}

/// Why an object's one-pass reading did not give the object.
enum Abort<E> {
    /// The two-pass reading ends with this error too (once its envelope decodes).
    Settled(DecodeError),
    /// The one-pass reading cannot tell: read the review the two-pass way.
    Again,
    /// The deserializer's own error (its position is the body's, not the object's text's):
    /// read the review the two-pass way.
    De(E),
}

/// `object` or `oldObject`, read as [`decode_object`] reads it from its raw text.
struct ObjectSeed<'a, 'de, 'c> {
    review: &'a OnePassReview<'de, 'c>,
    gvk: &'a GroupVersionKind,
    /// Whether an error this reading ends with is the two-pass reading's.
    settles: bool,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, 'de, '_> {
    type Value = Option<DynamicObject>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, 'de, '_> {
    type Value = Option<DynamicObject>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let mut budget = self.review.budget.borrow_mut();
        let read = match Reading::for_kind(self.gvk) {
            Reading::Site(kind) => self.read_site(d, kind, &mut budget),
            Reading::Object { status } => self.read_other(d, status, &mut budget),
        };
        match read {
            Ok(object) => Ok(Some(object)),
            Err(Abort::Settled(e)) => {
                if self.settles {
                    *self.review.settled.borrow_mut() = Some(e);
                }
                Err(give_up())
            }
            Err(Abort::Again) => Err(give_up()),
            Err(Abort::De(e)) => Err(e),
        }
    }
}

impl<'de> ObjectSeed<'_, 'de, '_> {
    /// The object's raw text, as the two-pass reading holds it: from the end of its key, past
    /// the colon, to the brace that closes it. `None` when the key was not read as written or
    /// the value is no JSON object (the two-pass reading refuses it then).
    fn text(&self) -> Option<&'de str> {
        let body = self.review.body;
        let bytes = body.as_bytes();
        let quote = self.review.key_end.get()?;
        if bytes.get(quote) != Some(&b'"') {
            return None;
        }
        let colon = skip_blanks(bytes, quote + 1);
        if bytes.get(colon) != Some(&b':') {
            return None;
        }
        let start = skip_blanks(bytes, colon + 1);
        if bytes.get(start) != Some(&b'{') {
            return None;
        }
        body.get(start..object_end(bytes, start)?)
    }

    /// [`decode_object`]'s site reading: the one-pass site reader over the deserializer, its
    /// fallbacks from the object's raw text.
    fn read_site<D: de::Deserializer<'de>>(
        &self,
        d: D,
        kind: SiteKind,
        budget: &mut Budget<'_>,
    ) -> Result<DynamicObject, Abort<D::Error>> {
        let (sites, reads) = (self.review.sites, self.review.reads);
        let ask = || match kind {
            SiteKind::ConfigMap => self.text().map(|raw| payload::worth_parsing(raw, sites)),
            SiteKind::Secret => Some(false),
        };
        let payload = PayloadQuestion::new(&ask);
        let before = budget.spent;
        let reader = SiteReader::new(kind, &payload, (sites, reads));
        let pruned = match read_pruned(
            d,
            &|path| reader.decide(path),
            Some(&|key, value| reader.on_top(key, value)),
            None,
            budget,
        ) {
            Ok(done) => Ok(done),
            Err(Unread::Stopped(e)) => Err(e),
            Err(Unread::De(e)) => return Err(Abort::De(e)),
        };
        let raw = || self.text().ok_or(Abort::Again);
        let payload = || payload.answer().ok_or(Abort::Again);
        match reader.finish(pruned, budget) {
            Ok(OnePass::Read(object)) => Ok(object),
            Ok(OnePass::Shell { root, meta, spent }) => {
                let (raw, payload) = (raw()?, payload()?);
                budget.spent = spent;
                let keys = site_keys(kind, &meta, sites, reads);
                read_site_data(raw, kind, payload, (root, meta, keys), sites, budget)
                    .map_err(Abort::Settled)
            }
            Ok(OnePass::Again) => {
                let (raw, payload) = (raw()?, payload()?);
                budget.spent = before;
                decode_site_two_pass(raw, kind, payload, (sites, reads), budget)
                    .map_err(Abort::Settled)
            }
            Err(OnePassError::Final(e)) => Err(Abort::Settled(e)),
            Err(OnePassError::Retry) => Err(Abort::Again),
        }
    }

    /// [`decode_object`]'s reading of any other kind: the first reading over the
    /// deserializer, the second (the CCM chart's values) from the object's raw text.
    ///
    /// The Helm values the first reading leaves out are set aside as text (where they stand
    /// and where their text is, no copy): when the object turns out to hold the CCM chart's
    /// values, only they are read and put back, instead of the whole object a second time.
    fn read_other<D: de::Deserializer<'de>>(
        &self,
        d: D,
        status: bool,
        budget: &mut Budget<'_>,
    ) -> Result<DynamicObject, Abort<D::Error>> {
        let set_aside = SetAside::default();
        let shell = |path: &[Seg]| match object_fields(path, status, false) {
            // What only the reading with values keeps.
            Decision::Skip if object_fields(path, status, true) == Decision::Keep => Decision::Raw,
            other => other,
        };
        let (root, total) = match read_pruned(d, &shell, None, Some(&set_aside), budget) {
            Ok(done) => done,
            Err(Unread::Stopped(e)) => return Err(Abort::Settled(e)),
            Err(Unread::De(e)) => return Err(Abort::De(e)),
        };
        let root_was_empty = root.as_object().is_some_and(Map::is_empty);
        let mut object = object_from(root, total, budget).map_err(Abort::Settled)?;
        if !crate::sites::helm::holds_chart_values(self.gvk, &object, self.review.sites) {
            return Ok(object);
        }
        if set_aside.replaced.get() || set_aside.lost.get() {
            return Err(Abort::Again);
        }
        let parts = set_aside.parts.into_inner();
        put_back(self.review.body, parts, root_was_empty, &mut object, budget)?;
        Ok(object)
    }
}

/// The first position from `at` that is not JSON whitespace.
fn skip_blanks(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// One past the brace that closes the JSON object opening at `start`, in JSON text that
/// serde_json reads: braces are counted outside strings, and a string ends at the first quote
/// that no backslash escapes. `None` when the text ends first.
fn object_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0_usize;
    let mut at = start;
    loop {
        at = find_any(bytes, at, [b'"', b'{', b'}'])?;
        match bytes[at] {
            b'"' => at = string_end(bytes, at + 1)?,
            b'{' => {
                depth += 1;
                at += 1;
            }
            _ => {
                depth = depth.checked_sub(1)?;
                at += 1;
                if depth == 0 {
                    return Some(at);
                }
            }
        }
    }
}

/// One past the quote that ends the JSON string whose text starts at `at`.
fn string_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    loop {
        at = find_any(bytes, at, [b'"', b'\\'])?;
        if bytes[at] == b'"' {
            return Some(at + 1);
        }
        // An escape: the character after the backslash is part of it, whatever it is.
        at += 2;
    }
}

/// Reads the values `parts` set aside by a first reading of `object` (from `input`, the text
/// that reading read) and puts each back where the reading with values
/// ([`read_with_values`]) has it, charged as it charges them: the value, its map entry, and
/// the map's own cost when the entry is its first (`root_was_empty`: whether the object's
/// top-level map was empty before its metadata and types were taken out of it). The result,
/// and the budget spent, are that reading's. Any error but a cancellation is that reading's
/// to give, and it is read that way from the start ([`Abort::Again`]): which limit it meets
/// first (the budget, or a depth over [`MAX_JSON_DEPTH`] at a line and column of its own)
/// depends on its order, and this charges the parts after the rest of the object.
fn put_back<E>(
    input: &str,
    parts: Vec<SetAsidePart>,
    mut root_was_empty: bool,
    object: &mut DynamicObject,
    budget: &mut Budget<'_>,
) -> Result<(), Abort<E>> {
    for SetAsidePart { path, at, len } in parts {
        let text = SetAside::text_in(input, at, len).ok_or(Abort::Again)?;
        // serde_json counts depth from the object's text: the part stands inside one
        // container per step of its path.
        if path.len() + nesting(text) > MAX_JSON_DEPTH {
            return Err(Abort::Again);
        }
        let (value, total) = match prune(text, &|_| Decision::Keep, budget) {
            Ok(done) => done,
            Err(e @ DecodeError::Exhausted(_)) => return Err(Abort::Settled(e)),
            Err(_) => return Err(Abort::Again),
        };
        let Some((Seg::Key(key), parents)) = path.split_last() else {
            return Err(Abort::Again);
        };
        let mut parent = &mut object.data;
        for seg in parents {
            parent = match (seg, parent) {
                (Seg::Key(k), Value::Object(map)) => map.get_mut(k.as_ref()),
                (Seg::Index(i), Value::Array(items)) => items.get_mut(*i),
                _ => None,
            }
            .ok_or(Abort::Again)?;
        }
        let Value::Object(map) = parent else {
            return Err(Abort::Again);
        };
        let empty = if parents.is_empty() {
            std::mem::take(&mut root_was_empty)
        } else {
            map.is_empty()
        };
        let cost = Cost::MAP_ENTRY + key.len() + if empty { Cost::MAP } else { 0 };
        let total = total.saturating_add(cost);
        if total > budget.limit {
            return Err(Abort::Again);
        }
        if map.insert(key.to_string(), value).is_some() {
            return Err(Abort::Again);
        }
        budget.spent = total;
    }
    Ok(())
}

/// The most JSON containers open at once in `text`, valid JSON: as serde_json counts depth.
fn nesting(text: &str) -> usize {
    let bytes = text.as_bytes();
    let (mut depth, mut deepest, mut at) = (0usize, 0usize, 0usize);
    while let Some(found) = find_any(bytes, at, [b'"', b'{', b'[', b'}', b']']) {
        at = match bytes[found] {
            b'"' => match string_end(bytes, found + 1) {
                Some(end) => end,
                None => break,
            },
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
                found + 1
            }
            _ => {
                depth = depth.saturating_sub(1);
                found + 1
            }
        };
    }
    deepest
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

/// Decodes one object from its raw JSON text `raw` (the two-pass reading's second step).
fn decode_object(
    raw: &str,
    gvk: &GroupVersionKind,
    reading: Reading,
    (sites, reads): (&SitesDocument, Option<&CcmConfigReads>),
    budget: &mut Budget<'_>,
) -> Result<DynamicObject, DecodeError> {
    match reading {
        Reading::Site(kind) => {
            // A ConfigMap may be a ClusterResourceSet payload whatever its metadata says.
            // Asked at most once per object, when a reading depends on it.
            let ask = || Some(kind == SiteKind::ConfigMap && payload::worth_parsing(raw, sites));
            let question = PayloadQuestion::new(&ask);
            let payload = || question.answer().unwrap_or_default();
            let before = budget.spent;
            match decode_site_one_pass(raw, kind, &question, (sites, reads), budget) {
                Ok(OnePass::Read(object)) => return Ok(object),
                // The shell is what the two-pass reader's first reading would give: only
                // its second reading is left.
                Ok(OnePass::Shell { root, meta, spent }) => {
                    let payload = payload();
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
            decode_site_two_pass(raw, kind, payload(), (sites, reads), budget)
        }
        Reading::Object { status } => {
            let before = budget.spent;
            let shell = |path: &[Seg]| object_fields(path, status, false);
            let (root, total) = prune(raw, &shell, budget)?;
            let object = object_from(root, total, budget)?;
            if !crate::sites::helm::holds_chart_values(gvk, &object, sites) {
                return Ok(object);
            }
            // The CCM chart's values: read again, values included. The first reading is
            // dropped first, so only one of them is ever held.
            drop(object);
            read_with_values(raw, status, before, budget)
        }
    }
}

/// The object pruned to `root`, whose reading brought the budget's total to `total`.
fn object_from(
    root: Value,
    total: usize,
    budget: &mut Budget<'_>,
) -> Result<DynamicObject, DecodeError> {
    budget.spent = total;
    let meta = metadata_of(&root)?;
    into_object(root, meta)
}

/// The second reading of an object that holds the CCM chart's values, from its raw text:
/// everything but `managedFields` (and `status`, unless `status`), charged from `before`.
fn read_with_values(
    raw: &str,
    status: bool,
    before: usize,
    budget: &mut Budget<'_>,
) -> Result<DynamicObject, DecodeError> {
    budget.spent = before;
    let full = |path: &[Seg]| object_fields(path, status, true);
    let (root, total) = prune(raw, &full, budget)?;
    object_from(root, total, budget)
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
    /// The payload question was asked and could not be answered.
    unanswered: bool,
    /// The object's last top-level `apiVersion` and `kind`, taken out of the tree as they are
    /// read (see [`SiteReader::on_top`]).
    types: [Option<Value>; 2],
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
/// `payload`: whether the ConfigMap may be a ClusterResourceSet payload
/// ([`PayloadQuestion`], asked only for a data key no site names, or when no key is named); a
/// Secret is one by its `type`, read after its data, so it is first read as not being one.
fn decode_site_one_pass(
    raw: &str,
    kind: SiteKind,
    payload: &PayloadQuestion<'_>,
    (sites, reads): (&SitesDocument, Option<&CcmConfigReads>),
    budget: &mut Budget<'_>,
) -> Result<OnePass, OnePassError> {
    let reader = SiteReader::new(kind, payload, (sites, reads));
    let pruned = prune_with(
        raw,
        &|path| reader.decide(path),
        Some(&|key, value| reader.on_top(key, value)),
        budget,
    );
    reader.finish(pruned, budget)
}

/// Whether a ConfigMap may be a ClusterResourceSet payload ([`payload::worth_parsing`] on its
/// raw text; never a Secret, whose `type` says it), asked only when a reading depends on it:
/// answering scans the whole object's text a second time (finding where it ends, then the
/// needles), and a site ConfigMap that holds only the keys its sites name never needs the
/// answer, since those keys are read either way.
struct PayloadQuestion<'q> {
    /// The answer once asked; `None` inside: the object's raw text could not be found, and
    /// the reading is redone the two-pass way.
    answer: OnceCell<Option<bool>>,
    ask: &'q dyn Fn() -> Option<bool>,
}

impl<'q> PayloadQuestion<'q> {
    fn new(ask: &'q dyn Fn() -> Option<bool>) -> Self {
        PayloadQuestion {
            answer: OnceCell::new(),
            ask,
        }
    }

    /// The answer, asked at most once; `None` when it cannot be had.
    fn answer(&self) -> Option<bool> {
        *self.answer.get_or_init(self.ask)
    }
}

/// The one-pass site reader: its decisions depend on the metadata read so far.
struct SiteReader<'s> {
    kind: SiteKind,
    payload: &'s PayloadQuestion<'s>,
    sites: &'s SitesDocument,
    reads: Option<&'s CcmConfigReads>,
    sight: RefCell<SiteSight>,
}

impl<'s> SiteReader<'s> {
    fn new(
        kind: SiteKind,
        payload: &'s PayloadQuestion<'s>,
        (sites, reads): (&'s SitesDocument, Option<&'s CcmConfigReads>),
    ) -> Self {
        SiteReader {
            kind,
            payload,
            sites,
            reads,
            sight: RefCell::new(SiteSight::default()),
        }
    }

    /// Whether the ConfigMap may be a payload; a question with no answer is remembered and
    /// the reading ends [`OnePassError::Retry`].
    fn payload(&self, sight: &mut SiteSight) -> bool {
        self.payload.answer().unwrap_or_else(|| {
            sight.unanswered = true;
            false
        })
    }

    fn decide(&self, path: &[Seg]) -> Decision {
        match path {
            [f] if is(f, "data") || is(f, "stringData") => {
                let mut s = self.sight.borrow_mut();
                s.data_seen = true;
                let Some((_, keys)) = &s.meta else {
                    s.out_of_order = true;
                    return Decision::Skip;
                };
                let no_key = keys.is_empty();
                // No key wanted: the two-pass reader does not read the data at all.
                if no_key && !self.payload(&mut s) {
                    return Decision::Skip;
                }
                s.data_read = true;
                Decision::Descend
            }
            // `site_data`, the payload question asked only for a key no site names.
            [f, Seg::Key(key)] if is(f, "data") || is(f, "stringData") => {
                let mut s = self.sight.borrow_mut();
                let named = match &s.meta {
                    Some((_, keys)) => names(keys, key),
                    None => return Decision::Skip,
                };
                if named || self.payload(&mut s) {
                    Decision::Keep
                } else {
                    Decision::Skip
                }
            }
            // Anything else (an element of a data list) is skipped by `site_shell`.
            _ => site_shell(path),
        }
    }

    /// Takes the top-level `metadata`, `apiVersion` and `kind` out of the tree as they are
    /// read: the object is made of them without their ever being put in the tree and taken
    /// out again ([`into_object`] takes them out of it; a later field of the same name
    /// replaces an earlier one, as in the tree). The metadata is decoded into its type here,
    /// once, moving its strings rather than copying them.
    fn on_top(&self, key: &str, value: Value) -> Option<Value> {
        let mut s = self.sight.borrow_mut();
        match key {
            "metadata" => {
                if s.data_seen {
                    s.out_of_order = true;
                }
                match metadata_from_value(value) {
                    Ok(meta) => {
                        let keys = site_keys(self.kind, &meta, self.sites, self.reads);
                        s.meta = Some((meta, keys));
                    }
                    Err(_) => s.bad_meta = true,
                }
            }
            "apiVersion" => s.types[0] = Some(value),
            "kind" => s.types[1] = Some(value),
            _ => return Some(value),
        }
        None
    }

    /// What the reading `pruned` (this reader's decisions) comes to.
    fn finish(
        self,
        pruned: Result<(Value, usize), DecodeError>,
        budget: &mut Budget<'_>,
    ) -> Result<OnePass, OnePassError> {
        let SiteReader {
            kind,
            payload,
            sites,
            sight,
            ..
        } = self;
        let sight = sight.into_inner();
        if sight.unanswered {
            return Err(OnePassError::Retry);
        }
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
            // The shell as the two-pass reader has it: its types back in (its metadata is
            // taken out of it again anyway).
            if let Value::Object(fields) = &mut root {
                for (key, value) in TYPE_KEYS.into_iter().zip(sight.types) {
                    if let Some(value) = value {
                        fields.insert(key.to_owned(), value);
                    }
                }
            }
            return Ok(OnePass::Shell {
                root,
                meta,
                spent: total,
            });
        }
        let mut spent = total;
        let wanted = !keys.is_empty()
            || match payload.answer() {
                Some(answer) => answer,
                None => return Err(OnePassError::Retry),
            };
        if wanted {
            // The two-pass reader builds the data fields in a second tree and pays for its root
            // (and, once it holds a field, for its map) before merging: charged alike here.
            spent = spent.saturating_add(Cost::VALUE);
            if root.get("data").is_some() || root.get("stringData").is_some() {
                spent = spent.saturating_add(Cost::MAP);
            }
            if spent > budget.limit {
                return Err(OnePassError::Retry);
            }
            // Only the values that may embed a site or a CCM object are kept. Whatever the
            // payload question's answer, or if it was never asked (then only named keys were
            // read), what `keep_payload_values` keeps is what the two-pass reading keeps.
            keep_payload_values(&mut root, &keys, sites);
        }
        budget.spent = spent;
        // The tree holds neither the metadata nor the types (`on_top` took them).
        let Value::Object(fields) = root else {
            return Err(OnePassError::Retry);
        };
        object_of(fields, meta, sight.types)
            .map(OnePass::Read)
            .map_err(|_| OnePassError::Retry)
    }
}

/// Reads a ConfigMap or Secret in two passes: the shell with its metadata, then the data keys
/// that metadata names. `payload` as for [`decode_site_one_pass`].
fn decode_site_two_pass(
    raw: &str,
    kind: SiteKind,
    payload: bool,
    (sites, reads): (&SitesDocument, Option<&CcmConfigReads>),
    budget: &mut Budget<'_>,
) -> Result<DynamicObject, DecodeError> {
    let (root, total) = prune(raw, &site_shell, budget)?;
    budget.spent = total;
    let meta = metadata_of(&root)?;
    let keys = site_keys(kind, &meta, sites, reads);
    read_site_data(raw, kind, payload, (root, meta, keys), sites, budget)
}

/// The second reading of a ConfigMap or Secret: the data keys in `keys` (every value of a
/// ClusterResourceSet payload) added to the shell `root`, whose metadata is `meta`.
fn read_site_data(
    raw: &str,
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
        let (mut data, total) = prune(raw, &wanted, budget)?;
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

/// Called with each top-level field of an object as soon as it is decoded: gives back the
/// value to put in the tree, or `None` when it took the value (it is charged all the same).
type OnTop<'c> = &'c dyn Fn(&str, Value) -> Option<Value>;

/// [`prune`], calling `on_top` with each top-level field as soon as it is decoded (so that
/// `decide` can depend on it for the fields that follow).
fn prune_with(
    json: &str,
    decide: &dyn Fn(&[Seg]) -> Decision,
    on_top: Option<OnTop<'_>>,
    budget: &Budget<'_>,
) -> Result<(Value, usize), DecodeError> {
    let mut de = serde_json::Deserializer::from_str(json);
    match read_pruned(&mut de, decide, on_top, None, budget) {
        Ok(done) => de.end().map(|()| done).map_err(DecodeError::json),
        Err(Unread::Stopped(e)) => Err(e),
        Err(Unread::De(e)) => Err(DecodeError::json(e)),
    }
}

/// Why [`read_pruned`] read no value.
enum Unread<E> {
    /// The budget ran out or the reading was cancelled: the error the reading gives.
    Stopped(DecodeError),
    /// The deserializer's own error.
    De(E),
}

/// Reads one value from `de`, pruned by `decide`, charging from `budget.spent`; returns the
/// value and the new total spent. `de` reads an object's own text ([`prune_with`]) or the
/// review's, where it stands at the object ([`decode_in_one_pass`]).
fn read_pruned<'de, D: de::Deserializer<'de>>(
    de: D,
    decide: &dyn Fn(&[Seg]) -> Decision,
    on_top: Option<OnTop<'_>>,
    set_aside: Option<&SetAside>,
    budget: &Budget<'_>,
) -> Result<(Value, usize), Unread<D::Error>> {
    let ctx = Ctx {
        decide,
        on_top,
        set_aside,
        path: RefCell::new(Vec::new()),
        spent: Cell::new(budget.spent),
        limit: budget.limit,
        nodes: Cell::new(0),
        cancel: budget.cancel,
        stop: Cell::new(None),
    };
    let result = Node {
        ctx: &ctx,
        mode: Decision::Descend,
    }
    .deserialize(de);
    match (result, ctx.stop.get()) {
        (_, Some(Stop::Budget)) => Err(Unread::Stopped(DecodeError::TooComplex {
            limit: budget.limit,
        })),
        (_, Some(Stop::Cancelled)) => Err(Unread::Stopped(DecodeError::Exhausted(
            budget.cancel.check().err().unwrap_or(Exhausted::Deadline),
        ))),
        (Err(e), None) => Err(Unread::De(e)),
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

/// [`metadata_from`], consuming the value: its strings and maps are moved, not copied.
/// serde_json reads an owned `Value` as it reads a borrowed one (the same visitor calls but
/// for owned strings), so the metadata is the same, and so is whether it decodes.
fn metadata_from_value(metadata: Value) -> Result<ObjectMeta, DecodeError> {
    let mut meta = match metadata {
        Value::Null => ObjectMeta::default(),
        m => ObjectMeta::deserialize(m)?,
    };
    crate::rules::bound_names(&mut meta);
    Ok(meta)
}

/// The top-level fields an object's types are read from.
const TYPE_KEYS: [&str; 2] = ["apiVersion", "kind"];

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
    let types = TYPE_KEYS.map(|key| fields.remove(key));
    object_of(fields, metadata, types)
}

/// The object made of its top-level `fields` (without `metadata`, `apiVersion` and `kind`),
/// its `metadata`, and its `apiVersion` and `kind` fields as read.
fn object_of(
    fields: Map<String, Value>,
    metadata: ObjectMeta,
    [api_version, kind]: [Option<Value>; 2],
) -> Result<DynamicObject, DecodeError> {
    let string = |v: Option<Value>| match v {
        Some(Value::String(s)) => Ok(Some(s)),
        None | Some(Value::Null) => Ok(None),
        Some(other) => Err(DecodeError::Json(
            <serde_json::Error as de::Error>::invalid_type(unexpected(&other), &"a string"),
        )),
    };
    let api_version = string(api_version)?;
    let kind = string(kind)?;
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

/// One step of a path inside an object. No reading decides by the position of an element;
/// the position (in the array as decoded, skipped elements left out) is kept so that a value
/// whose text was set aside ([`Decision::Raw`]) can be put back where a full reading puts it.
/// A key is borrowed from the JSON text when it holds no escape: a field that is skipped
/// never has its name copied.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg<'k> {
    Key(Cow<'k, str>),
    Index(usize),
}

impl Seg<'_> {
    /// The step, owning its key.
    fn into_owned(self) -> Seg<'static> {
        match self {
            Seg::Key(k) => Seg::Key(Cow::Owned(k.into_owned())),
            Seg::Index(i) => Seg::Index(i),
        }
    }
}

/// Whether `keys` holds `key`.
fn names(keys: &[String], key: &str) -> bool {
    keys.iter().any(|k| k == key)
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
    /// Scan past it, as [`Decision::Skip`], and set its text aside in the context's
    /// [`SetAside`] for a later reading that may want it (an array element is only marked
    /// lost there: its place among the elements kept is not known).
    Raw,
}

fn is(seg: &Seg, key: &str) -> bool {
    matches!(seg, Seg::Key(k) if k == key)
}

/// First reading of a ConfigMap or Secret: everything but the data maps.
fn site_shell(path: &[Seg]) -> Decision {
    if let Some(decision) = metadata_fields(path) {
        return decision;
    }
    match path {
        [f] if is(f, "apiVersion") || is(f, "kind") || is(f, "type") || is(f, "immutable") => {
            Decision::Keep
        }
        _ => Decision::Skip,
    }
}

/// kubectl's copy of the whole object as last applied (client-side `kubectl apply`): often
/// the largest field of an object (on a Secret, its data), and nothing stackgate reads.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What every reading keeps of `metadata`: all of it but `managedFields` and kubectl's
/// [`LAST_APPLIED`] annotation. `None` for a path outside `metadata`.
fn metadata_fields(path: &[Seg]) -> Option<Decision> {
    let key = |i: usize, k: &str| path.get(i).is_some_and(|s| is(s, k));
    if !key(0, "metadata") {
        return None;
    }
    Some(match path.len() {
        1 => Decision::Descend,
        2 if key(1, "managedFields") => Decision::Skip,
        2 if key(1, "annotations") => Decision::Descend,
        3 if key(1, "annotations") && key(2, LAST_APPLIED) => Decision::Skip,
        _ => Decision::Keep,
    })
}

/// Second reading of a ConfigMap or Secret: only the data keys in `keys` (every key of a
/// ClusterResourceSet payload, `all`).
fn site_data(path: &[Seg], keys: &[String], all: bool) -> Decision {
    match path {
        [f] if is(f, "data") || is(f, "stringData") => Decision::Descend,
        [f, Seg::Key(k)] if (is(f, "data") || is(f, "stringData")) && (all || names(keys, k)) => {
            Decision::Keep
        }
        _ => Decision::Skip,
    }
}

/// Any other kind: everything but what [`metadata_fields`] leaves out, `status` (unless `status`) and,
/// unless `values`, the Helm values subtrees of the GitOps carriers (Flux `spec.values`,
/// Argo CD `helm.valuesObject`, a values file's `values`).
fn object_fields(path: &[Seg], status: bool, values: bool) -> Decision {
    use Decision::{Descend, Keep, Skip};
    if let Some(decision) = metadata_fields(path) {
        return decision;
    }
    let key = |i: usize, k: &str| path.get(i).is_some_and(|s| is(s, k));
    match path.len() {
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

/// The values a reading set aside ([`Decision::Raw`]): where each stands (its path, array
/// positions as decoded) and where its text is (address and length: the text is the
/// deserializer's input, found again with [`SetAside::text_in`]).
#[derive(Default)]
struct SetAside {
    parts: RefCell<Vec<SetAsidePart>>,
    /// A map key came twice, so a value set aside may have been inside the value the second
    /// one replaced.
    replaced: Cell<bool>,
    /// An array element was to be set aside and was skipped, or more than
    /// [`MAX_SET_ASIDE`] values were.
    lost: Cell<bool>,
}

/// The most values one reading sets aside. Each holds its path, and another chart's values
/// (which are set aside too, until the object says whose values they are) may have any
/// number of keys: past this many, the rest are skipped as before and an object that holds
/// the CCM chart's values is read the two-pass way. The CCM chart's values have a few dozen
/// top-level keys.
const MAX_SET_ASIDE: usize = 256;

/// One value set aside: where it stands, and the address and length of its text.
struct SetAsidePart {
    path: Vec<Seg<'static>>,
    at: usize,
    len: usize,
}

impl SetAside {
    fn keep(&self, path: &[Seg], text: &str) {
        let mut parts = self.parts.borrow_mut();
        if parts.len() == MAX_SET_ASIDE {
            self.lost.set(true);
            return;
        }
        parts.push(SetAsidePart {
            path: path.iter().cloned().map(Seg::into_owned).collect(),
            at: text.as_ptr() as usize,
            len: text.len(),
        });
    }

    /// The text of a part set aside, if it lies inside `input`, the text the reading read.
    fn text_in(input: &str, at: usize, len: usize) -> Option<&str> {
        let start = at.checked_sub(input.as_ptr() as usize)?;
        input.get(start..start.checked_add(len)?)
    }
}

struct Ctx<'c, 'de> {
    decide: &'c dyn Fn(&[Seg]) -> Decision,
    on_top: Option<OnTop<'c>>,
    set_aside: Option<&'c SetAside>,
    path: RefCell<Vec<Seg<'de>>>,
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

impl Ctx<'_, '_> {
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
struct Node<'a, 'c, 'de> {
    ctx: &'a Ctx<'c, 'de>,
    mode: Decision,
}

impl<'de> DeserializeSeed<'de> for Node<'_, '_, 'de> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, '_, 'de> {
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
            self.ctx.path.borrow_mut().push(Seg::Index(out.len()));
            let decision = match self.ctx.decide(self.mode) {
                Decision::Raw => {
                    // Where the element stands among what a full reading keeps is not
                    // known: skipped, and a reading that wants it reads the object again.
                    if let Some(set_aside) = self.ctx.set_aside {
                        set_aside.lost.set(true);
                    }
                    Decision::Skip
                }
                other => other,
            };
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
        // Whether a field was kept yet (the map is paid for with its first): not
        // `out.is_empty()`, since `on_top` may take fields out of the tree.
        let mut first = true;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            self.ctx.path.borrow_mut().push(Seg::Key(key.into_cow()));
            let decision = self.ctx.decide(self.mode);
            let value = match (decision, self.ctx.set_aside) {
                (Decision::Skip, _) | (Decision::Raw, None) => {
                    map.next_value::<IgnoredAny>().map(|_| None)
                }
                (Decision::Raw, Some(set_aside)) => map.next_value::<&'de RawValue>().map(|raw| {
                    set_aside.keep(&self.ctx.path.borrow(), raw.get());
                    None
                }),
                (mode, _) => map
                    .next_value_seed(Node {
                        ctx: self.ctx,
                        mode,
                    })
                    .map(Some),
            };
            let key = match self.ctx.path.borrow_mut().pop() {
                Some(Seg::Key(k)) => k,
                _ => Cow::Borrowed(""),
            };
            if let Some(value) = value? {
                let value = match self.ctx.on_top {
                    Some(on_top) if self.ctx.path.borrow().is_empty() => on_top(&key, value),
                    _ => Some(value),
                };
                let cost = Cost::MAP_ENTRY + key.len() + if first { Cost::MAP } else { 0 };
                first = false;
                self.ctx.charge::<A::Error>(cost)?;
                if let Some(value) = value
                    && out.insert(key.into_owned(), value).is_some()
                    && let Some(set_aside) = self.ctx.set_aside
                {
                    // A later value replaced an earlier one, which may hold a value set aside:
                    // where a full reading would put it back is not known.
                    set_aside.replaced.set(true);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Lcg;
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
            raw.get(),
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
            raw.get(),
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
            // The types, taken out of the tree as they are read: the last of a name counts, a
            // null is none, anything but a string is an error (the two-pass reading's).
            (ConfigMap, format!(r#"{{"kind": "Other", "apiVersion": "v0", "metadata": {{"name": "cm", {label}}}, "kind": "ConfigMap", "data": {{"cloud.conf": "x"}}, "apiVersion": null}}"#), "read"),
            (Secret, format!(r#"{{"apiVersion": "v1", "metadata": {{"name": "v", {values}}}, "data": {{"v.yaml": "eA=="}}, "kind": "Secret", "type": "Opaque"}}"#), "read"),
            (ConfigMap, format!(r#"{{"kind": 3, "metadata": {{"name": "cm", {label}}}, "data": {{"cloud.conf": "x"}}}}"#), "again"),
            (ConfigMap, format!(r#"{{"metadata": {{"name": "cm", {label}}}, "apiVersion": ["v1"], "data": {{"cloud.conf": "x"}}}}"#), "again"),
            // Only the object's own top-level fields are its types and metadata: a data key
            // of the same name is data.
            (ConfigMap, r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"stackgate.dev/cloud-config": "kind"}}, "data": {"kind": "[Global]\n", "apiVersion": "x"}}"#.to_owned(), "read"),
            // Escaped keys: read as their text says.
            (ConfigMap, format!(r#"{{"metad\u0061ta": {{"name": "cm", {label}}}, "d\u0061ta": {{"cloud\u002econf": "x", "other": "y"}}, "\u006bind": "ConfigMap"}}"#), "read"),
            // Data before metadata (the order of a re-serialized JSON map, sorted by key), a
            // payload Secret with no key named: the shell was read, its data is left.
            (ConfigMap, format!(r#"{{"data": {{"cloud.conf": "x"}}, "metadata": {{"name": "cm", {label}}}}}"#), "shell"),
            (ConfigMap, r#"{"apiVersion": "v1", "data": {"a": "b"}, "kind": "ConfigMap", "metadata": {"name": "cm"}}"#.to_owned(), "shell"),
            (ConfigMap, format!(r#"{{"data": {{"p.yaml": {manifest}, "cni.yaml": "kind: DaemonSet\n"}}, "metadata": {{"name": "crs", "namespace": "ns"}}}}"#), "shell"),
            (Secret, r#"{"metadata": {"name": "crs"}, "data": {"a": "eA==", "b": "eQ=="}, "type": "addons.cluster.x-k8s.io/resource-set"}"#.to_owned(), "shell"),
            (Secret, format!(r#"{{"data": {{"v.yaml": "eA=="}}, "metadata": {{"name": "v", {values}}}, "type": "Opaque"}}"#), "shell"),
            (Secret, format!(r#"{{"kind": "Secret", "data": {{"v.yaml": "eA=="}}, "apiVersion": "v1", "metadata": {{"name": "v", {values}}}, "kind": null}}"#), "shell"),
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
            let ask = || Some(*kind == ConfigMap && payload::worth_parsing(raw.get(), &sites));
            let payload = PayloadQuestion::new(&ask);
            let read =
                decode_site_one_pass(raw.get(), *kind, &payload, (&sites, None), &mut budget);
            let ended = match read {
                Ok(OnePass::Read(_)) => "read",
                Ok(OnePass::Shell { .. }) => "shell",
                Ok(OnePass::Again) | Err(OnePassError::Retry) => "again",
                Err(OnePassError::Final(_)) => "error",
            };
            assert_eq!(ended, *ends, "{object}");
        }
    }

    /// The payload question scans the whole object: a ConfigMap whose data holds only the keys
    /// its sites name reads the same without it, so it is not asked; any other key, or none
    /// named, asks it once; and a question that cannot be answered sends the reading the
    /// two-pass way instead of guessing.
    #[test]
    fn the_payload_question_is_asked_only_when_a_reading_depends_on_it() {
        let label = r#""labels": {"stackgate.dev/cloud-config": "cloud.conf"}"#;
        let manifest = r#""apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n""#;
        let sites = sites();
        // (object, times asked, how the reading ends)
        let cases = [
            (
                format!(
                    r#"{{"metadata": {{"name": "cm", {label}}}, "data": {{"cloud.conf": "[Global]\n"}}}}"#
                ),
                0,
                "read",
            ),
            (
                format!(r#"{{"metadata": {{"name": "cm", {label}}}}}"#),
                0,
                "read",
            ),
            (
                format!(
                    r#"{{"metadata": {{"name": "cm", {label}}}, "data": {{"cloud.conf": "x", "ca.crt": "y"}}}}"#
                ),
                1,
                "read",
            ),
            (
                format!(
                    r#"{{"metadata": {{"name": "crs"}}, "data": {{"p.yaml": {manifest}, "cni.yaml": "kind: DaemonSet\n"}}}}"#
                ),
                1,
                "read",
            ),
            (r#"{"metadata": {"name": "plain"}}"#.to_owned(), 1, "read"),
            (
                r#"{"metadata": {"name": "plain"}, "data": {"a": "b"}}"#.to_owned(),
                1,
                "read",
            ),
        ];
        for (object, asked, ends) in &cases {
            let raw = RawValue::from_string(object.clone()).expect("raw JSON");
            let cancel = Cancel::never();
            let mut budget = Budget {
                limit: MAX_DECODED_BYTES,
                spent: 0,
                cancel: &cancel,
            };
            let times = Cell::new(0);
            let ask = || {
                times.set(times.get() + 1);
                Some(payload::worth_parsing(raw.get(), &sites))
            };
            let question = PayloadQuestion::new(&ask);
            let one = decode_site_one_pass(
                raw.get(),
                SiteKind::ConfigMap,
                &question,
                (&sites, None),
                &mut budget,
            );
            let ended = match &one {
                Ok(OnePass::Read(_)) => "read",
                Ok(OnePass::Shell { .. }) => "shell",
                Ok(OnePass::Again) | Err(OnePassError::Retry) => "again",
                Err(OnePassError::Final(_)) => "error",
            };
            assert_eq!((times.get(), ended), (*asked, *ends), "{object}");
            // Asked or not, the object read is the two-pass reading's, charge for charge.
            let [one, two] = both_ways(SiteKind::ConfigMap, object, MAX_DECODED_BYTES);
            assert_eq!(one, two, "{object}");

            // Unanswerable: a reading that needed the answer is done again, one that did not
            // stands.
            let cancel = Cancel::never();
            let mut budget = Budget {
                limit: MAX_DECODED_BYTES,
                spent: 0,
                cancel: &cancel,
            };
            let none = || None;
            let question = PayloadQuestion::new(&none);
            let read = decode_site_one_pass(
                raw.get(),
                SiteKind::ConfigMap,
                &question,
                (&sites, None),
                &mut budget,
            );
            let again = matches!(read, Err(OnePassError::Retry));
            assert_eq!(again, *asked > 0, "{object}");
        }
    }

    /// The request's own name and namespace are bounded as every name is ([`ShortText::name`]):
    /// kept whole up to the limit, cut with their length after it.
    #[test]
    fn the_requests_name_and_namespace_are_bounded() {
        for len in [
            1,
            crate::short_text::NAME_MAX_BYTES,
            crate::short_text::NAME_MAX_BYTES + 1,
            300,
        ] {
            let name = "n".repeat(len);
            let namespace = "s".repeat(len);
            let mut review: Value = serde_json::from_slice(&review(
                ("", "v1", "ConfigMap"),
                json!({"metadata": {"name": "cm"}}),
            ))
            .expect("JSON");
            review["request"]["name"] = json!(name);
            review["request"]["namespace"] = json!(namespace);
            let body = serde_json::to_vec(&review).expect("serializes");
            let request = decode(&body).expect("decodes").request;
            assert_eq!(request.name, ShortText::name(&name).into_string(), "{len}");
            assert_eq!(
                request.namespace,
                Some(ShortText::name(&namespace).into_string()),
                "{len}"
            );
            let cut = len > crate::short_text::NAME_MAX_BYTES;
            assert_eq!(request.name == name, !cut, "{len}");
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

    /// A JSON value made of pieces that trip a brace count: quotes, backslashes and braces in
    /// strings and keys, escapes, non-ASCII text, nesting.
    fn tricky_value(rng: &mut Lcg, depth: usize) -> Value {
        let pieces = [
            "{",
            "}",
            "\"",
            "\\",
            "\\\"",
            "[",
            "]",
            "é",
            "x",
            "\u{1F600}",
            " ",
            "\n",
        ];
        let text = |rng: &mut Lcg| -> String {
            (0..rng.below(5))
                .map(|_| pieces[rng.below(pieces.len())])
                .collect()
        };
        match if depth == 0 {
            rng.below(3)
        } else {
            rng.below(5)
        } {
            0 => Value::String(text(rng)),
            1 => json!(rng.below(1000)),
            2 => Value::Null,
            3 => Value::Array(
                (0..rng.below(4))
                    .map(|_| tricky_value(rng, depth - 1))
                    .collect(),
            ),
            _ => Value::Object(
                (0..rng.below(4))
                    .map(|_| (text(rng), tricky_value(rng, depth - 1)))
                    .collect(),
            ),
        }
    }

    /// The brace count finds the end serde_json finds: the length of the raw value it
    /// borrows, for objects written compact and pretty, inside other JSON.
    #[test]
    fn object_end_is_where_the_raw_value_ends() {
        let mut rng = Lcg(0x31);
        for round in 0..3_000 {
            let mut object = serde_json::Map::new();
            for _ in 0..rng.below(4) {
                object.insert(format!("k{}", rng.below(9)), tricky_value(&mut rng, 4));
            }
            let object = Value::Object(object);
            let written = if round % 2 == 0 {
                object.to_string()
            } else {
                serde_json::to_string_pretty(&object).expect("writes")
            };
            let before = r#"{"a": ["}", "{\"", {"b": "}}"}], "object": "#;
            let text = format!(r#"{before}{written} , "z": "{{" }}"#);
            let start = before.len();
            assert_eq!(
                object_end(text.as_bytes(), start),
                Some(start + written.len()),
                "{text}"
            );
            let raw: &RawValue = serde_json::from_str(&written).expect("raw");
            assert_eq!(raw.get().len(), written.len());
            // Cut short, the object has no end.
            let cut = &text.as_bytes()[..start + written.len() - 1];
            assert_eq!(object_end(cut, start), None, "{text}");
        }
    }

    /// The word-at-a-time search answers as a byte-by-byte one, at every alignment.
    #[test]
    fn find_any_finds_the_first_needle() {
        let mut rng = Lcg(0xf1);
        let alphabet = [
            b'a', b'"', b'\\', b'{', b'}', 0x01, 0x80, 0x21, 0x5b, 0xff, 0x00,
        ];
        for _ in 0..20_000 {
            let bytes: Vec<u8> = (0..rng.below(40))
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect();
            let from = rng.below(bytes.len() + 2);
            let naive = |needles: &[u8]| {
                bytes
                    .get(from..)
                    .and_then(|rest| rest.iter().position(|b| needles.contains(b)))
                    .map(|i| from + i)
            };
            assert_eq!(
                find_any(&bytes, from, [b'"', b'{', b'}']),
                naive(b"\"{}"),
                "{bytes:?} from {from}"
            );
            assert_eq!(
                find_any(&bytes, from, [b'"', b'\\']),
                naive(b"\"\\"),
                "{bytes:?} from {from}"
            );
        }
    }

    /// A key's place is known only for a slice of the body, wholly inside it.
    #[test]
    fn offset_in_places_slices_of_the_body_only() {
        let text = "0123456789abcdef";
        let body = &text[..10];
        assert_eq!(offset_in(body, &body[3..5]), Some(3));
        assert_eq!(offset_in(body, &body[6..]), Some(6));
        assert_eq!(offset_in(body, &text[8..12]), None);
        assert_eq!(offset_in(&text[4..], &text[..2]), None);
    }

    /// How the one-pass reading ends for `body`: "read", its error "settled", or "again"
    /// (read the two-pass way).
    fn one_pass_ends(body: &[u8], sites: &SitesDocument, limit: usize) -> &'static str {
        match decode_in_one_pass(body, (sites, None), limit, &Cancel::never()) {
            Some(Ok(_)) => "read",
            Some(Err(_)) => "settled",
            None => "again",
        }
    }

    /// Decodes `body` with [`decode_review`] and with the two-pass reading alone, each with
    /// its own flag from `cancel`: the results as written by `Debug` (every field, the error
    /// and its position, the decoded-memory charge) and the looks at the flag.
    fn review_both_ways(
        body: &[u8],
        sites: &SitesDocument,
        limit: usize,
        cancel: &dyn Fn() -> Cancel,
    ) -> [(String, usize); 2] {
        let one = cancel();
        let decoded = decode_review(body, sites, None, limit, &one);
        let two = cancel();
        let read = decode_in_two_passes(body, sites, None, limit, &two);
        [
            (format!("{decoded:?}"), one.looks()),
            (format!("{read:?}"), two.looks()),
        ]
    }

    /// The decoded-memory limits a body is tried with: the default, and around its charge.
    fn limits_for(body: &[u8], sites: &SitesDocument) -> Vec<usize> {
        match decode_in_two_passes(body, sites, None, MAX_DECODED_BYTES, &Cancel::never()) {
            Ok(d) => vec![
                MAX_DECODED_BYTES,
                d.decoded_bytes,
                d.decoded_bytes.saturating_sub(1),
                d.decoded_bytes / 2,
            ],
            Err(_) => vec![MAX_DECODED_BYTES, 1_500],
        }
    }

    /// Checks `body` both ways at each of its limits; counts how the one-pass reading ended.
    fn check_both_ways(
        body: &[u8],
        sites: &SitesDocument,
        ends: &mut std::collections::BTreeMap<&'static str, usize>,
    ) {
        for limit in limits_for(body, sites) {
            let [one, two] = review_both_ways(body, sites, limit, &Cancel::never);
            assert_eq!(
                one,
                two,
                "within {limit}: {}",
                String::from_utf8_lossy(body)
            );
            *ends.entry(one_pass_ends(body, sites, limit)).or_default() += 1;
        }
    }

    /// The captured reviews, and each edited: re-serialized (keys sorted: data before
    /// metadata), with its object as `oldObject` too, with an escaped `object` key, a byte
    /// that is not UTF-8 in a string of the object, cut short, and with text after it.
    fn captured_variants() -> Vec<Vec<u8>> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/captured");
        let mut files = Vec::new();
        let mut dirs = vec![dir];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("fixture dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "json") {
                    files.push(path);
                }
            }
        }
        files.sort();
        assert!(files.len() >= 50, "{} captured reviews", files.len());
        let mut bodies = Vec::new();
        for path in files {
            let body = std::fs::read(&path).expect("fixture");
            let text = String::from_utf8(body.clone()).expect("UTF-8");
            let value: Value = serde_json::from_slice(&body).expect("JSON");
            let mut update = value.clone();
            if let Some(object) = update.pointer("/request/object").cloned()
                && !object.is_null()
            {
                update["request"]["oldObject"] = object;
            }
            bodies.push(serde_json::to_vec(&value).expect("writes"));
            bodies.push(serde_json::to_vec(&update).expect("writes"));
            bodies.push(
                text.replacen("\"object\"", "\"obj\\u0065ct\"", 1)
                    .into_bytes(),
            );
            for skipped in ["\"managedFields\"", "\"object\""] {
                if let Some(at) = text.find(skipped)
                    && let Some(quote) = text[at + skipped.len()..].find(": \"")
                {
                    let mut bad = body.clone();
                    bad.insert(at + skipped.len() + quote + 3, 0xff);
                    bodies.push(bad);
                }
            }
            bodies.push(body[..body.len() * 2 / 3].to_vec());
            let mut trailing = body.clone();
            trailing.extend_from_slice(b" x");
            bodies.push(trailing);
            bodies.push(body);
        }
        bodies
    }

    /// The one-pass reading decodes what the two-pass reading decodes, field for field,
    /// error for error (and position), charge for charge, at the default limit and around
    /// each review's own charge: for every captured review and its edits.
    #[test]
    fn captured_reviews_decode_alike_in_one_pass_and_two() {
        let sites = sites();
        let mut ends = std::collections::BTreeMap::new();
        for body in captured_variants() {
            check_both_ways(&body, &sites, &mut ends);
        }
        // Each way out of the one-pass reading is taken, the one-pass read most.
        for (end, at_least) in [("read", 300), ("settled", 20), ("again", 100)] {
            let n = ends.get(end).copied().unwrap_or(0);
            assert!(n >= at_least, "{end}: {n} ({ends:?})");
        }
    }

    /// Objects that exercise the readers: site objects in and out of the API server's order,
    /// payloads, the CCM chart's values and another chart's, a Machine, objects that are no
    /// objects, braces and quotes in strings, escaped keys, nesting around the depth cap.
    fn generated_objects() -> Vec<String> {
        let label = r#""labels": {"stackgate.dev/cloud-config": "cloud.conf"}"#;
        let values = r#""labels": {"stackgate.dev/ccm-values": "v.yaml"}"#;
        let manifest = r#""apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n""#;
        let ccm = "openstack-cloud-controller-manager";
        let mut objects = vec![
            format!(r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "cm", "namespace": "ns", {label}, "managedFields": [{{"manager": "x"}}]}}, "data": {{"cloud.conf": "[Global]\n", "other": "x"}}, "binaryData": {{"b": "AAAA"}}}}"#),
            r#"{"metadata": {"name": "cm"}, "data": {"a": "b"}}"#.to_owned(),
            format!(r#"{{"metadata": {{"name": "crs", "namespace": "ns"}}, "data": {{"p.yaml": {manifest}, "cni.yaml": "kind: DaemonSet\n"}}}}"#),
            format!(r#"{{"metadata": {{"name": "cm", {label}}}, "data": null, "stringData": {{"cloud.conf": "x"}}}}"#),
            format!(r#"{{"metadata": {{"name": "v", "namespace": "ns", {values}}}, "data": {{"v.yaml": "eA==", "o": "eQ=="}}, "type": "Opaque"}}"#),
            format!(r#"{{"data": {{"cloud.conf": "x"}}, "metadata": {{"name": "cm", {label}}}}}"#),
            format!(r#"{{"data": {{"p.yaml": {manifest}, "cni.yaml": "kind: DaemonSet\n"}}, "metadata": {{"name": "crs", "namespace": "ns"}}}}"#),
            r#"{"metadata": {"name": "crs"}, "data": {"a": "eA==", "b": "eQ=="}, "type": "addons.cluster.x-k8s.io/resource-set"}"#.to_owned(),
            format!(r#"{{"metadata": {{"name": "crs", {values}}}, "data": {{"v.yaml": "eA==", "b": "eQ=="}}, "type": "addons.cluster.x-k8s.io/resource-set"}}"#),
            format!(r#"{{"metadata": {{"name": "cm", {label}}}, "data": {{"cloud.conf": "x"}}, "metadata": {{"name": "cm"}}}}"#),
            r#"{"metadata": {"name": 7}, "data": {"a": "b"}}"#.to_owned(),
            format!(r#"{{"metadata": {{"name": "cm", {label}}}, "data": {{"cloud.conf": [[[1]]]}}, "kind": 3}}"#),
            r#"{"metadata": {"labels": "not-a-map"}}"#.to_owned(),
            // Quotes, braces and escapes in strings and keys; an escaped key.
            format!(r#"{{"metadata": {{"name": "a\"}}{{", "annotations": {{"}}\\": "{{\\\"}}"}}, {label}}}, "d\u0061ta": {{"cloud.conf": "}}\"\\"}}}}"#),
            format!(r#"{{"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "metadata": {{"name": "r"}}, "spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"cloudConfig": {{"global": {{"a": "}}"}}}}, "x": [{{"a": 0}}]}}}}, "status": {{"history": [1, 2]}}}}"#),
            format!(r#"{{"metadata": {{"name": "r"}}, "spec": {{"values": {{"x": [1]}}, "chart": {{"spec": {{"chart": "{ccm}"}}}}}}}}"#),
            r#"{"metadata": {"name": "r"}, "spec": {"chart": {"spec": {"chart": "podinfo"}}, "values": {"x": [{"a": 0}]}}}"#.to_owned(),
            format!(r#"{{"metadata": {{"name": "r"}}, "spec": {{"chart": {{"spec": {{"chart": "addons"}}}}, "values": {{"big": [1], "{ccm}": {{"a": 1}}}}}}}}"#),
            format!(r#"{{"metadata": {{"name": "r", "managedFields": 1}}, "spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"a": [[[[1]]]], "b": {{"c": 3}}}}}}, "metadata": {{"name": "again"}}}}"#),
            r#"{"metadata": {"name": "m"}, "status": {"addresses": [{"address": "10.0.0.1"}]}}"#.to_owned(),
            // Values set aside by the first reading and put back: Argo CD sources (keys in
            // the API server's sorted order, `helm` before `chart`), one among others in a
            // list, a key that comes twice, values alone at the top.
            format!(r#"{{"metadata": {{"name": "a"}}, "spec": {{"source": {{"helm": {{"valuesObject": {{"cloudConfig": {{"global": {{"a": "b"}}}}, "x": [1]}}}}, "chart": "{ccm}", "repoURL": "https://kubernetes.github.io/cloud-provider-openstack"}}}}}}"#),
            format!(r#"{{"metadata": {{"name": "a"}}, "spec": {{"sources": [{{"chart": "podinfo", "helm": {{"valuesObject": {{"big": [1]}}}}, "repoURL": "https://x"}}, {{"repoURL": "https://y"}}, {{"chart": "{ccm}", "helm": {{"valuesObject": {{"cloudConfig": {{"global": {{"a": "b"}}}}, "{ccm}": {{"c": 1}}}}}}, "repoURL": "https://kubernetes.github.io/cloud-provider-openstack"}}]}}}}"#),
            format!(r#"{{"metadata": {{"name": "r"}}, "spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"a": 1}}}}, "spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"b": 2}}}}}}"#),
            format!(r#"{{"spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"a": {{"b": 1}}, "a": 2}}}}}}"#),
            format!(r#"{{"spec": {{"values": {{"a": 1}}, "chart": {{"spec": {{"chart": "{ccm}"}}}}}}, "values": {{"v": 1}}}}"#),
            r#"{"values": {"v": [1, {"w": 2}]}}"#.to_owned(),
            r#"{}"#.to_owned(),
            r#"[1, 2]"#.to_owned(),
            r#""text""#.to_owned(),
            r#"7"#.to_owned(),
            r#"null"#.to_owned(),
            // Malformed inside the object.
            r#"{"metadata": {"name": "x"}, "data": {"a": }}"#.to_owned(),
        ];
        // Nesting around the cap, in a field every reading keeps (a ConfigMap's metadata, an
        // object's spec) and in one none does: inside the review, the object's braces are the
        // third level.
        for levels in [120, 124, 125, 126, 127, 128, 130] {
            let inner = levels - 2;
            let deep = format!("{}{}", "[".repeat(inner), "]".repeat(inner));
            objects.push(format!(r#"{{"metadata": {{"name": "cm", "annotations": {{"a": "b"}}, "x": {deep}}}, "spec": {deep}, "status": {deep}}}"#));
            objects.push(format!(r#"{{"metadata": {{"name": "cm"}}, "status": {deep}, "spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {deep}}}}}"#));
        }
        objects
    }

    /// A review of `kind` around `object` and `old` (raw JSON texts), its fields in one of a
    /// few orders and shapes (`shape`).
    fn envelope(shape: usize, kind: (&str, &str, &str), object: &str, old: &str) -> Vec<u8> {
        let (g, v, k) = kind;
        let gvk = format!(r#""kind": {{"group": "{g}", "version": "{v}", "kind": "{k}"}}"#);
        let gvr =
            format!(r#""resource": {{"group": "{g}", "version": "{v}", "resource": "things"}}"#);
        let head = format!(
            r#""uid": "u", {gvk}, {gvr}, "name": "n", "namespace": "ns", "operation": "UPDATE", "userInfo": {{"username": "a", "groups": ["g"]}}"#
        );
        let tail = r#""dryRun": false, "options": {"kind": "UpdateOptions"}"#;
        let review = |request: String| {
            format!(
                r#"{{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {{{request}}}}}"#
            )
        };
        let text = match shape {
            // The API server's order.
            0 => review(format!(
                r#"{head}, "object": {object}, "oldObject": {old}, {tail}"#
            )),
            // Blanks around the colon, the objects last, the request last.
            1 => review(format!(
                "{head},\n\"object\"\t :\r\n {object} , \"oldObject\" : {old}\n"
            )),
            // The objects before the kind.
            2 => review(format!(
                r#""object": {object}, "oldObject": {old}, {head}, {tail}"#
            )),
            // `oldObject` before `object`.
            3 => review(format!(
                r#"{head}, "oldObject": {old}, "object": {object}, {tail}"#
            )),
            // An escaped key.
            4 => review(format!(
                r#"{head}, "obj\u0065ct": {object}, "oldObject": {old}, {tail}"#
            )),
            // `object` twice.
            5 => review(format!(
                r#"{head}, "object": {object}, "object": {old}, {tail}"#
            )),
            // No uid.
            6 => review(format!(
                r#"{gvk}, {gvr}, "operation": "UPDATE", "object": {object}, "oldObject": {old}"#
            )),
            // Malformed after the objects.
            7 => review(format!(
                r#"{head}, "object": {object}, "oldObject": {old}, "options": {{"a": }}"#
            )),
            // Text after the review.
            8 => format!(
                "{} ]",
                review(format!(r#"{head}, "object": {object}, "oldObject": {old}"#))
            ),
            // The request before the review's own fields, `apiVersion` twice.
            9 => format!(
                r#"{{"request": {{{head}, "object": {object}, "oldObject": {old}}}, "apiVersion": "a", "apiVersion": "b"}}"#
            ),
            // No object, `oldObject` only (a DELETE).
            10 => review(format!(r#"{head}, "oldObject": {object}, {tail}"#)),
            // Every field of the request.
            13 => review(format!(
                r#"{head}, "subResource": "status", "requestKind": {{"group": "g", "version": "v", "kind": "K"}}, "requestResource": {{"group": "g", "version": "v", "resource": "ks"}}, "requestSubResource": "scale", "object": {object}, "oldObject": {old}, "dryRun": true, "options": null"#
            )),
            // A request that is null, then none at all.
            11 => r#"{"kind": "AdmissionReview", "request": null}"#.to_owned(),
            _ => r#"{"kind": "AdmissionReview"}"#.to_owned(),
        };
        text.into_bytes()
    }

    /// The one-pass reading decodes what the two-pass reading decodes for generated
    /// reviews: each generated object of each kind, as `object` alone and with an
    /// `oldObject`, in each envelope shape, at the default limit and around its charge.
    #[test]
    fn generated_reviews_decode_alike_in_one_pass_and_two() {
        let sites = sites();
        let kinds = [
            ("", "v1", "ConfigMap"),
            ("", "v1", "Secret"),
            ("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
            ("argoproj.io", "v1alpha1", "Application"),
            ("apps", "v1", "Deployment"),
            ("cluster.x-k8s.io", "v1beta1", "Machine"),
        ];
        let objects = generated_objects();
        let mut ends = std::collections::BTreeMap::new();
        for (i, object) in objects.iter().enumerate() {
            for kind in kinds {
                for shape in 0..=13 {
                    let old = if (i + shape) % 2 == 0 {
                        "null"
                    } else {
                        &objects[(i + 1) % objects.len()]
                    };
                    check_both_ways(&envelope(shape, kind, object, old), &sites, &mut ends);
                }
            }
        }
        for (end, at_least) in [("read", 800), ("settled", 800), ("again", 2_000)] {
            let n = ends.get(end).copied().unwrap_or(0);
            assert!(n >= at_least, "{end}: {n} ({ends:?})");
        }
    }

    /// kubectl's copy of the object as last applied is never decoded, in any reading of any
    /// kind; every other annotation is.
    #[test]
    fn kubectls_last_applied_copy_is_left_out_of_every_reading() {
        let sites = sites();
        let secret_data = "W0dsb2JhbF0K";
        let annotations = format!(
            r#""annotations": {{"{LAST_APPLIED}": "{{\"data\":{{\"cloud.conf\":\"{secret_data}\"}}}}", "stackgate.dev/exempt": "x"}}"#
        );
        let label = r#""labels": {"stackgate.dev/cloud-config": "cloud.conf"}"#;
        let ccm = "openstack-cloud-controller-manager";
        let cases = [
            (
                ("", "v1", "Secret"),
                format!(
                    r#"{{"metadata": {{"name": "s", {annotations}, {label}}}, "data": {{"cloud.conf": "{secret_data}"}}}}"#
                ),
            ),
            (
                ("", "v1", "ConfigMap"),
                format!(
                    r#"{{"metadata": {{"name": "c", {annotations}, {label}}}, "data": {{"cloud.conf": "[Global]\n"}}}}"#
                ),
            ),
            (
                ("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
                format!(
                    r#"{{"metadata": {{"name": "r", {annotations}}}, "spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"a": 1}}}}}}"#
                ),
            ),
            (
                ("apps", "v1", "Deployment"),
                format!(r#"{{"metadata": {{"name": "d", {annotations}}}, "spec": {{}}}}"#),
            ),
        ];
        for (kind, object) in &cases {
            for shape in [0, 2] {
                let body = envelope(shape, *kind, object, object);
                let mut seen = std::collections::BTreeMap::new();
                check_both_ways(&body, &sites, &mut seen);
                let decoded =
                    decode_review(&body, &sites, None, MAX_DECODED_BYTES, &Cancel::never())
                        .expect("decodes");
                for object in [decoded.request.object, decoded.request.old_object] {
                    let annotations = object
                        .expect("object")
                        .metadata
                        .annotations
                        .expect("annotations");
                    assert_eq!(
                        annotations.keys().collect::<Vec<_>>(),
                        ["stackgate.dev/exempt"],
                        "{kind:?} shape {shape}"
                    );
                }
            }
        }
    }

    /// The CCM chart's values the first reading sets aside are put back where the reading
    /// with values has them (through a list of sources, beside the subchart key the first
    /// reading kept, at the top of an object that held nothing else), in one pass and equal
    /// to the two-pass reading at every limit around its charge; where the place cannot be
    /// known (a key that came twice, an element of a list set aside) the review is read the
    /// two-pass way.
    #[test]
    fn values_set_aside_are_put_back_where_the_reading_with_values_has_them() {
        let sites = sites();
        let ccm = "openstack-cloud-controller-manager";
        let argo = ("argoproj.io", "v1alpha1", "Application");
        let hr = ("helm.toolkit.fluxcd.io", "v2", "HelmRelease");
        // The CCM chart's values with `keys` keys (`a`, `a1`, `a2`, …), each set aside.
        let ccm_values_with_keys = |keys: usize| {
            format!(
                r#"{{"spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{{}}}}}}}"#,
                (0..keys)
                    .map(|i| format!(
                        r#""a{}": {i}"#,
                        if i == 0 { String::new() } else { i.to_string() }
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let cases = [
            (
                argo,
                format!(
                    r#"{{"metadata": {{"name": "a"}}, "spec": {{"source": {{"helm": {{"valuesObject": {{"cloudConfig": {{"global": {{"a": "b"}}}}, "x": [1]}}}}, "chart": "{ccm}", "repoURL": "https://kubernetes.github.io/cloud-provider-openstack"}}}}}}"#
                ),
                "read",
            ),
            (
                argo,
                format!(
                    r#"{{"metadata": {{"name": "a"}}, "spec": {{"sources": [{{"chart": "podinfo", "helm": {{"valuesObject": {{"big": [1]}}}}, "repoURL": "https://x"}}, {{"repoURL": "https://y"}}, {{"chart": "{ccm}", "helm": {{"valuesObject": {{"cloudConfig": {{"global": {{"a": "b"}}}}, "{ccm}": {{"c": 1}}}}}}, "repoURL": "https://kubernetes.github.io/cloud-provider-openstack"}}]}}}}"#
                ),
                "read",
            ),
            (
                hr,
                format!(
                    r#"{{"spec": {{"values": {{"a": 1}}, "chart": {{"spec": {{"chart": "{ccm}"}}}}}}}}"#
                ),
                "read",
            ),
            (
                hr,
                format!(
                    r#"{{"metadata": {{"name": "r"}}, "spec": {{"chart": {{"spec": {{"chart": "addons"}}}}, "values": {{"big": [1], "{ccm}": {{"a": 1}}}}}}}}"#
                ),
                "read",
            ),
            (
                hr,
                format!(
                    r#"{{"metadata": {{"name": "r"}}, "spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"a": 1}}}}, "spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"b": 2}}}}}}"#
                ),
                "again",
            ),
            (
                hr,
                format!(
                    r#"{{"spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": [1, 2]}}}}"#
                ),
                "again",
            ),
            // At `spec.values.a` a value stands inside three containers: 124 more are the
            // most a reading of the object's text builds; at 125 it stops there (its line
            // and column are that reading's).
            (
                hr,
                format!(
                    r#"{{"spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"a": {}{}}}}}}}"#,
                    "[".repeat(124),
                    "]".repeat(124)
                ),
                "read",
            ),
            (
                hr,
                format!(
                    r#"{{"spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"a": {}{}}}}}}}"#,
                    "[".repeat(125),
                    "]".repeat(125)
                ),
                "again",
            ),
            // Brackets inside a string are no nesting.
            (
                hr,
                format!(
                    r#"{{"spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"a": {}"[[[[\"[{{"{}}}}}}}"#,
                    "[".repeat(124),
                    "]".repeat(124)
                ),
                "read",
            ),
            // Another chart's values may have any number of keys: past `MAX_SET_ASIDE` set
            // aside, the object is read the two-pass way.
            (hr, ccm_values_with_keys(MAX_SET_ASIDE), "read"),
            (hr, ccm_values_with_keys(MAX_SET_ASIDE + 1), "again"),
        ];
        for (kind, object, ends) in &cases {
            let body = envelope(0, *kind, object, "null");
            assert_eq!(
                one_pass_ends(&body, &sites, MAX_DECODED_BYTES),
                *ends,
                "{object}"
            );
            let mut seen = std::collections::BTreeMap::new();
            check_both_ways(&body, &sites, &mut seen);
            if *ends == "read" {
                // The values are there, whole.
                let decoded =
                    decode_review(&body, &sites, None, MAX_DECODED_BYTES, &Cancel::never())
                        .expect("decodes");
                // Within a budget of exactly what the review costs, still in one pass.
                assert_eq!(
                    one_pass_ends(&body, &sites, decoded.decoded_bytes),
                    "read",
                    "{object}"
                );
                let object = decoded.request.object.expect("object");
                let text = serde_json::to_string(&object.data).expect("JSON");
                assert!(
                    text.contains(r#""a":"#) || text.contains(r#""big":[1]"#),
                    "{text}"
                );
            } else {
                // The two-pass reading's answer, error or not.
                let whole = decode_review(&body, &sites, None, MAX_DECODED_BYTES, &Cancel::never());
                let too_deep = matches!(whole, Err(DecodeError::TooDeep { .. }));
                assert_eq!(too_deep, object.contains(&"[".repeat(125)), "{object}");
            }
        }
    }

    /// Reviews as the API server writes them are read in one pass (a reading's error
    /// settled there too); other orders and shapes, and what cannot be built inside the
    /// envelope, are read the two-pass way.
    #[test]
    fn one_pass_reads_reviews_in_the_api_servers_order() {
        let sites = sites();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/captured");
        for fixture in [
            "configmap/mutate-create-cloud-provider-config.json",
            "configmap/validate-update-cloud-provider-config-serial-false.json",
            "secret/mutate-create-cloud-config-from-file.json",
            "helmrelease/mutate-create-openstack-cloud-controller-manager.json",
            "glance/mutate-create-glance.json",
            "deployment/validate-create-openstack-cloud-controller-manager.json",
        ] {
            let body = std::fs::read(dir.join(fixture)).expect("fixture");
            assert_eq!(
                one_pass_ends(&body, &sites, MAX_DECODED_BYTES),
                "read",
                "{fixture}"
            );
        }
        let objects = generated_objects();
        let cm = ("", "v1", "ConfigMap");
        let secret = ("", "v1", "Secret");
        let hr = ("helm.toolkit.fluxcd.io", "v2", "HelmRelease");
        let deploy = ("apps", "v1", "Deployment");
        let site = &objects[0];
        // `levels - 1` containers with the object's braces, `levels + 1` with the review's
        // and the request's: inside the envelope, 127 at most are built.
        let deep = |levels: usize| {
            let inner = "[".repeat(levels - 2) + &"]".repeat(levels - 2);
            format!(r#"{{"metadata": {{"name": "d"}}, "spec": {inner}}}"#)
        };
        let not_utf8 = {
            let mut body = envelope(0, cm, site, "null");
            let at = body
                .windows(4)
                .position(|w| w == b"[Glo")
                .expect("a cloud config");
            body[at] = 0xff;
            body
        };
        let cases: Vec<(Vec<u8>, usize, &str)> = vec![
            (envelope(0, cm, site, "null"), MAX_DECODED_BYTES, "read"),
            (envelope(0, cm, site, site), MAX_DECODED_BYTES, "read"),
            (envelope(1, cm, site, site), MAX_DECODED_BYTES, "read"),
            (envelope(13, cm, site, "null"), MAX_DECODED_BYTES, "read"),
            (envelope(10, cm, site, "null"), MAX_DECODED_BYTES, "read"),
            (envelope(0, cm, "null", "null"), MAX_DECODED_BYTES, "read"),
            (envelope(0, cm, "{}", "null"), MAX_DECODED_BYTES, "read"),
            // Data before metadata: the shell, then the data from the object's text.
            (
                envelope(0, secret, &objects[5], "null"),
                MAX_DECODED_BYTES,
                "read",
            ),
            (
                envelope(0, cm, &objects[6], "null"),
                MAX_DECODED_BYTES,
                "read",
            ),
            // A payload Secret whose data was read: again, from its text.
            (
                envelope(0, secret, &objects[8], "null"),
                MAX_DECODED_BYTES,
                "read",
            ),
            // The CCM chart's values, set aside by the first reading and put back.
            (
                envelope(0, hr, &objects[14], &objects[15]),
                MAX_DECODED_BYTES,
                "read",
            ),
            (envelope(4, deploy, site, "null"), MAX_DECODED_BYTES, "read"),
            (
                envelope(0, deploy, &deep(126), "null"),
                MAX_DECODED_BYTES,
                "read",
            ),
            // Errors of the readings, and the budget.
            (
                envelope(0, deploy, "[1, 2]", "null"),
                MAX_DECODED_BYTES,
                "settled",
            ),
            (
                envelope(0, cm, &objects[12], "null"),
                MAX_DECODED_BYTES,
                "settled",
            ),
            (envelope(0, cm, site, "null"), 700, "settled"),
            (envelope(0, deploy, site, site), 1_500, "settled"),
            (envelope(0, hr, &objects[14], "null"), 2_500, "settled"),
            // Escaped keys where the text is needed, other orders and shapes.
            (envelope(4, cm, site, "null"), MAX_DECODED_BYTES, "again"),
            // The CCM chart's values are put back from the text of the values alone: the
            // object's own text (after its escaped key) is not needed.
            (
                envelope(4, hr, &objects[14], "null"),
                MAX_DECODED_BYTES,
                "read",
            ),
            (envelope(2, cm, site, "null"), MAX_DECODED_BYTES, "again"),
            (envelope(3, cm, site, "null"), MAX_DECODED_BYTES, "again"),
            (envelope(5, cm, site, "null"), MAX_DECODED_BYTES, "again"),
            (envelope(6, cm, site, "null"), MAX_DECODED_BYTES, "again"),
            (envelope(7, cm, site, "null"), MAX_DECODED_BYTES, "again"),
            (envelope(8, cm, site, "null"), MAX_DECODED_BYTES, "again"),
            (envelope(9, cm, site, "null"), MAX_DECODED_BYTES, "again"),
            (envelope(11, cm, site, "null"), MAX_DECODED_BYTES, "again"),
            (envelope(12, cm, site, "null"), MAX_DECODED_BYTES, "again"),
            // An error of `oldObject` with no `object` before it (a later one is read first
            // the two-pass way).
            (
                envelope(10, deploy, "[1]", "null"),
                MAX_DECODED_BYTES,
                "again",
            ),
            (
                envelope(0, cm, &objects[11], "null"),
                MAX_DECODED_BYTES,
                "again",
            ),
            (
                envelope(0, deploy, &deep(127), "null"),
                MAX_DECODED_BYTES,
                "again",
            ),
            (not_utf8, MAX_DECODED_BYTES, "again"),
        ];
        for (i, (body, limit, end)) in cases.iter().enumerate() {
            assert_eq!(
                one_pass_ends(body, &sites, *limit),
                *end,
                "case {i}: {}",
                String::from_utf8_lossy(body)
            );
            let [one, two] = review_both_ways(body, &sites, *limit, &Cancel::never);
            assert_eq!(one, two, "case {i}");
        }
    }

    /// A cancelled reading ends as the two-pass reading does, after as many looks at the
    /// flag: stopped in the first reading of an object, in its second (the CCM chart's
    /// values, from its text), in a site's data, and in `oldObject` after `object`.
    #[test]
    fn cancelled_reviews_stop_alike_in_one_pass_and_two() {
        let sites = sites();
        let items = |n: usize| {
            (0..n)
                .map(|i| format!(r#"{{"a": {i}}}"#))
                .collect::<Vec<_>>()
                .join(",")
        };
        let ccm = "openstack-cloud-controller-manager";
        let deployment = format!(
            r#"{{"metadata": {{"name": "d"}}, "spec": {{"x": [{}]}}}}"#,
            items(5_000)
        );
        let helm = format!(
            r#"{{"metadata": {{"name": "r"}}, "spec": {{"chart": {{"spec": {{"chart": "{ccm}"}}}}, "values": {{"x": [{}]}}}}}}"#,
            items(3_000)
        );
        let labels: Vec<String> = (0..9_000).map(|i| format!(r#""l{i}": "v""#)).collect();
        let site = format!(
            r#"{{"metadata": {{"name": "cm", "labels": {{"stackgate.dev/cloud-config": "c", {}}}}}, "data": {{"c": "x"}}}}"#,
            labels.join(",")
        );
        let data: Vec<String> = (0..9_000)
            .map(|i| format!(r#""k{i}": "kind: Secret cloud-config""#))
            .collect();
        let payload = format!(
            r#"{{"metadata": {{"name": "crs"}}, "data": {{{}}}}}"#,
            data.join(",")
        );
        let cases = [
            (("apps", "v1", "Deployment"), &deployment, "null"),
            (
                ("apps", "v1", "Deployment"),
                &deployment,
                deployment.as_str(),
            ),
            (
                ("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
                &helm,
                "null",
            ),
            (("", "v1", "ConfigMap"), &site, "null"),
            (("", "v1", "ConfigMap"), &payload, "null"),
        ];
        for (kind, object, old) in cases {
            for shape in [0, 7] {
                let body = envelope(shape, kind, object, old);
                let mut stopped = 0;
                for fire_at in 1..=4 {
                    let cancel = || Cancel::after_looks(fire_at);
                    let [one, two] = review_both_ways(&body, &sites, MAX_DECODED_BYTES, &cancel);
                    assert_eq!(
                        one.0, two.0,
                        "{kind:?} shape {shape}, fired at look {fire_at}"
                    );
                    // The looks are the two-pass reading's too, but for a body malformed after
                    // the object: the one-pass reading looked at the flag while reading the
                    // object before it met the error, the two-pass reading meets it first.
                    if shape != 7 {
                        assert_eq!(
                            one.1, two.1,
                            "{kind:?} shape {shape}, fired at look {fire_at}"
                        );
                    }
                    stopped += usize::from(one.0.contains("Exhausted"));
                }
                // Malformed after the object, the review is a data error however cancelled.
                assert_eq!(
                    stopped > 0,
                    shape == 0,
                    "{kind:?} shape {shape}: {stopped} stopped"
                );
            }
        }
    }
}
