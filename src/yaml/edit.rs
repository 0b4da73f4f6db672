//! Minimal edits of YAML text: set one value or rewrite one string, changing only the lines
//! that must change, so comments, key order, quoting and blank lines survive byte for byte.
//!
//! Every edit is verified: the edited text is parsed again and its JSON must equal the
//! original JSON with exactly the intended change (all other documents of the stream
//! unchanged). An edit that cannot be verified is refused, and callers fall back to a coarser
//! but still correct rewrite.

use serde_json::Value;

use crate::yaml::{self, Kind, Node, Seg, Style, YamlError};

/// Why an edit was refused. Never contains document content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The text is not valid YAML.
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// The document index does not exist.
    #[error("document {0} does not exist")]
    NoDocument(usize),
    /// The structure cannot be edited in place (e.g. a key inside a scalar, an alias).
    #[error("cannot edit in place: {0}")]
    Unsupported(&'static str),
    /// The edited text did not read back as intended.
    #[error("the edited YAML does not read back as intended")]
    NotVerified,
}

/// One change to a document, in JSON terms.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Set the value at `path` (creating missing mappings on the way) to `value`. When the
    /// value is an object and the node is an existing mapping (or null), its members are set
    /// one by one (a merge): that is how a JSON Patch `add` that creates parents is written.
    Set {
        /// Where.
        path: Vec<Seg>,
        /// What.
        value: Value,
    },
}

