//! A real Redis with Sentinel for the tests: a primary, one replica of it
//! (`--replicaof`) and three sentinels (quorum 2, a node is down after 1 s),
//! each a redis-server of its own on a free loopback port with its own
//! temporary directory, all killed and removed on drop. The primary can be
//! killed (SIGKILL) and the failover awaited. A lagging ground puts the
//! primary behind a TCP proxy that can hold back what it sends its replica,
//! so that the replica the sentinels promote lacks the last writes the
//! primary acknowledged (a failover to an asynchronous replica that lagged).
//! Also used by worker/tests/sentinel.rs.
//!
//! redis-server must be installed (scripts/install-deps.sh): without it the
//! tests fail, they do not skip.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "mymaster";

/// One redis-server (data node or sentinel).
pub struct Node {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
}

impl Node {
    /// SIGKILL it (it stays down).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Passwords of the data nodes and of the sentinels, if any. With
/// `sentinel_user`, the address uses that user of the sentinels, which may
/// only find the master (docs/operations.md), with `sentinel_password`; the
/// sentinels' default user keeps that password and all rights (the tests'
/// own queries, the sentinels among themselves).
#[derive(Clone, Default)]
pub struct Auth {
    pub password: Option<String>,
    pub sentinel_password: Option<String>,
    pub sentinel_user: Option<String>,
}

/// What a sentinel user needs to find the master, and nothing more.
pub const SENTINEL_USER_RULES: &str =
    "-@all +ping +auth +hello +role +sentinel|masters +sentinel|get-master-addr-by-name";

pub struct SentinelGround {
    pub primary: Node,
    pub replica: Node,
    pub sentinels: Vec<Node>,
    /// The port everyone reaches the primary on: its own, or its proxy's.
    pub primary_port: u16,
    proxy: Option<Proxy>,
    auth: Auth,
}

impl SentinelGround {
    /// Primary, replica (synced), three sentinels that know each other and
    /// the replica: ready for a failover.
    pub fn start(auth: Auth) -> SentinelGround {
        SentinelGround::start_with(auth, false)
    }

    /// The same, with the primary behind a proxy (see
    /// [`SentinelGround::hold_replication`]). Everyone reaches it through
    /// the proxy, the sentinels and the replica too, so the sentinels see
    /// the replica replicating from the master they monitor.
    pub fn start_lagging(auth: Auth) -> SentinelGround {
        SentinelGround::start_with(auth, true)
    }

    fn start_with(auth: Auth, lagging: bool) -> SentinelGround {
        let primary = data_node("primary", &auth, None);
        let proxy = lagging.then(|| Proxy::start(primary.port));
        let primary_port = proxy.as_ref().map_or(primary.port, |p| p.port);
        let replica = data_node("replica", &auth, Some(primary_port));
        wait_for(&replica, "MASTER <-> REPLICA sync: Finished with success");
        let sentinels = (0..3)
            .map(|i| sentinel_node(&format!("sentinel{i}"), &auth, primary_port))
            .collect();
        let ground = SentinelGround {
            primary,
            replica,
            sentinels,
            primary_port,
            proxy,
            auth,
        };
        ground.wait_until_sentinels_ready();
        ground
    }

    /// From now on the primary's replication stream stops reaching the
    /// replica (a lagging ground only): what the primary acknowledges from
    /// here on is lost when it is killed.
    pub fn hold_replication(&self) {
        let proxy = self.proxy.as_ref().expect("a lagging ground");
        proxy.state.hold.store(true, Ordering::SeqCst);
    }

