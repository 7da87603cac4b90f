//! One Redis ACL user per scan, for the scan's pods: its password reaches
//! the scan's own keys (`bs:{SCAN}:*`) with the commands the queue needs,
//! and nothing else: not another scan's keys, not the key names of the
//! database (no SCAN, KEYS, RANDOMKEY), not the server's settings. A tenant
//! who reads its scan's Secret holds only that.
//!
//! Pure: the queue (`super`) runs the rules against Redis.
//!
//! May import: nothing of the crate.

/// The ACL user of scan `scan`.
pub fn scan_user(scan: &str) -> String {
    format!("bucketscan.{scan}")
}

/// `ACL SETUSER` rules of a scan's user whose keys all start with
/// `key_base`, in database `db`: replaced whole each time (`reset`), so
/// setting it again is harmless.
pub fn scan_user_rules(key_base: &str, password: &str, db: i64) -> Vec<String> {
    let keys = format!("~{key_base}*");
    let mut rules: Vec<String> = vec!["reset".into(), "on".into(), format!(">{password}"), keys];
    rules.extend(
        [
            "resetchannels",
            // What the queue and its scripts run (scripts' commands are
            // checked too) ...
            "-@all",
            "+@read",
            "+@write",
            "+@scripting",
            "+@transaction",
            "+@connection",
            "+time",
            // ... but nothing that reaches past the scan's own keys or
            // touches the server.
            "-@dangerous",
            "-@admin",
            "-@pubsub",
            "-scan",
            "-randomkey",
            "-dbsize",
            "-script|flush",
            "-script|kill",
            "-function",
            // Its own database only: keys written in another (SELECT, or
            // MOVE and COPY ... DB there) would escape the cleanup, which
            // deletes the scan's keys where the operator works.
            "-select",
            "-move",
            "-copy",
            // After the denials (ROLE is in @admin and @dangerous, which
            // would take it away again): Sentinel clients check that the
            // server the sentinels name is the master, and the merge counts
            // the replicas to wait for. It shows replication offsets and the
            // replicas' addresses, no keys.
            "+role",
        ]
        .map(String::from),
    );
    // The client selects the address's database when it connects.
    rules.push(format!("+select|{db}"));
    rules
}

/// `url` (`redis://`, `rediss://` or `redis+sentinel://`) with `user` and
/// `password` in place of any it had: the address the scan's pods get (with
/// Sentinel, the credentials are the master's; the sentinels' own, in the
/// query, stay). The password is hex here, so it needs no escaping.
pub fn url_with_user(url: &str, user: &str, password: &str) -> Result<String, String> {
    let (scheme, rest) = url
        .split_once("://")
        .filter(|(s, _)| matches!(*s, "redis" | "rediss" | "redis+sentinel"))
        .ok_or_else(|| {
            "the Redis URL must start with redis://, rediss:// or redis+sentinel://".to_string()
        })?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if host.is_empty() {
        return Err("the Redis URL has no host".into());
    }
    Ok(format!("{scheme}://{user}:{password}@{host}{path}"))
}

/// The password `url` gives `user`, if it names that user.
pub fn password_of(url: &str, user: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (name, password) = userinfo.split_once(':')?;
    (name == user && !password.is_empty()).then(|| password.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_user_replaces_any_user_in_the_url() {
        let u = |url| url_with_user(url, "bucketscan.ns.s.1", "ab12");
        assert_eq!(
            u("redis://r:6379").unwrap(),
            "redis://bucketscan.ns.s.1:ab12@r:6379"
        );
        assert_eq!(
            u("rediss://:p%40ss@redis.ns.svc:6380/2?x=1").unwrap(),
            "rediss://bucketscan.ns.s.1:ab12@redis.ns.svc:6380/2?x=1"
        );
        // A password holding '@' (escaped or not): the host is after the last.
        assert_eq!(
            u("redis://admin:a@b@h:1/0").unwrap(),
            "redis://bucketscan.ns.s.1:ab12@h:1/0"
        );
        assert!(u("http://h:1").is_err());
        let with = u("redis://r:6379/1").unwrap();
        assert_eq!(password_of(&with, "bucketscan.ns.s.1").as_deref(), Some("ab12"));
        assert_eq!(password_of(&with, "someone.else"), None);
        assert_eq!(password_of("redis://r:6379", "bucketscan.ns.s.1"), None);
        assert!(u("redis://user@/0").is_err());
        // Sentinel: the master's credentials, the sentinels' stay.
        let sentinel = u("redis+sentinel://:admin@s1:26379,s2/mymaster/1?sentinelPassword=sp").unwrap();
        assert_eq!(
            sentinel,
            "redis+sentinel://bucketscan.ns.s.1:ab12@s1:26379,s2/mymaster/1?sentinelPassword=sp"
        );
        assert_eq!(
            password_of(&sentinel, "bucketscan.ns.s.1").as_deref(),
            Some("ab12")
        );
    }

    #[test]
    fn a_scan_user_reaches_only_its_own_keys() {
        let rules = scan_user_rules("bs:{ns.photos.1a2b}:", "secret", 0);
        assert_eq!(rules[..4], ["reset", "on", ">secret", "~bs:{ns.photos.1a2b}:*"]);
        assert!(rules.contains(&"resetchannels".to_string()));
        assert!(!rules
            .iter()
            .any(|r| r.starts_with('~') && r != "~bs:{ns.photos.1a2b}:*"));
    }
}
