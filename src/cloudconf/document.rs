//! The lossless document: query and edit a gcfg text without touching bytes it does not need to.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use super::scanner::{self, Lines, RawEntry, RawHeader};
use super::unicode::{FoldName, is_identifier};

/// A gcfg syntax error, positioned like gcfg reports it.
///
/// The message names what is wrong, never the text of a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in bytes like gcfg (Go `token.Position`) does.
    pub column: usize,
    /// gcfg's message, e.g. `illegal character U+005F` or `expected section header`.
    pub message: String,
}

/// A parsed gcfg text that keeps every byte of its input.
#[derive(Clone)]
pub struct Document {
    text: String,
    lines: Lines,
    headers: Vec<RawHeader>,
    entries: Vec<RawEntry>,
}

/// One variable (`key = value` or a blank `key`) of a [`Document`].
#[derive(Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Section name as written in the header that this variable is under.
    pub section: &'a str,
    /// Decoded subsection name of that header, if it has one.
    pub subsection: Option<&'a str>,
    /// Variable name as written.
    pub key: &'a str,
    /// gcfg-decoded value: quotes removed, escapes applied, continuation lines joined, blanks
    /// trimmed as gcfg does. `None` for a blank variable (a name without `=`).
    pub value: Option<String>,
    /// 1-based line of the variable name.
    pub line: usize,
    /// An unquoted `;` or `#` directly follows the value text with no blank in between
    /// (`password=ab#cd`), or the value is empty and the rest of the line is a comment
    /// (`password = #secret`). gcfg treats the rest as a comment, so the value is truncated —
    /// likely unintended.
    pub has_truncating_comment: bool,
    /// 1-based byte column of the variable name.
    pub column: usize,
    /// 1-based line on which the variable ends (differs from `line` with continuation lines).
    pub last_line: usize,
    /// 1-based line of the section header this variable is under.
    pub section_line: usize,
    /// The value exactly as written (quotes, escapes and continuations included, trailing blanks
    /// and comment excluded); `None` for a blank variable.
    pub raw_value: Option<&'a str>,
}

impl fmt::Debug for Entry<'_> {
    /// Values may be credentials: `Debug` shows only whether there is one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("section", &self.section)
            .field("subsection", &self.subsection)
            .field("key", &self.key)
            .field("value", &self.value.as_ref().map(|_| "<redacted>"))
            .field("line", &self.line)
            .field("has_truncating_comment", &self.has_truncating_comment)
            .finish_non_exhaustive()
    }
}

/// The fields of a variable that whole-document passes read ([`Document::entry_refs`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryRef<'a> {
    /// Index of its section header in [`Document::sections`] order.
    pub(crate) header: usize,
    /// Variable name as written.
    pub(crate) key: &'a str,
    /// [`FoldName::may_match`]'s summary of `key` (`None`: not ASCII).
    pub(crate) key_tag: Option<u64>,
    /// gcfg-decoded value, as [`Entry::value`].
    pub(crate) value: Option<&'a str>,
}

/// A section header (`[name]` or `[name "subsection"]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionHeader<'a> {
    /// Section name as written.
    pub name: &'a str,
    /// Decoded subsection name (escapes `\\` and `\"` applied).
    pub subsection: Option<&'a str>,
    /// 1-based line of the header.
    pub line: usize,
}

/// What [`Document::set`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditKind {
    /// A line was inserted into an existing section.
    Inserted,
    /// The value of an existing variable was rewritten (or already had the requested value).
    Replaced,
    /// A new section with the variable was appended at the end.
    SectionAppended,
}

/// The outcome of [`Document::set`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EditSummary {
    /// How the variable was set.
    pub kind: EditKind,
    /// 1-based line of the variable after the edit (0 if the edit was refused, see
    /// [`Document::set`]).
    pub line: usize,
    /// False if the text is unchanged (the value was already set, or the edit was refused).
    pub changed: bool,
}

/// Why [`Document::try_set`] refused an edit. Never contains the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The section name is not a gcfg identifier.
    #[error("section name is not a gcfg identifier")]
    InvalidSection,
    /// The key is not a gcfg identifier.
    #[error("key is not a gcfg identifier")]
    InvalidKey,
    /// The value contains a carriage return or NUL, which gcfg cannot represent.
    #[error("value contains a carriage return or NUL, which gcfg cannot represent")]
    UnrepresentableValue,
    /// The edited text did not read back as intended (should not happen).
    #[error("the edited text does not read back with the requested value")]
    NotVerified,
}

