//! Character classes and case folding exactly as gcfg (Go) sees them.
//!
//! gcfg identifiers use Go's `unicode.IsLetter` / `unicode.IsDigit`, and names are matched with
//! Go's `strings.EqualFold` (simple case-folding orbits). Rust's `char::is_alphabetic` and
//! `to_lowercase` answer different questions, so the tables in `unicode_tables.rs` are generated
//! from Go (see `tests/gcfg-oracle/unicode-tables`).

use std::cmp::Ordering;

use super::unicode_tables::{DIGIT, FOLD, LETTER};

fn in_ranges(table: &[(u32, u32)], c: u32) -> bool {
    // Index of the first range whose start is > c; the candidate is the one before it.
    let idx = table.partition_point(|&(lo, _)| lo <= c);
    idx.checked_sub(1)
        .and_then(|i| table.get(i))
        .is_some_and(|&(_, hi)| c <= hi)
}

/// gcfg's `isLetter`: ASCII letters, or a non-ASCII rune with `unicode.IsLetter`.
#[inline]
pub(crate) fn is_letter(c: char) -> bool {
    c.is_ascii_alphabetic() || (!c.is_ascii() && in_ranges(LETTER, u32::from(c)))
}

/// gcfg's `isDigit`: ASCII digits, or a non-ASCII rune with `unicode.IsDigit`.
#[inline]
pub(crate) fn is_digit(c: char) -> bool {
    c.is_ascii_digit() || (!c.is_ascii() && in_ranges(DIGIT, u32::from(c)))
}

/// True for characters that may continue a gcfg identifier.
pub(crate) fn is_ident_char(c: char) -> bool {
    is_letter(c) || is_digit(c) || c == '-'
}

/// The ASCII bytes that continue a gcfg identifier (ASCII letters, digits and `-`), as a table:
/// one look-up per byte of a name instead of three range compares.
static IDENT_ASCII: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        table[i] = b.is_ascii_alphanumeric() || b == b'-';
        i += 1;
    }
    table
};

/// True for an ASCII letter, digit or `-` (an ASCII byte that continues a gcfg identifier).
#[inline]
pub(crate) fn is_ident_ascii(b: u8) -> bool {
    IDENT_ASCII[usize::from(b)]
}

/// True if `s` is a gcfg identifier (section or variable name).
pub(crate) fn is_identifier(s: &str) -> bool {
    if s.is_ascii() {
        // The same test on bytes: an ASCII character is a letter or digit for gcfg exactly
        // when it is an ASCII one.
        let bytes = s.as_bytes();
        return bytes.first().is_some_and(u8::is_ascii_alphabetic)
            && bytes.iter().all(|&b| is_ident_ascii(b));
    }
    let mut chars = s.chars();
    chars.next().is_some_and(is_letter) && chars.all(is_ident_char)
}

/// The smallest member of `c`'s simple case-folding orbit.
fn fold_min(c: char) -> u32 {
    let cp = u32::from(c);
    let idx = FOLD.partition_point(|&(lo, _, _, _)| lo <= cp);
    let Some(&(lo, hi, step, delta)) = idx.checked_sub(1).and_then(|i| FOLD.get(i)) else {
        return cp;
    };
    if cp > hi || step == 0 || (cp - lo) % step != 0 {
        return cp;
    }
    cp.checked_add_signed(delta).unwrap_or(cp)
}

/// Go's `strings.EqualFold`: equal under Unicode simple case folding.
pub fn eq_fold(a: &str, b: &str) -> bool {
    // One pass while both are ASCII, exact: the only non-ASCII members of an ASCII letter's
    // folding orbit are U+212A (KELVIN SIGN, with k) and U+017F (LONG S, with s), so two
    // ASCII characters fold alike only when they are equal ignoring ASCII case. Most calls are
    // lookups of one key among many that differ early: they end at the first such character
    // instead of checking both texts for ASCII first.
    let (x, y) = (a.as_bytes(), b.as_bytes());
    for (i, (&p, &q)) in x.iter().zip(y).enumerate() {
        if !p.is_ascii() || !q.is_ascii() {
            // Both prefixes are ASCII, so `i` is a character boundary in both.
            return eq_fold_unicode(&a[i..], &b[i..]);
        }
        if !p.eq_ignore_ascii_case(&q) {
            return false;
        }
    }
    // One is a prefix of the other (ignoring case): equal only if neither has more.
    x.len() == y.len()
}

