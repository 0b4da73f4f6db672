//! Differential test: stackgate's reading of CCM cloud configs vs the real gcfg v1.2.3.
//!
//! A deterministic corpus (the real fixtures, hand-written corner cases and a few thousand
//! generated variants) is written to a temporary directory, the oracle (tests/gcfg-oracle, the
//! CCM's parser wrapped as a command) reads all of it in one run, and for every file we assert:
//!
//! * would-start: `Document::parse` + `check` agree with gcfg (`ReadInto` + `FatalOnly`);
//! * a syntax error is reported at gcfg's line and column, with gcfg's message;
//! * when the config starts: the ignored (section, subsection, variable) set is gcfg's "extra
//!   data" set, the effective serial-API-calls flag is gcfg's, and every field gcfg stores
//!   (strings, bools, ints, durations, multi-valued lists, LoadBalancerClass subsections) equals
//!   the value stackgate decodes.
//!
//! Build the oracle and run:
//!
//! ```text
//! .ci/gcfg-oracle.sh target/gcfg-oracle
//! STACKGATE_GCFG_ORACLE=$PWD/target/gcfg-oracle cargo test --test gcfg_differential -- --ignored
//! ```
//!
//! More generated variants / another seed: `STACKGATE_GCFG_DIFF_CASES=30000
//! STACKGATE_GCFG_DIFF_SEED=7`. Also, every readable config is edited with
//! `Document::set(LoadBalancer, provider-requires-serial-api-calls, true)` and gcfg must read the
//! edit back (a config that started still starts, now with serial calls on).
//!
//! The configs are synthetic, so printing them on a mismatch is fine.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use stackgate::cloudconf::schema::{SECTIONS, SectionSpec, ValueType};
use stackgate::cloudconf::{
    Document, IgnoredReason, check, parse_bool, parse_gcfg_int, parse_go_duration, would_start,
};

/// Where the oracle binary is found.
const ORACLE_ENV: &str = "STACKGATE_GCFG_ORACLE";

/// Known, accepted differences from gcfg: none. (Character classes and case folding come from
/// Go 1.19's Unicode 13 tables, the same Go the oracle is built with; see the module docs of
/// `cloudconf` for how that relates to the Go that builds the CCM.)
const ACCEPTED_DIVERGENCES: &[(&str, &str)] = &[];

// ---------------------------------------------------------------------------------------------
// Deterministic randomness

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // SplitMix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

// ---------------------------------------------------------------------------------------------
// Corpus

const FIXTURES: &[(&str, &str)] = &[
    (
        "fixture-gcfg_test.gcfg",
        include_str!("fixtures/cloudconf/gcfg_test.gcfg"),
    ),
    (
        "fixture-issue12.gcfg",
        include_str!("fixtures/cloudconf/issue12.gcfg"),
    ),
    (
        "fixture-notepad-bom.ini",
        include_str!("fixtures/cloudconf/notepad-bom.ini"),
    ),
    (
        "fixture-cpo-cloud-config.ini",
        include_str!("fixtures/cloudconf/cpo-cloud-config.ini"),
    ),
];

const FULL: &str = "[Global]
auth-url = https://keystone.example.com:5000/v3
username = admin
password = \"s3cr3t;pass#word\"
region = RegionOne
tenant-name = demo
domain-name = Default
tls-insecure = false
use-clouds = false
ca-file = /etc/ssl/certs/ca.crt

[LoadBalancer]
enabled = true
subnet-id = 9c018814-f2a8-45dd-9679-5400d49b333a
floating-network-id = 80c9fc78-a2be-45d5-a85b-f17a6c98df92
lb-method = ROUND_ROBIN
lb-provider = amphora
create-monitor = true
monitor-delay = 5s
monitor-timeout = 3s
monitor-max-retries = 1
monitor-max-retries-down = 3
manage-security-groups = false
internal-lb = no
cascade-delete = yes
max-shared-lb = 2
provider-requires-serial-api-calls = true

