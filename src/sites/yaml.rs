//! A YAML stream as a tree that remembers where every node is (byte offset, line, column),
//! and its conversion to JSON with the scalar rules Kubernetes tooling applies.
//!
//! Why not a serde value: `stackgate check` reports `file:line` for findings deep inside a
//! document, and the minimal editor ([`super::yamledit`]) needs the exact byte ranges and
//! styles of scalars and collections. The events come from `granit_parser` (re-exported by
//! serde-saphyr, so there is one YAML parser in the binary).
//!
//! Scalar resolution follows what `kubectl` and Helm do with a YAML file (sigs.k8s.io/yaml on
//! top of go-yaml v2, YAML 1.1 rules): `yes`/`no`/`on`/`off`/`y`/`n` are booleans, `~`/`null`/
//! empty are null, integers may be `0x…`, `0o…`, `0b…` or have `_` separators, merge keys
//! (`<<`) are honoured, and a key repeated in one mapping is an error (go-yaml v2: "already
//! set in map"). Timestamps stay strings, as they do when go-yaml decodes into `interface{}`.
//!
//! Error messages carry a position and a description of the problem, never document content.

use std::collections::HashMap;

use serde_json::{Map, Number, Value};
use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, Span};

/// Upper bound on nodes materialised while expanding aliases (a "billion laughs" guard).
const MAX_NODES: usize = 1_000_000;

/// Upper bound on nesting after expanding aliases (the parser itself stops at a few hundred
/// levels; chained aliases could nest deeper and exhaust the stack of recursive walks).
const MAX_HEIGHT: usize = 512;

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
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A scalar with its (escape-processed) text, style and explicit tag suffix (`str`,
    /// `int`, … for `!!str`; the full tag for others).
    Scalar {
        /// Text after YAML processing.
        value: String,
        /// How it is written.
        style: Style,
        /// Explicit tag, if any.
        tag: Option<String>,
    },
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in source order.
    Map(Vec<(Node, Node)>),
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
    /// The node was reached through an alias (`*name`); its positions are the anchor's.
    pub aliased: bool,
    /// Levels of nesting below and including this node.
    height: usize,
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
}

impl YamlError {
    fn at(pos: Pos, message: impl Into<String>) -> Self {
        Self {
            line: pos.line.max(1),
            column: pos.col + 1,
            message: message.into(),
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
            Kind::Map(e) => Some(e),
            _ => None,
        }
    }