/// [`eq_fold`] of `s` and `name` when `name` is ASCII (the CCM's section and key names), by
/// byte length first.
///
/// The characters that fold with an ASCII character are ASCII or longer in UTF-8 (U+212A
/// KELVIN SIGN with `k`, U+017F LONG S with `s`), so a text that folds to `name` is at
/// least as long as `name` in bytes, and exactly as long only if it is ASCII itself, when
/// folding is ASCII case-insensitive equality. Longer texts take [`eq_fold`].
#[inline]
pub(crate) fn eq_fold_ascii(s: &str, name: &str) -> bool {
    debug_assert!(name.is_ascii(), "{name:?} is not ASCII");
    match s.len().cmp(&name.len()) {
        Ordering::Less => false,
        Ordering::Equal => s.as_bytes().eq_ignore_ascii_case(name.as_bytes()),
        // Longer: only a text with a character that is not ASCII can match. One that starts
        // with an ASCII character other than the name's first one (either case) cannot.
        Ordering::Greater => match (s.as_bytes().first(), name.as_bytes().first()) {
            (Some(a), Some(b)) if a.is_ascii() && !a.eq_ignore_ascii_case(b) => false,
            _ => eq_fold(s, name),
        },
    }
}

/// A summary of an ASCII name that two ASCII names equal under [`eq_fold`] share: its length
/// and its first and last bytes in ASCII lower case. Two ASCII texts fold alike exactly when
/// they are equal ignoring ASCII case (see [`eq_fold`]), which keeps all three; so texts with
/// different tags never match, and a lookup rejects most variables without reading their
/// names.
#[inline]
pub(crate) const fn ascii_fold_tag(name: &[u8]) -> u64 {
    // A `const fn`, so that the tags of the known keys are computed at compile time.
    let first = match name.first() {
        Some(b) => b.to_ascii_lowercase() as u64,
        None => 0,
    };
    let last = match name.last() {
        Some(b) => b.to_ascii_lowercase() as u64,
        None => 0,
    };
    ((name.len() as u64) << 16) | (first << 8) | last
}

/// A name that many texts are compared with as [`eq_fold`] does (a lookup against every
/// variable of a document): whether it is ASCII is found out once, for [`eq_fold_ascii`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct FoldName<'a> {
    name: &'a str,
    /// [`ascii_fold_tag`] of the name if it is ASCII.
    tag: Option<u64>,
}

impl<'a> FoldName<'a> {
    pub(crate) fn new(name: &'a str) -> Self {
        FoldName {
            name,
            tag: name.is_ascii().then(|| ascii_fold_tag(name.as_bytes())),
        }
    }

    /// `eq_fold(s, name)`.
    #[inline]
    pub(crate) fn matches(&self, s: &str) -> bool {
        if self.tag.is_some() {
            eq_fold_ascii(s, self.name)
        } else {
            eq_fold(s, self.name)
        }
    }

    /// False only if a text with [`ascii_fold_tag`] `text_tag` (`None`: a text that is not
    /// ASCII) cannot match: both are ASCII and their tags differ. Otherwise
    /// [`FoldName::matches`] decides.
    #[inline]
    pub(crate) fn may_match(&self, text_tag: Option<u64>) -> bool {
        match (self.tag, text_tag) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
    }
}

