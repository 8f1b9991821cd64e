//! `observe::server` over real HTTP against a stub vLLM (a tokio TcpListener
//! answering each request from a route table, one connection per request):
//! server info from the captured 0.32 answers, the scrape loop's sampling,
//! final scrape and stop, and what each kind of failure gives.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use blis_sweep::observe::server::{self, CSV_HEADER, MetricsSample, ServerError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

const METRICS: &str = include_str!("../data/observe/metrics-0.32.txt");
const MODELS: &str = include_str!("../data/observe/models-0.32.json");

/// What the stub answers for a path, given how many requests came before
/// for the same path: (status, body).
type Route = dyn Fn(&str, u64) -> (u16, String) + Send + Sync;

/// Serves `route` on a free loopback port until the runtime ends; returns
/// the base URL.
async fn stub(route: Arc<Route>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let counts: Arc<std::sync::Mutex<std::collections::HashMap<String, u64>>> = Arc::default();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let route = route.clone();
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = sock.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    req.extend_from_slice(&buf[..n]);
                }
                let head = String::from_utf8_lossy(&req);
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                let n = {
                    let mut c = counts.lock().unwrap();
                    let e = c.entry(path.clone()).or_insert(0);
                    *e += 1;
                    *e - 1
                };
                let (status, body) = route(&path, n);
                let resp = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    base
}

fn vllm_route(path: &str, _n: u64) -> (u16, String) {
    match path {
        "/version" => (200, "{\"version\":\"0.32.0\"}".into()),
        "/v1/models" => (200, MODELS.into()),
        "/metrics" => (200, METRICS.into()),
        _ => (404, "{\"detail\":\"Not Found\"}".into()),
    }
}

#[tokio::test]
async fn server_info_reads_the_release_the_model_and_the_kv_cache() {
    let base = stub(Arc::new(vllm_route)).await;
    // A trailing slash on the base is the same server.
    let info = server::server_info(&format!("{base}/")).await.unwrap();
    assert_eq!(info.version, "0.32.0");
    let m = info.model("tiny").unwrap();
    assert_eq!(m.max_model_len, Some(4096));
    assert!(info.model("nope").is_none());
    let c = info.cache.unwrap();
    assert_eq!((c.block_size, c.num_gpu_blocks, c.enable_prefix_caching), (Some(32), Some(8192), Some(true)));
}

#[tokio::test]
async fn server_info_failures_name_the_url_and_the_reason() {
    // Not vLLM: no /version.
    let base = stub(Arc::new(|p: &str, n| if p == "/version" { (404, "nope".into()) } else { vllm_route(p, n) })).await;
    let err = server::server_info(&base).await.unwrap_err();
    assert!(matches!(err, ServerError::Http { status: 404, .. }), "{err}");
    assert_eq!(err.to_string(), format!("{base}/version: HTTP 404: nope"));

    // /v1/models answers something else.
    let base = stub(Arc::new(|p: &str, n| if p == "/v1/models" { (200, "{}".into()) } else { vllm_route(p, n) })).await;
    let err = server::server_info(&base).await.unwrap_err().to_string();
    assert_eq!(err, format!("{base}/v1/models: no array field \"data\""));

    // /metrics is an HTML page.
    let base =
        stub(Arc::new(|p: &str, n| if p == "/metrics" { (200, "<html>".into()) } else { vllm_route(p, n) })).await;
    let err = server::server_info(&base).await.unwrap_err().to_string();
    assert!(err.starts_with(&format!("{base}/metrics: metrics line 1: expected a metric name")), "{err}");

    // Nothing listens: bind a port, then free it.
    let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let err = server::server_info(&format!("http://127.0.0.1:{port}")).await.unwrap_err();
    assert!(matches!(err, ServerError::Connect { .. }), "{err}");
    assert!(err.to_string().starts_with(&format!("http://127.0.0.1:{port}/version: cannot reach the server")), "{err}");

    // A base without a scheme is an error, not a panic.
    let err = server::server_info("127.0.0.1:8000").await.unwrap_err();
    assert!(err.to_string().starts_with("127.0.0.1:8000/version: cannot reach the server: builder error"), "{err}");
}

