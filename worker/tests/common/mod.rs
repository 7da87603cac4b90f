//! Shared test ground: the real S3 servers and Redis that
//! `scripts/with-test-servers.sh` starts (via `just test`) and their
//! addresses in the environment.
#![allow(dead_code)]

#[path = "bin.rs"]
mod bin;
pub use bin::worker_bin;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use bucketscan_core::scan::record::Record;
use futures::stream::{self, StreamExt};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Output;
use std::sync::atomic::{AtomicU32, Ordering};

/// One S3 server of the test ground.
#[derive(Clone)]
pub struct Server {
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the tests with `just test` (scripts/with-test-servers.sh starts the servers)")
    })
}

/// moto: in memory, stores every odd key faithfully, does not check signatures.
pub fn moto() -> Server {
    Server {
        endpoint: env("BUCKETSCAN_TEST_MOTO_ENDPOINT"),
        access_key: "testing".into(),
        secret_key: "testing".into(),
    }
}

/// versitygw: checks SigV4 signatures (posix backend, so no odd keys).
pub fn versitygw() -> Server {
    Server {
        endpoint: env("BUCKETSCAN_TEST_VGW_ENDPOINT"),
        access_key: env("BUCKETSCAN_TEST_VGW_ACCESS_KEY"),
        secret_key: env("BUCKETSCAN_TEST_VGW_SECRET_KEY"),
    }
}

/// MinIO: checks SigV4 signatures, holds most odd keys (not all: see
/// docs/testing.md).
pub fn minio() -> Server {
    Server {
        endpoint: env("BUCKETSCAN_TEST_MINIO_ENDPOINT"),
        access_key: env("BUCKETSCAN_TEST_MINIO_ACCESS_KEY"),
        secret_key: env("BUCKETSCAN_TEST_MINIO_SECRET_KEY"),
    }
}

