//! The self-managed Secret's content: parsing it into the rotation's [`Observed`], and making
//! the CAs and serving certificates the rotation asks for (rcgen on ring, ECDSA P-256). No IO;
//! key generation reads ring's system random source.
//!
//! Keys of the Secret (type `Opaque`: the chart renders it empty, and a `kubernetes.io/tls`
//! Secret must hold `tls.crt` and `tls.key` from its creation):
//!
//! | key | what |
//! |---|---|
//! | `tls.crt`, `tls.key` | the serving certificate and its key |
//! | `ca.crt` | the bundle: every CA held, oldest first; what every webhook's `caBundle` is |
//! | `signing-ca.crt`, `signing-ca.key` | the current CA, which signs |
//! | `next-ca.crt`, `next-ca.key` | during a CA rotation, before the switch: the next CA |
//! | `previous-ca.crt` | during a CA rotation, after the switch: the CA that signed before |
//!
//! Errors never quote the Secret's content.

use std::collections::BTreeMap;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::rotation::{Ca, Observed, Policy, Serving, Validity};

/// `tls.crt`.
pub const TLS_CRT: &str = "tls.crt";
/// `tls.key`.
pub const TLS_KEY: &str = "tls.key";
/// `ca.crt`: the bundle.
pub const CA_BUNDLE: &str = "ca.crt";
const SIGNING_CRT: &str = "signing-ca.crt";
const SIGNING_KEY: &str = "signing-ca.key";
const NEXT_CRT: &str = "next-ca.crt";
const NEXT_KEY: &str = "next-ca.key";
const PREVIOUS_CRT: &str = "previous-ca.crt";
/// Every key stackgate writes; anything else in the Secret makes it untidy.
const KEYS: [&str; 8] = [
    TLS_CRT,
    TLS_KEY,
    CA_BUNDLE,
    SIGNING_CRT,
    SIGNING_KEY,
    NEXT_CRT,
    NEXT_KEY,
    PREVIOUS_CRT,
];

/// Why a certificate could not be made. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused (key generation or signing).
    #[error("cannot make a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The rotation asked for something the material cannot do (no CA to sign with).
    #[error("cannot {0}: the Secret holds no usable CA for it")]
    NoCa(&'static str),
}

/// A certificate (PEM) with its parsed identity and, for the ones that sign or serve, its key.
#[derive(Clone, PartialEq, Eq)]
pub struct Held {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The key, PEM (PKCS#8); empty for the previous CA (it signs nothing more).
    key_pem: String,
    subject: String,
    issuer: String,
    validity: Validity,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Held")
            .field("subject", &self.subject)
            .field("issuer", &self.issuer)
            .field("validity", &self.validity)
            .finish_non_exhaustive()
    }
}

impl Held {
    fn ca(&self) -> Ca {
        Ca {
            subject: self.subject.clone(),
            validity: self.validity,
        }
    }
}

/// The usable content of the self-managed Secret.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Material {
    current: Option<Held>,
    next: Option<Held>,
    previous: Option<Held>,
    serving: Option<Held>,
    /// Whether the data read was exactly what [`Material::to_data`] writes for it.
    tidy: bool,
}

/// The identity and validity of one PEM certificate, and the SubjectPublicKeyInfo's key bits.
struct Parsed {
    subject: String,
    issuer: String,
    validity: Validity,
    public_key: Vec<u8>,
}

fn parse_cert(pem: &[u8]) -> Option<Parsed> {
    let der = CertificateDer::from_pem_slice(pem).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    Some(Parsed {
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        validity: Validity {
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
        },
        public_key: cert.public_key().subject_public_key.data.to_vec(),
    })
}

/// A certificate and a key that belongs to it, or None.
fn held(cert: Option<&Vec<u8>>, key: Option<&Vec<u8>>) -> Option<Held> {
    let cert = cert?;
    let parsed = parse_cert(cert)?;
    let key_pem = std::str::from_utf8(key?).ok()?;
    let pair = KeyPair::from_pem(key_pem).ok()?;
    (pair.public_key_raw() == parsed.public_key.as_slice()).then(|| Held {
        cert_pem: String::from_utf8_lossy(cert).into_owned(),
        key_pem: key_pem.to_owned(),
        subject: parsed.subject,
        issuer: parsed.issuer,
        validity: parsed.validity,
    })
}

