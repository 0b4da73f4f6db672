//! Unit and property tests of the `cloudconf` module (fixtures, edits, errors, CCM schema).

use super::*;
use proptest::prelude::*;

const GCFG_TEST: &str = include_str!("../../tests/fixtures/cloudconf/gcfg_test.gcfg");
const ISSUE12: &str = include_str!("../../tests/fixtures/cloudconf/issue12.gcfg");
const NOTEPAD_BOM: &str = include_str!("../../tests/fixtures/cloudconf/notepad-bom.ini");
const CPO_CLOUD_CONFIG: &str = include_str!("../../tests/fixtures/cloudconf/cpo-cloud-config.ini");

const LB: &str = "LoadBalancer";
const SERIAL: &str = "provider-requires-serial-api-calls";

fn doc(text: &str) -> Document {
    match Document::parse(text) {
        Ok(d) => d,
        Err(e) => panic!("{text:?} should parse: {e}"),
    }
}

/// Edits of the statement forms a one-statement reread must handle: continuations, comments,
/// blank variables, CRLF, the last line without a break, values that need quoting; each edit
/// leaves the document as a whole reparse of its text reads it.
#[test]
fn statement_edits_equal_a_whole_reparse() {
    let texts = [
        "[Global]\nregion = a\n[LoadBalancer]\nlb-method = ROUND_ROBIN\n[Route]\nrouter-id = r\n",
        "[Global]\r\nregion = a ; c\r\n\r\n[LoadBalancer]\r\n  lb-method=x # c\r\n[Route]\r\n",
        "[Global]\nregion = a \\\n  b\n[LoadBalancer]\nlb-method = a\\\n b \\\n c\n; end\n",
        "[Global]\nregion\n[LoadBalancer]\nlb-method\n",
        "[Global]\nregion = \"q;x\" ; c\n[LoadBalancer]\nlb-method = m",
        "[Global]\n[LoadBalancer]\n[LoadBalancer \"sub\"]\nlb-method = s\n[loadbalancer]\nother = 1\n",
        "[Global]\nregion=a;\n[LoadBalancer]\nlb-method=#x\n",
    ];
    let edits = [
        (LB, SERIAL, "true"),
        (LB, "lb-method", "LEAST_CONNECTIONS"),
        (LB, "lb-method", "needs \"quotes\" ; # \\"),
        ("Global", "region", "b"),
        ("Global", "region", ""),
        ("Route", "router-id", "r2"),
        ("Metadata", "search-order", "configDrive"),
    ];
    for text in texts {
        for (section, key, value) in edits {
            let mut d = doc(text);
            let summary = d.try_set(section, key, value);
            let whole = doc(&d.to_text());
            let what = format!("{text:?} {section}.{key}={value:?}");
            assert!(summary.is_ok(), "{what}: {summary:?}");
            assert_eq!(d.statements(), whole.statements(), "{what}");
            assert_eq!(
                d.effective(section, None, key).and_then(|e| e.value),
                Some(value.to_owned()),
                "{what}"
            );
        }
    }
}

fn parse_err(text: &str) -> ParseError {
    match Document::parse(text) {
        Ok(_) => panic!("{text:?} should be rejected"),
        Err(e) => e,
    }
}

/// Lines with their terminators; a missing final terminator is treated as present, because
/// adding it is allowed when something is appended after the last line.
fn lines_of(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
    if let Some(last) = v.last_mut()
        && !last.ends_with('\n')
    {
        last.push('\n');
    }
    v
}

fn normalize_eol(line: &str) -> &str {
    line.trim_end_matches('\n').trim_end_matches('\r')
}

/// Asserts that an edit touched nothing but what `summary` says.
fn assert_only_edit(before: &str, after: &str, summary: EditSummary) {
    let old = lines_of(before);
    let new = lines_of(after);
    let at = summary.line.saturating_sub(1);
    match summary.kind {
        EditKind::Inserted => {
            assert_eq!(new.len(), old.len() + 1, "one line inserted:\n{after}");
            let mut rest = new.clone();
            rest.remove(at);
            let same: Vec<_> = rest.iter().map(|l| normalize_eol(l)).collect();
            let orig: Vec<_> = old.iter().map(|l| normalize_eol(l)).collect();
            assert_eq!(same, orig);
            // Byte-identical except possibly the line before the insertion (final newline).
            for (i, (a, b)) in rest.iter().zip(&old).enumerate() {
                if i + 1 != at {
                    assert_eq!(a, b);
                }
            }
        }
        EditKind::Replaced => {
            let removed = old.len().saturating_sub(new.len());
            for (i, l) in new.iter().enumerate() {
                if i < at {
                    assert_eq!(Some(l), old.get(i), "line {} changed", i + 1);
                } else if i > at {
                    assert_eq!(Some(l), old.get(i + removed), "line {} changed", i + 1);
                }
            }
        }
        EditKind::SectionAppended => {
            assert!(new.len() >= old.len() + 2);
            for (i, l) in old.iter().enumerate() {
                if i + 1 == old.len() {
                    assert_eq!(normalize_eol(l), normalize_eol(&new[i]));
                } else {
                    assert_eq!(l, &new[i], "line {} changed", i + 1);
                }
            }
            let tail: Vec<_> = new[old.len()..].iter().map(|l| normalize_eol(l)).collect();
            assert!(tail.len() <= 3, "{tail:?}");
            if tail.len() == 3 {
                assert_eq!(tail[0], "");
            }
        }
    }
}

