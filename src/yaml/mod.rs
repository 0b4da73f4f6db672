//! A YAML stream as a tree that remembers where every node is (byte offset, line, column),
//! and its conversion to JSON with the scalar rules Kubernetes tooling applies.
//!
//! Why not a serde value: `stackgate check` reports `file:line` for findings deep inside a
//! document, and the minimal editor ([`edit`]) needs the exact byte ranges and
//! styles of scalars and collections. The events come from `granit_parser` (re-exported by
//! serde-saphyr, so there is one YAML parser in the binary).
//!
//! Scalar resolution follows what `kubectl` and Helm do with a YAML file (sigs.k8s.io/yaml on
//! top of go-yaml v2, YAML 1.1 rules): `yes`/`no`/`on`/`off`/`y`/`n` are booleans, `~`/`null`/
//! empty are null, integers may be `0x…`, `0o…`, `0b…` or have `_` separators, merge keys
//! (`<<`) are honoured, and of a key repeated in one mapping the last one counts. Timestamps
//! stay strings, as they do when go-yaml decodes into `interface{}`.
//!
//! Repeated keys: Helm reads values with `sigs.k8s.io/yaml`'s `Unmarshal` (helm/helm
//! e9b85e4d, pkg/chart/common/values.go `ReadValues`), and kubectl reads manifests through
//! apimachinery's `YAMLToJSONDecoder`, which calls the same non-strict `Unmarshal`
//! (kubernetes/kubernetes 046d201c, staging/src/k8s.io/apimachinery/pkg/util/yaml/decoder.go),
//! then sends JSON. That is go-yaml v2's `Unmarshal`, whose `setMapIndex` refuses a repeated
//! key ("already set in map") only in strict mode and otherwise overwrites it (go-yaml/yaml
//! v2 7649d454, decode.go l.685-691; sigs.k8s.io/yaml aadfabb7, yaml.go: "Duplicate fields …
//! are ignored"). go-yaml v3 refuses them by default (`uniqueKeys`, decode.go l.769), and
//! `UnmarshalStrict` / `YAMLToJSONStrict` do; neither is what Helm or kubectl call. So a
//! repeated key is no error here either: the chart, the apiserver and stackgate all see the
//! last value.
//!
//! Error messages carry a position and a description of the problem, never document content.

pub mod edit;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Number, Value};
use serde_saphyr::granit_parser::{ErrorKind, Event, Options, Parser, ScalarStyle, Span};

use crate::budget::Cancel;

/// Nodes a YAML stream (a file `stackgate check` reads) may contain as written: scalars,
/// collections and alias references; the nodes an alias stands for are counted by
/// [`MAX_ALIAS_NODES`]. A node costs about 120 bytes in the tree, so this bounds the tree
/// near 120 MB; a 3 MB text cannot hold more than 1.5 million nodes anyway.
pub const MAX_NODES: usize = 1_000_000;

/// Nodes one Helm values string (`valuesContent`, `helm.values`) may contain as written:
/// [`parse_one`]'s cap. A values string lives inside one Kubernetes object that reaches the
/// webhook in a request of at most 3 MiB, and the whole evaluation of a values string costs
/// several hundred bytes per node (tree, JSON, copies in the engine: measured ~190 MB peak
/// at 225 000 nodes in `stackgate check`), so this keeps a hostile values string to a few
/// tens of MB while leaving thirty times the largest real values files (a few thousand
/// nodes).
pub const MAX_VALUES_NODES: usize = 100_000;

/// Nodes that aliases (`*name`) may stand for in one stream, counted recursively (an alias
/// of a mapping that itself holds aliases counts everything it would expand to) when the
/// alias is read and before anything is expanded: the "billion laughs" guard. Aliased
/// collections are shared, not copied, so the cap bounds the work of everything that walks
/// the tree (the conversion to JSON above all), not the parser's memory. go-yaml refuses
/// "excessive aliasing" by a ratio; a fixed cap is simpler to document, and 50 000 nodes is
/// far more than the anchors of a real values file expand to. Kept small because an object
/// can hold several values strings (Argo CD `spec.sources`), each with its own stream.
pub const MAX_ALIAS_NODES: usize = 50_000;

/// Bytes of scalar text that aliases may stand for in one stream, counted like
/// [`MAX_ALIAS_NODES`]: a 1 MB anchored string aliased a thousand times is 1 GB of JSON.
pub const MAX_ALIAS_BYTES: usize = 1 << 20;

/// Levels of nesting, aliases expanded, the innermost scalar included, in flow (`[[…]]`,
/// `{a: {a: …}}`) and block style alike. The parser's own nesting limits are set to this
/// cap too (its default, 255, stopped plain nesting as a syntax error that named no limit),
/// so every text nested too deep is refused as over this cap. Chained aliases could nest
/// deeper than any text and exhaust the stack of the recursive walks. Every walk of a tree
/// this deep, from the conversion to JSON to the chart's rendering of a nested value, fits a
/// 1 MiB thread stack in a debug build (`tests/reader_stack.rs`; `serve` runs evaluations on
/// 2 MiB). Helm reads deeper values: go-yaml v2 stops at 10 000 flow levels and 10 000
/// indentation levels (gopkg.in/yaml.v2 v2.4.0, scannerc.go, `max_flow_level` and
/// `max_indents`), so a text past this cap is over stackgate's limit, not invalid.
pub const MAX_DEPTH: usize = 512;

/// How often (in parser events) a parse looks at the evaluation's cancel flag: a parse of a
/// values string or a payload stops within this many events of the flag firing.
const CANCEL_CHECK_EVERY: usize = 1024;

/// Which cap a YAML text ran into (for metrics; the message names it too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// [`MAX_NODES`] or [`MAX_VALUES_NODES`].
    Nodes,
    /// [`MAX_ALIAS_NODES`] or [`MAX_ALIAS_BYTES`].
    AliasExpansion,
    /// [`MAX_DEPTH`].
    Depth,
}

impl Limit {
    /// A short stable name (a metric label value).
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Nodes => "yaml_nodes",
            Limit::AliasExpansion => "yaml_alias_expansion",
            Limit::Depth => "yaml_depth",
        }
    }
}

/// A position in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// Byte offset from the start of the text.
    pub byte: usize,
    /// 1-based line.
    pub line: usize,
    /// 0-based column, in characters.
    pub col: usize,
}

/// How a scalar is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `value`
    Plain,
    /// `'value'`
    SingleQuoted,
    /// `"value"`
    DoubleQuoted,
    /// `|` block
    Literal,
    /// `>` block
    Folded,
}

/// A node's content.
///
/// Collections are reference-counted so that an alias shares the anchored node instead of
/// copying it: reading `*name` costs one small node whatever it stands for (the expansion is
/// counted against [`MAX_ALIAS_NODES`] instead).
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A scalar with its (escape-processed) text, style and explicit tag suffix (`str`,
    /// `int`, … for `!!str`; the full tag for others).
    Scalar {
        /// Text after YAML processing.
        value: Arc<str>,
        /// How it is written.
        style: Style,
        /// Explicit tag, if any (boxed: tags are rare, and nodes are many).
        tag: Option<Box<String>>,
    },
    /// A sequence.
    Seq(Arc<Vec<Node>>),
    /// A mapping, in source order.
    Map(Arc<Vec<(Node, Node)>>),
}

/// One node of a YAML document.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Content.
    pub kind: Kind,
    /// Where the node starts (for block scalars: the first content character).
    pub start: Pos,
    /// Where the node ends (exclusive).
    pub end: Pos,
    /// Flow style (`{}` / `[]`) for collections.
    pub flow: bool,
    /// The node is an alias (`*name`); its positions are the anchor's. The nodes below it
    /// are the anchor's own (shared, not copied) and are not marked: use
    /// [`Node::alias_on_path`] to ask whether a path goes through an alias.
    pub aliased: bool,
}

/// One segment of a path into a document.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    /// Mapping key.
    Key(String),
    /// Sequence index.
    Index(usize),
}

impl Seg {
    /// A key segment.
    pub fn key(k: &str) -> Self {
        Seg::Key(k.to_owned())
    }
}

/// Why a YAML text could not be read. The message never quotes the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("YAML error at line {line}, column {column}: {message}")]
pub struct YamlError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// The cap the text ran into, when that is why it was refused.
    pub limit: Option<Limit>,
}

impl YamlError {
    fn at(pos: Pos, message: impl Into<String>) -> Self {
        Self {
            line: pos.line.max(1),
            column: pos.col + 1,
            message: message.into(),
            limit: None,
        }
    }