    /// `redis+sentinel://[:PASSWORD@]S1,S2,S3/mymaster[?sentinelPassword=P]`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        let userinfo = match &self.auth.password {
            Some(p) => format!(":{p}@"),
            None => String::new(),
        };
        let query = match (&self.auth.sentinel_user, &self.auth.sentinel_password) {
            (Some(u), Some(p)) => format!("?sentinelUser={u}&sentinelPassword={p}"),
            (None, Some(p)) => format!("?sentinelPassword={p}"),
            _ => String::new(),
        };
        format!("redis+sentinel://{userinfo}{}/{MASTER}{query}", hosts.join(","))
    }

    /// `redis://[:PASSWORD@]127.0.0.1:PORT`: one data node, directly.
    pub fn direct_url(&self, port: u16) -> String {
        match &self.auth.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{port}"),
            None => format!("redis://127.0.0.1:{port}"),
        }
    }

    /// Run `cmd` on the data node at `port`.
    pub fn on_node<T: redis::FromRedisValue>(&self, port: u16, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let client = redis::Client::open(self.direct_url(port))?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(2))?;
        cmd.query(&mut con)
    }

    /// Run `cmd` on the first sentinel that answers.
    pub fn on_sentinel<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let mut last = None;
        for sentinel in self.sentinels.iter().filter(|s| s.child.is_some()) {
            match self.sentinel_query(sentinel.port, cmd) {
                Ok(v) => return Ok(v),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("a sentinel runs"))
    }

    fn sentinel_query<T: redis::FromRedisValue>(&self, port: u16, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let url = match &self.auth.sentinel_password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{port}"),
            None => format!("redis://127.0.0.1:{port}"),
        };
        let client = redis::Client::open(url)?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(2))?;
        cmd.query(&mut con)
    }

    /// The port of the master the sentinels name now.
    pub fn master_port(&self) -> Option<u16> {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(MASTER);
        let addr: Option<(String, u16)> = self.on_sentinel(&cmd).ok()?;
        addr.map(|(_, port)| port)
    }

    /// Wait until the replica has every write the primary acknowledged, so
    /// that a test may expect them after a failover.
    pub fn wait_replicated(&self) {
        let acked: i64 = self
            .on_node(self.primary.port, redis::cmd("WAIT").arg(1).arg(5000))
            .expect("WAIT on the primary");
        assert_eq!(acked, 1, "the replica did not acknowledge the writes");
    }

    /// SIGKILL the primary (it stays down); behind a proxy, every
    /// connection through it is cut first, so what it held back never
    /// arrives.
    pub fn kill_primary(&mut self) {
        if let Some(proxy) = &self.proxy {
            proxy.cut();
        }
        self.primary.kill();
    }

    /// Wait until the sentinels name a master other than the killed
    /// primary and it answers as one; returns its port.
    pub fn wait_for_failover(&self, within: Duration) -> u16 {
        let deadline = Instant::now() + within;
        loop {
            if let Some(port) = self.master_port().filter(|p| *p != self.primary_port) {
                let role: redis::RedisResult<Vec<redis::Value>> = self.on_node(port, &redis::cmd("ROLE"));
                let first = role.ok().and_then(|v| v.into_iter().next());
                if first == Some(redis::Value::BulkString(b"master".to_vec())) {
                    return port;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no failover within {within:?}; sentinel log: {}",
                self.sentinels[0].log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until the data node at `port` says it is `role` (`master`,
    /// `slave`).
    pub fn wait_for_role(&self, port: u16, role: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let now: redis::RedisResult<Vec<redis::Value>> = self.on_node(port, &redis::cmd("ROLE"));
            let now = now.ok().and_then(|v| v.into_iter().next());
            if let Some(redis::Value::BulkString(name)) = &now {
                if name == role.as_bytes() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{port} is not {role} within {within:?}: {now:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every sentinel knows the two others and the replica (sentinels find
    /// each other through the primary's hello channel, every 2 s).
    fn wait_until_sentinels_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("MASTER").arg(MASTER);
        for sentinel in &self.sentinels {
            loop {
                let info: std::collections::HashMap<String, String> =
                    self.sentinel_query(sentinel.port, &cmd).unwrap_or_default();
                let field = |k: &str| info.get(k).map(String::as_str);
                if field("num-other-sentinels") == Some("2") && field("num-slaves") == Some("1") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "sentinel on {} not ready: {info:?}; its log: {}",
                    sentinel.port,
                    sentinel.log()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// A data node: the primary, or with `replica_of` a replica of it.
pub fn data_node(name: &str, auth: &Auth, replica_of: Option<u16>) -> Node {
    let mut args: Vec<String> = vec!["--save".into(), String::new(), "--appendonly".into(), "no".into()];
    if let Some(p) = &auth.password {
        args.extend([
            "--requirepass".into(),
            p.clone(),
            "--masterauth".into(),
            p.clone(),
        ]);
    }
    if let Some(port) = replica_of {
        args.extend(["--replicaof".into(), "127.0.0.1".into(), port.to_string()]);
    }
    start_node(name, |port, dir| {
        let mut all = vec![
            "--port".into(),
            port.to_string(),
            "--dir".into(),
            dir.display().to_string(),
        ];
        all.extend(args.iter().cloned());
        all
    })
}

/// A sentinel monitoring the primary at `primary` (quorum 2, down after
/// 1 s, a failover retried after 2 × 5 s).
fn sentinel_node(name: &str, auth: &Auth, primary: u16) -> Node {
    start_node(name, |port, dir| {
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 5000\n",
            dir = dir.display()
        );
        if let Some(p) = &auth.password {
            conf.push_str(&format!("sentinel auth-pass {MASTER} {p}\n"));
        }
        if let Some(p) = &auth.sentinel_password {
            conf.push_str(&format!("requirepass {p}\nsentinel sentinel-pass {p}\n"));
            if let Some(user) = &auth.sentinel_user {
                conf.push_str(&format!("user {user} on >{p} {SENTINEL_USER_RULES}\n"));
            }
        }
        // The sentinel rewrites its file: it must be its own, writable.
        let file = dir.join("sentinel.conf");
        std::fs::write(&file, conf).unwrap();
        vec![file.display().to_string(), "--sentinel".into()]
    })
}

/// Start redis-server with the arguments `args` gives for a free port and
/// a fresh directory, until it is ready (up to 5 ports, should one be
/// taken in between).
fn start_node(name: &str, args: impl Fn(u16, &Path) -> Vec<String>) -> Node {
    for _ in 0..5 {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "bucketscan-sentinel-{}-{name}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args(args(port, &dir))
            .args(["--logfile", &dir.join("log").display().to_string()])
            .spawn()
            .expect("redis-server (scripts/install-deps.sh installs it)");
        let mut node = Node {
            port,
            child: Some(child),
            dir,
        };
        if wait_ready(&mut node) {
            return node;
        }
    }
    panic!("redis-server {name} did not start")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// False when it exited first (its port was taken).
fn wait_ready(node: &mut Node) -> bool {
    for _ in 0..200 {
        let child = node.child.as_mut().expect("started");
        if child.try_wait().unwrap().is_some() {
            node.child = None;
            return false;
        }
        let log = node.log();
        // Sentinels say neither.
        if log.contains("Ready to accept connections") || log.contains("# Sentinel ID is") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("redis-server on {} not ready in 10 s: {}", node.port, node.log())
}

fn wait_for(node: &Node, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !node.log().contains(line) {
        assert!(Instant::now() < deadline, "no {line:?} in: {}", node.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TCP proxy in front of the primary. It forwards both ways, except that
/// while held it stops passing on what the primary sends on a replication
/// link (a connection whose client said `REPLCONF` or `PSYNC`); cut, it
/// closes every connection and accepts no more.
struct Proxy {
    port: u16,
    state: Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    hold: AtomicBool,
    cut: AtomicBool,
    /// Both sockets of every connection, to cut them.
    sockets: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState::default());
        let accepting = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if accepting.cut.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) {
                    relay_both_ways(client, server, &accepting);
                }
            }
        });
        Proxy { port, state }
    }

    fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        for socket in self.state.sockets.lock().unwrap().iter() {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn relay_both_ways(client: TcpStream, server: TcpStream, state: &Arc<ProxyState>) {
    state
        .sockets
        .lock()
        .unwrap()
        .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
    let replication = Arc::new(AtomicBool::new(false));
    let (up, down) = (state.clone(), state.clone());
    let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let is_link = replication.clone();
    std::thread::spawn(move || {
        relay(c, s, &up, |chunk| {
            if contains(chunk, b"REPLCONF") || contains(chunk, b"PSYNC") {
                is_link.store(true, Ordering::SeqCst);
            }
        })
    });
    std::thread::spawn(move || {
        relay(server, client, &down, |_| {
            // Stop reading while held: what the primary sends next stays
            // behind, and is gone when the connection is cut.
            while replication.load(Ordering::SeqCst) && down_held(&down) {
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    });
}

fn down_held(state: &ProxyState) -> bool {
    state.hold.load(Ordering::SeqCst) && !state.cut.load(Ordering::SeqCst)
}

/// Copy `from` to `to` until either closes or the proxy is cut, calling
/// `before` with each chunk before passing it on.
fn relay(mut from: TcpStream, mut to: TcpStream, state: &ProxyState, before: impl Fn(&[u8])) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        before(&buf[..n]);
        if state.cut.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