    /// The (key node, value node) of `key` in this mapping (the last one, as JSON would keep).
    pub fn entry(&self, key: &str) -> Option<(&Node, &Node)> {
        self.entries()?
            .iter()
            .rev()
            .find(|(k, _)| key_string(k).as_deref() == Some(key))
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
    pub fn to_json(&self) -> Result<Value, YamlError> {
        match &self.kind {
            Kind::Scalar { .. } => match resolve_scalar(self)? {
                Some(v) => Ok(v),
                None => Err(YamlError::at(
                    self.start,
                    "a value that JSON cannot represent (NaN or infinity)",
                )),
            },
            Kind::Seq(items) => items
                .iter()
                .map(Node::to_json)
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            Kind::Map(entries) => {
                let mut out = Map::new();
                let mut explicit: Vec<String> = Vec::new();
                // Merge keys first (explicit keys override merged ones, and the first merged
                // mapping wins among merged ones), then the explicit keys in order.
                for (k, v) in entries {
                    if is_merge_key(k) {
                        let sources: Vec<&Node> = match &v.kind {
                            Kind::Seq(items) => items.iter().collect(),
                            _ => vec![v],
                        };
                        for src in sources {
                            let Value::Object(m) = src.to_json()? else {
                                return Err(YamlError::at(
                                    src.start,
                                    "a merge key (<<) must refer to a mapping",
                                ));
                            };
                            for (mk, mv) in m {
                                out.entry(mk).or_insert(mv);
                            }
                        }
                    }
                }
                for (k, v) in entries {
                    if is_merge_key(k) {
                        continue;
                    }
                    let key = key_string(k)
                        .ok_or_else(|| YamlError::at(k.start, "a mapping key must be a scalar"))?;
                    if explicit.contains(&key) {
                        return Err(YamlError::at(
                            k.start,
                            format!("mapping key {key:?} is already set in this map"),
                        ));
                    }
                    out.insert(key.clone(), v.to_json()?);
                    explicit.push(key);
                }
                Ok(Value::Object(out))
            }
        }
    }
}

fn is_merge_key(k: &Node) -> bool {
    matches!(&k.kind, Kind::Scalar { value, style: Style::Plain, tag: None } if value == "<<")
}

/// A mapping key as the string JSON uses (sigs.k8s.io/yaml formats non-string keys).
pub fn key_string(k: &Node) -> Option<String> {
    match &k.kind {
        Kind::Scalar { value, .. } => Some(match resolve_scalar(k) {
            Ok(Some(Value::String(s))) => s,
            Ok(Some(Value::Null)) => "null".to_owned(),
            Ok(Some(Value::Bool(b))) => b.to_string(),
            Ok(Some(Value::Number(n))) => n.to_string(),
            _ => value.clone(),
        }),
        _ => None,
    }
}

/// Resolves a scalar node to a JSON value; `Ok(None)` for NaN/infinity.
fn resolve_scalar(node: &Node) -> Result<Option<Value>, YamlError> {
    let Kind::Scalar { value, style, tag } = &node.kind else {
        return Ok(Some(Value::Null));
    };
    let text = value.as_str();
    match tag.as_deref() {
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
    if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
        return Ok(Some(Value::Null));
    }
    if let Some(b) = resolve_bool(text) {
        return Ok(Some(Value::Bool(b)));
    }
    if let Some(n) = resolve_int(text) {
        return Ok(Some(n));
    }
    if let Some(f) = resolve_float(text) {
        return Ok(Some(f));
    }
    if is_special_float(text) {
        return Ok(None);
    }
    Ok(Some(Value::String(text.to_owned())))
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

enum Frame {
    Seq {
        start: Pos,
        flow: bool,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        start: Pos,
        flow: bool,
        anchor: usize,
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
    },
}

/// Parses every document of a YAML stream.
pub fn parse_stream(text: &str) -> Result<Vec<YamlDoc>, YamlError> {
    let mut parser = Parser::new_from_str(text);
    let mut docs = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut root: Option<Node> = None;
    let mut budget = MAX_NODES;
    while let Some(next) = parser.next_event() {
        let (event, span): (Event<'_>, Span) = match next {
            Ok(e) => e,
            Err(e) => {
                let p = pos(e.marker());
                return Err(YamlError::at(p, e.kind().to_string()));
            }
        };
        let start = pos(&span.start);
        let end = pos(&span.end);
        let finished: Option<(Node, usize)> = match event {
            Event::DocumentStart(..) => {
                anchors.clear();
                root = None;
                None
            }
            Event::DocumentEnd => {
                let node = root.take().unwrap_or(Node {
                    kind: Kind::Scalar {
                        value: String::new(),
                        style: Style::Plain,
                        tag: None,
                    },
                    start,
                    end,
                    flow: false,
                    aliased: false,
                    height: 1,
                });
                docs.push(YamlDoc {
                    root: node,
                    index: docs.len(),
                });
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
                let tag = tag.map(|t| match t.core_suffix() {
                    Some(s) => s.to_owned(),
                    None => t
                        .suffix_in_namespace("tag:yaml.org,2002:")
                        .map(|s| s.into_owned())
                        .unwrap_or_else(|| t.original()),
                });
                // An empty plain scalar (`key:` with nothing after it) has an empty span.
                let value = if style == Style::Plain && start.byte == end.byte {
                    String::new()
                } else {
                    value.into_owned()
                };
                Some((
                    Node {
                        kind: Kind::Scalar { value, style, tag },
                        start,
                        end,
                        flow: false,
                        aliased: false,
                        height: 1,
                    },
                    anchor,
                ))
            }
            Event::SequenceStart(style, anchor, _) => {
                stack.push(Frame::Seq {
                    start,
                    flow: is_flow(style),
                    anchor,
                    items: Vec::new(),
                });
                None
            }
            Event::MappingStart(style, anchor, _) => {
                stack.push(Frame::Map {
                    start,
                    flow: is_flow(style),
                    anchor,
                    entries: Vec::new(),
                    key: None,
                });
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq {
                    start,
                    flow,
                    anchor,
                    items,
                }) => {
                    let end = if flow {
                        end
                    } else {
                        items.last().map_or(start, |n| n.end)
                    };
                    Some((
                        Node {
                            height: 1 + items.iter().map(|n| n.height).max().unwrap_or(0),
                            kind: Kind::Seq(items),
                            start,
                            end,
                            flow,
                            aliased: false,
                        },
                        anchor,
                    ))
                }
                _ => return Err(YamlError::at(start, "unbalanced sequence end")),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map {
                    start,
                    flow,
                    anchor,
                    entries,
                    ..
                }) => {
                    let end = if flow {
                        end
                    } else {
                        entries.last().map_or(start, |(_, v)| v.end)
                    };
                    Some((
                        Node {
                            height: 1 + entries
                                .iter()
                                .map(|(k, v)| k.height.max(v.height))
                                .max()
                                .unwrap_or(0),
                            kind: Kind::Map(entries),
                            start,
                            end,
                            flow,
                            aliased: false,
                        },
                        anchor,
                    ))
                }
                _ => return Err(YamlError::at(start, "unbalanced mapping end")),
            },
            Event::Alias(id) => {
                let Some(target) = anchors.get(&id) else {
                    return Err(YamlError::at(start, "alias to an unknown anchor"));
                };
                let size = count(target);
                if size > budget {
                    return Err(YamlError::at(
                        start,
                        "too many nodes after expanding aliases",
                    ));
                }
                budget -= size;
                let mut node = target.clone();
                mark_aliased(&mut node);
                Some((node, 0))
            }
            _ => None,
        };
        let Some((node, anchor)) = finished else {
            continue;
        };
        if node.height + stack.len() > MAX_HEIGHT {
            return Err(YamlError::at(
                start,
                format!("nesting deeper than {MAX_HEIGHT} levels"),
            ));
        }
        budget = budget
            .checked_sub(1)
            .ok_or_else(|| YamlError::at(start, "too many nodes"))?;
        if anchor != 0 {
            anchors.insert(anchor, node.clone());
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, key, .. }) => match key.take() {
                None => *key = Some(node),
                Some(k) => entries.push((k, node)),
            },
        }
    }
    Ok(docs)
}

