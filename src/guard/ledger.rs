//! The control-plane Machine deletions this replica admitted moments ago, per cluster.
//!
//! Between the admission of a DELETE and the moment the Machine shows a deletionTimestamp
//! (and, later, its member leaves the pool) Octavia still reports the member ONLINE, so
//! several DELETEs arriving together (`kubectl delete machines -l …`) would each see a
//! healthy pool. Each review records its Machine here *before* it is answered, under one
//! lock together with reading the others, so of two concurrent reviews the later one always
//! counts the earlier one as leaving. A review that ends up denied releases its entry; a
//! dry run reads the ledger but never records.
//!
//! Bounds: entries expire after [`ADMITTED_TTL`]; at most [`MAX_CLUSTERS`] clusters and
//! [`MAX_PER_CLUSTER`] Machines per cluster are held (expired entries go first, then the
//! soonest to expire). An entry keeps SHA-256 digests of what it records, never request
//! text ([`MachineDigest`], [`ClusterKey`]): the ledger's memory is its entry count times a
//! size the request cannot change, and nothing the ledger holds is ever shown. Several replicas do not share the ledger: each counts what it admitted,
//! and the deletionTimestamp list read from the API covers the rest once it is set.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::rules::lb_guard::{MachineDigest, MachineIdentity, Sha256, sha256};

/// How long an admitted DELETE counts as leaving without a deletionTimestamp: the apiserver
/// sets it within the same request, so this only has to outlive the request and the next
/// read of the Machines by a wide margin.
pub const ADMITTED_TTL: Duration = Duration::from_secs(60);
/// Clusters held.
pub const MAX_CLUSTERS: usize = 1024;
/// Machines held per cluster: more than any control plane has (etcd recommends at most 7
/// members; a kubeadm or k0s control plane keeps one etcd member per Machine), with room for a
/// rollout's surplus Machines. A full ledger holds at most [`MAX_LEDGER_BYTES`].
pub const MAX_PER_CLUSTER: usize = 16;

/// The heap a full ledger can hold: every entry's size is fixed (digests), so this is the
/// entry count times the largest entry, whatever the requests were.
pub const MAX_LEDGER_BYTES: usize = MAX_CLUSTERS
    * (std::mem::size_of::<(ClusterKey, Vec<Entry>)>()
        + MAX_PER_CLUSTER
            * (std::mem::size_of::<Entry>()
                + crate::rules::lb_guard::MAX_MACHINE_ADDRESSES * std::mem::size_of::<Sha256>()));

/// A cluster: the digest of its namespace and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClusterKey(Sha256);

impl ClusterKey {
    /// The key of the cluster `name` in `namespace`.
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        // Length-prefixed: `a/bc` and `ab/c` are different clusters.
        ClusterKey(sha256(&format!("{}:{namespace}/{name}", namespace.len())))
    }
}

#[derive(Debug)]
struct Entry {
    machine: MachineDigest,
    token: u64,
    expires: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    clusters: Vec<(ClusterKey, Vec<Entry>)>,
    next_token: u64,
}

/// A recorded deletion, to release if the review is denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reservation {
    cluster: ClusterKey,
    machine: Sha256,
    token: u64,
}

/// The ledger (one per guard).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    inner: Mutex<Inner>,
}

