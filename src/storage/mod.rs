//! The one storage seam: every store weir reads or writes through is built here, from a
//! [`Location`] (a local path or an object-store URL) plus [`StorageOptions`], over the
//! `object_store` crate, as arroyo-storage's `StorageProvider::for_url` and delta-rs's
//! log store factories do. Local disk is one backend among S3, Azure and GCS.
//!
//! What each backend guarantees, stated once ([`Guarantees`], docs/object-storage.md):
//!
//! | backend | create a file that must not exist | replace a file | durable when | single writer |
//! |---|---|---|---|---|
//! | local disk | temp file, fsync, `renameat2(RENAME_NOREPLACE)`, fsync of the directory ([`crate::durable`]) | temp file, fsync, `rename`, fsync of the directory | the call returns | `flock` on `_weir/lock` |
//! | S3 | `PUT` with `If-None-Match: *` (object_store's `S3ConditionalPut::ETagMatch`); refused when `aws_conditional_put = "disabled"` or the server ignores the header | `PUT` (atomic per object) | the `PUT` returns 200 | a lease object |
//! | Azure | `PUT` with `If-None-Match: *` | `PUT` | the `PUT` returns | a lease object |
//! | GCS | `PUT` with `x-goog-if-generation-match: 0` | `PUT` | the `PUT` returns | a lease object |
//!
//! Listing: object stores list keys in lexical (UTF-8 byte) order and S3 and GCS start a
//! listing after a given key server-side; Azure's listing is filtered on the client
//! ([`Store::list`]). Requests are retried by object_store's retry policy (exponential
//! backoff, [`DEFAULT_MAX_RETRIES`] 15 within a `retry_timeout` of 3 minutes by default;
//! both are `storage_options` keys).
//!
//! Delta tables reach the same stores: [`register_delta_stores`] registers this module's
//! builder with deltalake for every object-store scheme, so `deltalake` opens
//! `s3://`, `gs://` and `az://` tables with the stores built here.

mod delta;
pub mod location;
pub mod mirror;
pub mod options;
pub mod test_server;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

pub use delta::register_delta_stores;
pub use location::{Backend, Location, LocationError};
pub use options::StorageOptions;

/// Why a store could not be built or answered with an error.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error(transparent)]
    Location(#[from] LocationError),
    /// The options do not build a store (an unknown key, a bad value).
    #[error("{url}: {message}")]
    Options { url: String, message: String },
    /// The store answered with an error, or could not be reached.
    #[error("{url}: {}", store_message(source))]
    Store {
        url: String,
        #[source]
        source: object_store::Error,
    },
    /// Put-if-absent is not available, so two writers could both commit the same version.
    #[error(
        "{url}: {reason}; weir commits Delta versions and checkpoint files with put-if-absent and does not write to a store without it (docs/object-storage.md#consistency)"
    )]
    NoConditionalPut { url: String, reason: String },
}

impl StorageError {
    /// Whether a later retry can succeed without a change by a person (a server down, a
    /// throttled request), as opposed to a missing bucket or refused credentials.
    pub fn retryable(&self) -> bool {
        match self {
            StorageError::Store { source, .. } => {
                !matches!(
                    source,
                    object_store::Error::NotFound { .. }
                        | object_store::Error::PermissionDenied { .. }
                        | object_store::Error::Unauthenticated { .. }
                        | object_store::Error::NotSupported { .. }
                        | object_store::Error::NotImplemented { .. }
                        | object_store::Error::UnknownConfigurationKey { .. }
                ) && refusal(&source.to_string()).is_none()
            }
            _ => false,
        }
    }
}

/// What a store's answer means when a person has to act: object_store reports some
/// refusals as generic errors carrying the server's status and code.
fn refusal(text: &str) -> Option<&'static str> {
    const ACCESS: [&str; 6] = [
        "403 Forbidden",
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "AccessDenied",
        "AuthenticationFailed",
        "401 Unauthorized",
    ];
    if ACCESS.iter().any(|m| text.contains(m)) {
        return Some(
            "access refused (check the credentials in the environment or storage_options)",
        );
    }
    if text.contains("NoSuchBucket") || text.contains("ContainerNotFound") {
        return Some("the bucket (or container) does not exist");
    }
    None
}

