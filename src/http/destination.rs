//! Destination policy: which addresses the proxy may connect to (pure: no
//! I/O), enforced where the connection is made (the upstream client's
//! connector, [`crate::upstream::guarded`], and the plain-http and tunnel
//! connects), so a name that resolves to a private
//! address, an IP literal in a redirect and the proxy's own listeners are
//! refused alike, and DNS rebinding cannot slip past a check made earlier.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// True for addresses a proxy on the open internet must not reach on a
/// client's behalf: loopback, private (RFC 1918, unique-local), link-local,
/// shared (CGNAT), unspecified, broadcast, multicast, reserved,
/// documentation and benchmarking ranges, and IPv6 forms that embed such an
/// IPv4 address (mapped, translated, NAT64, 6to4, Teredo).
pub(crate) fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => is_private_v6(v6),
    }
}

fn is_private_v4(v4: Ipv4Addr) -> bool {
    let o = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10 shared address space
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0.0/24 protocol assignments
        || (o[0] == 192 && o[1] == 0 && o[2] == 2) // 192.0.2.0/24 documentation
        || (o[0] == 198 && o[1] == 51 && o[2] == 100) // 198.51.100.0/24 documentation
        || (o[0] == 203 && o[1] == 0 && o[2] == 113) // 203.0.113.0/24 documentation
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18.0.0/15 benchmarking
        || (o[0] == 192 && o[1] == 88 && o[2] == 99) // 192.88.99.0/24 6to4 relays
        || o[0] >= 240 // 240.0.0.0/4 reserved
}

fn is_private_v6(v6: Ipv6Addr) -> bool {
    let s = v6.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if let Some(v4) = v6.to_ipv4_mapped() {
        return is_private_v4(v4); // ::ffff:a.b.c.d
    }
    match s {
        // ::, ::1 and the deprecated IPv4-compatible ::a.b.c.d (never
        // routed as such; whatever they reach is not the internet).
        [0, 0, 0, 0, 0, 0, _, _] => return true,
        // IPv4-translated ::ffff:0:a.b.c.d (SIIT).
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => return is_private_v4(embedded(hi, lo)),
        // NAT64 well-known prefix 64:ff9b::/96.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => return is_private_v4(embedded(hi, lo)),
        _ => {}
    }
    let teredo_client = embedded(!s[6], !s[7]);
    v6.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated)
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) // local-use NAT64 64:ff9b:1::/48
        || (s[0] == 0x100 && s[1] == 0 && s[2] == 0 && s[3] == 0) // discard-only 100::/64
        || (s[0] == 0x2001 && s[1] == 0xdb8) // documentation 2001:db8::/32
        || (s[0] == 0x3fff && (s[1] & 0xf000) == 0) // documentation 3fff::/20
        || (s[0] == 0x2002 && is_private_v4(embedded(s[1], s[2]))) // 6to4 2002::/16
        // Teredo 2001::/32: the server's address, and the client's, stored inverted.
        || (s[0] == 0x2001
            && s[1] == 0
            && (is_private_v4(embedded(s[2], s[3])) || is_private_v4(teredo_client)))
}

/// The key per-client limits count a client address under: IPv4 (and
/// IPv4-mapped IPv6) as it is, IPv6 by its /64, the block one host
/// usually holds whole, so rotating addresses within it does not multiply
/// a limit.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

/// Why the policy refused a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A private or local address, and `allow_private_destinations` is off.
    Private,
    /// One of the proxy's own listeners (refused whatever the setting, so
    /// a client cannot reach the admin listener through the proxy).
    OwnListener,
}

/// The error a refused destination produces; found again in an error's
/// causes to answer 403 instead of 502. Its text names the host and never
/// what a connect would have said, so it tells nothing about reachability.
#[derive(Clone, Debug)]
pub(crate) struct PrivateDestination {
    pub(crate) host: String,
    /// The address refused: kept for the server log; not shown for names,
    /// so internal DNS records are not told to clients.
    pub(crate) addr: SocketAddr,
    pub(crate) why: Refusal,
}