    fn cap(pos: Pos, limit: Limit, message: String) -> Self {
        Self {
            limit: Some(limit),
            ..Self::at(pos, message)
        }
    }
}

/// One document of a stream.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlDoc {
    /// The root node (a null scalar for an empty document).
    pub root: Node,
    /// 0-based index of the document in the stream.
    pub index: usize,
}

impl Node {
    /// A null scalar (an empty plain scalar) at `p`.
    fn null_at(p: Pos) -> Node {
        Node {
            kind: Kind::Scalar {
                value: Arc::from(""),
                style: Style::Plain,
                tag: None,
            },
            start: p,
            end: p,
            flow: false,
            aliased: false,
        }
    }

    /// The scalar text, if this is a scalar.
    pub fn scalar(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The scalar style, if this is a scalar.
    pub fn style(&self) -> Option<Style> {
        match &self.kind {
            Kind::Scalar { style, .. } => Some(*style),
            _ => None,
        }
    }

    /// Whether this node resolves to null (`~`, `null`, empty).
    pub fn is_null(&self) -> bool {
        matches!(resolve_scalar(self), Ok(Some(Value::Null)))
    }

    /// The mapping entries, if this is a mapping.
    pub fn entries(&self) -> Option<&[(Node, Node)]> {
        match &self.kind {
            Kind::Map(e) => Some(e.as_slice()),
            _ => None,
        }
    }

    /// The (key node, value node) of `key` in this mapping (the last one, as JSON would keep).
    pub fn entry(&self, key: &str) -> Option<(&Node, &Node)> {
        self.entries()?
            .iter()
            .rev()
            .find(|(k, _)| key_str(k).as_deref() == Some(key))
            .map(|(k, v)| (k, v))
    }

    /// The child at one path segment.
    pub fn child(&self, seg: &Seg) -> Option<&Node> {
        match (seg, &self.kind) {
            (Seg::Key(k), Kind::Map(_)) => self.entry(k).map(|(_, v)| v),
            (Seg::Index(i), Kind::Seq(items)) => items.get(*i),
            _ => None,
        }
    }

    /// The node at `path`, or None.
    pub fn at(&self, path: &[Seg]) -> Option<&Node> {
        path.iter().try_fold(self, |node, seg| node.child(seg))
    }

    /// Whether this node or any node on `path` below it (as far as the path exists) is an
    /// alias: such a node's text is the anchor's, so it cannot be edited in place.
    pub fn alias_on_path(&self, path: &[Seg]) -> bool {
        let mut node = self;
        for seg in path {
            if node.aliased {
                return true;
            }
            match node.child(seg) {
                Some(next) => node = next,
                None => return false,
            }
        }
        node.aliased
    }

    /// The deepest node on `path` that exists, with the number of segments it consumed, and
    /// the line where that node's key is written (the line that best names the path).
    pub fn deepest(&self, path: &[Seg]) -> (usize, &Node, usize) {
        let mut node = self;
        let mut line = self.start.line;
        for (i, seg) in path.iter().enumerate() {
            let next = match (seg, &node.kind) {
                (Seg::Key(k), Kind::Map(_)) => node.entry(k).map(|(key, v)| (key.start.line, v)),
                (Seg::Index(i), Kind::Seq(items)) => items.get(*i).map(|v| (v.start.line, v)),
                _ => None,
            };
            match next {
                Some((l, v)) => {
                    line = l;
                    node = v;
                }
                None => return (i, node, line),
            }
        }
        (path.len(), node, line)
    }

    /// Converts the node to JSON with Kubernetes' YAML rules.
    ///
    /// The work is linear in the size of the tree with aliases expanded, which the parser
    /// bounds ([`MAX_NODES`] + [`MAX_ALIAS_NODES`]); the recursion is bounded by
    /// [`MAX_DEPTH`].
    pub fn to_json(&self) -> Result<Value, YamlError> {
        // One small frame per level: each kind's work is its own function, so a level of
        // the recursion holds this frame and one kind's locals, not every kind's (a debug
        // build gives every local its own slot). The recursion goes MAX_DEPTH levels deep on
        // a worker's stack (tests/reader_stack.rs runs it on 1 MiB).
        match &self.kind {
            Kind::Scalar { .. } => self.scalar_to_json(),
            Kind::Seq(items) => seq_to_json(items),
            Kind::Map(entries) => map_to_json(entries),
        }
    }

    #[inline(never)]
    fn scalar_to_json(&self) -> Result<Value, YamlError> {
        match resolve_scalar(self)? {
            Some(v) => Ok(v),
            None => Err(YamlError::at(
                self.start,
                "a value that JSON cannot represent (NaN or infinity)",
            )),
        }
    }
}

#[inline(never)]
fn seq_to_json(items: &[Node]) -> Result<Value, YamlError> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        out.push(item.to_json()?);
    }
    Ok(Value::Array(out))
}

#[inline(never)]
fn map_to_json(entries: &[(Node, Node)]) -> Result<Value, YamlError> {
    let mut out = Map::new();
    // In document order, as go-yaml v2's `decoder.mapping` reads a mapping (go-yaml/yaml v2
    // 7649d454, decode.go l.661-680): a merge key writes the merged mappings' keys over what
    // is already there, and a later key, explicit or merged, overwrites an earlier one (the
    // non-strict `Unmarshal` Helm and kubectl call refuses no repeated key).
    for (k, v) in entries {
        if is_merge_key(k) {
            merge_to_json(v, &mut out)?;
            continue;
        }
        let Some(key) = key_string(k) else {
            return Err(YamlError::at(k.start, "a mapping key must be a scalar"));
        };
        let value = v.to_json()?;
        out.insert(key, value);
    }
    Ok(Value::Object(out))
}

/// Writes the mappings a merge key (`<<`) refers to into `out`, over the keys it has: one
/// mapping, or a list of mappings merged last to first so that the first one's keys win among
/// them (go-yaml v2 `decoder.merge`, decode.go l.786-811). Anything else is refused with
/// go-yaml's reason.
#[inline(never)]
fn merge_to_json(v: &Node, out: &mut Map<String, Value>) -> Result<(), YamlError> {
    let sources = match &v.kind {
        // An alias must stand for a mapping, not for a list of them.
        Kind::Seq(_) if v.aliased => {
            return Err(YamlError::at(
                v.start,
                "map merge requires map or sequence of maps as the value",
            ));
        }
        Kind::Seq(items) => items.as_slice(),
        _ => std::slice::from_ref(v),
    };
    let mut merged = Vec::with_capacity(sources.len());
    for src in sources {
        let Value::Object(m) = src.to_json()? else {
            return Err(YamlError::at(
                src.start,
                "map merge requires map or sequence of maps as the value",
            ));
        };
        merged.push(m);
    }
    for m in merged.into_iter().rev() {
        out.extend(m);
    }
    Ok(())
}

/// go-yaml v2 `isMerge`: the scalar `<<`, plain and untagged or tagged `!!merge`.
fn is_merge_key(k: &Node) -> bool {
    match &k.kind {
        Kind::Scalar { value, style, tag } if &**value == "<<" => match tag.as_deref() {
            None => *style == Style::Plain,
            Some(tag) => tag == "merge",
        },
        _ => false,
    }
}

/// A mapping key as the string JSON uses (sigs.k8s.io/yaml formats non-string keys).
pub fn key_string(k: &Node) -> Option<String> {
    key_str(k).map(Cow::into_owned)
}

/// [`key_string`] without copying a key that is already a string (lookups compare every key
/// of a mapping, and a key may be megabytes long).
fn key_str(k: &Node) -> Option<Cow<'_, str>> {
    let Kind::Scalar { value, style, tag } = &k.kind else {
        return None;
    };
    // Quoted and block keys, and `!!str` keys, are their text: skip the resolution.
    let textual = tag.as_deref().map(String::as_str) == Some("str")
        || (tag.is_none() && *style != Style::Plain);
    if textual {
        return Some(Cow::Borrowed(value));
    }
    let resolved = match tag {
        None => resolve_plain(value).map(Ok),
        Some(_) => resolve_scalar(k).transpose().map(|r| r.map(Some)),
    };
    Some(match resolved {
        Some(Ok(Some(Value::String(s)))) if s != **value => Cow::Owned(s),
        Some(Ok(Some(Value::Null))) => Cow::Borrowed("null"),
        Some(Ok(Some(Value::Bool(b)))) => Cow::Owned(b.to_string()),
        Some(Ok(Some(Value::Number(n)))) => Cow::Owned(n.to_string()),
        _ => Cow::Borrowed(&**value),
    })
}