/// object_store's message, without the request's query string (a presigned URL could
/// carry a signature) and with the usual causes named.
fn store_message(source: &object_store::Error) -> String {
    let text = source.to_string();
    let text = match text.find("?X-Amz-") {
        Some(i) => format!("{}?<redacted>", &text[..i]),
        None => text,
    };
    if let Some(meaning) = refusal(&text) {
        return format!("{meaning}: {text}");
    }
    match source {
        object_store::Error::NotFound { .. } => format!("not found: {text}"),
        object_store::Error::Unauthenticated { .. }
        | object_store::Error::PermissionDenied { .. } => {
            format!(
                "access refused (check the credentials in the environment or storage_options): {text}"
            )
        }
        _ => text,
    }
}

/// What a backend guarantees, stated once (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guarantees {
    /// A write can refuse to replace an existing file (put-if-absent, or no-replace rename).
    pub put_if_absent: bool,
    /// A listing can start after a key on the server (S3 `start-after`, GCS `startOffset`).
    pub list_after_on_server: bool,
    /// Listings come back in lexical key order.
    pub lexical_listing: bool,
    /// Writes need an fsync (and one of their directory) to survive a power cut.
    pub needs_fsync: bool,
}

impl Backend {
    pub fn guarantees(self) -> Guarantees {
        match self {
            Backend::Local => Guarantees {
                put_if_absent: true,
                list_after_on_server: false,
                lexical_listing: false,
                needs_fsync: true,
            },
            Backend::S3 | Backend::Gcs => Guarantees {
                put_if_absent: true,
                list_after_on_server: true,
                lexical_listing: true,
                needs_fsync: false,
            },
            Backend::Azure => Guarantees {
                put_if_absent: true,
                list_after_on_server: false,
                lexical_listing: true,
                needs_fsync: false,
            },
        }
    }
}

/// Whether a put-if-absent created the object or found one there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    Created,
    Exists,
}

/// A store at a location: the object store of its bucket (or of the local file system)
/// and the location's path in it.
#[derive(Debug, Clone)]
pub struct Store {
    location: Location,
    root: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
}

impl Store {
    /// Builds the store of `location`. Environment variables come first (object_store's
    /// `from_env`: `AWS_*`, `AZURE_*`/`AZURITE_*`, `GOOGLE_*`), then `options` override them.
    pub fn for_location(
        location: &Location,
        options: &StorageOptions,
    ) -> Result<Store, StorageError> {
        let url = location.to_url().map_err(|e| StorageError::Options {
            url: location.to_string(),
            message: e.to_string(),
        })?;
        let (root, prefix) = build(&url, options)?;
        Ok(Store {
            location: location.clone(),
            root,
            prefix,
        })
    }

    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The object store rooted at the bucket (or `/` on local disk), for deltalake.
    pub fn root_store(&self) -> Arc<dyn ObjectStore> {
        self.root.clone()
    }

    pub fn guarantees(&self) -> Guarantees {
        self.location.backend().guarantees()
    }

