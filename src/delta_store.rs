//! The object store weir's Delta tables are written through: `object_store`'s local file
//! system, which never fsyncs, plus an fsync of every object it writes (and of the
//! directories from the object's up to the table's root) before the write returns.
//!
//! deltalake writes a batch's data files first and its `_delta_log/<v>.json` last (put
//! if absent), so with this store the data files are durable before the log entry names
//! them, and the log entry is durable before the Delta commit returns, hence before
//! `commits/N` is written (the batch protocol, `docs/reliability.md`). Every read,
//! listing and delete goes to the local file system unchanged.

use std::fmt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result, UploadPart,
};

/// A local file system object store that makes each object it writes durable.
#[derive(Debug)]
pub struct DurableLocalStore {
    inner: Arc<LocalFileSystem>,
    /// The table's directory: directories from an object's up to this one are synced.
    root: PathBuf,
}

impl DurableLocalStore {
    /// A store rooted at `/` (as deltalake expects of a root store) for the table at `root`.
    pub fn new(root: &FsPath) -> Self {
        DurableLocalStore {
            inner: Arc::new(LocalFileSystem::new()),
            root: root.to_path_buf(),
        }
    }

    async fn sync(&self, location: &Path) -> Result<()> {
        let file = self.inner.path_to_filesystem(location)?;
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || sync_object(&file, &root))
            .await
            .map_err(|e| generic(std::io::Error::other(e)))?
            .map_err(generic)
    }
}

/// fsyncs the file, then each directory from its parent up to and including `root`
/// (the names a put may have created on the way).
fn sync_object(file: &FsPath, root: &FsPath) -> std::io::Result<()> {
    crate::durable::sync_file(file)?;
    let mut dir = file.parent();
    while let Some(d) = dir {
        crate::durable::sync_dir(d)?;
        if d == root || !d.starts_with(root) {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

fn generic(source: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "DurableLocalStore",
        source: Box::new(source),
    }
}

impl fmt::Display for DurableLocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DurableLocalStore({})", self.root.display())
    }
}

#[async_trait]
impl ObjectStore for DurableLocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let result = self.inner.put_opts(location, payload, opts).await?;
        self.sync(location).await?;
        Ok(result)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        let file = self.inner.path_to_filesystem(location)?;
        Ok(Box::new(DurableUpload {
            inner: upload,
            staged: staged_path(&file),
            file,
            root: self.root.clone(),
            writeback: Arc::new(AtomicBool::new(false)),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> Result<Vec<bytes::Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await?;
        self.sync(to).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await?;
        self.sync(to).await
    }
}

/// The file `object_store`'s local multipart upload to `file` writes before its
/// completion renames it to `file` (`<file>#1`: a data file's name is new, a UUID, so
/// its upload is the first), when it is there.
fn staged_path(file: &FsPath) -> Option<PathBuf> {
    let mut staged = file.as_os_str().to_owned();
    staged.push("#1");
    let staged = PathBuf::from(staged);
    staged.is_file().then_some(staged)
}

/// A multipart upload (deltalake's data files, written in parts of 5 MiB) made durable
/// when it completes.
///
/// The fsync at the completion writes out every page of the file the kernel still holds
/// (Linux writes dirty pages back after 30 s, or when a tenth of the memory is dirty):
/// ~17 ms for the 30 MB files of a bronze batch, both writers at once, at the end of
/// every batch, with no core busy (BENCHMARKS.md, "Bronze ingest: the batch
/// boundaries"). So after each part is written, the staged file's written pages are
/// flushed on a blocking thread (`fdatasync`, one at a time per upload, not waited
/// for) while the next parts are encoded: the fsync at the completion, the one
/// durability relies on, finds less left to write (the last row group's parts). A
/// flush that fails or finds no staged file (the upload completed or aborted
/// meanwhile) changes nothing.
#[derive(Debug)]
struct DurableUpload {
    inner: Box<dyn MultipartUpload>,
    file: PathBuf,
    root: PathBuf,
    /// See [`staged_path`]; `None`: no early flush.
    staged: Option<PathBuf>,
    /// A flush of the staged file is under way.
    writeback: Arc<AtomicBool>,
}

#[async_trait]
impl MultipartUpload for DurableUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let part = self.inner.put_part(data);
        let Some(staged) = self.staged.clone() else {
            return part;
        };
        let writeback = Arc::clone(&self.writeback);
        Box::pin(async move {
            part.await?;
            if let Ok(runtime) = tokio::runtime::Handle::try_current()
                && !writeback.swap(true, Ordering::AcqRel)
            {
                runtime.spawn_blocking(move || {
                    if let Ok(file) = std::fs::File::open(&staged) {
                        let _ = file.sync_data();
                    }
                    writeback.store(false, Ordering::Release);
                });
            }
            Ok(())
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let result = self.inner.complete().await?;
        let (file, root) = (self.file.clone(), self.root.clone());
        tokio::task::spawn_blocking(move || sync_object(&file, &root))
            .await
            .map_err(|e| generic(std::io::Error::other(e)))?
            .map_err(generic)?;
        Ok(result)
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}
