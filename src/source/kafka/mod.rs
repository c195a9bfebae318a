//! The Kafka source: Spark's Kafka source (`spark-sql-kafka-0-10`) semantics over
//! the `rskafka` client (docs/kafka.md).
//!
//! ```text
//!  initial offsets ─► plan N ───────────────────────► ranges ──────────────────► read
//!  (sources/0/0,       latest offsets per partition,   [start, end) per          fetch each range,
//!   startingOffsets)   min/max offsets per trigger     partition; new partitions  one task per partition,
//!                      -> end offset (offsets/N)       from earliest; data loss   rows in Spark's schema
//! ```
//!
//! Like Spark, weir assigns partitions itself and keeps its position in the
//! checkpoint (no consumer group, no committed offsets in Kafka). An offset is the
//! next record to read per partition, in Spark's `KafkaSourceOffset` JSON
//! (`{"topic":{"0":123}}`). A batch is `(offsets/N-1, offsets/N]`, so a replayed
//! batch reads exactly the recorded ranges again.
//!
//! Deliberate differences from Spark, forced by the client (`rskafka` exposes
//! neither): `timestampType` is always 0 (CreateTime) and `timestamp` is the
//! record's own timestamp even on a topic with `message.timestamp.type =
//! LogAppendTime`; `headers` keep one value per key, in key order.

pub mod broker;
pub mod lag;
pub mod offset;
pub mod rows;
pub mod value;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use rskafka::BackoffConfig;
use rskafka::client::error::{Error as ClientError, ProtocolError};
use rskafka::client::partition::{Compression, OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder, Credentials, SaslConfig};
use rskafka::record::Record;

use crate::error::{Error, Result};
use crate::spec::Trigger;
pub use offset::{
    DataLoss, KafkaSourceOffset, OffsetRange, PartitionOffsets, StartingOffsets, TopicPartition,
    TriggerLimits,
};
use rows::RowsBuilder;

/// Bytes one fetch request asks for per partition: Kafka's `max.partition.fetch.bytes`
/// default (the broker still returns a first record batch larger than this whole).
/// A fetch's records are turned into Arrow rows and dropped before the next fetch, so
/// this bounds what a partition being read holds besides its rows.
pub const FETCH_MAX_BYTES: i32 = 1024 * 1024;
/// How long a fetch waits for data the broker does not have yet.
const FETCH_MAX_WAIT_MS: i32 = 500;
/// Rows per chunk: the record batches handed to the engine. With `format`, each chunk's
/// values are decoded as soon as it is full (while the next one is fetched) and its raw
/// rows dropped, so a batch holds its decoded rows and, per partition being read, at
/// most one fetch and two raw chunks.
pub const ROWS_PER_CHUNK: usize = 16_384;
/// Key, value and header bytes after which a chunk is full even with fewer rows.
pub const BYTES_PER_CHUNK: u64 = 4 * 1024 * 1024;
/// Partitions read at once by a batch (each a task with its own fetches).
pub const PARTITIONS_IN_FLIGHT: usize = 4;
/// Default time a request may keep failing before the source is `source_unavailable`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Kafka's `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecurityProtocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
            "SSL" => Ok(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
            _ => Err(format!(
                "invalid security.protocol {text:?}; allowed: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
            )),
        }
    }

    fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// Kafka's `sasl.mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_uppercase().as_str() {
            "PLAIN" => Ok(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
            _ => Err(format!(
                "invalid sasl.mechanism {text:?}; allowed: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"
            )),
        }
    }
}

/// SASL credentials. The password is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslSettings {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslSettings")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// How to reach a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConnection {
    /// `host:port` of one or more brokers (Kafka's `bootstrap.servers`).
    pub bootstrap_servers: Vec<String>,
    pub security_protocol: SecurityProtocol,
    /// Required with `SASL_PLAINTEXT` / `SASL_SSL`.
    pub sasl: Option<SaslSettings>,
    /// PEM file of the certificate authorities to trust (TLS); default: the system's.
    pub ssl_ca_location: Option<PathBuf>,
    /// How long a request may keep failing (with retries) before giving up.
    pub request_timeout: Duration,
}

impl KafkaConnection {
    /// A plaintext connection to `bootstrap` (comma-separated `host:port`s).
    pub fn plaintext(bootstrap: &str) -> Self {
        KafkaConnection {
            bootstrap_servers: bootstrap
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            security_protocol: SecurityProtocol::Plaintext,
            sasl: None,
            ssl_ca_location: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    pub fn bootstrap(&self) -> String {
        self.bootstrap_servers.join(",")
    }
}

/// Which topics a flow reads (Spark's `subscribe` / `subscribePattern`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    Topics(Vec<String>),
    /// A regular expression matched against whole topic names.
    Pattern(String),
}

impl std::fmt::Display for Subscription {
    /// Spark's `ConsumerStrategy` names: `Subscribe[a,b]`, `SubscribePattern[p]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subscription::Topics(t) => write!(f, "Subscribe[{}]", t.join(",")),
            Subscription::Pattern(p) => write!(f, "SubscribePattern[{p}]"),
        }
    }
}

/// The options of a Kafka source, with Spark's names and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSourceOptions {
    pub connection: KafkaConnection,
    pub subscription: Subscription,
    /// Default `latest` (Spark's default for streaming queries).
    pub starting_offsets: StartingOffsets,
    pub limits: TriggerLimits,
    /// Default `true`: fail when offsets the checkpoint expects are gone.
    pub fail_on_data_loss: bool,
    /// Default `false`: add the `headers` column.
    pub include_headers: bool,
}

