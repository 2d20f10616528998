//! The client address allow list (`access.allow_clients`): CIDR networks
//! and addresses, an IPv4-mapped IPv6 client judged as its IPv4 address.

use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// A bad client allow list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// An entry is neither a CIDR network nor an IP address.
    #[error("client allow list entry {entry:?} is not a CIDR network or IP address")]
    BadEntry {
        /// The entry as written.
        entry: String,
    },
    /// The list is empty, which would refuse every client.
    #[error("client allow list is empty: it would refuse every client")]
    Empty,
}

/// Client address allow list; the default admits loopback only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAcl {
    nets: Vec<IpNet>,
}

impl Default for ClientAcl {
    fn default() -> Self {
        Self::loopback()
    }
}

impl ClientAcl {
    /// 127.0.0.0/8 and ::1/128.
    pub(crate) fn loopback() -> Self {
        ClientAcl {
            nets: vec![
                IpNet::V4(Ipv4Net::new_assert([127, 0, 0, 0].into(), 8)),
                IpNet::V6(Ipv6Net::new_assert(std::net::Ipv6Addr::LOCALHOST, 128)),
            ],
        }
    }

    /// Parses entries such as `10.0.0.0/8`, `2001:db8::/32` or a bare
    /// address (a single host). Host bits are ignored (`10.1.2.3/8` is
    /// `10.0.0.0/8`). IPv4-mapped IPv6 entries (`::ffff:10.0.0.0/104`) are
    /// stored as IPv4. `0.0.0.0/0` and `::/0` admit everyone.
    pub(crate) fn new<I, S>(entries: I) -> Result<Self, AclError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut nets = Vec::new();
        for entry in entries {
            let entry = entry.as_ref();
            let s = entry.trim();
            let net = s
                .parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| AclError::BadEntry {
                    entry: entry.to_owned(),
                })?;
            nets.push(canonical_net(net).trunc());
        }
        if nets.is_empty() {
            return Err(AclError::Empty);
        }
        Ok(ClientAcl {
            nets: IpNet::aggregate(&nets),
        })
    }

    /// Whether `ip` may use the proxy. An IPv4-mapped IPv6 peer
    /// (`::ffff:127.0.0.1`, as a dual-stack `[::]` listener reports IPv4
    /// clients) is judged as the IPv4 address.
    pub(crate) fn allows(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The networks admitted (aggregated).
    #[cfg(test)]
    pub(crate) fn networks(&self) -> &[IpNet] {
        &self.nets
    }
}

/// `::ffff:a.b.c.d/p` (p >= 96) as `a.b.c.d/(p-96)`; other nets unchanged.
fn canonical_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net
        && v6.prefix_len() >= 96
        && let Some(v4) = v6.addr().to_ipv4_mapped()
        && let Ok(n) = Ipv4Net::new(v4, v6.prefix_len() - 96)
    {
        return IpNet::V4(n);
    }
    net
}
