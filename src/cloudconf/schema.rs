//! The OpenStack CCM's config schema and "would the CCM start with this text?".
//!
//! The CCM reads its cloud config with `gcfg.FatalOnly(gcfg.ReadInto(&cfg, reader))` into the
//! struct described in domain-facts §1.2. gcfg matches section and variable names to struct
//! fields case-insensitively (Go `strings.EqualFold`): against the `gcfg:"…"` tag, or against
//! the Go field name (with `-` read as `_`) when the field has no tag — which is how `username`,
//! `password`, `region` and `cafilecontents` bind in `[Global]`. Anything gcfg cannot store is
//! "extra data", dropped silently by `FatalOnly`; conversion errors are fatal.

use super::document::{Document, Entry, parse_bool};
use super::gotypes::{DurationError, IntError, parse_gcfg_int, parse_go_duration};
use super::unicode::{ascii_fold_tag, eq_fold, eq_fold_ascii};

/// The Go type of a config field, which decides how gcfg converts its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// `string`: any value; a blank variable (no `=`) is fatal.
    String,
    /// `bool`: `true|yes|on|1`, `false|no|off|0` (any case); blank means true; `key =` is fatal.
    Bool,
    /// `int` (64-bit): decimal or `0x` hexadecimal, optional sign.
    Int,
    /// `uint` (64-bit): decimal or `0x` hexadecimal, no sign.
    Uint,
    /// `util.MyDuration`: Go `time.ParseDuration` (`5s`, `1m30s`; a bare number other than 0 is
    /// fatal).
    Duration,
    /// `[]string`: every occurrence appends; a blank occurrence empties the list.
    MultiString,
}

/// One known key of a section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    /// The name to write (the gcfg tag, or the lower-cased Go field name for untagged fields).
    pub name: &'static str,
    /// Go field name when the field has no gcfg tag and binds by field name.
    pub go_field: Option<&'static str>,
    /// Go type.
    pub ty: ValueType,
    /// First CCM release that reads the key, where known.
    pub since: Option<&'static str>,
    /// The CCM's default, where it sets one (as text).
    pub default: Option<&'static str>,
    /// The value is a credential.
    pub secret: bool,
    /// [`ascii_fold_tag`] of `name` (which is ASCII): a variable's tag tells most known keys
    /// apart from it without comparing names.
    tag: u64,
}

/// One known section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionSpec {
    /// Section name (the Go field name of `Config`).
    pub name: &'static str,
    /// A map section: `[name "sub"]` subsections (and the plain `[name]`, stored under the empty
    /// name) are read. Struct sections ignore any header with a subsection.
    pub subsections: bool,
    /// The keys gcfg can store in the section.
    pub keys: &'static [KeySpec],
}

/// A key that older CCM releases read and current ones ignore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovedKey {
    /// Section it belonged to.
    pub section: &'static str,
    /// Key name.
    pub name: &'static str,
    /// First release that no longer reads it.
    pub removed_in: &'static str,
    /// What it did and what happens now.
    pub note: &'static str,
}

const fn key(name: &'static str, ty: ValueType) -> KeySpec {
    KeySpec {
        name,
        go_field: None,
        ty,
        since: None,
        default: None,
        secret: false,
        tag: ascii_fold_tag(name.as_bytes()),
    }
}

const fn field(name: &'static str, go_field: &'static str) -> KeySpec {
    KeySpec {
        name,
        go_field: Some(go_field),
        ty: ValueType::String,
        since: None,
        default: None,
        secret: false,
        tag: ascii_fold_tag(name.as_bytes()),
    }
}

const fn secret(spec: KeySpec) -> KeySpec {
    KeySpec {
        secret: true,
        ..spec
    }
}

const fn default(spec: KeySpec, value: &'static str) -> KeySpec {
    KeySpec {
        default: Some(value),
        ..spec
    }
}

const fn since(spec: KeySpec, version: &'static str) -> KeySpec {
    KeySpec {
        since: Some(version),
        ..spec
    }
}

use ValueType::{Bool, Duration, Int, MultiString, String as Str, Uint};

/// `[Global]` — `client.AuthOpts` (CPO `pkg/client/client.go`).
const GLOBAL: &[KeySpec] = &[
    key("auth-url", Str),
    key("user-id", Str),
    field("username", "Username"),
    secret(field("password", "Password")),
    key("tenant-id", Str),
    key("tenant-name", Str),
    key("trust-id", Str),
    key("trustee-id", Str),
    secret(key("trustee-password", Str)),
    key("domain-id", Str),
    key("domain-name", Str),
    key("tenant-domain-id", Str),
    key("tenant-domain-name", Str),
    key("user-domain-id", Str),
    key("user-domain-name", Str),
    field("region", "Region"),
    key("os-endpoint-type", Str),
    key("ca-file", Str),
    // A string for gcfg: its `matches:"^true|false$"` tag only applies to the flag path.
    since(key("tls-insecure", Str), "v1.20.0"),
    // domain-facts §9.1: new in v1.35.0 (PR #2964).
    since(secret(key("token", Str)), "v1.35.0"),
    key("cert-file", Str),
    key("key-file", Str),
    key("use-clouds", Bool),
    key("clouds-file", Str),
    key("cloud", Str),
    key("application-credential-id", Str),
    key("application-credential-name", Str),
    secret(key("application-credential-secret", Str)),
    field("cafilecontents", "CAFileContents"),
];

