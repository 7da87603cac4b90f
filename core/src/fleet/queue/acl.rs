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

/// Whether `user` is a scan's own user (see [`scan_user`]).
pub fn is_scan_user(user: &str) -> bool {
    user.starts_with("bucketscan.")
}

/// The user `url` names, if any.
pub fn user_of(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (userinfo, _) = authority.rsplit_once('@')?;
    let name = userinfo.split_once(':').map_or(userinfo, |(name, _)| name);
    (!name.is_empty()).then(|| name.to_string())
}

/// The commands the steps' functions run (`*.lua`, see `library`): Redis
/// checks each command a function runs against the CALLER's rights, so the
/// scan's user must hold every one of them on its keys. It holds them
/// outside functions too; what it can store that way is bounded by the
/// server (`proto-max-bulk-len`, `maxmemory`), not by this list (see
/// docs/queue-protocol.md, "Who may write what").
pub const FUNCTION_COMMANDS: [&str; 33] = [
    "del",
    "exists",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hincrby",
    "hkeys",
    "hlen",
    "hmget",
    "hset",
    "hsetnx",
    "hstrlen",
    "lindex",
    "llen",
    "lpush",
    "lrange",
    "rpop",
    "rpush",
    "sadd",
    "scard",
    "set",
    "sismember",
    "smembers",
    "srem",
    "time",
    "zadd",
    "zcard",
    "zcount",
    "zpopmax",
    "zrangebyscore",
    "zrem",
    "zremrangebyscore",
];

/// The commands the worker, planner and merge send themselves: reads of
/// the scan's state, the few meta, part-stats and governor fields written
/// outside a step, durability waits, and what the client sends on
/// connecting. No MULTI/EXEC: a transaction of a million reads would hold
/// Redis for every tenant, and no one can kill it; reads that must be of one
/// instant are a read-only function (`read_keys.lua`), which FUNCTION KILL
/// can stop.
pub const CLIENT_COMMANDS: [&str; 15] = [
    "fcall",
    "hget",
    "hgetall",
    "hmget",
    "hset",
    "hsetnx",
    "lrange",
    "llen",
    "scard",
    "smembers",
    "zcard",
    "wait",
    "waitaof",
    "ping",
    "client|setinfo",
];

/// Commands of [`CLIENT_COMMANDS`] that came with Redis 7.2: granting a
/// command the server does not know fails the whole `ACL SETUSER`, so they
/// are granted where the server has them.
pub const SINCE_REDIS_7_2: [&str; 2] = ["waitaof", "client|setinfo"];

/// `ACL SETUSER` rules of a scan's user whose keys all start with
/// `key_base`, in database `db`: replaced whole each time (`reset`), so
/// setting it again is harmless. `lacking`: the commands of
/// [`SINCE_REDIS_7_2`] the server does not have.
pub fn scan_user_rules(key_base: &str, password: &str, db: i64, lacking: &[&str]) -> Vec<String> {
    let keys = format!("~{key_base}*");
    let mut rules: Vec<String> = vec!["reset".into(), "on".into(), format!(">{password}"), keys];
    // Nothing but what is listed: no EVAL, EVALSHA, SCRIPT or FUNCTION
    // (code of its own could loop and freeze Redis for every tenant), no
    // KEYS, SCAN or RANDOMKEY (other scans' key names), no CONFIG, ACL or
    // CLIENT but its own SETINFO, no pub/sub.
    rules.extend(["resetchannels", "-@all", "+auth", "+hello"].map(String::from));
    let mut commands: Vec<&str> = FUNCTION_COMMANDS
        .iter()
        .chain(&CLIENT_COMMANDS)
        .copied()
        .collect();
    commands.sort_unstable();
    commands.dedup();
    commands.retain(|c| !lacking.contains(c));
    rules.extend(commands.iter().map(|c| format!("+{c}")));
    rules.extend(
        [
            // Its own database only: keys written in another (SELECT, or
            // MOVE and COPY ... DB there) would escape the cleanup, which
            // deletes the scan's keys where the operator works. None is
            // granted above; said here so no later grant brings them back.
            "-select", "-move", "-copy",
            // Sentinel clients check that the server the sentinels name is
            // the master, and the merge counts the replicas to wait for. It
            // shows replication offsets and the replicas' addresses, no keys.
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
        let rules = scan_user_rules("bs:{ns.photos.1a2b}:", "secret", 0, &[]);
        assert_eq!(rules[..4], ["reset", "on", ">secret", "~bs:{ns.photos.1a2b}:*"]);
        assert!(rules.contains(&"resetchannels".to_string()));
        assert!(!rules
            .iter()
            .any(|r| r.starts_with('~') && r != "~bs:{ns.photos.1a2b}:*"));
        // Functions only: no code of its own, no way to load any.
        for never in [
            "eval",
            "evalsha",
            "eval_ro",
            "script",
            "function",
            "fcall_ro",
            "@scripting",
        ] {
            assert!(
                !rules.iter().any(|r| r.trim_start_matches('+').starts_with(never)),
                "{never}"
            );
        }
        assert!(rules.contains(&"+fcall".to_string()));
        assert!(
            !rules.iter().any(|r| r.starts_with("+@")),
            "no category: {rules:?}"
        );
        let on_7_0 = scan_user_rules("bs:{x}:", "s", 0, &SINCE_REDIS_7_2);
        assert!(!on_7_0.contains(&"+waitaof".to_string()) && rules.contains(&"+waitaof".to_string()));
    }

    #[test]
    fn every_command_the_steps_run_is_granted() {
        for file in [
            include_str!("enqueue.lua"),
            include_str!("take.lua"),
            include_str!("renew.lua"),
            include_str!("split.lua"),
            include_str!("finish.lua"),
            include_str!("idle.lua"),
            include_str!("progress.lua"),
            include_str!("govern.lua"),
            include_str!("reap.lua"),
            include_str!("restore.lua"),
            include_str!("retry.lua"),
            include_str!("round.lua"),
            include_str!("manifest.lua"),
            include_str!("read_hash.lua"),
            include_str!("read_keys.lua"),
            include_str!("fenced.lua"),
        ] {
            for call in file.split("redis.call('").skip(1) {
                let command = call.split('\'').next().unwrap().to_lowercase();
                assert!(
                    FUNCTION_COMMANDS.contains(&command.as_str()),
                    "{command} is not granted"
                );
            }
        }
    }

    #[test]
    fn the_user_of_a_url() {
        assert_eq!(
            user_of("redis://bucketscan.a.b:pw@h:1/0").as_deref(),
            Some("bucketscan.a.b")
        );
        assert_eq!(user_of("redis://:pw@h:1"), None);
        assert_eq!(user_of("redis://h:1"), None);
        assert!(is_scan_user(&scan_user("ns.s.1")));
        assert!(!is_scan_user("default"));
    }
}
