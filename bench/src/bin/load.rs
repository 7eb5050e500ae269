//! bench-load: the load tool behind bench/run.sh. Every mode is bounded in count and time
//! and prints one JSON line of results on stdout.
//!
//! - `open`   open-loop fixed rate: requests are scheduled on a fixed timeline by a pacer
//!   thread and latency is measured from the *intended* send time, so a stalled
//!   server cannot hide its tail (no coordinated omission). The pacer's worst lateness
//!   is reported too: a frozen machine delays it as much as the server.
//! - `sat`    closed loop, N keep-alive connections, saturation requests/s.
//!   (`open` and `sat` with `--path /v1/chat/completions` send a non-streaming chat
//!   completion instead of a `GET`.)
//! - `sse`    C concurrent streaming model requests; time to first event and per-event
//!   delivery latency against the agent's `@t=` send timestamps.
//! - `idle`   C streams held open by the agent; RSS of the given pids before and after.
//! - `replay` create a run with N events, then subscribe to it from seq 0 repeatedly:
//!   time to first byte and events/s.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use serde_json::json;
use tether_bench::{
    find, get_request, load_request, markers, model_request, now_nanos, pct, with_header,
    BodyState, Conn,
};

#[derive(Parser)]
struct Cli {
    /// Runtime worker threads (1 = current-thread runtime).
    #[arg(long, default_value_t = 1, global = true)]
    threads: usize,
    /// Extra request header for `open` and `sat` ("Name: value"; repeatable), such as the
    /// API key of a Tether that authenticates.
    #[arg(long = "header", global = true)]
    headers: Vec<String>,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    Open {
        #[arg(long)]
        addr: String,
        #[arg(long, default_value = "/json")]
        path: String,
        #[arg(long)]
        rate: u64,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        #[arg(long, default_value_t = 64)]
        conns: usize,
    },
    Sat {
        #[arg(long)]
        addr: String,
        #[arg(long, default_value = "/json")]
        path: String,
        #[arg(long, default_value_t = 64)]
        conns: usize,
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
    Sse {
        #[arg(long)]
        addr: String,
        /// chat or responses
        #[arg(long, default_value = "chat")]
        surface: String,
        #[arg(long)]
        streams: usize,
        #[arg(long, default_value_t = 20)]
        events: u64,
        #[arg(long, default_value_t = 50)]
        delay_ms: u64,
        /// Sequential requests per stream.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 60.0)]
        timeout: f64,
        /// Each stream's rounds are turns of one named session (`x-session-id:
        /// <prefix>-<stream>`), so every round after a stream's first continues it; without
        /// it each request starts a new session.
        #[arg(long)]
        session: Option<String>,
    },
    Idle {
        #[arg(long)]
        addr: String,
        #[arg(long)]
        streams: usize,
        /// Comma-separated pids whose RSS is summed.
        #[arg(long)]
        pids: String,
        /// How long the agent holds each stream open after its first event.
        #[arg(long, default_value_t = 60_000)]
        hold_ms: u64,
        #[arg(long, default_value_t = 60.0)]
        timeout: f64,
        /// How long to keep the streams open after RSS is read, for a profiler to look at
        /// them (`bench/idle_mem.sh`); "idle: held" on stderr says when that starts.
        #[arg(long, default_value_t = 0)]
        linger_ms: u64,
    },
    Replay {
        #[arg(long)]
        addr: String,
        #[arg(long, default_value_t = 10_000)]
        events: u64,
        #[arg(long, default_value_t = 5)]
        repeats: usize,
        #[arg(long, default_value_t = 60.0)]
        timeout: f64,
    },
}

fn main() {
    let cli = Cli::parse();
    let rt = if cli.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cli.threads)
            .enable_all()
            .build()
    }
    .expect("runtime");
    let headers = cli.headers;
    let out = rt.block_on(async move {
        match cli.mode {
            Mode::Open {
                addr,
                path,
                rate,
                seconds,
                conns,
            } => open(addr, path, &headers, rate, seconds, conns).await,
            Mode::Sat {
                addr,
                path,
                conns,
                seconds,
            } => sat(addr, path, &headers, conns, seconds).await,
            Mode::Sse {
                addr,
                surface,
                streams,
                events,
                delay_ms,
                rounds,
                timeout,
                session,
            } => {
                let shape = Shape {
                    surface,
                    events,
                    delay_ms,
                    session,
                };
                sse(addr, shape, streams, rounds, timeout).await
            }
            Mode::Idle {
                addr,
                streams,
                pids,
                hold_ms,
                timeout,
                linger_ms,
            } => idle(addr, streams, pids, hold_ms, timeout, linger_ms).await,
            Mode::Replay {
                addr,
                events,
                repeats,
                timeout,
            } => replay(addr, events, repeats, timeout).await,
        }
    });
    println!("{out}");
}

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

