//! Paths inside an object (`yaml::Seg`s) as JSON pointers and as messages show them.

use jsonptr::PointerBuf;
use serde_json::Value;

use crate::yaml::Seg;

/// A display path: `spec.sources[1].helm.values` (a key longer than 80 characters is cut,
/// with `…`).
pub fn display(path: &[Seg]) -> String {
    joined(path, shown_entry)
}

/// `path` with its keys joined by `.`, each written by `key`, and list indexes as `[i]`:
/// the dotted form of a display path and of a `--set` key.
pub fn joined(path: &[Seg], key: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&key(k));
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The JSON pointer of a path.
pub fn pointer(path: &[Seg]) -> PointerBuf {
    PointerBuf::from_tokens(path.iter().map(|s| match s {
        Seg::Key(k) => k.clone(),
        Seg::Index(i) => i.to_string(),
    }))
}

/// `root.pointer(pointer)` (RFC 6901, as serde_json reads it), without the two `String`s
/// serde_json allocates per token to unescape `~1` and `~0`: the pointers the sites read are
/// static and hold no `~`, so each token is its key as written. A pointer with `~` is left to
/// serde_json. (A values read asks this five to ten times per review; serde_json's way cost
/// 5k instructions a call.)
pub fn value_at<'a>(root: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.contains('~') {
        return root.pointer(pointer);
    }
    if pointer.is_empty() {
        return Some(root);
    }
    pointer
        .strip_prefix('/')?
        .split('/')
        .try_fold(root, |target, token| match target {
            Value::Object(map) => map.get(token),
            Value::Array(list) => list_index(token).and_then(|i| list.get(i)),
            _ => None,
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
    match key.char_indices().nth(MAX_SHOWN_ENTRY_CHARS) {
        Some((cut, _)) => format!("{}…", &key[..cut]),
        None => key.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