/// SHA-256 of the parts, length-prefixed, as lower-case hex (first 16 bytes: an identity,
/// not a security boundary).
fn digest(parts: &[&[u8]]) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        context.update(&(part.len() as u64).to_be_bytes());
        context.update(part);
    }
    context.finish().as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a replica reports having loaded: a digest of the serving certificate and the bundle
/// (the Secret's `tls.crt` and `ca.crt`), the same on the leader's side
/// ([`Observed::loaded_digest`]).
pub fn loaded_digest(tls_crt: &[u8], ca_crt: &[u8]) -> String {
    digest(&[tls_crt, ca_crt])
}

/// Sets the validity of `params` (rcgen takes `time`'s type; the epoch plus a std Duration
/// avoids a direct dependency on it).
fn set_validity(params: &mut CertificateParams, validity: Validity) {
    let at = |seconds: i64| {
        rcgen::date_time_ymd(1970, 1, 1)
            + std::time::Duration::from_secs(seconds.max(0).unsigned_abs())
    };
    params.not_before = at(validity.not_before);
    params.not_after = at(validity.not_after);
}

impl Material {
    /// Reads the Secret's data; what is unusable (unparsable, a key that does not match its
    /// certificate) is left out and makes the material untidy.
    pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> Self {
        let mut material = Self {
            current: held(data.get(SIGNING_CRT), data.get(SIGNING_KEY)),
            next: held(data.get(NEXT_CRT), data.get(NEXT_KEY)),
            previous: data.get(PREVIOUS_CRT).and_then(|pem| {
                let parsed = parse_cert(pem)?;
                Some(Held {
                    cert_pem: String::from_utf8_lossy(pem).into_owned(),
                    key_pem: String::new(),
                    subject: parsed.subject,
                    issuer: parsed.issuer,
                    validity: parsed.validity,
                })
            }),
            serving: held(data.get(TLS_CRT), data.get(TLS_KEY)),
            tidy: false,
        };
        material.tidy = !data.is_empty()
            && data.keys().all(|k| KEYS.contains(&k.as_str()))
            && material.to_data() == *data;
        material
    }

    /// The rotation's view of this material. The webhooks, the published record and the
    /// replicas' reports are the adapter's to fill in.
    pub fn observe(&self) -> Observed {
        let bundle = self.bundle();
        let serving = self
            .serving
            .as_ref()
            .map_or(&[][..], |s| s.cert_pem.as_bytes());
        Observed {
            current: self.current.as_ref().map(Held::ca),
            next: self.next.as_ref().map(Held::ca),
            previous: self.previous.as_ref().map(Held::ca),
            serving: self.serving.as_ref().map(|s| Serving {
                issuer: s.issuer.clone(),
                validity: s.validity,
            }),
            tidy: self.tidy,
            bundle_digest: digest(&[bundle.as_bytes()]),
            loaded_digest: loaded_digest(serving, bundle.as_bytes()),
            ..Observed::default()
        }
    }

    /// The bundle: every CA held, oldest first (so a switch, which only renames the CAs,
    /// leaves it byte for byte the same).
    pub fn bundle(&self) -> String {
        let mut cas: Vec<&Held> = [&self.current, &self.next, &self.previous]
            .into_iter()
            .flatten()
            .collect();
        cas.sort_by_key(|ca| (ca.validity.not_before, ca.subject.clone()));
        cas.iter()
            .map(|ca| ca.cert_pem.trim_end().to_owned() + "\n")
            .collect()
    }

