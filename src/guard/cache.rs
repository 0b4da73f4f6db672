//! A small bounded cache with per-entry expiry. Linear scans: it holds a few dozen entries
//! (one per identity Secret, or per load balancer), so a map would not pay off.

use tokio::time::Instant;

/// At most `cap` entries; an insert into a full cache drops expired entries first, then the
/// entry that expires soonest. Nothing grows with the number of requests.
#[derive(Debug)]
pub(crate) struct TtlCache<K, V> {
    entries: Vec<(K, Instant, V)>,
    cap: usize,
}

impl<K: PartialEq, V: Clone> TtlCache<K, V> {
    /// An empty cache of at most `cap` (≥ 1) entries.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            entries: Vec::new(),
            cap: cap.max(1),
        }
    }

    /// The value for `key` if it has not expired at `now`.
    pub(crate) fn get(&self, key: &K, now: Instant) -> Option<V> {
        self.entries
            .iter()
            .find(|(k, expires, _)| k == key && *expires > now)
            .map(|(_, _, v)| v.clone())
    }

    /// Stores `value` until `expires` (replacing an entry with the same key).
    pub(crate) fn insert(&mut self, key: K, value: V, expires: Instant, now: Instant) {
        self.entries.retain(|(k, e, _)| *e > now && *k != key);
        if self.entries.len() >= self.cap
            && let Some(soonest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, (_, e, _))| *e)
                .map(|(i, _)| i)
        {
            self.entries.swap_remove(soonest);
        }
        self.entries.push((key, expires, value));
    }

    /// Drops the entry for `key`.
    pub(crate) fn remove(&mut self, key: &K) {
        self.entries.retain(|(k, _, _)| k != key);
    }

    /// Number of entries, expired ones included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn expiry_replacement_and_bound() {
        let now = Instant::now();
        let s = Duration::from_secs(1);
        let mut c = TtlCache::new(2);
        c.insert("a", 1, now + s, now);
        assert_eq!(c.get(&"a", now), Some(1));
        assert_eq!(c.get(&"a", now + s), None, "expired at its deadline");
        c.insert("a", 2, now + 3 * s, now);
        assert_eq!(c.get(&"a", now), Some(2));
        assert_eq!(c.len(), 1);
        c.insert("b", 3, now + 2 * s, now);
        c.insert("c", 4, now + 4 * s, now);
        assert_eq!(c.len(), 2, "bounded");
        assert_eq!(c.get(&"b", now), None, "the soonest-expiring entry went");
        assert_eq!(c.get(&"a", now), Some(2));
        // Expired entries are dropped before anything live.
        c.insert("d", 5, now + 10 * s, now + 3 * s);
        assert_eq!(c.get(&"c", now + 3 * s), Some(4));
        assert_eq!(c.get(&"d", now + 3 * s), Some(5));
        c.remove(&"d");
        assert_eq!(c.get(&"d", now), None);
    }
}
