//! The README's front door, run as written: the tour's shell block, pasted into bash at
//! the repository's root, and the official `openai` SDK examples must print what the
//! README says they print (turn 2's answer from turn 1, the session's messages from the
//! log).

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::*;
use crate::interop::interop_python;

/// The README's section under `heading`, up to the next `## ` heading.
fn readme_section(heading: &str) -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let start = readme
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README has {heading:?}"));
    let section = &readme[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    section[..end].to_owned()
}

/// The fenced blocks of `section` in order, as (language, text).
fn blocks(section: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = section;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let Some(newline) = after.find('\n') else {
            break;
        };
        let language = after[..newline].trim().to_owned();
        let body = &after[newline + 1..];
        let close = body.find("```").expect("a closed block");
        found.push((language, body[..close].to_owned()));
        rest = &body[close + 3..];
    }
    found
}

/// The tour's first block in `language` (sh, text), exactly as a reader would copy it.
fn tour_block(language: &str) -> String {
    blocks(&readme_section("## A 60-second tour"))
        .into_iter()
        .find(|(l, _)| l == language)
        .unwrap_or_else(|| panic!("the tour has a {language} block"))
        .1
}

/// Session ids vary from run to run: every `sess_<hex>` becomes `sess_…`.
fn without_session_id(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text.trim_end();
    while let Some(at) = rest.find("sess_") {
        out.push_str(&rest[..at + 5]);
        rest = rest[at + 5..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
        out.push('…');
    }
    out.push_str(rest);
    out
}

/// Runs `script` in bash at the repository's root, as a reader pasting it would, with the
/// tour's ports moved to free ones (`TETHER_LISTEN`, `AGENT_PORT`) and `tether` being the
/// test's binary; whatever it leaves running after `timeout` is killed with its process
/// group. Returns stdout and stderr.
fn run_pasted(
    script: &str,
    env: &[(&str, &std::ffi::OsStr)],
    timeout: Duration,
) -> (String, String) {
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(repo_root())
        .env("TETHER_LISTEN", format!("127.0.0.1:{}", free_port()))
        .env("AGENT_PORT", free_port().to_string())
        .env("TETHER_BIN", env!("CARGO_BIN_EXE_tether"))
        .env_remove("TETHER_CONF")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let group = child.id() as i32;
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < timeout {
        std::thread::sleep(Duration::from_millis(50));
    }
    // The script kills what it started at its end; what it left goes with its group.
    let _ = Command::new("kill")
        .args(["-9", "--", &format!("-{group}")])
        .status();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The tour, pasted twice at once as two readers would (on their own ports, nothing else
/// set): each prints what the README says, and neither leaves anything at the repository
/// root (each keeps its log and store in its own temp dir).
#[test]
fn the_readme_tour_runs_as_written_twice_at_once() {
    let root_store = repo_root().join(".tether");
    let before = std::fs::metadata(&root_store)
        .and_then(|m| m.modified())
        .ok();
    let script = tour_block("sh");
    let runs: Vec<(String, String)> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| run_pasted(&script, &[], Duration::from_secs(60))))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let mut sessions = Vec::new();
    for (stdout, stderr) in &runs {
        let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
        let session = stdout
            .lines()
            .find_map(|l| l.strip_prefix("session: sess_"))
            .unwrap_or_else(|| panic!("no session id printed\n{context}"));
        assert!(!session.is_empty(), "{context}");
        sessions.push(session.to_owned());
        // What it prints is what the README says it prints.
        assert_eq!(
            without_session_id(stdout),
            without_session_id(&tour_block("text")),
            "{context}"
        );
    }
    assert_ne!(sessions[0], sessions[1]);
    let after = std::fs::metadata(&root_store)
        .and_then(|m| m.modified())
        .ok();
    assert_eq!(
        before, after,
        "the tour wrote nothing under the repository's .tether/"
    );
}

#[test]
fn the_readme_openai_sdk_examples_print_what_it_shows() {
    let Some(python) = interop_python() else {
        return;
    };
    let (_store, _agent, tether) = chat_gateway(&[]);
    let examples = blocks(&readme_section("## Use it from the OpenAI SDK"));
    let mut ran = 0;
    for pair in examples.windows(2) {
        let [(language, code), (output, expected)] = pair else {
            unreachable!()
        };
        if language != "python" {
            continue;
        }
        assert_eq!(output, "text", "each example is followed by what it prints");
        // As written, but for the gateway's port.
        let code = code.replace("http://127.0.0.1:8080", &tether.url());
        let out = Command::new(&python)
            .args(["-c", &code])
            .output()
            .expect("run python");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let context = format!(
            "{code}\nstderr:\n{}\ntether log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            tether.log_text()
        );
        assert!(out.status.success(), "{context}");
        assert_eq!(
            without_session_id(&stdout),
            without_session_id(expected),
            "{context}"
        );
        ran += 1;
    }
    assert_eq!(
        ran, 2,
        "one example per OpenAI surface (Responses, Chat Completions)"
    );
}

/// Whether `actual` is what the README's `expected` line shows: `…` stands for any text
/// (at the end of a line: the rest, cut off), and ids (runs of 16 or more hex digits)
/// for any id.
fn line_matches(expected: &str, actual: &str) -> bool {
    let mut pattern = String::new();
    let mut hex = String::new();
    for c in expected.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_hexdigit() && !c.is_ascii_uppercase() {
            hex.push(c);
            continue;
        }
        pattern.push_str(if hex.len() >= 16 { "…" } else { &hex });
        hex.clear();
        if c != '\0' {
            pattern.push(c);
        }
    }
    let parts: Vec<&str> = pattern.split('…').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return actual == first;
    }
    let Some(mut rest) = actual.strip_prefix(first) else {
        return false;
    };
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// `actual` against `expected` line by line; a line that is only `…` stands for any
/// number of lines. Returns the first expected line that found no match.
fn first_mismatch<'a>(expected: &[&'a str], actual: &[&str]) -> Option<&'a str> {
    match expected.split_first() {
        None if actual.is_empty() => None,
        None => Some("(the end, but more was printed)"),
        Some((&"…", rest)) => {
            let skipped = |skip: usize| first_mismatch(rest, &actual[skip..]).is_none();
            match (0..=actual.len()).any(skipped) {
                true => None,
                false => rest.first().copied().or(Some("…")),
            }
        }
        Some((line, rest)) => match actual.split_first() {
            Some((a, more)) if line_matches(line, a) => first_mismatch(rest, more),
            _ => Some(line),
        },
    }
}

