//! Paths inside an object (`yaml::Seg`s) as JSON pointers and as messages show them.

use jsonptr::PointerBuf;

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