/// [`eq_fold`] without the ASCII fast path.
fn eq_fold_unicode(a: &str, b: &str) -> bool {
    let mut ai = a.chars();
    let mut bi = b.chars();
    loop {
        match (ai.next(), bi.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) => {
                if x != y && fold_min(x) != fold_min(y) {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

/// Go's `unicode.IsSpace` (used by `strings.TrimSpace`).
pub(crate) fn is_go_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n'
            | '\u{0B}'
            | '\u{0C}'
            | '\r'
            | ' '
            | '\u{85}'
            | '\u{A0}'
            | '\u{1680}'
            | '\u{2000}'
            ..='\u{200A}' | '\u{2028}' | '\u{2029}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
    )
}

/// Go's `strings.TrimSpace`.
pub(crate) fn go_trim_space(s: &str) -> &str {
    s.trim_matches(is_go_space)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_fast_path_agrees_with_unicode_folding() {
        for a in 0u8..128 {
            for b in 0u8..128 {
                let (a, b) = (char::from(a).to_string(), char::from(b).to_string());
                assert_eq!(eq_fold(&a, &b), eq_fold_unicode(&a, &b), "{a:?} vs {b:?}");
            }
        }
    }

    /// The byte-wise pass agrees with folding character by character on generated pairs of
    /// texts that mix ASCII with the characters whose folds cross into it (KELVIN SIGN, LONG
    /// S) or out of it, of equal and of different lengths, with the first non-ASCII
    /// character anywhere.
    #[test]
    fn ascii_prefix_pass_agrees_with_unicode_folding() {
        let alphabet: Vec<char> = "kKsSaA-_1 \u{212A}\u{17F}éÉßẞσΣςıİ中".chars().collect();
        let mut next = crate::test_rng::lcg(0xf01d);
        let mut equal = 0;
        for _ in 0..50_000 {
            let a: String = crate::test_rng::text_of(&mut next, &alphabet, 6);
            // Half the pairs: `a` with some characters swapped for a fold partner, so that
            // equal pairs are common.
            let b: String = if next().is_multiple_of(2) {
                a.chars()
                    .map(|c| match (c, next() % 3) {
                        ('k', 0) => '\u{212A}',
                        ('s', 0) => '\u{17F}',
                        ('ς', 0) => 'Σ',
                        (c, 1) => c.to_ascii_uppercase(),
                        (c, _) => c,
                    })
                    .collect()
            } else {
                crate::test_rng::text_of(&mut next, &alphabet, 6)
            };
            let expected = eq_fold_unicode(&a, &b);
            assert_eq!(eq_fold(&a, &b), expected, "{a:?} vs {b:?}");
            equal += usize::from(expected);
        }
        assert!(equal > 10_000, "{equal}");
    }

    /// The length-first comparison against an ASCII name agrees with folding character by
    /// character, for texts of every length around the name's and with the characters that
    /// fold into ASCII (KELVIN SIGN, LONG S) or look like it.
    #[test]
    fn ascii_name_comparison_agrees_with_unicode_folding() {
        let alphabet: Vec<char> = "ksKSaA-1\u{212A}\u{17F}éßıİ中".chars().collect();
        let names = ["", "k", "s", "ks", "key", "Global", "use-octavia", "a-1"];
        let mut next = crate::test_rng::lcg(0x31);
        let mut equal = 0;
        for _ in 0..50_000 {
            let name = names[next() % names.len()];
            // Half the texts: the name with some characters swapped for a fold partner.
            let text: String = if next().is_multiple_of(2) {
                name.chars()
                    .map(|c| match (c, next() % 3) {
                        ('k' | 'K', 0) => '\u{212A}',
                        ('s' | 'S', 0) => '\u{17F}',
                        (c, 1) => c.to_ascii_uppercase(),
                        (c, _) => c,
                    })
                    .collect()
            } else {
                crate::test_rng::text_of(&mut next, &alphabet, 5)
            };
            let expected = eq_fold_unicode(&text, name);
            assert_eq!(eq_fold_ascii(&text, name), expected, "{text:?} vs {name:?}");
            assert_eq!(FoldName::new(name).matches(&text), expected, "{text:?}");
            equal += usize::from(expected);
        }
        assert!(equal > 10_000, "{equal}");
        for _ in 0..50_000 {
            // Tags never reject a text that folds alike: for ASCII texts, the tag of the text
            // is the name's whenever they match; any other text is never rejected.
            let name = names[next() % names.len()];
            let text: String = crate::test_rng::text_of(&mut next, &alphabet, 5);
            let tag = text.is_ascii().then(|| ascii_fold_tag(text.as_bytes()));
            let fold = FoldName::new(name);
            if eq_fold_unicode(&text, name) || tag.is_none() {
                assert!(fold.may_match(tag), "{text:?} vs {name:?}");
            }
        }
        // Names that differ in length, first or last letter (any case) have other tags; equal
        // ones ignoring ASCII case the same one.
        let tag = |s: &str| ascii_fold_tag(s.as_bytes());
        assert_eq!(tag("Global"), tag("gLOBAL"));
        assert_ne!(tag("Global"), tag("Globe"));
        assert_ne!(tag("Global"), tag("Hlobal"));
        assert_ne!(tag("Global"), tag("Globak"));
        assert_ne!(tag("ab"), tag("ba"));
        assert_ne!(tag("ab"), tag("axb"));
        assert!(!FoldName::new("region").may_match(Some(tag("regions"))));
        assert!(FoldName::new("\u{212A}ey").may_match(Some(tag("KEY"))));
        // A name that is not ASCII is compared by eq_fold.
        assert!(FoldName::new("\u{212A}ey").matches("KEY"));
        assert!(FoldName::new("ſ").matches("S"));
        assert!(!FoldName::new("é").matches("e"));
    }

    #[test]
    fn letters_and_digits_follow_go() {
        for c in ['a', 'Z', 'é', 'ſ', '\u{212A}', '中', 'д', 'ω', 'ǅ'] {
            assert!(is_letter(c), "{c:?}");
        }
        for c in ['_', '.', '-', '1', '\u{301}', '\u{FEFF}', '\u{2160}', ' '] {
            assert!(!is_letter(c), "{c:?}");
        }
        for c in ['0', '9', '\u{663}', '\u{FF11}'] {
            assert!(is_digit(c), "{c:?}");
        }
        // Nl / No are not digits for Go.
        for c in ['\u{2160}', '\u{B2}', 'a'] {
            assert!(!is_digit(c), "{c:?}");
        }
    }

    #[test]
    fn equal_fold_matches_go() {
        assert!(eq_fold("LoadBalancer", "loadbalancer"));
        assert!(eq_fold(
            "provider-requireſ-serial-api-calls",
            "PROVIDER-REQUIRES-SERIAL-API-CALLS"
        ));
        assert!(eq_fold("\u{212A}ey", "key"));
        assert!(eq_fold("Σσς", "σΣΣ"));
        assert!(eq_fold("ß", "ẞ"));
        assert!(!eq_fold("ı", "i"));
        assert!(!eq_fold("İ", "i"));
        assert!(!eq_fold("ab", "abc"));
        assert!(!eq_fold("a-b", "a_b"));
        assert!(eq_fold("", ""));
    }

    /// The table holds exactly the ASCII letters, digits and `-`; every other byte, and every
    /// byte of a multi-byte character, is out.
    #[test]
    fn identifier_byte_table() {
        for b in 0..=u8::MAX {
            assert_eq!(
                is_ident_ascii(b),
                b.is_ascii_alphanumeric() || b == b'-',
                "{b:#x}"
            );
        }
    }

    #[test]
    fn identifiers() {
        assert!(is_identifier("provider-requires-serial-api-calls"));
        assert!(is_identifier("中文"));
        assert!(is_identifier("a1-"));
        assert!(!is_identifier("1a"));
        assert!(!is_identifier("-a"));
        assert!(!is_identifier("a_b"));
        assert!(!is_identifier(""));
    }

    #[test]
    fn trim_space() {
        assert_eq!(go_trim_space("\u{A0} 5\t\u{3000}"), "5");
        assert_eq!(go_trim_space("\u{200B}5"), "\u{200B}5");
    }
}
