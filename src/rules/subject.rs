//! The engine's input: what is being written, built by each face from its own documents
//! (the admission adapter from a decoded review, `check` from a YAML document), so no caller
//! fakes an AdmissionReview.

use kube::core::{DynamicObject, GroupVersionKind};

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

/// One write the engine evaluates.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// What the write does.
    pub operation: Operation,
    /// Group, version and kind of the object.
    pub kind: &'a GroupVersionKind,
    /// Namespace of the request (None or empty for cluster-scoped objects).
    pub namespace: Option<&'a str>,
    /// Name of the request (empty when the apiserver generates it).
    pub name: &'a str,
    /// The subresource written (`status`, `scale`), when it is not the object itself.
    pub subresource: Option<&'a str>,
    /// The object as it will be stored (CREATE, UPDATE).
    pub object: Option<&'a DynamicObject>,
    /// The stored object (UPDATE, DELETE).
    pub old_object: Option<&'a DynamicObject>,
    /// Whether the write is a dry run (nothing is stored).
    pub dry_run: bool,
}

impl<'a> Subject<'a> {
    /// A CREATE of `object`, as `stackgate check` evaluates each document.
    pub fn create(kind: &'a GroupVersionKind, object: &'a DynamicObject) -> Self {
        Subject {
            operation: Operation::Create,
            kind,
            namespace: object.metadata.namespace.as_deref(),
            name: object.metadata.name.as_deref().unwrap_or(""),
            subresource: None,
            object: Some(object),
            old_object: None,
            dry_run: true,
        }
    }

    /// The namespace of the request, else of `object` (the apiserver sends both; a document
    /// only the latter).
    pub fn namespace_of(&self, object: &'a DynamicObject) -> Option<&'a str> {
        self.namespace.or(object.metadata.namespace.as_deref())
    }

    /// The object a finding is about: the written object, else the deleted one.
    pub fn reference(&self) -> ObjectRef {
        let object = self.object.or(self.old_object);
        let namespace = self
            .namespace
            .or_else(|| object.and_then(|o| o.metadata.namespace.as_deref()))
            .filter(|ns| !ns.is_empty());
        let name = object
            .and_then(|o| o.metadata.name.as_deref())
            .filter(|n| !n.is_empty())
            .unwrap_or(self.name);
        ObjectRef {
            kind: self.kind.kind.clone(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }
}

/// Which object a finding is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// Kind, e.g. `Secret`.
    pub kind: String,
    /// Namespace (None for cluster-scoped objects).
    pub namespace: Option<String>,
    /// Name (empty when not known yet).
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}