impl KafkaSourceOptions {
    pub fn new(connection: KafkaConnection, subscription: Subscription) -> Self {
        KafkaSourceOptions {
            connection,
            subscription,
            starting_offsets: StartingOffsets::Latest,
            limits: TriggerLimits::default(),
            fail_on_data_loss: true,
            include_headers: false,
        }
    }
}

/// The client settings a `[flow.source.kafka]` table may pass, under Kafka's names.
pub const CLIENT_SETTINGS: &[&str] = &[
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "request.timeout.ms",
];

impl KafkaSourceOptions {
    /// The options a pipeline declares. `Err` names the setting at fault; a value written
    /// `env:NAME` is read from the environment variable `NAME`.
    pub fn from_spec(spec: &crate::spec::KafkaSourceSpec) -> Result<Self, String> {
        use crate::spec::KafkaSubscribe;
        let mut connection = KafkaConnection::plaintext(&spec.bootstrap_servers);
        if connection.bootstrap_servers.is_empty() {
            return Err("bootstrap_servers is empty; write \"host:port[,host:port...]\"".into());
        }
        if let Some(bad) = connection.bootstrap_servers.iter().find(|s| {
            s.rsplit_once(':')
                .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        }) {
            return Err(format!(
                "bootstrap_servers: {bad:?} is not host:port (e.g. \"localhost:9092\")"
            ));
        }
        let setting = |key: &str| -> Result<Option<String>, String> {
            match spec.client.get(key) {
                None => Ok(None),
                Some(v) => match v.strip_prefix("env:") {
                    None => Ok(Some(v.clone())),
                    Some(name) => std::env::var(name).map(Some).map_err(|_| {
                        format!("kafka.\"{key}\" = \"env:{name}\": the environment variable {name} is not set")
                    }),
                },
            }
        };
        if let Some(unknown) = spec
            .client
            .keys()
            .find(|k| !CLIENT_SETTINGS.contains(&k.as_str()))
        {
            return Err(format!(
                "unknown Kafka client setting {unknown:?}; allowed: {}",
                CLIENT_SETTINGS.join(", ")
            ));
        }
        if let Some(p) = setting("security.protocol")? {
            connection.security_protocol = SecurityProtocol::parse(&p)?;
        }
        let mechanism = setting("sasl.mechanism")?;
        let username = setting("sasl.username")?;
        let password = setting("sasl.password")?;
        if connection.security_protocol.sasl() {
            let (Some(m), Some(username), Some(password)) = (mechanism, username, password) else {
                return Err("security.protocol SASL_* needs sasl.mechanism, sasl.username and sasl.password".into());
            };
            connection.sasl = Some(SaslSettings {
                mechanism: SaslMechanism::parse(&m)?,
                username,
                password,
            });
        } else if mechanism.is_some() || username.is_some() || password.is_some() {
            return Err(
                "sasl.* settings need security.protocol = \"SASL_PLAINTEXT\" or \"SASL_SSL\""
                    .into(),
            );
        }
        if let Some(ca) = setting("ssl.ca.location")? {
            if !connection.security_protocol.tls() {
                return Err(
                    "ssl.ca.location needs security.protocol = \"SSL\" or \"SASL_SSL\"".into(),
                );
            }
            connection.ssl_ca_location = Some(PathBuf::from(ca));
        }
        if let Some(t) = setting("request.timeout.ms")? {
            let ms: u64 = t.trim().parse().ok().filter(|ms| *ms > 0).ok_or_else(|| {
                format!("request.timeout.ms = {t:?}: a number of milliseconds, e.g. \"30000\"")
            })?;
            connection.request_timeout = Duration::from_millis(ms);
        }
        let subscription = match &spec.subscribe {
            KafkaSubscribe::Topics(t) => Subscription::Topics(t.clone()),
            KafkaSubscribe::Pattern(p) => {
                compile_pattern(p)?;
                Subscription::Pattern(p.clone())
            }
        };
        let mut options = KafkaSourceOptions::new(connection, subscription);
        options.starting_offsets = StartingOffsets::parse(&spec.starting_offsets)
            .map_err(|e| format!("starting_offsets: {e}"))?;
        if let (StartingOffsets::Specific(given), Subscription::Topics(topics)) =
            (&options.starting_offsets, &options.subscription)
            && let Some(tp) = given.keys().find(|tp| !topics.contains(&tp.topic))
        {
            return Err(format!(
                "starting_offsets names partition {tp}, whose topic is not subscribed ({})",
                topics.join(", ")
            ));
        }
        options.limits = TriggerLimits {
            max_offsets: spec.max_offsets_per_trigger,
            min_offsets: spec.min_offsets_per_trigger,
            max_trigger_delay_ms: spec.max_trigger_delay.as_millis() as i64,
        };
        options.fail_on_data_loss = spec.fail_on_data_loss;
        options.include_headers = spec.include_headers;
        Ok(options)
    }
}

fn unavailable(connection: &KafkaConnection, context: &str, e: impl std::fmt::Display) -> Error {
    Error::KafkaUnavailable {
        bootstrap: connection.bootstrap(),
        message: format!("{context}: {e}"),
    }
}

/// A connection to a cluster: metadata, offsets, fetch and produce, with a client
/// per partition (rskafka's `PartitionClient`, which follows leader changes).
pub struct KafkaClient {
    connection: KafkaConnection,
    client: Client,
    partitions: tokio::sync::Mutex<HashMap<TopicPartition, Arc<PartitionClient>>>,
}

