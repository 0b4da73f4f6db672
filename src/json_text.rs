//! JSON strings written as `serde_json` writes them, found a word at a time.
//!
//! Every answer and every JSON log line is mostly text that needs no escape: a cloud config
//! inside a patch, a finding's warning, a uid. `serde_json` looks at such text one byte at a
//! time through a 256-entry table (`format_escaped_str`), which made escaping the largest
//! single cost of encoding a patched answer (BENCHMARKS.md, "Where a review's instructions
//! go"). This module writes the same bytes but looks at eight bytes at once for the three
//! things that need an escape (a control character, `"` and `\`), and copies each run
//! between them whole. The escapes themselves are `serde_json`'s: `\"`, `\\`, `\b`, `\t`,
//! `\n`, `\f`, `\r`, and `\u00xx` (lower-case hex) for the other control characters;
//! `tests::every_byte_and_every_offset_is_escaped_as_serde_json_escapes_it` pins that.
//!
//! The same word test finds the first of a few structural bytes (`find_any`): the decoder
//! counts braces in a review's text with it.

use std::fmt;

/// A word with every byte set to `byte`.
const fn splat(byte: u8) -> u64 {
    u64::from_le_bytes([byte; 8])
}

const ONES: u64 = splat(0x01);
const HIGHS: u64 = splat(0x80);

/// The high bit of every byte of `word` that is zero. Exact for the lowest such byte (a
/// borrow only carries upward, so a bit above it may be set falsely, never one below).
const fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(ONES) & !word & HIGHS
}

/// The high bit of every byte of `word` below 0x20 (a control character), exact for the
/// lowest such byte as [`zero_bytes`] is; bytes of 0x80 and above are never flagged.
const fn control_bytes(word: u64) -> u64 {
    word.wrapping_sub(splat(0x20)) & !word & HIGHS
}

