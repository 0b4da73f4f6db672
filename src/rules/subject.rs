//! The engine's input: what is being written, built by each face from its own documents
//! (the admission adapter from a decoded review, `check` from a YAML document), so no caller
//! fakes an AdmissionReview.

use kube::core::{DynamicObject, GroupVersionKind, ObjectMeta};

use crate::short_text::ShortText;

/// What the write does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A new object.
    Create,
    /// A change to a stored object (`old_object` is the stored one).
    Update,
    /// A deletion (`old_object` is the object being deleted; `object` is absent).
    Delete,
    /// A connect (exec, attach, port-forward): no rule reads it.
    Connect,
}

impl Operation {
    /// Upper-case name, as in an AdmissionReview.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// Who makes the write, as far as the face knows: what an exemption annotation's weight
/// depends on ([`crate::policy::AnnotationExemption`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requester<'a> {
    /// No requester is known: `check` reads files and `audit` stored objects, written by
    /// someone they cannot see.
    Unknown,
    /// The review's `userInfo`, which the apiserver authenticated.
    User {
        /// `userInfo.username`.
        username: &'a str,
        /// `userInfo.groups`.
        groups: &'a [String],
    },
}

/// One write the engine evaluates. Its name and namespace are [`ShortText`]: what a finding,
/// a log line or a metric names is bounded whatever the request held.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    /// What the write does.
    pub operation: Operation,
    /// Group, version and kind of the object.
    pub kind: &'a GroupVersionKind,
    /// Namespace of the request (None or empty for cluster-scoped objects).
    pub namespace: Option<ShortText>,
    /// Name of the request (empty when the apiserver generates it).
    pub name: ShortText,
    /// The subresource written (`status`, `scale`), when it is not the object itself.
    pub subresource: Option<&'a str>,
    /// The object as it will be stored (CREATE, UPDATE).
    pub object: Option<&'a DynamicObject>,
    /// The stored object (UPDATE, DELETE).
    pub old_object: Option<&'a DynamicObject>,
    /// Whether the write is a dry run (nothing is stored).
    pub dry_run: bool,
    /// Who writes (the webhook's review), or [`Requester::Unknown`].
    pub requester: Requester<'a>,
}

impl<'a> Subject<'a> {
    /// A CREATE of `object`, as `stackgate check` evaluates each document.
    pub fn create(kind: &'a GroupVersionKind, object: &'a DynamicObject) -> Self {
        Subject {
            operation: Operation::Create,
            kind,
            namespace: object.metadata.namespace.as_deref().map(ShortText::name),
            name: ShortText::name(object.metadata.name.as_deref().unwrap_or("")),
            subresource: None,
            object: Some(object),
            old_object: None,
            dry_run: true,
            requester: Requester::Unknown,
        }
    }

    /// The namespace of the request, else of `object` (the apiserver sends both; a document
    /// only the latter).
    pub fn namespace_of<'s>(&'s self, object: &'s DynamicObject) -> Option<&'s str> {
        self.namespace
            .as_ref()
            .map(ShortText::as_str)
            .or(object.metadata.namespace.as_deref())
    }

    /// The object a finding is about: the written object, else the deleted one.
    pub fn reference(&self) -> ObjectRef {
        let object = self.object.or(self.old_object);
        let namespace = match &self.namespace {
            Some(ns) => Some(ns.clone()),
            None => object
                .and_then(|o| o.metadata.namespace.as_deref())
                .map(ShortText::name),
        }
        .filter(|ns| !ns.is_empty());
        let name = object
            .and_then(|o| o.metadata.name.as_deref())
            .filter(|n| !n.is_empty())
            .map_or_else(|| self.name.clone(), ShortText::name);
        ObjectRef {
            kind: ShortText::name(&self.kind.kind),
            namespace,
            name,
        }
    }
}

/// Cuts an object's name, generateName and namespace to [`ShortText::name`], where a face
/// takes the object from its input (the admission adapter's decoder, `check`'s documents).
/// Every carrier, rule and report that names the object then names it bounded. The
/// apiserver never stores a name over the limit (it validates names after the mutating
/// webhooks ran), so a cut only happens to objects it refuses anyway, and a stored object's
/// name — what a DELETE names, and what the guard compares — is never cut.
pub fn bound_names(meta: &mut ObjectMeta) {
    for field in [&mut meta.name, &mut meta.generate_name, &mut meta.namespace] {
        if let Some(text) = field.as_mut()
            && text.len() > crate::short_text::NAME_MAX_BYTES
        {
            *text = ShortText::name(text).into_string();
        }
    }
}

/// Which object a finding is about, each part bounded ([`ShortText`]): every finding names
/// it, so a long name would be multiplied by the number of findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// Kind, e.g. `Secret`.
    pub kind: ShortText,
    /// Namespace (None for cluster-scoped objects).
    pub namespace: Option<ShortText>,
    /// Name (empty when not known yet).
    pub name: ShortText,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}
