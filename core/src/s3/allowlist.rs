//! Which endpoints a client may connect to: the operator's endpoint
//! allowlist (`--allowed-endpoints`). The operator sends a scan's planning
//! and cleanup requests to the endpoint its author chose, so without a limit
//! a tenant could make it reach the node's kubelet, the cloud's instance
//! metadata service or anything listening on the operator's own loopback.
//!
//! An entry is a host name (`minio.storage.svc`), every name under a domain
//! (`*.example.com`), or an address or network (`10.0.0.0/8`, `fd00::/8`),
//! each optionally with a port (`minio:9000`, `10.0.0.0/8:9000`,
//! `[fd00::/8]:9000`). With no entry, every endpoint is allowed but the
//! addresses nobody should reach through the operator ([`never_by_default`]).
//!
//! The rule is applied to the addresses a host resolves to, at connect time
//! (`transport`): a name that points at a forbidden address is refused as
//! the address itself is, and a name that resolves elsewhere between a check
//! and the connection cannot slip through. [`EndpointAllowlist::check_url`]
//! is the same rule before any connection, as far as the URL alone tells.
//!
//! May import: `error` only (the bottom of `s3`).

use super::error::S3Error;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The endpoints a client may reach; the default (no entry) allows all but
/// [`never_by_default`].
#[derive(Clone, Debug, Default)]
pub struct EndpointAllowlist {
    entries: Vec<Entry>,
}

#[derive(Clone, Debug, PartialEq)]
struct Entry {
    pattern: Pattern,
    /// Any port when `None`.
    port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq)]
enum Pattern {
    /// Exactly this host name (lower case, no trailing dot).
    Host(String),
    /// Every name under this domain (`.example.com`), not the domain itself.
    Under(String),
    /// Every address in this network.
    Network(IpAddr, u8),
}

/// Why `ip` is never reached by default, when it is one of those: the
/// operator's own loopback, link-local addresses (the cloud's instance
/// metadata service at 169.254.169.254, and fe80::/10), the metadata
/// service's IPv6 address on EC2, Alibaba Cloud's metadata service
/// (100.100.100.200, not link-local), and the unspecified address (which
/// Linux connects to the local host). IPv4 addresses written as IPv6
/// (`::ffff:127.0.0.1`) count as the IPv4 address, and so do those
/// translated by NAT64's well-known prefix (`64:ff9b::169.254.169.254`,
/// which a NAT64 gateway forwards to the IPv4 address).
pub fn never_by_default(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .or_else(|| nat64_embedded(v6))
            .map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    const EC2_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
    const ALIBABA_METADATA: std::net::Ipv4Addr = std::net::Ipv4Addr::new(100, 100, 100, 200);
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => Some("a loopback address"),
        IpAddr::V4(v4) if v4.is_link_local() => {
            Some("a link-local address (where the instance metadata service answers)")
        }
        IpAddr::V4(v4) if v4 == ALIBABA_METADATA => {
            Some("the instance metadata service's address (Alibaba Cloud)")
        }
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some("an unspecified address"),
        IpAddr::V6(v6) if v6.is_loopback() => Some("a loopback address"),
        IpAddr::V6(v6) if v6.is_unspecified() => Some("an unspecified address"),
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => Some("a link-local address"),
        IpAddr::V6(v6) if v6 == EC2_METADATA_V6 => Some("the instance metadata service's address"),
        _ => None,
    }
}

/// The IPv4 address in NAT64's well-known prefix `64:ff9b::/96` (RFC 6052).
fn nat64_embedded(v6: Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    (s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]).then(|| {
        let [.., a, b, c, d] = v6.octets();
        std::net::Ipv4Addr::new(a, b, c, d)
    })
}