    /// The Secret's data for this material.
    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        let mut data = BTreeMap::new();
        let mut put = |key: &str, value: &str| {
            data.insert(key.to_owned(), value.as_bytes().to_vec());
        };
        if let Some(s) = &self.serving {
            put(TLS_CRT, &s.cert_pem);
            put(TLS_KEY, &s.key_pem);
        }
        if let Some(ca) = &self.current {
            put(SIGNING_CRT, &ca.cert_pem);
            put(SIGNING_KEY, &ca.key_pem);
        }
        if let Some(ca) = &self.next {
            put(NEXT_CRT, &ca.cert_pem);
            put(NEXT_KEY, &ca.key_pem);
        }
        if let Some(ca) = &self.previous {
            put(PREVIOUS_CRT, &ca.cert_pem);
        }
        let bundle = self.bundle();
        if !bundle.is_empty() {
            put(CA_BUNDLE, &bundle);
        }
        data
    }

    /// [`super::rotation::Action::Create`]: a new CA and a serving certificate for `names`.
    pub fn create(policy: &Policy, now: i64, names: &[String]) -> Result<Self, PkiError> {
        let mut material = Self {
            current: Some(new_ca(policy, now)?),
            tidy: true,
            ..Self::default()
        };
        material.renew_serving(policy, now, names)?;
        Ok(material)
    }

    /// A new serving certificate for `names`, signed by the current CA.
    pub fn renew_serving(
        &mut self,
        policy: &Policy,
        now: i64,
        names: &[String],
    ) -> Result<(), PkiError> {
        let ca = self
            .current
            .as_ref()
            .ok_or(PkiError::NoCa("issue a serving certificate"))?;
        let validity = policy.serving_validity(now, ca.validity.not_after);
        self.serving = Some(issue_serving(ca, validity, names)?);
        Ok(())
    }

    /// Adds a next CA.
    pub fn start_ca_rotation(&mut self, policy: &Policy, now: i64) -> Result<(), PkiError> {
        self.next = Some(new_ca(policy, now)?);
        Ok(())
    }

    /// The next CA becomes current (the current one previous, its key dropped) and signs a new
    /// serving certificate.
    pub fn switch_to_next_ca(
        &mut self,
        policy: &Policy,
        now: i64,
        names: &[String],
    ) -> Result<(), PkiError> {
        let next = self.next.take().ok_or(PkiError::NoCa("switch CAs"))?;
        self.previous = self.current.replace(next).map(|mut old| {
            old.key_pem.clear();
            old
        });
        self.renew_serving(policy, now, names)
    }

    /// Forgets the previous CA.
    pub fn drop_previous_ca(&mut self) {
        self.previous = None;
    }
}

/// A CA valid from `now` for the policy's CA lifetime. Its common name carries 8 random bytes
/// (from its key), so that no two CAs share a subject: the rotation tells CAs apart by it.
fn new_ca(policy: &Policy, now: i64) -> Result<Held, PkiError> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let tag = digest(&[key.public_key_raw()]);
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params
        .distinguished_name
        .push(DnType::CommonName, format!("stackgate-ca-{}", &tag[..16]));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    set_validity(
        &mut params,
        Validity {
            not_before: now,
            not_after: now + policy.ca_lifetime,
        },
    );
    let cert = params.self_signed(&key)?;
    let parsed = parse_cert(cert.pem().as_bytes()).ok_or(PkiError::NoCa("read a new CA"))?;
    Ok(Held {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        subject: parsed.subject,
        issuer: parsed.issuer,
        validity: parsed.validity,
    })
}

