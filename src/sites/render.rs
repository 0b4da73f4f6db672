//! The cloud config the `openstack-cloud-controller-manager` Helm chart renders from
//! structured values, with a map from each rendered line back to the values path.
//!
//! Facts (domain-facts §1.7): the chart's `cloudConfig` helper writes the sections in the
//! fixed order `[Global]`, `[Networking]`, `[LoadBalancer]`, `[BlockStorage]`, `[Metadata]`,
//! `[Route]` from `cloudConfig.global`, `.networking`, `.loadBalancer`, `.blockStorage`,
//! `.metadata`, `.route`, each entry as `{{ $key }} = {{ $value | quote }}`. Go templates
//! range over a map in sorted key order. Helm reads values through JSON, so numbers are
//! float64 and Sprig's `quote` formats them with `%v` (so `1000000` renders as `1e+06`);
//! `quote` of a null value renders nothing (`key = `).
//!
//! One deliberate difference: an empty `[BlockStorage]` header is not rendered. The CCM does
//! not read that section and an empty section changes nothing, so rendering it would only
//! produce a warning about a header the user never wrote.

use std::borrow::Cow;

use super::generation::Generation;
use crate::budget::Cancel;
use serde_json::Value;

/// The chart's sections: (values key, INI section name), in rendering order.
pub const SECTIONS: &[(&str, &str)] = &[
    ("global", "Global"),
    ("networking", "Networking"),
    ("loadBalancer", "LoadBalancer"),
    ("blockStorage", "BlockStorage"),
    ("metadata", "Metadata"),
    ("route", "Route"),
];

/// Where a rendered line comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A section header or the blank line after a section: `cloudConfig.<section>`.
    Section(&'static str),
    /// `cloudConfig.<section>.<key>`.
    Key(&'static str, String),
}

/// A rendered cloud config and the origin of each line (index = line - 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The INI text.
    pub text: String,
    /// Origin of each line.
    pub lines: Vec<Origin>,
}

/// Why a `cloudConfig` value cannot be rendered (the chart's template would fail).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is {what}, so the chart cannot render it", path(.section))]
pub struct RenderError {
    /// The values key of the section, or None for `cloudConfig` itself.
    pub section: Option<&'static str>,
    /// What the value should be.
    pub what: &'static str,
}

/// The values path of `section` (`cloudConfig` itself for None).
fn path(section: &Option<&'static str>) -> String {
    match section {
        Some(section) => format!("cloudConfig.{section}"),
        None => "cloudConfig".to_owned(),
    }
}

/// Renders `cloudConfig` (the value of the `cloudConfig` key, or null when absent).
///
/// Byte for byte what the chart writes (checked against `helm template` by
/// `tests/helm_differential.rs`): each section is its header followed by one line per key,
/// sections are separated by a blank line, and the text ends without a newline after the last
/// section (the helper's trailing `{{- end }}` trims it). The one difference is the deliberate
/// one in the module docs: an empty `[BlockStorage]` is left out.
pub fn render(cloud_config: Option<&Value>) -> Result<Rendered, RenderError> {
    render_within(cloud_config, &Cancel::never())
}

/// How often (in keys rendered) [`render_within`] looks at the cancel flag.
const CANCEL_CHECK_EVERY: usize = 1024;

/// [`render`] that stops once `cancel` fires (within `CANCEL_CHECK_EVERY` keys): structured
/// values are only bounded by the review's size, a section can hold hundreds of thousands of
/// keys. What it returns then is cut short and not an answer: the caller checks the flag.
pub fn render_within(
    cloud_config: Option<&Value>,
    cancel: &Cancel,
) -> Result<Rendered, RenderError> {
    render_as(cloud_config, Generation::Route, cancel)
}

