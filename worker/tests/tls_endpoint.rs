//! An HTTPS S3 endpoint with a certificate from a private CA: a versitygw of
//! the test's own with TLS, certificates made by openssl. The CA file makes it
//! trusted, `--insecure-skip-tls-verify` skips the check, and neither is a
//! clear error. Objects are put in place as files (versitygw's posix backend
//! serves a directory per bucket), so no client needs to trust it first.

mod common;

use common::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct TlsGateway {
    endpoint: String,
    child: Child,
}

impl Drop for TlsGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_gateway(certs: &std::path::Path, data: &std::path::Path) -> TlsGateway {
    tls_gateway_on("127.0.0.1", certs, data)
}

/// The gateway listening on `ip` (a loopback address).
fn tls_gateway_on(ip: &str, certs: &std::path::Path, data: &std::path::Path) -> TlsGateway {
    let port = std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::fs::File::create(temp_path("versitygw-tls.log")).unwrap();
    let child = Command::new("versitygw")
        .args(["--port", &format!("{ip}:{port}")])
        .arg("--cert")
        .arg(certs.join("server.crt"))
        .arg("--key")
        .arg(certs.join("server.key"))
        .arg("posix")
        .arg(data)
        .env("ROOT_ACCESS_KEY", "tls-test")
        .env("ROOT_SECRET_KEY", "tls-test-secret")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("versitygw (scripts/install-servers.sh builds it)");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect((ip, port)).is_err() {
        assert!(Instant::now() < deadline, "versitygw with TLS did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    TlsGateway {
        endpoint: format!("https://{ip}:{port}"),
        child,
    }
}

fn scan(gateway: &TlsGateway, extra: &[&str]) -> std::process::Output {
    Command::new(worker_bin())
        .args([
            "scan",
            "--bucket",
            "secure",
            "--path-style",
            "--quiet",
            "--endpoint",
            &gateway.endpoint,
        ])
        .args(extra)
        .env("AWS_ACCESS_KEY_ID", "tls-test")
        .env("AWS_SECRET_ACCESS_KEY", "tls-test-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap()
}

#[test]
fn a_private_ca_is_trusted_by_file_or_skipped_on_request() {
    let certs = certificates(&temp_path("endpoint-tls"));
    let data = temp_path("tls-data");
    std::fs::create_dir_all(data.join("secure")).unwrap();
    for i in 0..40 {
        std::fs::write(data.join("secure").join(format!("obj-{i:02}")), vec![b'x'; i]).unwrap();
    }
    let gateway = tls_gateway(&certs, &data);

    for extra in [
        vec!["--ca-file", certs.join("ca.crt").to_str().unwrap()],
        vec!["--insecure-skip-tls-verify"],
    ] {
        let out = scan(&gateway, &extra);
        assert_success(&out);
        let records = parse_records(&out.stdout);
        assert_eq!(records.len(), 40, "{extra:?}");
        assert_eq!(records["obj-07"].size, 7);
        assert_eq!(
            records["obj-07"].status,
            bucketscan_core::scan::record::Status::Ok
        );
    }

    let untrusted = scan(&gateway, &[]);
    assert!(!untrusted.status.success());
    let err = stderr(&untrusted);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
}

/// A certificate for another name (here: issued for 127.0.0.1 and localhost,
/// served on 127.0.0.2) is refused even with the right CA, in one line that
/// names the host.
#[test]
fn a_certificate_for_another_name_is_refused() {
    let certs = certificates(&temp_path("endpoint-tls-name"));
    let data = temp_path("tls-name-data");
    std::fs::create_dir_all(data.join("secure")).unwrap();
    let gateway = tls_gateway_on("127.0.0.2", &certs, &data);
    let out = scan(&gateway, &["--ca-file", certs.join("ca.crt").to_str().unwrap()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("https://127.0.0.2:") && err.contains("certificate not valid for name \"127.0.0.2\""),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}