#[test]
fn the_control_api_walkthrough_prints_what_it_shows() {
    let section = std::fs::read_to_string(repo_root().join("docs/control-api.md")).unwrap();
    let mut script = String::new();
    let mut expected: Vec<String> = Vec::new();
    let blocks = blocks(&section);
    for (language, text) in &blocks {
        match language.as_str() {
            "sh" => {
                script.push_str(text);
                let output = text.lines().filter_map(|l| l.strip_prefix("# "));
                expected.extend(output.map(str::to_owned));
            }
            "json" => expected.extend(text.lines().map(str::to_owned)),
            _ => {}
        }
    }
    let (stdout, stderr) = run_pasted(&script, &[], Duration::from_secs(120));
    let actual: Vec<&str> = stdout.lines().collect();
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    if let Some(line) = first_mismatch(&expected, &actual) {
        panic!(
            "docs/control-api.md's examples printed something else; first unmatched line:\n\
             {line}\n\nprinted:\n{stdout}\nstderr:\n{stderr}"
        );
    }
}

#[test]
fn the_readme_output_matcher_matches_what_it_should() {
    assert!(line_matches("a …", "a b c"));
    assert!(line_matches("x \"ckpt_…\" y", "x \"ckpt_01ab\" y"));
    assert!(line_matches(
        "req_01a24397fb74705ca4598300a1d4b51e",
        "req_77"
    ));
    assert!(!line_matches("id: 3", "id: 4"));
    assert!(!line_matches("a…c", "abd"));
    assert!(first_mismatch(&["1", "…", "9"], &["1", "2", "3", "9"]).is_none());
    assert!(first_mismatch(&["1", "…", "9"], &["1", "9"]).is_none());
    assert_eq!(first_mismatch(&["1", "2"], &["1"]), Some("2"));
    assert_eq!(first_mismatch(&["1", "…", "9"], &["1", "2"]), Some("9"));
}