/// Sets a value, checks the exact output, that nothing else changed, and idempotence.
fn set_case(before: &str, section: &str, key: &str, value: &str, expected: &str, kind: EditKind) {
    let mut d = doc(before);
    let summary = d.set(section, key, value);
    assert_eq!(d.to_text(), expected, "output of set on {before:?}");
    assert_eq!(summary.kind, kind);
    assert!(summary.changed);
    assert_only_edit(before, expected, summary);
    let reparsed = doc(expected);
    let eff = reparsed
        .effective(section, None, key)
        .expect("effective entry");
    assert_eq!(eff.value.as_deref(), Some(value));
    assert_eq!(eff.line, summary.line);
    let again = d.set(section, key, value);
    assert!(!again.changed);
    assert_eq!(again.kind, EditKind::Replaced);
    assert_eq!(d.to_text(), expected);
}

// ---------------------------------------------------------------------------------------------
// Fixtures

#[test]
fn fixtures_round_trip() {
    for text in [GCFG_TEST, ISSUE12, CPO_CLOUD_CONFIG] {
        let d = doc(text);
        assert_eq!(d.to_text(), text);
        assert_eq!(d.to_string(), text);
    }
}

#[test]
fn bom_fixture_is_rejected_like_gcfg_read_into() {
    let e = parse_err(NOTEPAD_BOM);
    assert_eq!((e.line, e.column), (1, 1));
    assert_eq!(e.message, "illegal character U+FEFF");
    assert_eq!(e.to_string(), "line 1, column 1: illegal character U+FEFF");
    assert!(!would_start(NOTEPAD_BOM));
    // Without the BOM the same text is fine (Unicode names, comment after the value).
    let without = NOTEPAD_BOM.trim_start_matches('\u{FEFF}');
    let d = doc(without);
    let e = d.entries().next().expect("one entry");
    assert_eq!(e.value.as_deref(), Some("丁"));
    assert_eq!(d.sections().next().map(|h| h.name), Some("甲"));
}

#[test]
fn fixture_values() {
    let d = doc(GCFG_TEST);
    let e = d.effective("SECTION", None, "Name").expect("name");
    assert_eq!(e.value.as_deref(), Some("value"));
    assert_eq!(
        (e.line, e.column, e.last_line, e.section_line),
        (3, 1, 3, 2)
    );
    assert!(!e.has_truncating_comment);

    let d = doc(ISSUE12);
    let e = d.effective("section", None, "name").expect("name");
    assert_eq!(e.value.as_deref(), Some("\"value\""));
    assert_eq!(e.raw_value, Some("\\\"value\\\""));
    assert_eq!(e.column, 2);

    let d = doc(CPO_CLOUD_CONFIG);
    let get = |s: &str, k: &str| d.effective(s, None, k).and_then(|e| e.value);
    assert_eq!(get("Global", "username").as_deref(), Some("admin"));
    assert_eq!(get("global", "REGION").as_deref(), Some("RegionOne"));
    assert_eq!(get("Global", "tenant-id").as_deref(), Some(""));
    assert_eq!(get("Global", "user-id"), None); // only in a comment
    let report = check(&d);
    assert!(report.fatal.is_empty(), "{report:?}");
    assert!(report.ignored.is_empty(), "{report:?}");
    assert!(!report.serial_calls);
    let headers: Vec<_> = d.sections().map(|h| (h.name, h.line)).collect();
    assert_eq!(headers, vec![("Global", 1), ("LoadBalancer", 13)]);
}

// ---------------------------------------------------------------------------------------------
// Parsing and queries

#[test]
fn parse_error_positions() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("k=v\n", 1, 1, "expected section header"),
        (
            "[s]\r\n\r\nkey_name = 1\r\n",
            3,
            4,
            "illegal character U+005F",
        ),
        ("[s]\n; c\n[a.b]\n", 3, 3, "illegal character U+002E"),
        ("[s]\nk = \"abc\n", 2, 5, "string not terminated"),
        ("[s]\nk = \"a\\b\"\n", 2, 8, "unknown escape sequence"),
        ("[s]\nk = \"a\\\nb\"\n", 2, 8, "unknown escape sequence"),
        (
            "[s]\nk = a\\b\n",
            2,
            5,
            "unquoted '\\' must be followed by new line or double quote",
        ),
        ("[s \"\"]\n", 1, 4, "empty subsection name"),
        ("[s \"a\\tb\"]\n", 1, 7, "unknown escape sequence"),
        ("[s]\nk = a\n\0\n", 3, 1, "illegal character NUL"),
        ("[s]\nk v\n", 2, 3, "expected '='"),
        ("[s] junk\n", 1, 5, "expected EOL, EOF, or comment"),
        (
            "[s]\n\n  = v\n",
            3,
            3,
            "expected section header or variable declaration",
        ),
        // The error is reported at the start of the value, as gcfg does.
        ("[s]\nk = \"a\" \\\n  \"b\n", 2, 5, "string not terminated"),
    ];
    for &(text, line, column, message) in cases {
        let e = parse_err(text);
        assert_eq!(
            (e.line, e.column, e.message.as_str()),
            (line, column, message),
            "{text:?}"
        );
        assert!(!would_start(text));
    }
}

#[test]
fn accepted_edge_texts_round_trip() {
    for text in [
        "",
        "   ",
        "\n\n\r\n",
        "; comment only",
        "[s]",
        "[s]\nk",
        "[s] ; c\r\nk = v \\\r\n  w ; c\r\n",
        "[s\"sub\"]\n",
        "[s]\nk=\"val\" \"ue\"\t\n",
    ] {
        assert_eq!(doc(text).to_text(), text);
    }
    assert!(would_start(""));
    assert!(would_start("  \n\t\n"));
}

