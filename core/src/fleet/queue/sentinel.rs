//! The Sentinel form of the Redis address, which the redis crate does not
//! parse itself:
//!
//! `redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[/DB][?sentinelUser=U&sentinelPassword=P]`
//!
//! The hosts are the sentinels (port 26379 unless given); USER and PASSWORD
//! are the master's (the scan's ACL user, or the operator's); the query's
//! optional `sentinelUser` and `sentinelPassword` are the sentinels' own.
//! Every part may be percent-encoded. TLS (`rediss+sentinel://`) is refused
//! until it is supported. This module parses the address and builds the
//! redis crate's Sentinel client for it; asking the sentinels is `locator`'s.
//!
//! Errors never hold the address: it may carry passwords.
//!
//! May import: nothing of the crate.

use percent_encoding::percent_decode_str;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::ConnectionAddr;

/// The scheme of a Sentinel address.
pub const SCHEME: &str = "redis+sentinel";
const TLS_SCHEME: &str = "rediss+sentinel";
/// Where a sentinel listens unless the address says otherwise.
const DEFAULT_PORT: u16 = 26379;
const SYNTAX: &str = "redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[/DB]";

/// A parsed Sentinel address. Its `Debug` leaves the passwords out.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelAddress {
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the master under.
    pub master: String,
    pub db: i64,
    pub username: Option<String>,
    pub password: Option<String>,
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
}

impl std::fmt::Debug for SentinelAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelAddress")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error(
        "TLS through Sentinel (rediss+sentinel://) is not supported yet: use redis+sentinel:// on a \
         trusted network, or rediss:// to one Redis"
    )]
    TlsUnsupported,
    #[error("the Sentinel address names no sentinel: {SYNTAX}")]
    NoSentinel,
    // Neither host nor port: a password holding an unescaped '/' ends
    // up where the hosts are.
    #[error("sentinel number {0} of the Sentinel address has a bad port (1-65535)")]
    BadPort(usize),
    #[error("the Sentinel address names no master after the sentinels: {SYNTAX}")]
    NoMaster,
    #[error("the database in the Sentinel address must be a number: {SYNTAX}")]
    BadDatabase,
    #[error("the Sentinel address has parts past the database: {SYNTAX}")]
    TrailingPath,
    #[error("unknown option {0:?} in the Sentinel address (known: sentinelUser, sentinelPassword)")]
    UnknownOption(String),
    #[error(
        "an option of the Sentinel address has no value (known: sentinelUser=..., sentinelPassword=...)"
    )]
    OptionWithoutValue,
    #[error("the Sentinel address does not decode as UTF-8 where it is percent-encoded")]
    NotUtf8,
    // A password holding an unescaped '/' ends up in the path: the master's
    // name is not echoed then.
    #[error(
        "the Sentinel address has an '@' after the sentinels: percent-encode '/' (%2F) and '@' (%40) \
         in passwords"
    )]
    AtInPath,
}

/// The Sentinel address `url` holds, `None` when `url` is not one.
pub fn parse(url: &str) -> Result<Option<SentinelAddress>, AddressError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(None);
    };
    match scheme.to_ascii_lowercase().as_str() {
        SCHEME => parse_rest(rest).map(Some),
        TLS_SCHEME => Err(AddressError::TlsUnsupported),
        _ => Ok(None),
    }
}

/// Everything after `redis+sentinel://`.
fn parse_rest(rest: &str) -> Result<SentinelAddress, AddressError> {
    if rest.contains('#') {
        return Err(AddressError::UnknownOption("#".into()));
    }
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    // The host list is after the last '@': a password may hold one.
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    // In reading order, so the first error is the leftmost.
    let sentinels = sentinels(hosts)?;
    let (master, db) = master_and_db(path)?;
    let (username, password) = credentials(userinfo)?;
    let (sentinel_username, sentinel_password) = sentinel_credentials(query)?;
    Ok(SentinelAddress {
        sentinels,
        master,
        db,
        username,
        password,
        sentinel_username,
        sentinel_password,
    })
}

/// `USER:PASSWORD`, `:PASSWORD` or `USER` (an empty part is none).
fn credentials(userinfo: Option<&str>) -> Result<(Option<String>, Option<String>), AddressError> {
    let Some(userinfo) = userinfo else {
        return Ok((None, None));
    };
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    Ok((decoded(user)?, decoded(password)?))
}

fn sentinel_credentials(query: &str) -> Result<(Option<String>, Option<String>), AddressError> {
    let (mut user, mut password) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        // A pair without '=' is not echoed: it may be a misplaced password.
        let (name, value) = pair.split_once('=').ok_or(AddressError::OptionWithoutValue)?;
        match name {
            "sentinelUser" => user = decoded(value)?,
            "sentinelPassword" => password = decoded(value)?,
            // Only the name: the value may be a password.
            other => return Err(AddressError::UnknownOption(other.to_string())),
        }
    }
    Ok((user, password))
}

