//! The rotation state machine of the self-managed serving certificate: pure, no IO, no clock.
//!
//! Input: what the Secret holds (its CAs and serving certificate, already parsed into
//! [`Observed`]), what the webhook configurations' `caBundle` says, what the replicas report
//! having loaded, and `now`. Output: the one next [`Action`]. The adapter
//! ([`super::controller`]) performs it, writes the Secret, and asks again.
//!
//! The Secret holds up to three CAs: `current` (signs the serving certificate), `next` (in the
//! bundle, not yet signing: a CA rotation in progress) and `previous` (in the bundle, no longer
//! signing: a served certificate may still be signed by it). The bundle (`ca.crt`, and every
//! webhook's `caBundle`) is exactly those CAs. A CA rotation is three writes, each waiting for
//! the one before to be seen everywhere it matters:
//!
//! 1. [`Action::StartCaRotation`]: a new CA goes into the bundle as `next`; the webhooks'
//!    `caBundle` is patched to the bundle ([`Action::PublishBundle`]).
//! 2. [`Action::SwitchToNextCa`]: once the bundle was published at least `settle` ago (the
//!    apiservers' webhook informers have it) and every live replica reports it loaded the
//!    Secret holding it, `next` becomes `current` and signs a new serving certificate; the old
//!    CA stays as `previous`.
//! 3. [`Action::DropPreviousCa`]: once every live replica reports it serves the new
//!    certificate, nothing served is signed by `previous`: it leaves the bundle.
//!
//! Timing ([`RENEW_NUMERATOR`]/[`RENEW_DENOMINATOR`]): a certificate is renewed, and a CA
//! rotation started, when two thirds of its validity have passed. The remaining third is the
//! margin for everything that can delay a renewal (no leader for a while, the API server down,
//! failed writes retried with backoff) and is long enough for the expiry alert to fire first;
//! it is cert-manager's default too (`renewBefore` unset: two thirds through the duration). A
//! CA must live at least three serving lifetimes ([`Policy::check`]), so a serving certificate
//! issued before a CA rotation starts never has to be cut short at the CA's end.

use std::fmt;

/// Renewal happens when `RENEW_NUMERATOR / RENEW_DENOMINATOR` of a validity has passed.
pub const RENEW_NUMERATOR: i64 = 2;
/// See [`RENEW_NUMERATOR`].
pub const RENEW_DENOMINATOR: i64 = 3;
/// A replica's report older than this many report intervals is taken to be of a replica that
/// is gone (scaled down, rolled): it no longer holds a rotation up.
pub const STALE_REPORTS: i64 = 3;

/// A validity period, Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// notBefore.
    pub not_before: i64,
    /// notAfter.
    pub not_after: i64,
}

impl Validity {
    /// Whether `now` is past notAfter.
    pub fn expired(&self, now: i64) -> bool {
        now >= self.not_after
    }

    /// When two thirds of the validity have passed.
    pub fn renew_at(&self) -> i64 {
        let span = (self.not_after - self.not_before).max(0);
        self.not_before + span * RENEW_NUMERATOR / RENEW_DENOMINATOR
    }
}

/// One CA the Secret holds (its certificate and a key that matches it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ca {
    /// The CA's subject, which the certificates it signs name as issuer (unique per CA:
    /// generated CAs carry a random part in their common name).
    pub subject: String,
    /// Its validity.
    pub validity: Validity,
}

/// The serving certificate the Secret holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    /// The issuer's subject.
    pub issuer: String,
    /// Its validity.
    pub validity: Validity,
}

/// What one replica last reported having loaded from the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The replica (its pod name).
    pub identity: String,
    /// [`Observed::loaded_digest`] of the Secret content it serves.
    pub digest: String,
    /// When it reported, Unix seconds (replicas report again every report interval).
    pub at: i64,
}

/// The bundle last patched into every webhook's `caBundle`, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// [`Observed::bundle_digest`] of the bundle patched in.
    pub bundle_digest: String,
    /// When the patch succeeded, Unix seconds.
    pub at: i64,
}

