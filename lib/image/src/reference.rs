//! Image references: the built-in `lazaret:default` and the transports
//! skopeo reads.

use crate::ImageError;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The forms accepted, for error messages.
pub const FORMS: &str = "`lazaret:default`, `local:NAME` (made by `lazaret image commit`), `oci:DIR[:TAG]`, `oci-archive:FILE[:TAG]`, `docker-archive:FILE[:NAME:TAG]`, `containers-storage:NAME[:TAG]`, `docker://REGISTRY/NAME[:TAG]`";

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reference {
    /// `lazaret:default`, built from Debian packages.
    Default,
    /// `oci:DIR[:TAG]`: an OCI image layout on disk.
    Oci { dir: PathBuf, tag: Option<String> },
    /// `oci-archive:FILE[:TAG]`: a tar of an OCI image layout.
    OciArchive { file: PathBuf, tag: Option<String> },
    /// `docker-archive:FILE[:NAME:TAG]`: `docker save` / `podman save`.
    DockerArchive { file: PathBuf, name: Option<String> },
    /// `containers-storage:NAME[:TAG]`: the user's Podman/Buildah images.
    ContainersStorage { name: String },
    /// `docker://REGISTRY/NAME[:TAG|@DIGEST]`.
    Registry { name: String },
    /// `local:NAME`: an image made by `lazaret image commit`.
    Local { name: String },
}

fn split_tag(rest: &str) -> (&str, Option<String>) {
    // As skopeo does: the path ends at the first colon.
    match rest.split_once(':') {
        Some((p, t)) => (p, Some(t.to_string())),
        None => (rest, None),
    }
}

fn absolute(reference: &str, p: &str) -> Result<PathBuf, ImageError> {
    if p.is_empty() {
        return Err(ImageError::BadReference {
            reference: reference.to_string(),
            detail: "the path is empty".into(),
        });
    }
    let path = Path::new(p);
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    let cwd =
        std::env::current_dir().map_err(ImageError::io("find the current directory for", p))?;
    Ok(cwd.join(path))
}

impl Reference {
    /// Parses `reference`. Relative paths are made absolute against the
    /// current directory. Checks the syntax only; [`Reference::stamp`]
    /// looks at the files.
    pub fn parse(reference: &str) -> Result<Reference, ImageError> {
        if reference == crate::DEFAULT_REFERENCE {
            return Ok(Reference::Default);
        }
        let bad = |detail: &str| ImageError::BadReference {
            reference: reference.to_string(),
            detail: detail.to_string(),
        };
        let Some((transport, rest)) = reference.split_once(':') else {
            return Err(ImageError::UnsupportedReference {
                reference: reference.to_string(),
            });
        };
        match transport {
            "local" => {
                crate::commit::check_name(rest)?;
                Ok(Reference::Local {
                    name: rest.to_string(),
                })
            }
            "oci" => {
                let (p, tag) = split_tag(rest);
                Ok(Reference::Oci {
                    dir: absolute(reference, p)?,
                    tag,
                })
            }
            "oci-archive" => {
                let (p, tag) = split_tag(rest);
                Ok(Reference::OciArchive {
                    file: absolute(reference, p)?,
                    tag,
                })
            }
            "docker-archive" => {
                let (p, name) = split_tag(rest);
                Ok(Reference::DockerArchive {
                    file: absolute(reference, p)?,
                    name,
                })
            }
            "containers-storage" => {
                if rest.is_empty() || rest.starts_with('[') {
                    return Err(bad("name the image (`containers-storage:localhost/NAME:TAG`); store specifications are not supported"));
                }
                Ok(Reference::ContainersStorage {
                    name: rest.to_string(),
                })
            }
            "docker" => match rest.strip_prefix("//") {
                Some(name) if !name.is_empty() => Ok(Reference::Registry {
                    name: name.to_string(),
                }),
                _ => Err(bad("write it as `docker://REGISTRY/NAME[:TAG]`")),
            },
            _ => Err(ImageError::UnsupportedReference {
                reference: reference.to_string(),
            }),
        }
    }

    /// The source as skopeo reads it, with absolute paths.
    pub fn skopeo_source(&self) -> String {
        let with = |prefix: &str, p: &Path, t: &Option<String>| match t {
            Some(t) => format!("{prefix}:{}:{t}", p.display()),
            None => format!("{prefix}:{}", p.display()),
        };
        match self {
            Reference::Default => crate::DEFAULT_REFERENCE.to_string(),
            Reference::Oci { dir, tag } => with("oci", dir, tag),
            Reference::OciArchive { file, tag } => with("oci-archive", file, tag),
            Reference::DockerArchive { file, name } => with("docker-archive", file, name),
            Reference::ContainersStorage { name } => format!("containers-storage:{name}"),
            Reference::Registry { name } => format!("docker://{name}"),
            Reference::Local { name } => format!("{}{name}", crate::commit::LOCAL_PREFIX),
        }
    }

