//! The gcfg v1.2.3 tokenizer and statement loop, syntax only.
//!
//! This follows gcfg's `scanner.Scanner` and `readIntoPass` step by step (including the moment
//! at which each error is noticed), so that the text accepted, and the line/column of the first
//! error, are the ones the CCM's parser reports. Instead of storing values into a struct, the
//! loop records where every section header and variable sits in the text.

use std::ops::Range;

use super::unicode::{ascii_fold_tag, is_digit, is_ident_ascii, is_letter};

/// A syntax error at a byte offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawError {
    pub(crate) offset: usize,
    pub(crate) message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Eof,
    Eol,
    /// A double-quoted string outside a value (only valid as a subsection name).
    Str,
    /// The value after `=`.
    Value,
    LBrack,
    RBrack,
    Assign,
    Ident,
    Illegal,
}

/// One token: kind, start offset and end offset (exclusive).
#[derive(Debug, Clone, Copy)]
struct Token {
    tok: Tok,
    pos: usize,
    end: usize,
}

/// The bytes that end a run of [`Scanner::scan_value`]: those that end the value, open or
/// close a quote, start an escape, or are NUL or `\r`. A table: one look-up per byte of a
/// value instead of a compare per kind.
static VALUE_RUN_ENDS: [bool; 256] = {
    let mut ends = [false; 256];
    let mut i = 0;
    while i < 256 {
        ends[i] = matches!(i as u8, b'\\' | b'"' | b'\r' | b'\n' | b';' | b'#' | 0);
        i += 1;
    }
    ends
};

/// Where a value was found by the value scanner.
#[derive(Debug, Clone, Copy, Default)]
struct ValueScan {
    /// End of the value text (trailing blanks excluded).
    end: usize,
    /// Offset where value scanning stopped (`\n`, `;`, `#` or end of text).
    stop: usize,
    /// The raw text contained `\r`, which gcfg strips from the value.
    has_cr: bool,
    /// The raw text holds no `"` and no `\`: gcfg's `unquote` keeps it as it is.
    plain: bool,
}

struct Scanner<'s> {
    src: &'s str,
    /// Current character; `None` at end of text.
    ch: Option<char>,
    offset: usize,
    rd_offset: usize,
    next_val: bool,
    /// The first error only: the statement loop stops at it, and keeping every later one
    /// (a value of a million NULs) would cost memory in proportion to the input for nothing.
    error: Option<RawError>,
    last_value: ValueScan,
    /// The last identifier scanned is ASCII (for its [`RawEntry::key_tag`]).
    ident_ascii: bool,
}

fn is_white_space(c: Option<char>) -> bool {
    matches!(c, Some(' ' | '\t' | '\r'))
}

impl<'s> Scanner<'s> {
    fn new(src: &'s str) -> Self {
        let mut s = Scanner {
            src,
            ch: Some(' '),
            offset: 0,
            rd_offset: 0,
            next_val: false,
            error: None,
            last_value: ValueScan::default(),
            ident_ascii: true,
        };
        s.next();
        s
    }