/// Applies `change` to document `doc` of the YAML stream `text`, verified.
pub fn apply(text: &str, doc: usize, change: &Change) -> Result<String, EditError> {
    let mut docs = yaml::parse_stream(text)?;
    if docs.is_empty() && doc == 0 {
        // Empty or comment-only text: one null document at the end.
        docs.push(yaml::empty_doc_at_end(text));
    }
    let root = &docs.get(doc).ok_or(EditError::NoDocument(doc))?.root;
    let Change::Set { path, value } = change;
    // An object set onto an existing mapping is a merge: one member at a time.
    if let (Some(node), Value::Object(members)) = (root.at(path), value)
        && matches!(node.kind, Kind::Map(_))
    {
        let mut current = text.to_owned();
        for (k, v) in members {
            let mut child = path.clone();
            child.push(Seg::Key(k.clone()));
            current = apply(
                &current,
                doc,
                &Change::Set {
                    path: child,
                    value: v.clone(),
                },
            )?;
        }
        return Ok(current);
    }
    let before: Vec<Value> = docs
        .iter()
        .map(|d| d.root.to_json())
        .collect::<Result<_, _>>()?;
    let mut expected = before;
    if let Some(target) = expected.get_mut(doc) {
        json_set(target, path, value)?;
    }
    let style = Flavor { json: root.flow };
    let attempts: Vec<Result<String, EditError>> = match (root.at(path), value) {
        (Some(_), _) if root.alias_on_path(path) => {
            vec![Err(EditError::Unsupported(
                "a value reached through a YAML alias",
            ))]
        }
        (Some(existing), Value::String(s))
            if existing.scalar().is_some() && !existing.is_null() =>
        {
            vec![
                replace_string(text, existing, s, true),
                replace_string(text, existing, s, false),
            ]
        }
        _ => vec![set(text, root, path, value, style)],
    };
    let mut last = EditError::NotVerified;
    for attempt in attempts {
        match attempt {
            Ok(edited) if reads_as(&edited, &expected) => return Ok(edited),
            Ok(_) => last = EditError::NotVerified,
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Whether `text` parses to exactly `expected` (one JSON value per document).
fn reads_as(text: &str, expected: &[Value]) -> bool {
    let Ok(mut docs) = yaml::parse_stream(text) else {
        return false;
    };
    if docs.is_empty() {
        docs.push(yaml::empty_doc_at_end(text));
    }
    docs.len() == expected.len()
        && docs
            .iter()
            .zip(expected)
            .all(|(d, e)| d.root.to_json().as_ref() == Ok(e))
}

/// How new collections are written: JSON style in JSON documents, YAML style otherwise.
#[derive(Debug, Clone, Copy)]
struct Flavor {
    json: bool,
}

/// The JSON-level meaning of [`Change::Set`].
fn json_set(target: &mut Value, path: &[Seg], value: &Value) -> Result<(), EditError> {
    let Some((first, rest)) = path.split_first() else {
        merge_into(target, value);
        return Ok(());
    };
    match first {
        Seg::Key(k) => {
            // Below null or an empty list (an empty chart section), the key makes a mapping.
            if target.is_null() || target.as_array().is_some_and(Vec::is_empty) {
                *target = Value::Object(serde_json::Map::new());
            }
            let Value::Object(map) = target else {
                return Err(EditError::Unsupported(
                    "a key below a value that is not a mapping",
                ));
            };
            let child = map.entry(k.clone()).or_insert(Value::Null);
            if rest.is_empty() && !(value.is_object() && child.is_object()) {
                *child = value.clone();
                return Ok(());
            }
            json_set(child, rest, value)
        }
        Seg::Index(i) => {
            let child = target
                .as_array_mut()
                .and_then(|a| a.get_mut(*i))
                .ok_or(EditError::Unsupported("an index that does not exist"))?;
            if rest.is_empty() && !(value.is_object() && child.is_object()) {
                *child = value.clone();
                return Ok(());
            }
            json_set(child, rest, value)
        }
    }
}

fn merge_into(target: &mut Value, value: &Value) {
    match (target, value) {
        (Value::Object(t), Value::Object(v)) => {
            for (k, val) in v {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && val.is_object() => {
                        merge_into(existing, val)
                    }
                    _ => {
                        t.insert(k.clone(), val.clone());
                    }
                }
            }
        }
        (t, v) => *t = v.clone(),
    }
}

/// Sets `path` to `value` in the document whose root is `root` (unverified).
fn set(
    text: &str,
    root: &Node,
    path: &[Seg],
    value: &Value,
    flavor: Flavor,
) -> Result<String, EditError> {
    let (used, node, _) = root.deepest(path);
    let rest = &path[used..];
    // Aliases share the anchor's nodes: any alias on the way means the text is the anchor's.
    if root.alias_on_path(&path[..used]) {
        return Err(EditError::Unsupported(
            "a value reached through a YAML alias",
        ));
    }
    if rest.is_empty() {
        return match (&node.kind, value) {
            (Kind::Scalar { .. }, Value::Object(_)) if node.is_null() => {
                insert_under_null(text, root, node, path, &[], value, flavor)
            }
            (Kind::Scalar { style, .. }, _) if !matches!(style, Style::Literal | Style::Folded) => {
                if value.is_object() || value.is_array() {
                    return Err(EditError::Unsupported("replacing a scalar by a collection"));
                }
                Ok(splice(
                    text,
                    node.start.byte,
                    node.end.byte,
                    &render_flow(value, flavor),
                ))
            }
            _ => Err(EditError::Unsupported(
                "replacing a collection or a block scalar",
            )),
        };
    }
    let mut keys: Vec<&str> = Vec::with_capacity(rest.len());
    for seg in rest {
        match seg {
            Seg::Key(k) => keys.push(k),
            Seg::Index(_) => return Err(EditError::Unsupported("creating a sequence item")),
        }
    }
    match &node.kind {
        Kind::Map(entries) if node.flow => {
            let member = format!(
                "{}: {}",
                render_key(keys[0], flavor),
                render_flow(&nest(&keys[1..], value), flavor)
            );
            match entries.last() {
                Some((_, last)) => Ok(splice(
                    text,
                    last.end.byte,
                    last.end.byte,
                    &format!(", {member}"),
                )),
                None => {
                    // `{}` (possibly with blanks inside): replace the whole mapping.
                    Ok(splice(
                        text,
                        node.start.byte,
                        node.end.byte,
                        &format!("{{{member}}}"),
                    ))
                }
            }
        }
        Kind::Map(entries) => {
            let Some((first_key, _)) = entries.first() else {
                return Err(EditError::Unsupported("an empty block mapping"));
            };
            let indent = first_key.start.col;
            let step = indent_step(root);
            let at = after_line_of(text, node.end.byte);
            let eol = eol_of(text);
            let lines = render_block(&keys, value, indent, step, eol, flavor);
            Ok(insert_lines(text, at, &lines, eol))
        }
        Kind::Scalar { .. } if node.is_null() => {
            insert_under_null(text, root, node, &path[..used], &keys, value, flavor)
        }
        // `[]`: a chart section given as an empty list renders nothing; a key set below it
        // makes it the mapping that holds the key, written in its place.
        Kind::Seq(items) if node.flow && items.is_empty() && !node.aliased => {
            let member = format!(
                "{}: {}",
                render_key(keys[0], flavor),
                render_flow(&nest(&keys[1..], value), flavor)
            );
            Ok(splice(
                text,
                node.start.byte,
                node.end.byte,
                &format!("{{{member}}}"),
            ))
        }
        _ => Err(EditError::Unsupported(
            "a key below a value that is not a mapping",
        )),
    }
}

/// Writes `keys: value` below a key whose value is null (`key:` or `key: ~`).
fn insert_under_null(
    text: &str,
    root: &Node,
    node: &Node,
    node_path: &[Seg],
    keys: &[&str],
    value: &Value,
    flavor: Flavor,
) -> Result<String, EditError> {
    // The whole document is empty or null: write the mapping as the document.
    if node_path.is_empty() {
        let eol = eol_of(text);
        let (keys, value) = match (keys.split_first(), value) {
            (Some(_), _) => (keys.to_vec(), value.clone()),
            (None, Value::Object(_)) => (Vec::new(), value.clone()),
            (None, _) => return Err(EditError::Unsupported("a scalar document")),
        };
        let lines = if keys.is_empty() {
            render_members(
                value.as_object().map_or(&serde_json::Map::new(), |m| m),
                0,
                2,
                eol,
                flavor,
            )
        } else {
            render_block(&keys, &value, 0, 2, eol, flavor)
        };
        let body = lines.concat();
        if node.scalar().is_some_and(str::is_empty) && node.start.byte == node.end.byte {
            let mut out = text.to_owned();
            if !out.is_empty() && !out.ends_with('\n') {
                out.push_str(eol);
            }
            out.push_str(&body);
            return Ok(out);
        }
        return Ok(splice(
            text,
            node.start.byte,
            node.end.byte,
            body.trim_end_matches(['\r', '\n']),
        ));
    }
    let parent_path = &node_path[..node_path.len() - 1];
    let Some(parent) = root.at(parent_path) else {
        return Err(EditError::Unsupported("a null value without a parent"));
    };
    let full = nest(keys, value);
    if parent.flow || node.start.byte != node.end.byte {
        // `key: ~` / `key: null` / inside a flow mapping: write a flow mapping in its place.
        if !full.is_object() {
            return Err(EditError::Unsupported("a null value that is not a mapping"));
        }
        return Ok(splice(
            text,
            node.start.byte,
            node.end.byte,
            &render_flow(&full, flavor),
        ));
    }
    // `key:` with nothing after it: the members go on the following lines.
    let Some(Seg::Key(own)) = node_path.last() else {
        return Err(EditError::Unsupported("a null sequence item"));
    };
    let Some((key_node, _)) = parent.entry(own) else {
        return Err(EditError::Unsupported("a null value without its key"));
    };
    let step = indent_step(root);
    let indent = key_node.start.col + step;
    let eol = eol_of(text);
    let lines = match (&full, keys.is_empty()) {
        (Value::Object(m), true) => render_members(m, indent, step, eol, flavor),
        _ => render_block(keys, value, indent, step, eol, flavor),
    };
    let at = after_line_of(text, node.end.byte.max(key_node.end.byte));
    Ok(insert_lines(text, at, &lines, eol))
}

/// Replaces the string scalar `node` by `new_value`, rewriting only changed lines when the
/// scalar is a literal block (`|`), else only the scalar itself.
fn replace_string(
    text: &str,
    node: &Node,
    new_value: &str,
    by_lines: bool,
) -> Result<String, EditError> {
    let old = node.scalar().unwrap_or_default();
    if old == new_value {
        return Ok(text.to_owned());
    }
    match node.style() {
        Some(Style::Literal) if by_lines => replace_literal_lines(text, node, old, new_value)
            .ok_or(EditError::Unsupported(
                "a literal block whose lines are not plainly indented",
            )),
        Some(Style::Literal) => replace_block_with_quoted(text, node, new_value),
        Some(Style::Folded) => replace_block_with_quoted(text, node, new_value),
        Some(Style::Plain) if plain_safe(new_value) => {
            Ok(splice(text, node.start.byte, node.end.byte, new_value))
        }
        _ => Ok(splice(
            text,
            node.start.byte,
            node.end.byte,
            &json_string(new_value),
        )),
    }
}

/// Rewrites only the changed lines of a literal block scalar.
fn replace_literal_lines(text: &str, node: &Node, old: &str, new_value: &str) -> Option<String> {
    // Block indentation: the column of the first content character of the first non-empty
    // content line; content lines are the `old.lines()` lines starting at the first one.
    let first_line = yaml::line_within_scalar(text, node, 1);
    let indent = node.start.col;
    let starts = line_starts(text);
    let first_byte = *starts.get(first_line.checked_sub(1)?)?;
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new_value.lines().collect();
    // The file bytes of each old content line (with its line ending).
    let mut file_lines: Vec<&str> = Vec::with_capacity(old_lines.len());
    let mut cursor = first_byte;
    for _ in &old_lines {
        let rest = text.get(cursor..)?;
        let len = rest.find('\n').map_or(rest.len(), |i| i + 1);
        file_lines.push(rest.get(..len)?);
        cursor += len;
    }
    let eol = if file_lines.iter().any(|l| l.ends_with("\r\n")) {
        "\r\n"
    } else {
        "\n"
    };
    // Check the mapping: each file line is indent + old line (or blank for an empty line).
    for (f, o) in file_lines.iter().zip(&old_lines) {
        let body = f.trim_end_matches(['\n', '\r']);
        let ok = if o.is_empty() {
            body.chars().all(|c| c == ' ')
        } else {
            body.len() >= indent
                && body.get(..indent)?.chars().all(|c| c == ' ')
                && body.get(indent..) == Some(*o)
        };
        if !ok {
            return None;
        }
    }
    let pad = " ".repeat(indent);
    let mut content = String::new();
    for step in align(&old_lines, &new_lines) {
        match step {
            Step::Keep(i) => content.push_str(file_lines.get(i)?),
            Step::Insert(j) => {
                let l = new_lines.get(j)?;
                // Raw, such a character would not read back (see `needs_yaml_escape`), and a
                // line of only blanks would be read as an empty line (or, with a tab, refused
                // by go-yaml as indentation): the caller writes a quoted string instead.
                if l.chars().any(|c| needs_yaml_escape(c) || c == '\r')
                    || (!l.is_empty() && l.chars().all(|c| c == ' ' || c == '\t'))
                {
                    return None;
                }
                if !l.is_empty() {
                    content.push_str(&pad);
                    content.push_str(l);
                }
                content.push_str(eol);
            }
        }
    }
    // The last old line may lack a line ending (end of text): keep that shape.
    if file_lines.last().is_some_and(|l| !l.ends_with('\n')) && content.ends_with(eol) {
        content.truncate(content.len() - eol.len());
    }
    let mut out = String::with_capacity(text.len() + new_value.len());
    out.push_str(text.get(..first_byte)?);
    out.push_str(&content);
    out.push_str(text.get(cursor..)?);
    Some(out)
}

/// One step of a line alignment: keep old line `i`, or insert new line `j` (old lines not
/// kept are deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Keep(usize),
    Insert(usize),
}

/// Aligns two line lists: common prefix and suffix, and a longest common subsequence of the
/// middle (or, when the middle is too large for that, the middle replaced as a whole).
fn align(old: &[&str], new: &[&str]) -> Vec<Step> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (om, nm) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );
    let mut steps: Vec<Step> = (0..prefix).map(Step::Keep).collect();
    if om.len().saturating_mul(nm.len()) <= 1 << 20 {
        // lcs[i][j] = LCS length of om[i..] and nm[j..].
        let w = nm.len() + 1;
        let mut lcs = vec![0u32; (om.len() + 1) * w];
        for i in (0..om.len()).rev() {
            for j in (0..nm.len()).rev() {
                lcs[i * w + j] = if om[i] == nm[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < om.len() || j < nm.len() {
            if i < om.len() && j < nm.len() && om[i] == nm[j] {
                steps.push(Step::Keep(prefix + i));
                i += 1;
                j += 1;
            } else if j < nm.len() && (i == om.len() || lcs[i * w + j + 1] >= lcs[(i + 1) * w + j])
            {
                steps.push(Step::Insert(prefix + j));
                j += 1;
            } else {
                i += 1;
            }
        }
    } else {
        steps.extend((0..nm.len()).map(|j| Step::Insert(prefix + j)));
    }
    steps.extend((0..suffix).map(|k| Step::Keep(old.len() - suffix + k)));
    steps
}

/// Replaces a block scalar (header included) by a double-quoted string on the header's line.
fn replace_block_with_quoted(
    text: &str,
    node: &Node,
    new_value: &str,
) -> Result<String, EditError> {
    let before = text.get(..node.start.byte).unwrap_or_default();
    let header = before
        .rfind(['|', '>'])
        .ok_or(EditError::Unsupported("a block scalar without its header"))?;
    let content_end = after_line_of(text, node.end.byte);
    let eol = eol_of(text);
    let replacement = format!("{}{eol}", json_string(new_value));
    Ok(splice(text, header, content_end, &replacement))
}

fn splice(text: &str, start: usize, end: usize, with: &str) -> String {
    let mut out = String::with_capacity(text.len() + with.len());
    out.push_str(text.get(..start).unwrap_or(text));
    out.push_str(with);
    out.push_str(text.get(end..).unwrap_or_default());
    out
}

/// The byte offset just after the line that holds the last non-blank character before `at`.
fn after_line_of(text: &str, at: usize) -> usize {
    let head = text.get(..at.min(text.len())).unwrap_or(text);
    let last = head.trim_end_matches([' ', '\t', '\r', '\n']).len();
    match text.get(last..).and_then(|rest| rest.find('\n')) {
        Some(i) => last + i + 1,
        None => text.len(),
    }
}

fn insert_lines(text: &str, at: usize, lines: &[String], eol: &str) -> String {
    let mut insert = String::new();
    let unterminated = at == text.len() && !text.is_empty() && !text.ends_with('\n');
    if unterminated {
        insert.push_str(eol);
    }
    for l in lines {
        insert.push_str(l);
    }
    // A text without a final line break keeps that shape (a `|-` block stays representable).
    if unterminated && insert.ends_with(eol) {
        insert.truncate(insert.len() - eol.len());
    }
    splice(text, at, at, &insert)
}

fn line_starts(text: &str) -> Vec<usize> {
    let mut starts = vec![0];
    starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
    starts
}

fn eol_of(text: &str) -> &'static str {
    if text.contains("\r\n") { "\r\n" } else { "\n" }
}

/// The indentation step of the document: the first nested block mapping's offset, else 2.
fn indent_step(root: &Node) -> usize {
    fn find(node: &Node) -> Option<usize> {
        match &node.kind {
            Kind::Map(entries) if !node.flow => {
                for (k, v) in entries.iter() {
                    if let Kind::Map(inner) = &v.kind
                        && !v.flow
                        && let Some((ik, _)) = inner.first()
                        && ik.start.col > k.start.col
                        && ik.start.line > k.start.line
                    {
                        return Some(ik.start.col - k.start.col);
                    }
                    if let Some(s) = find(v) {
                        return Some(s);
                    }
                }
                None
            }
            Kind::Seq(items) => items.iter().find_map(find),
            _ => None,
        }
    }
    find(root).filter(|s| (1..=8).contains(s)).unwrap_or(2)
}

/// `{k1: {k2: value}}` for `keys = [k1, k2]`.
fn nest(keys: &[&str], value: &Value) -> Value {
    keys.iter().rev().fold(value.clone(), |acc, k| {
        let mut m = serde_json::Map::new();
        m.insert((*k).to_owned(), acc);
        Value::Object(m)
    })
}

/// Block lines for `k1:\n  k2: value`, starting at `indent`.
fn render_block(
    keys: &[&str],
    value: &Value,
    indent: usize,
    step: usize,
    eol: &str,
    flavor: Flavor,
) -> Vec<String> {
    let mut lines = Vec::new();
    for (depth, k) in keys.iter().enumerate() {
        let pad = " ".repeat(indent + depth * step);
        let last = depth + 1 == keys.len();
        if !last {
            lines.push(format!("{pad}{}:{eol}", render_key(k, flavor)));
            continue;
        }
        match value {
            Value::Object(m) if !m.is_empty() => {
                lines.push(format!("{pad}{}:{eol}", render_key(k, flavor)));
                lines.extend(render_members(
                    m,
                    indent + (depth + 1) * step,
                    step,
                    eol,
                    flavor,
                ));
            }
            other => lines.push(format!(
                "{pad}{}: {}{eol}",
                render_key(k, flavor),
                render_flow(other, flavor)
            )),
        }
    }
    lines
}

fn render_members(
    members: &serde_json::Map<String, Value>,
    indent: usize,
    step: usize,
    eol: &str,
    flavor: Flavor,
) -> Vec<String> {
    let mut lines = Vec::new();
    for (k, v) in members {
        lines.extend(render_block(&[k.as_str()], v, indent, step, eol, flavor));
    }
    lines
}

/// A key, plain when that reads back as the same string (YAML documents), else quoted.
fn render_key(k: &str, flavor: Flavor) -> String {
    if !flavor.json && plain_safe(k) {
        k.to_owned()
    } else {
        json_string(k)
    }
}

/// A value in flow style: JSON in JSON documents; plain keys and strings where safe otherwise.
fn render_flow(value: &Value, flavor: Flavor) -> String {
    match value {
        Value::String(s) if !flavor.json && plain_safe(s) => s.clone(),
        Value::String(s) => json_string(s),
        Value::Object(m) => {
            let members: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", render_key(k, flavor), render_flow(v, flavor)))
                .collect();
            format!("{{{}}}", members.join(", "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|v| render_flow(v, flavor)).collect();
            format!("[{}]", items.join(", "))
        }
        other => other.to_string(),
    }
}

fn json_string(s: &str) -> String {
    let json = Value::String(s.to_owned()).to_string();
    if !json.chars().any(needs_yaml_escape) {
        return json;
    }
    // JSON leaves these raw; in a YAML double-quoted string go-yaml (kubectl) reads NEL, LS
    // and PS as line breaks (folded to a space or kept as a break) and refuses the other
    // non-printable characters, so each is written as an escape both read back exactly.
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        match c {
            '\u{85}' => out.push_str("\\N"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if needs_yaml_escape(c) => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// Characters a YAML double-quoted string (or a literal block) must not hold raw for go-yaml
/// to read them back as themselves: the line breaks NEL, LS and PS, and what is outside
/// YAML's printable set (`c-printable`: DEL, C1 controls, U+FEFF, U+FFFE, U+FFFF). C0
/// controls other than tab and line breaks are escaped by JSON already.
fn needs_yaml_escape(c: char) -> bool {
    matches!(
        c,
        '\u{7F}'..='\u{9F}' | '\u{2028}' | '\u{2029}' | '\u{FEFF}' | '\u{FFFE}' | '\u{FFFF}'
    )
}

/// Whether `s` can be written as a plain scalar that reads back as the same string.
fn plain_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    let safe_chars = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '+' | '='));
    if !safe_chars || !(first.is_ascii_alphanumeric() || first == '/' || first == '.') {
        return false;
    }
    matches!(
        yaml::parse_one(s).and_then(|n| n.to_json()),
        Ok(Value::String(ref back)) if back == s
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set_path(text: &str, path: &[&str], value: Value) -> Result<String, EditError> {
        let path = path.iter().map(|k| Seg::key(k)).collect();
        apply(text, 0, &Change::Set { path, value })
    }

    const VALUES: &str = "# occm values\ncloudConfig:\n  global:\n    auth-url: https://keystone:5000/v3  # keystone\n  loadBalancer:\n    subnet-id: abc # the subnet\n    # a comment that stays\n\n  metadata:\n    search-order: configDrive\ncontrollerExtraArgs: |-\n  - --v=2\n";

    #[test]
    fn inserts_one_line_at_the_section_indentation() {
        let out = set_path(
            VALUES,
            &[
                "cloudConfig",
                "loadBalancer",
                "provider-requires-serial-api-calls",
            ],
            json!(true),
        )
        .unwrap();
        let expected = VALUES.replace(
            "subnet-id: abc # the subnet\n",
            "subnet-id: abc # the subnet\n    provider-requires-serial-api-calls: true\n",
        );
        assert_eq!(out, expected);
    }

    #[test]
    fn changes_only_the_value_of_an_existing_key() {
        let text = "cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: false   # no!\n";
        let out = set_path(
            text,
            &[
                "cloudConfig",
                "loadBalancer",
                "provider-requires-serial-api-calls",
            ],
            json!(true),
        )
        .unwrap();
        assert_eq!(
            out,
            "cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: true   # no!\n"
        );
    }

    #[test]
    fn creates_missing_parents_with_the_document_indentation() {
        let text = "image:\n    tag: v1\ncloudConfig:\n    global:\n        region: r\n";
        let out = set_path(text, &["cloudConfig", "loadBalancer", "k"], json!(true)).unwrap();
        assert_eq!(out, format!("{text}    loadBalancer:\n        k: true\n"));
        let out = set_path(
            "image: {}\n",
            &["cloudConfig", "loadBalancer", "k"],
            json!(true),
        )
        .unwrap();
        assert_eq!(
            out,
            "image: {}\ncloudConfig:\n  loadBalancer:\n    k: true\n"
        );
    }

    #[test]
    fn a_key_below_an_empty_list_replaces_it_by_a_mapping() {
        let text = "cloudConfig:\n  loadBalancer: [] # none\n  route: []\n";
        let out = apply(
            text,
            0,
            &Change::Set {
                path: vec![
                    Seg::key("cloudConfig"),
                    Seg::key("loadBalancer"),
                    Seg::key("provider-requires-serial-api-calls"),
                ],
                value: json!(true),
            },
        )
        .expect("edits");
        assert_eq!(
            out,
            "cloudConfig:\n  loadBalancer: {provider-requires-serial-api-calls: true} # none\n  route: []\n"
        );
        // A list with items is not a place for a key.
        let err = apply(
            "a: [1]\n",
            0,
            &Change::Set {
                path: vec![Seg::key("a"), Seg::key("b")],
                value: json!(true),
            },
        );
        assert!(err.is_err());
    }

    #[test]
    fn null_sections_like_the_chart_defaults() {
        let text = "cloudConfig:\n  global:\n  loadBalancer:\n  route:\n";
        let out = set_path(text, &["cloudConfig", "loadBalancer", "k"], json!(true)).unwrap();
        assert_eq!(
            out,
            "cloudConfig:\n  global:\n  loadBalancer:\n    k: true\n  route:\n"
        );
        let out = set_path("a:\n  lb: ~ # x\n", &["a", "lb", "k"], json!(true)).unwrap();
        assert_eq!(out, "a:\n  lb: {k: true} # x\n");
    }

    #[test]
    fn flow_and_json_documents() {
        let text =
            "{\n  \"cloudConfig\": {\n    \"loadBalancer\": {\"subnet-id\": \"x\"}\n  }\n}\n";
        let out = set_path(text, &["cloudConfig", "loadBalancer", "k"], json!(true)).unwrap();
        assert_eq!(out, text.replace("\"x\"}", "\"x\", \"k\": true}"));
        let out = set_path(text, &["cloudConfig", "global", "region"], json!("r")).unwrap();
        assert!(serde_json::from_str::<Value>(&out).is_ok(), "{out}");
    }

    #[test]
    fn a_text_without_final_line_break_keeps_that_shape() {
        assert_eq!(
            set_path("a:\n  x: 1", &["a", "z"], json!(true)).unwrap(),
            "a:\n  x: 1\n  z: true"
        );
        let file = "spec:\n  valuesContent: |-\n    a:\n      x: 1\n";
        let out = set_path(
            file,
            &["spec", "valuesContent"],
            json!("a:\n  x: 1\n  z: true"),
        )
        .unwrap();
        assert_eq!(
            out,
            "spec:\n  valuesContent: |-\n    a:\n      x: 1\n      z: true\n"
        );
    }

    #[test]
    fn empty_and_comment_only_documents() {
        assert_eq!(
            set_path("", &["a", "b"], json!(true)).unwrap(),
            "a:\n  b: true\n"
        );
        assert_eq!(
            set_path("# hi\n", &["a"], json!(1)).unwrap(),
            "# hi\na: 1\n"
        );
    }

    #[test]
    fn literal_block_string_edit_keeps_other_lines() {
        let text = "data:\n  config: |\n    [Global]\n    region = r   ; keep\n\n    [LoadBalancer]\n    subnet-id = s\n# tail\n";
        let new_ini = "[Global]\nregion = r   ; keep\n\n[LoadBalancer]\nsubnet-id = s\nprovider-requires-serial-api-calls = true\n";
        let out = set_path(text, &["data", "config"], json!(new_ini)).unwrap();
        assert_eq!(
            out,
            text.replace(
                "subnet-id = s\n",
                "subnet-id = s\n    provider-requires-serial-api-calls = true\n"
            )
        );
    }

    #[test]
    fn quoted_and_plain_string_edits() {
        let text = "data:\n  c: \"[LoadBalancer]\\nx = 1\\n\"\n  b64: YQ==\n";
        let out = set_path(text, &["data", "c"], json!("[LoadBalancer]\nx = 2\n")).unwrap();
        assert_eq!(
            out,
            "data:\n  c: \"[LoadBalancer]\\nx = 2\\n\"\n  b64: YQ==\n"
        );
        let out = set_path(text, &["data", "b64"], json!("Yg==")).unwrap();
        assert!(out.ends_with("  b64: Yg==\n"));
    }

    #[test]
    fn sequence_items_and_crlf() {
        let text = "spec:\r\n  sources:\r\n    - chart: a\r\n      helm:\r\n        valuesObject:\r\n          x: 1\r\n";
        let out = apply(
            text,
            0,
            &Change::Set {
                path: vec![
                    Seg::key("spec"),
                    Seg::key("sources"),
                    Seg::Index(0),
                    Seg::key("helm"),
                    Seg::key("valuesObject"),
                    Seg::key("z"),
                ],
                value: json!(true),
            },
        )
        .unwrap();
        assert_eq!(out, format!("{text}          z: true\r\n"));
        // `y` is a YAML 1.1 boolean, so a key `y` must be quoted to stay a string.
        assert!(
            set_path("a: 1\n", &["y"], json!(1))
                .unwrap()
                .ends_with("\"y\": 1\n")
        );
    }

    #[test]
    fn line_alignment() {
        let old = ["a", "b", "c", "d"];
        let new = ["a", "x", "b", "c", "y", "d"];
        assert_eq!(
            align(&old, &new),
            vec![
                Step::Keep(0),
                Step::Insert(1),
                Step::Keep(1),
                Step::Keep(2),
                Step::Insert(4),
                Step::Keep(3)
            ]
        );
        assert_eq!(
            align(&["a", "b"], &["a", "c"]),
            vec![Step::Keep(0), Step::Insert(1)]
        );
        assert_eq!(align(&[], &["a"]), vec![Step::Insert(0)]);
        assert_eq!(align(&["a"], &[]), vec![]);
    }

    #[test]
    fn aliases_are_refused() {
        let text = "a: &x {b: 1, s: old}\nc: *x\n";
        assert!(set_path(text, &["c", "d"], json!(1)).is_err());
        // Below the alias: the nodes are the anchor's (shared), still refused.
        assert!(set_path(text, &["c", "b"], json!(2)).is_err());
        assert!(set_path(text, &["c", "s"], json!("new")).is_err());
        // The anchor itself changes the alias too, which verification refuses.
        assert!(set_path(text, &["a", "b"], json!(2)).is_err());
    }

    #[test]
    fn line_breaks_and_non_printables_are_escaped_and_read_back() {
        for value in [
            "a\u{85}b",
            "a\u{2028}b\u{2029}c",
            "del\u{7F} c1\u{9B} bom\u{FEFF}",
            "tab\tnl\n",
        ] {
            let text = "k: \"old\"\n";
            let out = set_path(text, &["k"], json!(value)).expect("edit verified");
            assert!(
                !out.contains(['\u{85}', '\u{2028}', '\u{2029}', '\u{7F}', '\u{FEFF}']),
                "{out:?}"
            );
            let back = yaml::parse_one(&out).unwrap().to_json().unwrap();
            assert_eq!(back["k"], json!(value), "{out:?}");
        }
        // A literal block gets no raw NEL: the value is written as a quoted string instead.
        let text = "k: |\n  one\n";
        let out = set_path(text, &["k"], json!("one\ntwo\u{85}three\n")).expect("verified");
        assert!(!out.contains('\u{85}'), "{out:?}");
        let back = yaml::parse_one(&out).unwrap().to_json().unwrap();
        assert_eq!(back["k"], json!("one\ntwo\u{85}three\n"));
    }

    #[test]
    fn documents_with_low_quoted_continuations_are_edited_in_place() {
        let text = "a:\n  description: 'Foo\n  bar'\n  count: 1\n";
        let out = set_path(text, &["a", "count"], json!(2)).expect("verified");
        assert_eq!(out, "a:\n  description: 'Foo\n  bar'\n  count: 2\n");
    }
}