impl fmt::Debug for Document {
    /// The text may hold credentials: `Debug` shows only its shape.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Document")
            .field("bytes", &self.text.len())
            .field("sections", &self.headers.len())
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl fmt::Display for Document {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A value as it will be written: bare if gcfg reads it back unchanged, else quoted.
fn encode_value(value: &str) -> Option<String> {
    if value.contains(['\r', '\0']) {
        return None;
    }
    let bare = !value.contains(['"', '\\', ';', '#', '\n'])
        && !value.starts_with([' ', '\t'])
        && !value.ends_with([' ', '\t']);
    if bare {
        return Some(value.to_owned());
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            _ => out.push(c),
        }
    }
    out.push('"');
    Some(out)
}

/// Where the byte at `at` of a text is after the bytes of `range` are replaced by `with_len`
/// bytes: moved by the change in length if it is at or after the range's end, else in place.
fn splice_shift(range: &Range<usize>, with_len: usize, at: usize) -> usize {
    if at >= range.end {
        at + with_len - (range.end - range.start)
    } else {
        at
    }
}

/// A planned text edit: replace `range` with `with`.
struct Splice {
    range: Range<usize>,
    with: String,
    kind: EditKind,
    /// The edit changes one statement of the text, whose first line starts at `line_start`
    /// (a fresh line: the previous statement ended before it) and which is entry `entry` of
    /// the document before the edit (`Err(i)`: a new entry, inserted before entry `i`).
    /// `None`: any other edit, verified by reading the whole edited text again.
    statement: Option<(usize, Result<usize, usize>)>,
}

impl Document {
    /// Parses gcfg text.
    ///
    /// Rejects exactly what gcfg v1.2.3 (`ReadInto` on a reader, as the CCM uses) rejects at the
    /// syntax level — illegal characters (including `_` or `.` in names, a leading UTF-8 BOM,
    /// NUL), unterminated quotes, bad escapes, continuation inside quotes, a variable before the
    /// first section header, an empty subsection `[s ""]`, … — with gcfg's line and column of
    /// the first error.
    pub fn parse(text: &str) -> Result<Document, ParseError> {
        let lines = Lines::new(text);
        match scanner::parse(text) {
            Ok(raw) => Ok(Document {
                text: text.to_owned(),
                lines,
                headers: raw.headers,
                entries: raw.entries,
            }),
            Err(e) => {
                let (line, column) = lines.line_col(e.offset);
                Err(ParseError {
                    line,
                    column,
                    message: e.message,
                })
            }
        }
    }

    /// What the statement loop recorded, for tests that compare an edited document with a
    /// whole reparse of its text.
    #[cfg(test)]
    pub(super) fn statements(&self) -> (&[RawHeader], &[RawEntry], &Lines) {
        (&self.headers, &self.entries, &self.lines)
    }

    /// The text, byte-identical to the parsed input plus any edits.
    pub fn to_text(&self) -> String {
        self.text.clone()
    }

    /// The text as a borrowed string.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn slice(&self, r: &Range<usize>) -> &str {
        self.text.get(r.clone()).unwrap_or_default()
    }

    fn header_view<'a>(&'a self, h: &'a RawHeader) -> SectionHeader<'a> {
        SectionHeader {
            name: self.slice(&h.name),
            subsection: h.sub.as_deref(),
            line: self.lines.line(h.start),
        }
    }

    fn entry_view<'a>(&'a self, e: &'a RawEntry) -> Entry<'a> {
        let header = self.headers.get(e.header);
        let (line, column) = self.lines.line_col(e.key.start);
        let has_truncating_comment = self.truncating_comment(e);
        Entry {
            section: header.map(|h| self.slice(&h.name)).unwrap_or_default(),
            subsection: header.and_then(|h| h.sub.as_deref()),
            key: self.slice(&e.key),
            value: e.value(&self.text).map(str::to_owned),
            line,
            has_truncating_comment,
            column,
            last_line: self.lines.line(e.stop),
            section_line: header.map(|h| self.lines.line(h.start)).unwrap_or(0),
            raw_value: e.value_raw.as_ref().map(|r| self.slice(r)),
        }
    }

    /// See [`Entry::has_truncating_comment`].
    fn truncating_comment(&self, e: &RawEntry) -> bool {
        match (&e.value_raw, e.value_stop) {
            (Some(raw), Some(stop)) => {
                let comment_follows = matches!(self.text.as_bytes().get(stop), Some(b';' | b'#'));
                comment_follows && (raw.is_empty() || raw.end == stop)
            }
            _ => false,
        }
    }