impl EndpointAllowlist {
    /// The list from its entries (empty strings are skipped); a clear error
    /// naming the entry that is not one.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<EndpointAllowlist, String> {
        let entries = entries
            .iter()
            .map(|e| e.as_ref().trim())
            .filter(|e| !e.is_empty())
            .map(|e| {
                parse_entry(e).ok_or_else(|| {
                    format!(
                        "{e:?} is not an allowed endpoint: write a host name (minio.example.com), \
                         *.DOMAIN for every name under it, or an address or network (10.0.0.0/8, fd00::/8), \
                         each optionally with :PORT ([fd00::/8]:9000 for IPv6 with a port)"
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(EndpointAllowlist { entries })
    }

    /// No entry: every endpoint but [`never_by_default`].
    pub fn is_default(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a connection to `addr`, which `host` (a name or an address
    /// literal) resolved to, is allowed; the refusal says why. `aws`: the
    /// client's endpoint is AWS itself (no endpoint URL), whose hosts
    /// (`*.amazonaws.com`, `*.amazonaws.com.cn`) are allowed like an empty
    /// list; any other host of such a client is judged by the entries (the
    /// host is built from the tenant's region and bucket, which must never
    /// widen the list).
    ///
    /// An entry naming the address's network, or exactly the host, allows
    /// it, even a loopback one (the platform chose it); otherwise the
    /// addresses of [`never_by_default`] are refused; the rest is allowed by
    /// an empty list or a matching `*.DOMAIN` entry.
    pub fn check_address(&self, host: &str, addr: SocketAddr, aws: bool) -> Result<(), String> {
        let host = normal_host(host);
        let port = addr.port();
        let covers = |e: &Entry, wanted: fn(&Pattern, &str, IpAddr) -> bool| {
            e.port.is_none_or(|p| p == port) && wanted(&e.pattern, &host, addr.ip())
        };
        let named_or_network = |p: &Pattern, host: &str, ip: IpAddr| match p {
            Pattern::Network(net, bits) => in_network(ip, *net, *bits),
            Pattern::Host(name) => name == host,
            Pattern::Under(_) => false,
        };
        let under =
            |p: &Pattern, host: &str, _: IpAddr| matches!(p, Pattern::Under(d) if host.ends_with(d.as_str()));
        if self.entries.iter().any(|e| covers(e, named_or_network)) {
            return Ok(());
        }
        if let Some(why) = never_by_default(addr.ip()) {
            let what = match host == addr.ip().to_string() {
                true => format!("{host} is {why}"),
                false => format!("{host} resolves to {}, {why}", addr.ip()),
            };
            return Err(format!(
                "{what}: the operator never sends a scan's requests there"
            ));
        }
        let aws_host = aws && is_aws_host(&host);
        if self.entries.is_empty() || aws_host || self.entries.iter().any(|e| covers(e, under)) {
            return Ok(());
        }
        Err(format!(
            "{host}:{port} is not in the operator's endpoint allowlist"
        ))
    }

    /// The rule of [`EndpointAllowlist::check_address`] as far as the
    /// endpoint URL tells, before any connection (and any DNS lookup): an
    /// address literal is judged in full; a name is refused when no entry
    /// could allow it whatever it resolves to. `None`: AWS.
    pub fn check_url(&self, url: Option<&str>) -> Result<(), String> {
        let Some(url) = url else {
            return Ok(());
        };
        let uri: http::Uri = url
            .trim_end_matches('/')
            .parse()
            .map_err(|e| format!("endpoint {url:?} is not a URL: {e}"))?;
        let host = uri
            .host()
            .ok_or_else(|| format!("endpoint {url:?} has no host"))?;
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("http") { 80 } else { 443 });
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.check_address(host, SocketAddr::new(ip, port), false);
        }
        let name = normal_host(host);
        let may_allow = |e: &Entry| {
            e.port.is_none_or(|p| p == port)
                && match &e.pattern {
                    Pattern::Host(h) => *h == name,
                    Pattern::Under(d) => name.ends_with(d.as_str()),
                    // Decided by the addresses the name resolves to.
                    Pattern::Network(..) => true,
                }
        };
        if self.entries.is_empty() || self.entries.iter().any(may_allow) {
            return Ok(());
        }
        Err(format!(
            "{name}:{port} is not in the operator's endpoint allowlist"
        ))
    }

    /// [`EndpointAllowlist::check_url`] as an [`S3Error::NotAllowed`].
    pub fn check_endpoint(&self, url: Option<&str>) -> Result<(), S3Error> {
        self.check_url(url).map_err(S3Error::NotAllowed)
    }
}

/// A host name of AWS itself (commercial and China partitions).
fn is_aws_host(host: &str) -> bool {
    let labels_ok = valid_name(host);
    labels_ok && (host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn"))
}

/// Host names compare in lower case, without a trailing dot.
fn normal_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn in_network(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    let as_v6 = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => (v4.to_ipv6_mapped(), 96),
        IpAddr::V6(v6) => (v6.to_ipv4_mapped().map_or(v6, |v4| v4.to_ipv6_mapped()), 0),
    };
    let (ip, _) = as_v6(ip);
    let (net, offset) = as_v6(net);
    let bits = u32::from(bits) + offset;
    let mask = if bits == 0 { 0 } else { u128::MAX << (128 - bits) };
    u128::from(ip) & mask == u128::from(net) & mask
}

fn parse_entry(text: &str) -> Option<Entry> {
    let lower = text.to_ascii_lowercase();
    // `[v6]:port`, `[v6/bits]:port`, `[v6]`.
    if let Some(rest) = lower.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse().ok()?),
        };
        let pattern = network(inside).filter(|p| matches!(p, Pattern::Network(IpAddr::V6(_), _)))?;
        return Some(Entry { pattern, port });
    }
    // An IPv6 address or network without a port.
    if lower.matches(':').count() > 1 {
        return Some(Entry {
            pattern: network(&lower)?,
            port: None,
        });
    }
    let (body, port) = match lower.rsplit_once(':') {
        Some((body, port)) => (body, Some(port.parse().ok()?)),
        None => (lower.as_str(), None),
    };
    let pattern = if let Some(domain) = body.strip_prefix("*.") {
        valid_name(domain).then(|| Pattern::Under(format!(".{}", normal_host(domain))))?
    } else if let Some(net) = network(body) {
        net
    } else if valid_name(body) && !body.contains('/') {
        Pattern::Host(normal_host(body))
    } else {
        return None;
    };
    Some(Entry { pattern, port })
}

/// `ADDRESS` or `ADDRESS/BITS`.
fn network(text: &str) -> Option<Pattern> {
    let (addr, bits) = match text.split_once('/') {
        Some((addr, bits)) => (addr, Some(bits.parse::<u8>().ok()?)),
        None => (text, None),
    };
    let ip: IpAddr = addr.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = bits.unwrap_or(max);
    (bits <= max).then_some(Pattern::Network(ip, bits))
}

fn valid_name(name: &str) -> bool {
    let name = name.trim_end_matches('.');
    !name.is_empty()
        && name.len() <= 253
        && name
            .split('.')
            .all(|label| !label.is_empty() && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> EndpointAllowlist {
        EndpointAllowlist::parse(entries).unwrap()
    }

    fn at(ip: &str, port: u16) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), port)
    }

    #[test]
    fn by_default_every_address_but_the_operator_s_own_and_the_metadata_service() {
        let default = EndpointAllowlist::default();
        for refused in [
            "127.0.0.1",
            "127.1.2.3",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "fd00:ec2::254",
            // Review F7: Alibaba Cloud's metadata service, and NAT64 forms.
            "100.100.100.200",
            "::ffff:100.100.100.200",
            "64:ff9b::169.254.169.254",
            "64:ff9b::7f00:1",
            "64:ff9b::100.100.100.200",
            "64:ff9b::0.0.0.0",
        ] {
            let refusal = default
                .check_address(refused, at(refused, 80), false)
                .unwrap_err();
            assert!(refusal.contains("never sends"), "{refused}: {refusal}");
            assert!(default
                .check_url(Some(&format!("http://{}", bracketed(refused))))
                .is_err());
        }
        for allowed in [
            "10.0.0.5",
            "192.168.1.1",
            "52.216.1.1",
            "fd00::1",
            "2600::1",
            "100.100.100.201",
            "64:ff9b::52.216.1.1",
        ] {
            assert_eq!(
                default.check_address(allowed, at(allowed, 443), false),
                Ok(()),
                "{allowed}"
            );
        }
        // A name is judged by what it resolves to.
        let refusal = default
            .check_address("localhost", at("127.0.0.1", 9000), false)
            .unwrap_err();
        assert!(
            refusal.starts_with("localhost resolves to 127.0.0.1"),
            "{refusal}"
        );
        assert_eq!(default.check_url(Some("http://localhost:9000")), Ok(()));
        // AWS's own names are never a forbidden address either.
        assert!(default
            .check_address("s3.x.amazonaws.com", at("169.254.169.254", 443), true)
            .is_err());
        assert_eq!(default.check_url(None), Ok(()));
    }

    fn bracketed(ip: &str) -> String {
        if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_string()
        }
    }

    #[test]
    fn entries_allow_only_what_they_name() {
        let names = list(&["minio.storage.svc:9000", "*.s3.example.com"]);
        assert_eq!(names.check_url(Some("http://minio.storage.svc:9000")), Ok(()));
        assert_eq!(names.check_url(Some("http://MINIO.storage.svc.:9000/")), Ok(()));
        assert!(names.check_url(Some("http://minio.storage.svc:9001")).is_err());
        assert_eq!(names.check_url(Some("https://eu.s3.example.com")), Ok(()));
        let domain = names.check_url(Some("https://s3.example.com")).unwrap_err();
        assert_eq!(
            domain,
            "s3.example.com:443 is not in the operator's endpoint allowlist"
        );
        assert!(names.check_url(Some("https://evil-s3.example.com")).is_err());
        assert!(names.check_url(Some("http://10.1.2.3")).is_err());
        let l = list(&[
            "minio.storage.svc:9000",
            "*.s3.example.com",
            "10.0.0.0/8",
            "[fd00::/8]:9000",
        ]);
        assert_eq!(l.check_url(Some("http://10.1.2.3")), Ok(()));
        assert!(l.check_url(Some("http://11.1.2.3")).is_err());
        assert_eq!(l.check_url(Some("http://[fd00::7]:9000")), Ok(()));
        assert!(l.check_url(Some("http://[fd00::7]:9001")).is_err());
        // A name no name entry allows may still resolve into a listed network.
        assert_eq!(l.check_url(Some("http://store.internal")), Ok(()));
        assert_eq!(
            l.check_address("store.internal", at("10.9.9.9", 80), false),
            Ok(())
        );
        assert!(l
            .check_address("store.internal", at("11.9.9.9", 80), false)
            .is_err());
        // A wildcard never lets a name reach a forbidden address ...
        assert!(l
            .check_address("x.s3.example.com", at("169.254.169.254", 443), false)
            .is_err());
        assert!(l
            .check_address("x.s3.example.com", at("52.1.1.1", 443), false)
            .is_ok());
        // ... nor does the list reach AWS's names beyond the default.
        assert_eq!(l.check_url(None), Ok(()));
        assert!(l
            .check_address("s3.us-east-1.amazonaws.com", at("52.1.1.1", 443), true)
            .is_ok());
        assert!(l
            .check_address("s3.us-east-1.amazonaws.com", at("52.1.1.1", 443), false)
            .is_err());
        assert!(l
            .check_address("b.s3.cn-north-1.amazonaws.com.cn", at("52.1.1.1", 443), true)
            .is_ok());
    }

    #[test]
    fn an_aws_client_reaches_only_aws_hosts_past_an_explicit_list() {
        let l = list(&["minio.storage.svc:9000"]);
        // A region or bucket that made the AWS host another one (review F4).
        for host in [
            "10.0.3.7",
            "x@10.0.3.7",
            "evil.example.com",
            "s3.amazonaws.com.evil.net",
        ] {
            let refusal = l.check_address(host, at("10.0.3.7", 8443), true).unwrap_err();
            assert!(
                refusal.contains("not in the operator's endpoint allowlist"),
                "{host}: {refusal}"
            );
        }
        assert!(l
            .check_address("s3.eu-west-1.amazonaws.com", at("52.1.1.1", 443), true)
            .is_ok());
        // With no entry the default still applies to any host.
        assert!(EndpointAllowlist::default()
            .check_address("10.0.3.7", at("10.0.3.7", 8443), true)
            .is_ok());
    }

    #[test]
    fn the_platform_may_allow_a_loopback_endpoint_by_naming_it() {
        let by_address = list(&["127.0.0.1"]);
        assert_eq!(by_address.check_url(Some("http://127.0.0.1:9000")), Ok(()));
        assert_eq!(
            by_address.check_address("localhost", at("127.0.0.1", 9000), false),
            Ok(())
        );
        assert!(by_address
            .check_address("localhost", at("::1", 9000), false)
            .is_err());
        let by_name = list(&["localhost:9000"]);
        assert_eq!(
            by_name.check_address("localhost", at("127.0.0.1", 9000), false),
            Ok(())
        );
        assert!(by_name
            .check_address("localhost", at("127.0.0.1", 9001), false)
            .is_err());
        assert!(by_name.check_url(Some("http://127.0.0.1:9000")).is_err());
        let network = list(&["127.0.0.0/8:9000"]);
        assert_eq!(network.check_url(Some("http://127.0.0.9:9000")), Ok(()));
        assert!(network.check_url(Some("http://127.0.0.9:9001")).is_err());
    }

    #[test]
    fn a_bad_entry_is_named() {
        for bad in [
            "http://minio",
            "10.0.0.0/33",
            "*.",
            "minio:port",
            "[10.0.0.1]:80",
            "a b",
            "::1/129",
        ] {
            let e = EndpointAllowlist::parse(&[bad]).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert!(EndpointAllowlist::parse(&["", " "]).unwrap().is_default());
        assert_eq!(
            list(&["::1"]).entries,
            vec![Entry {
                pattern: Pattern::Network("::1".parse().unwrap(), 128),
                port: None
            }]
        );
    }
}