impl Ledger {
    /// The other Machines of `cluster` admitted moments ago, and — unless `dry_run` — records
    /// `machine` as admitted (replacing an older entry for the same Machine).
    pub(crate) fn reserve(
        &self,
        cluster: &ClusterKey,
        machine: &MachineIdentity,
        dry_run: bool,
        now: Instant,
    ) -> (Vec<MachineDigest>, Option<Reservation>) {
        // Hashed before the lock is taken: the lock is held for comparisons only.
        let machine = machine.digest();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for (_, entries) in &mut inner.clusters {
            entries.retain(|e| e.expires > now);
        }
        inner.clusters.retain(|(_, entries)| !entries.is_empty());
        let others: Vec<MachineDigest> = inner
            .clusters
            .iter()
            .find(|(k, _)| k == cluster)
            .map(|(_, entries)| {
                entries
                    .iter()
                    .filter(|e| e.machine.name != machine.name)
                    .map(|e| e.machine.clone())
                    .collect()
            })
            .unwrap_or_default();
        if dry_run {
            return (others, None);
        }
        inner.next_token = inner.next_token.wrapping_add(1);
        let token = inner.next_token;
        let index = match inner.clusters.iter().position(|(k, _)| k == cluster) {
            Some(i) => i,
            None => {
                if inner.clusters.len() >= MAX_CLUSTERS {
                    let soonest = inner
                        .clusters
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, (_, entries))| entries.iter().map(|e| e.expires).max())
                        .map(|(i, _)| i);
                    if let Some(i) = soonest {
                        tracing::warn!(
                            max = MAX_CLUSTERS,
                            "the guard's ledger of admitted deletions is full; the cluster whose \
                             entries expire soonest is forgotten"
                        );
                        inner.clusters.swap_remove(i);
                    }
                }
                inner.clusters.push((*cluster, Vec::new()));
                inner.clusters.len() - 1
            }
        };
        let entries = &mut inner.clusters[index].1;
        entries.retain(|e| e.machine.name != machine.name);
        if entries.len() >= MAX_PER_CLUSTER
            && let Some(i) = entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.expires)
                .map(|(i, _)| i)
        {
            entries.swap_remove(i);
        }
        let name = machine.name;
        entries.push(Entry {
            machine,
            token,
            expires: now + ADMITTED_TTL,
        });
        let reservation = Reservation {
            cluster: *cluster,
            machine: name,
            token,
        };
        (others, Some(reservation))
    }

    /// Drops `reservation` (its review was denied, or there was nothing to guard). An entry
    /// recorded again since by a later review of the same Machine stays.
    pub(crate) fn release(&self, reservation: &Reservation) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, entries)) = inner
            .clusters
            .iter_mut()
            .find(|(k, _)| *k == reservation.cluster)
        {
            entries.retain(|e| {
                !(e.machine.name == reservation.machine && e.token == reservation.token)
            });
        }
        inner.clusters.retain(|(_, entries)| !entries.is_empty());
    }

    /// Entries held, expired ones included.
    #[cfg(test)]
    fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.clusters.iter().map(|(_, e)| e.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::lb_guard::MAX_MACHINE_ADDRESSES;

    fn key(name: &str) -> ClusterKey {
        ClusterKey::new("ns", name)
    }

    fn machine(name: &str) -> MachineIdentity {
        MachineIdentity {
            name: name.into(),
            addresses: vec![],
            infra_name: Some(name.into()),
        }
    }

    /// The names of `machines`, told by their digests among `known`.
    fn names(machines: &[MachineDigest]) -> Vec<&'static str> {
        const KNOWN: [&str; 5] = ["a", "b", "c", "d", "e"];
        machines
            .iter()
            .map(|m| {
                *KNOWN
                    .iter()
                    .find(|n| sha256(n) == m.name)
                    .expect("a machine of this test")
            })
            .collect()
    }

    #[test]
    fn later_reviews_see_earlier_ones_until_released_or_expired() {
        let ledger = Ledger::default();
        let now = Instant::now();
        let (seen, a) = ledger.reserve(&key("c"), &machine("a"), false, now);
        assert!(seen.is_empty());
        let (seen, b) = ledger.reserve(&key("c"), &machine("b"), false, now);
        assert_eq!(names(&seen), ["a"]);
        // Another cluster sees nothing of these.
        let (seen, _) = ledger.reserve(&key("other"), &machine("a"), false, now);
        assert!(seen.is_empty());
        // A dry run sees both and records nothing.
        let (seen, none) = ledger.reserve(&key("c"), &machine("d"), true, now);
        assert_eq!(names(&seen), ["a", "b"]);
        assert!(none.is_none());
        ledger.release(&b.unwrap());
        let (seen, _) = ledger.reserve(&key("c"), &machine("e"), true, now);
        assert_eq!(names(&seen), ["a"]);
        // The same Machine again replaces its entry; the old reservation no longer releases it.
        let (_, a2) = ledger.reserve(&key("c"), &machine("a"), false, now);
        ledger.release(&a.unwrap());
        let (seen, _) = ledger.reserve(&key("c"), &machine("e"), true, now);
        assert_eq!(names(&seen), ["a"]);
        assert!(a2.is_some());
        let later = now + ADMITTED_TTL;
        let (seen, _) = ledger.reserve(&key("c"), &machine("e"), true, later);
        assert!(seen.is_empty(), "expired at its deadline");
    }

    #[test]
    fn bounded() {
        let ledger = Ledger::default();
        let now = Instant::now();
        for i in 0..(MAX_PER_CLUSTER + 10) {
            let _ = ledger.reserve(&key("c"), &machine(&format!("m{i}")), false, now);
        }
        assert_eq!(ledger.len(), MAX_PER_CLUSTER);
        for i in 0..(MAX_CLUSTERS + 10) {
            let _ = ledger.reserve(&key(&format!("c{i}")), &machine("m"), false, now);
        }
        assert!(ledger.len() <= MAX_CLUSTERS + MAX_PER_CLUSTER);
        let inner = ledger.inner.lock().unwrap();
        assert_eq!(inner.clusters.len(), MAX_CLUSTERS);
    }

    #[test]
    fn a_full_ledger_holds_at_most_its_byte_bound() {
        // 1 024 clusters × 16 Machines with the most addresses: about 19 MiB, the figure
        // docs/limits.md gives (at 64 per cluster it was 76 MiB).
        const { assert!(MAX_LEDGER_BYTES < 20 * 1024 * 1024) };
        let ledger = Ledger::default();
        let now = Instant::now();
        let machine = |i: usize| MachineIdentity {
            name: format!("m{i}"),
            addresses: (0..40).map(|a| format!("10.0.{a}.{i}")).collect(),
            infra_name: Some(format!("m{i}")),
        };
        for c in 0..(MAX_CLUSTERS + 3) {
            for m in 0..(MAX_PER_CLUSTER + 3) {
                let _ = ledger.reserve(&key(&format!("c{c}")), &machine(m), false, now);
            }
        }
        let inner = ledger.inner.lock().unwrap();
        assert_eq!(inner.clusters.len(), MAX_CLUSTERS);
        let mut held = inner.clusters.capacity() * std::mem::size_of::<(ClusterKey, Vec<Entry>)>();
        for (_, entries) in &inner.clusters {
            assert!(entries.len() <= MAX_PER_CLUSTER);
            held += entries.capacity() * std::mem::size_of::<Entry>();
            for e in entries {
                held += e.machine.addresses.capacity() * std::mem::size_of::<Sha256>();
            }
        }
        // Vec growth may round a capacity up (to at most twice the cap): within 2×.
        assert!(
            held <= 2 * MAX_LEDGER_BYTES,
            "{held} > 2 × {MAX_LEDGER_BYTES}"
        );
    }

    #[test]
    fn entries_keep_digests_whose_size_does_not_depend_on_the_request() {
        let long = "x".repeat(1 << 20);
        let huge = MachineIdentity {
            name: long.clone(),
            addresses: vec![long.clone(); 40],
            infra_name: Some(long.clone()),
        };
        let small = MachineIdentity {
            name: "m".into(),
            addresses: vec!["10.0.0.1".into(); 40],
            infra_name: Some("m".into()),
        };
        let ledger = Ledger::default();
        let now = Instant::now();
        let (_, r) = ledger.reserve(&ClusterKey::new(&long, &long), &huge, false, now);
        let _ = ledger.reserve(&key("c"), &small, false, now);
        let inner = ledger.inner.lock().unwrap();
        let held: Vec<&Entry> = inner.clusters.iter().flat_map(|(_, e)| e).collect();
        assert_eq!(held.len(), 2);
        // What is kept is the digests of the strings, at most MAX_MACHINE_ADDRESSES of them:
        // the same heap for a 1 MiB name as for a one-letter one.
        assert_eq!(held[0].machine, huge.digest());
        assert_eq!(held[0].machine.name, sha256(&long));
        for entry in &held {
            assert_eq!(entry.machine.addresses.len(), MAX_MACHINE_ADDRESSES);
            assert!(entry.machine.addresses.capacity() <= MAX_MACHINE_ADDRESSES);
        }
        assert_eq!(inner.clusters[0].0, ClusterKey::new(&long, &long));
        assert_eq!(r.expect("recorded").machine, sha256(&long));
        // The key is length-prefixed: a namespace/name split differently is another cluster.
        assert_ne!(ClusterKey::new("a", "bc"), ClusterKey::new("ab", "c"));
    }
}