    fn error(&mut self, offset: usize, message: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(RawError {
                offset,
                message: message.into(),
            });
        }
    }

    /// Reads the next character into `ch` (gcfg `next`).
    #[inline]
    fn next(&mut self) {
        // ASCII is read without decoding: one byte is one character.
        match self.src.as_bytes().get(self.rd_offset) {
            Some(&b) if b.is_ascii() => {
                self.offset = self.rd_offset;
                if b == 0 {
                    self.error(self.offset, "illegal character NUL");
                }
                self.rd_offset += 1;
                self.ch = Some(char::from(b));
            }
            Some(_) => self.next_non_ascii(),
            None => {
                self.offset = self.src.len();
                self.ch = None;
            }
        }
    }

    /// [`Scanner::next`] on a character of more than one byte (never NUL).
    #[cold]
    fn next_non_ascii(&mut self) {
        match self
            .src
            .get(self.rd_offset..)
            .and_then(|rest| rest.chars().next())
        {
            Some(c) => {
                self.offset = self.rd_offset;
                self.rd_offset += c.len_utf8();
                self.ch = Some(c);
            }
            None => {
                self.offset = self.src.len();
                self.ch = None;
            }
        }
    }

    /// Moves to the character at `at` as [`Scanner::next`] called until `offset == at` would,
    /// for callers that have checked the characters skipped: `at` is a character boundary
    /// after `offset`, and nothing from `rd_offset` up to `at` is NUL (the only character
    /// `next` reports; the one at `at` is read by `next` itself).
    fn skip_to(&mut self, at: usize) {
        self.rd_offset = at;
        self.next();
    }

    /// The text from the current character on.
    fn rest(&self) -> &'s [u8] {
        self.src.as_bytes().get(self.offset..).unwrap_or_default()
    }

    fn skip_whitespace(&mut self) {
        if !is_white_space(self.ch) {
            return;
        }
        // Blanks are ASCII: count them as bytes.
        let run = self
            .rest()
            .iter()
            .take_while(|&&b| matches!(b, b' ' | b'\t' | b'\r'))
            .count();
        self.skip_to(self.offset + run);
    }

    fn scan_comment(&mut self) {
        if matches!(self.ch, Some('\n') | None) {
            return;
        }
        // The comment runs to the next line break (a byte no multi-byte character contains);
        // of the characters up to it only a NUL matters, and only the first one.
        let from = self.rd_offset;
        let rest = self.src.get(from..).unwrap_or_default();
        let len = rest.find('\n').unwrap_or(rest.len());
        let comment = rest.as_bytes().get(..len).unwrap_or_default();
        if comment.contains(&0) {
            let nul = comment.iter().position(|&b| b == 0).unwrap_or(0);
            self.error(from + nul, "illegal character NUL");
        }
        self.skip_to(from + len);
    }

    fn scan_identifier(&mut self) {
        self.ident_ascii = true;
        loop {
            // ASCII letters, digits and `-` as bytes; other characters one by one.
            let run = self
                .rest()
                .iter()
                .take_while(|&&b| is_ident_ascii(b))
                .count();
            if run > 0 {
                self.skip_to(self.offset + run);
            }
            match self.ch {
                Some(c) if !c.is_ascii() && (is_letter(c) || is_digit(c)) => {
                    self.ident_ascii = false;
                    self.next();
                }
                _ => return,
            }
        }
    }

    /// Consumes the character after a backslash; `in_value` allows `\n` and `\t`.
    fn scan_escape(&mut self, in_value: bool) {
        let offs = self.offset;
        let ch = self.ch;
        self.next();
        match ch {
            Some('\\' | '"') => {}
            Some('n' | 't') if in_value => {}
            _ => self.error(offs, "unknown escape sequence"),
        }
    }

    /// A quoted string outside a value; the opening quote is already consumed.
    fn scan_string(&mut self) {
        let offs = self.offset.saturating_sub(1);
        while self.ch != Some('"') {
            let ch = self.ch;
            self.next();
            if matches!(ch, Some('\n') | None) {
                self.error(offs, "string not terminated");
                break;
            }
            if ch == Some('\\') {
                self.scan_escape(false);
            }
        }
        self.next();
    }

    /// The value after `=` (gcfg `scanValString`).
    fn scan_value(&mut self) -> ValueScan {
        let offs = self.offset;
        let mut has_cr = false;
        let mut plain = true;
        let mut end = offs;
        let mut in_quote = false;
        loop {
            // A run of characters that only move `end` (anything but the ASCII ones that end
            // the value, open or close a quote, start an escape, or are NUL or `\r`), as
            // bytes: a byte of a multi-byte character is never one of those, and `end` after
            // its last byte is the end of the character.
            let start = self.offset;
            let rest = self.rest();
            let run = rest
                .iter()
                .position(|&b| VALUE_RUN_ENDS[usize::from(b)])
                .unwrap_or(rest.len());
            if run > 0 {
                // Outside quotes, trailing blanks of the run do not move `end`.
                let run_end = if in_quote {
                    Some(run)
                } else {
                    rest.get(..run)
                        .unwrap_or_default()
                        .iter()
                        .rposition(|&b| !matches!(b, b' ' | b'\t'))
                        .map(|p| p + 1)
                };
                if let Some(e) = run_end {
                    end = start + e;
                }
                self.skip_to(start + run);
            }
            let more = in_quote || !matches!(self.ch, None | Some('\n' | ';' | '#'));
            if !more {
                break;
            }
            let ch = self.ch;
            plain &= !matches!(ch, Some('\\' | '"'));
            self.next();
            match ch {
                Some('\\') if in_quote => self.scan_escape(true),
                Some('\\') => {
                    if self.ch == Some('\r') {
                        has_cr = true;
                        self.next();
                    }
                    if !matches!(self.ch, Some('\n' | '"')) {
                        self.error(
                            offs,
                            "unquoted '\\' must be followed by new line or double quote",
                        );
                        break;
                    }
                    self.next();
                }
                Some('"') => in_quote = !in_quote,
                Some('\r') => has_cr = true,
                None | Some('\n') => {
                    // Only reachable inside quotes.
                    self.error(offs, "string not terminated");
                    break;
                }
                Some(_) => {}
            }
            if in_quote || !is_white_space(ch) {
                end = self.offset;
            }
        }
        ValueScan {
            end,
            stop: self.offset,
            has_cr,
            plain,
        }
    }

    /// Returns the next token (gcfg `Scan`); comments are skipped.
    fn scan(&mut self) -> Token {
        loop {
            self.skip_whitespace();
            let pos = self.offset;
            if self.next_val {
                self.next_val = false;
                let v = self.scan_value();
                self.last_value = v;
                return Token {
                    tok: Tok::Value,
                    pos,
                    end: v.end,
                };
            }
            let ch = self.ch;
            if ch.is_some_and(is_letter) {
                self.scan_identifier();
                return Token {
                    tok: Tok::Ident,
                    pos,
                    end: self.offset,
                };
            }
            self.next();
            let tok = match ch {
                None => Tok::Eof,
                Some('\n') => Tok::Eol,
                Some('"') => {
                    self.scan_string();
                    Tok::Str
                }
                Some('[') => Tok::LBrack,
                Some(']') => Tok::RBrack,
                Some(';' | '#') => {
                    self.scan_comment();
                    continue;
                }
                Some('=') => {
                    self.next_val = true;
                    Tok::Assign
                }
                Some(c) => {
                    self.error(pos, format!("illegal character U+{:04X}", u32::from(c)));
                    Tok::Illegal
                }
            };
            return Token {
                tok,
                pos,
                end: self.offset,
            };
        }
    }

    /// The first error, if one was found; taken out, as the statement loop stops at it.
    #[inline]
    fn first_error(&mut self) -> Option<RawError> {
        self.error.take()
    }
}