    /// All variables in file order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        self.entries.iter().map(|e| self.entry_view(e))
    }

    /// Header index, key (and its tag) and decoded value of every variable in file order
    /// (the index of a variable in this order is the one [`Document::entry`] takes): for
    /// passes that read a few fields of every variable, without building a view of each one
    /// (run on every review).
    pub(crate) fn entry_refs(&self) -> impl Iterator<Item = EntryRef<'_>> {
        self.entries.iter().map(|e| self.entry_ref(e))
    }

    #[inline]
    fn entry_ref<'a>(&'a self, e: &'a RawEntry) -> EntryRef<'a> {
        EntryRef {
            header: e.header,
            key: self.slice(&e.key),
            key_tag: e.key_tag,
            value: e.value(&self.text),
        }
    }

    /// [`Document::entry_refs`] with their indexes, of the variables under a header named
    /// `section` (compared as gcfg does; any subsection): whether a header is one is decided
    /// once for all of its variables.
    pub(crate) fn entry_refs_in<'d>(
        &'d self,
        section: &'d str,
    ) -> impl Iterator<Item = (usize, EntryRef<'d>)> + 'd {
        let section = FoldName::new(section);
        let mut last: Option<(usize, bool)> = None;
        self.entries
            .iter()
            .enumerate()
            .filter(move |(_, e)| match last {
                Some((header, inside)) if header == e.header => inside,
                _ => {
                    let inside = self
                        .headers
                        .get(e.header)
                        .is_some_and(|h| section.matches(self.slice(&h.name)));
                    last = Some((e.header, inside));
                    inside
                }
            })
            .map(|(at, e)| (at, self.entry_ref(e)))
    }

    /// The variable at `index` in file order, as [`Document::entries`] yields it.
    pub(crate) fn entry(&self, index: usize) -> Option<Entry<'_>> {
        self.entries.get(index).map(|e| self.entry_view(e))
    }

    /// The variables whose value gcfg cuts at a comment character
    /// ([`Entry::has_truncating_comment`]), in file order: like filtering [`Document::entries`],
    /// without building a view of every other variable (checked on every review).
    pub fn entries_with_truncating_comment(&self) -> impl Iterator<Item = Entry<'_>> {
        self.entries
            .iter()
            .filter(|e| self.truncating_comment(e))
            .map(|e| self.entry_view(e))
    }

    /// The 1-based lines of the variables whose gcfg-decoded value satisfies `wanted`, in file
    /// order: like filtering [`Document::entries`] on [`Entry::value`], without copying every
    /// value (checked on every review).
    pub fn lines_of_values<'d>(
        &'d self,
        wanted: impl Fn(&str) -> bool + 'd,
    ) -> impl Iterator<Item = usize> + 'd {
        self.entries
            .iter()
            .filter(move |e| e.value(&self.text).is_some_and(&wanted))
            .map(|e| self.lines.line(e.key.start))
    }

    /// Section headers in file order.
    pub fn sections(&self) -> impl Iterator<Item = SectionHeader<'_>> {
        self.headers.iter().map(|h| self.header_view(h))
    }

    fn header_matches(
        &self,
        h: &RawHeader,
        section: FoldName<'_>,
        subsection: Option<&str>,
    ) -> bool {
        section.matches(self.slice(&h.name)) && h.sub.as_deref() == subsection
    }

    /// Whether variable `e` is `key` in a header `section` with subsection `sub`, as gcfg
    /// compares names.
    #[inline]
    fn entry_matches(
        &self,
        e: &RawEntry,
        section: FoldName<'_>,
        sub: Option<&str>,
        key: FoldName<'_>,
    ) -> bool {
        // The key's tag first, in the caller's loop: a lookup compares one key against every
        // variable, and the tag tells most of them apart without reading a name. Then the key,
        // which differs in its first characters where the section (the same for most
        // variables) is equal to its end. All compares are pure, so the order changes only the
        // cost.
        key.may_match(e.key_tag) && self.names_match(e, &section, sub, &key)
    }

    /// [`Document::entry_matches`] past the tag.
    fn names_match(
        &self,
        e: &RawEntry,
        section: &FoldName<'_>,
        sub: Option<&str>,
        key: &FoldName<'_>,
    ) -> bool {
        key.matches(self.slice(&e.key))
            && self
                .headers
                .get(e.header)
                .is_some_and(|h| self.header_matches(h, *section, sub))
    }

    fn effective_index(&self, section: &str, sub: Option<&str>, key: &str) -> Option<usize> {
        let (section, key) = (FoldName::new(section), FoldName::new(key));
        self.last_match(&self.entries, section, sub, key)
    }

    /// Index in `entries` (variables of this document) of the last one that is `key` in a
    /// header `section` with subsection `sub`: [`Document::entry_matches`] from the end. The
    /// tags are compared in a loop of their own, which stays in registers; names are read only
    /// for the variables whose tag matches.
    fn last_match(
        &self,
        entries: &[RawEntry],
        section: FoldName<'_>,
        sub: Option<&str>,
        key: FoldName<'_>,
    ) -> Option<usize> {
        let mut end = entries.len();
        while let Some(candidate) = entries
            .get(..end)?
            .iter()
            .rposition(|e| key.may_match(e.key_tag))
        {
            if entries
                .get(candidate)
                .is_some_and(|e| self.names_match(e, &section, sub, &key))
            {
                return Some(candidate);
            }
            end = candidate;
        }
        None
    }

    /// gcfg's effective entry for a single-valued key: the last occurrence wins. Section and key
    /// are compared like Go's `strings.EqualFold`; `subsection: None` means the plain section;
    /// subsection names are compared exactly (they are case-sensitive in gcfg).
    pub fn effective(
        &self,
        section: &str,
        subsection: Option<&str>,
        key: &str,
    ) -> Option<Entry<'_>> {
        self.effective_index(section, subsection, key)
            .and_then(|i| self.entries.get(i))
            .map(|e| self.entry_view(e))
    }

    /// gcfg's value list for a multi-valued key (`[]string`, e.g. `public-network-name`): every
    /// occurrence appends, a blank occurrence (no `=`) empties the list.
    pub fn values(&self, section: &str, subsection: Option<&str>, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        let (section, key) = (FoldName::new(section), FoldName::new(key));
        for e in &self.entries {
            if self.entry_matches(e, section, subsection, key) {
                match e.value(&self.text) {
                    Some(v) => out.push(v.to_owned()),
                    None => out.clear(),
                }
            }
        }
        out
    }

    /// Sets `key = value` in the plain (no subsection) `section`, changing as little as possible:
    ///
    /// - if the key exists (any case), only the value part of its effective (last) occurrence is
    ///   rewritten — key spelling, spacing around `=` and a trailing comment are kept; nothing is
    ///   written if it already has exactly this value;
    /// - else one line is inserted after the last variable (continuation lines included) of the
    ///   last matching section (any case), copying the spacing around `=` and the indentation of
    ///   that section's variables; an empty section gets the line right after its header;
    /// - else a new section `[section]` with the line is appended at the end (after adding the
    ///   missing final newline, and a blank separator line if the text does not end with one).
    ///
    /// Line endings follow the file. `value` is written bare when gcfg reads it back unchanged
    /// (safe literals such as `true`), otherwise as a gcfg quoted string. Nothing else changes.
    ///
    /// If `section` or `key` is not a gcfg identifier, or `value` contains `\r` or NUL, the
    /// document is left unchanged and the summary has `changed == false` and `line == 0`; use
    /// [`Document::try_set`] to learn why.
    pub fn set(&mut self, section: &str, key: &str, value: &str) -> EditSummary {
        self.try_set(section, key, value).unwrap_or(EditSummary {
            kind: EditKind::Replaced,
            line: 0,
            changed: false,
        })
    }

    /// Like [`Document::set`], but reports why an edit is refused.
    pub fn try_set(
        &mut self,
        section: &str,
        key: &str,
        value: &str,
    ) -> Result<EditSummary, EditError> {
        if !is_identifier(section) {
            return Err(EditError::InvalidSection);
        }
        if !is_identifier(key) {
            return Err(EditError::InvalidKey);
        }
        let literal = encode_value(value).ok_or(EditError::UnrepresentableValue)?;

        if let Some(idx) = self.effective_index(section, None, key) {
            let Some(entry) = self.entries.get(idx) else {
                return Err(EditError::NotVerified);
            };
            if entry.value(&self.text) == Some(value) {
                return Ok(EditSummary {
                    kind: EditKind::Replaced,
                    line: self.lines.line(entry.key.start),
                    changed: false,
                });
            }
            let splice = self.replace_splice(idx, entry, &literal);
            return self.apply(splice, section, key, value);
        }

        let last_header = self
            .headers
            .iter()
            .rposition(|h| self.header_matches(h, FoldName::new(section), None));
        let Some(hidx) = last_header else {
            let splice = self.append_section_splice(section, key, &literal);
            return self.apply(splice, section, key, value);
        };
        let anchor = self
            .entries
            .iter()
            .rev()
            .find(|e| e.header == hidx)
            .map(|e| e.stop);
        let header_stop = self.headers.get(hidx).map_or(0, |h| h.stop);
        let splice = self.insert_splice(anchor.unwrap_or(header_stop), Some(hidx), key, &literal);
        match self.apply(splice, section, key, value) {
            Ok(summary) => Ok(summary),
            Err(_) if anchor.is_some() => {
                // E.g. the section's last value ends in a continuation at the end of the text:
                // anything placed after it would be joined to it. The header line is safe.
                let splice = self.insert_splice(header_stop, Some(hidx), key, &literal);
                self.apply(splice, section, key, value)
            }
            Err(e) => Err(e),
        }
    }

    /// Re-reads the edited text and checks that the edit did what it should; the document is
    /// left unchanged when it did not.
    fn apply(
        &mut self,
        splice: Splice,
        section: &str,
        key: &str,
        value: &str,
    ) -> Result<EditSummary, EditError> {
        let mut text = String::with_capacity(self.text.len() + splice.with.len());
        text.push_str(self.text.get(..splice.range.start).unwrap_or_default());
        text.push_str(&splice.with);
        text.push_str(self.text.get(splice.range.end..).unwrap_or_default());
        let (added_entries, added_headers) = match splice.kind {
            EditKind::Replaced => (0, 0),
            EditKind::Inserted => (1, 0),
            EditKind::SectionAppended => (1, 1),
        };
        if let Some(statement) = splice.statement {
            return self.apply_statement(
                text,
                &splice,
                statement,
                (FoldName::new(section), FoldName::new(key), value),
                (added_entries, added_headers),
            );
        }
        let new = Document::parse(&text).map_err(|_| EditError::NotVerified)?;
        let line = new
            .effective(section, None, key)
            .filter(|e| e.value.as_deref() == Some(value))
            .map(|e| e.line)
            .ok_or(EditError::NotVerified)?;
        if new.entries.len() != self.entries.len() + added_entries
            || new.headers.len() != self.headers.len() + added_headers
        {
            return Err(EditError::NotVerified);
        }
        let changed = new.text != self.text;
        *self = new;
        Ok(EditSummary {
            kind: splice.kind,
            line,
            changed,
        })
    }

    /// [`Document::apply`] of an edit of one statement ([`Splice::statement`]): the same checks
    /// on the same document, which [`Document::reread_statement`] describes, made before it is
    /// built, which then happens in place (the variables and headers after the edit shifted,
    /// the edited one replaced or inserted, the line table spliced) instead of copying every
    /// variable.
    fn apply_statement(
        &mut self,
        text: String,
        splice: &Splice,
        statement: (usize, Result<usize, usize>),
        (section, key, value): (FoldName<'_>, FoldName<'_>, &str),
        (added_entries, added_headers): (usize, usize),
    ) -> Result<EditSummary, EditError> {
        let read = self.reread_statement(&text, splice, statement)?;
        let (before, after) = match statement.1 {
            Ok(idx) => (idx, idx + 1),
            Err(idx) => (idx, idx),
        };
        // The edited document's variables are those before `before`, `read`, and those from
        // `after` on, shifted; its headers are these, shifted. The names of the kept ones are
        // the same text, so they match a name as they did.
        if before > self.entries.len()
            || (after - before) + added_entries != 1
            || added_headers != 0
        {
            return Err(EditError::NotVerified);
        }
        let lines = self.lines.spliced(&self.text, &splice.range, &splice.with);
        let shift = |at: usize| splice_shift(&splice.range, splice.with.len(), at);
        let read_matches = key.may_match(read.key_tag)
            && key.matches(text.get(read.key.clone()).unwrap_or_default())
            && self
                .headers
                .get(read.header)
                .is_some_and(|h| self.header_matches(h, section, None));
        // gcfg's effective variable (the last match) of the edited document.
        let later = self.entries.get(after..).unwrap_or_default();
        let earlier = self.entries.get(..before).unwrap_or_default();
        let effective = self
            .last_match(later, section, None, key)
            .and_then(|i| later.get(i))
            .map(|e| (e.value(&self.text), shift(e.key.start)))
            .or_else(|| read_matches.then_some((read.value(&text), read.key.start)))
            .or_else(|| {
                self.last_match(earlier, section, None, key)
                    .and_then(|i| earlier.get(i))
                    .map(|e| (e.value(&self.text), e.key.start))
            });
        let line = effective
            .filter(|&(v, _)| v == Some(value))
            .map(|(_, at)| lines.line(at))
            .ok_or(EditError::NotVerified)?;
        // The texts differ exactly where the replaced bytes differ from their replacement.
        let changed = self.text.get(splice.range.clone()) != Some(splice.with.as_str());
        for e in self.entries.get_mut(after..).unwrap_or_default() {
            e.key = shift(e.key.start)..shift(e.key.end);
            e.assign = e.assign.map(shift);
            e.value_raw = e.value_raw.as_ref().map(|r| shift(r.start)..shift(r.end));
            e.value_stop = e.value_stop.map(shift);
            e.stop = shift(e.stop);
        }
        match self.entries.get_mut(before..after) {
            Some([replaced]) => *replaced = read,
            _ => self.entries.insert(before, read),
        }
        for h in &mut self.headers {
            h.start = shift(h.start);
            h.name = shift(h.name.start)..shift(h.name.end);
            h.sub_raw = h.sub_raw.as_ref().map(|r| shift(r.start)..shift(r.end));
            h.stop = shift(h.stop);
        }
        self.text = text;
        self.lines = lines;
        Ok(EditSummary {
            kind: splice.kind,
            line,
            changed,
        })
    }

    /// The edited statement, reading again only the one statement `splice` changed: the line
    /// from `line_start` (where the edited statement, or the inserted one, starts) to the end
    /// of that statement's last line, in the edited `text`. gcfg reads a text statement by
    /// statement, and a statement that starts on a fresh line depends on nothing before it
    /// but the section header above it; so when that line reads back as exactly one variable
    /// whose statement ends on the line (no continuation into the next one), the rest of the
    /// text reads as it did before the edit, shifted, and the document of the statements
    /// before the edit, the one returned (offsets in `text`) and the ones after it (shifted)
    /// equals [`Document::parse`] of the whole edited text. Anything else is refused
    /// ([`EditError::NotVerified`]), as a whole reparse that disagreed would be.
    fn reread_statement(
        &self,
        text: &str,
        splice: &Splice,
        (line_start, entry): (usize, Result<usize, usize>),
    ) -> Result<RawEntry, EditError> {
        // The statement's lines before the edit end after the first line break at or after
        // its stop (a comment runs to the break); an insertion replaces no text.
        let old_end = match entry {
            Ok(idx) => {
                let stop = self.entries.get(idx).ok_or(EditError::NotVerified)?.stop;
                let rest = self.text.as_bytes().get(stop..).unwrap_or_default();
                rest.iter()
                    .position(|&b| b == b'\n')
                    .map_or(self.text.len(), |p| stop + p + 1)
            }
            Err(_) => splice.range.end,
        };
        if line_start > splice.range.start || old_end < splice.range.end {
            return Err(EditError::NotVerified);
        }
        let new_end = splice_shift(&splice.range, splice.with.len(), old_end);
        let window = text
            .get(line_start..new_end)
            .ok_or(EditError::NotVerified)?;
        // Any section header gives the statement the section context it needs to parse.
        const HEADER: &str = "[s]\n";
        let mut alone = String::with_capacity(HEADER.len() + window.len());
        alone.push_str(HEADER);
        alone.push_str(window);
        let raw = scanner::parse(&alone).map_err(|_| EditError::NotVerified)?;
        let [mut read] =
            <[RawEntry; 1]>::try_from(raw.entries).map_err(|_| EditError::NotVerified)?;
        // A statement ending before the window's end ends on its lines: a value continued past
        // its last line break would have run to the end of the window.
        if raw.headers.len() != 1 || (window.ends_with('\n') && read.stop >= alone.len()) {
            return Err(EditError::NotVerified);
        }
        let at = |offset: usize| offset - HEADER.len() + line_start;
        read.key = at(read.key.start)..at(read.key.end);
        read.assign = read.assign.map(at);
        read.value_raw = read.value_raw.map(|r| at(r.start)..at(r.end));
        read.value_stop = read.value_stop.map(at);
        read.stop = at(read.stop);
        read.header = self
            .headers
            .partition_point(|h| h.start < line_start)
            .checked_sub(1)
            .ok_or(EditError::NotVerified)?;
        Ok(read)
    }

    /// The line ending used by the line that contains `offset`, else the file's first one.
    fn eol_near(&self, offset: usize) -> &'static str {
        let bytes = self.text.as_bytes();
        let own = bytes
            .get(offset..)
            .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
            .map(|p| offset + p);
        let nl = own.or_else(|| bytes.iter().position(|&b| b == b'\n'));
        match nl {
            Some(p) if p > 0 && bytes.get(p - 1) == Some(&b'\r') => "\r\n",
            _ => "\n",
        }
    }

    /// Indentation and `=` spacing to copy: from the last variable with a value in header
    /// `hidx`, else the last one in the file, else `key = value` with no indentation.
    fn style<'d>(&'d self, hidx: Option<usize>) -> (Cow<'d, str>, Cow<'d, str>) {
        let has_value = |e: &&RawEntry| e.value_raw.as_ref().is_some_and(|r| !r.is_empty());
        let reference = hidx
            .and_then(|h| {
                self.entries
                    .iter()
                    .rev()
                    .filter(|e| e.header == h)
                    .find(has_value)
            })
            .or_else(|| self.entries.iter().rev().find(has_value));
        let Some(e) = reference else {
            return (Cow::Borrowed(""), Cow::Borrowed(" = "));
        };
        // Copied only when there is a `\r` to drop (a CRLF file).
        let clean = |s: &'d str| -> Cow<'d, str> {
            if s.contains('\r') {
                Cow::Owned(s.replace('\r', ""))
            } else {
                Cow::Borrowed(s)
            }
        };
        let line_start = self
            .lines
            .start(self.lines.line(e.key.start))
            .unwrap_or(e.key.start);
        let indent = clean(self.text.get(line_start..e.key.start).unwrap_or_default());
        let sep = e
            .value_raw
            .as_ref()
            .and_then(|r| self.text.get(e.key.end..r.start))
            .map(clean)
            .filter(|s| s.contains('=') && s.chars().all(|c| matches!(c, ' ' | '\t' | '=')))
            .unwrap_or(Cow::Borrowed(" = "));
        (indent, sep)
    }

    fn replace_splice(&self, idx: usize, entry: &RawEntry, literal: &str) -> Splice {
        let bytes = self.text.as_bytes();
        let line_start = self
            .lines
            .start(self.lines.line(entry.key.start))
            .unwrap_or(entry.key.start);
        let statement = Some((line_start, Ok(idx)));
        match &entry.value_raw {
            Some(raw) => {
                let mut with = literal.to_owned();
                if raw.is_empty()
                    && !literal.is_empty()
                    && matches!(bytes.get(raw.end), Some(b';' | b'#'))
                {
                    with.push(' ');
                }
                // A value ending in a continuation owns the newline after it: keep one.
                let old = self.slice(raw);
                if old.ends_with("\r\n") {
                    with.push_str("\r\n");
                } else if old.ends_with('\n') {
                    with.push('\n');
                }
                Splice {
                    range: raw.clone(),
                    with,
                    kind: EditKind::Replaced,
                    statement,
                }
            }
            None => {
                let (_, sep) = self.style(Some(entry.header));
                let mut with = format!("{sep}{literal}");
                if matches!(bytes.get(entry.key.end), Some(b';' | b'#')) {
                    with.push(' ');
                }
                Splice {
                    range: entry.key.end..entry.key.end,
                    with,
                    kind: EditKind::Replaced,
                    statement,
                }
            }
        }
    }

    /// Inserts a line after the line that ends at `stop` (an end-of-line or end-of-text offset).
    fn insert_splice(&self, stop: usize, hidx: Option<usize>, key: &str, literal: &str) -> Splice {
        let eol = self.eol_near(stop);
        let (indent, sep) = self.style(hidx);
        let line = [&*indent, key, &*sep, literal, eol].concat();
        let bytes = self.text.as_bytes();
        if bytes.get(stop) == Some(&b'\n') {
            // After the end of a statement's line: the new line starts fresh.
            let before = self.entries.partition_point(|e| e.key.start <= stop);
            Splice {
                range: stop + 1..stop + 1,
                with: line,
                kind: EditKind::Inserted,
                statement: Some((stop + 1, Err(before))),
            }
        } else {
            // End of text. A final line break may already be there (continuation at the end).
            let at = self.text.len();
            let with = if self.text.ends_with('\n') {
                line
            } else {
                format!("{eol}{line}")
            };
            Splice {
                range: at..at,
                with,
                kind: EditKind::Inserted,
                statement: None,
            }
        }
    }

    fn append_section_splice(&self, section: &str, key: &str, literal: &str) -> Splice {
        let eol = self.eol_near(0);
        let (indent, sep) = self.style(None);
        let mut with = String::new();
        if !self.text.is_empty() {
            let mut virt = self.text.clone();
            if !virt.ends_with('\n') {
                with.push_str(eol);
                virt.push('\n');
            }
            let body = virt.strip_suffix('\n').unwrap_or(&virt);
            let last_line = body.rsplit('\n').next().unwrap_or_default();
            if !last_line.chars().all(|c| matches!(c, ' ' | '\t' | '\r')) {
                with.push_str(eol);
            }
        }
        with.push_str(&format!("[{section}]{eol}{indent}{key}{sep}{literal}{eol}"));
        let at = self.text.len();
        Splice {
            range: at..at,
            with,
            kind: EditKind::SectionAppended,
            statement: None,
        }
    }
}