[LoadBalancerClass \"internal\"]
network-id = 0ab1
subnet-id = 1cd2

[Networking]
public-network-name = public
public-network-name = ext-net
internal-network-name = private
ipv6-support-disabled = false

[Metadata]
search-order = configDrive,metadataService
request-timeout = 60s

[Route]
router-id = 7e1c

[BlockStorage]
bs-version = v3
ignore-volume-az = true
";

const HELM: &str = "[Global]
auth-url = \"https://keystone:5000/v3\"
application-credential-id = \"abc\"
application-credential-secret = \"#secret\"
region = \"RegionOne\"
[Networking]
[LoadBalancer]
floating-network-id = \"x\"
lb-provider = \"ovn\"
lb-method = \"SOURCE_IP_PORT\"
provider-requires-serial-api-calls = \"true\"
[BlockStorage]
[Metadata]
[Route]
";

const OPENSHIFT: &str = "[Global]
secret-name = openstack-credentials
secret-namespace = kube-system
region = regionOne
ca-file = /etc/kubernetes/static-pod-resources/configmaps/cloud-config/ca-bundle.pem

[LoadBalancer]
use-octavia = True
lb-provider = ovn
max-shared-lb = 1
";

const COMPACT: &str = "[Global]
\tauth-url=http://192.0.2.1:5000/v3
\tusername=user
\tpassword=pa ss ;comment
[LoadBalancer]
\tprovider-requires-serial-api-calls=false
\tmonitor-delay=1m
[LoadBalancerClass]
\tfloating-network-id=f1
";

const BASES: &[&str] = &[FULL, HELM, OPENSHIFT, COMPACT];

/// Hand-written corner cases.
fn handwritten() -> Vec<String> {
    let cases: &[&str] = &[
        "",
        " ",
        "\n\n",
        " \t\r\n",
        "\u{FEFF}",
        "\u{FEFF}[LoadBalancer]\n",
        "; only a comment",
        "[LoadBalancer]",
        "[LoadBalancer]\nprovider-requires-serial-api-calls",
        "[LoadBalancer]\nprovider-requires-serial-api-calls=\n",
        "[LoadBalancer]\nprovider-requires-serial-api-calls = true ; c\n",
        "[LoadBalancer]\nprovider-requires-serial-api-calls = true\nprovider-requires-serial-api-calls = false\n",
        "[LoadBalancer]\nprovider-requires-serial-api-calls = maybe\nprovider-requires-serial-api-calls = true\n",
        "[loadbalancer]\nPROVIDER-REQUIRES-SERIAL-API-CALLS = On\n",
        "[LoadBalancer]\nprovider-requireſ-serial-api-callſ = yes\n",
        "[LoadBalancer]\nprovider-requires-serial-api-call = true\n",
        "[LoadBalancer]\nprovider_requires_serial_api_calls = true\n",
        "[LoadBalancer]\nprovider.requires = true\n",
        "[LoadBalancer]\nuse-octavia = false\n",
        "[LoadBalancer]\nmonitor-delay = 5\n",
        "[LoadBalancer]\nmonitor-delay = 0\n",
        "[LoadBalancer]\nmonitor-delay\n",
        "[LoadBalancer]\nmonitor-delay =\n",
        "[LoadBalancer]\nmax-shared-lb = 0x10\n",
        "[LoadBalancer]\nmax-shared-lb = -0x10\n",
        "[LoadBalancer]\nmonitor-max-retries = -1\n",
        "[LoadBalancer]\nmonitor-max-retries = 0.2\n",
        "[LoadBalancer]\nmax-shared-lb\n",
        "[LoadBalancer]\nlb-method\n",
        "[LoadBalancer]\nlb-method =\n",
        "[LoadBalancer \"x\"]\nprovider-requires-serial-api-calls = true\n",
        "[LoadBalancer \"x\"]\nenabled = maybe\nlb-method\n",
        "[Global \"x\"]\nusername\n",
        "[Global]\nusername\n",
        "[Global]\nUserName = a\nPASSWORD = b\nRegion = c\nCaFileContents = d\nuser-name = e\n",
        "[Global]\nuse-clouds\ntls-insecure = maybe\n",
        "[BlockStorage]\nbs-version = v2\nignore-volume-az\n",
        "[blockstorage]\n[BlockStorage]\nx=1\n",
        "[LoadBalancerClass]\nsubnet-id = a\n",
        "[LoadBalancerClass \"a\"]\n[LoadBalancerClass \"A\"]\nsubnet-id = b\nfoo = c\n",
        "[LoadBalancerClass \"a\"]\nsubnet-id\n",
        "[loadbalancerclass \"a\\\\b\\\"c\"]\nnetwork-id = n\n",
        "[LoadBalancerClass \"a\\nb\"]\n",
        "[LoadBalancerClass \"\"]\n",
        "[LoadBalancerClass\"x\"]\nsubnet-id=1\n",
        "[ LoadBalancer ] ; comment\nprovider-requires-serial-api-calls=true\n",
        "[LoadBalancer]# comment\n",
        "[LoadBalancer] x\n",
        "[LoadBalancer]]\n",
        "[LoadBalancer\n",
        "[]\n",
        "[\"x\"]\n",
        "[LoadBalancer \"x\" \"y\"]\n",
        "provider-requires-serial-api-calls = true\n[LoadBalancer]\n",
        "= x\n",
        "[LoadBalancer]\n= x\n",
        "[LoadBalancer]\nk v\n",
        "[LoadBalancer]\nk \"v\"\n",
        "[LoadBalancer]\nlb-method = \"ab\n",
        "[LoadBalancer]\nlb-method = \"a\\qb\"\n",
        "[LoadBalancer]\nlb-method = \"a\\\nb\"\n",
        "[LoadBalancer]\nlb-method = a\\b\n",
        "[LoadBalancer]\nlb-method = a\\\n",
        "[LoadBalancer]\nlb-method = a\\",
        "[LoadBalancer]\nlb-method = a \\\n  b \\\r\n c\n",
        "[LoadBalancer]\r\nlb-method = a\\\r\nb\r\n",
        "[LoadBalancer]\nlb-method = \\\"value\\\"\n",
        "[LoadBalancer]\nlb-method = \"val\" \"ue\"\n",
        "[LoadBalancer]\nlb-method = \" val ue \"\n",
        "[LoadBalancer]\nlb-method = \"a\\tb\\nc\\\\d\\\"e\"\n",
        "[LoadBalancer]\nlb-method = a\"b;c\"d ; e\n",
        "[LoadBalancer]\nlb-method = a\rb\n",
        "[LoadBalancer]\nlb-method = \"a\rb\"\n",
        "[LoadBalancer]\nlb-method=ab#cd\n",
        "[LoadBalancer]\nlb-method = \u{0}\n",
        "[LoadBalancer]\n\u{0}\n",
        "[LoadBalancer]\nlb-method = \u{A0}x\u{A0}\n",
        "[LoadBalancer]\nlb-method\u{A0}= x\n",
        "[Networking]\npublic-network-name = a\npublic-network-name = b\npublic-network-name\npublic-network-name = c\n",
        "[Networking]\npublic-network-name\n",
        "[Networking]\npublic-network-name =\n",
        "[中文]\n键=值\n",
        "[Global]\nκλειδί = 1\nclé = 2\nk١٢ = 3\n",
        "[Global]\na\u{301} = 1\n",
        "[Global]\nx😀 = 1\n",
        "[Global]\n1abc = 1\n",
        "[Global]\n-abc = 1\n",
        "[Global]\nabc- = 1\n",
        "[Networ\u{212A}ing]\nipv6-support-disabled = true\n",
        "[LoadBalancer]\nenabled = \"true\"\nenabled = \" true\"\n",
        "[LoadBalancer]\nmonitor-delay = \"5s\"\n",
        "[LoadBalancer]\nmonitor-delay = \" 5s\"\n",
        "[LoadBalancer]\nmax-shared-lb = \" 3 \"\n",
        "[Metadata]\nrequest-timeout = 1h30m\nsearch-order = metadataService\n",
        "[Route]\nrouter-id\n",
        "[LoadBalancer]\nprovider-requires-serial-api-calls = true\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n",
        "[LoadBalancer]\nprovider-requires-serial-api-calls = false\n[Global]\n[loadBALANCER]\nprovider-requires-serial-api-calls = true\n",
        "[Global]\nprovider-requires-serial-api-calls = true\n",
        // The texts of the module's unit tests, so that their expectations are gcfg's.
        "[s]\r\n\r\nkey_name = 1\r\n",
        "[s]\n; c\n[a.b]\n",
        "[s]\nk = \"a\\b\"\n",
        "[s \"a\\tb\"]\n",
        "[s]\nk = a\n\0\n",
        "[s]\n\n  = v\n",
        "[s]\nk = \"a\" \\\n  \"b\n",
        "[s] ; c\r\nk = v \\\r\n  w ; c\r\n",
        "[s]\na = \"val\" \"ue\"\nb = \\\"value\\\"\nc = x \\\n  y\nd = \"va ; lue\" # c\n\
         e = \"a\\tb\\n\\\\\\\"\"\nf =   spaced  value  \ng\nh =\ni = ab#cd\nj = #secret\nk = x ;c\n\
         l = \"q\";c\nm = a\\\r\n b\r\n",
        "[LoadBalancer]\nenabled\ncreate-monitor = NO\nmax-shared-lb = 0x10\nmax-shared-lb = -0x10\n\
         monitor-max-retries = 010\nmonitor-delay = 0\nmonitor-timeout = 1m30s\nlb-method =\n\
         [Global]\ntls-insecure = maybe\n[Networking]\npublic-network-name\npublic-network-name =\n",
        "[Global]\nusername = u\nuser-name = u\nprovider-requires-serial-api-calls = true\n\
         [LoadBalancer]\nprovider-requires-serial-api-call = true\nuse-octavia = false\n\
         [BlockStorage]\nbs-version = v2\n[LoadBalancers]\nx = 1\n\
         [Global \"x\"]\nenabled = maybe\n[LoadBalancerClass \"c\"]\nsubnet-idd = s\n",
        "[GLOBAL]\nUserName = a\nPassWord = b\nREGION = c\nCAFileContents = d\nuse-CLOUDS\n",
        "[LoadBalancer]\nprovider-requireſ-serial-api-callſ = on\n[Networ\u{212A}ing]\n",
        "[LoadBalancer]\n\nenabled =\n",
        "[LoadBalancer]\nmonitor-max-retries-down = 18446744073709551616\n",
        "[Metadata]\nrequest-timeout = 5 s\n",
        "[LoadBalancer]\nmonitor-timeout = soon\n",
        "[LoadBalancer]\nmax-shared-lb = 1e3\n",
    ];
    let mut out: Vec<String> = cases.iter().map(|s| (*s).to_owned()).collect();
    // Every duration literal once, deterministically (the generator picks them at random):
    // the overflow edges must each meet the oracle.
    out.extend(DURATIONS.iter().map(|d| {
        format!("[LoadBalancer]\nmonitor-delay = {d}\n[Metadata]\nrequest-timeout = {d}\n")
    }));
    out
}

const BOOL_LITERALS: &[&str] = &[
    "true",
    "false",
    "True",
    "FALSE",
    "yes",
    "No",
    "ON",
    "off",
    "1",
    "0",
    "t",
    "f",
    "truer",
    "2",
    "-1",
    "maybe",
    "",
    "\"true\"",
    "\" true\"",
    "tRuE",
    "y",
    "enabled",
    "\"\"",
    "yes # c",
    "no;c",
    "\"off\" ",
    "o\"n\"",
];

const DURATIONS: &[&str] = &[
    "5",
    "5s",
    "0",
    "-5s",
    "+5s",
    "1.5h",
    "1h30m",
    ".5s",
    "5.s",
    "5 s",
    "5S",
    "1e3s",
    "9999999999999999h",
    "10µs",
    "10μs",
    "10us",
    "1m1",
    "\"5s\"",
    "\" 5s\"",
    "0s",
    "-0",
    "00",
    "1ns",
    "3.000000000001h",
    "2562047h47m16.854775807s",
    "2562047h47m16.854775808s",
    "-2562047h47m16.854775808s",
    "1d",
    "",
    ".",
    "-",
    "1.h",
    "0.0000000001s",
    "1h-1m",
    // Go sums the parts in a uint64 that wraps: 2^63 + 2^63 is accepted as 0.
    "9223372036854775808ns9223372036854775808ns",
    "-9223372036854775808ns9223372036854775808ns",
    "9223372036854775808ns9223372036854775808ns1ns",
    "9223372036854775808ns9223372036854775808ns9223372036854775808ns",
    "-9223372036854775808ns9223372036854775808ns9223372036854775808ns",
    "9223372036854775808ns9223372036854775807ns",
    "9223372036854775808ns",
    "-9223372036854775808ns",
];

const INTS: &[&str] = &[
    "2",
    "0x10",
    "0X10",
    "-0x10",
    "-1",
    "+1",
    "010",
    "0.2",
    "1e3",
    "0x",
    "0x_1",
    "0x1_0",
    "0x1__0",
    "1_000",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "\" 3\"",
    "\"3 \"",
    "3 4",
    "",
    "٣",
    "0x1F",
    "0xg",
    "--1",
    "0b101",
    "0o7",
    "\"\u{A0}7\u{3000}\"",
];

const SUBSECTIONS: &[&str] = &[
    "x", "a b", "a\\\\b", "a\\\"b", "Class1", "a\\nb", "", "ü", "a;b", "a#b", "a]b", "a\\tb",
];

const UNICODE_NAMES: &[&str] = &[
    "中文",
    "ключ",
    "κλειδί",
    "clé",
    "k١٢",
    "a\u{301}",
    "x😀",
    "ſerial",
    "\u{212A}ey",
    "ǅa",
    "ª",
    "Ⅻ",
    "a\u{200B}",
    "ab\u{FF11}",
];

const NOISE: &[char] = &[
    '[', ']', '"', '\\', '=', ';', '#', '\n', '\r', ' ', '\t', '_', '.', '\0', 'a', 'Z', '1', '-',
    '\u{FEFF}', 'é', '中', '\u{A0}', '\u{301}',
];

const VALUE_PIECES: &[&str] = &[
    "abc", " ", "\t", "\"", "\"q\"", "\\\"", "\\\\", "\\n", "\\t", "\\\n", "\\\r\n", ";", "#", "=",
    "[", "]", "é", "中", "\u{A0}", "x y", "\\a", "\\\n  ", "'", "`",
];

fn is_header(line: &str) -> bool {
    line.trim_start().starts_with('[')
}

fn is_assignment(line: &str) -> bool {
    let t = line.trim_start();
    !t.starts_with(['[', ';', '#']) && t.contains('=')
}

fn pick_line(rng: &mut Rng, lines: &[String], pred: impl Fn(&str) -> bool) -> Option<usize> {
    let idx: Vec<usize> = (0..lines.len()).filter(|&i| pred(&lines[i])).collect();
    if idx.is_empty() {
        None
    } else {
        Some(*rng.pick(&idx))
    }
}

fn split_assignment(line: &str) -> (String, String) {
    match line.split_once('=') {
        Some((k, v)) => (k.to_owned(), v.to_owned()),
        None => (line.to_owned(), String::new()),
    }
}

fn all_key_names() -> Vec<&'static str> {
    SECTIONS
        .iter()
        .flat_map(|s| s.keys.iter().map(|k| k.name))
        .collect()
}

