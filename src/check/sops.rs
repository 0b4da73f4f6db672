//! SOPS-encrypted files (<https://github.com/getsops/sops>): Flux decrypts them when it
//! applies them (`spec.decryption.provider: sops`), and GitOps repositories keep Secrets and
//! Helm values that way (openCenter encrypts its CCM override values before commit).
//!
//! The values of such a file are `ENC[AES256_GCM,data:…,type:str]` strings, and the file holds
//! SOPS's metadata: a top-level `sops` mapping (YAML and JSON) or a `[sops]` section (INI).
//! Checking the ciphertext would report settings as "not set" and INI as malformed, so such a
//! file is reported once, as a note "encrypted: not checked", and left out of the run (a
//! HelmRelease whose `valuesFrom` names it then says those values are unseen). stackgate never
//! decrypts.

/// The prefix SOPS writes for every encrypted value (`ENC[AES256_GCM,data:…]`).
const ENCRYPTED_VALUE: &str = "ENC[AES256_GCM,";

/// Whether `text` is a SOPS-encrypted file: it holds an encrypted value and SOPS's metadata
/// (a document whose top-level `sops` key maps to a mapping with a `mac`, or an INI `[sops]`
/// section).
pub fn is_encrypted(text: &str) -> bool {
    if !text.contains(ENCRYPTED_VALUE) || !text.contains("sops") {
        return false;
    }
    if text.lines().any(|l| l.trim() == "[sops]") {
        return true;
    }
    crate::yaml::parse_stream(text).is_ok_and(|docs| {
        docs.iter().any(|doc| {
            doc.root
                .to_json()
                .ok()
                .and_then(|v| v.get("sops").cloned())
                .is_some_and(|meta| meta.get("mac").is_some())
        })
    })
}

/// The note for an encrypted file (no content, only what to do).
pub fn encrypted_note() -> String {
    "encrypted: not checked (SOPS; stackgate never decrypts): check the decrypted text, e.g. \
     `sops -d FILE | stackgate check -`"
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sops_yaml_json_and_ini_are_recognised() {
        let yaml = "cloudConfig:\n  global:\n    password: ENC[AES256_GCM,data:abc=,iv:x,tag:y,type:str]\n\
                    sops:\n  mac: ENC[AES256_GCM,data:m,type:str]\n  version: 3.9.0\n";
        assert!(is_encrypted(yaml));
        let json = "{\"a\": \"ENC[AES256_GCM,data:abc=,type:str]\", \"sops\": {\"mac\": \"x\"}}";
        assert!(is_encrypted(json));
        let ini = "[Global]\npassword = ENC[AES256_GCM,data:abc=,type:str]\n[sops]\nmac = ENC[AES256_GCM,data:m]\n";
        assert!(is_encrypted(ini));
        // A value that merely looks encrypted, without SOPS's metadata, is checked.
        assert!(!is_encrypted("a: ENC[AES256_GCM,data:abc=]\nsops: yes\n"));
        assert!(!is_encrypted("sops:\n  mac: x\n"));
    }
}
