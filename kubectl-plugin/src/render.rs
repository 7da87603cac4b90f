//! Pure text from a BucketScan's status: the progress line of `watch`, the
//! report of `status` and the summary of `result`. No I/O, so every format
//! is unit-tested here.
//!
//! May import: (none of this crate)

use bucketscan_api::crd::{BucketScan, BucketScanStatus, Phase};
use bucketscan_api::{
    conditions::{FAILED, STORE_SATURATED},
    human_duration,
};
use std::fmt::Write as _;
use std::time::Duration;

/// Text safe to print on a terminal: status text carries what came from S3
/// keys, Redis and pod logs, and a control sequence in it (ESC, a carriage
/// return, a bidirectional override) would act on the reader's terminal:
/// rewrite the title, hide lines, move the cursor. Each such character is
/// shown as its escape (`\x1b`, `\u{202e}`); newlines and tabs stay.
pub fn terminal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        match c {
            '\n' | '\t' => out.push(c),
            c if c.is_control() && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() || bidi => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Cells of the progress bar.
const BAR_WIDTH: usize = 20;

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Share finished, 0..=1: of the shards (as status.progress counts it, done
/// or dead), else of the objects against the plan's estimate (a lower bound,
/// hence the clamp); 1 once complete.
pub fn fraction(st: &BucketScanStatus) -> Option<f64> {
    if st.phase == Phase::Complete {
        return Some(1.0);
    }
    if let Some(s) = st.shards.as_ref().filter(|s| s.total > 0) {
        return Some((s.done + s.dead) as f64 / s.total as f64);
    }
    let done = st.numbers.objects_done?;
    let estimate = st.numbers.objects_estimate.filter(|e| *e > 0)?;
    Some((done as f64 / estimate as f64).min(1.0))
}

/// `[#########...........]  45%`.
pub fn bar(fraction: f64) -> String {
    let fraction = fraction.clamp(0.0, 1.0);
    let filled = (fraction * BAR_WIDTH as f64).floor() as usize;
    let percent = (fraction * 100.0).floor() as u64;
    format!(
        "[{}{}] {percent:>3}%",
        "#".repeat(filled),
        ".".repeat(BAR_WIDTH - filled)
    )
}

fn objects_done(st: &BucketScanStatus) -> Option<u64> {
    st.numbers
        .objects_done
        .or_else(|| st.objects.as_ref().map(|o| o.scanned))
}

/// `12,000 / ~20,000 objects`: the estimate is the plan's count (a lower
/// bound where it sampled).
fn objects_text(st: &BucketScanStatus) -> Option<String> {
    let done = objects_done(st)?;
    Some(match st.numbers.objects_estimate {
        Some(estimate) => format!("{} / ~{} objects", thousands(done), thousands(estimate)),
        None => format!("{} objects", thousands(done)),
    })
}

fn rate_text(st: &BucketScanStatus) -> Option<String> {
    match st.numbers.rate_per_second {
        Some(r) => Some(format!("{}/s", thousands(r))),
        None => st.rate.clone(),
    }
}

fn eta_text(st: &BucketScanStatus) -> Option<String> {
    match st.numbers.eta_seconds {
        Some(s) => Some(human_duration(Duration::from_secs(s))),
        None => st.eta.clone(),
    }
}

fn shards_text(st: &BucketScanStatus) -> Option<String> {
    let s = st.shards.as_ref()?;
    let mut text = format!(
        "{}/{} shards done ({} pending, {} leased",
        s.done, s.total, s.pending, s.leased
    );
    if s.dead > 0 {
        let _ = write!(text, ", {} dead", s.dead);
    }
    text.push(')');
    Some(text)
}

fn condition_true<'a>(
    st: &'a BucketScanStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    st.conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// The store's pushback: throttling answers so far and the rate governor's
/// limits, as `1,234 answers, governed hot/ 4200/s`. `None` while the
/// store never throttled.
fn throttling_text(st: &BucketScanStatus) -> Option<String> {
    let throttles = st.numbers.store_throttles.filter(|&n| n > 0);
    if throttles.is_none() && st.governed_rate.is_none() {
        return None;
    }
    let mut parts = vec![format!("{} answers", thousands(throttles.unwrap_or(0)))];
    parts.extend(st.governed_rate.as_ref().map(|g| format!("governed {g}")));
    Some(parts.join(", "))
}

/// What `watch` prints after `complete: `: the result, and for a partial
/// one (`onDeadShards: Partial`) how many key ranges it misses.
pub fn completed(st: &BucketScanStatus, name: &str) -> String {
    let output = st.output.clone().unwrap_or_default();
    match st.missing_ranges.filter(|&n| n > 0) {
        Some(n) => format!(
            "{output} (PARTIAL: {n} key range(s) missing, see kubectl bucketscan status {name}; \
             kubectl bucketscan retry {name} scans them again)"
        ),
        None => output,
    }
}

/// Why the scan failed: the Failed condition's reason and message.
pub fn failure(st: &BucketScanStatus) -> String {
    match condition_true(st, FAILED) {
        Some(c) if !c.message.is_empty() => format!("{}: {}", c.reason, c.message),
        Some(c) => c.reason.clone(),
        None => "the scan failed (no Failed condition)".into(),
    }
}

/// What a line of `watch` says besides the phase and the bar: objects,
/// rate, ETA, workers, shards, throttling. Fields the status does not have
/// yet are left out.
pub fn progress_details(st: &BucketScanStatus) -> String {
    let mut parts = Vec::new();
    parts.extend(objects_text(st));
    parts.extend(rate_text(st));
    if st.phase != Phase::Complete {
        parts.extend(eta_text(st).map(|e| format!("ETA {e}")));
    }
    parts.extend(st.workers.map(|w| format!("{w} workers")));
    parts.extend(shards_text(st));
    parts.extend(throttling_text(st).map(|t| format!("THROTTLED ({t})")));
    if let Some(c) = condition_true(st, STORE_SATURATED) {
        parts.push(format!("SATURATED ({})", c.reason));
    }
    parts.join("  ")
}

/// One line of `watch` where it is not a terminal (a pipe, a CI log):
/// phase, a text bar, then [`progress_details`].
pub fn progress_line(st: &BucketScanStatus) -> String {
    let mut parts = vec![format!("{:<8}", format!("{:?}", st.phase))];
    if let Some(f) = fraction(st) {
        parts.push(bar(f));
    }
    let details = progress_details(st);
    if !details.is_empty() {
        parts.push(details);
    }
    parts.join("  ")
}

/// `kubectl bucketscan status` without a name: a line per scan, columns
/// aligned as kubectl aligns them (with NAMESPACE first for `-A`).
pub fn status_table(scans: &[BucketScan], namespaces: bool) -> String {
    if scans.is_empty() {
        return "No BucketScans found.\n".into();
    }
    let mut rows = vec![
        vec!["NAME", "PHASE", "PROGRESS", "OBJECTS", "RATE", "ETA", "READY"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>(),
    ];
    if namespaces {
        rows[0].insert(0, "NAMESPACE".into());
    }
    for scan in scans {
        let st = scan.status.clone().unwrap_or_default();
        let ready = st
            .conditions
            .iter()
            .find(|c| c.type_ == bucketscan_api::conditions::READY)
            .map_or_else(
                || "-".to_string(),
                |c| {
                    if c.status == "True" {
                        "True".into()
                    } else {
                        c.reason.clone()
                    }
                },
            );
        let mut row = vec![
            scan.metadata.name.clone().unwrap_or_default(),
            format!("{:?}", st.phase),
            fraction(&st).map_or_else(|| "-".into(), |f| format!("{}%", (f * 100.0).floor() as u64)),
            objects_done(&st).map_or_else(|| "-".into(), thousands),
            rate_text(&st).unwrap_or_else(|| "-".into()),
            eta_text(&st)
                .filter(|_| st.phase != Phase::Complete)
                .unwrap_or_else(|| "-".into()),
            ready,
        ];
        if namespaces {
            row.insert(0, scan.metadata.namespace.clone().unwrap_or_default());
        }
        rows.push(row);
    }
    columns(&rows, "")
}

/// Rows as kubectl aligns its tables: each column as wide as its widest
/// cell, three spaces between, each line after `indent`.
pub fn columns(rows: &[Vec<String>], indent: &str) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{indent}{}", cells.join("   ").trim_end());
    }
    out
}

/// The report of `kubectl bucketscan status`.
pub fn status_report(scan: &BucketScan) -> String {
    let st = scan.status.clone().unwrap_or_default();
    let mut out = String::new();
    let ns = scan.metadata.namespace.as_deref().unwrap_or_default();
    let name = scan.metadata.name.as_deref().unwrap_or_default();
    let _ = writeln!(out, "BucketScan {ns}/{name}: {:?}", st.phase);
    let source = &scan.spec.source;
    let _ = writeln!(out, "  source:     s3://{}/{}", source.bucket, source.prefix);
    let mut line = |label: &str, value: Option<String>| {
        if let Some(v) = value {
            let _ = writeln!(out, "  {label:<11} {v}");
        }
    };
    line("progress:", fraction(&st).map(bar));
    line("objects:", objects_text(&st));
    line("rate:", rate_text(&st));
    line("eta:", eta_text(&st).filter(|_| st.phase != Phase::Complete));
    line(
        "workers:",
        st.workers_ready
            .clone()
            .map(|r| format!("{r} ready"))
            .or_else(|| st.workers.map(|w| w.to_string())),
    );
    line("shards:", shards_text(&st));
    line("throttled:", throttling_text(&st));
    line(
        "saturated:",
        condition_true(&st, STORE_SATURATED).map(|c| format!("{}: {}", c.reason, c.message)),
    );
    line("result:", st.output.clone());
    line("manifest:", st.manifest.clone());
    if st.phase == Phase::Failed {
        line("failure:", Some(failure(&st)));
    }
    line("retries:", st.retries.filter(|&r| r > 0).map(|r| r.to_string()));
    if let Some(n) = st.missing_ranges.filter(|&n| n > 0) {
        let _ = writeln!(
            out,
            "  missing:    {n} key range(s) not in the result (shards that failed for good; \
             kubectl bucketscan retry {name} scans them again):"
        );
        for m in &st.missing {
            let _ = writeln!(out, "    {}: {}", m.range, m.error);
        }
        if (n as usize) > st.missing.len() {
            let _ = writeln!(
                out,
                "    ... and {} more (the manifest's \"dead\" lists every one)",
                n as usize - st.missing.len()
            );
        }
    }
    if !st.conditions.is_empty() {
        let _ = writeln!(out, "  conditions:");
        for c in &st.conditions {
            let _ = writeln!(
                out,
                "    {:<10} {:<6} {:<18} {}",
                c.type_, c.status, c.reason, c.message
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text from S3 keys, Redis or pod logs cannot act on the terminal:
    /// escapes, carriage returns, bells and bidirectional overrides are
    /// shown, not sent (before: printed as they came).
    #[test]
    fn a_partial_result_says_so_where_watch_ends() {
        let mut st = BucketScanStatus {
            phase: Phase::Complete,
            output: Some("s3://out/r/result.jsonl".into()),
            ..Default::default()
        };
        assert_eq!(completed(&st, "photos"), "s3://out/r/result.jsonl");
        st.missing_ranges = Some(2);
        let said = completed(&st, "photos");
        assert!(
            said.starts_with("s3://out/r/result.jsonl (PARTIAL: 2 key range(s) missing")
                && said.contains("kubectl bucketscan retry photos"),
            "{said}"
        );
    }

    #[test]
    fn control_characters_are_shown_not_sent() {
        let hostile = "key\u{1b}]0;owned\u{7}\r\u{1b}[2Knext\nline\t\u{202e}drow\u{9b}x ünï";
        assert_eq!(
            terminal(hostile),
            "key\\x1b]0;owned\\x07\\x0d\\x1b[2Knext\nline\t\\u{202e}drow\\x9b x ünï"
                .replace("\\x9b x", "\\x9bx")
        );
        assert_eq!(terminal("plain 1,234 objects\n"), "plain 1,234 objects\n");
    }
    use bucketscan_api::crd::{ShardCounts, StatusNumbers};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn scanning() -> BucketScanStatus {
        BucketScanStatus {
            phase: Phase::Scanning,
            shards: Some(ShardCounts {
                total: 64,
                pending: 20,
                leased: 4,
                done: 40,
                dead: 0,
            }),
            workers: Some(4),
            numbers: StatusNumbers {
                objects_done: Some(1_234_567),
                objects_estimate: Some(2_000_000),
                rate_per_second: Some(12_345),
                eta_seconds: Some(200),
                ready_workers: None,
                ..StatusNumbers::default()
            },
            ..BucketScanStatus::default()
        }
    }

    fn condition(type_: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn the_bar_fills_with_the_share_and_stays_in_bounds() {
        assert_eq!(bar(0.0), "[....................]   0%");
        assert_eq!(bar(0.5), "[##########..........]  50%");
        assert_eq!(bar(1.0), "[####################] 100%");
        assert_eq!(
            bar(1.7),
            bar(1.0),
            "an estimate below the truth never overflows the bar"
        );
    }

    #[test]
    fn the_share_follows_shards_then_objects_then_completion() {
        let mut st = scanning();
        assert_eq!(fraction(&st), Some(40.0 / 64.0));
        st.shards = None;
        assert_eq!(fraction(&st), Some(1_234_567.0 / 2_000_000.0));
        st.numbers.objects_done = Some(3_000_000);
        assert_eq!(fraction(&st), Some(1.0), "clamped: the estimate is a lower bound");
        st.numbers.objects_estimate = None;
        assert_eq!(fraction(&st), None);
        st.phase = Phase::Complete;
        assert_eq!(fraction(&st), Some(1.0));
    }

    #[test]
    fn the_progress_line_has_every_figure_of_the_status() {
        let line = progress_line(&scanning());
        assert_eq!(
            line,
            "Scanning  [############........]  62%  1,234,567 / ~2,000,000 objects  12,345/s  \
             ETA 3m20s  4 workers  40/64 shards done (20 pending, 4 leased)"
        );
        let mut st = scanning();
        st.shards.as_mut().unwrap().dead = 2;
        st.numbers.store_throttles = Some(0);
        let line = progress_line(&st);
        assert!(line.ends_with("4 leased, 2 dead)"), "no throttling yet: {line}");
        st.numbers.store_throttles = Some(1_234);
        st.governed_rate = Some("hot/ 4200/s".into());
        st.conditions.push(condition(
            STORE_SATURATED,
            "Throttling",
            "the store throttles at 4 workers",
        ));
        let line = progress_line(&st);
        assert!(
            line.ends_with(
                "4 leased, 2 dead)  THROTTLED (1,234 answers, governed hot/ 4200/s)  SATURATED (Throttling)"
            ),
            "{line}"
        );
        let mut st = scanning();
        st.numbers.store_throttles = Some(7);
        assert!(progress_line(&st).ends_with("THROTTLED (7 answers)"));
    }

    #[test]
    fn a_fresh_scan_shows_only_its_phase() {
        assert_eq!(progress_line(&BucketScanStatus::default()).trim(), "Pending");
    }

    #[test]
    fn the_failure_is_the_failed_conditions_reason_and_message() {
        let mut st = BucketScanStatus {
            phase: Phase::Failed,
            ..BucketScanStatus::default()
        };
        assert_eq!(failure(&st), "the scan failed (no Failed condition)");
        st.conditions
            .push(condition(FAILED, "DeadlineExceeded", "ran past 60s"));
        assert_eq!(failure(&st), "DeadlineExceeded: ran past 60s");
    }
}
