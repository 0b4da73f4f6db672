//! Paths inside an object (`yaml::Seg`s) as JSON pointers and as messages show them.

use jsonptr::PointerBuf;
use serde_json::Value;

use crate::yaml::Seg;

/// A display path: `spec.sources[1].helm.values` (a key longer than 80 characters is cut,
/// with `…`).
pub fn display(path: &[Seg]) -> String {
    // Each key written in place rather than copied first: every finding and every values
    // place names its field so.
    let mut out = String::new();
    push_joined(&mut out, path, push_shown_entry);
    out
}

/// `[i]`.
fn push_index(out: &mut String, i: usize) {
    out.push('[');
    push_decimal(out, i);
    out.push(']');
}

/// `path` with its keys joined by `.`, each written by `key`, and list indexes as `[i]`:
/// the dotted form of a display path and of a `--set` key.
pub fn joined(path: &[Seg], key: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    push_joined(&mut out, path, |out, k| out.push_str(&key(k)));
    out
}

/// [`joined`] written onto `out`, each key pushed by `push_key`.
fn push_joined(out: &mut String, path: &[Seg], push_key: impl Fn(&mut String, &str)) {
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                push_key(out, k);
            }
            Seg::Index(i) => push_index(out, *i),
        }
    }
}

/// The JSON pointer of a path.
pub fn pointer(path: &[Seg]) -> PointerBuf {
    // Written once as text: `pointer_text` encodes each token as jsonptr does (its test), so
    // the text always parses; jsonptr's own building copies and encodes every token first.
    PointerBuf::parse(pointer_text(path)).unwrap_or_else(|_| tokens_pointer(path))
}

/// The JSON pointer of a path, built by jsonptr from its tokens.
fn tokens_pointer(path: &[Seg]) -> PointerBuf {
    PointerBuf::from_tokens(path.iter().map(|s| match s {
        Seg::Key(k) => k.clone(),
        Seg::Index(i) => i.to_string(),
    }))
}

/// The JSON pointer of a path as text: what jsonptr writes for the path's tokens (each token
/// with `~` written `~0` and `/` written `~1`, RFC 6901), without building the pointer's
/// tokens first. Every finding of a site names its field's pointer.
pub fn pointer_text(path: &[Seg]) -> String {
    let mut out = String::with_capacity(
        path.iter()
            .map(|s| match s {
                Seg::Key(k) => k.len() + 1,
                Seg::Index(_) => 4,
            })
            .sum(),
    );
    for seg in path {
        match seg {
            Seg::Key(k) => push_pointer_token(&mut out, k),
            Seg::Index(i) => {
                out.push('/');
                push_decimal(&mut out, *i);
            }
        }
    }
    out
}

/// `field[key]` with the key quoted as `{key:?}` writes it (`data["cloud.conf"]`): how
/// messages name a data key. A key of printable ASCII without `"` or `\` (every real one)
/// is written as it is, without going through `fmt`; any other is left to `Debug`.
pub fn keyed(field: &str, key: &str) -> String {
    if !key
        .bytes()
        .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
    {
        return format!("{field}[{key:?}]");
    }
    let mut out = String::with_capacity(field.len() + key.len() + 4);
    out.push_str(field);
    out.push_str("[\"");
    out.push_str(key);
    out.push_str("\"]");
    out
}