/// What the adapter observed: the Secret, parsed, and the webhook configurations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    /// The CA that signs: None when absent or unusable (no matching key, unreadable).
    pub current: Option<Ca>,
    /// A new CA in the bundle, not signing yet.
    pub next: Option<Ca>,
    /// The CA that signed before `current`, still in the bundle.
    pub previous: Option<Ca>,
    /// The serving certificate: None when absent or unusable (key mismatch, unreadable).
    pub serving: Option<Serving>,
    /// Whether the Secret's bundle is exactly the CAs above, and holds nothing unusable.
    pub tidy: bool,
    /// Digest of the bundle.
    pub bundle_digest: String,
    /// Digest of what a replica loads (serving certificate and bundle): replicas report it.
    pub loaded_digest: String,
    /// What the Secret records as published into the webhooks.
    pub published: Option<Published>,
    /// Whether every webhook of stackgate's configurations has `caBundle` equal to the bundle.
    pub webhooks_match: bool,
    /// The replicas' reports.
    pub reports: Vec<Report>,
}

/// The lifetimes and waits the decisions use, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Lifetime of a serving certificate.
    pub serving_lifetime: i64,
    /// Lifetime of a CA.
    pub ca_lifetime: i64,
    /// How long after the bundle was published the switch to a new CA waits, so that every
    /// apiserver's webhook informer has the new `caBundle`.
    pub settle: i64,
    /// How often replicas report; reports older than [`STALE_REPORTS`] of these are ignored.
    pub report_interval: i64,
}

/// Why a [`Policy`] is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A lifetime or wait that is not positive.
    #[error("{what} must be at least one second")]
    NotPositive {
        /// Which value.
        what: &'static str,
    },
    /// A CA too short for its serving certificates.
    #[error(
        "the CA lifetime ({ca_lifetime}s) must be at least three serving-certificate lifetimes \
         ({serving_lifetime}s each), so that a CA rotation never cuts a serving certificate short"
    )]
    CaTooShort {
        /// Seconds.
        ca_lifetime: i64,
        /// Seconds.
        serving_lifetime: i64,
    },
}

impl Policy {
    /// Refuses values the rotation cannot work with.
    pub fn check(&self) -> Result<(), PolicyError> {
        for (what, value) in [
            ("the serving-certificate lifetime", self.serving_lifetime),
            ("the CA lifetime", self.ca_lifetime),
            ("the report interval", self.report_interval),
        ] {
            if value < 1 {
                return Err(PolicyError::NotPositive { what });
            }
        }
        if self.ca_lifetime < 3 * self.serving_lifetime {
            return Err(PolicyError::CaTooShort {
                ca_lifetime: self.ca_lifetime,
                serving_lifetime: self.serving_lifetime,
            });
        }
        Ok(())
    }

    /// The validity of a serving certificate issued at `now` under a CA valid until
    /// `ca_end`: the full lifetime, cut at the CA's end.
    pub fn serving_validity(&self, now: i64, ca_end: i64) -> Validity {
        Validity {
            not_before: now,
            not_after: (now + self.serving_lifetime).min(ca_end),
        }
    }
}

/// Why the serving certificate is renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewReason {
    /// There is none, or it is unusable.
    Missing,
    /// It is not signed by the current CA.
    WrongIssuer,
    /// It has expired.
    Expired,
    /// Two thirds of its validity have passed.
    Due,
}

/// What a [`Action::Wait`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Nothing: the next renewal or rotation is due at `until`.
    Nothing,
    /// The published bundle to settle in the apiservers.
    Settle,
    /// Every live replica to report the Secret's current content.
    Replicas,
}

