//! A real `redis-server` for the fleet tests, on a free loopback port,
//! and a real three-master Redis Cluster of them.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::until_within;

/// A `redis-server` child on a free loopback port, killed when dropped.
pub struct Redis {
    child: Child,
    pub port: u16,
}

impl Redis {
    /// Starts one and waits until it answers PING; `None` (with a message)
    /// when `redis-server` is not installed.
    pub async fn start() -> Option<Redis> {
        // redis-server needs an explicit port: take a free one.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        Redis::start_on(port).await
    }

    /// Starts one on `port` (a restart on the same address).
    pub async fn start_on(port: u16) -> Option<Redis> {
        Redis::start_with(port, &[]).await
    }

    /// Starts one on `port` with more `redis-server` arguments.
    async fn start_with(port: u16, more: &[&str]) -> Option<Redis> {
        let child = match Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(more)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                super::component::missing("redis-server", e);
                return None;
            }
        };
        super::component::used("redis-server");
        let redis = Redis { child, port };
        until_within(
            "redis-server to answer PING",
            Duration::from_secs(10),
            || async { redis.command(&["PING"]).await.map_err(|e| e.to_string()) },
        )
        .await;
        Some(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// From now on (30 s) Redis takes every command and answers none, as
    /// a hung server.
    pub async fn hang(&self) {
        assert_eq!(
            self.command(&["CLIENT", "PAUSE", "30000", "ALL"])
                .await
                .ok(),
            Some(redis::Value::Okay)
        );
    }

    /// One command on this server alone (on a cluster node, a key of
    /// another node's slot is answered with MOVED).
    pub async fn command(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let client = redis::Client::open(self.url())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query_async(&mut conn).await
    }

    /// `INFO commandstats` as text.
    pub async fn commandstats(&self) -> String {
        self.text(&["INFO", "commandstats"]).await
    }

    /// A command whose answer is text (`INFO`, `CLUSTER INFO`).
    pub async fn text(&self, args: &[&str]) -> String {
        match self.command(args).await {
            Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
            Ok(redis::Value::VerbatimString { text, .. }) => text,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    /// A command whose answer is a list of strings (`KEYS`, `ZRANGE`).
    pub async fn strings(&self, args: &[&str]) -> Vec<String> {
        match self.command(args).await {
            Ok(redis::Value::Array(items)) => items
                .into_iter()
                .map(|item| match item {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                    other => panic!("{args:?}: {other:?}"),
                })
                .collect(),
            other => panic!("{args:?}: {other:?}"),
        }
    }

    /// The keys this server holds that match `pattern`.
    pub async fn keys(&self, pattern: &str) -> Vec<String> {
        self.strings(&["KEYS", pattern]).await
    }

    /// `CLUSTER KEYSLOT key`.
    pub async fn keyslot(&self, key: &str) -> i64 {
        match self.command(&["CLUSTER", "KEYSLOT", key]).await {
            Ok(redis::Value::Int(slot)) => slot,
            other => panic!("CLUSTER KEYSLOT: {other:?}"),
        }
    }

    /// A command whose answer is an integer (`EXISTS`, `ZCARD`, `HSTRLEN`).
    pub async fn int(&self, args: &[&str]) -> i64 {
        match self.command(args).await {
            Ok(redis::Value::Int(n)) => n,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    /// Whether `key` exists.
    pub async fn exists(&self, key: &str) -> bool {
        self.int(&["EXISTS", key]).await == 1
    }

    /// The members of the sorted set `key`, in order.
    pub async fn zrange(&self, key: &str) -> Vec<String> {
        self.strings(&["ZRANGE", key, "0", "-1"]).await
    }

    /// How many clients are subscribed to `channel` (`PUBSUB NUMSUB`).
    pub async fn subscribers(&self, channel: &str) -> i64 {
        match self.command(&["PUBSUB", "NUMSUB", channel]).await {
            Ok(redis::Value::Array(v)) => match v.get(1) {
                Some(redis::Value::Int(n)) => *n,
                other => panic!("NUMSUB: {other:?}"),
            },
            other => panic!("NUMSUB: {other:?}"),
        }
    }

    /// Redis's own clock (`TIME`), in microseconds since the epoch: the
    /// clock the fleet's scripts read.
    pub async fn time_us(&self) -> u64 {
        let part = |v: &redis::Value| match v {
            redis::Value::BulkString(s) => String::from_utf8_lossy(s).parse::<u64>().ok(),
            _ => None,
        };
        match self.command(&["TIME"]).await {
            Ok(redis::Value::Array(t)) if t.len() == 2 => match (part(&t[0]), part(&t[1])) {
                (Some(s), Some(us)) => s * 1_000_000 + us,
                other => panic!("TIME: {other:?}"),
            },
            other => panic!("TIME: {other:?}"),
        }
    }

    /// Waits until Redis's clock has passed `at_us` (microseconds since
    /// the epoch): a time on that clock is over for every script.
    pub async fn until_clock_past(&self, at_us: u64) {
        until_within(
            &format!("Redis's clock to pass {at_us} µs"),
            Duration::from_secs(60),
            || async {
                let now = self.time_us().await;
                if now > at_us {
                    Ok(())
                } else {
                    Err(format!("{} µs to go", at_us - now))
                }
            },
        )
        .await;
    }

    /// Waits until the fleet's robots.txt entry `key` has expired on Redis's
    /// clock: past its `expires` (ms on that clock) by more than the
    /// millisecond the scripts round to. A node's own copy of an entry it
    /// stored expires no later: it gave Redis the time its copy had left.
    pub async fn until_entry_expired(&self, key: &str) {
        let expires = self.text(&["HGET", key, "expires"]).await;
        let ms: u64 = expires
            .parse()
            .unwrap_or_else(|e| panic!("{key} expires {expires:?}: {e}"));
        self.until_clock_past((ms + 2) * 1000).await;
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`STOP`, `CONT`) with kill(1): SIGSTOP leaves the
    /// port open and every connection unanswered, the slow failure.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill -{signal}: {status}");
    }

    /// SIGKILL (a stopped server too) and reaped.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A Redis Cluster of three masters (no replicas) on free loopback ports,
/// made with `redis-cli --cluster create`; its servers are killed when
/// dropped.
pub struct RedisCluster {
    pub nodes: Vec<Redis>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, joins them into one cluster
    /// and waits until every node says `cluster_state:ok`; `None` (with a
    /// message) when `redis-server` or `redis-cli` is not installed.
    pub async fn start() -> Option<RedisCluster> {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut nodes = Vec::new();
        for port in cluster_ports(3) {
            nodes.push(cluster_node(&dir, port).await?);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = tokio::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .await;
        match created {
            Ok(out) => assert!(
                out.status.success(),
                "redis-cli --cluster create: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => {
                super::component::missing("redis-cli", e);
                return None;
            }
        }
        let cluster = RedisCluster { nodes, _dir: dir };
        cluster.wait_ok().await;
        Some(cluster)
    }

    /// The nodes learn the slot assignment by gossip: polls each one's
    /// own view until all say the cluster is up.
    async fn wait_ok(&self) {
        for node in &self.nodes {
            let what = format!("node {} to say cluster_state:ok", node.port);
            until_within(&what, Duration::from_secs(30), || async {
                let info = node.text(&["CLUSTER", "INFO"]).await;
                if info.contains("cluster_state:ok") {
                    Ok(())
                } else {
                    Err(info)
                }
            })
            .await;
        }
    }

    /// Kills every node (their cluster configuration files stay).
    pub fn stop(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
    }

    /// Starts every node again on its port, from its cluster configuration
    /// file (same node ids and slots, no keys), and waits until the
    /// cluster is up.
    pub async fn restart(&mut self) {
        for node in &mut self.nodes {
            *node = cluster_node(&self._dir, node.port)
                .await
                .expect("redis-server restarts");
        }
        self.wait_ok().await;
    }

    /// The nodes' URLs: `fleet.redis` for the cluster.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Redis::url).collect()
    }
}

/// A cluster-enabled `redis-server` on `port`, its cluster configuration
/// file in `dir`.
async fn cluster_node(dir: &tempfile::TempDir, port: u16) -> Option<Redis> {
    let conf = dir.path().join(format!("nodes-{port}.conf"));
    let conf = conf.to_str().expect("utf-8 path");
    Redis::start_with(
        port,
        &["--cluster-enabled", "yes", "--cluster-config-file", conf],
    )
    .await
}

/// `n` free loopback ports whose cluster bus ports (port + 10000) are
/// free too.
fn cluster_ports(n: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::new();
    let mut held = Vec::new();
    while ports.len() < n {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        let port = listener.local_addr().expect("addr").port();
        let Some(bus) = port.checked_add(10000) else {
            continue;
        };
        if ports.contains(&port) || ports.contains(&bus) {
            continue;
        }
        if let Ok(bus_listener) = std::net::TcpListener::bind(("127.0.0.1", bus)) {
            ports.push(port);
            // Held until all are chosen, so no two are the same.
            held.push(listener);
            held.push(bus_listener);
        }
    }
    ports
}

/// A `redis-server` that speaks TLS on `tls_port` (and plain RESP on its
/// `port`, for the test's own commands), with a certificate for
/// `localhost` signed by a test CA whose PEM file is `ca_file`.
pub struct TlsRedis {
    pub redis: Redis,
    pub tls_port: u16,
    pub ca_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsRedis {
    /// `None` (with a message) when `redis-server` is not installed.
    pub async fn start() -> Option<TlsRedis> {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("CA");
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().expect("key");
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("certificate");
        let path = |name: &str| dir.path().join(name);
        std::fs::write(path("ca.pem"), ca_cert.pem()).expect("write");
        std::fs::write(path("redis.pem"), leaf.pem()).expect("write");
        std::fs::write(path("redis.key"), key.serialize_pem()).expect("write");
        let [port, tls_port] = [(); 2].map(|()| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("free port")
                .port()
        });
        let arg = |name: &str| path(name).to_str().expect("utf-8 path").to_string();
        let (cert, key, ca) = (arg("redis.pem"), arg("redis.key"), arg("ca.pem"));
        let tls_port_arg = tls_port.to_string();
        let redis = Redis::start_with(
            port,
            &[
                "--tls-port",
                &tls_port_arg,
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-auth-clients",
                "no",
            ],
        )
        .await?;
        Some(TlsRedis {
            redis,
            tls_port,
            ca_file: path("ca.pem"),
            _dir: dir,
        })
    }
}

/// A relay on a free loopback port in front of a Redis that holds every
/// answer back for [`SlowRelay::set_delay`] (zero at first): a Redis that
/// answers, slowly. [`SlowRelay::strand`] makes the connections open at
/// that moment half-open ones: nothing more passes either way and nothing
/// closes them, while connections made later are relayed.
pub struct SlowRelay {
    pub port: u16,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Bumped by `strand`: a connection accepted in an earlier epoch is
    /// stranded.
    epoch: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowRelay {
    pub async fn start(redis: &Redis) -> SlowRelay {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let delay_ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let epoch = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (upstream, delay, epochs) = (redis.port, delay_ms.clone(), epoch.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let delay = delay.clone();
                let epochs = epochs.clone();
                let born = epochs.load(Ordering::SeqCst);
                let stranded = move || epochs.load(Ordering::SeqCst) != born;
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up_stranded = stranded.clone();
                    let up = tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = cr.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            if up_stranded() {
                                // Half-open: the bytes are lost, the
                                // connection stays.
                                std::future::pending::<()>().await;
                            }
                            if sw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                    // Each chunk goes out `delay` after it came in: a
                    // constant latency, no queue behind a slow one.
                    let (tx, mut rx) =
                        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
                    let down = tokio::spawn(async move {
                        while let Some((at, bytes)) = rx.recv().await {
                            tokio::time::sleep_until(at).await;
                            if stranded() {
                                std::future::pending::<()>().await;
                            }
                            if cw.write_all(&bytes).await.is_err() {
                                break;
                            }
                        }
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match sr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let at = tokio::time::Instant::now()
                            + Duration::from_millis(delay.load(Ordering::Relaxed));
                        if tx.send((at, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                    drop(tx);
                    let _ = down.await;
                    up.abort();
                });
            }
        });
        SlowRelay {
            port,
            delay_ms,
            epoch,
            task,
        }
    }

    /// Every connection open now goes silent for good (a Redis host gone
    /// behind a firewall that drops its packets): neither closed nor
    /// answered. New connections are relayed as before.
    pub fn strand(&self) {
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Every answer from now on comes `delay` late.
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for SlowRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A fleet connection of its own on `redis` (fleet `name`, node `node`):
/// a 1 s timeout, `refuse` when Redis is unavailable. For tests that call
/// the fleet's scripts directly.
pub fn bare_fleet(
    redis: robots_proxy::measure::RedisTarget,
    name: &str,
    node: &str,
) -> robots_proxy::measure::Fleet {
    use robots_proxy::measure::{Fleet, FleetSettings, OnUnavailable};
    Fleet::new(&FleetSettings {
        redis,
        name: name.into(),
        node: node.into(),
        timeout: Duration::from_secs(1),
        on_unavailable: OnUnavailable::Refuse,
        keys: None,
    })
    .expect("fleet")
}
