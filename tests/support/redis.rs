//! A real `redis-server` for the fleet tests, on a free loopback port.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        let child = match Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("skipped: redis-server not available ({e})");
                return None;
            }
        };
        let redis = Redis { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if redis.command(&["PING"]).await.is_ok() {
                return Some(redis);
            }
            assert!(Instant::now() < deadline, "redis-server did not answer");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

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
        match self.command(&["INFO", "commandstats"]).await {
            Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
            Ok(redis::Value::VerbatimString { text, .. }) => text,
            other => panic!("INFO: {other:?}"),
        }
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
