//! Where a table, a checkpoint or a landing zone lives: a local path or an object-store URL.
//!
//! A pipeline key or a command argument is a URL when it starts with a scheme and `://`
//! (`s3://bucket/landing/`), or `dbfs:/`; anything else is a local path, relative to the
//! pipeline file's directory (or the working directory on the command line). `file://` URLs
//! are local paths. The schemes are object_store's and Spark's:
//!
//! | scheme | store |
//! |---|---|
//! | `s3`, `s3a` | Amazon S3 or an S3-compatible server (`s3a` is Hadoop's name, kept for Spark) |
//! | `gs` | Google Cloud Storage |
//! | `az`, `azure`, `abfs`, `abfss`, `adl` | Azure Blob Storage / ADLS Gen2 |
//! | `file` | local disk |
//! | `dbfs` | a Databricks File System path, mapped by `WEIR_DBFS_ROOT` to one of the above |
//!
//! Credentials never travel in a location: a URL with a user or password is refused (they
//! belong in the environment or in `storage_options`), so every location can be printed.

use std::fmt;
use std::path::{Path, PathBuf};

use url::Url;

/// The environment variable that maps `dbfs:/` paths onto the store behind them
/// (`WEIR_DBFS_ROOT=s3://bucket/dbfs-root` makes `dbfs:/a/b` read `s3://bucket/dbfs-root/a/b`).
pub const DBFS_ROOT_ENV: &str = "WEIR_DBFS_ROOT";

/// The kind of store a location is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Local,
    S3,
    Azure,
    Gcs,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Local => "local",
            Backend::S3 => "s3",
            Backend::Azure => "azure",
            Backend::Gcs => "gcs",
        }
    }

    /// The backend of a URL scheme, `None` for a scheme weir does not read.
    pub fn of_scheme(scheme: &str) -> Option<Backend> {
        match scheme {
            "file" => Some(Backend::Local),
            "s3" | "s3a" => Some(Backend::S3),
            "gs" => Some(Backend::Gcs),
            "az" | "azure" | "abfs" | "abfss" | "adl" => Some(Backend::Azure),
            _ => None,
        }
    }
}

/// Why a location could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    #[error(
        "unsupported URL scheme {scheme:?} in {text:?}; weir reads local paths, file://, s3:// (s3a://), gs://, az:// (abfss://, adl://) and dbfs:/ (docs/object-storage.md)"
    )]
    UnsupportedScheme { text: String, scheme: String },
    #[error("{text:?} is not a valid URL: {message}")]
    Invalid { text: String, message: String },
    #[error("{url} names no bucket or container (expected {scheme}://BUCKET/PATH)")]
    NoBucket { url: String, scheme: String },
    #[error(
        "the URL for {url} carries credentials; remove them and give them in the environment or in storage_options (docs/object-storage.md#credentials)"
    )]
    Credentials { url: String },
    #[error(
        "{text}: dbfs:/ paths need {DBFS_ROOT_ENV} set to the store behind the DBFS root (for example {DBFS_ROOT_ENV}=s3://bucket/dbfs-root; docs/object-storage.md#dbfs)"
    )]
    DbfsUnmapped { text: String },
}

/// A local path (absolute once resolved) or an object-store URL (`Remote`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Location {
    Local(PathBuf),
    Remote(Url),
}