/// How go-yaml v2 resolves an untagged plain scalar that is not a string: null, a boolean, a
/// number, or `Some(None)` for NaN/infinity; `None` for a string (without copying it).
fn resolve_plain(text: &str) -> Option<Option<Value>> {
    if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
        return Some(Some(Value::Null));
    }
    if let Some(b) = resolve_bool(text) {
        return Some(Some(Value::Bool(b)));
    }
    if let Some(n) = resolve_int(text) {
        return Some(Some(n));
    }
    if let Some(f) = resolve_float(text) {
        return Some(Some(f));
    }
    if is_special_float(text) {
        return Some(None);
    }
    None
}

/// Resolves a scalar node to a JSON value; `Ok(None)` for NaN/infinity.
fn resolve_scalar(node: &Node) -> Result<Option<Value>, YamlError> {
    let Kind::Scalar { value, style, tag } = &node.kind else {
        return Ok(Some(Value::Null));
    };
    let text: &str = value;
    match tag.as_deref().map(String::as_str) {
        Some("str") | Some("binary") | Some("timestamp") => {
            return Ok(Some(Value::String(text.to_owned())));
        }
        Some("null") => return Ok(Some(Value::Null)),
        Some("bool") => {
            return resolve_bool(text)
                .map(|b| Some(Value::Bool(b)))
                .ok_or_else(|| YamlError::at(node.start, "a !!bool value is not a boolean"));
        }
        Some("int") => {
            return resolve_int(text)
                .map(Some)
                .ok_or_else(|| YamlError::at(node.start, "an !!int value is not an integer"));
        }
        Some("float") => {
            return match resolve_int(text).or_else(|| resolve_float(text)) {
                Some(Value::Number(n)) => {
                    Ok(n.as_f64().and_then(Number::from_f64).map(Value::Number))
                }
                Some(other) => Ok(Some(other)),
                None if is_special_float(text) => Ok(None),
                None => Err(YamlError::at(node.start, "a !!float value is not a number")),
            };
        }
        _ => {}
    }
    if *style != Style::Plain {
        return Ok(Some(Value::String(text.to_owned())));
    }
    Ok(resolve_plain(text).unwrap_or_else(|| Some(Value::String(text.to_owned()))))
}

/// YAML 1.1 booleans as go-yaml v2 reads them.
pub fn resolve_bool(text: &str) -> Option<bool> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            Some(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            Some(false)
        }
        _ => None,
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)` / `ParseUint` after removing `_`, as go-yaml v2 does.
fn resolve_int(text: &str) -> Option<Value> {
    // Most scalars are words: reject them before copying the text.
    if !text
        .trim_start_matches(['-', '+'])
        .starts_with(|c: char| c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    let plain: String = text.chars().filter(|c| *c != '_').collect();
    let (negative, body) = match plain.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, plain.strip_prefix('+').unwrap_or(&plain)),
    };
    if body.is_empty() || !body.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let (radix, digits) =
        if let Some(d) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, d)
        } else if let Some(d) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (8, d)
        } else if let Some(d) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (2, d)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..])
        } else {
            (10, body)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if negative {
        if magnitude <= i64::MAX as u64 {
            Some(Value::from(-(magnitude as i64)))
        } else if magnitude == i64::MAX as u64 + 1 {
            Some(Value::from(i64::MIN))
        } else {
            None
        }
    } else if magnitude <= i64::MAX as u64 {
        Some(Value::from(magnitude as i64))
    } else {
        Some(Value::from(magnitude))
    }
}

/// go-yaml v2's float pattern `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn resolve_float(text: &str) -> Option<Value> {
    if !text
        .trim_start_matches(['-', '+'])
        .starts_with(|c: char| c.is_ascii_digit() || c == '_' || c == '.')
    {
        return None;
    }
    let plain: String = text.chars().filter(|c| *c != '_').collect();
    let body = plain.strip_prefix(['-', '+']).unwrap_or(&plain);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => !frac.is_empty() && frac.chars().all(|c| c.is_ascii_digit()),
        Some((int, frac)) => {
            !int.is_empty()
                && int.chars().all(|c| c.is_ascii_digit())
                && frac.chars().all(|c| c.is_ascii_digit())
        }
        None => !mantissa.is_empty() && mantissa.chars().all(|c| c.is_ascii_digit()),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let digits = e.strip_prefix(['-', '+']).unwrap_or(e);
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    });
    if !mantissa_ok || !exponent_ok {
        return None;
    }
    let f: f64 = plain.parse().ok()?;
    Number::from_f64(f).map(Value::Number)
}

fn is_special_float(text: &str) -> bool {
    matches!(
        text,
        ".inf"
            | ".Inf"
            | ".INF"
            | "+.inf"
            | "+.Inf"
            | "+.INF"
            | "-.inf"
            | "-.Inf"
            | "-.INF"
            | ".nan"
            | ".NaN"
            | ".NAN"
    )
}

fn pos(m: &serde_saphyr::granit_parser::Marker) -> Pos {
    Pos {
        byte: m.byte_offset().unwrap_or(m.index()),
        line: m.line(),
        col: m.col(),
    }
}

/// What a finished node stands for, aliases expanded: nodes, scalar bytes and levels.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    nodes: usize,
    bytes: usize,
    height: usize,
}

impl Cost {
    fn add(&mut self, child: Cost) {
        self.nodes = self.nodes.saturating_add(child.nodes);
        self.bytes = self.bytes.saturating_add(child.bytes);
        self.height = self.height.max(child.height);
    }

    /// The cost of a collection whose children cost `self`.
    fn collection(self) -> Cost {
        Cost {
            nodes: self.nodes.saturating_add(1),
            bytes: self.bytes,
            height: self.height + 1,
        }
    }
}

/// An open collection.
struct Frame {
    start: Pos,
    flow: bool,
    anchor: usize,
    /// What the children read so far stand for.
    cost: Cost,
    /// Where the last child read so far ends in the text: an alias's own end, not the
    /// anchor's (whose positions an alias node carries).
    last_end: Option<Pos>,
    body: Body,
}

enum Body {
    Seq(Vec<Node>),
    Map {
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
    },
}

/// The text as the parser reads it, with go-yaml's line breaks.
///
/// kubectl reads YAML with go-yaml (sigs.k8s.io/yaml), whose scanner, like libyaml's, counts
/// NEL (U+0085), LS (U+2028) and PS (U+2029) as line breaks (`is_break` in yamlh.go), also
/// inside scalars and comments; `read_line` turns a NEL into `\n` and keeps LS and PS. The
/// parser here follows YAML 1.2, where they are ordinary characters, so a NEL hidden in a
/// string would read as one line here and as two for kubectl (a commented-out
/// `provider-requires-serial-api-calls = false` that kubectl stores uncommented). So:
/// - a raw NEL is given to the parser as CR LF: the same byte length (spans stay valid) and a
///   line break the parser folds, keeps and counts exactly as go-yaml does a NEL;
/// - a raw LS or PS is refused with its position: go-yaml breaks the line there but keeps
///   the character, which no YAML 1.2 reading reproduces.
///
/// Lines are reported as lines of the text (a NEL does not start one in an editor).
struct GoYamlBreaks<'t> {
    /// The text the parser reads.
    text: Cow<'t, str>,
    /// The original text.
    original: &'t str,
    /// Byte offsets of the NELs of the original text.
    nels: Vec<usize>,
    /// Spaces put in front of lines (original byte of the line start → count) so that the
    /// parser accepts a quoted scalar's continuation line indented no deeper than its block,
    /// as go-yaml does (controller-gen writes `description: 'a\n  b'` continuing at the
    /// key's indentation). Folding drops a continuation line's leading blanks, so the value
    /// read is the same; positions are mapped back to the original text.
    pads: std::collections::BTreeMap<usize, usize>,
    /// For each padded line, in order: the reading byte where its spaces start, and the
    /// spaces inserted before and including it (for [`Self::original_byte`]).
    padded: Vec<(usize, usize, usize)>,
}

/// Most quoted scalars one text may have re-indented for the parser (each costs one more
/// parse of the text; the lines of one scalar are re-indented together).
const MAX_QUOTED_CONTINUATIONS: usize = 64;

/// The quote and the rest of the line when `line` (without its indentation) opens a quoted
/// value: `key: '…` or `- "…` (a key without quotes or comment before the `: `).
fn opens_quoted(line: &str) -> Option<(char, &str)> {
    let mut t = line;
    while let Some(rest) = t.strip_prefix("- ") {
        t = rest.trim_start_matches(' ');
    }
    let after = match t.chars().next() {
        Some('\'' | '"') => t,
        _ => {
            let i = t.find(": ")?;
            if t[..i].contains(['\'', '"', '#']) {
                return None;
            }
            t[i + 2..].trim_start_matches(' ')
        }
    };
    let quote = after.chars().next().filter(|c| matches!(c, '\'' | '"'))?;
    Some((quote, &after[1..]))
}