/// `[LoadBalancer]` — `LoadBalancerOpts` (CPO `pkg/openstack/openstack.go`).
const LOAD_BALANCER: &[KeySpec] = &[
    default(key("enabled", Bool), "true"),
    key("lb-version", Str),
    key("subnet-id", Str),
    key("member-subnet-id", Str),
    key("network-id", Str),
    key("floating-network-id", Str),
    key("floating-subnet-id", Str),
    key("floating-subnet", Str),
    key("floating-subnet-tags", Str),
    default(key("lb-method", Str), "ROUND_ROBIN"),
    default(key("lb-provider", Str), "amphora"),
    default(key("create-monitor", Bool), "false"),
    default(key("monitor-delay", Duration), "5s"),
    default(key("monitor-timeout", Duration), "3s"),
    default(key("monitor-max-retries", Uint), "1"),
    default(key("monitor-max-retries-down", Uint), "3"),
    default(key("manage-security-groups", Bool), "false"),
    default(key("internal-lb", Bool), "false"),
    key("node-selector", Str),
    default(key("cascade-delete", Bool), "true"),
    key("flavor-id", Str),
    key("availability-zone", Str),
    since(
        default(key("enable-ingress-hostname", Bool), "false"),
        "v1.21.0",
    ),
    default(key("ingress-hostname-suffix", Str), "nip.io"),
    since(default(key("max-shared-lb", Int), "2"), "v1.23.0"),
    since(default(key("container-store", Str), "barbican"), "v1.25.0"),
    since(
        default(key("provider-requires-serial-api-calls", Bool), "false"),
        "v1.28.0",
    ),
    key("default-tls-container-ref", Str),
];

/// `[LoadBalancerClass "name"]` — `LBClass`.
const LB_CLASS: &[KeySpec] = &[
    key("floating-network-id", Str),
    key("floating-subnet-id", Str),
    key("floating-subnet", Str),
    key("floating-subnet-tags", Str),
    key("network-id", Str),
    key("subnet-id", Str),
    key("member-subnet-id", Str),
];

const ROUTE: &[KeySpec] = &[key("router-id", Str)];

const METADATA: &[KeySpec] = &[
    default(key("search-order", Str), "configDrive,metadataService"),
    default(key("request-timeout", Duration), "60s"),
];

const NETWORKING: &[KeySpec] = &[
    key("ipv6-support-disabled", Bool),
    key("public-network-name", MultiString),
    key("internal-network-name", MultiString),
    key("address-sort-order", Str),
];

/// The sections of the CCM's `Config` struct.
pub const SECTIONS: &[SectionSpec] = &[
    SectionSpec {
        name: "Global",
        subsections: false,
        keys: GLOBAL,
    },
    SectionSpec {
        name: "LoadBalancer",
        subsections: false,
        keys: LOAD_BALANCER,
    },
    SectionSpec {
        name: "LoadBalancerClass",
        subsections: true,
        keys: LB_CLASS,
    },
    SectionSpec {
        name: "Route",
        subsections: false,
        keys: ROUTE,
    },
    SectionSpec {
        name: "Metadata",
        subsections: false,
        keys: METADATA,
    },
    SectionSpec {
        name: "Networking",
        subsections: false,
        keys: NETWORKING,
    },
];

/// Keys that current CCM releases no longer read.
pub const REMOVED_KEYS: &[RemovedKey] = &[RemovedKey {
    section: "LoadBalancer",
    name: "use-octavia",
    removed_in: "v1.26.0",
    note: "use-octavia was removed in CCM v1.26.0 together with Neutron LBaaS support; \
           Octavia is always used and the key is ignored",
}];

/// A value the CCM knows for a string key, and the first release that knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownValue {
    /// The value, compared exactly (the CCM uses `slices.Contains`).
    pub value: &'static str,
    /// First CCM release that lists it; None: every release covered here.
    pub since: Option<&'static str>,
}

const fn known(value: &'static str) -> KnownValue {
    KnownValue { value, since: None }
}

/// The minor number of a CCM release name: `v1.28.0` → 28.
pub fn release_minor(release: &str) -> Option<u64> {
    release.strip_prefix("v1.")?.split('.').next()?.parse().ok()
}

/// `[LoadBalancer] lb-provider` values the CCM supports (`supportedLBProvider`, CPO
/// `pkg/openstack/openstack.go` l.63; domain-facts §9.1: `f5` from v1.32.0, `amphorav2` from
/// v1.34.0, PR #2980). Any other value only makes the CCM log "Unsupported LoadBalancer
/// Provider" at start and is passed to Octavia unchanged.
pub const LB_PROVIDERS: &[KnownValue] = &[
    known("amphora"),
    known("octavia"),
    known("ovn"),
    KnownValue {
        value: "f5",
        since: Some("v1.32.0"),
    },
    KnownValue {
        value: "amphorav2",
        since: Some("v1.34.0"),
    },
];

/// `[LoadBalancer] container-store` values the CCM supports (`supportedContainerStore`, CPO
/// `pkg/openstack/openstack.go` l.66). Another value only logs "Unsupported Container Store".
pub const CONTAINER_STORES: &[KnownValue] = &[known("barbican"), known("external")];

