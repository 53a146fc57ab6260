//! The CA bundle a profile trusts inside (`trust_host_ca`): its
//! `host_ca_file`, else the host's system bundle.
//!
//! Enforces: `host_ca_file` is opened from `/` with no symbolic link in any
//! component (`openat2(RESOLVE_NO_SYMLINKS)`, as volumes are) and must be
//! a regular file of at most [`MAX_CA_BUNDLE`] bytes; of either bundle,
//! only the certificate blocks reach the sandbox, in a file Lazaret writes
//! (`/.lazaret/host-ca.pem`): comments and other blocks stay behind, and a
//! file that holds a private key, or a block that does not end, is refused.
//!
//! Leaves to others: that `host_ca_file` lies nowhere a sandbox can write
//! (`lazaret_config::check_host_overlap`, with the file, line and key),
//! writing the copy (the coordinator).

use lazaret_helpers::hostpath::{first_symlink, open_no_symlinks};
use lazaret_protocol::display::escape_os;
use rustix::fs::OFlags;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The host's system bundle, where the common distributions keep it.
const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The most bytes of a CA bundle read.
pub const MAX_CA_BUNDLE: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum HostCaError {
    #[error("trust_host_ca: no CA bundle at {}: set host_ca_file to the bundle to trust", SYSTEM_CA_BUNDLES.join(", "))]
    NoSystemBundle,
    #[error("trust_host_ca: host_ca_file {path}: {link} is a symbolic link; Lazaret reads the bundle without following links: point host_ca_file at the real file ({target})")]
    Symlink {
        path: String,
        link: String,
        target: String,
    },
    #[error("trust_host_ca: cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("trust_host_ca: {path} is not a regular file")]
    NotRegular { path: String },
    #[error("trust_host_ca: {path} is larger than {MAX_CA_BUNDLE} bytes")]
    TooLarge { path: String },
    #[error("trust_host_ca: {path}: {source}")]
    Pem { path: String, source: PemError },
}

/// Why a bundle's text is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PemError {
    #[error("line {line} begins a private key ({label}): a CA bundle holds certificates only; point host_ca_file at a file without keys")]
    PrivateKey { line: usize, label: String },
    #[error("the {label} block from line {line} does not end")]
    Unterminated { line: usize, label: String },
    #[error("line {line}, inside the certificate block from line {start}, is not base64")]
    NotBase64 { line: usize, start: usize },
    #[error("holds no PEM certificate")]
    NoCertificate,
}

/// The bundle to copy into the sandbox, certificate blocks only; `None`
/// without `trust_host_ca`.
pub fn bundle(p: &lazaret_config::Profile) -> Result<Option<Vec<u8>>, HostCaError> {
    if !p.trust_host_ca {
        return Ok(None);
    }
    let (path, bytes) = match &p.host_ca_file {
        Some(f) => (f.clone(), read(f, true)?),
        None => {
            let system = SYSTEM_CA_BUNDLES
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
                .ok_or(HostCaError::NoSystemBundle)?;
            // The system's own bundle: its links (`/etc/ssl/cert.pem` on
            // some systems) are the administrator's, followed as usual.
            let bytes = read(&system, false)?;
            (system, bytes)
        }
    };
    certificates(&bytes)
        .map(Some)
        .map_err(|source| HostCaError::Pem {
            path: escape_os(&path),
            source,
        })
}

/// Reads the regular file at `path`, at most [`MAX_CA_BUNDLE`] bytes;
/// with `no_links`, resolved with no symbolic link in any component.
fn read(path: &Path, no_links: bool) -> Result<Vec<u8>, HostCaError> {
    let shown = || escape_os(path);
    let failed = |source: std::io::Error| HostCaError::Read {
        path: shown(),
        source,
    };
    // O_NONBLOCK: a FIFO must not hang the open before fstat refuses it.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    let fd = if no_links {
        open_no_symlinks(path, flags).map_err(|e| match e {
            rustix::io::Errno::LOOP => {
                let (link, target) =
                    first_symlink(path).unwrap_or_else(|| (path.into(), "?".into()));
                HostCaError::Symlink {
                    path: shown(),
                    link: escape_os(&link),
                    target: escape_os(&target),
                }
            }
            e => failed(e.into()),
        })?
    } else {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
        rustix::fs::open(path, flags, rustix::fs::Mode::empty()).map_err(|e| failed(e.into()))?
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(failed)?;
    if !meta.is_file() {
        return Err(HostCaError::NotRegular { path: shown() });
    }
    let mut bytes = Vec::new();
    file.take(MAX_CA_BUNDLE + 1)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    if bytes.len() as u64 > MAX_CA_BUNDLE {
        return Err(HostCaError::TooLarge { path: shown() });
    }
    Ok(bytes)
}