impl std::fmt::Display for PrivateDestination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let literal = strip_brackets(&self.host).parse::<IpAddr>().is_ok();
        match (self.why, literal) {
            (Refusal::OwnListener, _) => write!(
                f,
                "refused by destination policy: {} port {} is this proxy's own listener, never a destination",
                self.host,
                self.addr.port()
            ),
            (Refusal::Private, true) => write!(
                f,
                "refused by destination policy: {} is a private or local address; \
                 set allow_private_destinations to permit it",
                self.host
            ),
            (Refusal::Private, false) => write!(
                f,
                "refused by destination policy: {} resolves to a private or local address; \
                 set allow_private_destinations to permit it",
                self.host
            ),
        }
    }
}

impl std::error::Error for PrivateDestination {}

/// `[v6]` → `v6`, as hyper-util does before it decides a host is a literal.
pub(crate) fn strip_brackets(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// The listeners of the other nodes of a fleet, refused as destinations
/// like the proxy's own: kept up to date by the fleet's heartbeat. Cheap
/// to clone (one shared list).
#[derive(Clone, Debug, Default)]
pub struct PeerListeners(Arc<parking_lot::RwLock<Arc<[SocketAddr]>>>);

impl PeerListeners {
    /// Replaces the list.
    pub fn set(&self, addrs: Vec<SocketAddr>) {
        *self.0.write() = addrs.into();
    }

    /// The list now.
    pub fn get(&self) -> Arc<[SocketAddr]> {
        self.0.read().clone()
    }

    /// True if `f` holds for one of the listeners, looked through under
    /// the lock (no count of the list taken and given back).
    fn any(&self, f: impl FnMut(&SocketAddr) -> bool) -> bool {
        self.0.read().iter().any(f)
    }
}

/// The destination policy: private addresses (unless allowed), the
/// proxy's own listeners and its fleet's other nodes' are refused. Cheap
/// to clone.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    allow_private: bool,
    own_listeners: Arc<[SocketAddr]>,
    /// The fleet's other nodes' listeners (empty without a fleet).
    peers: PeerListeners,
    /// Addresses counted as public: a test seam, so that a loopback origin
    /// can stand for a public one while the policy is on.
    treat_as_public: Arc<[SocketAddr]>,
}

impl Policy {
    pub fn new(allow_private: bool) -> Policy {
        Policy {
            allow_private,
            ..Policy::default()
        }
    }

    /// The addresses the proxy listens on, refused as destinations.
    pub(crate) fn with_own_listeners(
        mut self,
        addrs: impl IntoIterator<Item = SocketAddr>,
    ) -> Policy {
        self.own_listeners = addrs.into_iter().collect();
        self
    }

    /// The fleet's other nodes' listeners, refused as the proxy's own are.
    pub(crate) fn with_peer_listeners(mut self, peers: PeerListeners) -> Policy {
        self.peers = peers;
        self
    }

    /// For tests only: `addrs` count as public addresses.
    #[doc(hidden)]
    pub(crate) fn treating_as_public(
        mut self,
        addrs: impl IntoIterator<Item = SocketAddr>,
    ) -> Policy {
        self.treat_as_public = addrs.into_iter().collect();
        self
    }

    /// Whether `addr` (reached as `host`) may be connected to.
    pub(crate) fn check(&self, host: &str, addr: SocketAddr) -> Result<(), PrivateDestination> {
        let refuse = |why| {
            Err(PrivateDestination {
                host: host.to_string(),
                addr,
                why,
            })
        };
        if self.is_own_listener(addr) {
            return refuse(Refusal::OwnListener);
        }
        if self.allow_private || self.treat_as_public.contains(&addr) || !is_private(addr.ip()) {
            return Ok(());
        }
        refuse(Refusal::Private)
    }

    /// A listener on the unspecified address is reached through loopback
    /// on its port, and any listener through the unspecified address ("this
    /// host"). The host's other interface addresses are not enumerated
    /// (with the policy on they are refused as private unless public; the
    /// `Via` loop check still catches the proxy listener, not the admin).
    fn is_own_listener(&self, addr: SocketAddr) -> bool {
        let target = addr.ip().to_canonical();
        let reaches = |l: &SocketAddr| {
            let listener = l.ip().to_canonical();
            l.port() == addr.port()
                && (listener == target
                    || target.is_unspecified()
                    || (listener.is_unspecified() && target.is_loopback()))
        };
        self.own_listeners.iter().any(reaches) || self.peers.any(reaches)
    }