fn keys_of_type(ty: ValueType) -> Vec<(&'static str, &'static str)> {
    SECTIONS
        .iter()
        .flat_map(|s| {
            s.keys
                .iter()
                .filter(move |k| k.ty == ty)
                .map(move |k| (s.name, k.name))
        })
        .collect()
}

fn typo(rng: &mut Rng, name: &str) -> String {
    let mut chars: Vec<char> = name.chars().collect();
    if chars.len() < 2 {
        return format!("{name}x");
    }
    let i = rng.below(chars.len() - 1) + 1;
    match rng.below(4) {
        0 => {
            chars.remove(i);
        }
        1 => chars.insert(i, *rng.pick(&['s', 'e', 'a', '-'])),
        2 if i + 1 < chars.len() => chars.swap(i, i + 1),
        _ => chars[i] = *rng.pick(&['x', 'e', 'o']),
    }
    chars.into_iter().collect()
}

fn random_case(rng: &mut Rng, s: &str) -> String {
    s.chars()
        .map(|c| {
            if rng.chance(40) {
                if c.is_ascii_lowercase() {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            } else {
                c
            }
        })
        .collect()
}

/// A typed key/value line placed in (or appended with) the right section header.
fn typed_line(rng: &mut Rng, lines: &mut Vec<String>, ty: ValueType, values: &[&str]) {
    let keys = keys_of_type(ty);
    if keys.is_empty() {
        return;
    }
    let (section, key) = *rng.pick(&keys);
    let value = *rng.pick(values);
    let sep = *rng.pick(&["=", " = ", " =", "= ", "\t=\t"]);
    let line = format!("{key}{sep}{value}");
    let header_pos = lines.iter().position(|l| {
        l.trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .eq_ignore_ascii_case(section)
    });
    match header_pos {
        Some(p) if rng.chance(80) => lines.insert(p + 1, line),
        _ => {
            let header = if section == "LoadBalancerClass" {
                format!("[{section} \"{}\"]", rng.pick(&["c1", "c2"]))
            } else {
                format!("[{section}]")
            };
            lines.push(header);
            lines.push(line);
        }
    }
}

fn mutate_lines(rng: &mut Rng, lines: &mut Vec<String>) {
    match rng.below(24) {
        // case changes of names
        0 => {
            if let Some(i) = pick_line(rng, lines, |l| is_header(l) || is_assignment(l)) {
                let l = lines[i].clone();
                if is_header(&l) {
                    lines[i] = random_case(rng, &l);
                } else {
                    let (k, v) = split_assignment(&l);
                    lines[i] = format!("{}={v}", random_case(rng, &k));
                }
            }
        }
        // ſ / Kelvin sign fold to s / k
        1 => {
            if let Some(i) = pick_line(rng, lines, |l| {
                is_assignment(l) && l.split('=').next().is_some_and(|k| k.contains(['s', 'k']))
            }) {
                let (k, v) = split_assignment(&lines[i].clone());
                let k = if rng.chance(50) {
                    k.replacen('s', "ſ", 1)
                } else {
                    k.replacen('k', "\u{212A}", 1)
                };
                lines[i] = format!("{k}={v}");
            }
        }
        // quoting
        2 => {
            if let Some(i) = pick_line(rng, lines, is_assignment) {
                let (k, v) = split_assignment(&lines[i].clone());
                let v = v.trim().to_owned();
                let cut = v
                    .char_indices()
                    .map(|(i, _)| i)
                    .nth(v.chars().count() / 2)
                    .unwrap_or(0);
                let (a, b) = v.split_at(cut);
                lines[i] = match rng.below(4) {
                    0 => format!("{k}= \"{v}\""),
                    1 => format!("{k}=\"{a}\" \"{b}\""),
                    2 => format!("{k}={a}\"{b}\""),
                    _ => format!("{k}= \" {v} \" "),
                };
            }
        }
        // escapes
        3 => {
            if let Some(i) = pick_line(rng, lines, is_assignment) {
                let (k, v) = split_assignment(&lines[i].clone());
                let esc = *rng.pick(&["\\\\", "\\\"", "\\n", "\\t", "\\a", "\\x", "\\ "]);
                lines[i] = if rng.chance(70) {
                    format!("{k}=\"{}{esc}\"", v.trim())
                } else {
                    format!("{k}={}{esc}", v.trim())
                };
            }
        }
        // comments
        4 => {
            let i = rng.below(lines.len() + 1);
            let c = format!(
                "{}{}",
                rng.pick(&[";", "#"]),
                rng.pick(&["", " c", " x=1", " [s]"])
            );
            if i < lines.len() && rng.chance(60) {
                let sp = *rng.pick(&["", " ", "\t"]);
                lines[i] = format!("{}{sp}{c}", lines[i]);
            } else {
                lines.insert(i.min(lines.len()), c);
            }
        }
        // duplicate a line
        5 => {
            if !lines.is_empty() {
                let i = rng.below(lines.len());
                let l = lines[i].clone();
                let j = rng.below(lines.len() + 1);
                lines.insert(j, l);
            }
        }
        // repeat a section at the end
        6 => {
            if let Some(i) = pick_line(rng, lines, is_header) {
                let mut block = vec![random_case(rng, &lines[i])];
                for l in lines.iter().skip(i + 1) {
                    if is_header(l) {
                        break;
                    }
                    block.push(l.clone());
                }
                lines.extend(block);
            }
        }
        // continuation lines
        7 => {
            if let Some(i) = pick_line(rng, lines, is_assignment) {
                let (k, v) = split_assignment(&lines[i].clone());
                let v = v.trim_end().to_owned();
                let cut = v
                    .char_indices()
                    .map(|(i, _)| i)
                    .nth(rng.below(v.chars().count() + 1))
                    .unwrap_or(v.len());
                let (a, b) = v.split_at(cut);
                let lead = *rng.pick(&["", " ", "\t  "]);
                let brk = *rng.pick(&["\\", "\\\r", " \\"]);
                lines[i] = format!("{k}={a}{brk}");
                lines.insert(i + 1, format!("{lead}{b}"));
            }
        }
        // subsections on headers
        8 => {
            if let Some(i) = pick_line(rng, lines, is_header) {
                let name = lines[i]
                    .trim()
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned();
                let name = name.split('"').next().unwrap_or("").trim().to_owned();
                let sub = *rng.pick(SUBSECTIONS);
                lines[i] = format!("[{name} \"{sub}\"]");
            } else {
                lines.push(format!("[LoadBalancerClass \"{}\"]", rng.pick(SUBSECTIONS)));
            }
        }
        9 => typed_line(rng, lines, ValueType::Bool, BOOL_LITERALS),
        10 => typed_line(rng, lines, ValueType::Duration, DURATIONS),
        11 => {
            if rng.chance(50) {
                typed_line(rng, lines, ValueType::Int, INTS)
            } else {
                typed_line(rng, lines, ValueType::Uint, INTS)
            }
        }
        // `_` / `.` in names
        12 => {
            if let Some(i) = pick_line(rng, lines, |l| l.contains('-')) {
                let r = *rng.pick(&["_", "."]);
                lines[i] = lines[i].replacen('-', r, 1);
            }
        }
        // unknown keys, typos, keys in the wrong section, unknown sections
        13 => {
            let names = all_key_names();
            let known = *rng.pick(&names);
            let key = match rng.below(4) {
                0 => typo(rng, known),
                1 => known.to_owned(),
                2 => (*rng.pick(&["use-octavia", "secret-name", "bs-version", "foo"])).to_owned(),
                _ => typo(rng, "provider-requires-serial-api-calls"),
            };
            let line = format!("{key} = {}", rng.pick(&["true", "1", "x", ""]));
            let i = rng.below(lines.len() + 1);
            lines.insert(i, line);
        }
        14 => {
            let known = rng_section(rng);
            let sect = match rng.below(3) {
                0 => typo(rng, known),
                1 => (*rng.pick(&["BlockStorage", "Foo", "Loadbalancers", "Globals"])).to_owned(),
                _ => random_case(rng, known),
            };
            let i = rng.below(lines.len() + 1);
            lines.insert(i, format!("[{sect}]"));
        }
        // blank and empty values
        15 => {
            if let Some(i) = pick_line(rng, lines, is_assignment) {
                let (k, _) = split_assignment(&lines[i].clone());
                lines[i] = if rng.chance(50) {
                    k.trim_end().to_owned()
                } else {
                    format!("{k}=")
                };
            }
        }
        // whitespace oddities
        16 => {
            if !lines.is_empty() {
                let i = rng.below(lines.len());
                let ws = *rng.pick(&[" ", "\t", "  \t", "\r"]);
                lines[i] = match rng.below(3) {
                    0 => format!("{ws}{}", lines[i]),
                    1 => format!("{}{ws}", lines[i]),
                    _ => lines[i].replacen('=', &format!("{ws}={ws}"), 1),
                };
            }
        }
        // Unicode names
        17 => {
            let name = *rng.pick(UNICODE_NAMES);
            let i = rng.below(lines.len() + 1);
            if rng.chance(30) {
                lines.insert(i, format!("[{name}]"));
            } else {
                lines.insert(i, format!("{name} = v"));
            }
        }
        // multi-valued keys
        18 => {
            let key = *rng.pick(&["public-network-name", "internal-network-name"]);
            let mut block = vec!["[Networking]".to_owned()];
            for _ in 0..rng.below(4) + 1 {
                block.push(match rng.below(4) {
                    0 => key.to_owned(),
                    1 => format!("{key} ="),
                    _ => format!(
                        "{key} = {}",
                        rng.pick(&["public", "ext net", "\"a;b\"", "x"])
                    ),
                });
            }
            lines.extend(block);
        }
        // header comments / junk after headers
        19 => {
            if let Some(i) = pick_line(rng, lines, is_header) {
                let tail = *rng.pick(&[" ; c", "#c", " x", "]", " =", "\t"]);
                lines[i] = format!("{}{tail}", lines[i]);
            }
        }
        // the serial key with odd spellings
        20 => {
            let key = random_case(rng, "provider-requires-serial-api-calls");
            let value = *rng.pick(BOOL_LITERALS);
            let sect = *rng.pick(&[
                "[LoadBalancer]",
                "[loadbalancer]",
                "[LoadBalancer \"x\"]",
                "[Global]",
            ]);
            if rng.chance(50) {
                lines.push(sect.to_owned());
            }
            if rng.chance(80) {
                lines.push(format!("{key} = {value}"));
            } else {
                lines.push(key);
            }
        }
        // random value text
        21 => {
            if let Some(i) = pick_line(rng, lines, is_assignment) {
                let (k, _) = split_assignment(&lines[i].clone());
                let mut v = String::new();
                for _ in 0..rng.below(5) + 1 {
                    let piece: &&str = rng.pick(VALUE_PIECES);
                    v.push_str(piece);
                }
                lines[i] = format!("{k}={v}");
            }
        }
        // delete a line
        22 => {
            if !lines.is_empty() {
                let i = rng.below(lines.len());
                lines.remove(i);
            }
        }
        // a string-typed key with no value, or in an ignored place
        _ => {
            let line = (*rng.pick(&[
                "username",
                "lb-method",
                "search-order",
                "router-id",
                "subnet-id",
            ]))
            .to_owned();
            let i = rng.below(lines.len() + 1);
            lines.insert(i, line);
        }
    }
}

fn rng_section(rng: &mut Rng) -> &'static str {
    rng.pick(SECTIONS).name
}

