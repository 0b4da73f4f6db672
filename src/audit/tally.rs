//! Denials and warnings per namespace, in bounded memory whatever the number of namespaces.
//!
//! The background audit publishes one PolicyReport per namespace whose summary counts every
//! finding of the namespace, listed in the report or not. Keeping every namespace's name for
//! that made a run's memory grow with the cluster (25,000 objects in distinct 60 KB
//! namespaces held 1.9 GiB, issue 31). Here every namespace is counted by a 64-bit digest of
//! its name (up to [`MAX_COUNTED_NAMESPACES`]; the findings of namespaces past it are counted
//! together), and only the [`MAX_NAMED_NAMESPACES`] namespaces with the most findings keep
//! their name: a namespace is named when its count passes the smallest named one, so the
//! named set is the top N by count whatever order the findings arrive in. Names arrive cut
//! to Kubernetes' 63 bytes ([`super::page::MAX_NAMESPACE_BYTES`]).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::report::Level;

/// Namespaces whose name the tally keeps: the ones with the most findings.
pub const MAX_NAMED_NAMESPACES: usize = 1_000;
/// Namespaces counted one by one (by digest, 8 bytes of key each); the findings of the
/// namespaces past it are counted together in [`NamespaceTally::uncounted`].
pub const MAX_COUNTED_NAMESPACES: usize = 100_000;

/// Denials and warnings of one namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Denials (`fail` results).
    pub fail: usize,
    /// Warnings (`warn` results).
    pub warn: usize,
}

impl Tally {
    fn total(self) -> usize {
        self.fail + self.warn
    }

    fn add(&mut self, level: Level) {
        match level {
            Level::Error => self.fail += 1,
            Level::Warning => self.warn += 1,
            Level::Note => {}
        }
    }
}

/// Denials and warnings per namespace (and of cluster-scoped objects), bounded: see the
/// module documentation.
#[derive(Debug, Clone, Default)]
pub struct NamespaceTally {
    /// Cluster-scoped objects.
    cluster: Tally,
    /// Every counted namespace, by digest.
    counts: HashMap<u64, Tally>,
    /// The names of the namespaces with the most findings, by digest.
    named: HashMap<u64, String>,
    /// The smallest count among `named` once it is full (a namespace must pass it).
    named_floor: usize,
    /// Findings of namespaces past [`MAX_COUNTED_NAMESPACES`].
    uncounted: Tally,
    /// Whether any namespace was past [`MAX_COUNTED_NAMESPACES`].
    overflowed: bool,
}

fn digest(namespace: &str) -> u64 {
    let mut h = DefaultHasher::new();
    namespace.hash(&mut h);
    h.finish()
}

impl NamespaceTally {
    /// Counts a finding of `level` (notes are not counted) in `namespace` (None:
    /// cluster-scoped).
    pub fn add(&mut self, namespace: Option<&str>, level: Level) {
        if level == Level::Note {
            return;
        }
        let Some(namespace) = namespace else {
            self.cluster.add(level);
            return;
        };
        let key = digest(namespace);
        let full = self.counts.len() >= MAX_COUNTED_NAMESPACES;
        let total = match self.counts.get_mut(&key) {
            Some(tally) => {
                tally.add(level);
                tally.total()
            }
            None if full => {
                self.overflowed = true;
                self.uncounted.add(level);
                return;
            }
            None => {
                let mut tally = Tally::default();
                tally.add(level);
                self.counts.insert(key, tally);
                tally.total()
            }
        };
        self.name(key, namespace, total);
    }

    /// Keeps the name of the namespace `key` (now at `total` findings) when it is among the
    /// [`MAX_NAMED_NAMESPACES`] with the most; it then replaces the named one with the fewest.
    fn name(&mut self, key: u64, namespace: &str, total: usize) {
        if self.named.contains_key(&key) {
            return;
        }
        if self.named.len() < MAX_NAMED_NAMESPACES {
            self.named.insert(key, namespace.to_owned());
            if self.named.len() == MAX_NAMED_NAMESPACES {
                self.named_floor = self.smallest_named().map_or(0, |(_, n)| n);
            }
            return;
        }
        // Ties stay with the namespace named first.
        if total <= self.named_floor {
            return;
        }
        if let Some((smallest, fewest)) = self.smallest_named() {
            // The floor only rises while named namespaces gain findings: check the real one.
            if total <= fewest {
                self.named_floor = fewest;
                return;
            }
            self.named.remove(&smallest);
            self.named.insert(key, namespace.to_owned());
            self.named_floor = self.smallest_named().map_or(0, |(_, n)| n);
        }
    }