/// What a PEM line is, read as OpenSSL does: `-----BEGIN LABEL-----` or
/// `-----END LABEL-----` on a line of its own.
fn boundary<'a>(line: &'a str, word: &str) -> Option<&'a str> {
    line.strip_prefix("-----")?
        .strip_prefix(word)?
        .strip_prefix(' ')?
        .strip_suffix("-----")
}

/// The certificate blocks of `text`, each as its BEGIN line, its base64
/// lines and its END line, one after the other; everything else is left
/// out. Refused: any private key block (even one no reader would parse),
/// a block that does not end, a line of a certificate block that is not
/// base64, and a text with no certificate at all.
pub fn certificates(text: &[u8]) -> Result<Vec<u8>, PemError> {
    let text = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    // (label, first line, kept lines) of the block being read.
    let mut open: Option<(&str, usize, Vec<&str>)> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.contains("PRIVATE KEY") && line.contains("-----") {
            let at = line.find("-----").unwrap_or(0);
            return Err(PemError::PrivateKey {
                line: n,
                label: line[at..].trim_matches('-').to_string(),
            });
        }
        match &mut open {
            None => {
                if let Some(label) = boundary(line, "BEGIN") {
                    open = Some((label, n, vec![line]));
                }
            }
            Some((label, start, kept)) => {
                if boundary(line, "END") == Some(*label) {
                    if *label == "CERTIFICATE" {
                        kept.push(line);
                        for l in kept.iter() {
                            out.extend_from_slice(l.as_bytes());
                            out.push(b'\n');
                        }
                    }
                    open = None;
                } else if *label == "CERTIFICATE" {
                    let base64 = line
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
                    if !base64 {
                        return Err(PemError::NotBase64 {
                            line: n,
                            start: *start,
                        });
                    }
                    if !line.is_empty() {
                        kept.push(line);
                    }
                }
            }
        }
    }
    if let Some((label, line, _)) = open {
        return Err(PemError::Unterminated {
            line,
            label: label.to_string(),
        });
    }
    if out.is_empty() {
        return Err(PemError::NoCertificate);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &str =
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\nq0w=\n-----END CERTIFICATE-----\n";

    #[test]
    fn only_certificate_blocks_are_kept() {
        let text = format!(
            "# Fedora-style comment\n{CERT}\nsome text\n-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n  {}",
            CERT.replace('\n', "\r\n")
        );
        let out = String::from_utf8(certificates(text.as_bytes()).unwrap()).unwrap();
        assert_eq!(out, format!("{CERT}{CERT}"));
    }

    #[test]
    fn a_private_key_anywhere_refuses_the_file() {
        for key in [
            "-----BEGIN PRIVATE KEY-----",
            "-----BEGIN RSA PRIVATE KEY-----",
            "-----BEGIN EC PRIVATE KEY-----",
            "-----BEGIN ENCRYPTED PRIVATE KEY-----",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            "junk -----BEGIN PRIVATE KEY-----",
        ] {
            let text = format!("{CERT}{key}\nMIIE\n-----END PRIVATE KEY-----\n");
            assert_eq!(
                certificates(text.as_bytes()),
                Err(PemError::PrivateKey {
                    line: 5,
                    label: key
                        .trim_start_matches("junk ")
                        .trim_matches('-')
                        .to_string(),
                }),
                "{key}"
            );
        }
    }

    #[test]
    fn malformed_bundles_are_refused() {
        assert_eq!(
            certificates(b"not a certificate\n"),
            Err(PemError::NoCertificate)
        );
        assert_eq!(
            certificates(b"-----BEGIN CERTIFICATE-----\nAAAA\n"),
            Err(PemError::Unterminated {
                line: 1,
                label: "CERTIFICATE".into()
            })
        );
        assert_eq!(
            certificates(b"-----BEGIN CERTIFICATE-----\nAA AA\n-----END CERTIFICATE-----\n"),
            Err(PemError::NotBase64 { line: 2, start: 1 })
        );
        // An END of another label does not end the block.
        assert_eq!(
            certificates(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END X509 CRL-----\n"),
            Err(PemError::NotBase64 { line: 3, start: 1 })
        );
    }

    #[test]
    fn host_ca_file_is_not_read_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real.pem");
        std::fs::write(&real, CERT).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link.pem")).unwrap();
        std::os::unix::fs::symlink(d.path(), d.path().join("dir")).unwrap();
        assert_eq!(read(&real, true).unwrap(), CERT.as_bytes());
        for p in [d.path().join("link.pem"), d.path().join("dir/real.pem")] {
            let e = read(&p, true).unwrap_err();
            assert!(matches!(e, HostCaError::Symlink { .. }), "{e:?}");
            assert!(e.to_string().contains("is a symbolic link"), "{e}");
        }
        // The system bundle's own links are followed.
        assert_eq!(
            read(&d.path().join("link.pem"), false).unwrap(),
            CERT.as_bytes()
        );
        let e = read(d.path(), true).unwrap_err();
        assert!(matches!(e, HostCaError::NotRegular { .. }), "{e:?}");
    }
}
