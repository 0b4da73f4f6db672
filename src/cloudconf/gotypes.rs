//! The Go conversions gcfg applies to values: integers (gcfg `types.ParseInt` on top of
//! `fmt.Sscanf`) and durations (`time.ParseDuration`, the CCM's `MyDuration`).

use super::unicode::go_trim_space;

/// Why a value is not a valid integer for gcfg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntError {
    /// Empty (after trimming blanks).
    Empty,
    /// A sign on an unsigned field (gcfg/fmt accept no sign for `uint`).
    Signed,
    /// Not decimal or `0x`-prefixed hexadecimal digits, or trailing characters.
    Syntax,
    /// Outside the 64-bit range.
    Range,
}

/// Why a value is not a valid Go duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationError {
    /// A number without a unit (`5`); only `0` may omit it.
    MissingUnit,
    /// A unit other than `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`.
    UnknownUnit,
    /// Anything else (empty, no digits, overflow, stray characters).
    Invalid,
}

/// How gcfg reads an `int` (`signed`) or `uint` field: Go `strings.TrimSpace`, then decimal, or
/// hexadecimal when the text starts with `0x` / `-0x` (`010` is ten, not octal). Returns the
/// value as `i128` so both ranges fit.
pub fn parse_gcfg_int(value: &str, signed: bool) -> Result<i128, IntError> {
    let t = go_trim_space(value);
    if t.is_empty() {
        return Err(IntError::Empty);
    }
    let hex = t.starts_with("0x") || t.starts_with("-0x");
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') if signed => (true, t.get(1..).unwrap_or_default()),
        Some(b'+') if signed && !hex => (false, t.get(1..).unwrap_or_default()),
        Some(b'-' | b'+') => return Err(IntError::Signed),
        _ => (false, t),
    };
    let magnitude: u128 = if hex {
        // fmt: "0x" then hex digits and underscores; strconv base 0 then checks underscores.
        let digits = body.get(2..).unwrap_or_default();
        if !digits.bytes().all(|b| b.is_ascii_hexdigit() || b == b'_') {
            return Err(IntError::Syntax);
        }
        if digits.is_empty() || !underscores_ok(digits) {
            return Err(IntError::Syntax);
        }
        accumulate(digits, 16)?
    } else {
        if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
            return Err(IntError::Syntax);
        }
        accumulate(body, 10)?
    };
    let v = if neg {
        -(magnitude as i128)
    } else {
        magnitude as i128
    };
    let ok = if signed {
        (i128::from(i64::MIN)..=i128::from(i64::MAX)).contains(&v)
    } else {
        (0..=i128::from(u64::MAX)).contains(&v)
    };
    if ok { Ok(v) } else { Err(IntError::Range) }
}

/// strconv's rule after a `0x` prefix: `_` only between digits (or right after the prefix).
fn underscores_ok(digits: &str) -> bool {
    let mut prev_digit = true; // the prefix counts as a digit
    for b in digits.bytes() {
        if b == b'_' {
            if !prev_digit {
                return false;
            }
            prev_digit = false;
        } else {
            prev_digit = true;
        }
    }
    prev_digit
}

fn accumulate(digits: &str, base: u32) -> Result<u128, IntError> {
    let mut n: u128 = 0;
    for c in digits.chars().filter(|&c| c != '_') {
        let d = c.to_digit(base).ok_or(IntError::Syntax)?;
        n = n
            .checked_mul(u128::from(base))
            .and_then(|n| n.checked_add(u128::from(d)))
            .filter(|&n| n <= 1 << 64)
            .ok_or(IntError::Range)?;
    }
    Ok(n)
}