/// `[Metadata] search-order` ids (CPO `pkg/util/metadata/metadata.go`
/// `CheckMetadataSearchOrder`: `ConfigDriveID`, `MetadataID`).
pub const METADATA_SEARCH_IDS: &[&str] = &["configDrive", "metadataService"];

/// Values gcfg stores but the CCM's own start-up code refuses (domain-facts §9.1), in file
/// order. gcfg has no say in these, so they are not part of [`check`]'s `fatal` (which must
/// equal gcfg's verdict, see the differential test):
///
/// * `[LoadBalancer] lb-version` not empty and not exactly `v2`, while the load balancer is
///   enabled: `klog.Fatalf("Config error: currently only support LBaaS v2 …")` in
///   `OpenStack.LoadBalancer()` (CPO `pkg/openstack/openstack.go`), which returns early when
///   `enabled = false`.
/// * `[Metadata] search-order` not empty (empty means the default
///   `configDrive,metadataService`) and, split on `,`, more than two elements or an element
///   that is not exactly `configDrive` or `metadataService` after `strings.TrimSpace`
///   (`CheckMetadataSearchOrder`, called by `NewOpenStack`).
///
/// Values are the effective (last) ones, as gcfg decodes them; a blank variable is gcfg's
/// own fatal error and is skipped here.
pub fn start_problems(doc: &Document) -> Vec<Problem> {
    let mut out = Vec::new();
    let lb_enabled = doc
        .effective("LoadBalancer", None, "enabled")
        .is_none_or(|e| parse_bool(e.value.as_deref()) != Some(false));
    if lb_enabled
        && let Some(e) = doc.effective("LoadBalancer", None, "lb-version")
        && let Some(v) = e.value.as_deref()
        && !v.is_empty()
        && v != "v2"
    {
        out.push(problem(
            &e,
            ProblemKind::LbVersion,
            "the CCM supports only LBaaS v2: any value other than `v2` (an empty value is fine) makes it exit at start with \"Config error: currently only support LBaaS v2, unrecognised lb-version\"; remove the line or write `lb-version = v2`",
        ));
    }
    if let Some(e) = doc.effective("Metadata", None, "search-order")
        && let Some(v) = e.value.as_deref()
        && !v.is_empty()
    {
        let elements: Vec<&str> = v.split(',').collect();
        let message = if elements.len() > 2 {
            Some(
                "more than two comma-separated elements: the CCM exits at start (\"Value cannot contain more than 2 elements\"); write `configDrive`, `metadataService` or both",
            )
        } else if elements
            .iter()
            .any(|id| !METADATA_SEARCH_IDS.contains(&super::unicode::go_trim_space(id)))
        {
            Some(
                "an element other than `configDrive` or `metadataService` (exact case; an empty element such as a trailing comma counts): the CCM exits at start (\"invalid element found in section [Metadata] with key `search-order`\"); write `configDrive`, `metadataService` or both, comma-separated",
            )
        } else {
            None
        };
        if let Some(message) = message {
            out.push(problem(&e, ProblemKind::SearchOrder, message));
        }
    }
    out.sort_by_key(|p| p.line);
    out
}

/// The section gcfg binds `name` to, if any.
pub fn find_section(name: &str) -> Option<&'static SectionSpec> {
    SECTIONS.iter().find(|s| eq_fold_ascii(name, s.name))
}

/// The key gcfg binds `key` to in `section`, if any.
pub fn find_key(section: &str, key: &str) -> Option<&'static KeySpec> {
    find_section(section).and_then(|s| s.keys.iter().find(|k| eq_fold_ascii(key, k.name)))
}

/// A value that makes gcfg fail, so the CCM exits at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line of the variable.
    pub line: usize,
    /// Section name as written.
    pub section: String,
    /// Decoded subsection name, if any.
    pub subsection: Option<String>,
    /// Variable name as written.
    pub key: Option<String>,
    /// What is wrong and how to fix it; never contains the value.
    pub message: String,
    /// Machine-readable kind.
    pub kind: ProblemKind,
}

/// The kinds of fatal value problems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// A bool field with a value other than true/yes/on/1/false/no/off/0.
    InvalidBool,
    /// A bool field written as `key =` (empty string).
    EmptyBool,
    /// A non-bool field written without `=`.
    BlankValue,
    /// Not a decimal or `0x` hexadecimal integer.
    InvalidInt,
    /// A sign on an unsigned field.
    SignedUint,
    /// An integer outside the 64-bit range.
    IntOutOfRange,
    /// A duration without a unit, e.g. `monitor-delay = 5`.
    DurationMissingUnit,
    /// Any other invalid duration.
    InvalidDuration,
    /// `[LoadBalancer] lb-version` other than `v2` (the CCM's start-up check, not gcfg's).
    LbVersion,
    /// An invalid `[Metadata] search-order` (the CCM's start-up check, not gcfg's).
    SearchOrder,
}

/// Why something is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoredReason {
    /// The section is not part of the CCM config (e.g. `[BlockStorage]`).
    UnknownSection,
    /// The key is not a field of its (known) section.
    UnknownKey,
    /// A subsection on a section that does not take subsections (e.g. `[Global "x"]`): the header
    /// and everything under it is ignored.
    SubsectionNotAllowed,
    /// A key that older releases read and current ones ignore (e.g. `use-octavia`).
    RemovedKey,
}