/// Whether `text` (inside a scalar quoted with `quote`) holds its closing quote.
fn closes(text: &str, quote: char) -> bool {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            ('\'', '\'') => {
                if chars.clone().next() == Some('\'') {
                    chars.next();
                } else {
                    return true;
                }
            }
            ('"', '\\') => {
                chars.next();
            }
            ('"', '"') => return true,
            _ => {}
        }
    }
    false
}

/// The first line of `text`, with its line ending.
fn line_of(text: &str) -> &str {
    text.find('\n').map_or(text, |i| &text[..=i])
}

/// The number of leading spaces of `line`.
fn line_indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

impl<'t> GoYamlBreaks<'t> {
    fn of(text: &'t str) -> Result<Self, YamlError> {
        // The three characters all start with byte 0xC2 (NEL) or 0xE2 (LS, PS).
        if !text.contains(['\u{85}', '\u{2028}', '\u{2029}']) {
            return Ok(Self {
                text: Cow::Borrowed(text),
                original: text,
                nels: Vec::new(),
                pads: Default::default(),
                padded: Vec::new(),
            });
        }
        let mut out = String::with_capacity(text.len());
        let mut nels = Vec::new();
        let mut line = 1;
        let mut line_start = 0;
        for (i, c) in text.char_indices() {
            match c {
                '\u{85}' => {
                    nels.push(i);
                    out.push_str("\r\n");
                }
                '\u{2028}' | '\u{2029}' => {
                    let name = if c == '\u{2028}' {
                        "U+2028 LINE SEPARATOR"
                    } else {
                        "U+2029 PARAGRAPH SEPARATOR"
                    };
                    return Err(YamlError::at(
                        Pos {
                            byte: i,
                            line,
                            col: text[line_start..i].chars().count(),
                        },
                        format!(
                            "a raw {name}: kubectl's YAML reader (go-yaml) breaks the line there \
                             and keeps the character, which stackgate cannot reproduce; write it \
                             as an escape in a double-quoted string"
                        ),
                    ));
                }
                '\n' => {
                    line += 1;
                    line_start = i + 1;
                    out.push(c);
                }
                _ => out.push(c),
            }
        }
        Ok(Self {
            text: Cow::Owned(out),
            original: text,
            nels,
            pads: Default::default(),
            padded: Vec::new(),
        })
    }

    /// Puts one more space in front of the original line holding reading byte `at`; false
    /// when the line already has as many as a continuation could need.
    fn pad_line_at(&mut self, at: usize) -> bool {
        let byte = self.original_byte(at).min(self.original.len());
        let line_start = self.original[..byte].rfind('\n').map_or(0, |i| i + 1);
        let count = self.pads.entry(line_start).or_insert(0);
        if *count >= MAX_QUOTED_CONTINUATIONS {
            return false;
        }
        *count += 1;
        let (added, indent) = (*count, line_indent(&self.original[line_start..]));
        // The lines after it up to the first one holding a quote are inside the same scalar
        // (the closing quote is on that line at the latest): one parse for all of them.
        if !self.original[line_start..byte.max(line_start)].contains(['\'', '"'])
            && !line_of(&self.original[line_start..]).contains(['\'', '"'])
        {
            let mut start = line_start + line_of(&self.original[line_start..]).len();
            while start < self.original.len() {
                let line = line_of(&self.original[start..]);
                if line_indent(line) > indent {
                    break;
                }
                let pad = self.pads.entry(start).or_insert(0);
                *pad = (*pad).max(added);
                if line.contains(['\'', '"']) {
                    break;
                }
                start += line.len();
            }
        }
        self.rebuild();
        true
    }

    /// Re-indents (one column deeper than the line that opens it) the continuation lines of
    /// every single- or double-quoted value that a line opens after `key: ` or `- ` and does
    /// not close, up to the line that closes it. A heuristic over lines; what it gets wrong is
    /// caught by [`Self::pads_inside_quoted`].
    fn pad_quoted_continuations(&mut self) {
        let text = self.original;
        let mut start = 0;
        let mut open: Option<(char, usize)> = None;
        while start < text.len() {
            let line = line_of(&text[start..]);
            let body = line.trim_end_matches(['\n', '\r']);
            let indent = line_indent(body);
            match open {
                Some((quote, opener)) => {
                    if indent <= opener && !body.trim().is_empty() {
                        let pad = self.pads.entry(start).or_insert(0);
                        *pad = (*pad).max(opener + 1 - indent);
                    }
                    if closes(body, quote) {
                        open = None;
                    }
                }
                None => {
                    if let Some((quote, rest)) = opens_quoted(&body[indent..])
                        && !closes(rest, quote)
                    {
                        open = Some((quote, indent));
                    }
                }
            }
            start += line.len();
        }
        self.rebuild();
    }

    /// Whether every line given spaces starts inside a quoted scalar of `docs` (so the spaces
    /// are folded away and the values are go-yaml's).
    fn pads_inside_quoted(&self, docs: &[YamlDoc]) -> bool {
        if self.pads.is_empty() {
            return true;
        }
        let mut spans: Vec<(usize, usize)> = Vec::new();
        let mut stack: Vec<&Node> = docs.iter().map(|d| &d.root).collect();
        while let Some(node) = stack.pop() {
            match &node.kind {
                Kind::Scalar {
                    style: Style::SingleQuoted | Style::DoubleQuoted,
                    ..
                } => spans.push((node.start.byte, node.end.byte)),
                Kind::Scalar { .. } => {}
                Kind::Seq(items) if !node.aliased => stack.extend(items.iter()),
                Kind::Map(entries) if !node.aliased => {
                    stack.extend(entries.iter().flat_map(|(k, v)| [k, v]));
                }
                _ => {}
            }
        }
        spans.sort_unstable();
        self.pads.iter().filter(|(_, n)| **n > 0).all(|(&line, _)| {
            let i = spans.partition_point(|(s, _)| *s < line);
            i > 0 && spans[i - 1].1 > line
        })
    }

    /// The reading text from the original, the pads and the NELs.
    fn rebuild(&mut self) {
        let mut out = String::with_capacity(self.original.len() + self.pads.len());
        let mut from = 0;
        let mut inserted = 0;
        self.padded.clear();
        for (&start, &n) in &self.pads {
            out.push_str(&self.original[from..start]);
            out.extend(std::iter::repeat_n(' ', n));
            self.padded.push((start + inserted, start, inserted + n));
            inserted += n;
            from = start;
        }
        out.push_str(&self.original[from..]);
        if !self.nels.is_empty() {
            out = out.replace('\u{85}', "\r\n");
        }
        self.text = Cow::Owned(out);
    }

    /// The original byte offset of reading byte `at` (inside inserted spaces: the line start).
    fn original_byte(&self, at: usize) -> usize {
        let i = self
            .padded
            .partition_point(|(reading, _, _)| *reading <= at);
        let Some(&(reading, start, through)) = i.checked_sub(1).and_then(|i| self.padded.get(i))
        else {
            return at;
        };
        let n = through - (reading - start);
        if at < reading + n {
            start
        } else {
            at - through
        }
    }

    /// A parser position in the original text: lines counted without the NELs.
    fn pos(&self, m: &serde_saphyr::granit_parser::Marker) -> Pos {
        let mut p = pos(m);
        if !self.pads.is_empty() {
            p.byte = self.original_byte(p.byte);
            let line_start = self.original[..p.byte.min(self.original.len())]
                .rfind('\n')
                .map_or(0, |i| i + 1);
            if let Some(n) = self.pads.get(&line_start) {
                p.col = p.col.saturating_sub(*n);
            }
        }
        if !self.nels.is_empty() {
            let before = self.nels.partition_point(|&n| n < p.byte);
            p.line = p.line.saturating_sub(before).max(1);
        }
        p
    }
}

/// Parses every document of a YAML stream.
///
/// Bounded: at most [`MAX_NODES`] nodes as written, aliases standing for at most
/// [`MAX_ALIAS_NODES`] nodes and [`MAX_ALIAS_BYTES`] bytes of text in all (counted when the
/// alias is read, before it is used; an alias shares the anchored node rather than copying
/// it), and [`MAX_DEPTH`] levels of nesting with aliases expanded. Time and memory are linear
/// in the text.
pub fn parse_stream(text: &str) -> Result<Vec<YamlDoc>, YamlError> {
    parse_capped(text, MAX_NODES, false, &Cancel::never())
}