    /// The local file or directory the image is read from.
    pub fn local_path(&self) -> Option<&Path> {
        match self {
            Reference::Oci { dir, .. } => Some(dir),
            Reference::OciArchive { file, .. } | Reference::DockerArchive { file, .. } => {
                Some(file)
            }
            _ => None,
        }
    }

    /// Whether the image comes from a registry over the network.
    pub fn is_remote(&self) -> bool {
        matches!(self, Reference::Registry { .. })
    }

    /// Checks that a local source exists, and returns a stamp of it that
    /// changes whenever its content can have changed (device, inode, size,
    /// modification and change times of the archive, or of the layout's
    /// `index.json`): the same stamp lets a later preparation reuse the
    /// artifact without copying the image again. `None` for sources that
    /// cannot be stamped (registries, containers-storage).
    pub fn stamp(&self, reference: &str) -> Result<Option<String>, ImageError> {
        let Some(path) = self.local_path() else {
            return Ok(None);
        };
        let meta = std::fs::metadata(path).map_err(|source| ImageError::SourceMissing {
            reference: reference.to_string(),
            path: path.to_path_buf(),
            source,
        })?;
        let (meta, what) = match self {
            Reference::Oci { .. } => {
                if !meta.is_dir() {
                    return Err(ImageError::BadReference {
                        reference: reference.to_string(),
                        detail: format!("{} is not a directory (an OCI layout); for a tar archive write `oci-archive:`", path.display()),
                    });
                }
                let index = path.join("index.json");
                let m = std::fs::metadata(&index).map_err(|source| ImageError::SourceMissing {
                    reference: reference.to_string(),
                    path: index.clone(),
                    source,
                })?;
                (m, "index")
            }
            _ => {
                if !meta.is_file() {
                    return Err(ImageError::BadReference {
                        reference: reference.to_string(),
                        detail: format!("{} is not a regular file", path.display()),
                    });
                }
                (meta, "file")
            }
        };
        Ok(Some(format!(
            "{what}:{}:{}:{}:{}.{}:{}.{}",
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(
            Reference::parse("lazaret:default").unwrap(),
            Reference::Default
        );
        assert_eq!(
            Reference::parse("oci:/a/b:v1").unwrap(),
            Reference::Oci {
                dir: "/a/b".into(),
                tag: Some("v1".into())
            }
        );
        assert_eq!(
            Reference::parse("oci-archive:/a.tar")
                .unwrap()
                .skopeo_source(),
            "oci-archive:/a.tar"
        );
        let rel = Reference::parse("docker-archive:x.tar:lazaret/bb:latest").unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            rel,
            Reference::DockerArchive {
                file: cwd.join("x.tar"),
                name: Some("lazaret/bb:latest".into())
            }
        );
        assert_eq!(
            rel.skopeo_source(),
            format!(
                "docker-archive:{}:lazaret/bb:latest",
                cwd.join("x.tar").display()
            )
        );
        assert_eq!(
            Reference::parse("containers-storage:localhost/bb:latest")
                .unwrap()
                .skopeo_source(),
            "containers-storage:localhost/bb:latest"
        );
        let r = Reference::parse("docker://registry.invalid/x:1").unwrap();
        assert!(r.is_remote());
        assert_eq!(r.skopeo_source(), "docker://registry.invalid/x:1");
    }

    #[test]
    fn rejects_the_rest_with_the_accepted_forms() {
        for bad in [
            "ubuntu:24.04",
            "docker.io/library/ubuntu",
            "dir:/x",
            "lazaret:other",
        ] {
            let e = Reference::parse(bad).unwrap_err();
            assert!(
                matches!(e, ImageError::UnsupportedReference { .. }),
                "{bad}: {e}"
            );
            assert!(e.to_string().contains("oci-archive:FILE"), "{e}");
        }
        for bad in [
            "oci:",
            "docker:registry/x",
            "docker://",
            "containers-storage:",
        ] {
            let e = Reference::parse(bad).unwrap_err();
            assert!(matches!(e, ImageError::BadReference { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn stamps_change_with_the_file() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a.tar");
        let r = Reference::parse(&format!("oci-archive:{}", f.display())).unwrap();
        let e = r.stamp("x").unwrap_err();
        assert!(matches!(e, ImageError::SourceMissing { .. }), "{e}");
        std::fs::write(&f, "one").unwrap();
        let s1 = r.stamp("x").unwrap().unwrap();
        assert_eq!(r.stamp("x").unwrap().unwrap(), s1);
        std::fs::write(&f, "two!").unwrap();
        assert_ne!(r.stamp("x").unwrap().unwrap(), s1);
        let oci = Reference::parse(&format!("oci:{}", d.path().display())).unwrap();
        assert!(matches!(
            oci.stamp("x").unwrap_err(),
            ImageError::SourceMissing { .. }
        ));
        assert_eq!(Reference::Default.stamp("x").unwrap(), None);
    }
}