    /// The addresses of `addrs` the policy allows; if it allows none, the
    /// error carries the first refusal.
    pub(crate) fn filter(&self, host: &str, addrs: Vec<SocketAddr>) -> io::Result<Vec<SocketAddr>> {
        let mut refusal = None;
        let usable: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| match self.check(host, *a) {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!(host, addr = %a, "destination refused: {e}");
                    refusal.get_or_insert(e);
                    false
                }
            })
            .collect();
        match (usable.is_empty(), refusal) {
            (true, Some(r)) => Err(io::Error::new(io::ErrorKind::PermissionDenied, r)),
            _ => Ok(usable),
        }
    }
}

/// An error and its causes, outermost first. Unlike `source()` alone it
/// also steps into the payload of an `io::Error` (whose `source()` skips
/// the wrapped error), which is where hyper-util and rustls put theirs.
pub(crate) fn causes<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    let mut next = Some(err);
    std::iter::from_fn(move || {
        let current = next?;
        // An I/O error's and a body error's source is the wrapped error's
        // source: the wrapped error itself comes next.
        let wrapped = match current.downcast_ref::<io::Error>() {
            Some(e) => e
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => current
                .downcast_ref::<crate::http::body::BodyError>()
                .map(crate::http::body::BodyError::get_ref),
        };
        next = wrapped.or_else(|| current.source());
        Some(current)
    })
}

/// What the proxy ran short of when an error's causes include an OS
/// error that says so: file descriptors (`EMFILE`, `ENFILE`), memory or
/// socket buffers (`ENOMEM`, `ENOBUFS`), local ports (`EADDRNOTAVAIL`, the
/// ephemeral ports used up). Such a failure is the proxy's, not the
/// origin's: it says nothing about whether the origin can be reached.
pub(crate) fn local_shortage(err: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    use rustix::io::Errno;
    causes(err)
        .filter_map(|e| e.downcast_ref::<io::Error>()?.raw_os_error())
        .find_map(|code| {
            let errno = Errno::from_raw_os_error(code);
            Some(if errno == Errno::MFILE {
                "the proxy is out of file descriptors"
            } else if errno == Errno::NFILE {
                "the system is out of file descriptors"
            } else if errno == Errno::NOMEM || errno == Errno::NOBUFS {
                "the proxy is out of memory for sockets"
            } else if errno == Errno::ADDRNOTAVAIL {
                "the proxy is out of local ports"
            } else {
                return None;
            })
        })
}

