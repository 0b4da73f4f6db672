//! The one error type of the transport boundary.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Why the server could not start. Every message names the flag or file to fix.
///
/// Convention: the cause is attached as `#[source]` and is **not** repeated in the message,
/// so `{:#}` (anyhow) prints each cause once. Messages never quote file contents (a key
/// file is a secret).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listen address could not be bound (in use, no permission, no such interface).
    #[error("cannot listen on {addr} (--{flag})")]
    Bind {
        /// The flag that set the address, without dashes (`listen`, `admin-listen`).
        flag: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A pre-bound listener does not report its local address.
    #[error("cannot read the local address of the {which} listener")]
    LocalAddr {
        /// `webhook` or `admin`.
        which: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A PEM file could not be read.
    #[error("cannot read --{flag} file {}", path.display())]
    ReadPem {
        /// `tls-cert`, `tls-key` or `client-ca`.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A PEM file was read but holds nothing usable; `reason` says what is wrong
    /// without quoting the file.
    #[error("--{flag} file {}: {reason}", path.display())]
    BadPem {
        /// `tls-cert`, `tls-key` or `client-ca`.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong (no content).
        reason: String,
    },
    /// The certificate and the key parse but do not belong together, or the key type is
    /// not supported.
    #[error(
        "--tls-cert {} and --tls-key {} do not form a usable pair: {reason}",
        cert.display(),
        key.display()
    )]
    CertKeyPair {
        /// Certificate chain file.
        cert: PathBuf,
        /// Key file.
        key: PathBuf,
        /// What rustls reported (no content).
        reason: String,
    },
    /// The `--client-ca` file holds certificates that cannot be used as trust anchors.
    #[error("--client-ca file {}: cannot build a client certificate verifier: {reason}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// What rustls reported.
        reason: String,
    },
    /// Generating the development CA and serving certificate failed.
    #[error("cannot generate a certificate (no --tls-cert/--tls-key given)")]
    Generate(#[source] rcgen::Error),
    /// The generated CA could not be written.
    #[error("cannot write the generated CA to --generated-ca-out {}", path.display())]
    WriteGeneratedCa {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// rustls refused the server configuration (should not happen with the built-in
    /// protocol list; reported rather than panicking).
    #[error("cannot build the TLS server configuration")]
    TlsConfig(#[source] rustls::Error),
}