    /// The object `rel` below the location.
    pub fn path(&self, rel: &str) -> ObjectPath {
        let mut path = self.prefix.clone();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            path = path.clone().join(part);
        }
        path
    }

    fn err(&self, rel: &str, source: object_store::Error) -> StorageError {
        StorageError::Store {
            url: self.location.join(rel).to_string(),
            source,
        }
    }

    /// The object's bytes, `None` when it does not exist.
    pub async fn get(&self, rel: &str) -> Result<Option<Bytes>, StorageError> {
        match self.root.get(&self.path(rel)).await {
            Ok(got) => got.bytes().await.map(Some).map_err(|e| self.err(rel, e)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(rel, e)),
        }
    }

    /// The object's metadata (size, last modified, ETag), `None` when it does not exist.
    pub async fn head(&self, rel: &str) -> Result<Option<ObjectMeta>, StorageError> {
        match self.root.head(&self.path(rel)).await {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(rel, e)),
        }
    }

    /// Writes the object, replacing any (atomic per object on every backend).
    pub async fn put(&self, rel: &str, bytes: Bytes) -> Result<(), StorageError> {
        self.root
            .put(&self.path(rel), PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.err(rel, e))
    }

    /// Creates the object unless one exists (the same name from two writers: one wins).
    pub async fn put_if_absent(&self, rel: &str, bytes: Bytes) -> Result<PutOutcome, StorageError> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .root
            .put_opts(&self.path(rel), PutPayload::from_bytes(bytes), opts)
            .await
        {
            Ok(_) => Ok(PutOutcome::Created),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(PutOutcome::Exists),
            Err(object_store::Error::NotImplemented { .. }) => Err(StorageError::NoConditionalPut {
                url: self.location.join(rel).to_string(),
                reason: "conditional put is disabled for this store (storage_options aws_conditional_put = \"disabled\")".to_string(),
            }),
            Err(e) => Err(self.err(rel, e)),
        }
    }

    /// The objects below `rel_prefix`, in key order, after key `start_after` (a key
    /// relative to the location) when given: the listing of a landing zone whose keys
    /// are ordered by arrival costs one request per 1,000 new keys, not a full listing.
    pub async fn list(
        &self,
        rel_prefix: &str,
        start_after: Option<&str>,
    ) -> Result<Vec<ObjectMeta>, StorageError> {
        let prefix = self.path(rel_prefix);
        let listed: Vec<ObjectMeta> = match start_after {
            Some(after) => {
                let offset = self.path(after);
                self.root
                    .list_with_offset(Some(&prefix), &offset)
                    .try_collect()
                    .await
            }
            None => self.root.list(Some(&prefix)).try_collect().await,
        }
        .map_err(|e| self.err(rel_prefix, e))?;
        let mut listed = listed;
        listed.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(listed)
    }

    /// Whether any object exists below `rel_prefix` (one listing request, the first key).
    pub async fn any_below(&self, rel_prefix: &str) -> Result<bool, StorageError> {
        let prefix = self.path(rel_prefix);
        let mut listing = self.root.list(Some(&prefix));
        match listing.try_next().await {
            Ok(first) => Ok(first.is_some()),
            Err(e) => Err(self.err(rel_prefix, e)),
        }
    }

    /// The key of an object relative to the location (for the ledger and `start_after`).
    pub fn relative(&self, path: &ObjectPath) -> Option<String> {
        path.prefix_match(&self.prefix).map(|parts| {
            parts
                .map(|p| p.as_ref().to_string())
                .collect::<Vec<_>>()
                .join("/")
        })
    }

    /// Checks once per bucket and process that the server refuses a second create of the
    /// same key: some S3-compatible servers ignore `If-None-Match`, and a Delta commit or
    /// `offsets/N` written there could silently replace another writer's.
    pub async fn check_put_if_absent(&self) -> Result<(), StorageError> {
        if self.location.backend() == Backend::Local {
            return Ok(());
        }
        static CHECKED: OnceLock<Mutex<HashMap<String, ()>>> = OnceLock::new();
        let key = match &self.location {
            Location::Remote(url) => {
                format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default())
            }
            Location::Local(_) => String::new(),
        };
        let checked = CHECKED.get_or_init(|| Mutex::new(HashMap::new()));
        if checked
            .lock()
            .map(|m| m.contains_key(&key))
            .unwrap_or(false)
        {
            return Ok(());
        }
        let probe = format!("_weir_put_if_absent_check/{}", uuid::Uuid::new_v4());
        let first = self.put_if_absent(&probe, Bytes::from_static(b"1")).await?;
        let second = self.put_if_absent(&probe, Bytes::from_static(b"2")).await;
        // The probe is weir's own object; leaving it behind would only cost a key.
        let _ = self.root.delete(&self.path(&probe)).await;
        match (first, second?) {
            (PutOutcome::Created, PutOutcome::Exists) => {
                if let Ok(mut m) = checked.lock() {
                    m.insert(key, ());
                }
                Ok(())
            }
            _ => Err(StorageError::NoConditionalPut {
                url: self.location.to_string(),
                reason:
                    "the server accepted a second create of the same key (it ignores If-None-Match)"
                        .to_string(),
            }),
        }
    }
}

/// Options remembered per location (a pipeline's `storage_options`), for every store
/// later built at or below it. Process-wide, as deltalake's own store registry is.
fn remembered() -> &'static Mutex<Vec<(url::Url, StorageOptions)>> {
    static REMEMBERED: OnceLock<Mutex<Vec<(url::Url, StorageOptions)>>> = OnceLock::new();
    REMEMBERED.get_or_init(|| Mutex::new(Vec::new()))
}

/// Remembers `options` for the store at `location` and below (replacing any given for the
/// same location).
pub fn remember_options(location: &Location, options: StorageOptions) {
    let Ok(url) = location.to_url() else {
        return;
    };
    if let Ok(mut all) = remembered().lock() {
        all.retain(|(u, _)| *u != url);
        all.push((url, options));
    }
}

