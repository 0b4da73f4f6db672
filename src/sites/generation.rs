//! Generations of the upstream `openstack-cloud-controller-manager` chart: what decides the
//! cloud config it renders differs between chart versions, and a pinned version is read as
//! that version's templates read it.
//!
//! Facts, from the chart's templates at each tag of kubernetes/cloud-provider-openstack
//! (`charts/openstack-cloud-controller-manager/templates/_helpers.tpl` and `secret.yaml`):
//!
//! * [`Generation::Unquoted`] (1.0.0–1.3.0, 2.24.0; initial chart 37ba02c56, 2.24.0 is tag
//!   commit 0e3e370bd): each entry is written `{{ $key }} = {{ $value }}`, without `quote`,
//!   so a line break in a value writes lines of its own; `cloudConfigContents` is never read;
//!   sections `[Global]` to `[Metadata]`, no `[Route]`; the Secret is rendered when
//!   `secret.create` is true (`secret.enabled` does not exist).
//! * [`Generation::Quoted`] (1.4.0, 2.25.0–2.28.0-alpha.4): values quoted (3fbdeed79, "Add
//!   quotes to values in cloudConfig"), `cloudConfigContents` read when set (8e72fd345,
//!   "custom secret file for cloud.conf"); `secret.enabled` still ignored.
//! * [`Generation::SecretSwitch`] (2.28.0-alpha.5–2.29.1, 2.29.3): the Secret is rendered only
//!   when `secret.create` and `secret.enabled` are both true (c18f6ca4c, "add secret enabled
//!   option").
//! * [`Generation::Route`] (2.29.2, 2.30.0 and later): a `[Route]` section from
//!   `cloudConfig.route` (dab0f0672, "added route section to cloud-config secret").
//!
//! The tags do not lie on one line (2.29.3, cut from the 1.29 branch after 2.29.2, has no
//! `[Route]`), so the generation of each version is taken from [`CHART_TAGS`], one line per
//! tag, printed by `scripts/chart-generations.sh` from the templates at that tag. A version
//! not in the table (a range such as `>=2.25`, a version stackgate does not know, no version)
//! is not guessed: it may be any generation ([`Generations::ALL`]).

/// One generation of the chart's cloud-config templates (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Generation {
    /// 1.0.0–1.3.0 and 2.24.0: values unquoted, `cloudConfigContents` not read, no `[Route]`.
    Unquoted,
    /// 1.4.0 and 2.25.0–2.28.0-alpha.4: values quoted, `cloudConfigContents` read,
    /// `secret.enabled` ignored.
    Quoted,
    /// 2.28.0-alpha.5–2.29.1 and 2.29.3: `secret.enabled` honoured.
    SecretSwitch,
    /// 2.29.2 and 2.30.0 on: `[Route]` rendered.
    Route,
}

impl Generation {
    /// Every generation, oldest first.
    pub const ALL: [Generation; 4] = [
        Generation::Unquoted,
        Generation::Quoted,
        Generation::SecretSwitch,
        Generation::Route,
    ];

    /// Whether the chart writes each value with Sprig's `quote`.
    pub fn quotes_values(self) -> bool {
        self != Generation::Unquoted
    }

    /// Whether a truthy `cloudConfigContents` replaces the rendered `cloudConfig`.
    pub fn reads_contents(self) -> bool {
        self != Generation::Unquoted
    }

    /// Whether `secret.enabled: false` stops the chart rendering its Secret.
    pub fn honours_secret_enabled(self) -> bool {
        matches!(self, Generation::SecretSwitch | Generation::Route)
    }

    /// Whether the chart renders a `[Route]` section.
    pub fn renders_route(self) -> bool {
        self == Generation::Route
    }

