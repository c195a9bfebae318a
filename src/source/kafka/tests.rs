//! The Kafka source against a real broker (Apache Kafka 4.4, KRaft, loopback),
//! one broker for the whole test binary.

use std::collections::{BTreeMap, BTreeSet};

use arrow::array::AsArray;
use arrow::datatypes::{Int32Type, Int64Type, TimestampMicrosecondType};
use chrono::TimeZone;
use rskafka::client::partition::Compression;
use rskafka::record::Record;

use super::broker::LocalBroker;
use super::*;

fn topic_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

async fn client() -> KafkaClient {
    let broker = LocalBroker::shared();
    KafkaClient::connect(&KafkaConnection::plaintext(&broker.bootstrap))
        .await
        .expect("connect to the test broker")
}

fn record(key: &str, value: &str, ts_ms: i64) -> Record {
    Record {
        key: Some(key.as_bytes().to_vec()),
        value: Some(value.as_bytes().to_vec()),
        headers: BTreeMap::from([("source".to_string(), b"test".to_vec())]),
        timestamp: chrono::Utc
            .timestamp_millis_opt(ts_ms)
            .single()
            .expect("valid timestamp"),
    }
}

/// Produces `n` records per partition, keys `p{partition}-{i}`, timestamps from 1_700_000_000_000.
async fn produce(c: &KafkaClient, topic: &str, partitions: i32, n: usize) {
    for p in 0..partitions {
        let records: Vec<Record> = (0..n)
            .map(|i| {
                record(
                    &format!("p{p}-{i}"),
                    &format!("{{\"p\":{p},\"i\":{i}}}"),
                    1_700_000_000_000 + i as i64,
                )
            })
            .collect();
        // Several produce requests, so that fetches cross record batches.
        for chunk in records.chunks(7) {
            c.produce(
                &TopicPartition::new(topic, p),
                chunk.to_vec(),
                Compression::Zstd,
            )
            .await
            .expect("produce");
        }
    }
}

fn options(topic: &str) -> KafkaSourceOptions {
    KafkaSourceOptions::new(
        KafkaConnection::plaintext(&LocalBroker::shared().bootstrap),
        Subscription::Topics(vec![topic.to_string()]),
    )
}

fn keys(read: &KafkaRead) -> Vec<String> {
    let mut out = Vec::new();
    for b in &read.batches {
        let k = b.column(0).as_binary::<i32>();
        for i in 0..b.num_rows() {
            out.push(String::from_utf8_lossy(k.value(i)).into_owned());
        }
    }
    out
}

/// (partition, offset) of every row read.
fn positions(read: &KafkaRead) -> Vec<(i32, i64)> {
    let mut out = Vec::new();
    for b in &read.batches {
        let p = b.column(3).as_primitive::<Int32Type>();
        let o = b.column(4).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            out.push((p.value(i), o.value(i)));
        }
    }
    out
}

