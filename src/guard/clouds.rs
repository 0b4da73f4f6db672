//! clouds.yaml (the format of openstacksdk and gophercloud, as CAPO reads it from the
//! identityRef Secret) → Keystone v3 credentials.
//!
//! Read as CAPO reads it: `yaml.Unmarshal` of sigs.k8s.io/yaml (v1.6.0, go.yaml.in/yaml/v2,
//! YAML 1.1 rules) into gophercloud's `clientconfig.Clouds`, whose fields are Go strings
//! (`getCloudFromSecret` in pkg/scope/provider.go of kubernetes-sigs/cluster-api-provider-openstack
//! e52de58abe6f70f4ad3ad7f7f51632bfd70354b7; `AuthInfo` in openstack/clientconfig/results.go of
//! gophercloud/utils 321c0f238d1a03ec1cf5cf15999846ccbb38bf23). sigs.k8s.io/yaml first decodes
//! into generic values and then turns a number or boolean bound for a string field into text
//! (`convertToJSONableObject` in yaml.go, kubernetes-sigs/yaml v1.6.0): so a quoted value is
//! kept exactly (spaces included), while a *plain* `0123` becomes `83` (YAML 1.1 octal),
//! `0x1F` `31`, `1e3` `1000`, `yes` `true` — what CAPO sends to Keystone, so what works for
//! CAPO works here. (gophercloud's own `LoadCloudsYAML`, gopkg.in/yaml.v3 straight into the
//! struct, would keep the plain text; CAPO does not use it.) Nothing is trimmed.
//!
//! Supported: `auth_type` `password` / `v3password` (user by id, or by name with a user
//! domain; project scope by id, or by name with a project domain) and
//! `v3applicationcredential` (by id, or by name with the user). `region_name` (overridden by
//! `identityRef.region`) and `interface` / `endpoint_type` select the Octavia endpoint.
//!
//! Credentials live in [`Redacted`] values whose `Debug` prints nothing; they leave memory
//! only in the body of the Keystone token request. `auth_url` is shown with any user
//! information masked.

use std::fmt;

use serde_json::{Value, json};

use super::error::CloudsError;
#[cfg(test)]
use super::masked_url::UNREADABLE_URL;
pub use super::masked_url::{CredentialUrl, mask_url};
use crate::yaml::{Kind, Node};

/// Levels of `<<` merge keys followed when looking a key up.
const MAX_MERGE_DEPTH: usize = 16;

/// A string that must never be printed (password, application-credential secret, token).
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted(String);

impl Redacted {
    /// Wraps a secret.
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// An id or a name (with the domain that qualifies the name).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Named {
    Id(String),
    Name { name: String, domain: Domain },
}

/// A Keystone domain, by id or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Domain {
    Id(String),
    Name(String),
}

impl Domain {
    fn json(&self) -> Value {
        match self {
            Domain::Id(id) => json!({ "id": id }),
            Domain::Name(name) => json!({ "name": name }),
        }
    }
}

