//! The connection as libpq users expect it: a libpq URL (`postgresql://user@host:port/db`)
//! filled in from libpq's environment (`PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`,
//! `PGSSLMODE`), the password from `PGPASSWORD` or the passfile (`PGPASSFILE`, else
//! `~/.pgpass`), never from the URL. A value in the URL wins over the environment, as in
//! libpq.
//!
//! TLS: weir connects without TLS for now: `sslmode=disable` and `allow` never use it,
//! `prefer` (libpq's default) connects without it (libpq would try TLS first); `require`,
//! `verify-ca` and `verify-full` are refused when the pipeline is read.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use tokio_postgres::Config;
use tokio_postgres::config::{Host, SslMode};

/// A parsed and checked sink URL with the environment applied: what to connect with, and
/// a label for messages (`user@host:port/database`, never a password).
pub struct Target {
    pub config: Config,
    pub label: String,
}

const TLS_REFUSED: &str = "weir's postgres sink connects without TLS for now: use sslmode=disable or prefer \
     (libpq's default), on a network you trust or through a tunnel (docs/sinks.md#tls)";

/// The `sslmode` a URL gives, from its query string.
fn url_sslmode(url: &str) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == "sslmode").then(|| v.to_string())
    })
}

/// The URL without its `sslmode` (checked apart: weir connects without TLS).
fn without_sslmode(url: &str) -> String {
    match url_sslmode(url) {
        Some(mode) => url
            .replace(&format!("sslmode={mode}&"), "")
            .replace(&format!("&sslmode={mode}"), "")
            .replace(&format!("?sslmode={mode}"), ""),
        None => url.to_string(),
    }
}

fn check_sslmode(mode: &str, from: &str) -> Result<(), String> {
    match mode {
        "disable" | "allow" | "prefer" => Ok(()),
        "require" | "verify-ca" | "verify-full" => Err(format!("{from}{mode}: {TLS_REFUSED}")),
        other => Err(format!(
            "{from}{other} is not an sslmode; libpq's are disable, allow, prefer, require, verify-ca, verify-full"
        )),
    }
}

/// Checks a sink's `url` when the pipeline is read: a libpq URL, without a password (as
/// object-store URLs with credentials are refused), with an sslmode weir can honour.
/// The message never repeats the URL (it may hold a password).
pub fn check_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("postgresql://") || url.starts_with("postgres://")) {
        return Err(
            "the postgres sink's url is a libpq URL: postgresql://user@host:port/database \
             (host, port, user and database may also come from PGHOST, PGPORT, PGUSER, PGDATABASE)"
                .into(),
        );
    }
    // libpq's sslmode values `allow` and `verify-*` are not all known to the parser below.
    let sslmode = url_sslmode(url);
    if let Some(mode) = &sslmode {
        check_sslmode(mode, "the url's sslmode=")?;
    }
    let config = Config::from_str(&without_sslmode(url))
        .map_err(|e| format!("the postgres sink's url is not a libpq URL: {e}"))?;
    if config.get_password().is_some() {
        return Err(
            "the postgres sink's url carries a password; remove it and give it in PGPASSWORD \
             or a passfile (PGPASSFILE, ~/.pgpass), as libpq reads them (docs/sinks.md#credentials)"
                .into(),
        );
    }
    Ok(())
}