/// Something gcfg silently drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// 1-based line of the header (section-level) or of the variable (key-level).
    pub line: usize,
    /// Section name as written.
    pub section: String,
    /// Decoded subsection name, if any.
    pub subsection: Option<String>,
    /// Variable name as written; `None` when a whole section header is ignored.
    pub key: Option<String>,
    /// Why.
    pub reason: IgnoredReason,
    /// The known name this is probably a misspelling of (a key of the same section, or a
    /// section name). Computed for the first [`MAX_SUGGESTIONS`] ignored names only, like
    /// the "read in section \[X\]" note.
    pub suggestion: Option<String>,
    /// Extra explanation (removed key, key of another section, section used by other tools).
    pub note: Option<String>,
}

/// The CCM's reading of a parsed config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CcmReport {
    /// Values that make gcfg fail (the CCM exits at start), in file order.
    pub fatal: Vec<Problem>,
    /// What gcfg silently ignores, in file order.
    pub ignored: Vec<Ignored>,
    /// Effective `[LoadBalancer] provider-requires-serial-api-calls` (default false); only
    /// meaningful when `fatal` is empty.
    pub serial_calls: bool,
}

impl CcmReport {
    /// True when the CCM gets past reading this config.
    pub fn starts(&self) -> bool {
        self.fatal.is_empty()
    }
}

/// How many ignored names [`check`] computes a "did you mean" suggestion (and the "read in
/// section \[X\]" note for a key of another section) for, per config.
///
/// A suggestion costs one bounded edit-distance pass over the section's keys, the note a
/// pass over every known key; past this many the report leaves `suggestion` and that note
/// empty, so a config of 200 000 unknown keys costs little more than one of known keys.
/// Rules show at most a few ignored names one by one
/// ((`rules::MAX_FINDINGS_PER_KIND`)), all of them among the first ones.
pub const MAX_SUGGESTIONS: usize = 256;

/// Longest name (in characters) that can be a plausible misspelling of a known one: the
/// longest known name plus the largest allowed distance. Longer names are rejected after
/// counting this many characters, whatever their length.
const MAX_PLAUSIBLE_CHARS: usize = 40;

/// Optimal-string-alignment distance (edits and adjacent swaps) over characters.
#[cfg(test)]
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    bounded_distance(&a, &b, usize::MAX / 4).unwrap_or(usize::MAX)
}

