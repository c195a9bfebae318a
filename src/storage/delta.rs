//! deltalake reaches object stores through factories registered per URL scheme; weir
//! registers its own builder ([`super::build`]) for every object-store scheme, so a
//! Delta table at `s3://`, `gs://` or `az://` is read and written through the same
//! stores (same environment, same `storage_options`, same retry policy) as checkpoints
//! and landing zones, and commits with deltalake's default log store: put-if-absent of
//! `_delta_log/<version>.json` (no DynamoDB lock, no unsafe rename).

use std::sync::{Arc, Once};

use deltalake::DeltaResult;
use deltalake::logstore::{
    LogStore, LogStoreFactory, ObjectStoreFactory, ObjectStoreRef, StorageConfig, default_logstore,
    logstore_factories, object_store_factories,
};
use object_store::path::Path;
use url::Url;

use super::{Backend, StorageOptions};

/// The schemes registered: object_store's names for S3, GCS and Azure.
const SCHEMES: [&str; 8] = ["s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl"];

struct WeirStores;

impl ObjectStoreFactory for WeirStores {
    fn parse_url_opts(
        &self,
        url: &Url,
        config: &StorageConfig,
    ) -> DeltaResult<(ObjectStoreRef, Path)> {
        let backend = Backend::of_scheme(url.scheme());
        // deltalake's own keys (already consumed into `config`) are left out; the rest
        // were validated where the user wrote them.
        let options: StorageOptions = config
            .raw
            .iter()
            .filter(|(k, v)| {
                let one: StorageOptions = [(k.as_str(), v.as_str())].into_iter().collect();
                backend.is_some_and(|b| one.validate(b).is_ok())
            })
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        super::build(url, &options).map_err(|e| deltalake::DeltaTableError::Generic(e.to_string()))
    }
}

struct WeirLogStores;

impl LogStoreFactory for WeirLogStores {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(
            prefixed_store,
            root_store,
            location,
            options,
        ))
    }
}

/// Registers weir's stores with deltalake, once per process (idempotent).
pub fn register_delta_stores() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let stores = object_store_factories();
        let logs = logstore_factories();
        let store: Arc<dyn ObjectStoreFactory> = Arc::new(WeirStores);
        let log: Arc<dyn LogStoreFactory> = Arc::new(WeirLogStores);
        for scheme in SCHEMES {
            if let Ok(url) = Url::parse(&format!("{scheme}://")) {
                stores.insert(url.clone(), store.clone());
                logs.insert(url, log.clone());
            }
        }
    });
}