/// gcfg's `unquote`: removes quotes, applies escapes and joins continuation lines.
/// The scanner has already rejected malformed text; anything odd left is kept as is.
pub(crate) fn unquote(s: &str) -> String {
    if !s.bytes().any(|b| b == b'"' || b == b'\\') {
        // No quote and no escape: every character is kept as is.
        return s.to_owned();
    }
    // The text between quotes and escapes is copied a run at a time, not a character at a
    // time (a rendered config quotes every value). Quotes, backslashes and the escaped
    // letters are ASCII, so every run starts and ends on a character boundary.
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    // Start of the run being kept, and the byte looked at.
    let mut run = 0;
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        match b {
            b'"' => {
                out.push_str(s.get(run..at).unwrap_or_default());
                at += 1;
                run = at;
            }
            b'\\' => {
                out.push_str(s.get(run..at).unwrap_or_default());
                at += 1;
                match bytes.get(at) {
                    Some(b'n') => {
                        out.push('\n');
                        at += 1;
                    }
                    Some(b't') => {
                        out.push('\t');
                        at += 1;
                    }
                    // A continuation: the line break goes.
                    Some(b'\n') => at += 1,
                    // Kept as itself, and not read as a quote or an escape: the next run
                    // starts with it.
                    Some(b'\\' | b'"') => {
                        run = at;
                        at += 1;
                        continue;
                    }
                    // Any other character is kept as it is: the next run starts with it.
                    _ => {}
                }
                run = at;
            }
            _ => at += 1,
        }
    }
    out.push_str(s.get(run..).unwrap_or_default());
    out
}