fn char_boundaries(s: &str) -> Vec<usize> {
    s.char_indices().map(|(i, _)| i).chain([s.len()]).collect()
}

fn mutate_text(rng: &mut Rng, mut text: String) -> String {
    if rng.chance(12) {
        text = text.replace('\n', "\r\n");
    } else if rng.chance(4) {
        let bs = char_boundaries(&text);
        let at = *rng.pick(&bs);
        let (a, b) = text.split_at(at);
        text = format!("{}{}", a.replace('\n', "\r\n"), b);
    }
    if rng.chance(12) {
        let bs = char_boundaries(&text);
        let at = *rng.pick(&bs);
        let c = *rng.pick(NOISE);
        text.insert(at, c);
    }
    if rng.chance(4) {
        let bs = char_boundaries(&text);
        let at = *rng.pick(&bs);
        text.truncate(at);
    }
    if rng.chance(10) {
        while text.ends_with(['\n', '\r']) {
            text.pop();
        }
    }
    if rng.chance(3) {
        text.insert(0, '\u{FEFF}');
    }
    text
}

fn generated(count: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut bases: Vec<String> = BASES.iter().map(|s| (*s).to_owned()).collect();
    bases.extend(FIXTURES.iter().map(|(_, t)| (*t).to_owned()));
    (0..count)
        .map(|_| {
            let base = rng.pick(&bases).clone();
            let mut lines: Vec<String> = base.lines().map(str::to_owned).collect();
            for _ in 0..rng.below(4) + 1 {
                mutate_lines(&mut rng, &mut lines);
            }
            let mut text = lines.join("\n");
            text.push('\n');
            mutate_text(&mut rng, text)
        })
        .collect()
}