impl KafkaClient {
    /// Connects and reads the cluster's metadata; `source_unavailable` when no broker
    /// answers within the connection's request timeout.
    pub async fn connect(connection: &KafkaConnection) -> Result<Self> {
        if connection.bootstrap_servers.is_empty() {
            return Err(Error::KafkaUnavailable {
                bootstrap: String::new(),
                message: "no bootstrap servers".into(),
            });
        }
        let mut builder = ClientBuilder::new(connection.bootstrap_servers.clone())
            .client_id("weir")
            .backoff_config(BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
                deadline: Some(connection.request_timeout),
            });
        if connection.security_protocol.tls() {
            builder = builder.tls_config(Arc::new(tls_config(connection)?));
        }
        if connection.security_protocol.sasl() {
            let sasl = connection.sasl.as_ref().ok_or_else(|| Error::Source {
                path: PathBuf::from(connection.bootstrap()),
                message: "SASL needs sasl.mechanism, sasl.username and sasl.password".into(),
            })?;
            let creds = Credentials::new(sasl.username.clone(), sasl.password.clone());
            builder = builder.sasl_config(match sasl.mechanism {
                SaslMechanism::Plain => SaslConfig::Plain(creds),
                SaslMechanism::ScramSha256 => SaslConfig::ScramSha256(creds),
                SaslMechanism::ScramSha512 => SaslConfig::ScramSha512(creds),
            });
        }
        let client = tokio::time::timeout(connection.request_timeout, builder.build())
            .await
            .map_err(|_| {
                unavailable(
                    connection,
                    "connect",
                    format!(
                        "no broker answered within {}",
                        humantime::format_duration(connection.request_timeout)
                    ),
                )
            })?
            .map_err(|e| unavailable(connection, "connect", e))?;
        Ok(KafkaClient {
            connection: connection.clone(),
            client,
            partitions: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    pub fn connection(&self) -> &KafkaConnection {
        &self.connection
    }

    /// Topic names and their partitions (fresh metadata; internal topics left out).
    pub async fn topics(&self) -> Result<BTreeMap<String, BTreeSet<i32>>> {
        let topics =
            tokio::time::timeout(self.connection.request_timeout, self.client.list_topics())
                .await
                .map_err(|_| unavailable(&self.connection, "metadata", "timed out"))?
                .map_err(|e| unavailable(&self.connection, "metadata", e))?;
        Ok(topics
            .into_iter()
            .map(|t| (t.name, t.partitions.into_iter().collect()))
            .collect())
    }

    async fn partition(&self, tp: &TopicPartition) -> Result<Arc<PartitionClient>> {
        let mut cache = self.partitions.lock().await;
        if let Some(pc) = cache.get(tp) {
            return Ok(pc.clone());
        }
        let pc = tokio::time::timeout(
            self.connection.request_timeout,
            self.client.partition_client(
                tp.topic.clone(),
                tp.partition,
                UnknownTopicHandling::Retry,
            ),
        )
        .await
        .map_err(|_| unavailable(&self.connection, &format!("partition {tp}"), "timed out"))?
        .map_err(|e| unavailable(&self.connection, &format!("partition {tp}"), e))?;
        let pc = Arc::new(pc);
        cache.insert(tp.clone(), pc.clone());
        Ok(pc)
    }

    /// The earliest or latest offset of each partition, asked concurrently.
    pub async fn offsets<'a>(
        &self,
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
        latest: bool,
    ) -> Result<PartitionOffsets> {
        let asks = partitions.into_iter().map(|tp| async move {
            let pc = self.partition(tp).await?;
            let at = if latest {
                OffsetAt::Latest
            } else {
                OffsetAt::Earliest
            };
            let o = tokio::time::timeout(self.connection.request_timeout, pc.get_offset(at))
                .await
                .map_err(|_| {
                    unavailable(&self.connection, &format!("offsets of {tp}"), "timed out")
                })?
                .map_err(|e| unavailable(&self.connection, &format!("offsets of {tp}"), e))?;
            Ok::<_, Error>((tp.clone(), o))
        });
        Ok(futures::future::try_join_all(asks)
            .await?
            .into_iter()
            .collect())
    }

    /// Reads `[range.from, range.until)` of one partition into rows of Spark's schema.
    /// Offsets Kafka no longer has are data loss: an error with `fail_on_data_loss`,
    /// otherwise skipped and returned in [`RangeRead::losses`].
    /// With `decoder`, the rows are the decoded values' (chunk by chunk, see
    /// [`ROWS_PER_CHUNK`]).
    pub async fn read_range(
        &self,
        range: &OffsetRange,
        fail_on_data_loss: bool,
        include_headers: bool,
        decoder: Option<value::ValueDecoder>,
    ) -> Result<RangeRead> {
        let pc = self.partition(&range.tp).await?;
        read_partition(
            &self.connection,
            pc,
            range.clone(),
            fail_on_data_loss,
            include_headers,
            decoder,
        )
        .await
    }

    /// Appends records to one partition; returns their offsets.
    pub async fn produce(
        &self,
        tp: &TopicPartition,
        records: Vec<Record>,
        compression: Compression,
    ) -> Result<Vec<i64>> {
        let pc = self.partition(tp).await?;
        pc.produce(records, compression)
            .await
            .map_err(|e| unavailable(&self.connection, &format!("produce to {tp}"), e))
    }

    /// Deletes the records of a partition before `offset` (Kafka's DeleteRecords: the
    /// log start offset moves, as retention moves it).
    /// The timestamp (ms) of the record at `offset`, fetched with a small request (the
    /// console's lag); `None` when there is no record there.
    pub async fn record_timestamp(&self, tp: &TopicPartition, offset: i64) -> Result<Option<i64>> {
        let pc = self.partition(tp).await?;
        let fetched = tokio::time::timeout(
            self.connection.request_timeout,
            pc.fetch_records(offset, 1..64 * 1024, 100),
        )
        .await
        .map_err(|_| {
            unavailable(
                &self.connection,
                &format!("fetch {tp} at {offset}"),
                "timed out",
            )
        })?
        .map_err(|e| unavailable(&self.connection, &format!("fetch {tp} at {offset}"), e))?;
        Ok(fetched
            .0
            .iter()
            .find(|r| r.offset >= offset)
            .map(|r| r.record.timestamp.timestamp_millis()))
    }

    pub async fn delete_records(&self, tp: &TopicPartition, offset: i64) -> Result<()> {
        let pc = self.partition(tp).await?;
        pc.delete_records(offset, 10_000)
            .await
            .map_err(|e| unavailable(&self.connection, &format!("delete records of {tp}"), e))
    }

    /// Creates a topic (replication factor 1 unless the cluster is bigger); an existing
    /// topic is not an error.
    pub async fn create_topic(&self, name: &str, partitions: i32, replication: i16) -> Result<()> {
        let controller = self
            .client
            .controller_client()
            .map_err(|e| unavailable(&self.connection, "controller", e))?;
        match controller
            .create_topic(name, partitions, replication, 10_000)
            .await
        {
            Ok(()) => Ok(()),
            Err(ClientError::ServerError {
                protocol_error: ProtocolError::TopicAlreadyExists,
                ..
            }) => Ok(()),
            Err(e) => Err(unavailable(
                &self.connection,
                &format!("create topic {name}"),
                e,
            )),
        }
    }
}

fn tls_config(connection: &KafkaConnection) -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let bad = |message: String| Error::Source {
        path: PathBuf::from(connection.bootstrap()),
        message,
    };
    match &connection.ssl_ca_location {
        Some(path) => {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(format!("ssl.ca.location {}: {e}", path.display())))?;
            for cert in certs {
                let cert =
                    cert.map_err(|e| bad(format!("ssl.ca.location {}: {e}", path.display())))?;
                roots
                    .add(cert)
                    .map_err(|e| bad(format!("ssl.ca.location {}: {e}", path.display())))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                // A system certificate rustls cannot use is skipped, as browsers do.
                let _ = roots.add(cert);
            }
        }
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad(format!("TLS: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth())
}

/// One partition's rows of a batch.
#[derive(Debug, Default)]
pub struct RangeRead {
    /// Spark's Kafka rows, or with a decoder the decoded values' rows.
    pub batches: Vec<RecordBatch>,
    /// Records read.
    pub num_rows: u64,
    /// Key, value and header bytes.
    pub num_bytes: u64,
    /// Offsets skipped because Kafka no longer has them (`fail_on_data_loss = false`).
    pub losses: Vec<DataLoss>,
    /// The last record read: its offset and timestamp (ms).
    pub last: Option<(i64, i64)>,
    /// With a decoder: what decoding found (rescued rows, corrupt records, type mismatches).
    pub decoded: value::Decoded,
}

/// Adds `more` to `into`, one entry per field, file and types (a partition's chunks
/// are one file: `kafka:<topic>/<partition>`).
fn merge_mismatches(
    into: &mut Vec<crate::source::files::read::FieldMismatch>,
    more: Vec<crate::source::files::read::FieldMismatch>,
) {
    for m in more {
        match into.iter_mut().find(|e| {
            e.path == m.path && e.file == m.file && e.expected == m.expected && e.found == m.found
        }) {
            Some(e) => e.count += m.count,
            None => into.push(m),
        }
    }
}

/// Where a partition's full chunks go: kept as they are, or with a decoder decoded on a
/// blocking thread while the next chunk is fetched (at most one chunk decoding at a
/// time), the raw chunk dropped once decoded.
struct Chunks {
    decoder: Option<value::ValueDecoder>,
    decoding: Option<tokio::task::JoinHandle<Result<value::Decoded>>>,
    out: RangeRead,
}

impl Chunks {
    fn new(decoder: Option<value::ValueDecoder>) -> Self {
        Chunks {
            decoder,
            decoding: None,
            out: RangeRead::default(),
        }
    }

    /// Waits for the chunk being decoded, if any, and keeps its rows.
    async fn settle(&mut self) -> Result<()> {
        if let Some(task) = self.decoding.take() {
            let d = task.await.map_err(|e| Error::Source {
                path: PathBuf::from("kafka"),
                message: format!("a decoder task failed: {e}"),
            })??;
            let out = &mut self.out.decoded;
            out.batches.extend(d.batches);
            out.num_rows_rescued += d.num_rows_rescued;
            out.num_records_corrupt += d.num_records_corrupt;
            merge_mismatches(&mut out.type_mismatches, d.type_mismatches);
        }
        Ok(())
    }

    /// Takes the rows built so far as a chunk.
    async fn push(&mut self, rows: &mut RowsBuilder) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        self.out.num_bytes += rows.bytes();
        self.out.num_rows += rows.len() as u64;
        let chunk = rows.finish()?;
        match self.decoder.clone() {
            None => self.out.batches.push(chunk),
            Some(decoder) => {
                self.settle().await?;
                self.decoding = Some(tokio::task::spawn_blocking(move || {
                    decoder.decode(std::slice::from_ref(&chunk))
                }));
            }
        }
        Ok(())
    }

    async fn finish(mut self) -> Result<RangeRead> {
        self.settle().await?;
        let mut out = self.out;
        if self.decoder.is_some() {
            out.batches = std::mem::take(&mut out.decoded.batches);
        }
        Ok(out)
    }
}

fn is_offset_out_of_range(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::ServerError {
            protocol_error: ProtocolError::OffsetOutOfRange,
            ..
        }
    )
}