/// A section header as found by the statement loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawHeader {
    /// Offset of `[`.
    pub(crate) start: usize,
    pub(crate) name: Range<usize>,
    /// Raw subsection literal including its quotes.
    pub(crate) sub_raw: Option<Range<usize>>,
    pub(crate) sub: Option<String>,
    /// Offset of the token after `]` (end of line, or end of text).
    pub(crate) stop: usize,
}

/// A variable as found by the statement loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEntry {
    /// Index into the header list.
    pub(crate) header: usize,
    pub(crate) key: Range<usize>,
    /// [`ascii_fold_tag`] of the key when it is ASCII; `None` for a key with any other
    /// character. Lookups compare it first (see [`super::unicode::FoldName::may_match`]).
    pub(crate) key_tag: Option<u64>,
    /// Offset of `=`, if any.
    pub(crate) assign: Option<usize>,
    /// Raw value text (quotes, escapes, continuations as written; trailing blanks excluded).
    pub(crate) value_raw: Option<Range<usize>>,
    /// The decoded value when it is not the raw text itself (quotes, escapes or `\r` in it);
    /// `None` for a plain value, which is read from the text ([`RawEntry::value`]) rather than
    /// copied (most values are plain), and for a blank variable.
    pub(crate) decoded: Option<String>,
    /// Offset where value scanning stopped, i.e. the `;`/`#`/newline/end after the value.
    pub(crate) value_stop: Option<usize>,
    /// Offset of the end-of-line (or end-of-text) token that terminates the statement.
    pub(crate) stop: usize,
}

impl RawEntry {
    /// The decoded value, `text` being the text the entry's offsets are in; `None` for a
    /// blank variable (no `=`).
    #[inline]
    pub(crate) fn value<'t>(&'t self, text: &'t str) -> Option<&'t str> {
        let raw = self.value_raw.as_ref()?;
        match &self.decoded {
            Some(decoded) => Some(decoded),
            None => Some(text.get(raw.clone()).unwrap_or_default()),
        }
    }
}

/// The statements of a syntactically valid text.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawDoc {
    pub(crate) headers: Vec<RawHeader>,
    pub(crate) entries: Vec<RawEntry>,
}

fn err_at(offset: usize, message: &str) -> RawError {
    RawError {
        offset,
        message: message.to_owned(),
    }
}