/// Go's `time.ParseDuration` (Go 1.19), returning nanoseconds.
///
/// Overflow is checked the way Go checks it, which is not "the total fits in an i64": each
/// part's integer, fraction and `value * unit` are checked against 2^63, but the parts are
/// summed into a `uint64` with plain `+`, which wraps, and only then compared with 2^63. So
/// `9223372036854775808ns9223372036854775808ns` (2^63 + 2^63 = 2^64) wraps to 0 and Go
/// accepts it as 0 (domain-facts §9.4). A positive total must be at most 2^63 - 1 at the end;
/// a negative one may be 2^63 (`-Duration(1<<63)` is the smallest i64).
pub fn parse_go_duration(value: &str) -> Result<i64, DurationError> {
    const LIMIT: u64 = 1 << 63;
    let mut s = value.as_bytes();
    let mut neg = false;
    if let Some(&c @ (b'-' | b'+')) = s.first() {
        neg = c == b'-';
        s = s.get(1..).unwrap_or_default();
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(DurationError::Invalid);
    }
    let mut d: u64 = 0;
    while let Some(&first) = s.first() {
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(DurationError::Invalid);
        }
        // [0-9]*
        let int_len = s.iter().take_while(|b| b.is_ascii_digit()).count();
        let mut v: u64 = 0;
        for &b in s.get(..int_len).unwrap_or_default() {
            if v > LIMIT / 10 {
                return Err(DurationError::Invalid);
            }
            v = v * 10 + u64::from(b - b'0');
            if v > LIMIT {
                return Err(DurationError::Invalid);
            }
        }
        let pre = int_len > 0;
        s = s.get(int_len..).unwrap_or_default();
        // (\.[0-9]*)?
        let mut post = false;
        let mut f: u64 = 0;
        let mut scale: f64 = 1.0;
        if s.first() == Some(&b'.') {
            s = s.get(1..).unwrap_or_default();
            let frac_len = s.iter().take_while(|b| b.is_ascii_digit()).count();
            let mut overflow = false;
            for &b in s.get(..frac_len).unwrap_or_default() {
                if overflow {
                    continue;
                }
                if f > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = f * 10 + u64::from(b - b'0');
                if y > LIMIT {
                    overflow = true;
                    continue;
                }
                f = y;
                scale *= 10.0;
            }
            post = frac_len > 0;
            s = s.get(frac_len..).unwrap_or_default();
        }
        if !pre && !post {
            return Err(DurationError::Invalid);
        }
        // Unit: up to the next '.' or digit.
        let unit_len = s
            .iter()
            .take_while(|&&b| !(b == b'.' || b.is_ascii_digit()))
            .count();
        if unit_len == 0 {
            return Err(DurationError::MissingUnit);
        }
        let unit: u64 = match s.get(..unit_len).unwrap_or_default() {
            b"ns" => 1,
            // us, µs (U+00B5), μs (U+03BC)
            b"us" | b"\xC2\xB5s" | b"\xCE\xBCs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => return Err(DurationError::UnknownUnit),
        };
        s = s.get(unit_len..).unwrap_or_default();
        if v > LIMIT / unit {
            return Err(DurationError::Invalid);
        }
        v *= unit;
        if f > 0 {
            // Go: v += uint64(float64(f) * (float64(unit) / scale)), truncating.
            // v <= 2^63 and the fraction adds at most one hour, so this cannot wrap; Go's
            // `+=` is kept as a wrapping add all the same.
            let extra = (f as f64 * (unit as f64 / scale)) as u64;
            v = v.wrapping_add(extra);
            if v > LIMIT {
                return Err(DurationError::Invalid);
            }
        }
        // Go: `d += v` on uint64, then `if d > 1<<63`. Both are at most 2^63 here, so the sum
        // wraps only when both are exactly 2^63, to 0, and Go goes on without an error.
        d = d.wrapping_add(v);
        if d > LIMIT {
            return Err(DurationError::Invalid);
        }
    }
    if neg {
        // Go: `-Duration(d)`; d <= 2^63, so the negation fits (-2^63 included).
        return Ok(0i64.wrapping_sub_unsigned(d));
    }
    // Go: `if d > 1<<63-1` for a positive duration.
    i64::try_from(d).map_err(|_| DurationError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints() {
        assert_eq!(parse_gcfg_int("10", true), Ok(10));
        assert_eq!(parse_gcfg_int(" 010 ", true), Ok(10));
        assert_eq!(parse_gcfg_int("0x1F", true), Ok(31));
        assert_eq!(parse_gcfg_int("-0x1f", true), Ok(-31));
        assert_eq!(parse_gcfg_int("0x_1", false), Ok(1));
        assert_eq!(parse_gcfg_int("+5", true), Ok(5));
        assert_eq!(parse_gcfg_int("-5", true), Ok(-5));
        assert_eq!(parse_gcfg_int("-5", false), Err(IntError::Signed));
        assert_eq!(parse_gcfg_int("+5", false), Err(IntError::Signed));
        assert_eq!(parse_gcfg_int("-0x5", false), Err(IntError::Signed));
        assert_eq!(parse_gcfg_int("0.2", true), Err(IntError::Syntax));
        assert_eq!(parse_gcfg_int("1e3", true), Err(IntError::Syntax));
        assert_eq!(parse_gcfg_int("0X10", true), Err(IntError::Syntax));
        assert_eq!(parse_gcfg_int("0x", true), Err(IntError::Syntax));
        assert_eq!(parse_gcfg_int("0x_", true), Err(IntError::Syntax));
        assert_eq!(parse_gcfg_int("0x1__2", true), Err(IntError::Syntax));
        assert_eq!(parse_gcfg_int("1_000", true), Err(IntError::Syntax));
        assert_eq!(parse_gcfg_int("", true), Err(IntError::Empty));
        assert_eq!(parse_gcfg_int("5 6", true), Err(IntError::Syntax));
        assert_eq!(
            parse_gcfg_int("18446744073709551615", false),
            Ok(18446744073709551615)
        );
        assert_eq!(
            parse_gcfg_int("18446744073709551616", false),
            Err(IntError::Range)
        );
        assert_eq!(
            parse_gcfg_int("9223372036854775808", true),
            Err(IntError::Range)
        );
        assert_eq!(
            parse_gcfg_int("-9223372036854775808", true),
            Ok(-9223372036854775808)
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_go_duration("5s"), Ok(5_000_000_000));
        assert_eq!(parse_go_duration("0"), Ok(0));
        assert_eq!(parse_go_duration("-0"), Ok(0));
        assert_eq!(parse_go_duration("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(parse_go_duration(".5s"), Ok(500_000_000));
        assert_eq!(parse_go_duration("1.5µs"), Ok(1_500));
        assert_eq!(parse_go_duration("-5s"), Ok(-5_000_000_000));
        assert_eq!(parse_go_duration("5"), Err(DurationError::MissingUnit));
        assert_eq!(parse_go_duration("5 s"), Err(DurationError::UnknownUnit));
        assert_eq!(parse_go_duration("5S"), Err(DurationError::UnknownUnit));
        assert_eq!(parse_go_duration(""), Err(DurationError::Invalid));
        assert_eq!(parse_go_duration(".s"), Err(DurationError::Invalid));
        assert_eq!(parse_go_duration(" 5s"), Err(DurationError::Invalid));
        assert_eq!(
            parse_go_duration("9999999999999999h"),
            Err(DurationError::Invalid)
        );
    }

    /// Results of Go 1.19's `time.ParseDuration` on the overflow edges (run with `go run`,
    /// printing `int64(d), err`): the sum of the parts wraps in a uint64 without an error.
    #[test]
    fn durations_wrap_like_go() {
        const TWO_63: &str = "9223372036854775808ns";
        let cases: &[(String, Result<i64, DurationError>)] = &[
            (format!("{TWO_63}{TWO_63}"), Ok(0)),
            (format!("-{TWO_63}{TWO_63}"), Ok(0)),
            (format!("{TWO_63}0s{TWO_63}"), Ok(0)),
            (format!("{TWO_63}{TWO_63}1ns"), Ok(1)),
            (
                format!("{TWO_63}{TWO_63}{TWO_63}"),
                Err(DurationError::Invalid),
            ),
            (format!("-{TWO_63}{TWO_63}{TWO_63}"), Ok(i64::MIN)),
            (
                format!("{TWO_63}9223372036854775807ns"),
                Err(DurationError::Invalid),
            ),
            (TWO_63.to_owned(), Err(DurationError::Invalid)),
            (format!("-{TWO_63}"), Ok(i64::MIN)),
            (
                "2562047h47m16.854775808s2562047h47m16.854775808s".to_owned(),
                Err(DurationError::Invalid),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), *want, "{text}");
        }
    }
}