async fn get_once(conn: &mut Conn, req: &[u8]) -> std::io::Result<u16> {
    conn.send(req).await?;
    let head = conn.read_head().await?;
    conn.drain(head.body).await?;
    Ok(head.status)
}

async fn open(
    addr: String,
    path: String,
    headers: &[String],
    rate: u64,
    seconds: f64,
    conns: usize,
) -> serde_json::Value {
    let total = (rate as f64 * seconds) as u64;
    let period = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let req = Arc::new(load_request(&addr, &path, headers));
    let errors = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..conns {
        let (rx, req, addr, errors) = (rx.clone(), req.clone(), addr.clone(), errors.clone());
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut conn = Conn::connect(&addr).await.ok();
            loop {
                let intended = match rx.lock().await.recv().await {
                    Some(t) => t,
                    None => break,
                };
                if conn.is_none() {
                    conn = Conn::connect(&addr).await.ok();
                }
                let ok = match conn.as_mut() {
                    Some(c) => matches!(
                        tokio::time::timeout(Duration::from_secs(5), get_once(c, &req)).await,
                        Ok(Ok(200))
                    ),
                    None => false,
                };
                if ok {
                    lat.push(us(intended.elapsed()));
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    conn = None;
                }
            }
            lat
        }));
    }
    // Give the workers a moment to connect so connection setup is not in the first samples.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    // The pacer's own lateness: when it wakes long after a send time, the machine did not
    // run the load tool either, and the requests' wait is not the server's alone.
    let pacer = std::thread::spawn(move || {
        let mut late_max = Duration::ZERO;
        for i in 0..total {
            let at = start + period * i as u32;
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            late_max = late_max.max(Instant::now().saturating_duration_since(at));
            if tx.send(at).is_err() {
                break;
            }
        }
        late_max
    });
    let mut lat = Vec::new();
    for w in workers {
        if let Ok(Ok(mut l)) =
            tokio::time::timeout(Duration::from_secs_f64(seconds + 30.0), w).await
        {
            lat.append(&mut l);
        }
    }
    let pacer_late_max = pacer.join().map(us).unwrap_or(0);
    let elapsed = start.elapsed().as_secs_f64();
    lat.sort_unstable();
    json!({
        "mode": "open", "rate": rate, "requests": total, "ok": lat.len(),
        "errors": errors.load(Ordering::Relaxed),
        "achieved_rps": lat.len() as f64 / elapsed,
        "p50_us": pct(&lat, 50.0), "p90_us": pct(&lat, 90.0), "p99_us": pct(&lat, 99.0),
        "p999_us": pct(&lat, 99.9), "max_us": lat.last().copied().unwrap_or(0),
        "pacer_late_max_us": pacer_late_max,
    })
}

