//! The deployment files, checked without a cluster or a Docker engine (neither exists
//! here): the Kustomize trees rendered by kubectl, validated against the Kubernetes
//! schemas and read for the sidecar's invariants (tests/deploy/check_kubernetes.py); the
//! Dockerfile and docker-compose.yml linted and read for their rules
//! (tests/deploy/check_container.py), and the compose file loaded by docker-compose.

use std::process::Command;

use super::interop::interop_python;
use crate::harness::*;

fn run_check(script: &str) {
    let Some(python) = interop_python() else {
        return;
    };
    let out = Command::new(python)
        .arg(repo_root().join(script))
        .arg(repo_root())
        .output()
        .expect("run the check");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{script} failed:\n{report}");
    assert!(!report.contains("FAIL"), "{report}");
}

#[test]
fn kubernetes_overlays_render_validate_and_keep_the_sidecar_invariants() {
    run_check("tests/deploy/check_kubernetes.py");
}

#[test]
fn the_dockerfile_and_compose_file_keep_their_rules() {
    run_check("tests/deploy/check_container.py");
}

/// `docker-compose.yml` loads in Debian's docker-compose (no engine is needed for this).
#[test]
fn compose_file_is_valid() {
    let compose = Command::new("docker-compose")
        .arg("-f")
        .arg(repo_root().join("docker-compose.yml"))
        .args(["config", "-q"])
        .output();
    match compose {
        Ok(out) => assert!(
            out.status.success(),
            "docker-compose config: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) if std::env::var_os("CI").is_some() => panic!("docker-compose is required in CI"),
        Err(_) => eprintln!("docker-compose is not installed: skipping the compose check"),
    }
}