/// gcfg bool semantics: `Some(true)` for `true|yes|on|1` (any case) or a blank variable (`None`),
/// `Some(false)` for `false|no|off|0`, `None` for anything else (fatal for the CCM), including
/// the empty string of `key =`.
pub fn parse_bool(value: Option<&str>) -> Option<bool> {
    let Some(v) = value else {
        return Some(true);
    };
    // gcfg lower-cases with Go's strings.ToLower; no non-ASCII rune lowers to a letter of these
    // words, so ASCII lower-casing decides the same: a text lower-cases (ASCII) to one of these
    // lower-case ASCII words exactly when it equals it ignoring ASCII case, which needs no
    // lower-cased copy.
    let is = |words: [&str; 4]| words.iter().any(|w| v.eq_ignore_ascii_case(w));
    if is(["true", "yes", "on", "1"]) {
        Some(true)
    } else if is(["false", "no", "off", "0"]) {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variables of a section, whichever way its name is written, and none of another
    /// section that follows it.
    #[test]
    fn entry_refs_in_yields_the_sections_variables_only() {
        let doc = Document::parse(
            "[Global]\na = 1\n[LoadBalancer]\nb = 2\nc = 3\n[global]\nd = 4\n[Route]\ne = 5\n",
        )
        .expect("parses");
        let keys: Vec<&str> = doc.entry_refs_in("Global").map(|(_, e)| e.key).collect();
        assert_eq!(keys, ["a", "d"]);
        let keys: Vec<&str> = doc
            .entry_refs_in("LoadBalancer")
            .map(|(_, e)| e.key)
            .collect();
        assert_eq!(keys, ["b", "c"]);
    }

    /// A statement edit whose statement does not read back as the requested variable is
    /// refused and leaves the document as it was: here the key is rewritten to another name
    /// with the same lookup tag (`region` to `rxgion`), or moved under no matching header.
    #[test]
    fn statement_edits_that_do_not_set_the_key_are_refused() {
        let text = "[Global]\nregion = a\n[Route]\nrouter-id = r\n";
        let cases = [
            // The key's name replaced: the statement reads back as `rxgion = a`.
            (10..11, "x", ("Global", "region", "a")),
            // The value set under [Global], but asked for under [Route].
            (18..19, "b", ("Route", "region", "b")),
        ];
        for (range, with, (section, key, value)) in cases {
            let mut d = Document::parse(text).expect("parses");
            let splice = Splice {
                range,
                with: with.to_owned(),
                kind: EditKind::Replaced,
                statement: Some((9, Ok(0))),
            };
            assert_eq!(
                d.apply(splice, section, key, value),
                Err(EditError::NotVerified),
                "{section} {key}"
            );
            assert_eq!(d.as_str(), text);
            assert_eq!(
                d.statements(),
                Document::parse(text).expect("parses").statements()
            );
        }
    }

    /// A statement edit whose kind says it adds variables or headers the statement does not
    /// (a replacement counted as an insertion or as a new section) is refused, though the text
    /// it writes would read back as asked: the entry and header counts are part of the check.
    #[test]
    fn statement_edits_whose_counts_disagree_with_their_statement_are_refused() {
        let text = "[Global]\nregion = a\n";
        for kind in [EditKind::Inserted, EditKind::SectionAppended] {
            let mut d = Document::parse(text).expect("parses");
            let splice = Splice {
                range: 18..19,
                with: "b".to_owned(),
                kind,
                statement: Some((9, Ok(0))),
            };
            assert_eq!(
                d.apply(splice, "Global", "region", "b"),
                Err(EditError::NotVerified),
                "{kind:?}"
            );
            assert_eq!(d.as_str(), text);
        }
        // The same splice as a replacement goes through.
        let mut d = Document::parse(text).expect("parses");
        let splice = Splice {
            range: 18..19,
            with: "b".to_owned(),
            kind: EditKind::Replaced,
            statement: Some((9, Ok(0))),
        };
        assert!(d.apply(splice, "Global", "region", "b").is_ok());
        assert_eq!(d.as_str(), "[Global]\nregion = b\n");
    }
}