/// Finds a [`PrivateDestination`] among an error's causes.
pub(crate) fn find_private_destination<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a PrivateDestination> {
    causes(err).find_map(|e| e.downcast_ref::<PrivateDestination>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_counted_by_ipv4_address_and_ipv6_slash_64() {
        let key = |s: &str| client_key(s.parse().expect("ip"));
        assert_eq!(key("192.0.2.7"), key("192.0.2.7"));
        assert_ne!(key("192.0.2.7"), key("192.0.2.8"));
        assert_eq!(key("::ffff:192.0.2.7"), key("192.0.2.7"));
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    }

    fn private(ip: &str) -> bool {
        is_private(ip.parse().expect("ip"))
    }

    #[test]
    fn local_shortages_are_found_inside_wrapped_errors() {
        let emfile = io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
        // As hyper-util wraps a failed connect: a boxed error in an io::Error.
        let wrapped =
            io::Error::other(Box::new(emfile) as Box<dyn std::error::Error + Send + Sync>);
        assert_eq!(
            local_shortage(&wrapped),
            Some("the proxy is out of file descriptors")
        );
        let ports = io::Error::from_raw_os_error(rustix::io::Errno::ADDRNOTAVAIL.raw_os_error());
        assert_eq!(
            local_shortage(&ports),
            Some("the proxy is out of local ports")
        );
        let refused = io::Error::from_raw_os_error(rustix::io::Errno::CONNREFUSED.raw_os_error());
        assert_eq!(local_shortage(&refused), None);
        assert_eq!(local_shortage(&io::Error::other("no code")), None);
    }

    #[test]
    fn private_ranges() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(private(ip), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(!private(ip), "{ip}");
        }
    }

    #[test]
    fn reserved_documentation_and_benchmark_ranges_are_private() {
        for ip in [
            "192.0.0.8",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "198.19.255.255",
            "192.88.99.1",
            "240.0.0.1",
            "255.255.255.255",
            "fec0::1",
            "2001:db8::1",
            "3fff::1",
            "100::1",
            "::",
        ] {
            assert!(private(ip), "{ip}");
        }
        for ip in ["198.20.0.1", "192.0.3.1", "223.255.255.1", "2001:db9::1"] {
            assert!(!private(ip), "{ip}");
        }
    }

    #[test]
    fn ipv6_forms_embedding_a_private_ipv4_are_private() {
        for ip in [
            "::ffff:10.0.0.1",                      // mapped
            "::ffff:0:127.0.0.1",                   // translated (SIIT)
            "::127.0.0.1",                          // IPv4-compatible: all of ::/96
            "::8.8.8.8",                            // idem, deprecated whatever it embeds
            "64:ff9b::a9fe:a9fe",                   // NAT64 of 169.254.169.254
            "64:ff9b::7f00:1",                      // NAT64 of 127.0.0.1
            "64:ff9b:1::808:808",                   // local-use NAT64: a local network
            "2002:c0a8:101::1",                     // 6to4 of 192.168.1.1
            "2002:7f00:1::",                        // 6to4 of 127.0.0.1
            "2001:0:4136:e378:8000:63bf:f5ff:fffe", // Teredo, client 10.0.0.1
            "2001:0:a00:1::1",                      // Teredo, server 10.0.0.1
        ] {
            assert!(private(ip), "{ip}");
        }
        for ip in [
            "::ffff:8.8.8.8",
            "::ffff:0:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:0:4136:e378:8000:63bf:f7f7:f7f7", // Teredo, client 8.8.8.8
        ] {
            assert!(!private(ip), "{ip}");
        }
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("socket address")
    }

    #[test]
    fn own_listeners_are_refused_whatever_the_private_setting() {
        let policy = Policy::new(true).with_own_listeners([
            sa("127.0.0.1:3128"),
            sa("0.0.0.0:9090"),
            sa("10.0.0.5:8080"),
        ]);
        for refused in [
            "127.0.0.1:3128",
            "0.0.0.0:3128",
            "[::ffff:127.0.0.1]:3128",
            "127.0.0.1:9090",
            "127.0.0.2:9090",
            "[::1]:9090",
            "[::]:9090",
            "10.0.0.5:8080",
            "0.0.0.0:8080",
        ] {
            let err = policy.check("h", sa(refused)).expect_err(refused);
            assert_eq!(err.why, Refusal::OwnListener, "{refused}");
            assert!(err.to_string().contains("own listener"), "{err}");
        }
        for allowed in [
            "127.0.0.1:3129",
            "127.0.0.2:3128",
            "10.0.0.1:80",
            "127.0.0.1:8080",
        ] {
            assert!(policy.check("h", sa(allowed)).is_ok(), "{allowed}");
        }
    }

    #[test]
    fn the_fleets_other_listeners_are_refused_as_they_change() {
        let peers = PeerListeners::default();
        let policy = Policy::new(true).with_peer_listeners(peers.clone());
        assert!(policy.check("h", sa("127.0.0.1:9132")).is_ok());
        peers.set(vec![sa("127.0.0.1:9132"), sa("0.0.0.0:3133")]);
        for refused in ["127.0.0.1:9132", "127.0.0.1:3133", "[::1]:3133"] {
            let err = policy.check("h", sa(refused)).expect_err(refused);
            assert_eq!(err.why, Refusal::OwnListener, "{refused}");
        }
        peers.set(Vec::new());
        assert!(policy.check("h", sa("127.0.0.1:9132")).is_ok());
    }

    #[test]
    fn addresses_treated_as_public_are_exact() {
        let policy = Policy::new(false).treating_as_public([sa("127.0.0.1:8080")]);
        assert!(policy.check("127.0.0.1", sa("127.0.0.1:8080")).is_ok());
        let err = policy
            .check("127.0.0.1", sa("127.0.0.1:8081"))
            .expect_err("another port");
        assert_eq!(err.why, Refusal::Private);
        assert_eq!(
            err.to_string(),
            "refused by destination policy: 127.0.0.1 is a private or local address; \
             set allow_private_destinations to permit it"
        );
        // A name's addresses are not told.
        let err = policy
            .check("intranet.example", sa("10.1.2.3:80"))
            .expect_err("private");
        assert!(!err.to_string().contains("10.1.2.3"), "{err}");
    }
}
