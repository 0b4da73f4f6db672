//! clouds.yaml (the format of openstacksdk and gophercloud, as CAPO reads it from the
//! identityRef Secret) → Keystone v3 credentials.
//!
//! Supported: `auth_type` `password` / `v3password` (user by id, or by name with a user
//! domain; project scope by id, or by name with a project domain) and
//! `v3applicationcredential` (by id, or by name with the user). `region_name` (overridden by
//! `identityRef.region`) and `interface` / `endpoint_type` select the Octavia endpoint.
//!
//! Credentials live in [`Redacted`] values whose `Debug` prints nothing; they leave memory
//! only in the body of the Keystone token request.

use std::fmt;

use serde_json::{Map, Value, json};

use super::error::CloudsError;

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudAuth {
    /// Cloud name (the `clouds.<name>` key).
    pub cloud: String,
    /// `auth.auth_url` as written.
    pub auth_url: String,
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
        let doc: Value = serde_saphyr::from_str(text).map_err(|e| CloudsError::NotYaml {
            location: e.location().map(|l| (l.line(), l.column())),
        })?;
        let entry = doc
            .get("clouds")
            .and_then(|c| c.get(cloud))
            .and_then(Value::as_object)
            .ok_or_else(|| CloudsError::NoCloud(cloud.to_owned()))?;
        Self::from_entry(entry, cloud, region)
    }

    fn from_entry(
        entry: &Map<String, Value>,
        cloud: &str,
        region: Option<&str>,
    ) -> Result<Self, CloudsError> {
        if entry.get("verify").and_then(Value::as_bool) == Some(false)
            || entry.get("insecure").and_then(Value::as_bool) == Some(true)
        {
            return Err(CloudsError::InsecureNotSupported(cloud.to_owned()));
        }
        let empty = Map::new();
        let auth = entry
            .get("auth")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let get = |key: &str| text(auth.get(key));
        let incomplete = |what| CloudsError::Incomplete {
            cloud: cloud.to_owned(),
            what,
        };
        let auth_url = get("auth_url").ok_or_else(|| CloudsError::NoAuthUrl(cloud.to_owned()))?;
        let auth_type = text(entry.get("auth_type"));
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
        let interface = text(entry.get("interface"))
            .or_else(|| text(entry.get("endpoint_type")))
            .map(|i| i.trim_end_matches("URL").to_ascii_lowercase())
            .unwrap_or_else(|| "public".to_owned());
        let region = region
            .filter(|r| !r.is_empty())
            .map(str::to_owned)
            .or_else(|| text(entry.get("region_name")));
        Ok(Self {
            cloud: cloud.to_owned(),
            auth_url,
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

/// A scalar as a non-empty string (YAML may type an id as a number).
fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
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