fn issue_serving(ca: &Held, validity: Validity, names: &[String]) -> Result<Held, PkiError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    // The issuer's name, rebuilt from the common name this module gave it.
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    let common_name = ca.subject.strip_prefix("CN=").unwrap_or(&ca.subject);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::new(names.to_vec())?;
    if let Some(first) = names.first() {
        params.distinguished_name.push(DnType::CommonName, first);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, validity);
    let cert = params.signed_by(&key, &issuer)?;
    let parsed = parse_cert(cert.pem().as_bytes())
        .ok_or(PkiError::NoCa("read a new serving certificate"))?;
    Ok(Held {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        subject: parsed.subject,
        issuer: parsed.issuer,
        validity: parsed.validity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::rotation::{Action, decide};

    const POLICY: Policy = Policy {
        serving_lifetime: 120,
        ca_lifetime: 600,
        settle: 10,
        report_interval: 5,
    };
    /// 2030-01-01T00:00:00Z.
    const T0: i64 = 1_893_456_000;

    fn names() -> Vec<String> {
        vec![
            "stackgate.stackgate.svc".to_owned(),
            "stackgate.stackgate.svc.cluster.local".to_owned(),
        ]
    }

    #[test]
    fn created_material_reads_back_tidy_and_in_order() {
        let material = Material::create(&POLICY, T0, &names()).unwrap();
        let data = material.to_data();
        assert_eq!(
            data.keys().map(String::as_str).collect::<Vec<_>>(),
            [CA_BUNDLE, SIGNING_CRT, SIGNING_KEY, TLS_CRT, TLS_KEY]
        );
        let read = Material::from_data(&data);
        assert_eq!(read, material);
        let observed = read.observe();
        assert!(observed.tidy);
        let ca = observed.current.unwrap();
        assert!(ca.subject.starts_with("CN=stackgate-ca-"), "{}", ca.subject);
        assert_eq!(
            ca.validity,
            Validity {
                not_before: T0,
                not_after: T0 + 600
            }
        );
        let serving = observed.serving.unwrap();
        assert_eq!(serving.issuer, ca.subject);
        assert_eq!(
            serving.validity,
            Validity {
                not_before: T0,
                not_after: T0 + 120
            }
        );
    }

    #[test]
    fn a_key_that_is_not_its_certificates_or_a_stray_key_makes_it_untidy() {
        let material = Material::create(&POLICY, T0, &names()).unwrap();
        let mut data = material.to_data();
        let other = Material::create(&POLICY, T0, &names()).unwrap().to_data();
        data.insert(TLS_KEY.to_owned(), other[TLS_KEY].clone());
        let read = Material::from_data(&data);
        assert!(read.serving.is_none());
        assert!(!read.observe().tidy);
        let mut data = material.to_data();
        data.insert("extra".to_owned(), b"x".to_vec());
        assert!(!Material::from_data(&data).observe().tidy);
        let mut data = material.to_data();
        data.insert(SIGNING_CRT.to_owned(), b"not PEM".to_vec());
        let read = Material::from_data(&data);
        assert_eq!(decide(&read.observe(), &POLICY, T0), Action::Create);
    }

    #[test]
    fn an_empty_secret_is_not_tidy_and_gets_created() {
        let read = Material::from_data(&BTreeMap::new());
        assert_eq!(decide(&read.observe(), &POLICY, T0), Action::Create);
    }

    /// The whole rotation on real certificates: the bundle holds both CAs from the start of
    /// the rotation until the previous one is dropped, the switch leaves the bundle's bytes
    /// unchanged, and every serving certificate is signed by a CA in the bundle (checked with
    /// webpki, as a TLS client would).
    #[test]
    fn a_rotation_on_real_certificates_keeps_the_served_chain_verifiable() {
        let mut material = Material::create(&POLICY, T0, &names()).unwrap();
        verify(&material, T0 + 1);
        let first_bundle = material.bundle();
        material.renew_serving(&POLICY, T0 + 390, &names()).unwrap();
        material.start_ca_rotation(&POLICY, T0 + 400).unwrap();
        let both = material.bundle();
        assert!(both.starts_with(&first_bundle), "the old CA first");
        assert_eq!(both.matches("BEGIN CERTIFICATE").count(), 2);
        verify(&material, T0 + 401);
        material
            .switch_to_next_ca(&POLICY, T0 + 420, &names())
            .unwrap();
        assert_eq!(material.bundle(), both, "a switch keeps the bundle's bytes");
        verify(&material, T0 + 421);
        let data = material.to_data();
        assert!(!data.contains_key(NEXT_CRT));
        assert!(data.contains_key(PREVIOUS_CRT));
        assert!(
            !data
                .keys()
                .any(|k| k.starts_with("previous") && k.ends_with(".key")),
            "the previous CA's key is not kept"
        );
        let read = Material::from_data(&data);
        assert!(read.observe().tidy);
        material.drop_previous_ca();
        assert_eq!(material.bundle().matches("BEGIN CERTIFICATE").count(), 1);
        verify(&material, T0 + 430);
    }

    /// The serving certificate verifies against the bundle at `now` for its first name.
    fn verify(material: &Material, now: i64) {
        let data = material.to_data();
        let roots: Vec<_> = CertificateDer::pem_slice_iter(&data[CA_BUNDLE])
            .collect::<Result<_, _>>()
            .unwrap();
        let mut store = rustls::RootCertStore::empty();
        for root in roots {
            store.add(root).unwrap();
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(store),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let leaf = CertificateDer::from_pem_slice(&data[TLS_CRT]).unwrap();
        let name = rustls_pki_types::ServerName::try_from(names()[0].clone()).unwrap();
        let at = rustls_pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            now.unsigned_abs(),
        ));
        use rustls::client::danger::ServerCertVerifier as _;
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], at)
            .unwrap();
    }

    #[test]
    fn the_loaded_digest_changes_with_the_certificate_and_the_bundle() {
        let a = loaded_digest(b"cert", b"bundle");
        assert_eq!(a.len(), 32);
        assert_ne!(a, loaded_digest(b"cert2", b"bundle"));
        assert_ne!(a, loaded_digest(b"cert", b"bundle2"));
        // Length-prefixed: moving bytes between the parts changes it.
        assert_ne!(loaded_digest(b"ab", b"c"), loaded_digest(b"a", b"bc"));
    }
}