async fn read_partition(
    connection: &KafkaConnection,
    pc: Arc<PartitionClient>,
    range: OffsetRange,
    fail_on_data_loss: bool,
    include_headers: bool,
    decoder: Option<value::ValueDecoder>,
) -> Result<RangeRead> {
    let tp = &range.tp;
    let mut chunks = Chunks::new(decoder);
    let mut rows = RowsBuilder::new(&tp.topic, tp.partition, include_headers);
    let mut offset = range.from;
    let lost = |out: &mut RangeRead, from: i64, until: i64, why: &str| -> Result<()> {
        let loss = DataLoss {
            tp: tp.clone(),
            from: Some(from),
            until: Some(until),
            message: format!("cannot fetch offsets [{from}, {until}) of partition {tp}: {why}"),
        };
        if fail_on_data_loss {
            return Err(Error::KafkaDataLoss {
                bootstrap: connection.bootstrap(),
                message: loss.message,
            });
        }
        tracing::warn!(partition = %tp, from, until, "{}; skipped (fail_on_data_loss = false)", loss.message);
        out.losses.push(loss);
        Ok(())
    };
    while offset < range.until {
        let fetched = tokio::time::timeout(
            connection.request_timeout,
            pc.fetch_records(offset, 1..FETCH_MAX_BYTES, FETCH_MAX_WAIT_MS),
        )
        .await
        .map_err(|_| unavailable(connection, &format!("fetch {tp} at {offset}"), "timed out"))?;
        let (records, high_watermark) = match fetched {
            Ok(r) => r,
            Err(e) if is_offset_out_of_range(&e) => {
                let bounds = |latest: bool| {
                    let pc = pc.clone();
                    async move {
                        pc.get_offset(if latest {
                            OffsetAt::Latest
                        } else {
                            OffsetAt::Earliest
                        })
                        .await
                    }
                };
                let earliest = bounds(false)
                    .await
                    .map_err(|e| unavailable(connection, &format!("offsets of {tp}"), e))?;
                if earliest > offset {
                    let until = earliest.min(range.until);
                    lost(
                        &mut chunks.out,
                        offset,
                        until,
                        &format!(
                            "the partition now starts at {earliest} (retention or deleted records)"
                        ),
                    )?;
                    offset = until;
                    continue;
                }
                let latest = bounds(true)
                    .await
                    .map_err(|e| unavailable(connection, &format!("offsets of {tp}"), e))?;
                lost(
                    &mut chunks.out,
                    offset,
                    range.until,
                    &format!(
                        "the partition now ends at {latest} (the topic was recreated or truncated)"
                    ),
                )?;
                break;
            }
            Err(e) => {
                return Err(unavailable(
                    connection,
                    &format!("fetch {tp} at {offset}"),
                    e,
                ));
            }
        };
        if records.is_empty() {
            if offset >= high_watermark {
                lost(
                    &mut chunks.out,
                    offset,
                    range.until,
                    &format!("the partition now ends at {high_watermark}"),
                )?;
                break;
            }
            // Only a control record (a transaction marker) at this offset.
            offset += 1;
            continue;
        }
        for r in &records {
            if r.offset < offset {
                continue;
            }
            if r.offset >= range.until {
                break;
            }
            let ts = r.record.timestamp.timestamp_millis();
            rows.append(
                r.record.key.as_deref(),
                r.record.value.as_deref(),
                r.offset,
                ts,
                &mut r
                    .record
                    .headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_slice())),
            );
            chunks.out.last = Some((r.offset, ts));
            if rows.len() >= ROWS_PER_CHUNK || rows.bytes() >= BYTES_PER_CHUNK {
                chunks.push(&mut rows).await?;
            }
        }
        offset = records
            .last()
            .map_or(offset + 1, |r| (r.offset + 1).max(offset + 1));
        drop(records);
    }
    chunks.push(&mut rows).await?;
    chunks.finish().await
}