async fn sat(
    addr: String,
    path: String,
    headers: &[String],
    conns: usize,
    seconds: f64,
) -> serde_json::Value {
    let req = Arc::new(load_request(&addr, &path, headers));
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut conns_v = Vec::new();
    for _ in 0..conns {
        conns_v.push(Conn::connect(&addr).await);
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for conn in conns_v {
        let (req, addr, done, errors) = (req.clone(), addr.clone(), done.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = conn.ok();
            while Instant::now() < deadline {
                if conn.is_none() {
                    conn = Conn::connect(&addr).await.ok();
                }
                let ok = match conn.as_mut() {
                    Some(c) => matches!(
                        tokio::time::timeout(Duration::from_secs(5), get_once(c, &req)).await,
                        Ok(Ok(200))
                    ),
                    None => false,
                };
                if ok {
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    json!({"mode": "sat", "conns": conns, "requests": n, "errors": errors.load(Ordering::Relaxed),
           "rps": n as f64 / elapsed})
}

/// Per-event delivery latencies (µs), time to first event (µs), complete?, and whether the
/// connection can be reused (a close-delimited body ends the connection with it).
async fn one_stream(
    conn: &mut Conn,
    req: &[u8],
    events: u64,
) -> std::io::Result<(Vec<u64>, Option<u64>, bool, bool)> {
    let t0 = Instant::now();
    conn.send(req).await?;
    let head = conn.read_head().await?;
    if head.status != 200 {
        conn.drain(head.body).await?;
        return Ok((Vec::new(), None, false, false));
    }
    let reusable = !matches!(head.body, tether_bench::Body::Close);
    let mut st = BodyState::new(head.body);
    let mut pending: Vec<u8> = Vec::new();
    let mut lat = Vec::new();
    let mut ttfe = None;
    let mut marks = Vec::new();
    while let Some(piece) = conn.piece(&mut st).await? {
        let now = now_nanos();
        pending.extend_from_slice(&piece);
        let mut consumed = 0;
        while let Some(pos) = find(&pending[consumed..], b"\n\n") {
            let ev = &pending[consumed..consumed + pos];
            // Only deltas: a final `response.completed` repeats the whole text.
            if find(ev, b"output_text.delta").is_some()
                || find(ev, b"chat.completion.chunk").is_some()
            {
                marks.clear();
                markers(ev, &mut marks);
                for m in &marks {
                    if ttfe.is_none() {
                        ttfe = Some(us(t0.elapsed()));
                    }
                    lat.push(now.saturating_sub(*m) / 1000);
                }
            }
            consumed += pos + 2;
        }
        pending.drain(..consumed);
    }
    let complete = lat.len() as u64 == events;
    Ok((lat, ttfe, complete, reusable))
}

/// What each request of `sse` asks for.
struct Shape {
    surface: String,
    events: u64,
    delay_ms: u64,
    /// Named sessions' prefix (`--session`).
    session: Option<String>,
}

async fn sse(
    addr: String,
    shape: Shape,
    streams: usize,
    rounds: usize,
    timeout: f64,
) -> serde_json::Value {
    let Shape {
        surface,
        events,
        delay_ms,
        session,
    } = shape;
    let req = model_request(&addr, &surface, events, delay_ms);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(timeout);
    // Stagger the starts over one inter-event gap so the streams are not in lockstep.
    let stagger = Duration::from_millis(delay_ms.max(1));
    let mut tasks = Vec::new();
    for i in 0..streams {
        let req = match &session {
            Some(prefix) => with_header(&req, &format!("x-session-id: {prefix}-{i}")),
            None => req.clone(),
        };
        let addr = addr.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(stagger * i as u32 / streams as u32).await;
            let mut lat = Vec::new();
            let mut ttfe = Vec::new();
            let mut medians = Vec::new();
            let (mut ok, mut bad) = (0u64, 0u64);
            let mut conn = None;
            for _ in 0..rounds {
                if Instant::now() >= deadline {
                    break;
                }
                if conn.is_none() {
                    conn = Conn::connect(&addr).await.ok();
                }
                let Some(c) = conn.as_mut() else {
                    bad += 1;
                    continue;
                };
                match tokio::time::timeout_at(deadline.into(), one_stream(c, &req, events)).await {
                    Ok(Ok((mut l, t, complete, reusable))) => {
                        if complete {
                            ok += 1
                        } else {
                            bad += 1
                        }
                        if !reusable {
                            conn = None;
                        }
                        if let Some(t) = t {
                            ttfe.push(t);
                        }
                        l.sort_unstable();
                        medians.push(pct(&l, 50.0));
                        lat.append(&mut l);
                    }
                    _ => {
                        bad += 1;
                        conn = None;
                    }
                }
            }
            (lat, ttfe, medians, ok, bad)
        }));
    }
    let (mut lat, mut ttfe, mut medians, mut ok, mut bad) =
        (Vec::new(), Vec::new(), Vec::new(), 0, 0);
    for t in tasks {
        if let Ok((mut l, mut f, mut m, o, b)) = t.await {
            lat.append(&mut l);
            ttfe.append(&mut f);
            medians.append(&mut m);
            ok += o;
            bad += b;
        }
    }
    lat.sort_unstable();
    ttfe.sort_unstable();
    medians.sort_unstable();
    json!({
        "mode": "sse", "surface": surface, "streams": streams, "events": events, "delay_ms": delay_ms,
        "runs_ok": ok, "runs_failed": bad, "samples": lat.len(),
        "elapsed_s": start.elapsed().as_secs_f64(),
        "ttfe_p50_us": pct(&ttfe, 50.0), "ttfe_p99_us": pct(&ttfe, 99.0),
        "lat_p50_us": pct(&lat, 50.0), "lat_p99_us": pct(&lat, 99.0), "lat_p999_us": pct(&lat, 99.9),
        "lat_max_us": lat.last().copied().unwrap_or(0),
        // The slowest stream's own median: one stream stuck behind another's wait shows here.
        "worst_stream_p50_us": medians.last().copied().unwrap_or(0),
    })
}

fn rss_kib(pids: &str) -> u64 {
    pids.split(',')
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{}/status", p.trim())).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .sum()
}

async fn idle(
    addr: String,
    streams: usize,
    pids: String,
    hold_ms: u64,
    timeout: f64,
    linger_ms: u64,
) -> serde_json::Value {
    let before = rss_kib(&pids);
    let req = Arc::new(model_request(&addr, "chat", 2, hold_ms));
    let ready = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let connecting = Arc::new(tokio::sync::Semaphore::new(128));
    let release = Arc::new(tokio::sync::Notify::new());
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(timeout);
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let (req, addr, ready, failed, connecting, release) = (
            req.clone(),
            addr.clone(),
            ready.clone(),
            failed.clone(),
            connecting.clone(),
            release.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let opened = async {
                let _permit = connecting.acquire().await.ok()?;
                let mut conn = Conn::connect(&addr).await.ok()?;
                conn.send(&req).await.ok()?;
                let head = conn.read_head().await.ok()?;
                if head.status != 200 {
                    return None;
                }
                let mut st = BodyState::new(head.body);
                let mut seen = Vec::new();
                let mut marks = Vec::new();
                // Wait for the first text delta: the stream is then open and idle.
                while marks.is_empty() {
                    let piece = conn.piece(&mut st).await.ok()??;
                    seen.extend_from_slice(&piece);
                    markers(&seen, &mut marks);
                }
                Some((conn, st))
            };
            match tokio::time::timeout_at(deadline.into(), opened).await {
                Ok(Some(held)) => {
                    ready.fetch_add(1, Ordering::Relaxed);
                    release.notified().await;
                    drop(held);
                }
                _ => {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    while ready.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed) < streams
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let open_s = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(&pids);
    let n = ready.load(Ordering::Relaxed);
    if linger_ms > 0 {
        eprintln!("idle: held");
        tokio::time::sleep(Duration::from_millis(linger_ms)).await;
    }
    release.notify_waiters();
    json!({
        "mode": "idle", "streams": streams, "open": n, "failed": failed.load(Ordering::Relaxed),
        "open_s": open_s, "rss_before_kib": before, "rss_after_kib": after,
        "bytes_per_stream": if n > 0 { (after.saturating_sub(before) * 1024) / n as u64 } else { 0 },
    })
}

async fn replay(addr: String, events: u64, repeats: usize, timeout: f64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs_f64(timeout);
    let setup = async {
        let mut conn = Conn::connect(&addr).await.ok()?;
        let t = Instant::now();
        conn.send(&model_request(&addr, "chat", events, 0))
            .await
            .ok()?;
        let head = conn.read_head().await.ok()?;
        let sid = head.header("x-session-id")?.to_owned();
        let inv = head.header("x-invocation-id")?.to_owned();
        conn.drain(head.body).await.ok()?;
        Some((sid, inv, t.elapsed().as_secs_f64()))
    };
    let Ok(Some((sid, inv, setup_s))) = tokio::time::timeout_at(deadline.into(), setup).await
    else {
        return json!({"mode": "replay", "error": "could not create the run"});
    };
    let path = format!(
        "/agentengine/api/v1/SubscribeRunEvents?SessionId={sid}&InvocationId={inv}&AfterSeqId=0"
    );
    let req = get_request(&addr, &path, &[]);
    let (mut ttfb, mut rates, mut counts) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeats {
        let one = async {
            let mut conn = Conn::connect(&addr).await.ok()?;
            let t0 = Instant::now();
            conn.send(&req).await.ok()?;
            let head = conn.read_head().await.ok()?;
            let mut st = BodyState::new(head.body);
            let mut first = None;
            let mut n = 0u64;
            let mut tail: Vec<u8> = Vec::new();
            while let Some(piece) = conn.piece(&mut st).await.ok()? {
                first.get_or_insert_with(|| us(t0.elapsed()));
                // Count events by their `data: ` lines, across piece boundaries.
                tail.extend_from_slice(&piece);
                let mut i = 0;
                while let Some(p) = find(&tail[i..], b"data: ") {
                    if tail.len() < i + p + 7 {
                        break;
                    }
                    if tail[i + p + 6] != b'[' {
                        n += 1;
                    }
                    i += p + 6;
                }
                tail.drain(..i);
            }
            Some((first?, n, t0.elapsed().as_secs_f64()))
        };
        if let Ok(Some((f, n, secs))) = tokio::time::timeout_at(deadline.into(), one).await {
            ttfb.push(f);
            rates.push((n as f64 / secs) as u64);
            counts.push(n);
        }
    }
    ttfb.sort_unstable();
    rates.sort_unstable();
    json!({
        "mode": "replay", "run_events_requested": events, "setup_s": setup_s, "repeats": ttfb.len(),
        "events_replayed": counts.first().copied().unwrap_or(0),
        "ttfb_p50_us": pct(&ttfb, 50.0), "ttfb_max_us": ttfb.last().copied().unwrap_or(0),
        "events_per_s_p50": pct(&rates, 50.0), "events_per_s_min": rates.first().copied().unwrap_or(0),
    })
}