/// [`render_within`] as the chart's `generation` renders it ([`super::generation`]): before
/// [`Generation::Route`] there is no `[Route]` section (a `route` value of any type is never
/// read), and [`Generation::Unquoted`] writes each value as text/template prints it, so a line
/// break in a value writes lines of their own (each mapped to the key it came from).
pub fn render_as(
    cloud_config: Option<&Value>,
    generation: Generation,
    cancel: &Cancel,
) -> Result<Rendered, RenderError> {
    // The template reads `.Values.cloudConfig.global` first: on anything but a map (Helm
    // drops a null one, and the chart's default map with it) that stops it ("can't evaluate
    // field global", "nil pointer evaluating interface {}.global").
    if cloud_config.is_some_and(|c| !c.is_object()) {
        return Err(RenderError {
            section: None,
            what: "not a map",
        });
    }
    let mut text = String::new();
    let mut lines = Vec::new();
    let mut previous: Option<&'static str> = None;
    for (values_key, header) in SECTIONS {
        if *values_key == "route" && !generation.renders_route() {
            continue;
        }
        let section = cloud_config.and_then(|c| c.get(values_key));
        // `range $key, $value` over a map gives its keys in sorted order, over a list its
        // indexes (`0 = "a"`, which gcfg then refuses as a variable name), over nothing or an
        // empty collection no line; anything else stops the template ("range can't iterate
        // over …"; checked with Helm v3.17.2 on the chart at 2.36.0).
        let entries: Vec<(Cow<'_, str>, &Value)> = match section {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| (Cow::Borrowed(k.as_str()), v))
                .collect(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (Cow::Owned(i.to_string()), v))
                .collect(),
            Some(_) => {
                return Err(RenderError {
                    section: Some(values_key),
                    what: "neither a map nor a list",
                });
            }
        };
        if *values_key == "blockStorage" && entries.is_empty() {
            continue;
        }
        if let Some(previous) = previous {
            // The blank line between two sections belongs to the one before it.
            text.push_str("\n\n");
            lines.push(Origin::Section(previous));
        }
        previous = Some(values_key);
        text.push('[');
        text.push_str(header);
        text.push(']');
        lines.push(Origin::Section(values_key));
        // serde_json's map is ordered by key (byte order), like Go's sorted map range.
        for (key, value) in entries {
            if lines.len().is_multiple_of(CANCEL_CHECK_EVERY) && cancel.is_cancelled() {
                return Ok(Rendered { text, lines });
            }
            // `{{ $key }} = {{ $value | quote }}`: a null value leaves `key = `.
            text.push('\n');
            text.push_str(&key);
            text.push_str(" = ");
            let start = text.len();
            if generation.quotes_values() {
                quote_into(&mut text, value);
            } else {
                text.push_str(&unquoted(value));
            }
            // An unquoted value's line breaks start lines gcfg reads on their own.
            let breaks = text.as_bytes()[start..]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            for _ in 0..=breaks {
                lines.push(Origin::Key(values_key, key.clone().into_owned()));
            }
        }
    }
    Ok(Rendered { text, lines })
}

/// The values key of an INI section name, matched like gcfg does (case-insensitively).
pub fn values_key(section: &str) -> Option<&'static str> {
    SECTIONS
        .iter()
        .find(|(_, header)| header.eq_ignore_ascii_case(section))
        .map(|(key, _)| *key)
}

/// `{{ $value }}` without `quote` (text/template's `printValue`): `fmt.Sprint` of the value,
/// `<no value>` for nil. Helm's engine removes `<no value>` only from a whole rendered file,
/// and the cloud config reaches that file base64-encoded, so it stays in the INI (checked with
/// Helm v3.17.2 on the chart at 1.3.0).
pub fn unquoted(value: &Value) -> String {
    match value {
        Value::Null => "<no value>".to_owned(),
        other => go_value(other),
    }
}

/// Sprig's `quote`: `fmt.Sprintf("%q", strval(v))`, nothing for nil.
pub fn quote(value: &Value) -> String {
    let mut out = String::new();
    quote_into(&mut out, value);
    out
}

/// [`quote`] written at the end of `out`.
fn quote_into(out: &mut String, value: &Value) {
    match value {
        Value::Null => {}
        // `%v` of a string is the string: quoted where it is, not copied first.
        Value::String(s) => super::goquote::quote_into(out, s),
        other => super::goquote::quote_into(out, &go_value(other)),
    }
}

/// Go's `fmt.Sprintf("%v", v)` for a value Helm decoded from JSON.
pub fn go_value(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), go_float),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_value).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(m) => {
            let parts: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_value(v)))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits that
/// read back, in `%e` style when the decimal exponent is < -4 or >= 6 (Go's threshold for the
/// shortest `%g`), e.g. `1e+06`, `1.234567e+06`, `100000`, `0.0001`, `1e-05`.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".to_owned()
        } else {
            "-Inf".to_owned()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".to_owned()
        } else {
            "0".to_owned()
        };
    }
    // Shortest round-trip digits and the decimal exponent.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let point = exp + 1; // digits before the decimal point
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if point <= 0 {
        out.push_str("0.");
        out.push_str(&"0".repeat(point.unsigned_abs() as usize));
        out.push_str(&digits);
    } else if point as usize >= digits.len() {
        out.push_str(&digits);
        out.push_str(&"0".repeat(point as usize - digits.len()));
    } else {
        out.push_str(&digits[..point as usize]);
        out.push('.');
        out.push_str(&digits[point as usize..]);
    }
    out
}