fn is_flow(style: serde_saphyr::granit_parser::StructureStyle) -> bool {
    matches!(style, serde_saphyr::granit_parser::StructureStyle::Flow)
}

fn count(node: &Node) -> usize {
    1 + match &node.kind {
        Kind::Scalar { .. } => 0,
        Kind::Seq(items) => items.iter().map(count).sum(),
        Kind::Map(entries) => entries.iter().map(|(k, v)| count(k) + count(v)).sum(),
    }
}

fn mark_aliased(node: &mut Node) {
    node.aliased = true;
    match &mut node.kind {
        Kind::Scalar { .. } => {}
        Kind::Seq(items) => items.iter_mut().for_each(mark_aliased),
        Kind::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
            mark_aliased(k);
            mark_aliased(v);
        }),
    }
}

/// A null document positioned at the end of `text` (for empty or comment-only texts).
pub fn empty_doc_at_end(text: &str) -> YamlDoc {
    let line = text.matches('\n').count() + 1;
    let p = Pos {
        byte: text.len(),
        line,
        col: 0,
    };
    YamlDoc {
        root: Node {
            kind: Kind::Scalar {
                value: String::new(),
                style: Style::Plain,
                tag: None,
            },
            start: p,
            end: p,
            flow: false,
            aliased: false,
            height: 1,
        },
        index: 0,
    }
}

/// Parses a single-document YAML text (a values string) into its root node.
/// An empty text is a null root.
pub fn parse_one(text: &str) -> Result<Node, YamlError> {
    let mut docs = parse_stream(text)?;
    if docs.len() > 1 {
        let second = docs.swap_remove(1);
        return Err(YamlError::at(
            second.root.start,
            "expected one YAML document, found several",
        ));
    }
    Ok(docs.pop().map(|d| d.root).unwrap_or(Node {
        kind: Kind::Scalar {
            value: String::new(),
            style: Style::Plain,
            tag: None,
        },
        start: Pos {
            byte: 0,
            line: 1,
            col: 0,
        },
        end: Pos {
            byte: 0,
            line: 1,
            col: 0,
        },
        flow: false,
        aliased: false,
        height: 1,
    }))
}

/// The line (1-based, in the text that holds `node`) of line `inner` (1-based) of the string
/// value of `node`, when the scalar is a literal block whose lines map one to one onto the
/// text's lines; otherwise the line where the scalar starts (or, for a block scalar, the line
/// before its content, where its key is).
pub fn line_within_scalar(source: &str, node: &Node, inner: usize) -> usize {
    match node.style() {
        Some(Style::Literal) if !node.aliased => match literal_block_lines(source, node) {
            Some(first) => first + inner.saturating_sub(1),
            None => node.start.line,
        },
        Some(Style::Plain | Style::SingleQuoted | Style::DoubleQuoted) if inner <= 1 => {
            node.start.line
        }
        _ => node.start.line.saturating_sub(1).max(1),
    }
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
    fn duplicate_keys_are_errors_without_content() {
        let err = parse_one("a: 1\na: secret-value\n")
            .and_then(|n| n.to_json())
            .unwrap_err();
        assert_eq!(err.line, 2);
        assert!(!err.message.contains("secret-value"));
    }

    #[test]
    fn spans_and_paths() {
        let text = "a:\n  b:\n    - x: 1\n      t: |\n        one\n        two\n";
        let root = parse_one(text).unwrap();
        let path = [Seg::key("a"), Seg::key("b"), Seg::Index(0), Seg::key("t")];
        let y = root.at(&path).unwrap();
        assert_eq!(line_within_scalar(text, y, 2), 6);
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

    #[test]
    fn alias_bombs_are_bounded() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            text.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n", p = i - 1));
        }
        assert!(parse_stream(&text).is_err());
    }
}