#[test]
fn decoding() {
    let text = "[s]\n\
                a = \"val\" \"ue\"\n\
                b = \\\"value\\\"\n\
                c = x \\\n  y\n\
                d = \"va ; lue\" # c\n\
                e = \"a\\tb\\n\\\\\\\"\"\n\
                f =   spaced  value  \n\
                g\n\
                h =\n\
                i = ab#cd\n\
                j = #secret\n\
                k = x ;c\n\
                l = \"q\";c\n\
                m = a\\\r\n b\r\n";
    let d = doc(text);
    let v = |k: &str| d.effective("s", None, k).expect(k);
    assert_eq!(v("a").value.as_deref(), Some("val ue"));
    assert_eq!(v("b").value.as_deref(), Some("\"value\""));
    assert_eq!(v("c").value.as_deref(), Some("x   y"));
    assert_eq!((v("c").line, v("c").last_line), (4, 5));
    assert_eq!(v("d").value.as_deref(), Some("va ; lue"));
    assert_eq!(v("e").value.as_deref(), Some("a\tb\n\\\""));
    assert_eq!(v("f").value.as_deref(), Some("spaced  value"));
    assert_eq!(v("g").value, None);
    assert_eq!(v("h").value.as_deref(), Some(""));
    assert_eq!(v("i").value.as_deref(), Some("ab"));
    assert!(v("i").has_truncating_comment);
    assert_eq!(v("j").value.as_deref(), Some(""));
    assert!(v("j").has_truncating_comment);
    assert!(!v("k").has_truncating_comment);
    assert!(v("l").has_truncating_comment);
    assert!(!v("h").has_truncating_comment);
    assert_eq!(v("m").value.as_deref(), Some("a b"));
}

#[test]
fn filtered_views_equal_filtering_every_entry() {
    for text in [
        GCFG_TEST,
        ISSUE12,
        CPO_CLOUD_CONFIG,
        "[s]\na = 1 ;c\nb = ${X}\nc\nd=x#y\n[t]\ne = ${Y};z\n",
    ] {
        let d = doc(text);
        let cut: Vec<(usize, String)> = d
            .entries_with_truncating_comment()
            .map(|e| (e.line, e.key.to_owned()))
            .collect();
        let cut_all: Vec<(usize, String)> = d
            .entries()
            .filter(|e| e.has_truncating_comment)
            .map(|e| (e.line, e.key.to_owned()))
            .collect();
        assert_eq!(cut, cut_all, "{text}");
        let wanted = |v: &str| v.contains('$') || v.len() == 1;
        let lines: Vec<usize> = d.lines_of_values(wanted).collect();
        let lines_all: Vec<usize> = d
            .entries()
            .filter(|e| e.value.as_deref().is_some_and(wanted))
            .map(|e| e.line)
            .collect();
        assert_eq!(lines, lines_all, "{text}");
    }
    let d = doc("[s]\na = 1 ;c\nb = ${X}\nc\nd=x#y\n[t]\ne = ${Y};z\n");
    let cut: Vec<usize> = d
        .entries_with_truncating_comment()
        .map(|e| e.line)
        .collect();
    assert_eq!(cut, [5, 7]);
    let placeholders: Vec<usize> = d.lines_of_values(|v| v.contains("${")).collect();
    assert_eq!(placeholders, [3, 7]);
}

#[test]
fn effective_and_multi_values() {
    let text = "[LoadBalancer]\nlb-method = A\n[loadbalancer \"x\"]\nlb-method = B\n\
                [LOADBALANCER]\nLB-Method = C\n[Networking]\npublic-network-name = a\n\
                public-network-name = b\n[networking]\npublic-network-name\npublic-network-name = c\n\
                [C \"Sub\"]\nk = 1\n";
    let d = doc(text);
    let e = d
        .effective("loadBalancer", None, "lb-method")
        .expect("lb-method");
    assert_eq!(
        (e.value.as_deref(), e.key, e.section, e.line),
        (Some("C"), "LB-Method", "LOADBALANCER", 6)
    );
    let e = d
        .effective("LoadBalancer", Some("x"), "lb-method")
        .expect("sub");
    assert_eq!(e.value.as_deref(), Some("B"));
    assert_eq!(e.subsection, Some("x"));
    assert!(
        d.effective("LoadBalancer", Some("X"), "lb-method")
            .is_none()
    );
    assert_eq!(
        d.values("Networking", None, "public-network-name"),
        vec!["c".to_owned()]
    );
    assert!(d.effective("c", Some("sub"), "k").is_none());
    assert!(d.effective("c", Some("Sub"), "K").is_some());
    assert_eq!(d.entries().count(), 8);
    let subs: Vec<_> = d.sections().map(|h| h.subsection).collect();
    assert_eq!(subs, vec![None, Some("x"), None, None, None, Some("Sub")]);
}

#[test]
fn subsection_escapes() {
    let d = doc("[s \"a\\\\b\\\"c\"]\nk = v\n");
    assert_eq!(
        d.sections().next().and_then(|h| h.subsection),
        Some("a\\b\"c")
    );
    assert!(d.effective("S", Some("a\\b\"c"), "k").is_some());
}

/// `parse_bool` answers as the lower-cased copy it once made, on generated texts near the
/// words (other case, non-ASCII look-alikes, extra characters).
#[test]
fn parse_bool_agrees_with_lower_casing() {
    let pieces = [
        "t", "R", "u", "E", "y", "e", "S", "o", "N", "f", "A", "l", "s", "0", "1", "ſ", "\u{212A}",
        "é", " ",
    ];
    let mut next = crate::test_rng::lcg(0x31);
    let mut known = 0;
    for _ in 0..50_000 {
        let text: String = crate::test_rng::text_of(&mut next, &pieces, 6);
        let expected = match text.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Some(true),
            "false" | "no" | "off" | "0" => Some(false),
            _ => None,
        };
        assert_eq!(parse_bool(Some(&text)), expected, "{text:?}");
        known += usize::from(expected.is_some());
    }
    assert!(known > 100, "{known}");
}

