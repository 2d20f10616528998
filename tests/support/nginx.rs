//! A real nginx as an origin, started by the test on a socket it binds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use http::Request;

use super::{Conn, Resp};

/// A real nginx serving a directory, on a listening socket the test binds
/// (port 0) and hands over through nginx's `NGINX` inherited-socket
/// variable (as in its binary upgrade), so there is no port to guess and
/// no start-up to wait for. With a master process: a single process
/// crashes on inherited sockets (nginx 1.22).
pub struct Nginx {
    pub addr: SocketAddr,
    child: Child,
    dir: tempfile::TempDir,
    _listener: std::net::TcpListener,
}

impl Nginx {
    /// `None` (and a note on stderr) if nginx is not installed; `.ci/run`
    /// installs it.
    pub fn start(files: &[(&str, &str)]) -> Option<Nginx> {
        Nginx::start_with(files, "")
    }

    /// Like [`Nginx::start`], with `http` directives added to the config.
    pub fn start_with(files: &[(&str, &str)], http: &str) -> Option<Nginx> {
        let binary = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists());
        let Some(binary) = binary else {
            super::component::missing("nginx", "not installed (apt-get install -y nginx)");
            return None;
        };
        super::component::used("nginx");
        let dir = tempfile::tempdir().expect("tempdir");
        let www = dir.path().join("www");
        for (path, body) in files {
            let file = www.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(&file, body).expect("write");
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        // Inherited by nginx: the descriptor must survive exec.
        rustix::io::fcntl_setfd(&listener, rustix::io::FdFlags::empty()).expect("clear CLOEXEC");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
        let d = dir.path().display();
        let conf = format!(
            "daemon off;\nmaster_process on;\nworker_processes 1;\nuser root;\nerror_log {d}/error.log;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  {http}\n  access_log {d}/access.log;\n  client_body_temp_path {d}/t1;\n  proxy_temp_path {d}/t2;\n\
               fastcgi_temp_path {d}/t3;\n  uwsgi_temp_path {d}/t4;\n  scgi_temp_path {d}/t5;\n\
               server {{ listen {addr}; root {d}/www; }}\n}}\n"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write conf");
        let child = Command::new(binary)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .env("NGINX", format!("{fd};"))
            .stdin(Stdio::null())
            .spawn()
            .expect("start nginx");
        Some(Nginx {
            addr,
            child,
            dir,
            _listener: listener,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    /// An origin-form GET straight to nginx.
    pub async fn direct(&mut self, path: &str) -> Resp {
        let get = direct_get(self.addr, path);
        match tokio::time::timeout(std::time::Duration::from_secs(20), get).await {
            Ok(resp) => resp,
            Err(_) => {
                let status = self.child.try_wait();
                let log = std::fs::read_to_string(self.dir.path().join("error.log"));
                panic!("nginx did not answer ({status:?}): {log:?}");
            }
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // TERM, not KILL: the master then stops its worker too.
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let _ = self.child.wait();
    }
}

pub async fn direct_get(addr: SocketAddr, path: &str) -> Resp {
    let req = Request::get(path)
        .header("host", addr.to_string())
        .header("user-agent", DIRECT)
        .body(Bytes::new())
        .expect("request");
    Conn::open(addr).await.send(req).await
}

/// The User-Agent of requests sent to nginx directly, which tells them
/// apart in its access log (nginx writes a line after the response).
pub const DIRECT: &str = "direct-check";