    /// The chart versions of this generation, for messages.
    pub fn versions(self) -> &'static str {
        match self {
            Generation::Unquoted => "1.0.0–1.3.0 and 2.24.0",
            Generation::Quoted => "1.4.0 and 2.25.0–2.28.0-alpha.4",
            Generation::SecretSwitch => "2.28.0-alpha.5–2.29.1 and 2.29.3",
            Generation::Route => "2.29.2 and 2.30.0 on",
        }
    }
}

/// The chart versions of `generations` (oldest first), for messages: `2.28.0-alpha.5 on` for
/// the newest ones together.
pub fn versions_of(generations: &[Generation]) -> String {
    match generations {
        [
            Generation::Quoted,
            Generation::SecretSwitch,
            Generation::Route,
        ] => "1.4.0, 2.25.0 and later".to_owned(),
        [Generation::Unquoted, Generation::Quoted] => "before 2.28.0-alpha.5".to_owned(),
        [Generation::SecretSwitch, Generation::Route] => "2.28.0-alpha.5 and later".to_owned(),
        _ => generations
            .iter()
            .map(|g| g.versions())
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// The generations a chart version may be: one for a version in [`CHART_TAGS`], every one
/// otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generations {
    bits: u8,
}

impl Generations {
    /// Any generation: the version is not known.
    pub const ALL: Generations = Generations { bits: 0b1111 };

    /// Exactly `generation`.
    pub fn only(generation: Generation) -> Self {
        Generations {
            bits: 1 << generation as u8,
        }
    }

    /// The generations of `version` (as a delivery names it: `2.27.6`, `v2.27.6`; None when
    /// it names none): one when it is a chart version in [`CHART_TAGS`], all otherwise.
    pub fn of_version(version: Option<&str>) -> Self {
        version
            .and_then(generation_of)
            .map_or(Generations::ALL, Generations::only)
    }

    /// Whether the version is known to be one generation.
    pub fn is_pinned(self) -> bool {
        self.bits.count_ones() == 1
    }

    /// The generations, oldest first.
    pub fn iter(self) -> impl Iterator<Item = Generation> {
        Generation::ALL
            .into_iter()
            .filter(move |g| self.bits & (1 << *g as u8) != 0)
    }
}

/// The generation of a chart version in [`CHART_TAGS`] (a leading `v` and surrounding blanks
/// ignored, as Helm's version matching ignores them).
pub fn generation_of(version: &str) -> Option<Generation> {
    let version = version.trim();
    let version = version.strip_prefix('v').unwrap_or(version);
    // Newest first: deliveries mostly pin a recent version (the tags are distinct, so the
    // order of the search finds the same one).
    CHART_TAGS
        .iter()
        .rev()
        .find(|(tag, _)| *tag == version)
        .map(|(_, generation)| *generation)
}

/// Every tag `openstack-cloud-controller-manager-<version>` of kubernetes/cloud-provider-openstack
/// and the generation of its templates, with the tag's commit (printed by
/// `scripts/chart-generations.sh`; `tests` below checks the boundaries).
#[rustfmt::skip]
pub const CHART_TAGS: &[(&str, Generation)] = &[
    ("1.0.0", Generation::Unquoted), // 1dc67d59e
    ("1.0.1", Generation::Unquoted), // d6c644785
    ("1.0.2", Generation::Unquoted), // 9dacf89bb
    ("1.1.1", Generation::Unquoted), // 1f8869531
    ("1.1.2", Generation::Unquoted), // 7de8a84db
    ("1.2.0", Generation::Unquoted), // a8354b368
    ("1.3.0", Generation::Unquoted), // 33b473b16
    ("1.4.0", Generation::Quoted), // 4b91007e4
    ("2.24.0", Generation::Unquoted), // 0e3e370bd
    ("2.25.0", Generation::Quoted), // 58d0fc204
    ("2.25.1", Generation::Quoted), // e951ec382
    ("2.26.0", Generation::Quoted), // afc4309cb
    ("2.26.1", Generation::Quoted), // 8e83c41fc
    ("2.26.4", Generation::Quoted), // 56feeb10e
    ("2.26.5", Generation::Quoted), // c71f0648b
    ("2.27.0", Generation::Quoted), // 309df4c79
    ("2.27.0-alpha.0", Generation::Quoted), // 92d83ea62
    ("2.27.0-alpha.1", Generation::Quoted), // 88cfe1caa
    ("2.27.1", Generation::Quoted), // 551562c5e
    ("2.27.2", Generation::Quoted), // 0a7be5270
    ("2.27.3", Generation::Quoted), // 91cd9252d
    ("2.27.4", Generation::Quoted), // bd7890622
    ("2.27.5", Generation::Quoted), // f7abe101e
    ("2.27.6", Generation::Quoted), // 79c0a296e
    ("2.28.0", Generation::SecretSwitch), // f5a1d1119
    ("2.28.0-alpha.1", Generation::Quoted), // e8d89e587
    ("2.28.0-alpha.2", Generation::Quoted), // 52b4f44b7
    ("2.28.0-alpha.3", Generation::Quoted), // a6c706141
    ("2.28.0-alpha.4", Generation::Quoted), // 663952038
    ("2.28.0-alpha.5", Generation::SecretSwitch), // c18f6ca4c
    ("2.28.0-alpha.6", Generation::SecretSwitch), // 0c5e1d260
    ("2.28.0-alpha.7", Generation::SecretSwitch), // 383ed742d
    ("2.28.1", Generation::SecretSwitch), // 86510a905
    ("2.28.2", Generation::SecretSwitch), // b447f6761
    ("2.28.3", Generation::SecretSwitch), // 2c5cb2516
    ("2.28.4", Generation::SecretSwitch), // 3c11e030e
    ("2.28.5", Generation::SecretSwitch), // 078818a25
    ("2.29.0", Generation::SecretSwitch), // 64b813046
    ("2.29.0-alpha.0", Generation::SecretSwitch), // f806574b3
    ("2.29.0-alpha.1", Generation::SecretSwitch), // 221fd41bf
    ("2.29.0-alpha.2", Generation::SecretSwitch), // f331e134f
    ("2.29.0-alpha.3", Generation::SecretSwitch), // 2565d891a
    ("2.29.0-alpha.4", Generation::SecretSwitch), // 9b3e6e6a5
    ("2.29.0-alpha.5", Generation::SecretSwitch), // 2d74594e4
    ("2.29.1", Generation::SecretSwitch), // d9106b315
    ("2.29.2", Generation::Route), // dab0f0672
    ("2.29.3", Generation::SecretSwitch), // 45da9db25
    ("2.30.0", Generation::Route), // 2f186d65c
    ("2.30.1", Generation::Route), // 771818c8c
    ("2.30.2", Generation::Route), // e39dffb3b
    ("2.30.3", Generation::Route), // 790b5dc60
    ("2.30.4", Generation::Route), // 343363480
    ("2.30.5", Generation::Route), // 89de73db4
    ("2.30.6", Generation::Route), // c164d9f98
    ("2.31.0", Generation::Route), // f85a19567
    ("2.31.1", Generation::Route), // 6fe9b6269
    ("2.31.2", Generation::Route), // 8ec657b26
    ("2.31.3", Generation::Route), // f574d0609
    ("2.31.4", Generation::Route), // 7721e7273
    ("2.32.0", Generation::Route), // a70c0b342
    ("2.32.0-alpha.0", Generation::Route), // c3ab4ebb2
    ("2.32.1", Generation::Route), // b3c4d0801
    ("2.33.0", Generation::Route), // 259ed77f5
    ("2.33.0-alpha.0", Generation::Route), // 251508d52
    ("2.33.1", Generation::Route), // 84f974628
    ("2.34.0", Generation::Route), // 9a6c890c0
    ("2.34.1", Generation::Route), // 0973c523d
    ("2.34.2", Generation::Route), // e862efc18
    ("2.35.0", Generation::Route), // a031201ff
    ("2.36.0", Generation::Route), // bae07f493
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boundaries_are_where_the_templates_changed() {
        for (version, want) in [
            ("1.0.0", Generation::Unquoted),
            ("1.3.0", Generation::Unquoted),
            ("1.4.0", Generation::Quoted),
            ("2.24.0", Generation::Unquoted),
            ("2.25.0", Generation::Quoted),
            ("2.27.6", Generation::Quoted),
            ("2.28.0-alpha.4", Generation::Quoted),
            ("2.28.0-alpha.5", Generation::SecretSwitch),
            ("2.28.0", Generation::SecretSwitch),
            ("2.29.1", Generation::SecretSwitch),
            ("2.29.2", Generation::Route),
            ("2.29.3", Generation::SecretSwitch),
            ("2.30.0", Generation::Route),
            ("v2.36.0", Generation::Route),
            (" 2.31.1 ", Generation::Route),
        ] {
            assert_eq!(generation_of(version), Some(want), "{version}");
            assert_eq!(
                Generations::of_version(Some(version))
                    .iter()
                    .collect::<Vec<_>>(),
                vec![want]
            );
        }
    }

    #[test]
    fn a_version_not_in_the_table_may_be_any_generation() {
        for version in [
            None,
            Some(">=2.25"),
            Some("2.x"),
            Some("2.26.2"),
            Some("2.99.0"),
            Some(""),
        ] {
            let generations = Generations::of_version(version);
            assert!(!generations.is_pinned(), "{version:?}");
            assert_eq!(generations.iter().count(), 4);
        }
        assert!(Generations::of_version(Some("2.27.6")).is_pinned());
    }

    #[test]
    fn readings_name_their_versions() {
        use Generation::*;
        assert_eq!(versions_of(&[Unquoted]), "1.0.0–1.3.0 and 2.24.0");
        assert_eq!(
            versions_of(&[Quoted, SecretSwitch, Route]),
            "1.4.0, 2.25.0 and later"
        );
        assert_eq!(
            versions_of(&[SecretSwitch, Route]),
            "2.28.0-alpha.5 and later"
        );
        assert_eq!(versions_of(&[Unquoted, Quoted]), "before 2.28.0-alpha.5");
        assert_eq!(
            versions_of(&[Unquoted, SecretSwitch]),
            "1.0.0–1.3.0 and 2.24.0; 2.28.0-alpha.5–2.29.1 and 2.29.3"
        );
        // The table agrees with the names: every tag of a generation is one of its versions.
        for (tag, generation) in CHART_TAGS {
            let later = |floor: &str| tag.split('-').next() >= Some(floor);
            let named = match generation {
                Unquoted => tag.starts_with("1.") || *tag == "2.24.0",
                Quoted => *tag == "1.4.0" || (later("2.25.0") && !later("2.28.1")),
                SecretSwitch => later("2.28.0") && !later("2.30.0"),
                Route => *tag == "2.29.2" || later("2.30.0"),
            };
            assert!(named, "{tag} {generation:?}");
        }
    }

    #[test]
    fn every_tag_is_listed_once() {
        let mut versions: Vec<&str> = CHART_TAGS.iter().map(|(v, _)| *v).collect();
        versions.sort_unstable();
        versions.dedup();
        assert_eq!(versions.len(), CHART_TAGS.len());
        assert_eq!(CHART_TAGS.len(), 70);
    }

    #[test]
    fn each_generation_says_what_it_reads() {
        use Generation::*;
        let row = |g: Generation| {
            (
                g.quotes_values(),
                g.reads_contents(),
                g.honours_secret_enabled(),
                g.renders_route(),
            )
        };
        assert_eq!(row(Unquoted), (false, false, false, false));
        assert_eq!(row(Quoted), (true, true, false, false));
        assert_eq!(row(SecretSwitch), (true, true, true, false));
        assert_eq!(row(Route), (true, true, true, true));
    }
}