/// Go's `strconv.Quote`, with the printable characters of the Go release that builds Helm
/// ([`super::goquote`]).
pub fn go_quote(s: &str) -> String {
    super::goquote::quote(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_like_the_chart() {
        let cc = json!({
            "loadBalancer": {"subnet-id": "s", "provider-requires-serial-api-calls": true, "max-shared-lb": 10},
            "global": {"auth-url": "https://k/v3", "region": "RegionOne"},
            "metadata": null
        });
        let r = render(Some(&cc)).unwrap();
        assert_eq!(
            r.text,
            "[Global]\nauth-url = \"https://k/v3\"\nregion = \"RegionOne\"\n\n[Networking]\n\n\
             [LoadBalancer]\nmax-shared-lb = \"10\"\nprovider-requires-serial-api-calls = \"true\"\nsubnet-id = \"s\"\n\n\
             [Metadata]\n\n[Route]"
        );
        assert_eq!(
            r.lines[7],
            Origin::Key("loadBalancer", "max-shared-lb".into())
        );
        assert_eq!(r.lines[10], Origin::Section("loadBalancer"));
        assert_eq!(r.text.lines().count(), r.lines.len());
    }

    #[test]
    fn go_formatting() {
        assert_eq!(go_float(1_000_000.0), "1e+06");
        assert_eq!(go_float(1_234_567.0), "1.234567e+06");
        assert_eq!(go_float(100000.0), "100000");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(-3.0), "-3");
        // Go's strconv.FormatFloat signs both infinities and writes NaN and -0 as such.
        assert_eq!(go_float(f64::INFINITY), "+Inf");
        assert_eq!(go_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(go_float(f64::NAN), "NaN");
        assert_eq!(go_float(-0.0), "-0");
        assert_eq!(quote(&json!(null)), "");
        assert_eq!(quote(&json!("a\"b\\c\u{0}")), "\"a\\\"b\\\\c\\x00\"");
        assert_eq!(quote(&json!(["a", 1])), "\"[a 1]\"");
    }

    #[test]
    fn every_key_of_a_large_section_renders_and_a_fired_flag_stops_it() {
        let keys = 5 * CANCEL_CHECK_EVERY + 7;
        let global: serde_json::Map<String, Value> =
            (0..keys).map(|i| (format!("k{i:05}"), json!(i))).collect();
        let values = json!({"global": global});
        let key_lines = |r: &Rendered| {
            r.lines
                .iter()
                .filter(|o| matches!(o, Origin::Key(..)))
                .count()
        };
        let full = render(Some(&values)).expect("renders");
        assert_eq!(key_lines(&full), keys);
        let last = format!("\nk{:05} = \"{}\"\n", keys - 1, keys - 1);
        assert!(full.text.contains(&last));
        let cancel = Cancel::new();
        cancel.cancel();
        let cut = render_within(Some(&values), &cancel).expect("cut short");
        // The flag is looked at every 1024 lines: the header and 1023 keys.
        assert_eq!(key_lines(&cut), CANCEL_CHECK_EVERY - 1);
    }

    #[test]
    fn a_section_that_is_not_a_map_cannot_render() {
        let error = render(Some(&json!({"loadBalancer": "x"}))).expect_err("a string");
        assert_eq!(error.section, Some("loadBalancer"));
        assert_eq!(
            error.to_string(),
            "cloudConfig.loadBalancer is neither a map nor a list, so the chart cannot render it"
        );
        for scalar in [json!(3), json!(false), json!("")] {
            assert!(render(Some(&json!({"route": scalar}))).is_err());
        }
        for whole in [json!(null), json!([]), json!("x"), json!(false)] {
            let error = render(Some(&whole)).expect_err("not a map");
            assert_eq!(
                error.to_string(),
                "cloudConfig is not a map, so the chart cannot render it"
            );
        }
        assert!(render(None).is_ok());
    }

    #[test]
    fn empty_and_list_sections_render_as_range_does() {
        // Checked with Helm v3.17.2 on the chart at 2.36.0: an empty list is an empty section,
        // a list gives its indexes as keys.
        let rendered = render(Some(&json!({"route": [], "metadata": {}}))).expect("renders");
        assert!(
            rendered.text.ends_with("[Metadata]\n\n[Route]"),
            "{}",
            rendered.text
        );
        let rendered = render(Some(&json!({"route": ["a", {"b": 1}]}))).expect("renders");
        assert!(
            rendered
                .text
                .ends_with("[Route]\n0 = \"a\"\n1 = \"map[b:1]\""),
            "{}",
            rendered.text
        );
        assert_eq!(
            rendered.lines.last(),
            Some(&Origin::Key("route", "1".to_owned()))
        );
        // An empty list in `blockStorage` is left out like an empty map.
        let rendered = render(Some(&json!({"blockStorage": []}))).expect("renders");
        assert!(!rendered.text.contains("BlockStorage"));
    }
}