#[test]
fn parse_bool_semantics() {
    for v in ["true", "TRUE", "yes", "On", "1"] {
        assert_eq!(parse_bool(Some(v)), Some(true), "{v}");
    }
    for v in ["false", "No", "OFF", "0"] {
        assert_eq!(parse_bool(Some(v)), Some(false), "{v}");
    }
    assert_eq!(parse_bool(None), Some(true));
    for v in ["", "t", "truer", "2", "-1", "maybe", " true", "y"] {
        assert_eq!(parse_bool(Some(v)), None, "{v:?}");
    }
}

#[test]
fn debug_output_is_redacted() {
    let d = doc("[Global]\npassword = S3CRET-VALUE\n");
    let e = d.entries().next().expect("entry");
    assert!(!format!("{e:?}").contains("S3CRET"));
    assert!(!format!("{d:?}").contains("S3CRET"));
}

// ---------------------------------------------------------------------------------------------
// set()

#[test]
fn set_inserts_absent_key_in_section_style() {
    let expected = format!("{CPO_CLOUD_CONFIG}{SERIAL}=true\n");
    set_case(
        CPO_CLOUD_CONFIG,
        LB,
        SERIAL,
        "true",
        &expected,
        EditKind::Inserted,
    );
    set_case(
        "[LoadBalancer]\n\tlb-method = X\n\n[Global]\nregion=R\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\n\tlb-method = X\n\tprovider-requires-serial-api-calls = true\n\n[Global]\nregion=R\n",
        EditKind::Inserted,
    );
    // After continuation lines and comments of the last entry, before trailing comments.
    set_case(
        "[LoadBalancer]\nlb-method = a \\\n  b ; c\n; trailing\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nlb-method = a \\\n  b ; c\nprovider-requires-serial-api-calls = true\n; trailing\n",
        EditKind::Inserted,
    );
}

#[test]
fn set_replaces_existing_false() {
    set_case(
        "[LoadBalancer]\nlb-method = X\nprovider-requires-serial-api-calls = false\nlb-provider = ovn\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nlb-method = X\nprovider-requires-serial-api-calls = true\nlb-provider = ovn\n",
        EditKind::Replaced,
    );
    set_case(
        "[LoadBalancer]\nprovider-requires-serial-api-calls=\"false\"\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nprovider-requires-serial-api-calls=true\n",
        EditKind::Replaced,
    );
}

#[test]
fn set_in_differently_cased_section_keeps_spelling() {
    set_case(
        "[loadbalancer]\nPROVIDER-Requires-Serial-API-Calls=no\n",
        LB,
        SERIAL,
        "true",
        "[loadbalancer]\nPROVIDER-Requires-Serial-API-Calls=true\n",
        EditKind::Replaced,
    );
    set_case(
        "[LOADBALANCER]\n  subnet-id=abc\n",
        LB,
        SERIAL,
        "true",
        "[LOADBALANCER]\n  subnet-id=abc\n  provider-requires-serial-api-calls=true\n",
        EditKind::Inserted,
    );
}

#[test]
fn set_follows_crlf() {
    set_case(
        "[Global]\r\nregion = R\r\n[LoadBalancer]\r\nlb-method = X\r\n",
        LB,
        SERIAL,
        "true",
        "[Global]\r\nregion = R\r\n[LoadBalancer]\r\nlb-method = X\r\nprovider-requires-serial-api-calls = true\r\n",
        EditKind::Inserted,
    );
    set_case(
        "[LoadBalancer]\r\nprovider-requires-serial-api-calls = false\r\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\r\nprovider-requires-serial-api-calls = true\r\n",
        EditKind::Replaced,
    );
    set_case(
        "[Global]\r\nregion = R\r\n",
        LB,
        SERIAL,
        "true",
        "[Global]\r\nregion = R\r\n\r\n[LoadBalancer]\r\nprovider-requires-serial-api-calls = true\r\n",
        EditKind::SectionAppended,
    );
}

#[test]
fn set_without_trailing_newline() {
    set_case(
        "[LoadBalancer]\nlb-method=X",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nlb-method=X\nprovider-requires-serial-api-calls=true\n",
        EditKind::Inserted,
    );
    set_case(
        "[LoadBalancer]\nprovider-requires-serial-api-calls=false",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nprovider-requires-serial-api-calls=true",
        EditKind::Replaced,
    );
    set_case(
        "[Global]\nregion = R",
        LB,
        SERIAL,
        "true",
        "[Global]\nregion = R\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = true\n",
        EditKind::SectionAppended,
    );
}

#[test]
fn set_in_empty_section() {
    set_case(
        "[Global]\nregion=R\n\n[LoadBalancer] ; empty\n\n[Metadata]\n",
        LB,
        SERIAL,
        "true",
        "[Global]\nregion=R\n\n[LoadBalancer] ; empty\nprovider-requires-serial-api-calls=true\n\n[Metadata]\n",
        EditKind::Inserted,
    );
    set_case(
        "[LoadBalancer]",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nprovider-requires-serial-api-calls = true\n",
        EditKind::Inserted,
    );
}

#[test]
fn set_appends_missing_section() {
    set_case(
        "[Global]\nregion = R\n",
        LB,
        SERIAL,
        "true",
        "[Global]\nregion = R\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = true\n",
        EditKind::SectionAppended,
    );
    set_case(
        "[Global]\nregion=R\n\n",
        LB,
        SERIAL,
        "true",
        "[Global]\nregion=R\n\n[LoadBalancer]\nprovider-requires-serial-api-calls=true\n",
        EditKind::SectionAppended,
    );
    set_case(
        "",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nprovider-requires-serial-api-calls = true\n",
        EditKind::SectionAppended,
    );
    // A subsection is not the plain section.
    set_case(
        "[LoadBalancer \"x\"]\nprovider-requires-serial-api-calls = false\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer \"x\"]\nprovider-requires-serial-api-calls = false\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = true\n",
        EditKind::SectionAppended,
    );
}