fn master_and_db(path: &str) -> Result<(String, i64), AddressError> {
    if path.contains('@') {
        return Err(AddressError::AtInPath);
    }
    let mut parts = path.split('/');
    let master = decoded(parts.next().unwrap_or(""))?.ok_or(AddressError::NoMaster)?;
    let db = match parts.next().filter(|p| !p.is_empty()) {
        Some(db) => db.parse().map_err(|_| AddressError::BadDatabase)?,
        None => 0,
    };
    if parts.any(|p| !p.is_empty()) {
        return Err(AddressError::TrailingPath);
    }
    Ok((master, db))
}

/// `HOST[:PORT],...`; a host may be an IPv6 address in brackets.
fn sentinels(hosts: &str) -> Result<Vec<(String, u16)>, AddressError> {
    let sentinels = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .enumerate()
        .map(|(i, entry)| host_and_port(entry, i + 1))
        .collect::<Result<Vec<_>, _>>()?;
    if sentinels.is_empty() {
        return Err(AddressError::NoSentinel);
    }
    Ok(sentinels)
}

/// Sentinel number `nth` of the address.
fn host_and_port(entry: &str, nth: usize) -> Result<(String, u16), AddressError> {
    let (host, port) = match entry.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or(AddressError::NoSentinel)?;
            (host, after.strip_prefix(':'))
        }
        None => match entry.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (entry, None),
        },
    };
    if host.is_empty() {
        return Err(AddressError::NoSentinel);
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or(AddressError::BadPort(nth))?,
    };
    Ok((host.to_string(), port))
}

/// Percent-decoded; empty is none.
fn decoded(part: &str) -> Result<Option<String>, AddressError> {
    let text = percent_decode_str(part)
        .decode_utf8()
        .map_err(|_| AddressError::NotUtf8)?;
    Ok(Some(text.into_owned()).filter(|t| !t.is_empty()))
}

