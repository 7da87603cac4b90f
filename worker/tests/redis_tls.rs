//! A scan through Redis over TLS with a password (`rediss://`), against a
//! redis-server of the test's own with certificates made by openssl.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const PASSWORD: &str = "s3cret-of-redis";

fn tls_redis(certs: &Path) -> PrivateRedis {
    let file = |name: &str| certs.join(name).to_str().unwrap().to_string();
    PrivateRedis::start_with(|port| {
        [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &file("server.crt"),
            "--tls-key-file",
            &file("server.key"),
            "--tls-ca-cert-file",
            &file("ca.crt"),
            "--tls-auth-clients",
            "no",
            "--requirepass",
            PASSWORD,
        ]
        .map(String::from)
        .to_vec()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_runs_over_tls_with_a_password_that_never_shows() {
    let certs = certificates(&temp_path("tls"));
    let redis = tls_redis(&certs);
    let s3 = versitygw();
    let bucket = s3.bucket("tls").await;
    let out = s3.bucket("tls-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..300)
        .map(|i| (format!("t/{i:04}"), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;

    let url = format!("rediss://:{PASSWORD}@127.0.0.1:{}", redis.port);
    let ca = certs.join("ca.crt");
    let worker = |args: &[&str], url: &str, ca: Option<&Path>| {
        let mut cmd = Command::new(worker_bin());
        cmd.args(args)
            .args(["--scan", "tls", "--endpoint", &s3.endpoint, "--path-style"])
            .env("BUCKETSCAN_REDIS_URL", url)
            .env("AWS_ACCESS_KEY_ID", &s3.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &s3.secret_key)
            .env("AWS_REGION", "us-east-1")
            .env("BUCKETSCAN_LOG", "debug");
        if let Some(ca) = ca {
            cmd.env("BUCKETSCAN_REDIS_CA_FILE", ca);
        }
        let out = cmd.output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
        assert!(!text.contains(PASSWORD), "the Redis password leaked: {text}");
        out
    };

    let untrusted = worker(&["merge"], &url, None);
    assert!(!untrusted.status.success());
    assert!(
        stderr(&untrusted).contains("cannot reach Redis"),
        "{}",
        stderr(&untrusted)
    );
    let wrong = format!("rediss://:wrong-password@127.0.0.1:{}", redis.port);
    let refused = worker(&["merge"], &wrong, Some(&ca));
    assert!(!refused.status.success());
    let err = stderr(&refused);
    assert!(
        err.contains("cannot reach Redis") && !err.contains("wrong-password"),
        "{err}"
    );

    let output = format!("s3://{out}/tls/");
    assert_success(&worker(
        &["plan", "--bucket", &bucket, "--output", &output],
        &url,
        Some(&ca),
    ));
    assert_success(&worker(&["run", "--name", "tls-worker"], &url, Some(&ca)));
    assert_success(&worker(&["merge"], &url, Some(&ca)));
    assert_matches_seed(&parse_records(&s3.read(&out, "tls/result.jsonl").await), &seeded);
}
