//! A private PostgreSQL cluster a test can stop and start: `initdb` and `pg_ctl` from
//! /usr/lib/postgresql/*/bin, in a temporary directory, on a free port. As root (initdb
//! refuses root) the binaries run as the `postgres` user.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
    as_postgres: bool,
    /// Server settings given at every start (`-c name=value` each).
    settings: String,
}

/// The newest installed PostgreSQL's bin directory.
fn bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists() && p.join("pg_ctl").exists())
        .collect();
    dirs.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.pop()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    /// A new running cluster, or `None` (with a message) when PostgreSQL is not
    /// installed. In CI (`CI` set) a missing installation fails the test instead.
    #[allow(dead_code)]
    pub fn start() -> Option<Cluster> {
        Self::start_with(&[])
    }

    /// As [`Cluster::start`], with these server settings (name, value).
    #[allow(dead_code)]
    pub fn start_with(settings: &[(&str, &str)]) -> Option<Cluster> {
        let Some(bin) = bin_dir() else {
            if std::env::var_os("CI").is_some() {
                panic!("PostgreSQL binaries (initdb, pg_ctl) are required in CI: none under /usr/lib/postgresql/*/bin");
            }
            eprintln!("no initdb/pg_ctl under /usr/lib/postgresql/*/bin: skipping the outage test");
            return None;
        };
        let uid = Command::new("id").arg("-u").output().expect("id -u");
        let as_postgres = String::from_utf8_lossy(&uid.stdout).trim() == "0";
        let dir = tempfile::tempdir().unwrap();
        if as_postgres {
            let ok = Command::new("chown")
                .args(["postgres:", &dir.path().display().to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown the cluster directory to postgres");
        }
        let cluster = Cluster {
            bin,
            dir,
            port: free_port(),
            as_postgres,
            settings: settings
                .iter()
                .map(|(name, value)| format!(" -c {name}={value}"))
                .collect(),
        };
        let data = cluster.data();
        cluster.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        cluster.up();
        Some(cluster)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let output = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&exe)
                .args(args)
                .output()
        } else {
            Command::new(&exe).args(args).output()
        }
        .unwrap_or_else(|e| panic!("run {tool}: {e}"));
        assert!(
            output.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server and waits until it accepts connections.
    pub fn up(&self) {
        let data = self.data();
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off{}",
            self.port,
            self.dir.path().display(),
            self.settings
        );
        let log = self.dir.path().join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &data, "-o", &options, "-l", &log, "-w", "start"],
        );
    }

    /// Stops the server (fast: open connections are terminated) and waits.
    #[allow(dead_code)]
    pub fn down(&self) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    #[allow(dead_code)]
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let exe = self.bin.join("pg_ctl");
        let data = self.data();
        let args = ["-D", data.as_str(), "-m", "immediate", "stop"];
        let _ = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&exe)
                .args(args)
                .output()
        } else {
            Command::new(&exe).args(args).output()
        };
    }
}