/// The one next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// No usable current CA (absent, unusable or expired): make a CA and a serving certificate,
    /// the bundle is that CA alone.
    Create,
    /// The bundle does not match the CAs held, or something unusable is held: rewrite the
    /// Secret from its usable parts.
    Tidy,
    /// Issue a new serving certificate with the current CA.
    RenewServing(RenewReason),
    /// Patch every webhook's `caBundle` to the bundle and record it as published.
    PublishBundle,
    /// Make the next CA and add it to the bundle.
    StartCaRotation,
    /// The next CA becomes current and signs a new serving certificate; the old one stays in
    /// the bundle as previous.
    SwitchToNextCa,
    /// Remove the previous CA from the bundle (nothing served is signed by it any more, or it
    /// has expired).
    DropPreviousCa,
    /// Nothing to do before `until` (Unix seconds), unless something changes.
    Wait {
        /// When to decide again at the latest.
        until: i64,
        /// What is awaited.
        waiting: Waiting,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Self::Create => "create the CA and the serving certificate",
            Self::Tidy => "rewrite the Secret from its usable parts",
            Self::RenewServing(RenewReason::Missing) => "issue a serving certificate (none usable)",
            Self::RenewServing(RenewReason::WrongIssuer) => {
                "issue a serving certificate (not signed by the current CA)"
            }
            Self::RenewServing(RenewReason::Expired) => {
                "issue a serving certificate (the one held expired)"
            }
            Self::RenewServing(RenewReason::Due) => "renew the serving certificate (2/3 elapsed)",
            Self::PublishBundle => "publish the CA bundle into the webhook configurations",
            Self::StartCaRotation => "start a CA rotation (add the next CA to the bundle)",
            Self::SwitchToNextCa => "switch the serving certificate to the next CA",
            Self::DropPreviousCa => "remove the previous CA from the bundle",
            Self::Wait { .. } => "wait",
        };
        f.write_str(text)
    }
}

/// The one next step for `observed` at `now`.
pub fn decide(observed: &Observed, policy: &Policy, now: i64) -> Action {
    let Some(current) = observed
        .current
        .as_ref()
        .filter(|ca| !ca.validity.expired(now))
    else {
        return Action::Create;
    };
    if !observed.tidy {
        return Action::Tidy;
    }
    if observed
        .previous
        .as_ref()
        .is_some_and(|ca| ca.validity.expired(now))
    {
        return Action::DropPreviousCa;
    }
    let serving = match &observed.serving {
        None => return Action::RenewServing(RenewReason::Missing),
        Some(s) if s.issuer != current.subject => {
            return Action::RenewServing(RenewReason::WrongIssuer);
        }
        Some(s) if s.validity.expired(now) => return Action::RenewServing(RenewReason::Expired),
        Some(s) => s,
    };
    let published = observed
        .published
        .as_ref()
        .filter(|p| p.bundle_digest == observed.bundle_digest);
    let Some(published) = published.filter(|_| observed.webhooks_match) else {
        return Action::PublishBundle;
    };
    // A renewal that would end no later than the certificate held (cut at the CA's end) would
    // only be repeated: renew when it gains something.
    let renewed_end = policy
        .serving_validity(now, current.validity.not_after)
        .not_after;
    let serving_due =
        serving.validity.renew_at() <= now && renewed_end > serving.validity.not_after;
    if serving_due {
        return Action::RenewServing(RenewReason::Due);
    }
    let poll = now + policy.report_interval;
    if observed.next.is_some() {
        let settled_at = published.at + policy.settle;
        if now < settled_at {
            return Action::Wait {
                until: settled_at.min(poll),
                waiting: Waiting::Settle,
            };
        }
        // Replicas that never report must not let the CA run out: past half of the rotation's
        // margin the switch happens anyway (a replica still on the old certificate stays
        // trusted: the old CA remains in the bundle until it reports or the CA ends).
        let span = current.validity.not_after - current.validity.not_before;
        let forced = now >= current.validity.not_after - span / 6;
        if forced || all_loaded(observed, policy, now) {
            return Action::SwitchToNextCa;
        }
        return Action::Wait {
            until: poll,
            waiting: Waiting::Replicas,
        };
    }
    if observed.previous.is_some() {
        if all_loaded(observed, policy, now) {
            return Action::DropPreviousCa;
        }
        return Action::Wait {
            until: poll,
            waiting: Waiting::Replicas,
        };
    }
    let rotate_at = current.validity.renew_at();
    if now >= rotate_at {
        return Action::StartCaRotation;
    }
    // Wake when the serving certificate is due (if renewing then gains something: otherwise
    // the CA rotation is what renews it) or the CA rotation is.
    let mut until = rotate_at;
    if renewed_end > serving.validity.not_after || serving.validity.renew_at() > now {
        until = until.min(serving.validity.renew_at().max(now + 1));
    }
    Action::Wait {
        until,
        waiting: Waiting::Nothing,
    }
}