#[test]
fn set_with_duplicated_sections() {
    set_case(
        "[LoadBalancer]\nlb-method=A\n[Global]\nregion=R\n[LoadBalancer]\nlb-provider=ovn\n[Route]\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nlb-method=A\n[Global]\nregion=R\n[LoadBalancer]\nlb-provider=ovn\nprovider-requires-serial-api-calls=true\n[Route]\n",
        EditKind::Inserted,
    );
    // The key in the first copy is the effective one: rewrite it in place.
    set_case(
        "[LoadBalancer]\nprovider-requires-serial-api-calls=false\n[LoadBalancer]\nlb-provider=ovn\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nprovider-requires-serial-api-calls=true\n[LoadBalancer]\nlb-provider=ovn\n",
        EditKind::Replaced,
    );
    // Last occurrence wins.
    set_case(
        "[LoadBalancer]\nprovider-requires-serial-api-calls=false\n[loadbalancer]\nprovider-requires-serial-api-calls=off\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nprovider-requires-serial-api-calls=false\n[loadbalancer]\nprovider-requires-serial-api-calls=true\n",
        EditKind::Replaced,
    );
}

#[test]
fn set_keeps_trailing_comment() {
    set_case(
        "[LoadBalancer]\nprovider-requires-serial-api-calls = false ; set by ops\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nprovider-requires-serial-api-calls = true ; set by ops\n",
        EditKind::Replaced,
    );
    set_case(
        "[LoadBalancer]\nprovider-requires-serial-api-calls =# note\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nprovider-requires-serial-api-calls =true # note\n",
        EditKind::Replaced,
    );
    set_case(
        "[LoadBalancer]\nprovider-requires-serial-api-calls ; bare means true\n",
        LB,
        SERIAL,
        "false",
        "[LoadBalancer]\nprovider-requires-serial-api-calls = false ; bare means true\n",
        EditKind::Replaced,
    );
}

#[test]
fn set_collapses_continuation_of_the_rewritten_value() {
    let before =
        "[LoadBalancer]\nprovider-requires-serial-api-calls = fa\\\n  lse\nlb-method = X\n";
    let mut d = doc(before);
    let s = d.set(LB, SERIAL, "true");
    assert_eq!(
        d.to_text(),
        "[LoadBalancer]\nprovider-requires-serial-api-calls = true\nlb-method = X\n"
    );
    assert_eq!((s.kind, s.line, s.changed), (EditKind::Replaced, 2, true));
    // A value that ends in a continuation at the end of the text keeps a final newline.
    let mut d = doc("[LoadBalancer]\nprovider-requires-serial-api-calls = no\\\n");
    d.set(LB, SERIAL, "true");
    assert_eq!(
        d.to_text(),
        "[LoadBalancer]\nprovider-requires-serial-api-calls = true\n"
    );
}

#[test]
fn set_after_trailing_continuation_falls_back_to_header() {
    // Anything appended after `a\⏎` at the end would be joined to lb-method's value.
    set_case(
        "[LoadBalancer]\nlb-method = a\\\n",
        LB,
        SERIAL,
        "true",
        "[LoadBalancer]\nprovider-requires-serial-api-calls = true\nlb-method = a\\\n",
        EditKind::Inserted,
    );
}

#[test]
fn set_quotes_values_that_need_it_and_refuses_bad_input() {
    set_case(
        "[Global]\nregion = R\n",
        "Global",
        "password",
        "a;b#c \"d\"\\",
        "[Global]\nregion = R\npassword = \"a;b#c \\\"d\\\"\\\\\"\n",
        EditKind::Inserted,
    );
    let mut d = doc("[Global]\n");
    assert_eq!(
        d.try_set("Load_Balancer", SERIAL, "true"),
        Err(EditError::InvalidSection)
    );
    assert_eq!(
        d.try_set(LB, "provider_requires", "true"),
        Err(EditError::InvalidKey)
    );
    assert_eq!(
        d.try_set(LB, SERIAL, "a\rb"),
        Err(EditError::UnrepresentableValue)
    );
    let s = d.set(LB, "bad key", "true");
    assert_eq!((s.changed, s.line), (false, 0));
    assert_eq!(d.to_text(), "[Global]\n");
}

// ---------------------------------------------------------------------------------------------
// CCM schema

fn report(text: &str) -> CcmReport {
    check(&doc(text))
}

#[test]
fn fatal_kinds() {
    let cases: &[(&str, ProblemKind, &str, usize)] = &[
        (
            "[LoadBalancer]\ncreate-monitor = maybe\n",
            ProblemKind::InvalidBool,
            "create-monitor",
            2,
        ),
        (
            "[LoadBalancer]\n\nenabled =\n",
            ProblemKind::EmptyBool,
            "enabled",
            3,
        ),
        (
            "[Global]\nusername\n",
            ProblemKind::BlankValue,
            "username",
            2,
        ),
        (
            "[LoadBalancer]\nmonitor-delay\n",
            ProblemKind::BlankValue,
            "monitor-delay",
            2,
        ),
        (
            "[LoadBalancer]\nmax-shared-lb\n",
            ProblemKind::BlankValue,
            "max-shared-lb",
            2,
        ),
        (
            "[LoadBalancerClass \"c\"]\nsubnet-id\n",
            ProblemKind::BlankValue,
            "subnet-id",
            2,
        ),
        (
            "[LoadBalancer]\nmax-shared-lb = 0.2\n",
            ProblemKind::InvalidInt,
            "max-shared-lb",
            2,
        ),
        (
            "[LoadBalancer]\nmax-shared-lb = 1e3\n",
            ProblemKind::InvalidInt,
            "max-shared-lb",
            2,
        ),
        (
            "[LoadBalancer]\nmonitor-max-retries = -1\n",
            ProblemKind::SignedUint,
            "monitor-max-retries",
            2,
        ),
        (
            "[LoadBalancer]\nmonitor-max-retries-down = 18446744073709551616\n",
            ProblemKind::IntOutOfRange,
            "monitor-max-retries-down",
            2,
        ),
        (
            "[LoadBalancer]\nmonitor-delay = 5\n",
            ProblemKind::DurationMissingUnit,
            "monitor-delay",
            2,
        ),
        (
            "[Metadata]\nrequest-timeout = 5 s\n",
            ProblemKind::InvalidDuration,
            "request-timeout",
            2,
        ),
        (
            "[LoadBalancer]\nmonitor-timeout = soon\n",
            ProblemKind::InvalidDuration,
            "monitor-timeout",
            2,
        ),
    ];
    for &(text, kind, key, line) in cases {
        let r = report(text);
        assert_eq!(r.fatal.len(), 1, "{text:?}: {r:?}");
        let p = &r.fatal[0];
        assert_eq!(
            (p.kind, p.key.as_deref(), p.line),
            (kind, Some(key), line),
            "{text:?}"
        );
        assert!(!r.starts());
        assert!(!would_start(text));
    }
}