/// [`parse_stream`] that stops with an error once `cancel` fires (within
/// `CANCEL_CHECK_EVERY` events); the caller checks the flag before it uses the error.
pub fn parse_stream_within(text: &str, cancel: &Cancel) -> Result<Vec<YamlDoc>, YamlError> {
    parse_capped(text, MAX_NODES, false, cancel)
}

/// The first document of a YAML stream (none for an empty text), as go-yaml v2's `Unmarshal`
/// reads a Helm values file: what follows the end of that document is not read. Bounded as
/// [`parse_stream`] is.
pub fn parse_first_document(text: &str) -> Result<Vec<YamlDoc>, YamlError> {
    parse_capped(text, MAX_NODES, true, &Cancel::never())
}

/// [`parse_stream`] with `max_nodes` as the node cap; `one`: the first document only.
fn parse_capped(
    text: &str,
    max_nodes: usize,
    one: bool,
    cancel: &Cancel,
) -> Result<Vec<YamlDoc>, YamlError> {
    let mut breaks = GoYamlBreaks::of(text)?;
    let first = match parse_reading(&breaks, max_nodes, one, cancel) {
        Ok(docs) => return Ok(docs),
        Err((error, None)) => return Err(error),
        Err((error, Some(_))) => error,
    };
    // go-yaml accepts what the parser refused: re-indent every quoted scalar's continuation
    // lines found by a scan of the text, then those the parser still finds, one per parse.
    breaks.pad_quoted_continuations();
    let mut retries = 0;
    loop {
        match parse_reading(&breaks, max_nodes, one, cancel) {
            // Only spaces inside quoted scalars were added, or the reading is not trusted.
            Ok(docs) if breaks.pads_inside_quoted(&docs) => return Ok(docs),
            Ok(_) => return Err(first),
            Err((_, Some(at))) if retries < MAX_QUOTED_CONTINUATIONS => {
                retries += 1;
                if !breaks.pad_line_at(at) {
                    return Err(first);
                }
            }
            Err((error, _)) => return Err(error),
        }
    }
}

/// One parse of `breaks.text`. An error comes with the reading byte of a quoted scalar's
/// continuation line the parser found under-indented (which go-yaml accepts).
fn parse_reading(
    breaks: &GoYamlBreaks<'_>,
    max_nodes: usize,
    one: bool,
    cancel: &Cancel,
) -> Result<Vec<YamlDoc>, (YamlError, Option<usize>)> {
    let quoted_at = std::cell::Cell::new(None);
    parse_events(breaks, max_nodes, one, &quoted_at, cancel).map_err(|e| (e, quoted_at.get()))
}

/// The events of `breaks.text` into documents; `quoted_at` is set to the reading byte of an
/// under-indented quoted-scalar continuation when that is the error.
fn parse_events(
    breaks: &GoYamlBreaks<'_>,
    max_nodes: usize,
    one: bool,
    quoted_at: &std::cell::Cell<Option<usize>>,
    cancel: &Cancel,
) -> Result<Vec<YamlDoc>, YamlError> {
    let mut options = Options::default();
    // Nesting is bounded by MAX_DEPTH (counted below, aliases expanded); the parser's own
    // limits are set to it so that nothing stops at a lower, unnamed depth.
    options.flow_nesting_limit = MAX_DEPTH;
    options.block_nesting_limit = MAX_DEPTH;
    let mut parser = Parser::new_from_str_with_options(&breaks.text, options);
    let pos = |m: &serde_saphyr::granit_parser::Marker| breaks.pos(m);
    let mut docs = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, (Node, Cost)> = HashMap::new();
    let mut root: Option<Node> = None;
    let mut nodes = 0usize;
    let mut alias = Cost::default();
    let mut events = 0usize;
    while let Some(next) = parser.next_event() {
        events += 1;
        if events.is_multiple_of(CANCEL_CHECK_EVERY) && cancel.is_cancelled() {
            return Err(cancelled_error());
        }
        let (event, span): (Event<'_>, Span) = match next {
            Ok(e) => e,
            Err(e) => {
                let p = pos(e.marker());
                match e.kind() {
                    ErrorKind::InvalidQuotedScalarIndent => {
                        let m = e.marker();
                        quoted_at.set(Some(m.byte_offset().unwrap_or(m.index())));
                    }
                    // The parser's nesting limits are MAX_DEPTH: its stop is this cap's.
                    ErrorKind::RecursionLimitExceeded => return Err(depth_error(p)),
                    _ => {}
                }
                return Err(YamlError::at(p, e.kind().to_string()));
            }
        };
        let start = pos(&span.start);
        let end = pos(&span.end);
        if matches!(
            event,
            Event::Scalar(..)
                | Event::SequenceStart(..)
                | Event::MappingStart(..)
                | Event::Alias(_)
        ) {
            nodes += 1;
            if nodes > max_nodes {
                return Err(YamlError::cap(
                    start,
                    Limit::Nodes,
                    format!("more than {max_nodes} nodes (the YAML node cap)"),
                ));
            }
        }
        let finished: Option<(Node, usize, Cost)> = match event {
            Event::DocumentStart(..) => {
                anchors.clear();
                root = None;
                None
            }
            Event::DocumentEnd => {
                let node = root.take().unwrap_or_else(|| Node {
                    end,
                    ..Node::null_at(start)
                });
                docs.push(YamlDoc {
                    root: node,
                    index: docs.len(),
                });
                if one {
                    // go-yaml v2 `Unmarshal` (Helm's values, sigs.k8s.io/yaml) decodes the
                    // first document and reads no further: what follows its end is never
                    // parsed, so it cannot be an error either.
                    return Ok(docs);
                }
                None
            }
            Event::Scalar(value, style, anchor, tag) => {
                let style = match style {
                    ScalarStyle::Plain => Style::Plain,
                    ScalarStyle::SingleQuoted => Style::SingleQuoted,
                    ScalarStyle::DoubleQuoted => Style::DoubleQuoted,
                    ScalarStyle::Literal => Style::Literal,
                    ScalarStyle::Folded => Style::Folded,
                };
                let tag = tag.map(|t| {
                    Box::new(match t.core_suffix() {
                        Some(s) => s.to_owned(),
                        None => t
                            .suffix_in_namespace("tag:yaml.org,2002:")
                            .map(|s| s.into_owned())
                            .unwrap_or_else(|| t.original()),
                    })
                });
                // An empty plain scalar (`key:` with nothing after it) has an empty span.
                let value: Arc<str> = if style == Style::Plain && start.byte == end.byte {
                    Arc::from("")
                } else {
                    Arc::from(value)
                };
                let cost = Cost {
                    nodes: 1,
                    bytes: value.len(),
                    height: 1,
                };
                Some((
                    Node {
                        kind: Kind::Scalar { value, style, tag },
                        start,
                        end,
                        flow: false,
                        aliased: false,
                    },
                    anchor,
                    cost,
                ))
            }
            Event::SequenceStart(style, anchor, _) | Event::MappingStart(style, anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(depth_error(start));
                }
                let body = if matches!(event, Event::SequenceStart(..)) {
                    Body::Seq(Vec::new())
                } else {
                    Body::Map {
                        entries: Vec::new(),
                        key: None,
                    }
                };
                stack.push(Frame {
                    start,
                    flow: is_flow(style),
                    anchor,
                    cost: Cost::default(),
                    last_end: None,
                    body,
                });
                None
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = stack.pop() else {
                    return Err(YamlError::at(start, "unbalanced collection end"));
                };
                let last_end = frame.last_end;
                let kind = match (frame.body, &event) {
                    (Body::Seq(mut items), Event::SequenceEnd) => {
                        items.shrink_to_fit();
                        Kind::Seq(Arc::new(items))
                    }
                    (Body::Map { mut entries, .. }, Event::MappingEnd) => {
                        entries.shrink_to_fit();
                        Kind::Map(Arc::new(entries))
                    }
                    _ => return Err(YamlError::at(start, "unbalanced collection end")),
                };
                let end = if frame.flow {
                    end
                } else {
                    last_end.unwrap_or(frame.start)
                };
                Some((
                    Node {
                        kind,
                        start: frame.start,
                        end,
                        flow: frame.flow,
                        aliased: false,
                    },
                    frame.anchor,
                    frame.cost.collection(),
                ))
            }
            Event::Alias(id) => {
                let Some((target, cost)) = anchors.get(&id) else {
                    return Err(YamlError::at(start, "alias to an unknown anchor"));
                };
                // Count what the alias stands for before it is used anywhere.
                alias.add(*cost);
                if alias.nodes > MAX_ALIAS_NODES {
                    return Err(YamlError::cap(
                        start,
                        Limit::AliasExpansion,
                        format!(
                            "aliases expand to more than {MAX_ALIAS_NODES} nodes \
                             (the YAML alias expansion cap)"
                        ),
                    ));
                }
                if alias.bytes > MAX_ALIAS_BYTES {
                    return Err(YamlError::cap(
                        start,
                        Limit::AliasExpansion,
                        format!(
                            "aliases expand to more than {MAX_ALIAS_BYTES} bytes of text \
                             (the YAML alias expansion cap)"
                        ),
                    ));
                }
                // Shared, not copied: the node is the anchor's, marked as an alias.
                let mut node = target.clone();
                node.aliased = true;
                Some((node, 0, *cost))
            }
            _ => None,
        };
        let Some((node, anchor, cost)) = finished else {
            continue;
        };
        if cost.height + stack.len() > MAX_DEPTH {
            return Err(depth_error(start));
        }
        if anchor != 0 {
            anchors.insert(anchor, (node.clone(), cost));
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(frame) => {
                frame.cost.add(cost);
                // A block collection ends where its last child does: for an alias that is
                // the alias itself (`<<: *base` as the last entry), not the anchor.
                frame.last_end = Some(if node.aliased { end } else { node.end });
                match &mut frame.body {
                    Body::Seq(items) => items.push(node),
                    Body::Map { entries, key } => match key.take() {
                        None => *key = Some(node),
                        Some(k) => entries.push((k, node)),
                    },
                }
            }
        }
    }
    Ok(docs)
}