impl Server {
    pub fn client(&self) -> aws_sdk_s3::Client {
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(&self.endpoint)
            .force_path_style(true)
            .credentials_provider(Credentials::new(
                &self.access_key,
                &self.secret_key,
                None,
                None,
                "test",
            ))
            .http_client(
                aws_smithy_http_client::Builder::new()
                    .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                        aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                    ))
                    .build_https(),
            )
            .request_checksum_calculation(aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired)
            .build();
        aws_sdk_s3::Client::from_conf(conf)
    }

    /// How many objects the bucket holds under `prefix` (up to 1,000).
    pub async fn key_count(&self, bucket: &str, prefix: &str) -> i32 {
        self.keys(bucket, prefix).await.len() as i32
    }

    /// The keys the bucket holds under `prefix` (up to 1,000), in the
    /// listing's order.
    pub async fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let page = self
            .client()
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .send()
            .await
            .unwrap();
        page.contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_string))
            .collect()
    }

    pub async fn delete(&self, bucket: &str, key: &str) {
        self.client()
            .delete_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .unwrap();
    }

    /// The whole body of an object.
    pub async fn read(&self, bucket: &str, key: &str) -> Vec<u8> {
        let got = self
            .client()
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {bucket}/{key}: {e:?}"));
        got.body.collect().await.unwrap().into_bytes().to_vec()
    }

    /// A fresh bucket with a unique name.
    pub async fn bucket(&self, tag: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "bs-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        self.client()
            .create_bucket()
            .bucket(&name)
            .send()
            .await
            .expect("create bucket");
        name
    }

    /// Put every object (body = `size` bytes) with its metadata, 32 at a time.
    pub async fn seed(&self, bucket: &str, objects: &BTreeMap<String, Seeded>) {
        let refused = self.try_seed(bucket, objects).await;
        if let Some((key, error)) = refused.iter().next() {
            panic!("put {key:?}: {error}");
        }
    }

    /// Put every object like `seed`; the keys the server refused, with its
    /// error code (each attempted once: a refusal is the server's rule).
    pub async fn try_seed(
        &self,
        bucket: &str,
        objects: &BTreeMap<String, Seeded>,
    ) -> BTreeMap<String, String> {
        let client = self.client();
        stream::iter(objects.iter())
            .map(|(key, obj)| {
                let client = client.clone();
                async move {
                    let mut put = client
                        .put_object()
                        .bucket(bucket)
                        .key(key)
                        .body(ByteStream::from(vec![b'x'; obj.size]));
                    for (k, v) in &obj.metadata {
                        put = put.metadata(k, v);
                    }
                    let refused = put.send().await.err().map(|e| {
                        use aws_sdk_s3::error::ProvideErrorMetadata;
                        e.code().map(str::to_string).unwrap_or_else(|| format!("{e:?}"))
                    });
                    refused.map(|code| (key.clone(), code))
                }
            })
            .buffer_unordered(32)
            .filter_map(|r| async move { r })
            .collect()
            .await
    }

    /// Run `bucketscan-worker ARGS` with this server's endpoint and credentials.
    pub fn worker(&self, args: &[&str]) -> Output {
        self.worker_with_secret(args, &self.secret_key)
    }

    pub fn worker_with_secret(&self, args: &[&str], secret: &str) -> Output {
        self.worker_env(args, &[("AWS_SECRET_ACCESS_KEY", secret)])
    }

    /// `bucketscan-worker ARGS` for this server with `env` set on top.
    pub fn worker_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = self.worker_command(&[], args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run bucketscan-worker")
    }

    /// `bucketscan-worker ARGS` for this server, run by `wrapper` (a program
    /// and its arguments, e.g. `faketime -f +2h`) when one is given.
    pub fn worker_command(&self, wrapper: &[&str], args: &[&str]) -> std::process::Command {
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut cmd = std::process::Command::new(program);
                cmd.args(rest).arg(worker_bin());
                cmd
            }
            None => std::process::Command::new(worker_bin()),
        };
        cmd.args(args)
            .args(["--endpoint", &self.endpoint, "--path-style"])
            .env("AWS_ACCESS_KEY_ID", &self.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret_key)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("AWS_PROFILE");
        cmd
    }

    /// The library's clients for this server, with its own credentials
    /// (static, as the operator gives them from a Secret).
    pub async fn s3(&self) -> std::sync::Arc<bucketscan_core::s3::S3> {
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
        let credentials = aws_credential_types::Credentials::new(
            &self.access_key,
            &self.secret_key,
            None,
            None,
            "bucketscan-test",
        );
        bucketscan_core::s3::S3::connect_with(
            bucketscan_core::s3::Endpoint {
                url: Some(self.endpoint.clone()),
                region: "us-east-1".into(),
                path_style: true,
                ca_pem: None,
                insecure: false,
                pool_size: 64,
                allowlist: None,
                max_answer_bytes: None,
            },
            Some(credentials),
        )
        .await
        .expect("connect")
    }
}

#[derive(Clone, Debug, Default)]
pub struct Seeded {
    pub size: usize,
    pub metadata: BTreeMap<String, String>,
}

/// Parse JSON Lines output into records, failing on any duplicate key.
pub fn parse_records(jsonl: &[u8]) -> BTreeMap<String, Record> {
    let mut out = BTreeMap::new();
    for line in jsonl.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let rec: Record = serde_json::from_slice(line)
            .unwrap_or_else(|e| panic!("bad line {:?}: {e}", String::from_utf8_lossy(line)));
        let key = rec.key.clone();
        assert!(
            out.insert(key.clone(), rec).is_none(),
            "{key:?} appears twice in the output"
        );
    }
    out
}

/// The output must hold exactly the seeded objects, with exact sizes and
/// metadata (names lower-cased, as S3 returns them).
pub fn assert_matches_seed(records: &BTreeMap<String, Record>, seeded: &BTreeMap<String, Seeded>) {
    let got: BTreeSet<&String> = records.keys().collect();
    let want: BTreeSet<&String> = seeded.keys().collect();
    let missing: Vec<_> = want.difference(&got).take(5).collect();
    let extra: Vec<_> = got.difference(&want).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, unexpected {extra:?}"
    );
    for (key, obj) in seeded {
        let rec = &records[key];
        assert_eq!(
            rec.status,
            bucketscan_core::scan::record::Status::Ok,
            "{key:?}: {rec:?}"
        );
        assert_eq!(rec.size, obj.size as u64, "{key:?}");
        let want_meta: BTreeMap<String, String> = obj
            .metadata
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        assert_eq!(rec.metadata, want_meta, "{key:?}");
        assert!(
            rec.etag
                .as_deref()
                .is_some_and(|e| !e.is_empty() && !e.contains('"')),
            "{key:?}: {rec:?}"
        );
        assert!(rec.last_modified.is_some(), "{key:?}");
    }
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn assert_success(out: &Output) {
    assert!(out.status.success(), "worker failed: {}", stderr(out));
}