#[test]
fn accepted_values() {
    let text = "[LoadBalancer]\nenabled\ncreate-monitor = NO\nmax-shared-lb = 0x10\n\
                max-shared-lb = -0x10\nmonitor-max-retries = 010\nmonitor-delay = 0\n\
                monitor-timeout = 1m30s\nlb-method =\n[Global]\ntls-insecure = maybe\n\
                [Networking]\npublic-network-name\npublic-network-name =\n";
    let r = report(text);
    assert!(r.fatal.is_empty(), "{r:?}");
    assert!(would_start(text));
}

#[test]
fn ignored_kinds_with_suggestions_and_notes() {
    let text = "[Global]\nusername = u\nuser-name = u\nprovider-requires-serial-api-calls = true\n\
                [LoadBalancer]\nprovider-requires-serial-api-call = true\nuse-octavia = false\n\
                [BlockStorage]\nbs-version = v2\n[LoadBalancers]\nx = 1\n\
                [Global \"x\"]\nenabled = maybe\n[LoadBalancerClass \"c\"]\nsubnet-idd = s\n";
    let r = report(text);
    assert!(r.fatal.is_empty(), "{r:?}");
    let got: Vec<_> = r
        .ignored
        .iter()
        .map(|i| {
            (
                i.line,
                i.section.as_str(),
                i.key.as_deref(),
                i.reason,
                i.suggestion.as_deref(),
            )
        })
        .collect();
    use IgnoredReason as R;
    assert_eq!(
        got,
        vec![
            (8, "BlockStorage", None, R::UnknownSection, None),
            (
                10,
                "LoadBalancers",
                None,
                R::UnknownSection,
                Some("LoadBalancer")
            ),
            (12, "Global", None, R::SubsectionNotAllowed, None),
            (
                3,
                "Global",
                Some("user-name"),
                R::UnknownKey,
                Some("username")
            ),
            (
                4,
                "Global",
                Some("provider-requires-serial-api-calls"),
                R::UnknownKey,
                None
            ),
            (
                6,
                "LoadBalancer",
                Some("provider-requires-serial-api-call"),
                R::UnknownKey,
                Some(SERIAL)
            ),
            (7, "LoadBalancer", Some("use-octavia"), R::RemovedKey, None),
            (
                15,
                "LoadBalancerClass",
                Some("subnet-idd"),
                R::UnknownKey,
                Some("subnet-id")
            ),
        ]
    );
    let note = |line: usize| {
        r.ignored
            .iter()
            .find(|i| i.line == line)
            .and_then(|i| i.note.clone())
            .unwrap_or_default()
    };
    assert!(note(7).contains("v1.26.0"), "{}", note(7));
    assert!(note(4).contains("[LoadBalancer]"), "{}", note(4));
    assert!(note(8).contains("Cinder CSI"), "{}", note(8));
    assert!(note(12).contains("no subsection"), "{}", note(12));
    assert_eq!(
        r.ignored.last().and_then(|i| i.subsection.as_deref()),
        Some("c")
    );
    // The serial key outside [LoadBalancer] does not count.
    assert!(!r.serial_calls);
}

#[test]
fn field_name_keys_bind_case_insensitively() {
    let r = report(
        "[GLOBAL]\nUserName = a\nPassWord = b\nREGION = c\nCAFileContents = d\nuse-CLOUDS\n",
    );
    assert!(r.fatal.is_empty() && r.ignored.is_empty(), "{r:?}");
    // Go's EqualFold: ſ folds to s, the Kelvin sign to k.
    let r =
        report("[LoadBalancer]\nprovider-requireſ-serial-api-callſ = on\n[Networ\u{212A}ing]\n");
    assert!(r.ignored.is_empty(), "{r:?}");
    assert!(r.serial_calls);
}

#[test]
fn serial_calls_effective_value() {
    let cases: &[(&str, bool)] = &[
        ("", false),
        ("[LoadBalancer]\nprovider-requires-serial-api-calls\n", true),
        (
            "[LoadBalancer]\nprovider-requires-serial-api-calls = yes\n",
            true,
        ),
        (
            "[LoadBalancer]\nprovider-requires-serial-api-calls = true\nprovider-requires-serial-api-calls = 0\n",
            false,
        ),
        (
            "[LoadBalancer]\nprovider-requires-serial-api-calls = false\n[Global]\n[loadbalancer]\nPROVIDER-REQUIRES-SERIAL-API-CALLS = ON\n",
            true,
        ),
        (
            "[LoadBalancer \"x\"]\nprovider-requires-serial-api-calls = true\n",
            false,
        ),
        (
            "[LoadBalancer]\nprovider-requires-serial-api-calls = \"true\"\n",
            true,
        ),
    ];
    for &(text, want) in cases {
        let r = report(text);
        assert!(r.fatal.is_empty(), "{text:?}");
        assert_eq!(r.serial_calls, want, "{text:?}");
    }
}

