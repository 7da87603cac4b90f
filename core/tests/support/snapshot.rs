//! Redis losing acknowledged writes, as after a restart from an AOF written
//! every second or a failover to a replica that lagged: take a snapshot of
//! every key of a scan, and later put the scan back to it in one
//! transaction, while its clients go on (also used by worker/tests/fleet.rs).

use redis::aio::MultiplexedConnection;

/// Every key of scan `scan` with its DUMP.
pub struct Snapshot {
    scan: String,
    keys: Vec<(String, Vec<u8>)>,
}

async fn keys_of(con: &mut MultiplexedConnection, scan: &str) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("bs:{{{scan}}}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(con)
            .await
            .unwrap();
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

impl Snapshot {
    /// Every key of the scan and its DUMP at one moment, in one script: a
    /// Redis that lost writes holds a prefix of what it was sent, and scripts
    /// are atomic in it. (Taken key by key while workers ran, a snapshot could
    /// hold a shard's checkpoint after a commit but its parts list from before
    /// it, a state no real loss produces, and the restored scan lost a part.)
    pub async fn take(con: &mut MultiplexedConnection, scan: &str) -> Snapshot {
        let flat: Vec<Vec<u8>> = redis::Script::new(
            r"local out = {}
            for _, key in ipairs(redis.call('KEYS', ARGV[1])) do
              out[#out + 1] = key
              out[#out + 1] = redis.call('DUMP', key)
            end
            return out",
        )
        .arg(format!("bs:{{{scan}}}:*"))
        .invoke_async(con)
        .await
        .unwrap();
        let keys: Vec<(String, Vec<u8>)> = flat
            .chunks(2)
            .map(|pair| (String::from_utf8(pair[0].clone()).unwrap(), pair[1].clone()))
            .collect();
        assert!(!keys.is_empty(), "scan {scan} has no keys to snapshot");
        Snapshot {
            scan: scan.to_string(),
            keys,
        }
    }

    /// Put the scan back as it was: keys made since are gone, the others
    /// hold their old values again, all at once for the scan's clients.
    pub async fn restore(&self, con: &mut MultiplexedConnection) {
        let now = keys_of(con, &self.scan).await;
        let mut tx = redis::pipe();
        tx.atomic();
        if !now.is_empty() {
            tx.del(now).ignore();
        }
        for (key, dump) in &self.keys {
            tx.cmd("RESTORE")
                .arg(key)
                .arg(0)
                .arg(dump)
                .arg("REPLACE")
                .ignore();
        }
        tx.query_async::<()>(con).await.unwrap();
    }
}