/// The rows of a batch, over all its ranges.
#[derive(Debug, Default)]
pub struct KafkaRead {
    pub batches: Vec<RecordBatch>,
    pub num_rows: u64,
    pub num_bytes: u64,
    /// Offsets skipped because Kafka no longer has them (`fail_on_data_loss = false`),
    /// including those found when the ranges were planned.
    pub losses: Vec<DataLoss>,
    /// Per partition: the last record read (offset, timestamp ms).
    pub last: BTreeMap<TopicPartition, (i64, i64)>,
    /// Read with a decoder: rows whose values were rescued, corrupt records, and
    /// values whose type disagrees with their column.
    pub num_rows_rescued: u64,
    pub num_records_corrupt: u64,
    pub type_mismatches: Vec<crate::source::files::read::FieldMismatch>,
}

impl KafkaRead {
    /// Offsets lost in this batch.
    pub fn offsets_lost(&self) -> u64 {
        self.losses.iter().map(DataLoss::offsets).sum()
    }
}

/// The ranges of a batch and what was lost before it started.
#[derive(Debug, Clone, Default)]
pub struct BatchRanges {
    pub ranges: Vec<OffsetRange>,
    pub losses: Vec<DataLoss>,
}

/// A Kafka source as a flow uses it: planning batches, resolving their ranges, and
/// reading them. Connects on first use, and again after the cluster was unreachable.
pub struct KafkaSource {
    options: KafkaSourceOptions,
    pattern: Option<regex::Regex>,
    client: Option<Arc<KafkaClient>>,
    /// Spark's `lastTriggerMillis` (min offsets per trigger).
    last_trigger_ms: i64,
    /// `available_now`: the latest offsets when the run started.
    available_now: Option<PartitionOffsets>,
    /// The latest offsets the last plan saw (progress `latestOffset`).
    latest: Option<PartitionOffsets>,
}