/// Runs gcfg's statement loop over `src`, checking syntax only.
pub(crate) fn parse(src: &str) -> Result<RawDoc, RawError> {
    let mut s = Scanner::new(src);
    // Room for a statement per 16 bytes, and a header per 64, so that a config is usually read
    // without growing either list; capped, so a long text reserves little more than it fills.
    let mut doc = RawDoc {
        headers: Vec::with_capacity((src.len() / 64).clamp(1, 8)),
        entries: Vec::with_capacity((src.len() / 16).clamp(1, 64)),
    };
    let mut t = s.scan();
    loop {
        if let Some(e) = s.first_error() {
            return Err(e);
        }
        match t.tok {
            Tok::Eof => return Ok(doc),
            Tok::Eol => t = s.scan(),
            Tok::LBrack => {
                let start = t.pos;
                t = s.scan();
                if let Some(e) = s.first_error() {
                    return Err(e);
                }
                if t.tok != Tok::Ident {
                    return Err(err_at(t.pos, "expected section name"));
                }
                let name = t.pos..t.end;
                t = s.scan();
                if let Some(e) = s.first_error() {
                    return Err(e);
                }
                let mut sub_raw = None;
                let mut sub = None;
                if t.tok == Tok::Str {
                    let raw = t.pos..t.end;
                    let decoded = unquote(src.get(raw.clone()).unwrap_or_default());
                    if decoded.is_empty() {
                        return Err(err_at(t.pos, "empty subsection name"));
                    }
                    sub_raw = Some(raw);
                    sub = Some(decoded);
                    t = s.scan();
                    if let Some(e) = s.first_error() {
                        return Err(e);
                    }
                }
                if t.tok != Tok::RBrack {
                    let msg = if sub.is_none() {
                        "expected subsection name or right bracket"
                    } else {
                        "expected right bracket"
                    };
                    return Err(err_at(t.pos, msg));
                }
                t = s.scan();
                if !matches!(t.tok, Tok::Eol | Tok::Eof) {
                    return Err(err_at(t.pos, "expected EOL, EOF, or comment"));
                }
                doc.headers.push(RawHeader {
                    start,
                    name,
                    sub_raw,
                    sub,
                    stop: t.pos,
                });
            }
            Tok::Ident => {
                if doc.headers.is_empty() {
                    return Err(err_at(t.pos, "expected section header"));
                }
                let key = t.pos..t.end;
                let key_tag = s
                    .ident_ascii
                    .then(|| ascii_fold_tag(src.as_bytes().get(key.clone()).unwrap_or_default()));
                t = s.scan();
                if let Some(e) = s.first_error() {
                    return Err(e);
                }
                let mut entry = RawEntry {
                    header: doc.headers.len() - 1,
                    key,
                    key_tag,
                    assign: None,
                    value_raw: None,
                    decoded: None,
                    value_stop: None,
                    stop: t.pos,
                };
                if !matches!(t.tok, Tok::Eol | Tok::Eof) {
                    if t.tok != Tok::Assign {
                        return Err(err_at(t.pos, "expected '='"));
                    }
                    entry.assign = Some(t.pos);
                    t = s.scan();
                    if let Some(e) = s.first_error() {
                        return Err(e);
                    }
                    if t.tok != Tok::Value {
                        return Err(err_at(t.pos, "expected value"));
                    }
                    let scan = s.last_value;
                    let raw = src.get(t.pos..t.end).unwrap_or_default();
                    entry.decoded = if scan.has_cr {
                        Some(unquote(&raw.replace('\r', "")))
                    } else if scan.plain {
                        // `unquote` keeps a text without quotes and escapes as it is: the
                        // value is the raw text, read where it is.
                        None
                    } else {
                        Some(unquote(raw))
                    };
                    entry.value_raw = Some(t.pos..t.end);
                    entry.value_stop = Some(scan.stop);
                    t = s.scan();
                    if let Some(e) = s.first_error() {
                        return Err(e);
                    }
                    if !matches!(t.tok, Tok::Eol | Tok::Eof) {
                        return Err(err_at(t.pos, "expected EOL, EOF, or comment"));
                    }
                    entry.stop = t.pos;
                }
                doc.entries.push(entry);
            }
            _ => {
                let msg = if doc.headers.is_empty() {
                    "expected section header"
                } else {
                    "expected section header or variable declaration"
                };
                return Err(err_at(t.pos, msg));
            }
        }
    }
}

/// Line-start table with gcfg's (Go `token.File`) conventions: 0, then the offset after every
/// `\n` that is not the last byte of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lines {
    starts: Vec<usize>,
}