/// Whether at least one replica reports, and every replica that reported within
/// [`STALE_REPORTS`] intervals reports the Secret's current content.
fn all_loaded(observed: &Observed, policy: &Policy, now: i64) -> bool {
    let fresh_since = now - STALE_REPORTS * policy.report_interval;
    let mut live = observed
        .reports
        .iter()
        .filter(|r| r.at >= fresh_since)
        .peekable();
    live.peek().is_some() && live.all(|r| r.digest == observed.loaded_digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test lifetimes: serving 120 s, CA 600 s (the measured configuration).
    const POLICY: Policy = Policy {
        serving_lifetime: 120,
        ca_lifetime: 600,
        settle: 10,
        report_interval: 5,
    };

    fn ca(subject: &str, not_before: i64) -> Ca {
        Ca {
            subject: subject.to_owned(),
            validity: Validity {
                not_before,
                not_after: not_before + POLICY.ca_lifetime,
            },
        }
    }

    fn serving(issuer: &str, not_before: i64) -> Serving {
        Serving {
            issuer: issuer.to_owned(),
            validity: Validity {
                not_before,
                not_after: not_before + POLICY.serving_lifetime,
            },
        }
    }

    fn report(identity: &str, digest: &str, at: i64) -> Report {
        Report {
            identity: identity.to_owned(),
            digest: digest.to_owned(),
            at,
        }
    }

    /// A steady state at t=0: CA "A" and a serving certificate it signed, both issued at 0,
    /// the bundle published at 0 and loaded by two replicas.
    fn steady() -> Observed {
        Observed {
            current: Some(ca("A", 0)),
            next: None,
            previous: None,
            serving: Some(serving("A", 0)),
            tidy: true,
            bundle_digest: "bundle-A".to_owned(),
            loaded_digest: "content-1".to_owned(),
            published: Some(Published {
                bundle_digest: "bundle-A".to_owned(),
                at: 0,
            }),
            webhooks_match: true,
            reports: vec![
                report("pod-1", "content-1", 0),
                report("pod-2", "content-1", 0),
            ],
        }
    }

    #[test]
    fn an_empty_secret_is_created() {
        assert_eq!(decide(&Observed::default(), &POLICY, 0), Action::Create);
    }

    #[test]
    fn an_expired_current_ca_is_replaced_by_a_new_one() {
        let mut observed = steady();
        observed.serving = Some(serving("A", 590));
        assert_eq!(decide(&observed, &POLICY, 599), Action::StartCaRotation);
        assert_eq!(decide(&observed, &POLICY, 600), Action::Create);
    }

    #[test]
    fn an_untidy_secret_is_rewritten_before_anything_else() {
        let observed = Observed {
            tidy: false,
            serving: None,
            ..steady()
        };
        assert_eq!(decide(&observed, &POLICY, 10), Action::Tidy);
    }

    #[test]
    fn a_missing_foreign_or_expired_serving_certificate_is_issued_again() {
        let mut observed = steady();
        observed.serving = None;
        assert_eq!(
            decide(&observed, &POLICY, 10),
            Action::RenewServing(RenewReason::Missing)
        );
        observed.serving = Some(serving("B", 0));
        assert_eq!(
            decide(&observed, &POLICY, 10),
            Action::RenewServing(RenewReason::WrongIssuer)
        );
        let mut expired = steady();
        expired.serving = Some(serving("A", 0));
        // Not published either: an expired certificate is still renewed first.
        expired.webhooks_match = false;
        assert_eq!(
            decide(&expired, &POLICY, 120),
            Action::RenewServing(RenewReason::Expired)
        );
    }

    #[test]
    fn the_bundle_is_published_when_the_webhooks_or_the_record_differ() {
        let mut observed = steady();
        observed.webhooks_match = false;
        assert_eq!(decide(&observed, &POLICY, 10), Action::PublishBundle);
        let mut observed = steady();
        observed.published = None;
        assert_eq!(decide(&observed, &POLICY, 10), Action::PublishBundle);
        let mut observed = steady();
        observed.bundle_digest = "bundle-AB".to_owned();
        assert_eq!(decide(&observed, &POLICY, 10), Action::PublishBundle);
    }

    #[test]
    fn the_serving_certificate_renews_at_two_thirds_of_its_lifetime() {
        let observed = steady();
        assert_eq!(
            decide(&observed, &POLICY, 79),
            Action::Wait {
                until: 80,
                waiting: Waiting::Nothing
            }
        );
        assert_eq!(
            decide(&observed, &POLICY, 80),
            Action::RenewServing(RenewReason::Due)
        );
    }

    #[test]
    fn a_renewal_cut_at_the_ca_end_is_not_repeated() {
        // A serving certificate issued at 500 under a CA ending at 600 ends at 600; at 570
        // (2/3 through) renewing would end at 600 again: nothing to gain. A stuck rotation
        // (here: the next CA waits for a replica) is what replaces it.
        let mut observed = steady();
        observed.serving = Some(Serving {
            issuer: "A".to_owned(),
            validity: Validity {
                not_before: 500,
                not_after: 600,
            },
        });
        observed.next = Some(ca("B", 400));
        observed.published = Some(Published {
            bundle_digest: "bundle-A".to_owned(),
            at: 400,
        });
        observed.reports = vec![report("pod-1", "old", 569)];
        // Past the forced-switch point (600 - 600/6 = 500): the switch happens.
        assert_eq!(decide(&observed, &POLICY, 570), Action::SwitchToNextCa);
    }

    #[test]
    fn a_ca_rotation_starts_at_two_thirds_of_the_ca_lifetime() {
        let mut observed = steady();
        // The serving certificate was renewed recently, so only the CA is due.
        observed.serving = Some(serving("A", 390));
        assert_eq!(
            decide(&observed, &POLICY, 399),
            Action::Wait {
                until: 400,
                waiting: Waiting::Nothing
            }
        );
        assert_eq!(decide(&observed, &POLICY, 400), Action::StartCaRotation);
    }

    /// The rotation in order: next CA added, published, settled, every replica loaded,
    /// switched; then every replica on the new certificate, the previous CA dropped.
    #[test]
    fn a_ca_rotation_switches_only_after_settle_and_every_replica() {
        let mut observed = steady();
        observed.serving = Some(serving("A", 390));
        // 1. After StartCaRotation at 400 the Secret holds B as next; the bundle changed.
        observed.next = Some(ca("B", 400));
        observed.bundle_digest = "bundle-AB".to_owned();
        observed.loaded_digest = "content-2".to_owned();
        assert_eq!(decide(&observed, &POLICY, 400), Action::PublishBundle);
        // 2. Published at 401: wait for it to settle, then for the replicas.
        observed.published = Some(Published {
            bundle_digest: "bundle-AB".to_owned(),
            at: 401,
        });
        assert_eq!(
            decide(&observed, &POLICY, 402),
            Action::Wait {
                until: 407,
                waiting: Waiting::Settle
            }
        );
        assert_eq!(
            decide(&observed, &POLICY, 410),
            Action::Wait {
                until: 411,
                waiting: Waiting::Settle
            }
        );
        observed.reports = vec![
            report("pod-1", "content-2", 405),
            report("pod-2", "content-1", 409),
        ];
        assert_eq!(
            decide(&observed, &POLICY, 411),
            Action::Wait {
                until: 416,
                waiting: Waiting::Replicas
            }
        );
        observed.reports[1] = report("pod-2", "content-2", 412);
        assert_eq!(decide(&observed, &POLICY, 412), Action::SwitchToNextCa);
        // 3. Switched at 412: B current, A previous, a serving certificate by B.
        observed.previous = observed.current.take();
        observed.current = observed.next.take();
        observed.serving = Some(serving("B", 412));
        observed.loaded_digest = "content-3".to_owned();
        assert_eq!(
            decide(&observed, &POLICY, 413),
            Action::Wait {
                until: 418,
                waiting: Waiting::Replicas
            }
        );
        observed.reports = vec![
            report("pod-1", "content-3", 413),
            report("pod-2", "content-3", 414),
        ];
        assert_eq!(decide(&observed, &POLICY, 414), Action::DropPreviousCa);
    }

    #[test]
    fn stale_reports_do_not_hold_a_rotation_but_no_report_at_all_does() {
        let mut observed = steady();
        observed.previous = Some(ca("Z", -300));
        observed.loaded_digest = "content-2".to_owned();
        // pod-gone last reported at 0; at 16 that is older than 3 intervals of 5 s.
        observed.reports = vec![
            report("pod-gone", "content-1", 0),
            report("pod-1", "content-2", 14),
        ];
        assert_eq!(
            decide(&observed, &POLICY, 15),
            Action::Wait {
                until: 20,
                waiting: Waiting::Replicas
            }
        );
        assert_eq!(decide(&observed, &POLICY, 16), Action::DropPreviousCa);
        observed.reports.clear();
        assert!(matches!(
            decide(&observed, &POLICY, 16),
            Action::Wait {
                waiting: Waiting::Replicas,
                ..
            }
        ));
    }

    #[test]
    fn an_expired_previous_ca_is_dropped_whatever_the_replicas_say() {
        let mut observed = steady();
        observed.previous = Some(ca("Z", -600));
        observed.reports.clear();
        assert_eq!(decide(&observed, &POLICY, 0), Action::DropPreviousCa);
    }

    #[test]
    fn the_switch_is_forced_late_in_the_ca_life() {
        let mut observed = steady();
        observed.serving = Some(serving("A", 450));
        observed.next = Some(ca("B", 400));
        observed.published = Some(Published {
            bundle_digest: "bundle-A".to_owned(),
            at: 400,
        });
        observed.reports = vec![report("pod-stuck", "old", 499)];
        assert_eq!(
            decide(&observed, &POLICY, 499),
            Action::Wait {
                until: 504,
                waiting: Waiting::Replicas
            }
        );
        assert_eq!(decide(&observed, &POLICY, 500), Action::SwitchToNextCa);
    }

    #[test]
    fn a_policy_with_a_short_ca_or_a_zero_value_is_refused() {
        assert_eq!(POLICY.check(), Ok(()));
        let short = Policy {
            ca_lifetime: 359,
            ..POLICY
        };
        assert!(matches!(short.check(), Err(PolicyError::CaTooShort { .. })));
        assert_eq!(
            Policy {
                ca_lifetime: 360,
                ..POLICY
            }
            .check(),
            Ok(())
        );
        let zero = Policy {
            report_interval: 0,
            ..POLICY
        };
        assert_eq!(
            zero.check(),
            Err(PolicyError::NotPositive {
                what: "the report interval"
            })
        );
    }

    #[test]
    fn serving_validity_is_cut_at_the_ca_end() {
        assert_eq!(
            POLICY.serving_validity(100, 1000),
            Validity {
                not_before: 100,
                not_after: 220
            }
        );
        assert_eq!(
            POLICY.serving_validity(950, 1000),
            Validity {
                not_before: 950,
                not_after: 1000
            }
        );
    }

    /// Driving the machine with a clock and an ideal adapter (every action applied at once,
    /// every replica reloading at once) over three CA lifetimes: the served certificate is
    /// always valid and signed by a CA in the published bundle, and CAs rotate.
    #[test]
    fn simulated_operation_never_serves_an_untrusted_or_expired_certificate() {
        let mut sim = Sim::default();
        let mut rotations = 0;
        let mut renewals = 0;
        for now in 0..1800 {
            // A machine that never says wait would loop here forever: fail instead.
            for step in 0.. {
                assert!(step < 8, "no wait at {now}");
                let action = decide(&sim.observed(), &POLICY, now);
                match action {
                    Action::Wait { .. } => break,
                    Action::SwitchToNextCa => rotations += 1,
                    Action::RenewServing(RenewReason::Due) => renewals += 1,
                    _ => {}
                }
                sim.apply(action, now);
            }
            sim.reload(now);
            let served = sim.served.clone().expect("a certificate is served");
            assert!(!served.validity.expired(now), "expired at {now}");
            assert!(
                sim.webhook_bundle
                    .iter()
                    .any(|ca| ca.subject == served.issuer),
                "untrusted at {now}"
            );
        }
        assert!(rotations >= 2, "{rotations} CA rotations");
        assert!(renewals >= 10, "{renewals} renewals");
    }

    /// An ideal world for [`decide`]: the Secret as the CAs and serving certificate, the
    /// webhooks' bundle, and one replica that reloads at every tick.
    #[derive(Default)]
    struct Sim {
        current: Option<Ca>,
        next: Option<Ca>,
        previous: Option<Ca>,
        serving: Option<Serving>,
        published: Option<Published>,
        webhook_bundle: Vec<Ca>,
        served: Option<Serving>,
        report: Option<Report>,
        cas_made: u32,
    }

    impl Sim {
        fn bundle(&self) -> Vec<Ca> {
            [&self.current, &self.next, &self.previous]
                .into_iter()
                .flatten()
                .cloned()
                .collect()
        }

        fn digest_of(bundle: &[Ca]) -> String {
            bundle
                .iter()
                .map(|ca| ca.subject.as_str())
                .collect::<Vec<_>>()
                .join(",")
        }

        fn content(&self) -> String {
            format!(
                "{}|{:?}",
                Self::digest_of(&self.bundle()),
                self.serving.as_ref().map(|s| s.validity)
            )
        }

        fn observed(&self) -> Observed {
            Observed {
                current: self.current.clone(),
                next: self.next.clone(),
                previous: self.previous.clone(),
                serving: self.serving.clone(),
                tidy: true,
                bundle_digest: Self::digest_of(&self.bundle()),
                loaded_digest: self.content(),
                published: self.published.clone(),
                webhooks_match: self.webhook_bundle == self.bundle(),
                reports: self.report.clone().into_iter().collect(),
            }
        }

        fn new_ca(&mut self, now: i64) -> Ca {
            self.cas_made += 1;
            ca(&format!("CA{}", self.cas_made), now)
        }

        fn issue(&mut self, now: i64) {
            let ca = self.current.as_ref().unwrap();
            self.serving = Some(Serving {
                issuer: ca.subject.clone(),
                validity: POLICY.serving_validity(now, ca.validity.not_after),
            });
        }

        fn apply(&mut self, action: Action, now: i64) {
            match action {
                Action::Create => {
                    self.current = Some(self.new_ca(now));
                    self.next = None;
                    self.previous = None;
                    self.issue(now);
                }
                Action::RenewServing(_) => self.issue(now),
                Action::PublishBundle => {
                    self.webhook_bundle = self.bundle();
                    self.published = Some(Published {
                        bundle_digest: Self::digest_of(&self.webhook_bundle),
                        at: now,
                    });
                }
                Action::StartCaRotation => self.next = Some(self.new_ca(now)),
                Action::SwitchToNextCa => {
                    self.previous = self.current.take();
                    self.current = self.next.take();
                    self.issue(now);
                }
                Action::DropPreviousCa => self.previous = None,
                Action::Tidy | Action::Wait { .. } => unreachable!("{action:?}"),
            }
        }

        fn reload(&mut self, now: i64) {
            self.served.clone_from(&self.serving);
            self.report = Some(report("pod-1", &self.content(), now));
        }
    }
}