impl KafkaSource {
    pub fn new(options: KafkaSourceOptions) -> Result<Self> {
        let pattern = match &options.subscription {
            Subscription::Pattern(p) => {
                Some(compile_pattern(p).map_err(|message| Error::Source {
                    path: PathBuf::from(options.connection.bootstrap()),
                    message,
                })?)
            }
            Subscription::Topics(_) => None,
        };
        Ok(KafkaSource {
            options,
            pattern,
            client: None,
            last_trigger_ms: 0,
            available_now: None,
            latest: None,
        })
    }

    pub fn options(&self) -> &KafkaSourceOptions {
        &self.options
    }

    /// Spark's source description: `KafkaV2[Subscribe[events]]`.
    pub fn description(&self) -> String {
        format!("KafkaV2[{}]", self.options.subscription)
    }

    pub fn schema(&self) -> SchemaRef {
        rows::kafka_schema(self.options.include_headers)
    }

    /// The latest offsets the last plan saw.
    pub fn latest_seen(&self) -> Option<&PartitionOffsets> {
        self.latest.as_ref()
    }

    /// The connected client (connecting first if needed).
    pub async fn client(&mut self) -> Result<Arc<KafkaClient>> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let c = Arc::new(KafkaClient::connect(&self.options.connection).await?);
        self.client = Some(c.clone());
        Ok(c)
    }

    /// Drops the connection: the next call connects again (after the cluster was
    /// unreachable).
    pub fn forget_client(&mut self) {
        self.client = None;
    }

    /// Runs `f` with the client; after an unavailable cluster the next call reconnects.
    async fn with_client<T, F, Fut>(&mut self, f: F) -> Result<T>
    where
        F: FnOnce(Arc<KafkaClient>) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let client = self.client().await?;
        let result = f(client).await;
        if let Err(Error::KafkaUnavailable { .. }) = &result {
            self.client = None;
        }
        result
    }

    /// The subscribed partitions that exist now.
    pub async fn partitions(&mut self) -> Result<BTreeSet<TopicPartition>> {
        let topics = self
            .with_client(|c| async move { c.topics().await })
            .await?;
        Ok(subscribed(
            &self.options.subscription,
            self.pattern.as_ref(),
            &topics,
        ))
    }

    /// The latest offset of every subscribed partition. Like Spark, asks again (up to
    /// 3 times, 1 s apart) when a partition's latest offset is behind a known one.
    pub async fn latest_offsets(
        &mut self,
        known: Option<&PartitionOffsets>,
    ) -> Result<PartitionOffsets> {
        let parts = self.partitions().await?;
        let mut attempt = 0;
        loop {
            let latest = self
                .with_client(|c| {
                    let parts = parts.clone();
                    async move { c.offsets(parts.iter(), true).await }
                })
                .await?;
            attempt += 1;
            let behind = known.is_some_and(|k| {
                latest
                    .iter()
                    .any(|(tp, o)| k.get(tp).is_some_and(|known| known > o))
            });
            if !behind || attempt >= 3 {
                return Ok(latest);
            }
            tracing::warn!("a partition's latest offset is behind the checkpoint's; asking again");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The earliest offsets of `partitions` that still exist.
    pub async fn earliest_offsets(
        &mut self,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Result<PartitionOffsets> {
        if partitions.is_empty() {
            return Ok(PartitionOffsets::new());
        }
        let existing = self.partitions().await?;
        let asked: Vec<TopicPartition> = partitions.intersection(&existing).cloned().collect();
        self.with_client(|c| async move { c.offsets(asked.iter(), false).await })
            .await
    }

    /// The query's first start offset: read from `path` (Spark's `sources/0/0`), or
    /// resolved from `starting_offsets` and written there before any batch is planned,
    /// so a restart before the first commit starts from the same place.
    pub async fn initial_offsets(&mut self, path: &Path) -> Result<KafkaSourceOffset> {
        if let Some(o) = read_initial_offsets(path)? {
            return Ok(o);
        }
        let offsets = match self.options.starting_offsets.clone() {
            StartingOffsets::Earliest => {
                let parts = self.partitions().await?;
                self.earliest_offsets(&parts).await?
            }
            StartingOffsets::Latest => self.latest_offsets(None).await?,
            StartingOffsets::Specific(given) => self.resolve_specific(given).await?,
        };
        let offsets = KafkaSourceOffset::new(offsets);
        write_initial_offsets(path, &offsets)?;
        tracing::info!(offsets = %offsets, "initial offsets");
        Ok(offsets)
    }

    /// Spark's `fetchSpecificOffsets`: every subscribed partition must be named;
    /// `-2`/`-1` are resolved to the earliest/latest offsets.
    async fn resolve_specific(&mut self, given: PartitionOffsets) -> Result<PartitionOffsets> {
        let parts = self.partitions().await?;
        let named: BTreeSet<TopicPartition> = given.keys().cloned().collect();
        if named != parts {
            let list = |s: &BTreeSet<TopicPartition>| {
                s.iter()
                    .map(|tp| tp.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(Error::Source {
                path: PathBuf::from(self.options.connection.bootstrap()),
                message: format!(
                    "starting_offsets must name every subscribed partition (-2 for earliest, -1 for latest); \
                     named: [{}], subscribed: [{}]",
                    list(&named),
                    list(&parts)
                ),
            });
        }
        let want = |v: i64| -> BTreeSet<TopicPartition> {
            given
                .iter()
                .filter(|(_, o)| **o == v)
                .map(|(tp, _)| tp.clone())
                .collect()
        };
        let earliest = self.earliest_offsets(&want(offset::EARLIEST)).await?;
        let latest_parts = want(offset::LATEST);
        let latest = if latest_parts.is_empty() {
            PartitionOffsets::new()
        } else {
            self.with_client(|c| async move { c.offsets(latest_parts.iter(), true).await })
                .await?
        };
        Ok(given
            .into_iter()
            .map(|(tp, o)| {
                let resolved = match o {
                    offset::EARLIEST => earliest.get(&tp).copied().unwrap_or(0),
                    offset::LATEST => latest.get(&tp).copied().unwrap_or(0),
                    o => o,
                };
                (tp, resolved)
            })
            .collect())
    }

    /// What a restart from `committed` would find lost, asking the cluster now (read
    /// only; `weir check`): partitions gone (topic deleted, partitions no longer
    /// subscribed), offsets gone back (topic recreated), offsets retention or
    /// DeleteRecords removed before they were read (the partition now starts after the
    /// committed offset), and new partitions that no longer start at 0.
    pub async fn losses_since(&mut self, committed: &PartitionOffsets) -> Result<Vec<DataLoss>> {
        let latest = self.latest_offsets(None).await?;
        let existing: BTreeSet<TopicPartition> = latest.keys().cloned().collect();
        let new: BTreeSet<TopicPartition> = existing
            .iter()
            .filter(|tp| !committed.contains_key(*tp))
            .cloned()
            .collect();
        let new_earliest = self.earliest_offsets(&new).await?;
        let (_, mut losses) = offset::offset_ranges(committed, &latest, &new_earliest);
        let kept: BTreeSet<TopicPartition> = committed
            .keys()
            .filter(|tp| existing.contains(*tp))
            .cloned()
            .collect();
        let earliest = self.earliest_offsets(&kept).await?;
        for (tp, &start) in &earliest {
            if let Some(&from) = committed.get(tp)
                && start > from
                && latest.get(tp).is_none_or(|l| *l >= from)
            {
                losses.push(DataLoss {
                    tp: tp.clone(),
                    from: Some(from),
                    until: Some(start),
                    message: format!(
                        "offsets [{from}, {start}) of partition {tp} were deleted before they were read \
                         (retention or deleted records: the partition now starts at {start})"
                    ),
                });
            }
        }
        losses.sort_by(|a, b| a.tp.cmp(&b.tp));
        Ok(losses)
    }

    /// Spark's `latestOffset(start, readLimit)`: the end offset of the next batch, or
    /// `None` when there is nothing new (or `min_offsets_per_trigger` says wait).
    /// `available_now` pins the latest offsets at its first plan; `once` and
    /// `available_now` ignore `min_offsets_per_trigger`.
    pub async fn plan(
        &mut self,
        start: &KafkaSourceOffset,
        trigger: Trigger,
        now_ms: i64,
    ) -> Result<Option<KafkaSourceOffset>> {
        let latest = match (trigger, &self.available_now) {
            (Trigger::AvailableNow, Some(pinned)) => pinned.clone(),
            (Trigger::AvailableNow, None) => {
                let l = self.latest_offsets(Some(&start.partitions)).await?;
                self.available_now = Some(l.clone());
                l
            }
            _ => self.latest_offsets(Some(&start.partitions)).await?,
        };
        self.latest = Some(latest.clone());
        let limits = self.options.limits;
        let start_map = &start.partitions;
        let delayed = match (trigger, limits.min_offsets) {
            (Trigger::ProcessingTime(_), Some(min)) => offset::delay_batch(
                min,
                &latest,
                start_map,
                &mut self.last_trigger_ms,
                now_ms,
                limits.max_trigger_delay_ms,
            ),
            _ => false,
        };
        if delayed {
            return Ok(None);
        }
        let end = match limits.max_offsets {
            Some(max) => {
                let new: BTreeSet<TopicPartition> = latest
                    .keys()
                    .filter(|tp| !start_map.contains_key(*tp))
                    .cloned()
                    .collect();
                let from_new = self.earliest_offsets(&new).await?;
                offset::rate_limit(max, start_map, &latest, &from_new)
            }
            None => latest,
        };
        // Nothing moved: no batch (new empty partitions alone make one, as in Spark).
        if &end == start_map {
            return Ok(None);
        }
        Ok(Some(KafkaSourceOffset::new(end)))
    }

    /// The ranges of batch `(start, end]`, with Spark's data-loss checks: with
    /// `fail_on_data_loss` the first loss is an error naming the partition and range.
    pub async fn ranges(
        &mut self,
        start: &KafkaSourceOffset,
        end: &KafkaSourceOffset,
    ) -> Result<BatchRanges> {
        let new: BTreeSet<TopicPartition> = end
            .partitions
            .keys()
            .filter(|tp| !start.partitions.contains_key(*tp))
            .cloned()
            .collect();
        let new_earliest = self.earliest_offsets(&new).await?;
        let (ranges, losses) =
            offset::offset_ranges(&start.partitions, &end.partitions, &new_earliest);
        if let Some(first) = losses.first()
            && self.options.fail_on_data_loss
        {
            let more = if losses.len() > 1 {
                format!(" (and {} more)", losses.len() - 1)
            } else {
                String::new()
            };
            return Err(Error::KafkaDataLoss {
                bootstrap: self.options.connection.bootstrap(),
                message: format!("{}{more}", first.message),
            });
        }
        for l in &losses {
            tracing::warn!(partition = %l.tp, "{}; skipped (fail_on_data_loss = false)", l.message);
        }
        Ok(BatchRanges { ranges, losses })
    }

    /// Reads the ranges in Spark's Kafka rows, one task per partition.
    pub async fn read(&mut self, ranges: &BatchRanges) -> Result<KafkaRead> {
        self.read_decoded(ranges, None).await
    }

    /// Reads the ranges, one task per partition, at most [`PARTITIONS_IN_FLIGHT`] at
    /// once; with `decoder`, each partition's chunks are decoded as they fill, so the
    /// batch holds its decoded rows and not its raw records as well.
    pub async fn read_decoded(
        &mut self,
        ranges: &BatchRanges,
        decoder: Option<&value::ValueDecoder>,
    ) -> Result<KafkaRead> {
        use futures::StreamExt;
        let fail = self.options.fail_on_data_loss;
        let headers = self.options.include_headers;
        let ranges = ranges.clone();
        let decoder = decoder.cloned();
        self.with_client(|client| async move {
            let tasks = futures::stream::iter(ranges.ranges.iter().cloned().map(|range| {
                let client = client.clone();
                let decoder = decoder.clone();
                tokio::spawn(async move {
                    let r = client.read_range(&range, fail, headers, decoder).await;
                    (range.tp, r)
                })
            }))
            .buffered(PARTITIONS_IN_FLIGHT);
            futures::pin_mut!(tasks);
            let mut out = KafkaRead {
                losses: ranges.losses.clone(),
                ..Default::default()
            };
            while let Some(t) = tasks.next().await {
                let (tp, r) = t.map_err(|e| Error::KafkaUnavailable {
                    bootstrap: client.connection.bootstrap(),
                    message: format!("a fetch task failed: {e}"),
                })?;
                let r = r?;
                out.num_rows += r.num_rows;
                out.num_bytes += r.num_bytes;
                out.batches.extend(r.batches);
                out.losses.extend(r.losses);
                out.num_rows_rescued += r.decoded.num_rows_rescued;
                out.num_records_corrupt += r.decoded.num_records_corrupt;
                out.type_mismatches.extend(r.decoded.type_mismatches);
                if let Some(last) = r.last {
                    out.last.insert(tp, last);
                }
            }
            Ok(out)
        })
        .await
    }
}

fn compile_pattern(p: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(&format!("^(?:{p})$"))
        .map_err(|e| format!("subscribe_pattern {p:?} is not a valid regular expression: {e}"))
}

/// The partitions of `topics` a subscription reads.
pub fn subscribed(
    subscription: &Subscription,
    pattern: Option<&regex::Regex>,
    topics: &BTreeMap<String, BTreeSet<i32>>,
) -> BTreeSet<TopicPartition> {
    topics
        .iter()
        .filter(|(name, _)| match subscription {
            Subscription::Topics(t) => t.iter().any(|s| s == *name),
            Subscription::Pattern(_) => pattern.is_some_and(|re| re.is_match(name)),
        })
        .flat_map(|(name, parts)| parts.iter().map(|p| TopicPartition::new(name.clone(), *p)))
        .collect()
}

/// Reads Spark's initial offset file: a zero byte, `v1`, a newline, the JSON.
pub fn read_initial_offsets(path: &Path) -> Result<Option<KafkaSourceOffset>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::checkpoint(path, e.to_string())),
    };
    let text = String::from_utf8_lossy(bytes.strip_prefix(&[0u8]).unwrap_or(&bytes)).into_owned();
    let json = match text.strip_prefix('v') {
        Some(rest) => {
            let (version, json) = rest.split_once('\n').ok_or_else(|| {
                Error::checkpoint(path, "expected a version line (v1) and the offsets")
            })?;
            if version.trim() != "1" {
                return Err(Error::checkpoint(
                    path,
                    format!("unsupported initial offsets version v{version}; this weir reads v1"),
                ));
            }
            json.to_string()
        }
        None => text,
    };
    KafkaSourceOffset::parse(json.trim())
        .map(Some)
        .map_err(|e| Error::checkpoint(path, format!("not Kafka source offsets: {e}")))
}

/// Writes the initial offset file as Spark's `KafkaSourceInitialOffsetWriter` does.
pub fn write_initial_offsets(path: &Path, offsets: &KafkaSourceOffset) -> Result<()> {
    if let Some(dir) = path.parent() {
        crate::durable::create_dir_private(dir)
            .map_err(|e| Error::checkpoint(dir, e.to_string()))?;
    }
    let mut bytes = vec![0u8];
    bytes.extend_from_slice(b"v1\n");
    bytes.extend_from_slice(offsets.to_json().to_string().as_bytes());
    crate::durable::write_atomic(path, &bytes).map_err(|e| Error::checkpoint(path, e.to_string()))
}

#[cfg(test)]
mod tests;
