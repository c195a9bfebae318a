//! The file source on object storage: a landing zone at `s3://`, `gs://`, `az://` (or
//! `abfss://`) listed and read through the storage seam ([`crate::storage::Store`]),
//! never through a client of weir's own.
//!
//! What the local listing does applies to keys ([`Landing::list`]): a key with a
//! hidden segment (`_`, `.` prefixes, `._COPYING_`; [`super::hidden_name`]) at any
//! depth is skipped, so is a 0-byte object (a "directory" marker, a placeholder),
//! `path_glob_filter` is matched against the key below the source's path (or its last
//! segment), `min_file_age` and `modified_after` against the object's last-modified
//! time. Each object is listed as a [`ListedFile`] whose `path` is its URL (the
//! ledger's key and `_metadata.file_path`), with its size, last-modified time and
//! ETag: the ledger tells a rewritten object by its ETag (and size), as Auto Loader's
//! `allowOverwrites` does.
//!
//! Listing costs: object stores return at most 1,000 keys per LIST request, in key
//! order; S3 and GCS start a listing after a given key on the server. With incremental
//! listing ([`Incremental`], Auto Loader's `cloudFiles.useIncrementalListing`) a
//! trigger lists only the keys after the last key seen, and a full listing runs every
//! `backfill_interval` for what that misses (docs/object-storage.md#files-source).
//!
//! Reads are whole objects, one `GET` each ([`Landing::get_blocking`]), decoded from
//! the bytes as a local file is; at most as many objects are held at once as local
//! files are (two per core).

use std::path::Path;

use bytes::Bytes;

use super::hidden_name;
use super::ledger::ListedFile;
use super::read::FileReadError;
use crate::error::{Error, Result, StorageRole};
use crate::spec::{FilesSource, IncrementalListing};
use crate::storage::{Location, StorageError, StorageOptions, Store};

/// A files source's landing zone on an object store.
#[derive(Debug, Clone)]
pub struct Landing {
    store: Store,
    /// The location as a URL ending in `/`: an object's URL is this and its key below it.
    base: String,
}

/// The objects one listing found.
#[derive(Debug, Default)]
pub struct RemoteListing {
    /// Objects to classify against the ledger, in key order.
    pub files: Vec<ListedFile>,
    /// The greatest key (below the source's path) before the first object still younger
    /// than `min_file_age`: where the next incremental listing starts.
    pub last_key: Option<String>,
    /// Whether the files' modification times never decrease in key order (keys are
    /// lexically ordered by arrival: what `use_incremental_listing = "auto"` checks).
    pub ordered: bool,
    /// LIST requests the listing took (1,000 keys per request).
    pub requests: u64,
}

/// Keys per LIST response on S3, GCS and Azure.
const KEYS_PER_LIST_REQUEST: u64 = 1000;

fn storage_error(source: StorageError) -> Error {
    Error::Storage {
        role: StorageRole::Source,
        source,
    }
}

impl Landing {
    /// The landing zone of a files source whose `path` is an object-store URL (`None` for
    /// a local path). Credentials come from the environment and the `storage_options`
    /// remembered for the location, as for Delta tables.
    pub fn of(path: &Path) -> Result<Option<Landing>> {
        let text = path.to_string_lossy();
        if !crate::storage::location::is_remote_text(&text) {
            return Ok(None);
        }
        let location = Location::parse(&text, Path::new(""))
            .map_err(|e| storage_error(StorageError::Location(e)))?;
        let store =
            Store::for_location(&location, &StorageOptions::new()).map_err(storage_error)?;
        let base = location
            .to_url()
            .map_err(|e| Error::Source {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?
            .to_string();
        Ok(Some(Landing { store, base }))
    }

    /// The landing zone at any location, a local directory included (tests: the listing
    /// rules over object_store's local file system).
    #[cfg(test)]
    fn at(location: &Location) -> Landing {
        Landing {
            store: Store::for_location(location, &StorageOptions::new()).expect("a store"),
            base: location.to_url().expect("a URL").to_string(),
        }
    }

    /// The URL of the landing zone (ending in `/`).
    pub fn url(&self) -> &str {
        &self.base
    }

    /// The key below the source's path of an object's URL.
    fn key_of<'a>(&self, url: &'a str) -> Option<&'a str> {
        url.strip_prefix(&self.base)
    }