impl Named {
    fn json(&self) -> Value {
        match self {
            Named::Id(id) => json!({ "id": id }),
            Named::Name { name, domain } => json!({ "name": name, "domain": domain.json() }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Method {
    Password {
        user: Named,
        password: Redacted,
        project: Named,
    },
    ApplicationCredential {
        /// By id, or by name with its user.
        credential: AppCredential,
        secret: Redacted,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AppCredential {
    Id(String),
    Name { name: String, user: Named },
}

/// Keystone v3 credentials and endpoint selection for one cloud of a clouds.yaml.
#[derive(Clone, PartialEq, Eq)]
pub struct CloudAuth {
    /// Cloud name (the `clouds.<name>` key).
    pub cloud: String,
    /// `auth.auth_url` as written; printed masked.
    pub auth_url: CredentialUrl,
    /// Region for the catalog lookup, if any.
    pub region: Option<String>,
    /// Catalog interface: `public` (default), `internal` or `admin`.
    pub interface: String,
    method: Method,
}

impl CloudAuth {
    /// Parses `clouds.yaml` and picks `cloud`. `region` (from `identityRef.region`) overrides
    /// the file's `region_name`.
    pub fn from_clouds_yaml(
        text: &[u8],
        cloud: &str,
        region: Option<&str>,
    ) -> Result<Self, CloudsError> {
        let text = std::str::from_utf8(text).map_err(|_| CloudsError::NotUtf8)?;
        let root = crate::yaml::parse_one(text).map_err(|e| CloudsError::NotYaml {
            location: Some((e.line as u64, e.column as u64)),
        })?;
        let entry = field(&root, "clouds", 0)
            .and_then(|c| field(c, cloud, 0))
            .filter(|e| matches!(e.kind, Kind::Map(_)))
            .ok_or_else(|| CloudsError::NoCloud(cloud.to_owned()))?;
        Self::from_entry(entry, cloud, region)
    }

    fn from_entry(entry: &Node, cloud: &str, region: Option<&str>) -> Result<Self, CloudsError> {
        if boolean(field(entry, "verify", 0)) == Some(false)
            || boolean(field(entry, "insecure", 0)) == Some(true)
        {
            return Err(CloudsError::InsecureNotSupported(cloud.to_owned()));
        }
        let auth = field(entry, "auth", 0).filter(|a| matches!(a.kind, Kind::Map(_)));
        let get = |key: &str| auth.and_then(|a| text(field(a, key, 0)));
        let incomplete = |what| CloudsError::Incomplete {
            cloud: cloud.to_owned(),
            what,
        };
        let auth_url = get("auth_url").ok_or_else(|| CloudsError::NoAuthUrl(cloud.to_owned()))?;
        let auth_type = text(field(entry, "auth_type", 0));
        let has_app_cred = get("application_credential_id").is_some()
            || get("application_credential_name").is_some();
        let app_cred = match auth_type.as_deref() {
            Some("v3applicationcredential" | "applicationcredential") => true,
            Some("password" | "v3password") => false,
            None => has_app_cred,
            Some(other) => {
                return Err(CloudsError::Unsupported {
                    cloud: cloud.to_owned(),
                    auth_type: other.to_owned(),
                });
            }
        };
        // Domain fallbacks as openstacksdk applies them: user/project_domain_* first, then
        // domain_*.
        let domain = |prefix: &str| -> Option<Domain> {
            get(&format!("{prefix}_domain_id"))
                .map(Domain::Id)
                .or_else(|| get(&format!("{prefix}_domain_name")).map(Domain::Name))
                .or_else(|| get("domain_id").map(Domain::Id))
                .or_else(|| get("domain_name").map(Domain::Name))
        };
        let user = || -> Option<Named> {
            if let Some(id) = get("user_id") {
                return Some(Named::Id(id));
            }
            let name = get("username").or_else(|| get("user_name"))?;
            Some(Named::Name {
                name,
                domain: domain("user")?,
            })
        };
        let method = if app_cred {
            let secret = get("application_credential_secret")
                .ok_or_else(|| incomplete("auth.application_credential_secret"))?;
            let credential = if let Some(id) = get("application_credential_id") {
                AppCredential::Id(id)
            } else {
                let name = get("application_credential_name").ok_or_else(|| {
                    incomplete("auth.application_credential_id or application_credential_name")
                })?;
                let user = user().ok_or_else(|| {
                    incomplete("a user (user_id, or username with a user domain) for application_credential_name")
                })?;
                AppCredential::Name { name, user }
            };
            Method::ApplicationCredential {
                credential,
                secret: Redacted::new(secret),
            }
        } else {
            let password = get("password").ok_or_else(|| incomplete("auth.password"))?;
            let user = user().ok_or_else(|| {
                incomplete("auth.user_id, or auth.username with user_domain_name/user_domain_id")
            })?;
            let project = if let Some(id) = get("project_id").or_else(|| get("tenant_id")) {
                Named::Id(id)
            } else {
                let name = get("project_name")
                    .or_else(|| get("tenant_name"))
                    .ok_or_else(|| {
                        incomplete("a project scope (auth.project_id or project_name)")
                    })?;
                Named::Name {
                    name,
                    domain: domain("project").ok_or_else(|| {
                        incomplete("project_domain_name/project_domain_id for project_name")
                    })?,
                }
            };
            Method::Password {
                user,
                password: Redacted::new(password),
                project,
            }
        };
        let interface = text(field(entry, "interface", 0))
            .or_else(|| text(field(entry, "endpoint_type", 0)))
            .map(|i| i.trim_end_matches("URL").to_ascii_lowercase())
            .unwrap_or_else(|| "public".to_owned());
        let region = region
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .or_else(|| text(field(entry, "region_name", 0)));
        Ok(Self {
            cloud: cloud.to_owned(),
            auth_url: CredentialUrl::new(auth_url),
            region,
            interface,
            method,
        })
    }

    /// The `POST /v3/auth/tokens` body. It holds the secret: send it, never keep or log it.
    pub fn token_request(&self) -> Value {
        match &self.method {
            Method::Password {
                user,
                password,
                project,
            } => {
                let mut user = user.json();
                if let Some(u) = user.as_object_mut() {
                    u.insert(
                        "password".into(),
                        Value::String(password.expose().to_owned()),
                    );
                }
                json!({"auth": {
                    "identity": {"methods": ["password"], "password": {"user": user}},
                    "scope": {"project": project.json()}
                }})
            }
            Method::ApplicationCredential { credential, secret } => {
                let mut cred = match credential {
                    AppCredential::Id(id) => json!({ "id": id }),
                    AppCredential::Name { name, user } => {
                        json!({ "name": name, "user": user.json() })
                    }
                };
                if let Some(c) = cred.as_object_mut() {
                    c.insert("secret".into(), Value::String(secret.expose().to_owned()));
                }
                json!({"auth": {"identity": {
                    "methods": ["application_credential"],
                    "application_credential": cred
                }}})
            }
        }
    }

    /// `password` or `application_credential`, for logs.
    pub fn method(&self) -> &'static str {
        match self.method {
            Method::Password { .. } => "password",
            Method::ApplicationCredential { .. } => "application_credential",
        }
    }
}

impl fmt::Debug for CloudAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloudAuth")
            .field("cloud", &self.cloud)
            .field("auth_url", &self.auth_url)
            .field("region", &self.region)
            .field("interface", &self.interface)
            .field("method", &self.method)
            .finish()
    }
}

/// The value of `key` in mapping `map`, following `<<` merge keys as go-yaml v2 does
/// (explicit keys first, then the merged mappings in order).
fn field<'a>(map: &'a Node, key: &str, depth: usize) -> Option<&'a Node> {
    if let Some((_, value)) = map.entry(key) {
        return Some(value);
    }
    if depth >= MAX_MERGE_DEPTH {
        return None;
    }
    let merged = map.entries()?.iter().filter(|(k, _)| {
        matches!(&k.kind, Kind::Scalar { value, style: crate::yaml::Style::Plain, tag: None } if &**value == "<<")
    });
    for (_, source) in merged {
        let sources: Vec<&Node> = match &source.kind {
            Kind::Seq(items) => items.iter().collect(),
            _ => vec![source],
        };
        if let Some(found) = sources.into_iter().find_map(|s| field(s, key, depth + 1)) {
            return Some(found);
        }
    }
    None
}

/// A scalar as the Go string CAPO ends up with (sigs.k8s.io/yaml into a `string` field):
/// quoted, block and `!!str` scalars as written; plain ones resolved with YAML 1.1 rules and
/// a number or boolean printed back (`strconv.FormatInt`, `FormatFloat(f, 'g', -1, 32)`,
/// `true`/`false`). None for null, an empty string, or a collection.
fn text(node: Option<&Node>) -> Option<String> {
    let node = node?;
    let Kind::Scalar { value, .. } = &node.kind else {
        return None;
    };
    let out = match node.to_json() {
        Ok(Value::String(s)) => s,
        Ok(Value::Bool(b)) => b.to_string(),
        Ok(Value::Number(n)) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => go_format_float32(f),
            _ => return None,
        },
        Ok(_) => return None,
        // NaN and infinities: what Go prints for them.
        Err(_) => match value.trim_start_matches('+') {
            ".inf" | ".Inf" | ".INF" => "+Inf".to_owned(),
            "-.inf" | "-.Inf" | "-.INF" => "-Inf".to_owned(),
            ".nan" | ".NaN" | ".NAN" => "NaN".to_owned(),
            _ => return None,
        },
    };
    (!out.is_empty()).then_some(out)
}