/// Optimal-string-alignment distance between `a` and `b` when it is at most `limit`, else
/// `None`. Lengths further apart than `limit` are rejected without any work; otherwise the
/// cost is `a.len() * b.len()` (callers pass short names only).
fn bounded_distance(a: &[char], b: &[char], limit: usize) -> Option<usize> {
    if a.len().abs_diff(b.len()) > limit {
        return None;
    }
    let w = b.len() + 1;
    // Three rows: i-1 (prev), i-2 (prev2, for adjacent swaps) and the current one.
    let mut prev2 = vec![0usize; w];
    let mut prev: Vec<usize> = (0..w).collect();
    let mut cur = vec![0usize; w];
    for (i, ca) in a.iter().enumerate() {
        let first = i + 1;
        if let Some(x) = cur.first_mut() {
            *x = first;
        }
        let mut row_min = first;
        for (j, cb) in b.iter().enumerate() {
            let at = |row: &[usize], k: usize| row.get(k).copied().unwrap_or(usize::MAX / 4);
            let cost = usize::from(ca != cb);
            let mut v = (at(&prev, j + 1) + 1)
                .min(at(&cur, j) + 1)
                .min(at(&prev, j) + cost);
            if i > 0 && j > 0 && a.get(i - 1) == Some(cb) && b.get(j - 1) == Some(ca) {
                v = v.min(at(&prev2, j - 1) + 1);
            }
            if let Some(x) = cur.get_mut(j + 1) {
                *x = v;
            }
            row_min = row_min.min(v);
        }
        // Every later cell is at least the smallest of this row (or of the previous one,
        // through a swap): nothing within the limit can follow.
        if row_min > limit && prev.iter().min().is_none_or(|&m| m > limit) {
            return None;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev.last().copied().filter(|&d| d <= limit)
}

/// The candidate closest to `name` (compared in lower case), if it is a plausible
/// misspelling: at distance 1 to 3, scaled with the length (a quarter of it, at least 1).
fn nearest<'c>(name: &str, candidates: impl Iterator<Item = &'c str>) -> Option<&'c str> {
    // Count at most MAX_PLAUSIBLE_CHARS + 1 characters: a longer name is no misspelling of
    // any known one, and counting all of a megabyte-long name per candidate would not scale.
    if name.chars().take(MAX_PLAUSIBLE_CHARS + 1).count() > MAX_PLAUSIBLE_CHARS {
        return None;
    }
    let lower: Vec<char> = name.to_lowercase().chars().collect();
    let limit = (lower.len() / 4).clamp(1, 3);
    let mut best: Option<(usize, &'c str)> = None;
    for c in candidates {
        let cand: Vec<char> = c.to_lowercase().chars().collect();
        let bound = best.map_or(limit, |(d, _)| d.saturating_sub(1).min(limit));
        if let Some(d) = bounded_distance(&lower, &cand, bound)
            && d > 0
        {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Sections that other consumers of the same cloud config read, and which: the CCM ignores
/// them (gcfg `FatalOnly`), but they are not CCM typos, and the upstream chart renders an
/// empty `[BlockStorage]` in every config because the Secret is shared with cinder-csi.
///
/// From kubernetes/cloud-provider-openstack at c453fb7c9bbb2091aee763d9d2809cc81fdf31c6:
/// - `[BlockStorage]`: cinder-csi's `Config` (`pkg/csi/cinder/openstack/openstack.go`:
///   `Global`, `Metadata`, `BlockStorage BlockStorageOpts`); the chart's
///   `charts/openstack-cloud-controller-manager/templates/_helpers.tpl` renders it;
/// - `[KeyManager]`: the Barbican KMS plugin's `Config` (`pkg/kms/barbican/barbican.go`:
///   `KeyManager KMSOpts`).
///
/// The CCM's own `Config` (`pkg/openstack/openstack.go`) has `Global`, `LoadBalancer`,
/// `LoadBalancerClass`, `Route`, `Metadata`, `Networking` (see [`SECTIONS`]).
pub const SHARED_SECTIONS: &[(&str, &str)] = &[
    ("BlockStorage", "the Cinder CSI plugin"),
    ("KeyManager", "the Barbican KMS plugin"),
];

/// The consumer other than the CCM that reads section `name` of the same config, if one does
/// ([`SHARED_SECTIONS`]; names compared as gcfg does, ignoring case).
pub fn read_by_another_consumer(name: &str) -> Option<&'static str> {
    SHARED_SECTIONS
        .iter()
        .find(|(section, _)| eq_fold(section, name))
        .map(|(_, consumer)| *consumer)
}

/// Whether a value holds a `${NAME}` placeholder (clusterctl and envsubst variables, Flux
/// `postBuild` substitution, `${NAME:-default}` and the like): a value substituted before the
/// CCM reads the file, so what it will be is unknown where the placeholder is.
pub fn holds_placeholder(value: &str) -> bool {
    let mut rest = value;
    while let Some(at) = find_ascii_pair(rest, [b'$', b'{']) {
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            return false;
        };
        // A name: an ASCII letter or `_`, then letters, digits and `_` (only the first
        // character decides whether there is one).
        if after[..end].starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return true;
        }
        rest = &after[end..];
    }
    false
}

/// Length up to which [`find_ascii_pair`] first checks a whole text for the first byte.
const SHORT_TEXT: usize = 64;

/// Offset of the first occurrence of the two ASCII bytes `pair` in `text`: like
/// `text.find(..)` with a two-character pattern, searching for the first byte with `memchr`
/// (a pattern string takes a general substring search, costly to set up for each of many
/// short values).
pub(crate) fn find_ascii_pair(text: &str, pair: [u8; 2]) -> Option<usize> {
    debug_assert!(pair.is_ascii());
    let [first, second] = pair;
    let bytes = text.as_bytes();
    // Most values are short and hold neither byte: a pass over all of their bytes that the
    // compiler makes a few wide compares costs less than one `memchr` set-up. Long texts go
    // straight to the search, which stops at the first occurrence.
    if bytes.len() <= SHORT_TEXT && !bytes.iter().fold(false, |seen, &b| seen | (b == first)) {
        return None;
    }
    let mut from = 0;
    // `from` is always just after an ASCII byte, so a character boundary.
    while let Some(found) = text.get(from..)?.find(char::from(first)) {
        let at = from + found;
        if bytes.get(at + 1) == Some(&second) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Names a user may write as a section header without it being anything but a section name:
/// the CCM's sections and the ones other tools read from the same file.
const OTHER_SECTIONS: &[&str] = &["BlockStorage", "KeyManager"];

/// True when a section name may be shown in a message: it is a known section (of the CCM or
/// of a neighbouring tool) or a plausible misspelling of one.
///
/// Anything else may be a value that landed on a header line (`[S3cr3t]`): messages show
/// such a name masked. "Plausible" is the "did you mean" distance of [`check`]: 1 to 3 edits,
/// a quarter of the name's length at most, so a shown name is always within a few letters
/// of a public name.
pub fn is_displayable_section(name: &str) -> bool {
    find_section(name).is_some()
        || OTHER_SECTIONS.iter().any(|s| eq_fold(s, name))
        || nearest(name, SECTIONS.iter().map(|s| s.name)).is_some()
}

/// True when a variable name may be shown in a message: it is a key of some CCM section, a
/// removed key, or a plausible misspelling of a key (see [`is_displayable_section`]).
///
/// gcfg reads a line without `=` as a variable name, so a value continued on the next line
/// (`password =` then the password) arrives here as a "key": such names are shown masked.
pub fn is_displayable_key(key: &str) -> bool {
    let all_keys = || SECTIONS.iter().flat_map(|s| s.keys.iter().map(|k| k.name));
    all_keys().any(|k| eq_fold(k, key))
        || REMOVED_KEYS.iter().any(|r| eq_fold(r.name, key))
        || nearest(key, all_keys()).is_some()
}

fn problem(e: &Entry<'_>, kind: ProblemKind, message: &str) -> Problem {
    Problem {
        line: e.line,
        section: e.section.to_owned(),
        subsection: e.subsection.map(str::to_owned),
        key: Some(e.key.to_owned()),
        message: message.to_owned(),
        kind,
    }
}

/// The fatal problem gcfg has with this value for a field of type `ty`, if any: its kind and
/// message (for [`problem`], which the caller calls only then).
fn value_problem(value: Option<&str>, ty: ValueType) -> Option<(ProblemKind, &'static str)> {
    use ProblemKind as K;
    let blank = || {
        (
            K::BlankValue,
            "a variable without `=` (blank value) is only allowed for booleans: gcfg fails with \
             \"blank value not supported for type\"; write `key = value`",
        )
    };
    match ty {
        ValueType::MultiString => None,
        ValueType::String => value.is_none().then(blank),
        ValueType::Bool => match value {
            Some("") => Some((
                K::EmptyBool,
                "empty value for a boolean (`key =` with nothing after it): gcfg fails with \
                 \"failed to parse bool\"; write true or false, or remove the line",
            )),
            v if parse_bool(v).is_none() => Some((
                K::InvalidBool,
                "not a boolean gcfg accepts: use true, yes, on, 1, false, no, off or 0 (any case, \
                 unquoted blanks trimmed)",
            )),
            _ => None,
        },
        ValueType::Int | ValueType::Uint => {
            let Some(v) = value else {
                return Some(blank());
            };
            match parse_gcfg_int(v, ty == ValueType::Int) {
                Ok(_) => None,
                Err(IntError::Signed) => Some((
                    K::SignedUint,
                    "unsigned integer with a sign: gcfg accepts only digits (decimal, or \
                     hexadecimal after 0x) for this key",
                )),
                Err(IntError::Range) => Some((K::IntOutOfRange, "integer out of the 64-bit range")),
                Err(IntError::Empty | IntError::Syntax) => Some((
                    K::InvalidInt,
                    "not an integer gcfg accepts: use decimal digits (e.g. 3) or hexadecimal \
                     after 0x; no fractions, exponents or trailing text",
                )),
            }
        }
        ValueType::Duration => {
            let Some(v) = value else {
                return Some(blank());
            };
            match parse_go_duration(v) {
                Ok(_) => None,
                Err(DurationError::MissingUnit) => Some((
                    K::DurationMissingUnit,
                    "duration without a unit: the CCM parses it with Go time.ParseDuration, which \
                     needs one (e.g. 5s or 1m, not a bare number)",
                )),
                Err(DurationError::UnknownUnit) => Some((
                    K::InvalidDuration,
                    "duration with an unknown unit: Go time.ParseDuration accepts ns, us, ms, s, \
                     m and h (lower case, no blank before the unit)",
                )),
                Err(DurationError::Invalid) => Some((
                    K::InvalidDuration,
                    "not a Go duration (time.ParseDuration), e.g. 5s, 500ms or 1m30s",
                )),
            }
        }
    }
}

/// How gcfg treats the variables under one header.
enum HeaderClass {
    /// Ignored as a whole (already reported).
    Ignored,
    /// Read with this section's keys.
    Known(&'static SectionSpec),
}

fn classify_header(name: &str, subsection: Option<&str>) -> (HeaderClass, Option<IgnoredReason>) {
    match find_section(name) {
        None => (HeaderClass::Ignored, Some(IgnoredReason::UnknownSection)),
        Some(spec) if !spec.subsections && subsection.is_some() => (
            HeaderClass::Ignored,
            Some(IgnoredReason::SubsectionNotAllowed),
        ),
        Some(spec) => (HeaderClass::Known(spec), None),
    }
}

fn unknown_key(e: &Entry<'_>, spec: &SectionSpec, detail: bool) -> Ignored {
    let mut ignored = Ignored {
        line: e.line,
        section: e.section.to_owned(),
        subsection: e.subsection.map(str::to_owned),
        key: Some(e.key.to_owned()),
        reason: IgnoredReason::UnknownKey,
        suggestion: None,
        note: None,
    };
    if let Some(removed) = REMOVED_KEYS
        .iter()
        .find(|r| eq_fold(r.section, spec.name) && eq_fold(r.name, e.key))
    {
        ignored.reason = IgnoredReason::RemovedKey;
        ignored.note = Some(removed.note.to_owned());
        return ignored;
    }
    if !detail {
        return ignored;
    }
    if let Some(other) = SECTIONS
        .iter()
        .find(|s| s.name != spec.name && s.keys.iter().any(|k| eq_fold(k.name, e.key)))
    {
        ignored.note = Some(format!(
            "this key is read in section [{}], not in [{}]",
            other.name, spec.name
        ));
        return ignored;
    }
    ignored.suggestion = nearest(e.key, spec.keys.iter().map(|k| k.name)).map(str::to_owned);
    ignored
}

/// How the CCM (gcfg v1.2.3 with `FatalOnly`) reads a syntactically valid config: what makes it
/// fail at start, what it silently ignores, and the effective serial-API-calls setting.
pub fn check(doc: &Document) -> CcmReport {
    let mut report = CcmReport::default();
    // One per header, in the order of `sections()` (the `header` index of an entry).
    let mut classes: Vec<HeaderClass> = Vec::new();
    for h in doc.sections() {
        let (class, reason) = classify_header(h.name, h.subsection);
        if let Some(reason) = reason {
            let suggest = report.ignored.len() < MAX_SUGGESTIONS;
            let (suggestion, note) = match reason {
                IgnoredReason::UnknownSection => (
                    suggest
                        .then(|| nearest(h.name, SECTIONS.iter().map(|s| s.name)))
                        .flatten()
                        .map(str::to_owned),
                    read_by_another_consumer(h.name).map(|consumer| {
                        format!(
                            "[{}] is read by {consumer}, not by the CCM, from the same config",
                            h.name
                        )
                    }),
                ),
                _ => (
                    None,
                    Some(format!(
                        "section [{}] takes no subsection; gcfg ignores this header and every \
                         variable under it",
                        h.name
                    )),
                ),
            };
            report.ignored.push(Ignored {
                line: h.line,
                section: h.name.to_owned(),
                subsection: h.subsection.map(str::to_owned),
                key: None,
                reason,
                suggestion,
                note,
            });
        }
        classes.push(class);
    }
    // Views only for what is reported: most variables are known keys with valid values.
    for (at, e) in doc.entry_refs().enumerate() {
        let Some(HeaderClass::Known(spec)) = classes.get(e.header) else {
            continue;
        };
        // The tags first: an ASCII variable can only be a key with the same tag.
        let Some(key_spec) = spec
            .keys
            .iter()
            .find(|k| e.key_tag.is_none_or(|t| t == k.tag) && eq_fold_ascii(e.key, k.name))
        else {
            let detail = report.ignored.len() < MAX_SUGGESTIONS;
            if let Some(view) = doc.entry(at) {
                report.ignored.push(unknown_key(&view, spec, detail));
            }
            continue;
        };
        if let Some((kind, message)) = value_problem(e.value, key_spec.ty) {
            if let Some(view) = doc.entry(at) {
                report.fatal.push(problem(&view, kind, message));
            }
            continue;
        }
        if spec.name == "LoadBalancer" && key_spec.name == "provider-requires-serial-api-calls" {
            report.serial_calls = parse_bool(e.value).unwrap_or(false);
        }
    }
    report
}

/// True if the CCM would get past reading `text`: it parses and [`check`] finds nothing fatal.
pub fn would_start(text: &str) -> bool {
    Document::parse(text).is_ok_and(|d| check(&d).fatal.is_empty())
}

/// Sections only the OpenStack CCM's config has (other providers' gcfg configs use
/// `[Global]` and their own names: vSphere `[VirtualCenter "…"]`, `[Workspace]`, `[Disk]`,
/// `[Network]`; GCE `[global]`; AWS `[Global]`).
pub const OPENSTACK_ONLY_SECTIONS: &[&str] = &[
    "LoadBalancer",
    "LoadBalancerClass",
    "BlockStorage",
    "Metadata",
    "Networking",
    "Route",
];

/// `[Global]` keys only the OpenStack CCM reads. Keys other providers also use in `[Global]`
/// (vSphere's `secret-name`, `secret-namespace`, `ca-file`, `password`; GCE's `project-id`),
/// and generic ones another provider might (`region`), are left out on purpose.
pub const OPENSTACK_ONLY_GLOBAL_KEYS: &[&str] = &[
    "auth-url",
    "username",
    "user-id",
    "tenant-id",
    "tenant-name",
    "tenant-domain-id",
    "tenant-domain-name",
    "user-domain-id",
    "user-domain-name",
    "domain-id",
    "domain-name",
    "trust-id",
    "trustee-id",
    "trustee-password",
    "os-endpoint-type",
    "use-clouds",
    "clouds-file",
    "cloud",
    "application-credential-id",
    "application-credential-name",
    "application-credential-secret",
];

/// Whether a text gcfg cannot parse is still meant as a gcfg file: it has a line shaped like
/// a section header (`[Name]` or `[Name "sub"]`). vSphere's YAML and Nutanix's JSON have no
/// such line; a broken INI has, and is reported as the syntax error it is.
pub fn looks_like_gcfg(text: &str) -> bool {
    text.lines().any(|line| {
        let Some(inner) = line
            .trim()
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
        else {
            return false;
        };
        let name = inner.split_whitespace().next().unwrap_or("");
        let rest = inner.trim_start()[name.len()..].trim();
        name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
            && (rest.is_empty()
                || (rest.starts_with('"') && rest.ends_with('"') && rest.len() >= 2))
    })
}

/// Whether a parsed gcfg config is recognisably the OpenStack CCM's: it has a section only
/// the OpenStack CCM has, or a `[Global]` key only it reads. A site that other platforms
/// share (OpenShift keeps every platform's cloud config in
/// `openshift-config/cloud-provider-config`) is checked and edited only when this holds, so
/// a GCE or AWS config there is never reported on or given OpenStack keys.
pub fn is_openstack_config(doc: &Document) -> bool {
    doc.sections().any(|s| {
        OPENSTACK_ONLY_SECTIONS
            .iter()
            .any(|n| eq_fold_ascii(s.name, n))
    }) || doc.entry_refs_in("Global").any(|(_, e)| {
        OPENSTACK_ONLY_GLOBAL_KEYS
            .iter()
            .any(|k| eq_fold_ascii(e.key, k))
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    /// Every known key is found in any case, and spelled with a character that folds to one
    /// of its letters (gcfg compares names as `strings.EqualFold`): the tags only skip keys
    /// that cannot match. A name with a known key's tag and another letter inside is unknown.
    #[test]
    fn known_keys_are_found_whatever_their_case_and_only_they() {
        for section in SECTIONS {
            for key in section.keys {
                let mut names = vec![key.name.to_uppercase(), key.name.to_owned()];
                if key.name.contains('k') {
                    names.push(key.name.replacen('k', "\u{212A}", 1));
                }
                for name in names {
                    let doc =
                        Document::parse(&format!("[{}]\n{name}\n", section.name)).expect("parses");
                    let report = check(&doc);
                    assert_eq!(report.ignored, [], "[{}] {name}", section.name);
                }
            }
        }
        let doc = Document::parse("[Global]\nauth-xrl = a\n").expect("parses");
        let ignored = check(&doc).ignored;
        assert_eq!(ignored.len(), 1);
        assert_eq!(ignored[0].reason, IgnoredReason::UnknownKey);
    }

    #[test]
    fn distance() {
        assert_eq!(edit_distance("regoin", "region"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(
            nearest(
                "provider-requires-serial-api-call",
                LOAD_BALANCER.iter().map(|k| k.name)
            ),
            Some("provider-requires-serial-api-calls")
        );
        assert_eq!(nearest("zzz", LOAD_BALANCER.iter().map(|k| k.name)), None);
    }

    #[test]
    fn displayable_names_are_known_or_near_a_known_one() {
        for shown in [
            "region",
            "REGION",
            "regoin",
            "use-octavia",
            "lb-method",
            "passwrd",
        ] {
            assert!(is_displayable_key(shown), "{shown}");
        }
        for masked in ["S3cr3t-P4ssw0rd", "hunter2", "x", &"k".repeat(100_000)] {
            assert!(!is_displayable_key(masked), "{masked:.20}");
        }
        for shown in ["Global", "loadbalancer", "LoadBalancr", "BlockStorage"] {
            assert!(is_displayable_section(shown), "{shown}");
        }
        for masked in ["S3cr3t", "Canary-Value", "Q"] {
            assert!(!is_displayable_section(masked), "{masked}");
        }
        // The bound cuts the search off but never changes a distance within it.
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(bounded_distance(&chars("ab"), &chars("ba"), 1), Some(1));
        assert_eq!(
            bounded_distance(&chars("kitten"), &chars("sitting"), 2),
            None
        );
        assert_eq!(
            bounded_distance(&chars("kitten"), &chars("sitting"), 3),
            Some(3)
        );
    }

    /// `find_ascii_pair` finds what `str::find` finds, and `holds_placeholder` answers as
    /// the plain definition (a `${`, then a name starting with an ASCII letter or `_`, then
    /// `}`) on generated texts.
    #[test]
    fn placeholders_and_pairs_agree_with_the_plain_definitions() {
        fn placeholder_by_definition(value: &str) -> bool {
            let mut rest = value;
            while let Some(at) = rest.find("${") {
                let after = &rest[at + 2..];
                let Some(end) = after.find('}') else {
                    return false;
                };
                let ident: String = after[..end]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !ident.is_empty() && !ident.starts_with(|c: char| c.is_ascii_digit()) {
                    return true;
                }
                rest = &after[end..];
            }
            false
        }
        let alphabet = ["$", "{", "}", "${", "}}", "a", "_", "1", "é", "-"];
        let mut next = crate::test_rng::lcg(0x31);
        let mut found = 0;
        for _ in 0..20_000 {
            let text: String = crate::test_rng::text_of(&mut next, &alphabet, 7);
            for (pair, pattern) in [([b'$', b'{'], "${"), ([b'}', b'}'], "}}")] {
                assert_eq!(find_ascii_pair(&text, pair), text.find(pattern), "{text:?}");
            }
            let expected = placeholder_by_definition(&text);
            assert_eq!(holds_placeholder(&text), expected, "{text:?}");
            found += usize::from(expected);
        }
        assert!(found > 100, "{found}");
        assert!(holds_placeholder("${_X}") && holds_placeholder("a${b}"));
        assert!(!holds_placeholder("${1x}") && !holds_placeholder("${x"));
    }

    #[test]
    fn lookup() {
        assert_eq!(
            find_section("loadbalancer").map(|s| s.name),
            Some("LoadBalancer")
        );
        assert_eq!(
            find_key("GLOBAL", "UserName").and_then(|k| k.go_field),
            Some("Username")
        );
        assert_eq!(
            find_key("global", "CAFileContents").map(|k| k.name),
            Some("cafilecontents")
        );
        assert!(find_key("Global", "user-name").is_none());
        assert!(find_key("LoadBalancer", "use-octavia").is_none());
        assert_eq!(
            find_key("LoadBalancer", "provider-requires-serial-api-calls").and_then(|k| k.since),
            Some("v1.28.0")
        );
    }

    #[test]
    fn openstack_configs_are_told_from_other_providers() {
        let parse = |t: &str| Document::parse(t).expect("parses");
        assert!(is_openstack_config(&parse(
            "[LoadBalancer]\nlb-method = ROUND_ROBIN\n"
        )));
        assert!(is_openstack_config(&parse(
            "[global]\nAUTH-URL = https://k\n"
        )));
        assert!(!is_openstack_config(&parse(
            "[global]\nproject-id = p\nmultizone = true\n"
        )));
        assert!(!is_openstack_config(&parse(
            "[Global]\nsecret-name = s\nregion = r\n"
        )));
        assert!(!is_openstack_config(&parse("")));
        assert!(looks_like_gcfg("# c\n[Global]\nauth-url http://x\n"));
        assert!(looks_like_gcfg("[LoadBalancerClass \"a b\"]\nx\n"));
        assert!(!looks_like_gcfg("global:\n  user: x\nlist: [a]\n"));
        assert!(!looks_like_gcfg("{\"a\": [\"b\"]}\n[\"x\"]\n"));
    }
}