    /// Lists the objects below the source's path (after key `start_after` when given)
    /// and keeps those the listing rules let through (see the module doc).
    pub async fn list(
        &self,
        options: &FilesSource,
        now_ms: i64,
        start_after: Option<&str>,
    ) -> Result<RemoteListing> {
        let listed = self
            .store
            .list("", start_after)
            .await
            .map_err(storage_error)?;
        let min_age_ms = i64::try_from(options.min_file_age.as_millis()).unwrap_or(i64::MAX);
        let mut out = RemoteListing {
            requests: (listed.len() as u64).div_ceil(KEYS_PER_LIST_REQUEST).max(1),
            ordered: true,
            ..RemoteListing::default()
        };
        let mut young = false;
        let mut last_time: Option<i64> = None;
        for meta in listed {
            let Some(key) = self.store.relative(&meta.location) else {
                continue;
            };
            if key.is_empty() {
                continue;
            }
            let mtime_ms = meta.last_modified.timestamp_millis();
            let is_young = min_age_ms > 0 && now_ms.saturating_sub(mtime_ms) < min_age_ms;
            young |= is_young;
            if !young {
                out.last_key = Some(key.clone());
            }
            if key.split('/').any(hidden_name) || meta.size == 0 || is_young {
                continue;
            }
            if let Some(glob) = &options.path_glob_filter {
                let name = key.rsplit('/').next().unwrap_or(key.as_str());
                if !glob.matches(&key) && !glob.matches(name) {
                    continue;
                }
            }
            if options
                .modified_after_ms
                .is_some_and(|after| mtime_ms <= after)
            {
                continue;
            }
            if last_time.is_some_and(|t| mtime_ms < t) {
                out.ordered = false;
            }
            last_time = Some(mtime_ms);
            out.files.push(ListedFile {
                path: format!("{}{key}", self.base),
                size: meta.size,
                modification_time_ms: mtime_ms,
                etag: meta.e_tag.clone(),
            });
        }
        Ok(out)
    }

    /// [`Landing::list`] from synchronous code (schema inference, the first start's
    /// snapshot of existing files).
    pub fn list_blocking(&self, options: &FilesSource, now_ms: i64) -> Result<RemoteListing> {
        crate::background::block_on(self.list(options, now_ms, None)).map_err(|e| {
            Error::SourceIo {
                path: options.path.clone(),
                source: e,
            }
        })?
    }

    /// The bytes of the object at `url` (a listed file's path), from a blocking thread:
    /// an object listed but gone when read is an I/O error naming it (the file is taken
    /// again if it comes back, as a local file that vanished); a store that fails
    /// otherwise is [`FileReadError::Store`] (the batch stops, nothing is recorded).
    pub fn get_blocking(&self, url: &Path) -> std::result::Result<Bytes, FileReadError> {
        let text = url.to_string_lossy();
        let key = self.key_of(&text).ok_or_else(|| FileReadError::Io {
            path: url.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("not below the source's path {}", self.base),
            ),
        })?;
        let got = crate::background::block_on(self.store.get(key)).map_err(|source| {
            FileReadError::Io {
                path: url.to_path_buf(),
                source,
            }
        })?;
        match got {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => Err(FileReadError::Io {
                path: url.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the object was listed but is gone (deleted or renamed after the listing); \
                     it is taken again if it comes back",
                ),
            }),
            Err(source) => Err(FileReadError::Store {
                path: url.to_path_buf(),
                source: Box::new(source),
            }),
        }
    }
}

/// The incremental listing state of a source on an object store (Auto Loader's
/// `cloudFiles.useIncrementalListing` with `cloudFiles.backfillInterval`).
#[derive(Debug)]
pub struct Incremental {
    pub mode: IncrementalListing,
    /// The key the next incremental listing starts after.
    pub last_key: Option<String>,
    /// When the last full listing ran (ms since the epoch).
    pub last_full_ms: Option<i64>,
    /// `auto`: whether the last full listing found keys ordered by arrival.
    pub ordered: bool,
}

impl Incremental {
    pub fn new(mode: IncrementalListing) -> Self {
        Incremental {
            mode,
            last_key: None,
            last_full_ms: None,
            ordered: false,
        }
    }

    /// The key to list after at `now_ms`, or `None` for a full listing: the first
    /// listing, every `backfill_interval`, with incremental listing off, and with `auto`
    /// while the keys are not known to be ordered by arrival.
    pub fn start_after(&self, now_ms: i64, backfill_ms: i64) -> Option<String> {
        let on = match self.mode {
            IncrementalListing::False => false,
            IncrementalListing::True => true,
            IncrementalListing::Auto => self.ordered,
        };
        let backfill_due = self
            .last_full_ms
            .is_none_or(|last| now_ms.saturating_sub(last) >= backfill_ms);
        if !on || backfill_due {
            return None;
        }
        self.last_key.clone()
    }