fn depth_error(at: Pos) -> YamlError {
    YamlError::cap(
        at,
        Limit::Depth,
        format!("nesting deeper than {MAX_DEPTH} levels (the YAML depth cap)"),
    )
}

/// The error of a parse stopped by its cancel flag: never shown, as the evaluation that asked
/// for the parse is abandoned (its caller checks the flag).
fn cancelled_error() -> YamlError {
    YamlError::at(
        Pos::default(),
        "reading stopped: the evaluation ran out of time",
    )
}

fn is_flow(style: serde_saphyr::granit_parser::StructureStyle) -> bool {
    matches!(style, serde_saphyr::granit_parser::StructureStyle::Flow)
}

#[cfg(test)]
impl Node {
    /// Levels of nesting below and including this node, aliases expanded.
    fn height_for_tests(&self) -> usize {
        1 + match &self.kind {
            Kind::Scalar { .. } => 0,
            Kind::Seq(items) => items.iter().map(Node::height_for_tests).max().unwrap_or(0),
            Kind::Map(entries) => entries
                .iter()
                .map(|(k, v)| k.height_for_tests().max(v.height_for_tests()))
                .max()
                .unwrap_or(0),
        }
    }
}

/// A null document positioned at the end of `text` (for empty or comment-only texts).
pub fn empty_doc_at_end(text: &str) -> YamlDoc {
    let line = text.matches('\n').count() + 1;
    YamlDoc {
        root: Node::null_at(Pos {
            byte: text.len(),
            line,
            col: 0,
        }),
        index: 0,
    }
}

/// Parses the first document of a YAML text (a values string) into its root node, as go-yaml
/// v2's `Unmarshal` reads it for Helm: what follows the end of the first document (`---`,
/// `...`) is not read. An empty text is a null root. Bounded as [`parse_stream`] is, with
/// [`MAX_VALUES_NODES`] as the node cap.
pub fn parse_one(text: &str) -> Result<Node, YamlError> {
    parse_one_within(text, &Cancel::never())
}

/// [`parse_one`] that stops with an error once `cancel` fires (see [`parse_stream_within`]).
pub fn parse_one_within(text: &str, cancel: &Cancel) -> Result<Node, YamlError> {
    let mut docs = parse_capped(text, MAX_VALUES_NODES, true, cancel)?;
    Ok(docs.pop().map(|d| d.root).unwrap_or_else(|| {
        Node::null_at(Pos {
            byte: 0,
            line: 1,
            col: 0,
        })
    }))
}

/// The line (1-based, in the text that holds `node`) of line `inner` (1-based) of the string
/// value of `node`, when the scalar is a literal block whose lines map one to one onto the
/// text's lines; otherwise the line where the scalar starts (or, for a block scalar, the line
/// before its content, where its key is).
pub fn line_within_scalar(source: &str, node: &Node, inner: usize) -> usize {
    match node.style() {
        Some(Style::Literal) if !node.aliased => match literal_block_lines(source, node) {
            Some(first) => match source.get(node.start.byte..node.end.byte) {
                // A NEL starts a line of the value (go-yaml) but not of the text.
                Some(body) if body.contains('\u{85}') => {
                    let (mut line, mut file) = (1, first);
                    for c in body.chars() {
                        if line >= inner {
                            break;
                        }
                        match c {
                            '\n' => {
                                line += 1;
                                file += 1;
                            }
                            '\u{85}' => line += 1,
                            _ => {}
                        }
                    }
                    file
                }
                // A line past the block's last (the line a fix would add after it) is shown
                // at the last: a location must be a line the file has.
                _ => (first + inner.saturating_sub(1)).min(last_content_line(source, node)),
            },
            None => node.start.line,
        },
        Some(Style::Plain | Style::SingleQuoted | Style::DoubleQuoted) if inner <= 1 => {
            node.start.line
        }
        _ => node.start.line.saturating_sub(1).max(1),
    }
}

