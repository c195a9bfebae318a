//! `storage_options`: the keys deltalake and object_store take for a store (credentials,
//! endpoint, region, ...), layered over the environment the way object_store's
//! `from_env` builders and the AWS/Azure/GCP SDKs read it.
//!
//! Values are secrets as far as weir is concerned: `Debug` and [`StorageOptions::describe`]
//! show keys only, and nothing here is ever written to a checkpoint or `plan.json`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::location::Backend;

/// Keys weir itself reads for every store (object_store's retry policy).
const RETRY_KEYS: [&str; 2] = ["max_retries", "retry_timeout"];

/// A store's options, keys lower-cased.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StorageOptions(BTreeMap<String, String>);

impl StorageOptions {
    pub fn new() -> Self {
        StorageOptions::default()
    }

    pub fn insert(&mut self, key: &str, value: impl Into<String>) {
        self.0.insert(key.to_ascii_lowercase(), value.into());
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The keys, for messages (values never shown).
    pub fn describe(&self) -> String {
        if self.0.is_empty() {
            return "none".to_string();
        }
        self.0.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// Refuses a key that the backend's builder would ignore (a misspelt endpoint must
    /// not silently send requests to AWS), naming it.
    pub fn validate(&self, backend: Backend) -> Result<(), String> {
        for key in self.0.keys() {
            if RETRY_KEYS.contains(&key.as_str()) {
                continue;
            }
            let known = match backend {
                Backend::Local => false,
                Backend::S3 => object_store::aws::AmazonS3ConfigKey::from_str(key).is_ok(),
                Backend::Azure => object_store::azure::AzureConfigKey::from_str(key).is_ok(),
                Backend::Gcs => object_store::gcp::GoogleConfigKey::from_str(key).is_ok(),
            };
            if !known {
                return Err(unknown_key_message(key, backend));
            }
        }
        Ok(())
    }
}

fn unknown_key_message(key: &str, backend: Backend) -> String {
    match (backend, key) {
        (Backend::Local, _) => format!(
            "storage_options key {key:?} does not apply to a local path (storage_options configure s3://, gs:// and az:// stores)"
        ),
        (Backend::S3, "aws_s3_locking_provider" | "delta_dynamo_table_name") => format!(
            "storage_options key {key:?}: weir commits to S3 with conditional put (If-None-Match), not a DynamoDB lock; remove it (docs/object-storage.md#consistency)"
        ),
        (Backend::S3, "aws_s3_allow_unsafe_rename") => format!(
            "storage_options key {key:?}: weir never commits without put-if-absent (two writers could overwrite each other's commit); remove it (docs/object-storage.md#consistency)"
        ),
        (backend, _) => format!(
            "unknown storage_options key {key:?} for a {} store (the keys are object_store's and deltalake's: docs/object-storage.md#storage_options)",
            backend.as_str()
        ),
    }
}

impl fmt::Debug for StorageOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "<redacted>")))
            .finish()
    }
}

impl<K: AsRef<str>, V: Into<String>> FromIterator<(K, V)> for StorageOptions {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut options = StorageOptions::new();
        for (k, v) in iter {
            options.insert(k.as_ref(), v);
        }
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_describe_never_show_values() {
        let options: StorageOptions = [
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t-value"),
            ("aws_endpoint_url", "http://127.0.0.1:8333"),
        ]
        .into_iter()
        .collect();
        let shown = format!("{options:?} {}", options.describe());
        assert!(!shown.contains("s3cr3t-value"), "{shown}");
        assert!(shown.contains("aws_secret_access_key"), "{shown}");
    }

    #[test]
    fn unknown_and_unsafe_keys_are_refused_by_name() {
        let ok: StorageOptions = [("aws_endpoint_url", "x"), ("aws_allow_http", "true")]
            .into_iter()
            .collect();
        assert!(ok.validate(Backend::S3).is_ok());
        let typo: StorageOptions = [("aws_endpiont_url", "x")].into_iter().collect();
        let err = typo.validate(Backend::S3).unwrap_err();
        assert!(err.contains("aws_endpiont_url"), "{err}");
        let unsafe_rename: StorageOptions = [("aws_s3_allow_unsafe_rename", "true")]
            .into_iter()
            .collect();
        assert!(
            unsafe_rename
                .validate(Backend::S3)
                .unwrap_err()
                .contains("put-if-absent")
        );
        let azure: StorageOptions = [("azure_storage_account_name", "devstoreaccount1")]
            .into_iter()
            .collect();
        assert!(azure.validate(Backend::Azure).is_ok());
        assert!(azure.validate(Backend::Gcs).is_err());
    }
}