    /// Notes a listing that started after `after` (`None`: a full one).
    pub fn listed(&mut self, now_ms: i64, after: Option<&str>, listing: &RemoteListing) {
        if after.is_none() {
            self.last_full_ms = Some(now_ms);
            self.ordered = listing.ordered && !listing.files.is_empty();
        } else if !listing.ordered {
            // New keys that are not in arrival order: back to full listings (auto).
            self.ordered = false;
        }
        if let Some(key) = &listing.last_key
            && self.last_key.as_ref().is_none_or(|k| key > k)
        {
            self.last_key = Some(key.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(last_key: Option<&str>, ordered: bool, files: usize) -> RemoteListing {
        RemoteListing {
            files: (0..files)
                .map(|i| ListedFile {
                    path: format!("s3://b/l/{i}"),
                    size: 1,
                    modification_time_ms: i as i64,
                    etag: None,
                })
                .collect(),
            last_key: last_key.map(str::to_string),
            ordered,
            requests: 1,
        }
    }

    /// A source over `dir` with the pipeline keys `extra`.
    fn options(dir: &Path, extra: &str) -> FilesSource {
        let text = format!(
            "[[flow]]\nname = \"f\"\n[flow.source]\ntype = \"files\"\npath = \"landing\"\nformat = \"json\"\n\
             schema = \"id BIGINT\"\n{extra}\n[flow.sink]\ntype = \"delta\"\npath = \"out\"\n"
        );
        let pipeline = crate::pipeline::parse(&dir.join("pipeline.toml"), &text).expect("pipeline");
        let crate::spec::SourceSpec::Files(options) = pipeline.flows[0].source.clone() else {
            panic!("a files source");
        };
        options
    }

    #[tokio::test]
    async fn the_listing_rules_apply_to_keys() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let landing = tmp.path().join("landing");
        for (rel, body) in [
            ("date=2024-01-01/a.json", "{}\n"),
            ("date=2024-01-01/.a.json.tmp", "{}\n"),
            ("_temporary/0/b.json", "{}\n"),
            ("_c=1/c.json", "{}\n"),
            ("d.json._COPYING_", "{}\n"),
            ("empty.json", ""),
            ("notes.txt", "{}\n"),
        ] {
            let path = landing.join(rel);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            std::fs::write(&path, body).expect("write");
        }
        let at = Landing::at(&Location::Local(landing.clone()));
        let now = crate::clock::now_ms();
        let listed = at
            .list(
                &options(tmp.path(), "path_glob_filter = \"*.json\""),
                now,
                None,
            )
            .await
            .expect("list");
        let keys: Vec<&str> = listed
            .files
            .iter()
            .filter_map(|f| at.key_of(&f.path))
            .collect();
        assert_eq!(keys, ["_c=1/c.json", "date=2024-01-01/a.json"]);
        assert!(listed.files.iter().all(|f| f.etag.is_some() && f.size == 3));
        assert_eq!(listed.last_key.as_deref(), Some("notes.txt"));
        // Too young: nothing taken, and the last key stays before the first young one.
        let young = at
            .list(&options(tmp.path(), "min_file_age = \"1 hour\""), now, None)
            .await
            .expect("list");
        assert!(young.files.is_empty());
        assert_eq!(young.last_key, None);
        // After a key: only the keys past it.
        let after = at
            .list(
                &options(tmp.path(), ""),
                now,
                Some("date=2024-01-01/a.json"),
            )
            .await
            .expect("list");
        let keys: Vec<&str> = after
            .files
            .iter()
            .filter_map(|f| at.key_of(&f.path))
            .collect();
        assert_eq!(keys, ["notes.txt"]);
    }

    #[test]
    fn incremental_listing_starts_after_the_last_key_between_full_listings() {
        let backfill = 60_000;
        let mut inc = Incremental::new(IncrementalListing::True);
        assert_eq!(
            inc.start_after(0, backfill),
            None,
            "the first listing is full"
        );
        inc.listed(0, None, &listing(Some("2024/01/a.json"), true, 1));
        assert_eq!(
            inc.start_after(1_000, backfill).as_deref(),
            Some("2024/01/a.json")
        );
        inc.listed(
            1_000,
            Some("2024/01/a.json"),
            &listing(Some("2024/01/b.json"), true, 1),
        );
        // An empty incremental listing keeps the last key.
        inc.listed(2_000, Some("2024/01/b.json"), &listing(None, true, 0));
        assert_eq!(
            inc.start_after(3_000, backfill).as_deref(),
            Some("2024/01/b.json")
        );
        assert_eq!(
            inc.start_after(60_000, backfill),
            None,
            "the backfill is due"
        );
        // Off: always full.
        let mut off = Incremental::new(IncrementalListing::False);
        off.listed(0, None, &listing(Some("a"), true, 1));
        assert_eq!(off.start_after(1, backfill), None);
    }

    #[test]
    fn auto_lists_incrementally_only_while_keys_come_in_arrival_order() {
        let backfill = 60_000;
        let mut auto = Incremental::new(IncrementalListing::Auto);
        auto.listed(0, None, &listing(Some("b"), false, 2));
        assert_eq!(auto.start_after(1, backfill), None, "not ordered: full");
        auto.listed(60_000, None, &listing(Some("c"), true, 3));
        assert_eq!(auto.start_after(60_001, backfill).as_deref(), Some("c"));
        auto.listed(60_001, Some("c"), &listing(Some("e"), false, 2));
        assert_eq!(auto.start_after(60_002, backfill), None);
    }
}