/// The options remembered for the longest location that holds `url`, overridden by
/// `options`.
fn with_remembered(url: &url::Url, options: &StorageOptions) -> StorageOptions {
    let mut dir = url.clone();
    if !dir.path().ends_with('/') {
        let path = format!("{}/", dir.path());
        dir.set_path(&path);
    }
    let mut merged = StorageOptions::new();
    if let Ok(all) = remembered().lock()
        && let Some((_, found)) = all
            .iter()
            .filter(|(u, _)| dir.as_str().starts_with(u.as_str()))
            .max_by_key(|(u, _)| u.as_str().len())
    {
        merged = found.clone();
    }
    for (k, v) in options.iter() {
        merged.insert(k, v);
    }
    merged
}

/// The root store of `url` and the URL's path in it, from the environment, then the
/// options remembered for the location ([`remember_options`]), then `options`.
pub(crate) fn build(
    url: &url::Url,
    options: &StorageOptions,
) -> Result<(Arc<dyn ObjectStore>, ObjectPath), StorageError> {
    let backend = Backend::of_scheme(url.scheme()).ok_or_else(|| {
        StorageError::Location(LocationError::UnsupportedScheme {
            text: url.to_string(),
            scheme: url.scheme().to_string(),
        })
    })?;
    let options = &with_remembered(url, options);
    let shown = url.to_string();
    let options_err = |message: String| StorageError::Options {
        url: shown.clone(),
        message,
    };
    options.validate(backend).map_err(options_err)?;
    let config_err = |e: object_store::Error| StorageError::Options {
        url: shown.clone(),
        message: e.to_string(),
    };
    let path = ObjectPath::from_url_path(url.path()).map_err(|e| StorageError::Options {
        url: shown.clone(),
        message: e.to_string(),
    })?;
    let retry = retry_config(options).map_err(options_err)?;
    let keyed = || {
        options
            .iter()
            .filter(|(k, _)| !matches!(*k, "max_retries" | "retry_timeout"))
    };
    let store: Arc<dyn ObjectStore> = match backend {
        Backend::Local => Arc::new(object_store::local::LocalFileSystem::new()),
        Backend::S3 => {
            let mut b = object_store::aws::AmazonS3Builder::from_env()
                .with_url(url.as_str())
                .with_retry(retry);
            for (k, v) in keyed() {
                b = b.with_config(k.parse().map_err(config_err)?, v);
            }
            if options
                .get("aws_conditional_put")
                .or(options.get("conditional_put"))
                == Some("disabled")
                || std::env::var("AWS_CONDITIONAL_PUT").is_ok_and(|v| v == "disabled")
            {
                return Err(StorageError::NoConditionalPut {
                    url: shown,
                    reason: "conditional put is disabled (aws_conditional_put = \"disabled\")"
                        .to_string(),
                });
            }
            Arc::new(b.build().map_err(config_err)?)
        }
        Backend::Azure => {
            let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .with_retry(retry);
            for (k, v) in keyed() {
                b = b.with_config(k.parse().map_err(config_err)?, v);
            }
            Arc::new(b.build().map_err(config_err)?)
        }
        Backend::Gcs => {
            let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .with_retry(retry);
            for (k, v) in keyed() {
                b = b.with_config(k.parse().map_err(config_err)?, v);
            }
            Arc::new(b.build().map_err(config_err)?)
        }
    };
    Ok((store, path))
}

/// Retries of a failed request before its error is the flow's (`max_retries` overrides).
pub const DEFAULT_MAX_RETRIES: usize = 15;

/// object_store's retry policy with `max_retries` / `retry_timeout` from the options.
fn retry_config(options: &StorageOptions) -> Result<object_store::RetryConfig, String> {
    let mut retry = object_store::RetryConfig {
        // object_store's default backoff (100 ms, decorrelated jitter of base 2) tends to
        // stay short: its 10 retries pass in about 3 s, less than a store takes to come
        // back from a restart. Base 3 from 200 ms, capped at 10 s, grows past that within
        // a few retries; still within the same 3-minute `retry_timeout`.
        max_retries: DEFAULT_MAX_RETRIES,
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            base: 3.0,
        },
        ..object_store::RetryConfig::default()
    };
    if let Some(v) = options.get("max_retries") {
        retry.max_retries = v
            .parse()
            .map_err(|_| format!("storage_options max_retries = {v:?} is not a whole number"))?;
    }
    if let Some(v) = options.get("retry_timeout") {
        retry.retry_timeout = humantime::parse_duration(v)
            .or_else(|_| v.parse::<u64>().map(Duration::from_secs))
            .map_err(|_| format!("storage_options retry_timeout = {v:?} is not a duration (\"3 minutes\", \"180s\")"))?;
    }
    Ok(retry)
}
