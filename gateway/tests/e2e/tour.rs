//! The README's tour, run as written: its shell block, pasted into bash at the repository's
//! root, must print turn 2's answer from turn 1 and the session's messages from the log.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::repo_root;

/// The first `sh` block after the tour's heading, exactly as a reader would copy it.
fn tour_script() -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let tour = &readme[readme
        .find("## A 60-second tour")
        .expect("README has the tour")..];
    let block = &tour[tour.find("```sh\n").expect("the tour has a sh block") + 6..];
    block[..block.find("```").unwrap()].to_string()
}

#[test]
fn the_readme_tour_runs_as_written() {
    // The tour names fixed ports, as a person would type them.
    for port in [8080, 9000] {
        assert!(
            TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is in use: the README tour needs it free"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(tour_script())
        .current_dir(repo_root())
        .env("TETHER_BIN", env!("CARGO_BIN_EXE_tether"))
        .env("TETHER_STORE", dir.path().join("sessions.sqlite"))
        .env_remove("TETHER_CONF")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let group = child.id() as i32;
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Whatever the script left running (it kills its own at the end) goes with its group.
    let _ = Command::new("kill")
        .args(["-9", "--", &format!("-{group}")])
        .status();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    let session = stdout
        .lines()
        .find_map(|l| l.strip_prefix("session: sess_"))
        .unwrap_or_else(|| panic!("no session id printed\n{context}"));
    assert!(!session.is_empty(), "{context}");
    assert!(stdout.lines().any(|l| l == "answer: zebra42"), "{context}");
    let log: Vec<&str> = stdout.lines().filter(|l| l.contains("|message|")).collect();
    assert_eq!(log.len(), 4, "{context}");
    assert!(
        log[0].ends_with("|message|user|My project is named zebra42. Reply with OK."),
        "{context}"
    );
    assert!(
        log[2].ends_with("|message|user|What is my project named?"),
        "{context}"
    );
    assert!(log[3].ends_with("|message|assistant|zebra42"), "{context}");
}