impl SentinelAddress {
    /// The redis crate's client that asks these sentinels for the master
    /// and connects to it with the master's credentials.
    pub fn client(&self) -> redis::RedisResult<SentinelClient> {
        let nodes = self
            .sentinels
            .iter()
            .map(|(host, port)| ConnectionAddr::Tcp(host.clone(), *port));
        let mut builder = SentinelClientBuilder::new(nodes, &self.master, SentinelServerType::Master)?
            .set_client_to_redis_db(self.db);
        if let Some(user) = &self.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &self.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(user) = &self.sentinel_username {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = &self.sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(url: &str) -> SentinelAddress {
        parse(url).unwrap().expect("a Sentinel address")
    }

    #[test]
    fn a_full_address_parses_into_sentinels_master_and_credentials() {
        let a = address(
            "redis+sentinel://bucketscan.s:p%40ss@s1:26380,10.0.0.2,[::1]:5000/my%20master/3\
             ?sentinelUser=watcher&sentinelPassword=s%26p",
        );
        assert_eq!(
            a.sentinels,
            [
                ("s1".into(), 26380),
                ("10.0.0.2".into(), 26379),
                ("::1".into(), 5000)
            ]
        );
        assert_eq!(a.master, "my master");
        assert_eq!(a.db, 3);
        assert_eq!(a.username.as_deref(), Some("bucketscan.s"));
        assert_eq!(a.password.as_deref(), Some("p@ss"));
        assert_eq!(a.sentinel_username.as_deref(), Some("watcher"));
        assert_eq!(a.sentinel_password.as_deref(), Some("s&p"));
        let debug = format!("{a:?}");
        assert!(!debug.contains("p@ss") && !debug.contains("s&p"), "{debug}");
    }

    #[test]
    fn a_bare_address_has_no_credentials_and_database_zero() {
        let a = address("redis+sentinel://h1:1,h2:2/mymaster");
        assert_eq!(a.sentinels, [("h1".into(), 1), ("h2".into(), 2)]);
        assert_eq!((a.master.as_str(), a.db), ("mymaster", 0));
        assert_eq!((a.username, a.password), (None, None));
        // Only a password, as `redis://:PASSWORD@...` has; a trailing slash.
        let a = address("redis+sentinel://:pw@h1/mymaster/");
        assert_eq!((a.username, a.password.as_deref()), (None, Some("pw")));
        // A password holding '@' unescaped: the hosts are after the last.
        assert_eq!(
            address("redis+sentinel://:a@b@h/m").password.as_deref(),
            Some("a@b")
        );
    }

    #[test]
    fn other_schemes_are_not_sentinel_addresses() {
        assert_eq!(parse("redis://h:6379/0"), Ok(None));
        assert_eq!(parse("rediss://:p@h:6380"), Ok(None));
        assert_eq!(parse("no scheme"), Ok(None));
    }

    #[test]
    fn bad_addresses_are_refused_without_echoing_secrets() {
        let refused = |url: &str| parse(url).unwrap_err();
        assert_eq!(refused("rediss+sentinel://h/m"), AddressError::TlsUnsupported);
        assert_eq!(refused("redis+sentinel:///m"), AddressError::NoSentinel);
        assert_eq!(refused("redis+sentinel://:pw@/m"), AddressError::NoSentinel);
        assert_eq!(refused("redis+sentinel://h1,h2"), AddressError::NoMaster);
        assert_eq!(refused("redis+sentinel://h1/"), AddressError::NoMaster);
        assert_eq!(refused("redis+sentinel://h1/m/x"), AddressError::BadDatabase);
        assert_eq!(refused("redis+sentinel://h1/m/1/2"), AddressError::TrailingPath);
        assert_eq!(refused("redis+sentinel://h:0/m"), AddressError::BadPort(1));
        assert_eq!(refused("redis+sentinel://h:1,h:x/m"), AddressError::BadPort(2));
        // A password with an unescaped '/': its start is taken for a host,
        // its end for the master's name; neither is echoed.
        assert_eq!(
            refused("redis+sentinel://user:pa/ss@h/m"),
            AddressError::BadPort(1)
        );
        let slash = refused("redis+sentinel://user:12/zq@h/m");
        assert_eq!(slash, AddressError::AtInPath);
        assert!(!slash.to_string().contains("zq"), "{slash}");
        let option = refused("redis+sentinel://:secret@h/m?sentinelPasword=secret");
        assert_eq!(option, AddressError::UnknownOption("sentinelPasword".into()));
        assert!(!option.to_string().contains("secret"), "{option}");
        assert_eq!(
            refused("redis+sentinel://h/m#x"),
            AddressError::UnknownOption("#".into())
        );
        assert_eq!(
            refused("redis+sentinel://h/m?secret"),
            AddressError::OptionWithoutValue
        );
    }

    #[test]
    fn the_address_builds_a_client_without_connecting() {
        let a = address("redis+sentinel://u:p@127.0.0.1:1,127.0.0.1:2/m/1?sentinelPassword=s");
        assert!(a.client().is_ok());
    }
}

/// Why the sentinels' credentials in an address may not go to scan pods.
#[derive(Debug, thiserror::Error)]
pub enum SentinelRightsError {
    #[error(
        "the Redis address names no sentinelUser: every scan's pods get the sentinels' credentials to find \
         the master, and the sentinels' default user may reconfigure them (SENTINEL MONITOR, REMOVE, \
         FAILOVER: point every client at a server of its choosing). Give the sentinels a user that may \
         only find the master (docs/operations.md), or turn scan users off (--redis-scan-users=false)"
    )]
    NoUser,
    #[error(
        "the sentinels' user in the Redis address (sentinelUser) may reconfigure the sentinels: every \
         scan's pods get it. Give it only what finding the master needs (docs/operations.md: +ping +auth \
         +hello +role +sentinel|masters +sentinel|get-master-addr-by-name)"
    )]
    MayReconfigure,
    #[error("no sentinel answered, so the rights of the sentinels' user cannot be checked: {0}")]
    Unreachable(String),
}

impl SentinelAddress {
    /// Check that the sentinels' user of this address can only look the
    /// master up: it must exist, and `SENTINEL SET` (which reconfigures)
    /// must be refused to it. Asked of the first sentinel that answers.
    pub async fn check_lookup_only(&self) -> Result<(), SentinelRightsError> {
        let user = self
            .sentinel_username
            .as_deref()
            .ok_or(SentinelRightsError::NoUser)?;
        let mut last = String::new();
        for (host, port) in &self.sentinels {
            let encode = |s: &str| {
                percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
            };
            let password = self.sentinel_password.as_deref().map(encode).unwrap_or_default();
            let url = format!("redis://{}:{password}@{host}:{port}", encode(user));
            let connected = match redis::Client::open(url) {
                Ok(client) => client.get_multiplexed_async_connection().await,
                Err(e) => Err(e),
            };
            let mut con = match connected {
                Ok(con) => con,
                Err(e) => {
                    last = format!("{:?}", e.kind());
                    continue;
                }
            };
            // A master no sentinel monitors: refused for want of rights, or
            // for want of the master (then the user had the right).
            let probe = redis::cmd("SENTINEL")
                .arg("SET")
                .arg("bucketscan-rights-probe")
                .arg("quorum")
                .arg(1)
                .query_async::<redis::Value>(&mut con)
                .await;
            return match probe {
                Err(e) if e.to_string().to_uppercase().contains("NOPERM") => Ok(()),
                _ => Err(SentinelRightsError::MayReconfigure),
            };
        }
        Err(SentinelRightsError::Unreachable(last))
    }
}