/// The whole corpus: (name, text).
pub(crate) fn corpus() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = FIXTURES
        .iter()
        .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
        .collect();
    for b in BASES {
        out.push((format!("base-{:02}", out.len()), (*b).to_owned()));
    }
    for (i, t) in handwritten().into_iter().enumerate() {
        out.push((format!("hand-{i:03}"), t));
    }
    // STACKGATE_GCFG_DIFF_CASES / STACKGATE_GCFG_DIFF_SEED widen the search (defaults are fixed).
    let env_num = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let count = env_num("STACKGATE_GCFG_DIFF_CASES").map_or(3000, |n| n as usize);
    let seed = env_num("STACKGATE_GCFG_DIFF_SEED").unwrap_or(0x5EED_CC0F_F1CE);
    for (i, t) in generated(count, seed).into_iter().enumerate() {
        out.push((format!("gen-{i:05}"), t));
    }
    for (i, t) in code_point_names(300, 0xC0DE_901E).into_iter().enumerate() {
        out.push((format!("cp-{i:03}"), t));
    }
    // Every readable config after the webhook's mutation: gcfg must read the edit back.
    let edited: Vec<(String, String)> = out
        .iter()
        .filter_map(|(name, text)| {
            let mut doc = Document::parse(text).ok()?;
            doc.set("LoadBalancer", SERIAL_KEY, "true");
            let after = doc.to_text();
            (after != *text).then(|| (format!("{SET_PREFIX}{name}"), after))
        })
        .collect();
    out.extend(edited);
    out
}