/// Eight bytes of `\n`, for [`Lines::new`]'s word-at-a-time search.
const NEWLINES: u64 = u64::from_ne_bytes([b'\n'; 8]);
/// The low seven bits of each of eight bytes.
const LOW7: u64 = u64::from_ne_bytes([0x7f; 8]);

/// The bit 7 of each byte of `word` that is zero, and no other bit. Exact: the sum
/// `(b & 0x7f) + 0x7f` of one byte never carries into the next (at most 0xfe), and sets bit 7
/// exactly when one of the low seven bits is set; the OR with `b` adds its own bit 7.
#[inline]
fn zero_bytes(word: u64) -> u64 {
    !(((word & LOW7).wrapping_add(LOW7)) | word | LOW7)
}

impl Lines {
    pub(crate) fn new(src: &str) -> Self {
        let bytes = src.as_bytes();
        let len = bytes.len();
        // Room for lines of 24 bytes on average, so that a config is usually read into one
        // allocation; capped, so a long text without line breaks reserves little.
        let mut starts = Vec::with_capacity((len / 24 + 2).min(4096));
        starts.push(0);
        // A line break is one byte that no multi-byte character contains. Eight bytes at a
        // time, in one pass over the text: a search per line (`str::find`) costs its set-up
        // on every one of a config's short lines.
        let mut push_after = |at: usize| {
            if at + 1 < len {
                starts.push(at + 1);
            }
        };
        let mut words = bytes.chunks_exact(8);
        let mut base = 0;
        for word in &mut words {
            let word = word.try_into().map_or(0, u64::from_le_bytes);
            let mut found = zero_bytes(word ^ NEWLINES);
            while found != 0 {
                // Little-endian: the lowest set bit is the first line break of the word.
                push_after(base + (found.trailing_zeros() / 8) as usize);
                found &= found - 1;
            }
            base += 8;
        }
        for (i, &b) in words.remainder().iter().enumerate() {
            if b == b'\n' {
                push_after(base + i);
            }
        }
        Lines { starts }
    }