/// Plans and reads batches until nothing is new; returns the keys read per batch.
async fn drain(
    src: &mut KafkaSource,
    mut start: KafkaSourceOffset,
    trigger: Trigger,
) -> (Vec<Vec<String>>, KafkaSourceOffset) {
    let mut batches = Vec::new();
    while let Some(end) = src.plan(&start, trigger, 0).await.expect("plan") {
        let ranges = src.ranges(&start, &end).await.expect("ranges");
        let read = src.read(&ranges).await.expect("read");
        batches.push(keys(&read));
        start = end;
        assert!(batches.len() < 1000, "no end to the batches");
    }
    (batches, start)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_every_record_once_in_bounded_batches_with_sparks_rows() {
    let c = client().await;
    let topic = topic_name("bounded");
    c.create_topic(&topic, 3, 1).await.expect("create topic");
    produce(&c, &topic, 3, 40).await;

    let dir = tempfile::tempdir().unwrap();
    let initial_path = dir.path().join("sources/0/0");
    let mut opts = options(&topic);
    opts.starting_offsets = StartingOffsets::Earliest;
    opts.limits.max_offsets = Some(25);
    opts.include_headers = true;
    let mut src = KafkaSource::new(opts).unwrap();
    assert_eq!(src.description(), format!("KafkaV2[Subscribe[{topic}]]"));
    let start = src.initial_offsets(&initial_path).await.unwrap();
    assert_eq!(
        start.to_json().to_string(),
        format!(r#"{{"{topic}":{{"0":0,"1":0,"2":0}}}}"#)
    );
    // Spark's KafkaSourceInitialOffsetWriter format: a zero byte, v1, the JSON.
    let raw = std::fs::read(&initial_path).unwrap();
    assert_eq!(raw[0], 0);
    assert!(raw[1..].starts_with(b"v1\n{"), "{raw:?}");
    assert_eq!(
        read_initial_offsets(&initial_path).unwrap(),
        Some(start.clone())
    );

    // The first batch: rows in Spark's schema.
    let end = src
        .plan(&start, Trigger::ProcessingTime(Duration::ZERO), 0)
        .await
        .unwrap()
        .expect("a batch");
    let total: i64 = end.partitions.values().sum();
    assert_eq!(total, 3 * 8, "25 prorated over 3 equal backlogs: 8 each");
    let ranges = src.ranges(&start, &end).await.unwrap();
    let read = src.read(&ranges).await.unwrap();
    assert_eq!(read.num_rows, 24);
    let b = &read.batches[0];
    assert_eq!(b.schema(), rows::kafka_schema(true));
    assert_eq!(b.column(2).as_string::<i32>().value(0), topic);
    assert_eq!(b.column(3).as_primitive::<Int32Type>().value(0), 0);
    let offsets = b.column(4).as_primitive::<Int64Type>();
    assert_eq!(
        (0..8).map(|i| offsets.value(i)).collect::<Vec<_>>(),
        (0..8).collect::<Vec<i64>>()
    );
    assert_eq!(
        b.column(5)
            .as_primitive::<TimestampMicrosecondType>()
            .value(3),
        1_700_000_000_003_000
    );
    assert_eq!(b.column(6).as_primitive::<Int32Type>().value(0), 0);
    let headers = b.column(7).as_list::<i32>().value(0);
    assert_eq!(
        headers.as_struct().column(0).as_string::<i32>().value(0),
        "source"
    );
    assert_eq!(
        read.last[&TopicPartition::new(&topic, 2)],
        (7, 1_700_000_000_007)
    );

    // The same (start, end] read again gives the same rows (a replayed batch).
    let ranges = src.ranges(&start, &end).await.unwrap();
    let again = src.read(&ranges).await.unwrap();
    assert_eq!(keys(&again), keys(&read));

    // The rest, in batches of at most 25, every key once.
    let (batches, last) = drain(&mut src, end, Trigger::ProcessingTime(Duration::ZERO)).await;
    assert!(batches.iter().all(|b| b.len() <= 25), "{batches:?}");
    let mut all: Vec<String> = keys(&read);
    all.extend(batches.into_iter().flatten());
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!(all.len(), 120);
    assert_eq!(unique.len(), 120);
    assert_eq!(last.partitions.values().sum::<i64>(), 120);
    // Nothing new: no batch.
    assert!(
        src.plan(&last, Trigger::ProcessingTime(Duration::ZERO), 0)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_offsets_latest_and_json() {
    let c = client().await;
    let topic = topic_name("starting");
    c.create_topic(&topic, 2, 1).await.unwrap();
    produce(&c, &topic, 2, 10).await;
    let dir = tempfile::tempdir().unwrap();

    // latest: only what comes after the start.
    let mut src = KafkaSource::new(options(&topic)).unwrap();
    let start = src
        .initial_offsets(&dir.path().join("latest/0"))
        .await
        .unwrap();
    assert_eq!(start.partitions.values().sum::<i64>(), 20);
    produce(&c, &topic, 1, 3).await;
    let (batches, _) = drain(&mut src, start, Trigger::Once).await;
    assert_eq!(batches, vec![vec!["p0-0", "p0-1", "p0-2"]]);

    // JSON: partition 0 from offset 8, partition 1 from the earliest (-2).
    let mut opts = options(&topic);
    opts.starting_offsets =
        StartingOffsets::parse(&format!(r#"{{"{topic}":{{"0":8,"1":-2}}}}"#)).unwrap();
    let mut src = KafkaSource::new(opts).unwrap();
    let start = src
        .initial_offsets(&dir.path().join("json/0"))
        .await
        .unwrap();
    assert_eq!(
        start.to_json().to_string(),
        format!(r#"{{"{topic}":{{"0":8,"1":0}}}}"#)
    );
    let (batches, _) = drain(&mut src, start, Trigger::AvailableNow).await;
    assert_eq!(batches.iter().flatten().count(), 13 - 8 + 10);

    // JSON that does not name every partition is refused, naming both sets.
    let mut opts = options(&topic);
    opts.starting_offsets = StartingOffsets::parse(&format!(r#"{{"{topic}":{{"0":8}}}}"#)).unwrap();
    let mut src = KafkaSource::new(opts).unwrap();
    let e = src
        .initial_offsets(&dir.path().join("partial/0"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("every subscribed partition") && e.contains(&format!("{topic}-1")),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_records_fail_or_are_skipped_and_counted() {
    let c = client().await;
    let topic = topic_name("loss");
    c.create_topic(&topic, 2, 1).await.unwrap();
    produce(&c, &topic, 2, 20).await;
    let start = KafkaSourceOffset::new(
        [
            (TopicPartition::new(&topic, 0), 0),
            (TopicPartition::new(&topic, 1), 0),
        ]
        .into(),
    );
    let end = KafkaSourceOffset::new(
        [
            (TopicPartition::new(&topic, 0), 20),
            (TopicPartition::new(&topic, 1), 20),
        ]
        .into(),
    );
    // Retention moves partition 1's start to 12 after the batch was planned.
    c.delete_records(&TopicPartition::new(&topic, 1), 12)
        .await
        .unwrap();

    let mut strict = KafkaSource::new(options(&topic)).unwrap();
    let ranges = strict.ranges(&start, &end).await.unwrap();
    let e = strict.read(&ranges).await.unwrap_err();
    assert_eq!(e.kind().as_str(), "source_error");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("[0, 12) of partition {topic}-1")),
        "{msg}"
    );
    assert!(msg.contains("fail_on_data_loss = false"), "{msg}");

    let mut opts = options(&topic);
    opts.fail_on_data_loss = false;
    let mut lenient = KafkaSource::new(opts).unwrap();
    let ranges = lenient.ranges(&start, &end).await.unwrap();
    let read = lenient.read(&ranges).await.unwrap();
    assert_eq!(read.num_rows, 20 + 8);
    assert_eq!(read.offsets_lost(), 12);
    let p1: Vec<i64> = positions(&read)
        .into_iter()
        .filter(|(p, _)| *p == 1)
        .map(|(_, o)| o)
        .collect();
    assert_eq!(p1, (12..20).collect::<Vec<i64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_partitions_are_read_from_their_start_and_patterns_match_whole_names() {
    let c = client().await;
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let a = format!("pat-{suffix}-a");
    let b = format!("pat-{suffix}-b");
    let other = format!("xpat-{suffix}-a");
    for t in [&a, &b, &other] {
        c.create_topic(t, 1, 1).await.unwrap();
        produce(&c, t, 1, 5).await;
    }
    let mut opts = options(&a);
    opts.subscription = Subscription::Pattern(format!("pat-{suffix}-.*"));
    opts.starting_offsets = StartingOffsets::Earliest;
    let mut src = KafkaSource::new(opts).unwrap();
    assert_eq!(
        src.description(),
        format!("KafkaV2[SubscribePattern[pat-{suffix}-.*]]")
    );
    let dir = tempfile::tempdir().unwrap();
    let start = src.initial_offsets(&dir.path().join("0")).await.unwrap();
    assert_eq!(
        start
            .partitions
            .keys()
            .map(|tp| tp.topic.clone())
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([a.clone(), b.clone()])
    );
    let (batches, start) = drain(&mut src, start, Trigger::ProcessingTime(Duration::ZERO)).await;
    assert_eq!(batches.iter().flatten().count(), 10);

    // A partition added while running: read from its first offset.
    LocalBroker::shared().add_partitions(&a, 2).unwrap();
    // The controller has the new partition; wait until the broker's metadata has it too.
    for _ in 0..100 {
        if c.topics()
            .await
            .unwrap()
            .get(&a)
            .is_some_and(|p| p.len() == 2)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut records = Vec::new();
    for i in 0..4 {
        records.push(record(&format!("new-{i}"), "{}", 1));
    }
    c.produce(
        &TopicPartition::new(&a, 1),
        records,
        Compression::NoCompression,
    )
    .await
    .unwrap();
    // A topic created later that matches the pattern too.
    let c2 = format!("pat-{suffix}-c");
    c.create_topic(&c2, 1, 1).await.unwrap();
    produce(&c, &c2, 1, 2).await;
    let (batches, _) = drain(&mut src, start, Trigger::ProcessingTime(Duration::ZERO)).await;
    let mut got: Vec<String> = batches.into_iter().flatten().collect();
    got.sort();
    assert_eq!(
        got,
        vec!["new-0", "new-1", "new-2", "new-3", "p0-0", "p0-1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_offsets_per_trigger_waits_for_enough_records() {
    let c = client().await;
    let topic = topic_name("min");
    c.create_topic(&topic, 1, 1).await.unwrap();
    let mut opts = options(&topic);
    opts.starting_offsets = StartingOffsets::Earliest;
    opts.limits.min_offsets = Some(10);
    opts.limits.max_trigger_delay_ms = 60_000;
    let mut src = KafkaSource::new(opts).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let start = src.initial_offsets(&dir.path().join("0")).await.unwrap();
    produce(&c, &topic, 1, 3).await;
    let pt = Trigger::ProcessingTime(Duration::from_secs(1));
    // The first trigger runs (Spark's lastTriggerMillis starts at 0).
    let end = src
        .plan(&start, pt, 1_000_000)
        .await
        .unwrap()
        .expect("first batch");
    produce(&c, &topic, 1, 3).await;
    assert!(
        src.plan(&end, pt, 1_001_000).await.unwrap().is_none(),
        "3 < 10: wait"
    );
    assert!(
        src.plan(&end, pt, 1_061_000).await.unwrap().is_some(),
        "the delay passed"
    );
}

#[tokio::test]
async fn an_unreachable_cluster_is_source_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut conn = KafkaConnection::plaintext(&format!("127.0.0.1:{port}"));
    conn.request_timeout = Duration::from_secs(2);
    let mut src = KafkaSource::new(KafkaSourceOptions::new(
        conn,
        Subscription::Topics(vec!["t".into()]),
    ))
    .unwrap();
    let e = src.partitions().await.unwrap_err();
    assert_eq!(e.kind().as_str(), "source_unavailable");
    assert!(e.retryable());
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
}

#[tokio::test]
async fn lag_is_latest_minus_committed_in_messages_and_time() {
    let c = client().await;
    let topic = topic_name("lag");
    c.create_topic(&topic, 2, 1).await.unwrap();
    produce(&c, &topic, 2, 10).await;
    let broker = LocalBroker::shared();
    let mut source = KafkaSource::new(KafkaSourceOptions::new(
        KafkaConnection::plaintext(&broker.bootstrap),
        Subscription::Topics(vec![topic.clone()]),
    ))
    .unwrap();
    let committed: PartitionOffsets = [
        (TopicPartition::new(topic.clone(), 0), 4),
        (TopicPartition::new(topic.clone(), 1), 10),
    ]
    .into_iter()
    .collect();
    let lag = lag::measure(&mut source, Some(&committed)).await.unwrap();
    assert_eq!(lag.len(), 2);
    assert_eq!(
        (lag[0].latest, lag[0].committed, lag[0].messages),
        (10, Some(4), 6)
    );
    // Timestamps 1_700_000_000_000 + i: the newest (9) minus the oldest unread (4).
    assert_eq!(lag[0].lag_ms, Some(5));
    assert_eq!((lag[1].messages, lag[1].lag_ms), (0, Some(0)));
    let before_first_commit = lag::measure(&mut source, None).await.unwrap();
    assert_eq!(before_first_commit[0].messages, 10);
    assert_eq!(before_first_commit[0].lag_ms, None);
}

/// Produces `n` JSON records `{"p":..,"i":..}` into partition `p`, in produce requests
/// of 2,000.
async fn produce_many(c: &KafkaClient, topic: &str, p: i32, n: usize) {
    let records: Vec<Record> = (0..n)
        .map(|i| {
            record(
                &format!("p{p}-{i}"),
                &format!("{{\"p\":{p},\"i\":{i}}}"),
                1_700_000_000_000 + i as i64,
            )
        })
        .collect();
    for chunk in records.chunks(2_000) {
        c.produce(
            &TopicPartition::new(topic, p),
            chunk.to_vec(),
            Compression::Lz4,
        )
        .await
        .expect("produce");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_read_and_decoded_in_bounded_chunks() {
    let c = client().await;
    let topic = topic_name("chunks");
    c.create_topic(&topic, 2, 1).await.unwrap();
    let per_partition = ROWS_PER_CHUNK * 2 + 100;
    for p in 0..2 {
        produce_many(&c, &topic, p, per_partition).await;
    }
    let mut opts = options(&topic);
    opts.starting_offsets = StartingOffsets::Earliest;
    let mut src = KafkaSource::new(opts).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let start = src
        .initial_offsets(&dir.path().join("sources/0/0"))
        .await
        .unwrap();
    let end = src
        .plan(&start, Trigger::AvailableNow, 0)
        .await
        .unwrap()
        .expect("a batch");
    let ranges = src.ranges(&start, &end).await.unwrap();

    // Spark's rows: chunks of at most ROWS_PER_CHUNK rows, every record once.
    let raw = src.read(&ranges).await.unwrap();
    assert_eq!(raw.num_rows, 2 * per_partition as u64);
    assert_eq!(raw.batches.len(), 2 * 3, "3 chunks per partition");
    assert!(raw.batches.iter().all(|b| b.num_rows() <= ROWS_PER_CHUNK));
    assert_eq!(
        keys(&raw).iter().collect::<BTreeSet<_>>().len(),
        2 * per_partition
    );

    // With `format = "json"`: the same chunks, each decoded on its own.
    let decoder = value::ValueDecoder::new(&crate::spec::KafkaValueFormat {
        format: crate::spec::FileFormat::Json,
        schema: Arc::new(crate::schema::parse_ddl("p INT, i BIGINT").unwrap()),
        csv: Default::default(),
        text: Default::default(),
    });
    let decoded = src.read_decoded(&ranges, Some(&decoder)).await.unwrap();
    assert_eq!(decoded.num_rows, 2 * per_partition as u64);
    // (The JSON decoder may split a chunk's rows into smaller batches.)
    assert!(decoded.batches.len() >= 2 * 3);
    assert!(
        decoded
            .batches
            .iter()
            .all(|b| b.num_rows() <= ROWS_PER_CHUNK)
    );
    assert!(
        decoded
            .batches
            .iter()
            .all(|b| b.schema() == *decoder.schema())
    );
    let mut seen = BTreeSet::new();
    for b in &decoded.batches {
        let p = b.column_by_name("p").unwrap().as_primitive::<Int32Type>();
        let i = b.column_by_name("i").unwrap().as_primitive::<Int64Type>();
        let meta = b.column_by_name("_metadata").unwrap().as_struct();
        let offset = meta
            .column_by_name("offset")
            .unwrap()
            .as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            assert_eq!(i.value(r), offset.value(r), "row and record stay together");
            seen.insert((p.value(r), i.value(r)));
        }
    }
    assert_eq!(seen.len(), 2 * per_partition);
    assert_eq!(decoded.num_rows_rescued, 0);
}

#[tokio::test]
async fn a_lag_probe_sees_the_latest_offset_move_and_asks_timestamps_again() {
    let c = client().await;
    let topic = topic_name("probe");
    c.create_topic(&topic, 2, 1).await.unwrap();
    produce(&c, &topic, 2, 10).await;
    let mut source = KafkaSource::new(options(&topic)).unwrap();
    let committed: PartitionOffsets = (0..2)
        .map(|p| (TopicPartition::new(topic.clone(), p), 4))
        .collect();
    let mut probe = lag::LagProbe::new();
    let first = probe.measure(&mut source, Some(&committed)).await.unwrap();
    assert_eq!(
        (first[0].latest, first[0].messages, first[0].lag_ms),
        (10, 6, Some(5))
    );
    // Nothing moved: the same answer (from the timestamps it remembers).
    assert_eq!(
        probe.measure(&mut source, Some(&committed)).await.unwrap(),
        first
    );
    // A record 100 ms newer on partition 0: counted, and its timestamp asked.
    c.produce(
        &TopicPartition::new(&topic, 0),
        vec![record("late", "{}", 1_700_000_000_109)],
        Compression::NoCompression,
    )
    .await
    .unwrap();
    let moved = probe.measure(&mut source, Some(&committed)).await.unwrap();
    assert_eq!(
        (moved[0].latest, moved[0].messages, moved[0].lag_ms),
        (11, 7, Some(105))
    );
    assert_eq!(moved[1], first[1]);
}

#[tokio::test]
async fn losses_since_names_deleted_ranges_and_partitions_gone() {
    let c = client().await;
    let topic = topic_name("losses");
    c.create_topic(&topic, 2, 1).await.unwrap();
    produce(&c, &topic, 2, 20).await;
    let mut source = KafkaSource::new(options(&topic)).unwrap();
    let mut committed: PartitionOffsets = (0..2)
        .map(|p| (TopicPartition::new(topic.clone(), p), 5))
        .collect();
    assert!(source.losses_since(&committed).await.unwrap().is_empty());
    // Retention (DeleteRecords) past the committed offset of partition 1, and a
    // partition the checkpoint has that the cluster no longer has.
    c.delete_records(&TopicPartition::new(&topic, 1), 12)
        .await
        .unwrap();
    committed.insert(TopicPartition::new(topic.clone(), 7), 3);
    let losses = source.losses_since(&committed).await.unwrap();
    assert_eq!(losses.len(), 2, "{losses:?}");
    assert_eq!(
        (losses[0].tp.partition, losses[0].from, losses[0].until),
        (1, Some(5), Some(12))
    );
    assert!(
        losses[0].message.contains("deleted before they were read"),
        "{}",
        losses[0].message
    );
    assert_eq!(losses[1].tp.partition, 7);
    assert!(
        losses[1].message.contains("is gone"),
        "{}",
        losses[1].message
    );
}