const SERIAL_KEY: &str = "provider-requires-serial-api-calls";

/// Name prefix of the corpus entries produced by `Document::set` from another entry.
const SET_PREFIX: &str = "set-";

/// Names built from random code points, to compare gcfg's letter/digit classes (Go
/// `unicode.IsLetter` / `unicode.IsDigit`) with stackgate's, one character per line.
fn code_point_names(count: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed);
    (0..count)
        .map(|_| {
            let mut text = String::from("[Route]\n");
            for _ in 0..30 {
                let cp = match rng.below(4) {
                    0 => 0x80 + rng.below(0x780),
                    1 | 2 => 0x800 + rng.below(0xF800),
                    _ => 0x10000 + rng.below(0x20000),
                };
                let Some(c) = char::from_u32(cp as u32) else {
                    continue;
                };
                // Mostly candidates Rust calls alphanumeric (a superset-ish of Go's letters and
                // digits, so most lines are legal and one file checks many characters); the
                // rest unfiltered, to hit illegal ones.
                if !(c.is_alphanumeric() || rng.chance(3)) {
                    continue;
                }
                if rng.chance(50) {
                    text.push_str(&format!("a{c} = v\n"));
                } else {
                    text.push_str(&format!("{c}b = v\n"));
                }
            }
            text
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Minimal JSON reader for the oracle's output

#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

struct JsonReader<'a> {
    s: &'a [u8],
    i: usize,
}

impl JsonReader<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|b| b.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &str) -> Result<(), String> {
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(format!("expected {lit} at {}", self.i))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        self.ws();
        match self.s.get(self.i) {
            Some(b'n') => self.eat("null").map(|_| Json::Null),
            Some(b't') => self.eat("true").map(|_| Json::Bool(true)),
            Some(b'f') => self.eat("false").map(|_| Json::Bool(false)),
            Some(b'"') => self.string().map(Json::Str),
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value()?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Arr(items));
                        }
                        _ => return Err(format!("bad array at {}", self.i)),
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                let mut fields = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Obj(fields));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    self.ws();
                    self.eat(":")?;
                    let v = self.value()?;
                    fields.push((k, v));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Obj(fields));
                        }
                        _ => return Err(format!("bad object at {}", self.i)),
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => {
                let start = self.i;
                while self
                    .s
                    .get(self.i)
                    .is_some_and(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                {
                    self.i += 1;
                }
                Ok(Json::Num(
                    String::from_utf8_lossy(&self.s[start..self.i]).into_owned(),
                ))
            }
            _ => Err(format!("unexpected input at {}", self.i)),
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let h = std::str::from_utf8(self.s.get(self.i..self.i + 4).ok_or("short \\u")?)
            .map_err(|e| e.to_string())?;
        self.i += 4;
        u32::from_str_radix(h, 16).map_err(|e| e.to_string())
    }

    fn string(&mut self) -> Result<String, String> {
        self.eat("\"")?;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let b = *self.s.get(self.i).ok_or("unterminated string")?;
            self.i += 1;
            match b {
                b'"' => return String::from_utf8(out).map_err(|e| e.to_string()),
                b'\\' => {
                    let e = *self.s.get(self.i).ok_or("bad escape")?;
                    self.i += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let cp = if (0xD800..0xDC00).contains(&hi) {
                                self.eat("\\u")?;
                                let lo = self.hex4()?;
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(cp).unwrap_or('\u{FFFD}')
                        }
                        _ => return Err("bad escape".into()),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                _ => out.push(b),
            }
        }
    }
}