pub fn temp_path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("bucketscan-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A redis-server of the test's own (for counting its commands, or for
/// options the shared one lacks), on a free loopback port; stopped on drop.
pub struct PrivateRedis {
    pub port: u16,
    args: Vec<String>,
    child: std::process::Child,
    starts: u32,
}

impl PrivateRedis {
    /// Plain TCP on a free port.
    pub fn start() -> PrivateRedis {
        PrivateRedis::start_with(|port| vec!["--port".into(), port.to_string()])
    }

    /// redis-server with the arguments `args` gives for a free port.
    pub fn start_with(args: impl Fn(u16) -> Vec<String>) -> PrivateRedis {
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let args = args(port);
            if let Some(child) = spawn_redis(&args, port, 0) {
                return PrivateRedis {
                    port,
                    args,
                    child,
                    starts: 1,
                };
            }
        }
        panic!("redis-server did not start")
    }

    /// `redis://127.0.0.1:PORT` (for servers started without TLS).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL the server, keep it down for `down`, start it again on the
    /// same port with the same arguments (and whatever it persisted).
    pub fn crash_and_restart(&mut self, down: std::time::Duration) {
        self.crash();
        std::thread::sleep(down);
        self.restart();
    }

    /// SIGKILL the server (it stays down until [`PrivateRedis::restart`]).
    pub fn crash(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Start it again on the same port with the same arguments.
    pub fn restart(&mut self) {
        self.child = spawn_redis(&self.args, self.port, self.starts).expect("redis-server restarts");
        self.starts += 1;
    }

    /// Commands the server ran, including those inside functions.
    pub fn commands_processed(&self, url: &str) -> u64 {
        let client = redis::Client::open(url).unwrap();
        let mut con = client.get_connection().unwrap();
        let info: String = redis::cmd("INFO").arg("stats").query(&mut con).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("INFO stats has total_commands_processed")
    }
}

/// Start redis-server; `None` when it exits first (its port was taken).
fn spawn_redis(args: &[String], port: u16, start: u32) -> Option<std::process::Child> {
    let log = temp_path(&format!("redis-{port}-{start}.log"));
    let mut child = std::process::Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--save", ""])
        .args(["--logfile", log.to_str().unwrap()])
        .args(args)
        .spawn()
        .expect("redis-server (scripts/install-deps.sh installs it)");
    for _ in 0..200 {
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("Ready to accept connections") {
            return Some(child);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA and a server certificate for 127.0.0.1 signed by it.
pub fn certificates(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=bucketscan-test-ca",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(dir.join("ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext",
    ]);
    dir.to_path_buf()
}

/// Wait for a child process to exit, at most `within`.
pub fn wait_exit(child: &mut std::process::Child, within: std::time::Duration) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "worker did not exit within {within:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The characters servers refuse in a `StartAfter` (so the client cuts it
/// before them on the wire and filters), one prefix each, every prefix more
/// than two LIST pages of 1,000 keys: listing any of them means following
/// continuation tokens through pages the client-side filter has emptied.
/// Only moto stores them all (versitygw lists `\u{1}` as U+FFFD).
pub fn control_character_keyspace() -> BTreeMap<String, Seeded> {
    let mut keys = BTreeMap::new();
    for (name, c) in [("tab", '\t'), ("soh", '\u{1}'), ("del", '\u{7f}')] {
        for i in 0..2100 {
            keys.insert(format!("{name}{c}{i:05}"), Seeded::default());
        }
    }
    keys
}

/// The Python of `scripts/install-deps.sh`, with duckdb and pyarrow.
pub fn venv_python() -> std::path::PathBuf {
    let home = std::env::var("HOME").expect("HOME");
    let python = std::path::Path::new(&home).join(".cache/bucketscan/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-deps.sh (it installs duckdb and pyarrow)",
        python.display()
    );
    python
}