/// Appends `/` and the key `key` as a JSON pointer token (`~` written `~0`, `/` written `~1`).
#[inline]
pub fn push_pointer_token(out: &mut String, key: &str) {
    out.push('/');
    // Most keys hold neither: copied whole after one pass over their bytes.
    if !key.bytes().any(|b| b == b'~' || b == b'/') {
        out.push_str(key);
        return;
    }
    let mut rest = key;
    while let Some(at) = rest.find(['~', '/']) {
        out.push_str(&rest[..at]);
        out.push_str(if rest.as_bytes()[at] == b'~' {
            "~0"
        } else {
            "~1"
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

/// Appends `n` in decimal, as `{n}` writes it, without going through `fmt`.
pub fn push_decimal(out: &mut String, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[start..] {
        out.push(char::from(d));
    }
}

/// `root.pointer(pointer)` (RFC 6901, as serde_json reads it), without the two `String`s
/// serde_json allocates per token to unescape `~1` and `~0`: the pointers the sites read are
/// static and hold no `~`, so each token is its key as written. A pointer with `~` is left to
/// serde_json. (A values read asks this five to ten times per review; serde_json's way cost
/// 5k instructions a call.)
pub fn value_at<'a>(root: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.as_bytes().contains(&b'~') {
        return root.pointer(pointer);
    }
    if pointer.is_empty() {
        return Some(root);
    }
    slash_separated(pointer.strip_prefix('/')?).try_fold(root, |target, token| match target {
        Value::Object(map) => map.get(token),
        Value::Array(list) => list_index(token).and_then(|i| list.get(i)),
        _ => None,
    })
}

/// The parts of `text` between its `/`s, as `text.split('/')` gives them, found byte by byte:
/// a registry pointer is a few short tokens, read on every review, and the general splitter
/// costs more to set up per token than the token costs to scan.
pub(crate) fn slash_separated(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let current = rest?;
        match current.bytes().position(|b| b == b'/') {
            Some(at) => {
                rest = current.get(at + 1..);
                current.get(..at)
            }
            None => {
                rest = None;
                Some(current)
            }
        }
    })
}

/// A pointer token as a list index, as serde_json reads one: digits, no `+`, no leading zero.
fn list_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// Most characters of a `--set` key shown in messages.
const MAX_SHOWN_ENTRY_CHARS: usize = 80;

/// A `--set` key as messages show it: cut after [`MAX_SHOWN_ENTRY_CHARS`] characters (a
/// hostile key is tens of kilobytes; the answer must stay short enough to read).
pub fn shown_entry(key: &str) -> String {
    let mut out = String::new();
    push_shown_entry(&mut out, key);
    out
}