    /// The table of `old` (which `self` describes) with the bytes of `range` replaced by
    /// `with`. Equal to [`Lines::new`] of that text, from the starts that the edit leaves in
    /// place (before the range, unchanged; after it, shifted) and those of `with`, without
    /// reading the rest of the text again.
    pub(crate) fn spliced(&self, old: &str, range: &Range<usize>, with: &str) -> Lines {
        let old_len = old.len();
        let new_len = old_len - (range.end - range.start) + with.len();
        let mut starts = Vec::with_capacity(self.starts.len() + 1);
        // Before the edit: starts after a line break before `range.start` (0 included), unless
        // the edit removes everything after that break.
        starts.extend(
            self.starts
                .iter()
                .take_while(|&&s| s <= range.start && (s < new_len || s == 0)),
        );
        // A text ending in a line break that the edit appends to: that break was the last
        // byte, and no longer is.
        if range.start == old_len && !with.is_empty() && old.ends_with('\n') {
            starts.push(old_len);
        }
        starts.extend(
            with.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| range.start + i + 1)
                .filter(|&s| s < new_len),
        );
        // After the edit: starts after a line break at or after `range.end`, shifted.
        let from = self.starts.partition_point(|&s| s <= range.end);
        starts.extend(
            self.starts
                .get(from..)
                .unwrap_or_default()
                .iter()
                .map(|&s| s - range.end + range.start + with.len()),
        );
        Lines { starts }
    }

    fn index(&self, offset: usize) -> usize {
        self.starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1)
    }

    /// 1-based line and 1-based byte column of `offset`.
    pub(crate) fn line_col(&self, offset: usize) -> (usize, usize) {
        let i = self.index(offset);
        let start = self.starts.get(i).copied().unwrap_or(0);
        (i + 1, offset.saturating_sub(start) + 1)
    }

    /// 1-based line of `offset`.
    pub(crate) fn line(&self, offset: usize) -> usize {
        self.index(offset) + 1
    }

    /// Offset where the 1-based `line` starts.
    pub(crate) fn start(&self, line: usize) -> Option<usize> {
        line.checked_sub(1)
            .and_then(|i| self.starts.get(i))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> (usize, usize, String) {
        let e = parse(src).expect_err("should be rejected");
        let (l, c) = Lines::new(src).line_col(e.offset);
        (l, c, e.message)
    }

    /// A character that is neither ASCII nor a letter or digit ends a name where it stands
    /// (the scanner's ASCII run and its per-character rule agree on where).
    #[test]
    fn a_name_ends_at_a_character_that_is_no_letter_or_digit() {
        let illegal = "illegal character U+20AC".to_owned();
        assert_eq!(err("[s]\nk\u{20ac}y = 1\n"), (2, 2, illegal.clone()));
        assert_eq!(err("[s \u{20ac}]\n"), (1, 4, illegal));
        // A letter outside ASCII is part of the name.
        let doc = parse("[s]\nk\u{e9}y = 1\n").expect("a letter");
        assert_eq!(doc.entries.len(), 1);
    }

    /// Line starts are those of the plain definition (the offset after every `\n` that is
    /// not the last byte), for line breaks at every offset of the eight-byte words.
    #[test]
    fn line_starts_follow_the_definition() {
        let alphabet = ["\n", "a", "é", " ", "\r\n", "\n\n", "\u{a0}", "中"];
        let mut next = crate::test_rng::lcg(0x31);
        for _ in 0..5_000 {
            let text: String = crate::test_rng::text_of(&mut next, &alphabet, 40);
            let mut expected = vec![0];
            expected.extend(
                text.bytes()
                    .enumerate()
                    .filter(|&(i, b)| b == b'\n' && i + 1 < text.len())
                    .map(|(i, _)| i + 1),
            );
            assert_eq!(Lines::new(&text).starts, expected, "{text:?}");
        }
    }

    /// A spliced table is the table of the spliced text, for replacements anywhere (at the
    /// start, at the end, of line breaks, by text with and without line breaks).
    #[test]
    fn spliced_lines_equal_the_lines_of_the_spliced_text() {
        let alphabet = ["\n", "a", "é", " ", "\r\n", "\n\n", "中"];
        let mut next = crate::test_rng::lcg(0x47);
        for _ in 0..20_000 {
            let old = crate::test_rng::text_of(&mut next, &alphabet, 24);
            let with = crate::test_rng::text_of(&mut next, &alphabet, 24);
            let bounds: Vec<usize> = old
                .char_indices()
                .map(|(i, _)| i)
                .chain([old.len()])
                .collect();
            let a = bounds[next() % bounds.len()];
            let b = bounds[next() % bounds.len()];
            let range = a.min(b)..a.max(b);
            let new = [&old[..range.start], with.as_str(), &old[range.end..]].concat();
            assert_eq!(
                Lines::new(&old).spliced(&old, &range, &with),
                Lines::new(&new),
                "{old:?} {range:?} {with:?}"
            );
        }
    }

    /// gcfg's `unquote` a character at a time: what [`unquote`] returns, a run at a time.
    fn unquote_by_character(s: &str) -> String {
        let mut out = String::new();
        let mut esc = false;
        for c in s.chars() {
            if esc {
                esc = false;
                match c {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    '\n' => {}
                    other => out.push(other),
                }
                continue;
            }
            match c {
                '"' => {}
                '\\' => esc = true,
                _ => out.push(c),
            }
        }
        out
    }

    #[test]
    fn unquote_equals_unquoting_character_by_character() {
        let alphabet = ['"', '\\', 'n', 't', '\n', 'a', 'é', '\r'];
        let mut texts = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> = texts
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
            for text in &longer {
                assert_eq!(unquote(text), unquote_by_character(text), "{text:?}");
            }
            texts = longer;
        }
    }

    #[test]
    fn unquote_cases() {
        assert_eq!(unquote(r#""val" "ue""#), "val ue");
        assert_eq!(unquote(r#"\"value\""#), "\"value\"");
        assert_eq!(unquote("a\\\nb"), "ab");
        assert_eq!(unquote(r#""a\tb\n\\\"""#), "a\tb\n\\\"");
    }

    #[test]
    fn error_positions() {
        assert_eq!(
            err("\u{FEFF}[s]\n"),
            (1, 1, "illegal character U+FEFF".into())
        );
        assert_eq!(err("a=1\n"), (1, 1, "expected section header".into()));
        assert_eq!(
            err("[s]\nk_1=2\n"),
            (2, 2, "illegal character U+005F".into())
        );
        assert_eq!(err("[s \"\"]\n"), (1, 4, "empty subsection name".into()));
        assert_eq!(err("[s]\nk=\"ab\n"), (2, 3, "string not terminated".into()));
        assert_eq!(
            err("[s]\nk=\"a\\\nb\"\n"),
            (2, 6, "unknown escape sequence".into())
        );
        assert_eq!(
            err("[s]\nk=a\\b\n"),
            (
                2,
                3,
                "unquoted '\\' must be followed by new line or double quote".into()
            )
        );
        assert_eq!(
            err("[s \"a\\n\"]\n"),
            (1, 7, "unknown escape sequence".into())
        );
        assert_eq!(
            err("[s]x\n"),
            (1, 4, "expected EOL, EOF, or comment".into())
        );
        assert_eq!(
            err("[s]\n=x\n"),
            (
                2,
                1,
                "expected section header or variable declaration".into()
            )
        );
        assert_eq!(err("[s]\nk x\n"), (2, 3, "expected '='".into()));
        assert_eq!(err("[s]\nk=a\0\n"), (2, 4, "illegal character NUL".into()));
        assert_eq!(err("["), (1, 2, "expected section name".into()));
        assert_eq!(err("[s]\n["), (2, 2, "expected section name".into()));
        assert_eq!(err("[s]\n[\n"), (2, 2, "expected section name".into()));
        assert_eq!(
            err("[s x]"),
            (1, 4, "expected subsection name or right bracket".into())
        );
        assert_eq!(err("[s \"x\" y]"), (1, 8, "expected right bracket".into()));
    }

    #[test]
    fn accepts_odd_but_valid_text() {
        for src in [
            "",
            " \t\r\n\n",
            "[s\"sub\"]\n",
            "[ s ] ; c\n",
            "[s]\nk\n",
            "[s]\nk=\n",
            "[s]\nk = a \\\n  b\n",
            "[s]\r\nk = a\\\r\n b\r\n",
            "[s]\nk=\\\"v\\\"\n",
            "[s]\nk=\"a;#b\" c # d\n",
            "[s]\nk=v",
            "[中文]\n键=值\n",
        ] {
            assert!(parse(src).is_ok(), "{src:?}");
        }
    }

    #[test]
    fn records_values() {
        let src = "[s]\n k = \"a \" b ;c\n k2\n k3=\\\n x\n k4 = plain  ;c\n k5=\n";
        let d = parse(src).expect("valid");
        let v: Vec<_> = d.entries.iter().map(|e| e.value(src)).collect();
        assert_eq!(
            v,
            vec![Some("a  b"), None, Some(" x"), Some("plain"), Some("")]
        );
        // Only a value that is not its raw text is copied.
        let copied: Vec<_> = d.entries.iter().map(|e| e.decoded.is_some()).collect();
        assert_eq!(copied, [true, false, true, false, false]);
        let first = d.entries.first().expect("entry");
        assert_eq!(
            first.value_raw.clone().and_then(|r| src.get(r)),
            Some("\"a \" b")
        );
    }
}