#[test]
fn messages_never_contain_values() {
    let secret = "Zq9SECRETvalue";
    let texts = [
        format!(
            "[LoadBalancer]\nenabled = {secret}\nmax-shared-lb = {secret}\nmonitor-delay = {secret}\n"
        ),
        format!("[LoadBalancer]\nmonitor-max-retries = -{secret}\n{secret} = 1\n"),
        format!("[{secret}]\nx = 1\n[Global \"{secret}\"]\n"),
        format!("[Global]\npassword = \"{secret}\n"),
        format!("[Global]\npassword = a\\{secret}\n"),
        format!("[Global]\npassword = \"\\{secret}\"\n"),
    ];
    for text in &texts {
        match Document::parse(text) {
            Err(e) => assert!(!e.to_string().contains(secret), "{e}"),
            Ok(d) => {
                let r = check(&d);
                for p in &r.fatal {
                    assert!(!p.message.contains(secret), "{p:?}");
                }
                for i in &r.ignored {
                    for s in [&i.note, &i.suggestion].into_iter().flatten() {
                        assert!(!s.contains(secret), "{i:?}");
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Property tests

fn section_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("LoadBalancer".to_owned()),
        Just("loadbalancer".to_owned()),
        Just("Global".to_owned()),
        Just("Networking".to_owned()),
        Just("BlockStorage".to_owned()),
        Just("中文".to_owned()),
    ]
}

fn key_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(SERIAL.to_owned()),
        Just("PROVIDER-REQUIRES-SERIAL-API-CALLS".to_owned()),
        Just("lb-method".to_owned()),
        Just("subnet-id".to_owned()),
        Just("region".to_owned()),
        Just("public-network-name".to_owned()),
        "[a-z][a-z0-9-]{0,8}",
    ]
}

fn value_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-zA-Z0-9 ./:-]{1,12}",
        Just("\"quoted ; # value\"".to_owned()),
        Just("\"val\" \"ue\"".to_owned()),
        Just("\\\"lit\\\"".to_owned()),
        Just("\"esc \\\\ \\\" \\n \\t\"".to_owned()),
        Just("part \\\n  continued".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("ünï cödé".to_owned()),
    ]
}

#[derive(Debug, Clone)]
enum Item {
    Header(String, Option<String>, String),
    Entry(String, String, Option<String>, String, String),
    Comment(String),
    Blank(String),
}

fn item() -> impl Strategy<Value = Item> {
    let ws = prop_oneof![
        Just(String::new()),
        Just(" ".to_owned()),
        Just("\t".to_owned()),
        Just("  ".to_owned())
    ];
    let comment = prop_oneof![
        Just(String::new()),
        Just(" ; note".to_owned()),
        Just(" # x=1".to_owned()),
        Just(";c".to_owned())
    ];
    let sep = prop_oneof![
        Just("=".to_owned()),
        Just(" = ".to_owned()),
        Just(" =".to_owned()),
        Just("=\t".to_owned())
    ];
    prop_oneof![
        2 => (section_name(), proptest::option::weighted(0.2, "[a-zA-Z ]{1,5}"), comment.clone())
            .prop_map(|(n, s, c)| Item::Header(n, s, c)),
        6 => (ws.clone(), key_name(), proptest::option::weighted(0.9, value_text()), sep, comment.clone())
            .prop_map(|(w, k, v, s, c)| Item::Entry(w, k, v, s, c)),
        1 => prop_oneof![Just("; comment".to_owned()), Just("# [not a header]".to_owned())].prop_map(Item::Comment),
        1 => ws.prop_map(Item::Blank),
    ]
}

fn render(items: &[Item], crlf: bool, final_newline: bool, global: bool) -> String {
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut lines = Vec::new();
    if global {
        lines.push("[Global]".to_owned());
    }
    for it in items {
        lines.push(match it {
            Item::Header(n, Some(s), c) => format!("[{n} \"{s}\"]{c}"),
            Item::Header(n, None, c) => format!("[{n}]{c}"),
            Item::Entry(w, k, Some(v), s, c) => {
                let c = if c.is_empty() || v.is_empty() || v.ends_with('"') {
                    c.clone()
                } else {
                    format!(" {}", c.trim_start())
                };
                format!("{w}{k}{s}{}{c}", v.replace('\n', eol))
            }
            Item::Entry(w, k, None, _, c) => {
                let c = if c.is_empty() {
                    String::new()
                } else {
                    format!(" {}", c.trim_start())
                };
                format!("{w}{k}{c}")
            }
            Item::Comment(c) => c.clone(),
            Item::Blank(w) => w.clone(),
        });
    }
    let mut text = lines.join(eol);
    if final_newline {
        text.push_str(eol);
    }
    text
}

fn generated_doc() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(item(), 0..14),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(items, crlf, final_nl, drop_global)| {
            // Without the leading [Global] only when a header comes first (else invalid).
            let global = !(drop_global && matches!(items.first(), Some(Item::Header(..))));
            render(&items, crlf, final_nl, global)
        })
}

fn safe_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("yes".to_owned()),
        "[a-zA-Z0-9._:/-]{1,10}",
        Just("needs \"quotes\" ; # \\".to_owned()),
    ]
}