/// [`shown_entry`] written at the end of `out`.
fn push_shown_entry(out: &mut String, key: &str) {
    // A key of at most that many bytes has at most that many characters: nothing to cut.
    let cut = (key.len() > MAX_SHOWN_ENTRY_CHARS)
        .then(|| key.char_indices().nth(MAX_SHOWN_ENTRY_CHARS))
        .flatten();
    match cut {
        Some((cut, _)) => {
            out.push_str(&key[..cut]);
            out.push('…');
        }
        None => out.push_str(key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `pointer_text` writes what jsonptr writes for the same path: keys with `~` and `/`
    /// anywhere (and both, and repeated), empty keys, non-ASCII, indexes of every width.
    #[test]
    fn pointer_text_is_jsonptr_s_pointer_as_text() {
        let keys = [
            "",
            "data",
            "cloud.conf",
            "~",
            "/",
            "~/",
            "/~",
            "a~b",
            "a/b",
            "~0",
            "~1",
            "a//b~~c",
            "é~ü/ñ",
            "0",
            "-",
        ];
        let indexes = [0, 7, 10, 99, 12345, usize::MAX];
        let mut segs: Vec<Seg> = keys.iter().map(|k| Seg::key(k)).collect();
        segs.extend(indexes.iter().map(|&i| Seg::Index(i)));
        assert_eq!(pointer_text(&[]), tokens_pointer(&[]).to_string());
        assert_eq!(pointer(&[]), tokens_pointer(&[]));
        for a in &segs {
            for b in &segs {
                let path = [a.clone(), b.clone()];
                let built = tokens_pointer(&path);
                assert_eq!(pointer_text(&path), built.to_string(), "{path:?}");
                assert_eq!(pointer(&path), built, "{path:?}");
                assert_eq!(
                    pointer_text(&path[..1]),
                    tokens_pointer(&path[..1]).to_string()
                );
            }
        }
    }

    /// `display` writes what joining the keys cut by `shown_entry` writes: keys at and
    /// around the cut in bytes and in characters, empty keys, indexes first, last and between.
    #[test]
    fn display_is_keys_joined_as_shown() {
        let long = |n: usize, c: char| std::iter::repeat_n(c, n).collect::<String>();
        let keys = [
            String::new(),
            "spec".to_owned(),
            long(80, 'a'),
            long(81, 'a'),
            long(79, 'é'),
            long(80, 'é'),
            long(81, 'é'),
            format!("{}é", long(80, 'a')),
            format!("{}é", long(79, 'a')),
        ];
        let mut segs: Vec<Seg> = keys.iter().map(|k| Seg::key(k)).collect();
        segs.extend([0, 7, 12345].map(Seg::Index));
        for a in &segs {
            for b in &segs {
                for c in &segs {
                    let path = [a.clone(), b.clone(), c.clone()];
                    let expected = joined(&path, |k| {
                        match k.char_indices().nth(MAX_SHOWN_ENTRY_CHARS) {
                            Some((cut, _)) => format!("{}…", &k[..cut]),
                            None => k.to_owned(),
                        }
                    });
                    assert_eq!(display(&path), expected, "{path:?}");
                }
            }
        }
        assert_eq!(display(&[Seg::Index(3)]), "[3]");
        assert_eq!(shown_entry(&long(81, 'é')), format!("{}…", long(80, 'é')));
    }

    /// `slash_separated` gives what `split('/')` gives: empty parts at either end and between
    /// two slashes, non-ASCII text, no slash at all.
    #[test]
    fn slash_separated_is_split_at_slashes() {
        let pieces = ["", "/", "a", "spec", "é", "~1", "0"];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    for d in pieces {
                        let text = format!("{a}{b}{c}{d}");
                        let split: Vec<&str> = text.split('/').collect();
                        let ours: Vec<&str> = slash_separated(&text).collect();
                        assert_eq!(ours, split, "{text:?}");
                    }
                }
            }
        }
    }

    /// `keyed` writes what `format!("{field}[{key:?}]")` writes, for every printable ASCII
    /// character and the ones Debug escapes (quotes, backslashes, control characters,
    /// non-ASCII, a combining mark), alone and inside a key.
    #[test]
    fn keyed_is_debug_quoting() {
        let mut keys: Vec<String> = (0u8..=127).map(|b| char::from(b).to_string()).collect();
        keys.extend(
            [
                "",
                "cloud.conf",
                "a b",
                "é",
                "\u{301}",
                "\u{85}",
                "\u{200b}",
                "😀",
                "a\"b\\c",
            ]
            .map(str::to_owned),
        );
        let inside: Vec<String> = keys.iter().map(|k| format!("x{k}y")).collect();
        for key in keys.iter().chain(&inside) {
            assert_eq!(keyed("data", key), format!("data[{key:?}]"), "{key:?}");
        }
    }

    #[test]
    fn push_decimal_writes_as_display() {
        for n in [
            0,
            1,
            9,
            10,
            11,
            99,
            100,
            101,
            4096,
            65535,
            1 << 40,
            usize::MAX - 1,
            usize::MAX,
        ] {
            let mut out = "x".to_owned();
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }

    /// `value_at` answers as serde_json's `pointer` for every pointer of up to three tokens
    /// over an alphabet of keys and indexes (empty, `0`, `01`, `+1`, `-1`, a huge index, keys
    /// with `~` and escapes), and for malformed pointers.
    #[test]
    fn value_at_agrees_with_serde_json_pointer() {
        let root = json!({
            "spec": {"values": {"a": [10, {"b": 2}, [3]], "": {"": 1}, "0": "zero"},
                "list": [{"0": "k"}, 1, {"": 2}], "m~n": {"a/b": 3}, "~1": 4},
            "": [[0]], "0": {"01": 5, "1": 6}, "+1": 7, "x": null,
        });
        let tokens = [
            "",
            "spec",
            "values",
            "a",
            "b",
            "0",
            "1",
            "2",
            "01",
            "+1",
            "-1",
            "18446744073709551616",
            "list",
            "m~n",
            "m~0n",
            "a~1b",
            "~1",
            "~01",
            "x",
            "zero",
            "é",
        ];
        let mut pointers = vec![
            String::new(),
            "/".to_owned(),
            "spec".to_owned(),
            "//".to_owned(),
        ];
        for a in tokens {
            pointers.push(format!("/{a}"));
            for b in tokens {
                pointers.push(format!("/{a}/{b}"));
                for c in tokens {
                    pointers.push(format!("/{a}/{b}/{c}"));
                }
            }
        }
        let mut found = 0;
        for p in &pointers {
            assert_eq!(value_at(&root, p), root.pointer(p), "{p:?}");
            found += usize::from(root.pointer(p).is_some());
        }
        // The alphabet reaches values at every depth, not only misses.
        assert!(found >= 20, "{found} pointers found a value");
    }
}