/// Whether `byte` must be escaped inside a JSON string.
const fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Index of the first byte at or after `from` that `flags` flags in its word (read
/// little-endian, so the lowest flag is the first byte in memory) or, in the last few bytes,
/// that `is` holds for.
fn first_flagged(
    bytes: &[u8],
    from: usize,
    flags: impl Fn(u64) -> u64,
    is: impl Fn(u8) -> bool,
) -> Option<usize> {
    let rest = bytes.get(from..)?;
    let mut words = rest.chunks_exact(8);
    let mut at = from;
    for chunk in words.by_ref() {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(chunk);
        let flagged = flags(u64::from_le_bytes(eight));
        if flagged != 0 {
            // The flag is the high bit of its byte: byte k holds bits 8k..8k+7.
            return Some(at + flagged.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| is(b))
        .map(|i| at + i)
}

/// Index of the first byte at or after `from` that must be escaped.
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    first_flagged(
        bytes,
        from,
        |word| {
            control_bytes(word) | zero_bytes(word ^ splat(b'"')) | zero_bytes(word ^ splat(b'\\'))
        },
        needs_escape,
    )
}

/// Index of the first byte at or after `from` that is one of `needles`, eight bytes at a
/// time: the structural bytes a scan of JSON text looks for (a quote, a brace).
pub(crate) fn find_any<const N: usize>(
    bytes: &[u8],
    from: usize,
    needles: [u8; N],
) -> Option<usize> {
    first_flagged(
        bytes,
        from,
        |word| {
            needles
                .iter()
                .fold(0, |flags, &needle| flags | zero_bytes(word ^ splat(needle)))
        },
        |b| needles.contains(&b),
    )
}

/// The escape of `byte` (one that [`needs_escape`]), as `serde_json` writes it.
fn escape_of(byte: u8) -> Escape {
    match byte {
        b'"' => Escape::Short("\\\""),
        b'\\' => Escape::Short("\\\\"),
        0x08 => Escape::Short("\\b"),
        b'\t' => Escape::Short("\\t"),
        b'\n' => Escape::Short("\\n"),
        0x0c => Escape::Short("\\f"),
        b'\r' => Escape::Short("\\r"),
        other => Escape::Unicode(other),
    }
}

enum Escape {
    Short(&'static str),
    /// `\u00xx`.
    Unicode(u8),
}

/// Writes `text` escaped as the contents of a JSON string (no quotes).
pub fn write_escaped<W: fmt::Write + ?Sized>(out: &mut W, text: &str) -> fmt::Result {
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(at) = next_escape(bytes, start) {
        // `at` is the index of an ASCII byte, so a character boundary.
        out.write_str(text.get(start..at).unwrap_or_default())?;
        match escape_of(bytes[at]) {
            Escape::Short(s) => out.write_str(s)?,
            Escape::Unicode(b) => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.write_str("\\u00")?;
                out.write_char(char::from(HEX[usize::from(b >> 4)]))?;
                out.write_char(char::from(HEX[usize::from(b & 0xf)]))?;
            }
        }
        start = at + 1;
    }
    out.write_str(text.get(start..).unwrap_or_default())
}

/// Appends `text` to `out` as a quoted JSON string.
pub fn push_quoted(out: &mut String, text: &str) {
    out.reserve(text.len() + 2);
    out.push('"');
    // Writing into a `String` cannot fail.
    let _ = write_escaped(out, text);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(text: &str) -> String {
        let mut out = String::new();
        push_quoted(&mut out, text);
        out
    }

    #[test]
    fn every_byte_and_every_offset_is_escaped_as_serde_json_escapes_it() {
        // Every ASCII byte, at every position of a text long enough to cross two words, and
        // next to multi-byte characters.
        for byte in 0u8..=0xff {
            for at in 0..20 {
                for filler in ["a", "é", "\u{1F600}"] {
                    let mut text: String = filler.repeat(at);
                    text.push(char::from(byte));
                    text.push_str(&filler.repeat(19 - at));
                    assert_eq!(
                        quoted(&text),
                        serde_json::to_string(&text).unwrap(),
                        "byte {byte:#04x} at {at} among {filler:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn texts_without_escapes_and_with_many_are_written_alike() {
        let cases = [
            String::new(),
            "plain".to_owned(),
            "[Global]\nauth-url=http://k:5000/v3\n\"quoted\" \\ back\tslash\r\n".repeat(40),
            "\u{7f}\u{80}\u{ff}\u{2028}\u{2029}\u{fffd}".to_owned(),
            "\"\"\"\"\"\"\"\"\"\\\\\\\\\\\\\\\\\u{1}\u{1f}".to_owned(),
            "x".repeat(1000) + "\n",
        ];
        for text in &cases {
            assert_eq!(quoted(text), serde_json::to_string(text).unwrap());
        }
    }

    #[test]
    fn pseudo_random_texts_match_serde_json() {
        // A fixed xorshift stream: reproducible, and covers mixes no list names.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let alphabet = [
            'a', '"', '\\', '\n', '\u{0}', '\u{1b}', 'é', '€', ' ', '\u{7f}', 'z',
        ];
        for _ in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = usize::try_from(state % 40).unwrap();
            let text: String = (0..len)
                .map(|i| {
                    let pick = (state >> (i % 56)) as usize % alphabet.len();
                    alphabet[pick]
                })
                .collect();
            assert_eq!(
                quoted(&text),
                serde_json::to_string(&text).unwrap(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn the_word_tests_find_what_they_look_for() {
        assert_ne!(control_bytes(u64::from_le_bytes(*b"abcdefg\n")), 0);
        assert_ne!(control_bytes(u64::from_le_bytes(*b"\x1fbcdefgh")), 0);
        assert_eq!(control_bytes(u64::from_le_bytes(*b"  ~~\x7f\x80\xff!")), 0);
        assert_ne!(zero_bytes(u64::from_le_bytes(*b"abc\0efgh")), 0);
        assert_eq!(zero_bytes(u64::from_le_bytes(*b"\x01\x80\xffabcde")), 0);
        assert_eq!(next_escape(b"abcdefghijklmnop\"", 0), Some(16));
        assert_eq!(next_escape(b"abcdefghijklmnop\"", 17), None);
        assert_eq!(next_escape(b"\\", 0), Some(0));
        assert_eq!(next_escape(b"ab\\cd", 3), None);
    }
}