fn parse_json(line: &str) -> Result<Json, String> {
    let mut r = JsonReader {
        s: line.as_bytes(),
        i: 0,
    };
    let v = r.value()?;
    r.ws();
    if r.i != line.len() {
        return Err(format!("trailing data at {}", r.i));
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// Comparison

type Drop3 = (String, Option<String>, Option<String>);

/// stackgate's "extra data" set, in gcfg's terms.
fn our_ignored(doc: &Document) -> BTreeSet<Drop3> {
    check(doc)
        .ignored
        .into_iter()
        .map(|i| match i.reason {
            IgnoredReason::UnknownSection | IgnoredReason::SubsectionNotAllowed => {
                (i.section, None, None)
            }
            IgnoredReason::UnknownKey | IgnoredReason::RemovedKey => {
                let map_section = stackgate::cloudconf::schema::find_section(&i.section)
                    .is_some_and(|s| s.subsections);
                let sub = map_section.then(|| i.subsection.unwrap_or_default());
                (i.section, sub, i.key)
            }
        })
        .collect()
}

fn oracle_ignored(v: &Json) -> BTreeSet<Drop3> {
    let mut out = BTreeSet::new();
    if let Some(Json::Arr(items)) = v.get("ignored") {
        for it in items {
            let s = |k: &str| it.get(k).and_then(Json::as_str).map(str::to_owned);
            out.insert((
                s("section").unwrap_or_default(),
                s("subsection"),
                s("variable"),
            ));
        }
    }
    out
}

/// The value gcfg would store for `key` of type `ty`, as stackgate decodes it, as JSON.
fn our_field(doc: &Document, section: &str, sub: Option<&str>, key: &str, ty: ValueType) -> Json {
    let eff = doc.effective(section, sub, key);
    let value = eff.as_ref().and_then(|e| e.value.clone());
    match ty {
        ValueType::String => Json::Str(value.unwrap_or_default()),
        ValueType::Bool => {
            Json::Bool(eff.is_some_and(|e| parse_bool(e.value.as_deref()) == Some(true)))
        }
        ValueType::Int | ValueType::Uint => Json::Num(
            value
                .and_then(|v| parse_gcfg_int(&v, ty == ValueType::Int).ok())
                .unwrap_or(0)
                .to_string(),
        ),
        ValueType::Duration => Json::Num(
            value
                .and_then(|v| parse_go_duration(&v).ok())
                .unwrap_or(0)
                .to_string(),
        ),
        ValueType::MultiString => {
            let vs = doc.values(section, sub, key);
            if vs.is_empty() {
                Json::Null
            } else {
                Json::Arr(vs.into_iter().map(Json::Str).collect())
            }
        }
    }
}

fn normalize_oracle_field(v: &Json) -> Json {
    match v {
        Json::Arr(a) if a.is_empty() => Json::Null,
        other => other.clone(),
    }
}

fn compare_section(
    doc: &Document,
    spec: &SectionSpec,
    sub: Option<&str>,
    oracle: Option<&Json>,
    diffs: &mut Vec<String>,
) {
    for k in spec.keys {
        let ours = our_field(doc, spec.name, sub, k.name, k.ty);
        let theirs = oracle
            .and_then(|o| o.get(k.name))
            .map(normalize_oracle_field)
            .unwrap_or(Json::Null);
        if ours != theirs {
            diffs.push(format!(
                "value of [{} {:?}] {}: stackgate {:?}, gcfg {:?}",
                spec.name, sub, k.name, ours, theirs
            ));
        }
    }
}

fn compare_values(doc: &Document, config: &Json, diffs: &mut Vec<String>) {
    for spec in SECTIONS {
        if spec.subsections {
            let ours: BTreeSet<String> = doc
                .sections()
                .filter(|h| stackgate::cloudconf::eq_fold(h.name, spec.name))
                .map(|h| h.subsection.unwrap_or_default().to_owned())
                .collect();
            let theirs_map = match config.get(spec.name) {
                Some(Json::Obj(fields)) => fields.clone(),
                _ => Vec::new(),
            };
            let theirs: BTreeSet<String> = theirs_map.iter().map(|(k, _)| k.clone()).collect();
            if ours != theirs {
                diffs.push(format!(
                    "[{}] subsections: stackgate {ours:?}, gcfg {theirs:?}",
                    spec.name
                ));
                continue;
            }
            for (name, fields) in &theirs_map {
                let sub = (!name.is_empty()).then_some(name.as_str());
                compare_section(doc, spec, sub, Some(fields), diffs);
            }
        } else {
            compare_section(doc, spec, None, config.get(spec.name), diffs);
        }
    }
}

/// `L:C: message` → (L, C, message) for gcfg's positioned (syntax) errors.
fn positioned(fatal: &str) -> Option<(usize, usize, &str)> {
    let (pos, msg) = fatal.split_once(": ")?;
    let (l, c) = pos.split_once(':')?;
    Some((l.parse().ok()?, c.parse().ok()?, msg))
}

/// Every difference between stackgate and the oracle for one text.
fn compare(text: &str, v: &Json) -> Vec<String> {
    let mut diffs = Vec::new();
    let starts = v.get("starts").and_then(Json::as_bool).unwrap_or(false);
    let fatal = v.get("fatal").and_then(Json::as_str).unwrap_or_default();
    let parsed = Document::parse(text);
    let ours_start = would_start(text);
    if ours_start != starts {
        diffs.push(format!(
            "would-start: stackgate {ours_start}, gcfg {starts} (gcfg error: {fatal:?}; stackgate: {})",
            match &parsed {
                Ok(d) => format!("fatal {:?}", check(d).fatal),
                Err(e) => format!("parse error {e}"),
            }
        ));
    }
    if let Some((line, column, msg)) = positioned(fatal) {
        match &parsed {
            Ok(_) => diffs.push(format!(
                "gcfg syntax error {fatal:?} not found by stackgate"
            )),
            Err(e) => {
                if (e.line, e.column) != (line, column) || !msg.starts_with(&e.message) {
                    diffs.push(format!("syntax error: stackgate {e}, gcfg {fatal:?}"));
                }
            }
        }
    }
    if let (true, Ok(doc)) = (starts, &parsed) {
        let ours = our_ignored(doc);
        let theirs = oracle_ignored(v);
        if ours != theirs {
            diffs.push(format!("ignored: stackgate {ours:?}, gcfg {theirs:?}"));
        }
        let serial = v.get("serial").and_then(Json::as_bool).unwrap_or(false);
        if check(doc).serial_calls != serial {
            diffs.push(format!(
                "serial: stackgate {}, gcfg {serial}",
                check(doc).serial_calls
            ));
        }
        if let Some(config) = v.get("config") {
            compare_values(doc, config, &mut diffs);
        }
    }
    diffs
}

fn oracle_path() -> Option<PathBuf> {
    std::env::var_os(ORACLE_ENV).map(PathBuf::from)
}

fn write_corpus(dir: &Path, corpus: &[(String, String)]) -> BTreeMap<String, usize> {
    std::fs::create_dir_all(dir).expect("create corpus dir");
    let mut by_file = BTreeMap::new();
    for (i, (_, text)) in corpus.iter().enumerate() {
        let file = format!("case-{i:05}.conf");
        std::fs::write(dir.join(&file), text).expect("write corpus file");
        by_file.insert(file, i);
    }
    by_file
}

#[test]
#[ignore = "needs the gcfg oracle binary: run .ci/gcfg-oracle.sh and set STACKGATE_GCFG_ORACLE"]
fn differential_against_real_gcfg() {
    let oracle = oracle_path().unwrap_or_else(|| {
        panic!("{ORACLE_ENV} is not set: build the oracle with .ci/gcfg-oracle.sh <path> and export {ORACLE_ENV}=<path>")
    });
    assert!(
        oracle.is_file(),
        "{ORACLE_ENV}={} is not a file",
        oracle.display()
    );
    let corpus = corpus();
    let dir = std::env::temp_dir().join(format!(
        "stackgate-gcfg-differential-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let by_file = write_corpus(&dir, &corpus);
    let by_name: BTreeMap<&str, &str> = corpus
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();

    let out = Command::new(&oracle)
        .arg(&dir)
        .output()
        .expect("run the gcfg oracle");
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("oracle output is UTF-8");

    let mut seen = 0usize;
    let mut starts = 0usize;
    let mut syntax_errors = 0usize;
    let mut failures = Vec::new();
    for line in stdout.lines() {
        let v = parse_json(line).unwrap_or_else(|e| panic!("bad oracle line ({e}): {line}"));
        let file = v.get("file").and_then(Json::as_str).unwrap_or_default();
        let name = Path::new(file)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let Some(&idx) = by_file.get(name) else {
            panic!("oracle reported an unknown file {file}");
        };
        seen += 1;
        if v.get("starts").and_then(Json::as_bool) == Some(true) {
            starts += 1;
        }
        if positioned(v.get("fatal").and_then(Json::as_str).unwrap_or_default()).is_some() {
            syntax_errors += 1;
        }
        let (case, text) = &corpus[idx];
        let mut diffs = compare(text, &v);
        if let Some(original) = case.strip_prefix(SET_PREFIX).and_then(|n| by_name.get(n)) {
            // set() must keep a starting config starting, now with serial calls on.
            let gcfg_starts = v.get("starts").and_then(Json::as_bool) == Some(true);
            let gcfg_serial = v.get("serial").and_then(Json::as_bool) == Some(true);
            if would_start(original) && !(gcfg_starts && gcfg_serial) {
                diffs.push(format!(
                    "after set(): gcfg starts {gcfg_starts}, serial {gcfg_serial}; original:\n{original:?}"
                ));
            }
        }
        if !diffs.is_empty()
            && !ACCEPTED_DIVERGENCES
                .iter()
                .any(|(c, _)| *c == case.as_str())
        {
            failures.push((case.clone(), text.clone(), diffs));
        }
    }
    assert_eq!(seen, corpus.len(), "oracle did not report every file");

    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "gcfg differential: {} configs ({starts} start, {syntax_errors} syntax errors, {} other fatal), {} mismatches",
        corpus.len(),
        corpus.len() - starts - syntax_errors,
        failures.len()
    );
    if !failures.is_empty() {
        let mut report = String::new();
        for (case, text, diffs) in failures.iter().take(25) {
            let _ = writeln!(report, "=== {case}\n--- text (debug-escaped):\n{text:?}");
            for d in diffs {
                let _ = writeln!(report, "  * {d}");
            }
        }
        panic!(
            "{} of {} configs differ from gcfg:\n{report}",
            failures.len(),
            corpus.len()
        );
    }
}

/// Runs without the oracle: stackgate must handle the whole corpus without panicking, and the
/// generator must stay deterministic.
#[test]
fn corpus_is_deterministic_and_handled() {
    let a = corpus();
    let b = corpus();
    assert_eq!(a, b);
    assert!(a.len() > 4000);
    for (_, text) in &a {
        if let Ok(doc) = Document::parse(text) {
            assert_eq!(doc.to_text(), *text);
            let _ = check(&doc);
        }
    }
}