impl Location {
    /// Parses a pipeline value or a command argument; a relative local path is joined to
    /// `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Location, LocationError> {
        if let Some(rest) = text.strip_prefix("dbfs:") {
            return Self::dbfs(text, rest, base);
        }
        let Some(scheme) = url_scheme(text) else {
            let path = Path::new(text);
            return Ok(Location::Local(if path.is_absolute() {
                path.to_path_buf()
            } else {
                base.join(path)
            }));
        };
        let url = Url::parse(text).map_err(|e| LocationError::Invalid {
            text: text.to_string(),
            message: e.to_string(),
        })?;
        match Backend::of_scheme(scheme) {
            Some(Backend::Local) => {
                url.to_file_path()
                    .map(Location::Local)
                    .map_err(|()| LocationError::Invalid {
                        text: text.to_string(),
                        message: "a file:// URL needs an absolute path and no host".to_string(),
                    })
            }
            Some(_) => Self::remote(url),
            None => Err(LocationError::UnsupportedScheme {
                text: text.to_string(),
                scheme: scheme.to_string(),
            }),
        }
    }

    /// A location given as a local path (a `PathBuf` from the command line or an older
    /// record): a URL written as a path is still recognised.
    pub fn from_path(path: &Path) -> Result<Location, LocationError> {
        match path.to_str() {
            Some(text) => Location::parse(text, Path::new("")),
            None => Ok(Location::Local(path.to_path_buf())),
        }
    }

    fn remote(mut url: Url) -> Result<Location, LocationError> {
        // `abfss://container@account...` names the container where other URLs put a
        // user: only a password, or a user outside Azure's URLs, is a credential.
        let azure = Backend::of_scheme(url.scheme()) == Some(Backend::Azure);
        if url.password().is_some() || (!azure && !url.username().is_empty()) {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            return Err(LocationError::Credentials {
                url: url.to_string(),
            });
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(LocationError::NoBucket {
                url: url.to_string(),
                scheme: url.scheme().to_string(),
            });
        }
        Ok(Location::Remote(url))
    }

    fn dbfs(text: &str, rest: &str, base: &Path) -> Result<Location, LocationError> {
        let root = std::env::var(DBFS_ROOT_ENV).map_err(|_| LocationError::DbfsUnmapped {
            text: text.to_string(),
        })?;
        let root = Location::parse(&root, base)?;
        Ok(root.join(rest.trim_start_matches('/')))
    }

    pub fn backend(&self) -> Backend {
        match self {
            Location::Local(_) => Backend::Local,
            Location::Remote(url) => Backend::of_scheme(url.scheme()).unwrap_or(Backend::S3),
        }
    }

    pub fn is_remote(&self) -> bool {
        matches!(self, Location::Remote(_))
    }

    /// The local path, for a local location.
    pub fn as_local(&self) -> Option<&Path> {
        match self {
            Location::Local(p) => Some(p),
            Location::Remote(_) => None,
        }
    }

    /// The location below this one (`segment` may hold `/`).
    pub fn join(&self, segment: &str) -> Location {
        match self {
            Location::Local(p) => Location::Local(p.join(segment)),
            Location::Remote(url) => {
                let mut url = url.clone();
                let base = url.path().trim_end_matches('/').to_string();
                let segment = segment.trim_start_matches('/');
                url.set_path(&if segment.is_empty() {
                    base
                } else {
                    format!("{base}/{segment}")
                });
                Location::Remote(url)
            }
        }
    }

    /// The location as a URL: `file://` for a local path (made absolute), as written
    /// otherwise. A directory URL ends in `/` (as deltalake expects of a table root).
    pub fn to_url(&self) -> std::io::Result<Url> {
        match self {
            Location::Local(p) => {
                let abs = std::path::absolute(p)?;
                Url::from_directory_path(&abs).map_err(|()| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, "not an absolute path")
                })
            }
            Location::Remote(url) => {
                let mut url = url.clone();
                if !url.path().ends_with('/') {
                    let path = format!("{}/", url.path());
                    url.set_path(&path);
                }
                Ok(url)
            }
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::Remote(url) => f.write_str(url.as_str()),
        }
    }
}

/// The scheme of `text` when it is written as a URL (`scheme://...`).
fn url_scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// Whether a pipeline value or argument is written as an object-store URL or `dbfs:/` path
/// (not a local path, not `file://`).
pub fn is_remote_text(text: &str) -> bool {
    text.starts_with("dbfs:") || url_scheme(text).is_some_and(|s| s != "file")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Location, LocationError> {
        Location::parse(text, Path::new("/base"))
    }

    #[test]
    fn local_paths_are_joined_to_the_base_and_file_urls_are_local() {
        assert_eq!(
            parse("lake/bronze").unwrap(),
            Location::Local(PathBuf::from("/base/lake/bronze"))
        );
        assert_eq!(
            parse("/abs/x").unwrap(),
            Location::Local(PathBuf::from("/abs/x"))
        );
        assert_eq!(
            parse("file:///abs/x").unwrap(),
            Location::Local(PathBuf::from("/abs/x"))
        );
        // A colon without `//` is part of a file name.
        assert_eq!(
            parse("data:2024").unwrap(),
            Location::Local(PathBuf::from("/base/data:2024"))
        );
    }

    #[test]
    fn object_store_urls_keep_their_scheme_and_join_below_the_prefix() {
        for (text, backend) in [
            ("s3://bucket/landing/", Backend::S3),
            ("s3a://bucket/landing", Backend::S3),
            ("gs://bucket/landing", Backend::Gcs),
            (
                "abfss://container@account.dfs.core.windows.net/landing",
                Backend::Azure,
            ),
            ("az://container/landing", Backend::Azure),
        ] {
            let loc = parse(text).unwrap();
            assert_eq!(loc.backend(), backend, "{text}");
            assert!(loc.is_remote());
            let joined = loc.join("_delta_log/0.json").to_string();
            assert!(joined.ends_with("landing/_delta_log/0.json"), "{joined}");
            assert!(!joined.contains("landing//"), "{joined}");
        }
        assert_eq!(
            parse("s3://bucket/t").unwrap().to_url().unwrap().as_str(),
            "s3://bucket/t/"
        );
    }

    #[test]
    fn unknown_schemes_missing_buckets_and_credentials_are_refused() {
        assert!(matches!(
            parse("hdfs://nn/x"),
            Err(LocationError::UnsupportedScheme { .. })
        ));
        assert!(matches!(
            parse("s3:///x"),
            Err(LocationError::NoBucket { .. })
        ));
        let err = parse("s3://AKIAEXAMPLE:verysecret@bucket/x").unwrap_err();
        assert!(matches!(err, LocationError::Credentials { .. }));
        let text = err.to_string();
        assert!(!text.contains("verysecret"), "{text}");
        assert!(!text.contains("AKIAEXAMPLE"), "{text}");
        assert!(is_remote_text("s3://b/x") && is_remote_text("dbfs:/x"));
        assert!(!is_remote_text("file:///x") && !is_remote_text("lake/x"));
    }
}