/// The sink's URL with libpq's environment applied (`env` reads a variable).
pub fn resolve(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Target, String> {
    check_url(url)?;
    let sslmode = url_sslmode(url).or_else(|| env("PGSSLMODE"));
    if let Some(mode) = &sslmode {
        check_sslmode(mode, "sslmode=")?;
    }
    let mut config = Config::from_str(&without_sslmode(url))
        .map_err(|e| format!("the postgres sink's url is not a libpq URL: {e}"))?;
    config.ssl_mode(SslMode::Disable);
    if config.get_hosts().is_empty() {
        match env("PGHOST").filter(|h| !h.is_empty()) {
            Some(hosts) => {
                for h in hosts.split(',') {
                    config.host(h);
                }
            }
            // libpq's default: the Unix socket directory (Debian's), else localhost.
            None if Path::new("/var/run/postgresql").is_dir() => {
                config.host("/var/run/postgresql");
            }
            None => {
                config.host("localhost");
            }
        }
    }
    if config.get_ports().is_empty() {
        let port = match env("PGPORT").filter(|p| !p.is_empty()) {
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| format!("PGPORT={p:?} is not a port number"))?,
            None => 5432,
        };
        config.port(port);
    }
    if config.get_user().is_none() {
        let user = env("PGUSER")
            .or_else(|| env("USER"))
            .or_else(|| env("LOGNAME"))
            .filter(|u| !u.is_empty())
            .ok_or("the postgres sink's url names no user, and neither PGUSER nor USER is set")?;
        config.user(&user);
    }
    if config.get_dbname().is_none() {
        let db = env("PGDATABASE")
            .filter(|d| !d.is_empty())
            .or_else(|| config.get_user().map(str::to_string));
        if let Some(db) = db {
            config.dbname(&db);
        }
    }
    if config.get_application_name().is_none() {
        config.application_name("weir");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => String::new(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or_default().to_string();
    let db = config.get_dbname().unwrap_or_default().to_string();
    match env("PGPASSWORD") {
        Some(p) => {
            config.password(p);
        }
        None => {
            // libpq matches a Unix socket host as `localhost` in the passfile.
            let pass_host = if host.starts_with('/') {
                "localhost"
            } else {
                &host
            };
            if let Some(p) = passfile_password(env, pass_host, port, &db, &user) {
                config.password(p);
            }
        }
    }
    Ok(Target {
        config,
        label: format!("{user}@{host}:{port}/{db}"),
    })
}

/// The passfile libpq reads: `PGPASSFILE`, else `~/.pgpass`.
fn passfile(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    env("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".pgpass")))
}

/// The password of the first passfile line matching `host:port:database:user` (`*`
/// matches anything; `\:` and `\\` escape). As libpq, a passfile that group or others
/// can read is ignored, with a warning.
fn passfile_password(
    env: &dyn Fn(&str) -> Option<String>,
    host: &str,
    port: u16,
    db: &str,
    user: &str,
) -> Option<String> {
    let path = passfile(env)?;
    let meta = std::fs::metadata(&path).ok()?;
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(passfile = %path.display(), "the password file has group or world access; it is ignored (as libpq does): chmod 0600 it");
            return None;
        }
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let port = port.to_string();
    let wanted = [host, port.as_str(), db, user];
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|line| {
            let fields = split_passfile_line(line);
            if fields.len() < 5 {
                return None;
            }
            let matches = fields[..4]
                .iter()
                .zip(wanted)
                .all(|(f, w)| f == "*" || f == w);
            matches.then(|| fields[4].clone())
        })
}

fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next()
                    && let Some(last) = fields.last_mut()
                {
                    last.push(n);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(last) = fields.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn a_password_in_the_url_is_refused_without_repeating_it() {
        for url in [
            "postgresql://weir:hunter2@127.0.0.1:5432/lake",
            "postgresql://weir@127.0.0.1:5432/lake?password=hunter2",
        ] {
            let e = check_url(url).unwrap_err();
            assert!(e.contains("PGPASSWORD"), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        assert!(check_url("postgresql://weir@127.0.0.1:5432/lake").is_ok());
        assert!(check_url("host=x").is_err());
        let e = check_url("postgresql://weir@h/lake?sslmode=require").unwrap_err();
        assert!(e.contains("without TLS"), "{e}");
    }

    #[test]
    fn the_environment_fills_what_the_url_leaves_out() {
        let env = env_of(&[
            ("PGHOST", "db.internal"),
            ("PGPORT", "6543"),
            ("PGUSER", "etl"),
            ("PGPASSWORD", "s3cret"),
        ]);
        let t = resolve("postgresql:///lake", &env).unwrap();
        assert_eq!(t.label, "etl@db.internal:6543/lake");
        assert_eq!(t.config.get_password(), Some(&b"s3cret"[..]));
        // The URL wins over the environment.
        let t = resolve("postgresql://weir@127.0.0.1:5432/lake", &env).unwrap();
        assert_eq!(t.label, "weir@127.0.0.1:5432/lake");
        let e = resolve(
            "postgresql://weir@127.0.0.1/lake",
            &env_of(&[("PGSSLMODE", "verify-full")]),
        )
        .err()
        .unwrap_or_default();
        assert!(e.contains("without TLS"), "{e}");
    }

    #[test]
    fn the_passfile_gives_the_password_of_the_first_matching_line() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:lake:weir:nope\n127.0.0.1:*:lake:weir:pa\\:ss\n*:*:*:*:fallback\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let path = file.display().to_string();
        let env = env_of(&[("PGPASSFILE", path.as_str())]);
        let t = resolve("postgresql://weir@127.0.0.1:5433/lake", &env).unwrap();
        assert_eq!(t.config.get_password(), Some(&b"pa:ss"[..]));
        let t = resolve("postgresql://x@elsewhere/db", &env).unwrap();
        assert_eq!(t.config.get_password(), Some(&b"fallback"[..]));
        // Readable by others: ignored, as libpq does.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let t = resolve("postgresql://x@elsewhere/db", &env).unwrap();
        assert_eq!(t.config.get_password(), None);
    }
}