/// `/metrics` whose running-requests gauge is the scrape's index, so each
/// row shows which scrape it came from.
fn counting_metrics(path: &str, n: u64) -> (u16, String) {
    match path {
        "/metrics" => (
            200,
            format!(
                "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine=\"0\",model_name=\"tiny\"}} {n}.0\n\
                 vllm:prefix_cache_hits_total{{engine=\"0\",model_name=\"tiny\"}} {}.0\n",
                n * 32
            ),
        ),
        _ => (404, String::new()),
    }
}

/// A clock that ticks 1000 µs at each read: rows with known times.
fn fake_clock() -> impl Fn() -> u64 {
    let t = AtomicU64::new(0);
    move || t.fetch_add(1000, Ordering::Relaxed) + 1000
}

#[tokio::test]
async fn scrape_loop_samples_until_stopped_then_once_more_and_writes_csv_rows() {
    let base = stub(Arc::new(counting_metrics)).await;
    let (tx, rx) = watch::channel(false);
    let mut csv = format!("{CSV_HEADER}\n").into_bytes();
    let mut seen = 0;
    let summary = server::scrape_loop(&base, Duration::from_millis(5), fake_clock(), rx, |s: &MetricsSample| {
        seen += 1;
        if seen == 3 {
            tx.send(true).unwrap();
        }
        s.write_csv_row(&mut csv)
    })
    .await
    .unwrap();
    // Three scrapes, the stop, one final scrape.
    assert_eq!((summary.samples, summary.failed, summary.first_error), (4, 0, None));
    assert_eq!(
        String::from_utf8(csv).unwrap(),
        format!("{CSV_HEADER}\n1.000,0,,,,0,,,\n2.000,1,,,,32,,,\n3.000,2,,,,64,,,\n4.000,3,,,,96,,,\n")
    );
}

#[tokio::test]
async fn scrape_loop_ends_when_the_stop_sender_is_dropped() {
    let base = stub(Arc::new(counting_metrics)).await;
    let (tx, rx) = watch::channel(false);
    let mut tx = Some(tx);
    let mut n = 0;
    let summary = server::scrape_loop(&base, Duration::from_millis(5), fake_clock(), rx, |_s: &MetricsSample| {
        n += 1;
        if n == 2 {
            tx.take();
        }
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(summary.samples, 3);
}

#[tokio::test]
async fn scrape_loop_counts_failed_scrapes_and_goes_on() {
    // Scrapes 1 and 2 (0-based) fail with 503; the rest answer.
    let base =
        stub(Arc::new(|p: &str, n| if (1..=2).contains(&n) { (503, "busy".into()) } else { counting_metrics(p, n) }))
            .await;
    let (tx, rx) = watch::channel(false);
    let mut rows = Vec::new();
    let summary = server::scrape_loop(&base, Duration::from_millis(5), fake_clock(), rx, |s: &MetricsSample| {
        rows.push(s.num_requests_running.unwrap());
        if rows.len() == 2 {
            tx.send(true).unwrap();
        }
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(rows, [0.0, 3.0, 4.0]);
    assert_eq!(summary.failed, 2);
    assert_eq!(summary.first_error.unwrap(), format!("{base}/metrics: HTTP 503: busy"));
}

#[tokio::test]
async fn scrape_loop_stops_on_a_body_that_is_not_prometheus_text_and_on_a_sink_error() {
    let base = stub(Arc::new(|_: &str, _| (200, "vllm:x 1\nvllm:y{a=\"b\" 2\n".to_string()))).await;
    let (_tx, rx) = watch::channel(false);
    let err = server::scrape_loop(&base, Duration::from_millis(5), fake_clock(), rx, |_: &MetricsSample| Ok(()))
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with(&format!("{base}/metrics: metrics line 2: ")), "{err}");

    let base = stub(Arc::new(counting_metrics)).await;
    let (_tx, rx) = watch::channel(false);
    let err = server::scrape_loop(&base, Duration::from_millis(5), fake_clock(), rx, |_: &MetricsSample| {
        Err(std::io::Error::other("disk full"))
    })
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "writing a metrics sample: disk full");

    let (_tx, rx) = watch::channel(false);
    let err = server::scrape_loop(&base, Duration::ZERO, fake_clock(), rx, |_: &MetricsSample| Ok(())).await;
    assert!(matches!(err, Err(ServerError::ZeroInterval)));
}
