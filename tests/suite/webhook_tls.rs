//! The webhook's transport over real TLS connections: dev certificates, TLS versions and
//! ALPN, health/readiness/metrics, body limits and content types, certificate hot reload
//! (kubelet symlink swap), start-up errors and graceful shutdown.
//!
//! Answer *content* (what a review decides) is tested in `webhook_reviews.rs`.

use crate::support;

use kim::testing::model::response_of;
use kim::testing::webhook::devcerts;
use kim::webhook::Settings;
use std::time::Duration;
use support::*;

const JSON: &str = "application/json";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_certs_are_generated_once_and_served() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("certs/dev");
    assert!(devcerts::ensure(&dir).unwrap(), "first call generates");
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(dir.join(f).is_file(), "{f} written");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "key is private: {mode:o}");
    }
    let before = std::fs::read(dir.join("tls.crt")).unwrap();
    assert!(
        !devcerts::ensure(&dir).unwrap(),
        "second call keeps the files"
    );
    assert_eq!(before, std::fs::read(dir.join("tls.crt")).unwrap());

    let server = start(&dir).await;
    let ca = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    let c = client(&[&ca], server.addr, false);
    let resp = c.get(url(server.addr, "/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "ok\n");

    // The IP SAN works too (no SNI is sent for an IP; the server has one certificate).
    let resp = c
        .get(format!("https://127.0.0.1:{}/healthz", server.addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);

    // A client that does not trust the dev CA is refused.
    let other = certs("some other CA");
    let err = client(&[&other.ca_pem], server.addr, false)
        .get(url(server.addr, "/healthz"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_routing() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    assert!(server.is_ready());
    let c = client(&[&c0.ca_pem], server.addr, false);
    let get = |p: &str| c.get(url(server.addr, p)).send();

    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    assert_eq!(get("/readyz").await.unwrap().status(), 200);
    assert_eq!(get("/nope").await.unwrap().status(), 404);
    assert_eq!(get("/validate").await.unwrap().status(), 405);
    let plain = reqwest::Client::new();
    let m = format!("http://{}", server.metrics_addr);
    assert_eq!(
        plain
            .get(format!("{m}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        plain
            .get(format!("{m}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    server.begin_shutdown();
    let r = get("/readyz").await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.text().await.unwrap(), "shutting down\n");
    assert_eq!(
        plain
            .get(format!("{m}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );
    assert_eq!(
        get("/healthz").await.unwrap().status(),
        200,
        "liveness is unaffected"
    );
}

/// `--shutdown-grace-seconds` takes any u64: the largest (`kim webhook
/// --shutdown-grace-seconds 18446744073709551615`, then SIGTERM) stops cleanly instead of
/// panicking on `grace + 1 s`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_shutdown_grace_stops_cleanly() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    tokio::time::timeout(
        Duration::from_secs(10),
        server.shutdown(Duration::from_secs(u64::MAX)),
    )
    .await
    .expect("an idle server stops at once")
    .expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_and_http1_both_work() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    for (http1, version) in [
        (false, reqwest::Version::HTTP_2),
        (true, reqwest::Version::HTTP_11),
    ] {
        let c = client(&[&c0.ca_pem], server.addr, http1);
        let r = c.get(url(server.addr, "/healthz")).send().await.unwrap();
        assert_eq!(r.version(), version);
        assert_eq!(r.status(), 200);
        let r = c
            .post(url(server.addr, "/validate"))
            .header("content-type", JSON)
            .body(review_json("v-1", 10))
            .send()
            .await
            .unwrap();
        assert_eq!(r.version(), version);
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], JSON);
        response_of(&r.bytes().await.unwrap(), "v-1");
    }
}

/// kube-apiserver cancels (`RST_STREAM`) every webhook call that reaches `timeoutSeconds`, and
/// an overloaded replica may not have accepted those streams yet. h2's default allows 20 such
/// resets on a connection, then answers `GOAWAY ENHANCE_YOUR_CALM "too_many_resets"` and closes
/// it, failing every other call on it (kube-apiserver: `http2: client connection force closed`).
/// kim allows as many as may be open at once: 100 streams opened and cancelled in one burst,
/// and the same connection still answers a review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_streams_do_not_close_an_h2_connection() {
    use rustls_pki_types::pem::PemObject;
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    kim::testing::webhook::certs::install_default_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(c0.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let io = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (mut h2, connection) = h2::client::handshake(io).await.unwrap();
    let post = || {
        http::Request::post(url(server.addr, "/validate"))
            .header("content-type", JSON)
            .body(())
            .unwrap()
    };
    // Queued before the connection is driven, so they reach the server in one burst, before it
    // accepts any of them.
    let mut cancelled = Vec::new();
    for _ in 0..100 {
        let (answer, mut body) = h2.send_request(post(), false).unwrap();
        body.send_reset(h2::Reason::CANCEL);
        cancelled.push(answer);
    }
    let connection = tokio::spawn(connection);
    let mut h2 = h2.ready().await.expect("the connection is open");
    let (answer, mut body) = h2.send_request(post(), false).unwrap();
    body.send_data(review_json("after-resets", 10).into(), true)
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("answered within 10 s")
        .expect("the connection still answers after 100 cancelled streams");
    assert_eq!(answer.status(), 200);
    let mut data = answer.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = data.data().await {
        let chunk = chunk.unwrap();
        data.flow_control().release_capacity(chunk.len()).unwrap();
        bytes.extend_from_slice(&chunk);
    }
    response_of(&bytes, "after-resets");
    drop(h2);
    drop(cancelled);
    connection.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_and_tls13_accepted_older_refused() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    for (min, max) in [
        (
            reqwest::tls::Version::TLS_1_2,
            reqwest::tls::Version::TLS_1_2,
        ),
        (
            reqwest::tls::Version::TLS_1_3,
            reqwest::tls::Version::TLS_1_3,
        ),
    ] {
        let c = builder(&[&c0.ca_pem], server.addr, false)
            .tls_version_min(min)
            .tls_version_max(max)
            .build()
            .unwrap();
        let r = c.get(url(server.addr, "/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{min:?}");
    }

    // rustls clients cannot speak TLS 1.1; use the openssl CLI when present.
    let port = server.addr.port();
    let out = tokio::task::spawn_blocking(move || {
        let run = |version: &str| {
            std::process::Command::new("openssl")
                .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
                .args([
                    "-servername",
                    "localhost",
                    version,
                    "-cipher",
                    "DEFAULT@SECLEVEL=0",
                ])
                .stdin(std::process::Stdio::null())
                .output()
        };
        (run("-tls1_2"), run("-tls1_1"))
    })
    .await
    .unwrap();
    let (Ok(tls12), Ok(tls11)) = out else {
        eprintln!("openssl CLI not available; TLS 1.1 refusal not checked");
        return;
    };
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(
        tls12.status.success(),
        "openssl TLS 1.2 control: {}",
        text(&tls12)
    );
    assert!(
        !tls11.status.success(),
        "TLS 1.1 must fail: {}",
        text(&tls11)
    );
    // The ClientHello went out and the server answered with a fatal alert (rustls sends
    // handshake_failure when no offered version is enabled).
    let t11 = text(&tls11);
    assert!(
        t11.contains("Protocol  : TLSv1.1") && t11.contains("SSL alert number"),
        "the server refuses TLS 1.1 with an alert: {t11}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_exposed() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    let c = client(&[&c0.ca_pem], server.addr, false);
    for _ in 0..3 {
        let r = c
            .post(url(server.addr, "/mutate"))
            .header("content-type", JSON)
            .body(review_json("m-1", 10))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let resp = reqwest::Client::new()
        .get(format!("http://{}/metrics", server.metrics_addr))
        .send()
        .await
        .unwrap();
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = resp.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");

    let count: f64 = text
        .lines()
        .filter(|l| l.starts_with("kim_webhook_requests_total{") && l.contains("path=\"/mutate\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(count, 3.0, "{text}");
    assert!(text.contains("decision=\"allowed\"") || text.contains("decision=\"denied\""));
    let buckets = text
        .lines()
        .filter(|l| {
            l.starts_with("kim_webhook_request_duration_seconds_bucket{") && l.contains("/mutate")
        })
        .count();
    assert_eq!(
        buckets,
        kim::testing::webhook::LATENCY_BUCKETS.len() + 1,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "kim_webhook_request_duration_seconds_count{path=\"/mutate\"}"
        ),
        Some(3.0)
    );
    assert_eq!(sample(&text, "kim_webhook_requests_in_flight"), Some(0.0));
    assert_eq!(
        sample(&text, "kim_webhook_cert_reloads_total{result=\"success\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "kim_webhook_cert_reloads_total{result=\"failure\"}"),
        Some(0.0)
    );

    let der = der_of(&c0.cert_pem);
    let (_, x509) = x509_parser::parse_x509_certificate(&der).unwrap();
    let expiry = sample(&text, "kim_webhook_cert_expiry_timestamp_seconds").unwrap();
    assert_eq!(expiry as i64, x509.validity().not_after.timestamp());
    assert!(expiry as i64 > chrono::Utc::now().timestamp());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_body_gets_a_413_review_and_the_server_keeps_serving() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    let big = review_json("big-1", 8 * 1024 * 1024);
    assert!(big.len() > kim::webhook::BODY_LIMIT);

    for http1 in [true, false] {
        let c = client(&[&c0.ca_pem], server.addr, http1);
        // With Content-Length.
        let r = c
            .post(url(server.addr, "/validate"))
            .header("content-type", JSON)
            .body(big.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "http1={http1}");
        let v = response_of(&r.bytes().await.unwrap(), "big-1");
        assert_eq!(v["allowed"], false, "{v}");
        assert_eq!(v["status"]["code"], 413, "{v}");

        // Streamed (chunked / h2 DATA frames without a declared length).
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            big.chunks(256 * 1024).map(|c| Ok(c.to_vec())).collect();
        let r = c
            .post(url(server.addr, "/mutate"))
            .header("content-type", JSON)
            .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "http1={http1}");
        let v = response_of(&r.bytes().await.unwrap(), "big-1");
        assert_eq!(v["status"]["code"], 413, "{v}");

        // Still serving, on the same client.
        let r = c
            .post(url(server.addr, "/validate"))
            .header("content-type", JSON)
            .body(review_json("small-1", 100))
            .send()
            .await
            .unwrap();
        response_of(&r.bytes().await.unwrap(), "small-1");
    }

    // Just under the limit is read whole (not refused as too large).
    let near = review_json("near-1", kim::webhook::BODY_LIMIT - 2048);
    assert!(near.len() <= kim::webhook::BODY_LIMIT);
    let r = client(&[&c0.ca_pem], server.addr, false)
        .post(url(server.addr, "/validate"))
        .header("content-type", JSON)
        .body(near)
        .send()
        .await
        .unwrap();
    let v = response_of(&r.bytes().await.unwrap(), "near-1");
    assert_ne!(v["status"]["code"], 413, "{v}");

    let text = scrape(server.metrics_addr).await;
    assert_eq!(sample(&text, "kim_webhook_requests_in_flight"), Some(0.0));
    assert!(
        text.contains(
            "kim_webhook_requests_total{path=\"/validate\",decision=\"denied\",code=\"413\"} 2"
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_type_must_be_json() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    let c = client(&[&c0.ca_pem], server.addr, false);
    let post = |ct: Option<&str>| {
        let mut b = c
            .post(url(server.addr, "/validate"))
            .body(review_json("ct-1", 10));
        if let Some(ct) = ct {
            b = b.header("content-type", ct);
        }
        b.send()
    };
    for ct in [
        Some("text/plain"),
        Some("application/yaml"),
        Some("application/jsonx"),
        None,
    ] {
        let r = post(ct).await.unwrap();
        assert_eq!(r.status(), 200, "{ct:?}");
        assert_eq!(r.headers()["content-type"], JSON);
        let v = response_of(&r.bytes().await.unwrap(), "ct-1");
        assert_eq!(v["allowed"], false, "{ct:?}: {v}");
        assert_eq!(v["status"]["code"], 400, "{ct:?}: {v}");
    }
    // A large body is refused the same way, its uid read from its start.
    let r = c
        .post(url(server.addr, "/validate"))
        .header("content-type", "text/plain")
        .body(review_json("ct-big", 3 * 1024 * 1024))
        .send()
        .await
        .unwrap();
    let v = response_of(&r.bytes().await.unwrap(), "ct-big");
    assert_eq!(v["status"]["code"], 400, "{v}");
    // Parameters and case do not matter.
    let answer = async |ct| {
        response_of(
            &post(Some(ct)).await.unwrap().bytes().await.unwrap(),
            "ct-1",
        )
    };
    let plain = answer(JSON).await;
    for ct in ["application/json; charset=utf-8", "Application/JSON"] {
        let v = answer(ct).await;
        assert_eq!(v["allowed"], plain["allowed"], "{ct}");
        assert_eq!(v["status"], plain["status"], "{ct}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_query_is_accepted() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    let c = client(&[&c0.ca_pem], server.addr, false);
    let mut answers = Vec::new();
    for path in ["/validate?timeout=10s", "/validate", "/mutate?timeout=30s"] {
        let r = c
            .post(url(server.addr, path))
            .header("content-type", JSON)
            .body(review_json("t-1", 10))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        answers.push(response_of(&r.bytes().await.unwrap(), "t-1"));
    }
    assert_eq!(answers[0]["allowed"], answers[1]["allowed"]);
    assert_eq!(answers[0]["status"], answers[1]["status"]);
}

/// Waits until a fresh connection is served `want` (DER), at most 10 s.
async fn new_connections_get(cas: &[&str], addr: std::net::SocketAddr, want: &[u8]) -> bool {
    eventually(Duration::from_secs(10), || async {
        let c = client(cas, addr, false);
        let r = c.get(url(addr, "/healthz")).send().await.ok()?;
        (peer_cert(&r) == want).then_some(())
    })
    .await
    .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_hot_reload_on_kubelet_symlink_swap() {
    let one = certs("ca one");
    let two = certs("ca two");
    let cas = [one.ca_pem.as_str(), two.ca_pem.as_str()];
    let mut kd = KubeletDir::new(&one.cert_pem, &one.key_pem);
    // Periodic re-read effectively off: the directory watch must notice the swap.
    let server = kim::webhook::start(Settings {
        reload_interval: Duration::from_secs(3600),
        ..Settings::local(kd.path())
    })
    .await
    .unwrap();

    let old_conn = client(&cas, server.addr, false);
    let r = old_conn
        .get(url(server.addr, "/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(peer_cert(&r), der_of(&one.cert_pem));

    let swapped = std::time::Instant::now();
    kd.swap(&two.cert_pem, &two.key_pem);
    assert!(
        new_connections_get(&cas, server.addr, &der_of(&two.cert_pem)).await,
        "new certificate not served within 10 s"
    );
    eprintln!("new certificate served after {:?}", swapped.elapsed());

    // The open connection keeps its certificate and keeps working.
    let r = old_conn
        .get(url(server.addr, "/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        peer_cert(&r),
        der_of(&one.cert_pem),
        "open connection untouched"
    );

    let text = scrape(server.metrics_addr).await;
    assert_eq!(
        sample(&text, "kim_webhook_cert_reloads_total{result=\"success\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "kim_webhook_cert_reloads_total{result=\"failure\"}"),
        Some(0.0)
    );
    let der_two = der_of(&two.cert_pem);
    let (_, x509) = x509_parser::parse_x509_certificate(&der_two).unwrap();
    assert_eq!(
        sample(&text, "kim_webhook_cert_expiry_timestamp_seconds").map(|v| v as i64),
        Some(x509.validity().not_after.timestamp())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_reload_by_periodic_reread_without_watch() {
    let one = certs("ca one");
    let two = certs("ca two");
    let cas = [one.ca_pem.as_str(), two.ca_pem.as_str()];
    let dir = plain_dir(&one);
    let server = kim::webhook::start(Settings {
        reload_interval: Duration::from_secs(1),
        watch_cert_dir: false,
        ..Settings::local(dir.path())
    })
    .await
    .unwrap();
    // Replace both files (key first, then certificate), each atomically by rename.
    for (name, pem) in [("tls.key", &two.key_pem), ("tls.crt", &two.cert_pem)] {
        let tmp = dir.path().join(format!(".{name}.tmp"));
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, dir.path().join(name)).unwrap();
    }
    assert!(new_connections_get(&cas, server.addr, &der_of(&two.cert_pem)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_reload_keeps_the_old_cert_and_counts_a_failure() {
    let one = certs("ca one");
    let two = certs("ca two");
    let three = certs("ca three");
    let cas = [one.ca_pem.as_str(), three.ca_pem.as_str()];
    let mut kd = KubeletDir::new(&one.cert_pem, &one.key_pem);
    let server = kim::webhook::start(Settings {
        reload_interval: Duration::from_secs(1),
        ..Settings::local(kd.path())
    })
    .await
    .unwrap();

    let failures = |n: f64| {
        let addr = server.metrics_addr;
        async move {
            eventually(Duration::from_secs(10), || async {
                let text = scrape(addr).await;
                (sample(&text, "kim_webhook_cert_reloads_total{result=\"failure\"}") == Some(n))
                    .then_some(())
            })
            .await
            .is_some()
        }
    };

    // Key of another certificate.
    kd.swap(&one.cert_pem, &two.key_pem);
    assert!(failures(1.0).await, "mismatch counted");
    // Not PEM at all.
    kd.swap("garbage", "garbage");
    assert!(failures(2.0).await, "bad PEM counted");
    // Same bad content re-read periodically is not counted again.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let text = scrape(server.metrics_addr).await;
    assert_eq!(
        sample(&text, "kim_webhook_cert_reloads_total{result=\"failure\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "kim_webhook_cert_reloads_total{result=\"success\"}"),
        Some(0.0)
    );

    let r = client(&cas, server.addr, false)
        .get(url(server.addr, "/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        peer_cert(&r),
        der_of(&one.cert_pem),
        "old certificate still served"
    );

    // A good certificate afterwards is picked up.
    kd.swap(&three.cert_pem, &three.key_pem);
    assert!(new_connections_get(&cas, server.addr, &der_of(&three.cert_pem)).await);
}

#[tokio::test]
async fn start_up_fails_clearly_on_bad_certificates() {
    let one = certs("ca one");
    let two = certs("ca two");

    let missing = tempfile::tempdir().unwrap();
    let err = kim::webhook::start(Settings::local(missing.path()))
        .await
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("cannot read") && msg.contains("tls.crt"),
        "{msg}"
    );

    let mismatch = tempfile::tempdir().unwrap();
    std::fs::write(mismatch.path().join("tls.crt"), &one.cert_pem).unwrap();
    std::fs::write(mismatch.path().join("tls.key"), &two.key_pem).unwrap();
    let err = kim::webhook::start(Settings::local(mismatch.path()))
        .await
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("does not match"), "{msg}");

    let garbage = tempfile::tempdir().unwrap();
    std::fs::write(garbage.path().join("tls.crt"), "not a certificate").unwrap();
    std::fs::write(garbage.path().join("tls.key"), &one.key_pem).unwrap();
    let err = kim::webhook::start(Settings::local(garbage.path()))
        .await
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("no PEM CERTIFICATE"), "{msg}");

    let no_key = tempfile::tempdir().unwrap();
    std::fs::write(no_key.path().join("tls.crt"), &one.cert_pem).unwrap();
    std::fs::write(no_key.path().join("tls.key"), &one.cert_pem).unwrap();
    let err = kim::webhook::start(Settings::local(no_key.path()))
        .await
        .unwrap_err();
    assert!(format!("{err:#}").contains("private key"), "{err:#}");
}

#[tokio::test]
async fn run_returns_an_error_on_an_unusable_cert_dir() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: kim::webhook::WebhookArgs,
    }
    let missing = tempfile::tempdir().unwrap();
    let cli = Cli::try_parse_from([
        "kim",
        "--cert-dir",
        missing.path().to_str().unwrap(),
        "--addr",
        "127.0.0.1:0",
        "--metrics-addr",
        "127.0.0.1:0",
    ])
    .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), kim::webhook::run(cli.args))
        .await
        .expect("run returns instead of serving")
        .unwrap_err();
    assert!(format!("{err:#}").contains("tls.crt"), "{err:#}");

    // Flags: defaults, repeatable --compat, and errors.
    let cli =
        Cli::try_parse_from(["kim", "--dev", "--compat", "terminatingConditionType"]).unwrap();
    assert_eq!(cli.args.addr.to_string(), "0.0.0.0:9443");
    assert_eq!(cli.args.metrics_addr.to_string(), "0.0.0.0:8080");
    assert_eq!(cli.args.shutdown_grace_seconds, 25);
    assert_eq!(
        cli.args.effective_cert_dir().unwrap(),
        std::path::Path::new("certs/dev")
    );
    assert_eq!(cli.args.policy.compat.len(), 1);
    assert_eq!(
        cli.args.settings().unwrap().malloc_trim,
        Duration::from_secs(10)
    );
    for (flag, period) in [("0", Duration::ZERO), ("3", Duration::from_secs(3))] {
        let cli = Cli::try_parse_from(["kim", "--dev", "--malloc-trim-seconds", flag]).unwrap();
        assert_eq!(cli.args.settings().unwrap().malloc_trim, period, "{flag}");
    }
    assert!(Cli::try_parse_from(["kim", "--dev", "--malloc-trim-seconds", "-1"]).is_err());
    assert!(Cli::try_parse_from(["kim", "--compat", "nope"]).is_err());
    let cli = Cli::try_parse_from(["kim"]).unwrap();
    assert!(
        cli.args.effective_cert_dir().is_err(),
        "--cert-dir required without --dev"
    );
    let cli = Cli::try_parse_from(["kim", "--dev", "--allowed-writers", "a,,b"]).unwrap();
    assert!(cli.args.settings().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_the_in_flight_request() {
    let c0 = certs("ca");
    let dir = plain_dir(&c0);
    let server = start(dir.path()).await;
    let (addr, metrics_addr, metrics) = (server.addr, server.metrics_addr, server.metrics());

    // A slow upload: the first half of the body now, the rest after shutdown began.
    let body = review_json("inflight-1", 64 * 1024);
    let (first, rest) = body.split_at(body.len() / 2);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let c = client(&[&c0.ca_pem], addr, true);
    let request = tokio::spawn(
        c.post(url(addr, "/validate"))
            .header("content-type", JSON)
            .body(reqwest::Body::wrap_stream(stream))
            .send(),
    );
    tx.send(Ok(first.to_vec())).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            (sample(&metrics.encode(), "kim_webhook_requests_in_flight") == Some(1.0)).then_some(())
        })
        .await
        .is_some(),
        "request in flight"
    );

    let began = std::time::Instant::now();
    let shutdown = tokio::spawn(server.shutdown(Duration::from_secs(10)));

    // Readiness goes 503 and new connections are refused…
    let plain = reqwest::Client::new();
    assert!(
        eventually(Duration::from_secs(5), || async {
            let r = plain
                .get(format!("http://{metrics_addr}/readyz"))
                .send()
                .await
                .ok()?;
            (r.status() == 503).then_some(())
        })
        .await
        .is_some(),
        "readiness 503 during shutdown"
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            tokio::net::TcpStream::connect(addr)
                .await
                .is_err()
                .then_some(())
        })
        .await
        .is_some(),
        "listener closed"
    );

    // …while the in-flight request completes.
    tx.send(Ok(rest.to_vec())).await.unwrap();
    drop(tx);
    let resp = request.await.unwrap().expect("in-flight request answered");
    assert_eq!(resp.status(), 200);
    response_of(&resp.bytes().await.unwrap(), "inflight-1");

    shutdown.await.unwrap().expect("clean shutdown");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
}