    fn smallest_named(&self) -> Option<(u64, usize)> {
        self.named
            .keys()
            .map(|k| (*k, self.counts.get(k).map_or(0, |t| t.total())))
            .min_by_key(|(_, n)| *n)
    }

    /// The count of `namespace` (None: cluster-scoped), named or not; None when it has no
    /// finding or was past [`MAX_COUNTED_NAMESPACES`].
    pub fn get(&self, namespace: Option<&str>) -> Option<Tally> {
        match namespace {
            None => (self.cluster.total() > 0).then_some(self.cluster),
            Some(ns) => self.counts.get(&digest(ns)).copied(),
        }
    }

    /// The named namespaces (and the cluster-scoped objects, as None, when they have
    /// findings) with their counts, most findings first.
    pub fn named(&self) -> Vec<(Option<String>, Tally)> {
        let mut out: Vec<(Option<String>, Tally)> = self
            .named
            .iter()
            .filter_map(|(key, name)| Some((Some(name.clone()), *self.counts.get(key)?)))
            .collect();
        if self.cluster.total() > 0 {
            out.push((None, self.cluster));
        }
        out.sort_by(|a, b| b.1.total().cmp(&a.1.total()).then_with(|| a.0.cmp(&b.0)));
        out
    }

    /// Namespaces with findings that are not named: the "and N more namespaces" (a lower
    /// bound when [`Self::uncounted`] is not empty).
    pub fn more_namespaces(&self) -> usize {
        self.counts.len() - self.named.len() + usize::from(self.overflowed)
    }

    /// The findings of the namespaces past [`MAX_COUNTED_NAMESPACES`], counted together.
    pub fn uncounted(&self) -> Tally {
        self.uncounted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_namespace_and_names_the_top_ones() {
        let mut tally = NamespaceTally::default();
        for i in 0..MAX_NAMED_NAMESPACES + 10 {
            tally.add(Some(&format!("ns-{i}")), Level::Warning);
        }
        // A late namespace with the most findings is named, replacing one with the fewest.
        for _ in 0..3 {
            tally.add(Some("late"), Level::Error);
        }
        tally.add(None, Level::Error);
        tally.add(Some("ns-0"), Level::Note);
        let named = tally.named();
        assert_eq!(named.len(), MAX_NAMED_NAMESPACES + 1);
        assert_eq!(
            named[0],
            (Some("late".to_owned()), Tally { fail: 3, warn: 0 })
        );
        assert_eq!(named[1], (None, Tally { fail: 1, warn: 0 }));
        // The 1,010 first namespaces and "late", less the 1,000 named.
        assert_eq!(tally.more_namespaces(), 11);
        assert_eq!(
            tally.get(Some(&format!("ns-{}", MAX_NAMED_NAMESPACES + 5))),
            Some(Tally { fail: 0, warn: 1 })
        );
        assert_eq!(tally.get(Some("absent")), None);
        assert_eq!(tally.uncounted(), Tally::default());
    }

    /// Past the namespaces counted one by one, findings are counted together and the
    /// "more namespaces" count says there were more (a lower bound).
    #[test]
    fn namespaces_past_the_counted_ones_are_counted_together() {
        let mut tally = NamespaceTally::default();
        for i in 0..MAX_COUNTED_NAMESPACES {
            tally.add(Some(&i.to_string()), Level::Warning);
        }
        tally.add(Some("past-1"), Level::Error);
        tally.add(Some("past-2"), Level::Warning);
        tally.add(Some("0"), Level::Error);
        assert_eq!(tally.uncounted(), Tally { fail: 1, warn: 1 });
        assert_eq!(tally.get(Some("past-1")), None);
        assert_eq!(tally.get(Some("0")), Some(Tally { fail: 1, warn: 1 }));
        assert_eq!(
            tally.more_namespaces(),
            MAX_COUNTED_NAMESPACES - MAX_NAMED_NAMESPACES + 1
        );
    }

    #[test]
    fn a_namespace_tied_with_the_smallest_named_one_does_not_replace_it() {
        let mut tally = NamespaceTally::default();
        for i in 0..MAX_NAMED_NAMESPACES {
            tally.add(Some(&format!("ns-{i}")), Level::Warning);
        }
        tally.add(Some("tied"), Level::Warning);
        assert!(
            tally
                .named()
                .iter()
                .all(|(ns, _)| ns.as_deref() != Some("tied"))
        );
        tally.add(Some("tied"), Level::Warning);
        assert!(
            tally
                .named()
                .iter()
                .any(|(ns, _)| ns.as_deref() == Some("tied"))
        );
        assert_eq!(tally.more_namespaces(), 1);
    }
}