/// The 1-based line in `source` of the last character of `node` that is not a line break or
/// blank (a block scalar's span ends after its final line break).
fn last_content_line(source: &str, node: &Node) -> usize {
    let end = node.end.byte.min(source.len());
    let held = source.get(..end).map_or(end, |s| s.trim_end().len());
    1 + source.as_bytes()[..held]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// For a literal block scalar whose content starts on its own line, the 1-based line in
/// `source` of the first content line.
fn literal_block_lines(source: &str, node: &Node) -> Option<usize> {
    // The node starts at its first content character; the header (`|`) is on an earlier line.
    let before = source.get(..node.start.byte)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let prefix = before.get(line_start..)?;
    if !prefix.chars().all(|c| c == ' ') {
        return None;
    }
    // Leading empty content lines are part of the value; count back over them.
    let value = node.scalar()?;
    let leading_empty = value.chars().take_while(|c| *c == '\n').count();
    node.start.line.checked_sub(leading_empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(text: &str) -> Value {
        parse_one(text).and_then(|n| n.to_json()).expect("parses")
    }

    #[test]
    fn yaml_1_1_scalars_like_kubectl() {
        assert_eq!(
            one(
                "a: yes\nb: Off\nc: ~\nd:\ne: 0x1F\nf: 010\ng: 1_000\nh: 1.5\ni: \"true\"\nj: 2001-12-14\nk: y\nl: 1e3\n"
            ),
            json!({"a": true, "b": false, "c": null, "d": null, "e": 31, "f": 8, "g": 1000,
                   "h": 1.5, "i": "true", "j": "2001-12-14", "k": true, "l": 1000.0})
        );
        assert_eq!(
            one("a: !!str 10\nb: !!int \"7\"\n"),
            json!({"a": "10", "b": 7})
        );
    }

    #[test]
    fn a_repeated_key_keeps_the_last_value_as_helm_and_kubectl_do() {
        // go-yaml v2's non-strict Unmarshal (sigs.k8s.io/yaml, Helm's values and kubectl's
        // manifests) overwrites: `items` is `[b]` for the chart and the apiserver.
        assert_eq!(
            one("items:\n- a\nother: 1\nitems:\n- b\n"),
            json!({"items": ["b"], "other": 1})
        );
        // Keys that read the same after resolution are the same key (`on` is `true`).
        assert_eq!(one("true: 1\non: 2\n"), json!({"true": 2}));
        // The lookups the editor and `check` use agree with the conversion.
        let root = parse_one("a: 1\nb: 2\na: 3\n").unwrap();
        let (key, value) = root.entry("a").unwrap();
        assert_eq!((key.start.line, value.scalar()), (3, Some("3")));
        // An explicit key written after a merge key overrides the merged one.
        assert_eq!(
            one("base: &b {x: 1}\nover:\n  x: 2\n  <<: *b\n  x: 3\n"),
            json!({"base": {"x": 1}, "over": {"x": 3}})
        );
    }

    #[test]
    fn merge_keys_apply_in_document_order_as_go_yaml_v2_does() {
        // go-yaml v2 `decoder.mapping` reads a mapping's entries in order and `decoder.merge`
        // writes the merged mapping's keys into the same map (go-yaml/yaml v2 7649d454,
        // decode.go l.661-664 and l.786-811): a `<<` after an explicit key overwrites it, an
        // explicit key after a `<<` overwrites the merged one. Checked with Helm v3.17.2
        // (`helm template` of a chart printing `toYaml .Values`).
        let off = "off: &off {s: false, o: 1}\n";
        assert_eq!(
            one(&format!("{off}lb: {{s: true, <<: *off}}\n"))["lb"],
            json!({"s": false, "o": 1})
        );
        assert_eq!(
            one(&format!("{off}lb: {{<<: *off, s: true}}\n"))["lb"],
            json!({"s": true, "o": 1})
        );
        // A list of mappings is merged last to first: the first one wins among them, and all
        // of them overwrite an explicit key written before the `<<`.
        let ab = "a: &a {s: 1}\nb: &b {s: 2, t: 2}\n";
        assert_eq!(
            one(&format!("{ab}lb: {{s: 0, <<: [*a, *b]}}\n"))["lb"],
            json!({"s": 1, "t": 2})
        );
        assert_eq!(
            one(&format!("{ab}lb: {{<<: [*a, *b], s: 0}}\n"))["lb"],
            json!({"s": 0, "t": 2})
        );
        // Two merge keys: the later one overwrites.
        assert_eq!(
            one(&format!("{ab}lb: {{<<: *a, <<: *b}}\n"))["lb"],
            json!({"s": 2, "t": 2})
        );
        // A merge replaces a value whole; nested mappings are not merged.
        assert_eq!(
            one("lb: {s: {a: 1}, <<: {s: {b: 2}}}\n")["lb"],
            json!({"s": {"b": 2}})
        );
        // `!!merge <<` is a merge key; a quoted `"<<"` is an ordinary key.
        assert_eq!(
            one("lb: {!!merge <<: {s: 1}, s: 2}\n")["lb"],
            json!({"s": 2})
        );
        assert_eq!(
            one("lb: {s: 2, !!merge <<: {s: 1}}\n")["lb"],
            json!({"s": 1})
        );
        assert_eq!(one("lb: {\"<<\": {s: 1}}\n")["lb"], json!({"<<": {"s": 1}}));
        // An empty list merges nothing; anything but mappings is refused, as Helm refuses it.
        assert_eq!(one("lb: {<<: []}\n")["lb"], json!({}));
        for bad in [
            "lb: {<<: ~}\n",
            "lb: {<<: 3}\n",
            "lb: {<<: [{s: 1}, 3]}\n",
            "l: &l [{s: 1}]\nlb: {<<: *l}\n",
        ] {
            let err = parse_one(bad).and_then(|n| n.to_json()).expect_err(bad);
            assert!(err.message.contains("merge"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_values_text_is_its_first_document_as_helm_reads_it() {
        // go-yaml v2 `Unmarshal` decodes the first document and never reads past it (checked
        // with Helm v3.17.2: a second document, even an unreadable one, changes nothing).
        for text in [
            "lb:\n  s: 1\n---\nlb:\n  s: 2\n",
            "lb:\n  s: 1\n---\n",
            "---\nlb:\n  s: 1\n",
            "lb:\n  s: 1\n...\n",
            "# c\n---\nlb:\n  s: 1\n",
            "lb:\n  s: 1\n---\n\"unterminated\n",
            "lb:\n  s: 1\n--- \"unterminated\n",
            "lb:\n  s: 1\n---\n\t- x\n",
            "lb:\n  s: 1\n---\n*undefined\n",
            "lb:\n  s: 1\n---\n: [bad\n",
            "lb:\n  s: 1\n...\n%YAML 9.9\n---\nx: 1\n",
            "lb:\n  s: 1\n--- # comment\n",
        ] {
            assert_eq!(
                parse_one(text).and_then(|n| n.to_json()),
                Ok(json!({"lb": {"s": 1}})),
                "{text:?}"
            );
        }
        // An empty first document is null (Helm: no values), whatever follows.
        assert_eq!(one("---\n---\nlb:\n  s: 1\n"), Value::Null);
        assert_eq!(one("---\n"), Value::Null);
        // Not a document separator: one document, and an error like Helm's.
        assert!(parse_one("lb:\n  s: 1\n---x\n").is_err());
    }

    #[test]
    fn merge_keys_and_aliases() {
        let v = one("base: &b {x: 1, z: 2}\nover:\n  <<: *b\n  z: 3\n");
        assert_eq!(
            v,
            json!({"base": {"x": 1, "z": 2}, "over": {"x": 1, "z": 3}})
        );
        // YAML 1.1 keys: `y` and `on` are booleans, which JSON keys spell "true".
        assert_eq!(
            one("y: 1
off: 2
"),
            json!({"true": 1, "false": 2})
        );
    }

    #[test]
    fn spans_and_paths() {
        let text = "a:\n  b:\n    - x: 1\n      t: |\n        one\n        two\n";
        let root = parse_one(text).unwrap();
        let path = [Seg::key("a"), Seg::key("b"), Seg::Index(0), Seg::key("t")];
        let y = root.at(&path).unwrap();
        assert_eq!(line_within_scalar(text, y, 1), 5);
        assert_eq!(line_within_scalar(text, y, 2), 6);
        // A line the block does not have (one a fix would add) is shown at its last line,
        // with or without a final line break or lines after it.
        assert_eq!(line_within_scalar(text, y, 3), 6);
        assert_eq!(line_within_scalar(text, y, 9), 6);
        let trailing = "t: |\n  one\n  two\n\n\nu: 1\n";
        let block = parse_one(trailing).unwrap();
        let t = block.at(&[Seg::key("t")]).unwrap();
        assert_eq!(line_within_scalar(trailing, t, 3), 3);
        let unterminated = "t: |\n  one\n  two";
        let block = parse_one(unterminated).unwrap();
        let t = block.at(&[Seg::key("t")]).unwrap();
        assert_eq!(line_within_scalar(unterminated, t, 3), 3);
        let (used, _, line) =
            root.deepest(&[Seg::key("a"), Seg::key("b"), Seg::Index(0), Seg::key("z")]);
        assert_eq!((used, line), (3, 3));
    }

    #[test]
    fn multi_document_streams_and_errors() {
        let docs = parse_stream("a: 1\n---\n---\nb: [1, 2\n");
        let err = docs.unwrap_err();
        assert_eq!(err.line, 4);
        let docs = parse_stream("a: 1\n---\n# only a comment\n---\nb: 2\n").unwrap();
        assert_eq!(docs.len(), 3);
        assert!(docs[1].root.is_null());
    }

    #[test]
    fn chained_aliases_cannot_nest_without_bound() {
        let deep = |inner: &str| format!("{}{inner}{}", "[".repeat(200), "]".repeat(200));
        let mut text = format!("a0: &a0 {}\n", deep("x"));
        for i in 1..5 {
            text.push_str(&format!("a{i}: &a{i} {}\n", deep(&format!("*a{}", i - 1))));
        }
        let err = parse_stream(&text).unwrap_err();
        assert!(err.message.contains("nesting deeper"), "{err}");
    }

    /// The classic "billion laughs": nine levels of nine aliases each (342 bytes).
    fn laughs() -> String {
        let mut text = String::from(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for w in names.windows(2) {
            let (p, c) = (w[0], w[1]);
            text.push_str(&format!(
                "{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
            ));
        }
        text
    }

    #[test]
    fn alias_expansion_is_counted_before_expanding() {
        let text = laughs();
        let err = parse_stream(&text).unwrap_err();
        assert_eq!(err.limit, Some(Limit::AliasExpansion));
        assert!(err.message.contains("alias expansion cap"), "{err}");
        assert!(err.message.contains(&MAX_ALIAS_NODES.to_string()), "{err}");
        // Level e holds 9 aliases of d (9^4 nodes each, 59 049 in all): the cap is reached
        // on line 5.
        assert_eq!(err.line, 5, "{err}");
        // Below the cap, aliases are fine and expand in JSON.
        let small = "a: &a [1, 2]\nb: [*a, *a]\n";
        assert_eq!(one(small), json!({"a": [1, 2], "b": [[1, 2], [1, 2]]}));
    }

    #[test]
    fn alias_expansion_counts_text_bytes() {
        let big = "x".repeat(MAX_ALIAS_BYTES / 8 + 1);
        let mut text = format!("a: &a {big}\nb: [");
        text.push_str(&["*a"; 8].join(", "));
        text.push_str("]\n");
        let err = parse_stream(&text).unwrap_err();
        assert_eq!(err.limit, Some(Limit::AliasExpansion));
        assert!(err.message.contains("bytes"), "{err}");
        assert!(!err.message.contains("xxx"));
    }

    #[test]
    fn anchors_and_aliases_share_nodes() {
        // Nested anchors around a big list: nothing is copied per anchor (this was 200
        // copies of the list; the parser stops at about 250 levels).
        let mut text = String::new();
        for i in 0..200 {
            text.push_str(&format!("&a{i} ["));
        }
        text.push_str(&"0, ".repeat(100_000));
        text.push_str(&"]".repeat(200));
        let root = parse_stream(&text).unwrap().remove(0).root;
        assert_eq!(root.height_for_tests(), 201);
        // Aliases are marked; the anchor's nodes below them are shared and unmarked.
        let root = parse_one("a: &x {b: 1}\nc: *x\n").unwrap();
        let c = root.at(&[Seg::key("c")]).unwrap();
        assert!(c.aliased && !root.at(&[Seg::key("a")]).unwrap().aliased);
        assert!(root.alias_on_path(&[Seg::key("c"), Seg::key("b")]));
        assert!(!root.alias_on_path(&[Seg::key("a"), Seg::key("b")]));
    }

    #[test]
    fn many_keys_convert_in_linear_time() {
        // 150 000 keys in one mapping: a duplicate check by list scan was quadratic (1.5 MB of
        // keys took six minutes).
        let mut text = String::new();
        for i in 0..150_000 {
            text.push_str(&format!("k{i}: {i}\n"));
        }
        let t = std::time::Instant::now();
        let v = parse_stream(&text).unwrap()[0].root.to_json().unwrap();
        assert_eq!(v.as_object().map(|m| m.len()), Some(150_000));
        // Generous: milliseconds in release, a few seconds in debug; quadratic was minutes.
        assert!(t.elapsed() < std::time::Duration::from_secs(60));
        // A repeated key replaces the first value (the last one wins, as in go-yaml v2).
        let v = parse_stream(&format!("{text}k7: again\n")).unwrap()[0]
            .root
            .to_json()
            .unwrap();
        assert_eq!(v["k7"], json!("again"));
        assert_eq!(v.as_object().map(|m| m.len()), Some(150_000));
        // A values string has the tighter cap, named in the message with its line.
        let err = parse_one(&text).unwrap_err();
        assert_eq!(err.limit, Some(Limit::Nodes));
        assert!(
            err.message
                .contains(&format!("{MAX_VALUES_NODES} nodes (the YAML node cap)")),
            "{err}"
        );
        assert_eq!(err.line, MAX_VALUES_NODES / 2);
    }

    /// Texts nesting `levels` levels (the innermost scalar counted, as [`MAX_DEPTH`] counts
    /// them) in each style a values string can nest: flow sequences, flow mappings, block
    /// mappings and block sequences.
    fn nested(levels: usize) -> [(&'static str, String); 4] {
        let containers = levels - 1;
        let mut block_maps = String::new();
        for i in 0..containers {
            block_maps.push_str(&" ".repeat(i));
            block_maps.push_str("a:");
            block_maps.push(if i + 1 == containers { ' ' } else { '\n' });
        }
        block_maps.push_str("1\n");
        [
            (
                "flow sequences",
                format!("{}1{}", "[".repeat(containers), "]".repeat(containers)),
            ),
            (
                "flow mappings",
                format!("{}1{}", "{a: ".repeat(containers), "}".repeat(containers)),
            ),
            ("block mappings", block_maps),
            ("block sequences", format!("{}1\n", "- ".repeat(containers))),
        ]
    }

    #[test]
    fn nesting_is_read_up_to_the_depth_cap_and_refused_past_it_as_the_cap() {
        // 255 and 256 were the parser's own default stop (a syntax error naming no limit).
        for levels in [255, 256, 257, 511, MAX_DEPTH] {
            for (style, text) in nested(levels) {
                let root =
                    parse_one(&text).unwrap_or_else(|e| panic!("{style} at {levels} levels: {e}"));
                assert_eq!(root.height_for_tests(), levels, "{style}");
                let json = root.to_json().expect("converts");
                assert!(json.is_array() || json.is_object(), "{style}");
            }
        }
        for levels in [MAX_DEPTH + 1, MAX_DEPTH + 2, 4 * MAX_DEPTH] {
            for (style, text) in nested(levels) {
                let err = parse_one(&text).expect_err(style);
                assert_eq!(err.limit, Some(Limit::Depth), "{style} at {levels}: {err}");
                assert!(
                    err.message
                        .contains(&format!("deeper than {MAX_DEPTH} levels")),
                    "{style}: {err}"
                );
                assert!(err.line >= 1, "{style}: {err}");
            }
        }
    }

    #[test]
    fn a_cancelled_parse_stops_at_its_next_look_at_the_flag() {
        let text = "k: v\n".repeat(10 * CANCEL_CHECK_EVERY);
        let cancel = Cancel::new();
        assert!(parse_one_within(&text, &cancel).is_ok());
        cancel.cancel();
        let err = parse_one_within(&text, &cancel).expect_err("cancelled");
        assert_eq!(err.limit, None);
        assert!(err.message.contains("ran out of time"), "{err}");
        assert!(parse_stream_within(&text, &cancel).is_err());
        // Short texts end before the first look: the flag costs nothing there.
        assert!(parse_one_within("k: v", &cancel).is_ok());
    }

    #[test]
    fn alias_bombs_are_bounded() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            text.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n", p = i - 1));
        }
        assert!(parse_stream(&text).is_err());
    }

    #[test]
    fn nel_is_a_line_break_as_in_go_yaml() {
        // In a literal block, go-yaml's read_line turns a NEL into "\n": the INI gets a line
        // that a YAML 1.2 reading keeps inside a comment.
        let text = "c: |\n  # note\u{85}  serial = false\n  x = 1\nd: 1\n";
        let docs = parse_stream(text).expect("parses");
        let v = docs[0].root.to_json().unwrap();
        assert_eq!(v["c"], json!("# note\nserial = false\nx = 1\n"));
        // Lines are lines of the text: `d` is on line 4 (the NEL starts no line in an editor).
        let (d_key, _) = docs[0].root.entry("d").unwrap();
        assert_eq!(d_key.start.line, 4);
        // Inside a double-quoted string a single break folds to a space, as go-yaml does.
        assert_eq!(one("a: \"x\u{85} y\"\n"), json!({"a": "x y"}));
        // A NEL ends a comment: what follows it on the line is read.
        assert_eq!(one("# c\u{85}a: 1\n"), json!({"a": 1}));
    }

    #[test]
    fn raw_line_and_paragraph_separators_are_refused_with_their_position() {
        for c in ['\u{2028}', '\u{2029}'] {
            let text = format!("a: 1\nb: \"x{c}y\"\n");
            let err = parse_stream(&text).expect_err("refused");
            assert_eq!((err.line, err.column), (2, 6), "{err}");
            assert!(err.message.contains("go-yaml"), "{err}");
        }
        // Escaped, they are ordinary characters.
        assert_eq!(one("b: \"x\\Ly\"\n"), json!({"b": "x\u{2028}y"}));
    }

    #[test]
    fn quoted_continuations_at_the_key_indentation_read_as_go_yaml_does() {
        // controller-gen CRDs: a single-quoted description continuing at the key's column.
        let text =
            "spec:\n  description: 'Foo bar\n  baz\n    qux'\n  other: \"a\n  b\"\n  count: 1\n";
        let docs = parse_stream(text).expect("go-yaml accepts it");
        let long = format!(
            "a:\n{}",
            (0..200)
                .map(|i| format!("  d{i}: 'x\n  y\n  z'\n"))
                .collect::<String>()
        );
        let parsed = parse_stream(&long).expect("many such scalars").remove(0);
        assert_eq!(parsed.root.to_json().unwrap()["a"]["d199"], json!("x y z"));
        let root = &docs[0].root;
        assert_eq!(
            root.to_json().unwrap(),
            json!({"spec": {"description": "Foo bar baz qux", "other": "a b", "count": 1}})
        );
        // Positions are those of the original text.
        let (key, value) = root
            .at(&[Seg::key("spec")])
            .unwrap()
            .entry("count")
            .unwrap();
        assert_eq!((key.start.line, key.start.col), (7, 2));
        assert_eq!(&text[value.start.byte..value.end.byte], "1");
        let (_, other) = root
            .at(&[Seg::key("spec")])
            .unwrap()
            .entry("other")
            .unwrap();
        assert_eq!(&text[other.start.byte..other.end.byte], "\"a\n  b\"");
        // Still an error where go-yaml refuses too (an unclosed quote).
        assert!(parse_stream("a: 'x\nb: 1\n").is_err());
    }
}