/// A scalar as a boolean (YAML 1.1), for `verify` / `insecure`.
fn boolean(node: Option<&Node>) -> Option<bool> {
    node?.to_json().ok()?.as_bool()
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 32)`: the shortest digits that read back as the
/// same float32, in `%e` form (`1e+06`) when the exponent is below -4 or at least 6.
fn go_format_float32(f: f64) -> String {
    let x = f as f32;
    if x.is_nan() {
        return "NaN".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // Rust prints the shortest round-trip digits of an f32: "-1.5e-7".
    let shortest = format!("{x:e}");
    let (mantissa, exponent) = shortest.split_once('e').unwrap_or((&shortest, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if !(-4..6).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{first}{point}{rest}e{exp_sign}{:02}", exponent.abs());
    }
    let point_at = exponent + 1; // digits before the decimal point
    let body = if point_at <= 0 {
        format!("0.{}{digits}", "0".repeat(point_at.unsigned_abs() as usize))
    } else if point_at as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point_at as usize - digits.len()))
    } else {
        let (int, frac) = digits.split_at(point_at as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "canary-Secret-9f3b";

    #[test]
    fn password_by_names() {
        let yaml = format!(
            "clouds:\n  openstack:\n    auth:\n      auth_url: https://keystone.example:5000/v3\n      \
             username: admin\n      password: {CANARY}\n      project_name: demo\n      \
             user_domain_name: Default\n      project_domain_id: default\n    region_name: RegionOne\n    \
             interface: internal\n"
        );
        let auth = CloudAuth::from_clouds_yaml(yaml.as_bytes(), "openstack", None).unwrap();
        assert_eq!(auth.region.as_deref(), Some("RegionOne"));
        assert_eq!(auth.interface, "internal");
        assert_eq!(auth.method(), "password");
        let body = auth.token_request();
        assert_eq!(
            body["auth"]["identity"]["password"]["user"]["domain"]["name"],
            "Default"
        );
        assert_eq!(
            body["auth"]["identity"]["password"]["user"]["password"],
            CANARY
        );
        assert_eq!(body["auth"]["scope"]["project"]["domain"]["id"], "default");
        assert!(!format!("{auth:?}").contains(CANARY));
    }

    #[test]
    fn application_credential_and_region_override() {
        let yaml = format!(
            "clouds:\n  c:\n    auth_type: v3applicationcredential\n    auth:\n      auth_url: http://k/\n      \
             application_credential_id: 1234\n      application_credential_secret: {CANARY}\n    \
             region_name: A\n"
        );
        let auth = CloudAuth::from_clouds_yaml(yaml.as_bytes(), "c", Some("B")).unwrap();
        assert_eq!(auth.region.as_deref(), Some("B"));
        assert_eq!(auth.interface, "public");
        let body = auth.token_request();
        assert_eq!(
            body["auth"]["identity"]["application_credential"]["id"],
            "1234"
        );
        assert!(body["auth"].get("scope").is_none());
        assert!(!format!("{auth:?}").contains(CANARY));
    }

    fn password_of(yaml_value: &str) -> String {
        let yaml = format!(
            "clouds:\n  c:\n    auth:\n      auth_url: https://k.example/v3\n      user_id: u\n      \
             project_id: p\n      password: {yaml_value}\n"
        );
        let auth = CloudAuth::from_clouds_yaml(yaml.as_bytes(), "c", None).unwrap();
        auth.token_request()["auth"]["identity"]["password"]["user"]["password"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn passwords_are_the_strings_capo_sends() {
        // Quoted: exactly as written, spaces included.
        assert_eq!(password_of("' pass word '"), " pass word ");
        assert_eq!(password_of("\"0123\""), "0123");
        assert_eq!(password_of("'1e3'"), "1e3");
        assert_eq!(password_of("'0x1F'"), "0x1F");
        assert_eq!(password_of("'yes'"), "yes");
        assert_eq!(password_of("!!str 0123"), "0123");
        assert_eq!(password_of("\"\\ttab\""), "\ttab");
        // Plain: what sigs.k8s.io/yaml (YAML 1.1) turns them into before gophercloud sees them.
        assert_eq!(password_of("0123"), "83");
        assert_eq!(password_of("0x1F"), "31");
        assert_eq!(password_of("1e3"), "1000");
        assert_eq!(password_of("1e6"), "1e+06");
        assert_eq!(password_of("3.14159265358979"), "3.1415927");
        assert_eq!(password_of("0.00001"), "1e-05");
        assert_eq!(password_of("yes"), "true");
        assert_eq!(password_of("true"), "true");
        assert_eq!(password_of("Off"), "false");
        assert_eq!(password_of("123456789012"), "123456789012");
        assert_eq!(password_of("p@ss w0rd"), "p@ss w0rd");
        assert_eq!(password_of(".inf"), "+Inf");
        assert_eq!(password_of("2001-01-01"), "2001-01-01");
    }

    #[test]
    fn go_floats() {
        for (f, go) in [
            (1000.0, "1000"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.5, "0.5"),
            (-2.5e-7, "-2.5e-07"),
            (1e21, "1e+21"),
            (100.25, "100.25"),
        ] {
            assert_eq!(go_format_float32(f), go, "{f}");
        }
    }

    #[test]
    fn merge_keys_and_masked_auth_url() {
        let yaml = format!(
            "defaults: &d\n  auth:\n    auth_url: https://admin:{CANARY}@k.example/v3\n    \
             user_id: u\n    password: p\n    project_id: x\nclouds:\n  c:\n    <<: *d\n    region_name: R\n"
        );
        let auth = CloudAuth::from_clouds_yaml(yaml.as_bytes(), "c", None).unwrap();
        assert_eq!(auth.region.as_deref(), Some("R"));
        assert_eq!(auth.method(), "password");
        let debug = format!("{auth:?}");
        assert!(
            !debug.contains(CANARY) && debug.contains("***@k.example"),
            "{debug}"
        );
    }

    #[test]
    fn a_credential_url_prints_only_masked() {
        let url = CredentialUrl::new(format!("https://admin:{CANARY}#x@k.example/v3"));
        assert_eq!(url.to_string(), "https://***@k.example/v3");
        assert_eq!(format!("{url:?}"), "\"https://***@k.example/v3\"");
        assert!(url.expose().contains(CANARY), "the request still gets it");
        let error = crate::guard::error::OpenStackError::Url {
            what: "auth_url",
            url: url.clone(),
        };
        assert_eq!(
            error.to_string(),
            "auth_url \"https://***@k.example/v3\" is not a valid http(s) URL"
        );
        assert!(!format!("{error:?}").contains(CANARY));
    }

    #[test]
    fn mask_url_hides_user_information_whatever_it_holds() {
        let secret = "Pa55";
        for (url, shown) in [
            // The forms a delimiter scan got wrong: the password holds a delimiter.
            (
                "https://admin:Pa55#x@keystone/v3",
                "https://***@keystone/v3",
            ),
            (
                "https://admin:Pa55?x@keystone/v3",
                "https://***@keystone/v3",
            ),
            (
                "https://admin:Pa55/x@keystone/v3",
                "https://***@keystone/v3",
            ),
            (
                "https://admin:12/Pa55@keystone/v3",
                "https://***@keystone/v3",
            ),
            (
                "https://admin:Pa55@x@keystone:5000/v3",
                "https://***@keystone:5000/v3",
            ),
            (
                "https://admin:Pa55%40x@keystone/v3",
                "https://***@keystone/v3",
            ),
            (
                "https://admin:Pa55\\x@keystone/v3",
                "https://***@keystone/v3",
            ),
            ("https://Pa55@keystone/v3", "https://***@keystone/v3"),
            (
                "https://admin:Pa55@[2001:db8::1]:5000/v3",
                "https://***@[2001:db8::1]:5000/v3",
            ),
            (
                "  https://admin:Pa55@keystone/v3  ",
                "https://***@keystone/v3",
            ),
            // No user information: shown as the parser writes it.
            (
                "https://keystone.example:5000/v3",
                "https://keystone.example:5000/v3",
            ),
            ("http://[2001:db8::1]/v3", "http://[2001:db8::1]/v3"),
            // Not an http(s) URL with a host: nothing of it is shown.
            ("admin:Pa55@keystone/v3", UNREADABLE_URL),
            ("keystone/Pa55", UNREADABLE_URL),
            ("ftp://admin:Pa55@keystone/v3", UNREADABLE_URL),
            ("https://admin:Pa55@", UNREADABLE_URL),
            ("https://admin:Pa55@[::1/v3", UNREADABLE_URL),
            ("https://Pa55:99999", UNREADABLE_URL),
            ("https://admin:Pa55@k\u{e9}ystone/v3", UNREADABLE_URL),
            ("Pa55 \u{0} \n garbage", UNREADABLE_URL),
            ("", UNREADABLE_URL),
        ] {
            let masked = mask_url(url);
            assert_eq!(masked, shown, "{url:?}");
            assert!(!masked.contains(secret), "{url:?} -> {masked}");
        }
    }

    #[test]
    fn errors_never_quote_the_document() {
        let bad = format!("clouds: [\n  password: {CANARY}\n");
        let e = CloudAuth::from_clouds_yaml(bad.as_bytes(), "c", None).unwrap_err();
        assert!(!e.to_string().contains(CANARY), "{e}");
        let e = CloudAuth::from_clouds_yaml(b"clouds: {}\n", "c", None).unwrap_err();
        assert!(matches!(e, CloudsError::NoCloud(_)));
        let e = CloudAuth::from_clouds_yaml(
            b"clouds:\n  c:\n    auth_type: v3oidcpassword\n    auth: {auth_url: http://k}\n",
            "c",
            None,
        )
        .unwrap_err();
        assert!(matches!(e, CloudsError::Unsupported { .. }));
        let e = CloudAuth::from_clouds_yaml(
            b"clouds:\n  c:\n    auth: {auth_url: http://k, username: u, password: p, project_id: x}\n",
            "c",
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("user_domain"), "{e}");
    }
}