proptest! {
    // 256 cases each by default; PROPTEST_CASES=N runs more.

    #[test]
    fn generated_documents_round_trip(text in generated_doc()) {
        let d = Document::parse(&text);
        prop_assert!(d.is_ok(), "{:?}: {:?}", text, d.err());
        if let Ok(d) = d {
            prop_assert_eq!(d.to_text(), text.clone());
            let _ = check(&d);
        }
    }

    #[test]
    fn set_is_minimal_verified_and_idempotent(
        text in generated_doc(),
        section in prop_oneof![Just("LoadBalancer".to_owned()), Just("Global".to_owned()), Just("Route".to_owned())],
        key in prop_oneof![Just(SERIAL.to_owned()), Just("lb-method".to_owned()), Just("region".to_owned())],
        value in safe_value(),
    ) {
        let mut d = doc(&text);
        let before_entries = d.entries().count();
        let summary = d.set(&section, &key, &value);
        let after = d.to_text();
        prop_assert!(summary.line > 0);
        let reparsed = doc(&after);
        let eff = reparsed.effective(&section, None, &key);
        prop_assert_eq!(eff.as_ref().and_then(|e| e.value.clone()), Some(value.clone()));
        prop_assert_eq!(eff.map(|e| e.line), Some(summary.line));
        if summary.changed {
            assert_only_edit(&text, &after, summary);
        } else {
            prop_assert_eq!(&after, &text);
        }
        let added = usize::from(summary.kind != EditKind::Replaced);
        prop_assert_eq!(reparsed.entries().count(), before_entries + added);
        // Everything else reads the same.
        let others = |d: &Document| -> Vec<(String, Option<String>, String, Option<String>)> {
            d.entries()
                .filter(|e| !(eq_fold(e.section, &section) && e.subsection.is_none() && eq_fold(e.key, &key)))
                .map(|e| (e.section.to_owned(), e.subsection.map(str::to_owned), e.key.to_owned(), e.value))
                .collect()
        };
        prop_assert_eq!(others(&doc(&text)), others(&reparsed));
        let again = d.set(&section, &key, &value);
        prop_assert!(!again.changed);
        prop_assert_eq!(d.to_text(), after);
    }

    #[test]
    fn an_edited_document_is_its_text_read_whole(
        text in generated_doc(),
        section in prop_oneof![Just("LoadBalancer".to_owned()), Just("Global".to_owned()), Just("Route".to_owned())],
        key in prop_oneof![Just(SERIAL.to_owned()), Just("lb-method".to_owned()), Just("region".to_owned())],
        value in safe_value(),
    ) {
        // `set` reads again only the statement it changed; what it keeps must be what a
        // reparse of the whole edited text records, offset for offset.
        let mut d = doc(&text);
        d.set(&section, &key, &value);
        let whole = doc(&d.to_text());
        prop_assert_eq!(d.statements(), whole.statements());
        prop_assert_eq!(d.entries().collect::<Vec<_>>(), whole.entries().collect::<Vec<_>>());
        prop_assert_eq!(d.sections().collect::<Vec<_>>(), whole.sections().collect::<Vec<_>>());
    }

    #[test]
    fn arbitrary_text_never_panics(text in "[\\[\\]\"\\\\=;#\n\r \t_.a-zA-Z0-9\u{0}\u{FEFF}é中-]{0,60}") {
        match Document::parse(&text) {
            Ok(mut d) => {
                prop_assert_eq!(d.to_text(), text.clone());
                let _ = check(&d);
                let _ = d.entries().count();
                let s = d.set(LB, SERIAL, "true");
                prop_assert!(s.line > 0);
                let reparsed = doc(&d.to_text());
                prop_assert_eq!(
                    reparsed.effective(LB, None, SERIAL).and_then(|e| e.value),
                    Some("true".to_owned())
                );
            }
            Err(e) => {
                prop_assert!(e.line >= 1 && e.column >= 1);
                prop_assert!(!would_start(&text));
            }
        }
    }
}

/// The CCM's own start-up checks (domain-facts §9.1), past gcfg: exact comparisons, the
/// effective (last) value, `enabled = false` skipping the lb-version check.
#[test]
fn ccm_start_problems() {
    use super::schema::{ProblemKind, start_problems};
    let kinds = |text: &str| -> Vec<(usize, ProblemKind)> {
        let doc = Document::parse(text).expect("parses");
        start_problems(&doc)
            .iter()
            .map(|p| (p.line, p.kind))
            .collect()
    };
    let lb = ProblemKind::LbVersion;
    let so = ProblemKind::SearchOrder;
    let cases: &[(&str, &[(usize, ProblemKind)])] = &[
        ("[LoadBalancer]\nlb-version = v2\n", &[]),
        ("[LoadBalancer]\nlb-version =\n", &[]),
        ("[LoadBalancer]\nlb-version = \"v2\"\n", &[]),
        ("[LoadBalancer]\nlb-version = v1\n", &[(2, lb)]),
        ("[LoadBalancer]\nlb-version = \" v2\"\n", &[(2, lb)]),
        ("[LoadBalancer]\nlb-version = v1\nlb-version = v2\n", &[]),
        ("[LoadBalancer]\nenabled = false\nlb-version = v1\n", &[]),
        (
            "[LoadBalancer]\nenabled = true\nlb-version = v1\n",
            &[(3, lb)],
        ),
        ("[Metadata]\nsearch-order = configDrive\n", &[]),
        (
            "[Metadata]\nsearch-order = metadataService, configDrive\n",
            &[],
        ),
        ("[Metadata]\nsearch-order = configDrive,configDrive\n", &[]),
        ("[Metadata]\nsearch-order =\n", &[]),
        ("[Metadata]\nsearch-order = a,b,c\n", &[(2, so)]),
        ("[Metadata]\nsearch-order = ConfigDrive\n", &[(2, so)]),
        ("[Metadata]\nsearch-order = configDrive,\n", &[(2, so)]),
        ("[Metadata]\nsearch-order = \" \"\n", &[(2, so)]),
        (
            "[Metadata]\nsearch-order = x\n[LoadBalancer]\nlb-version = v3\n",
            &[(2, so), (4, lb)],
        ),
    ];
    for (text, want) in cases {
        assert_eq!(kinds(text), *want, "{text:?}");
    }
}
