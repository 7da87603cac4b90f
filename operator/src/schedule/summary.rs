//! A schedule's checks and conditions: [`check`] refuses what the schema
//! cannot (a bad cron expression or time zone, a name too long for its
//! runs) with the reason and an actionable message (the controller adds
//! NamespaceNotAllowed, from the operator's own rule for scans); [`set`] writes Ready and Stalled (kstatus: Stalled
//! present only while True, as BucketScan has it). Pure.
//!
//! May import: `status`, `schedule::cron`, `schedule::build`.

use super::build::MAX_NAME;
use super::cron::{time_zone, Cron};
use crate::status::{remove_condition, set_condition, READY, STALLED};
use bucketscan_api::schedule::{BucketScanSchedule, BucketScanScheduleStatus};
use jiff::tz::TimeZone;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

/// Why a schedule cannot run, for its Ready condition.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

/// The schedule's cron expression and time zone, or why it cannot run.
pub fn check(schedule: &BucketScanSchedule) -> Result<(Cron, TimeZone), Refusal> {
    let name = schedule.name_any();
    if name.len() > MAX_NAME {
        return Err(Refusal {
            reason: "NameTooLong",
            message: format!(
                "the schedule's name has {} characters; at most {MAX_NAME}: each run is named NAME-MINUTES, and a scan's name must fit a label value (63)",
                name.len()
            ),
        });
    }
    let cron = Cron::parse(&schedule.spec.schedule).map_err(|e| Refusal {
        reason: "InvalidSchedule",
        message: format!("spec.schedule: {e}"),
    })?;
    let tz = time_zone(schedule.spec.time_zone.as_deref()).map_err(|e| Refusal {
        reason: "InvalidTimeZone",
        message: format!("spec.timeZone: {e}"),
    })?;
    Ok((cron, tz))
}

/// Ready=False and Stalled=True with the refusal; no next run.
pub fn refused(st: &mut BucketScanScheduleStatus, refusal: &Refusal, generation: Option<i64>, now: &Time) {
    st.next_schedule_time = None;
    let c = &mut st.conditions;
    set_condition(c, READY, false, refusal.reason, &refusal.message, generation, now);
    set_condition(
        c,
        STALLED,
        true,
        refusal.reason,
        &refusal.message,
        generation,
        now,
    );
}

/// Ready=True (reason Scheduled, with when the next run is due), or False
/// with reason Suspended; no Stalled.
pub fn running(st: &mut BucketScanScheduleStatus, suspended: bool, generation: Option<i64>, now: &Time) {
    let c = &mut st.conditions;
    remove_condition(c, STALLED);
    if suspended {
        st.next_schedule_time = None;
        set_condition(
            c,
            READY,
            false,
            "Suspended",
            "spec.suspend is true: no run starts",
            generation,
            now,
        );
        return;
    }
    let message = match &st.next_schedule_time {
        Some(t) => format!("next run at {}", t.0),
        None => "no time of the schedule comes within eight years".to_string(),
    };
    set_condition(c, READY, true, "Scheduled", &message, generation, now);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(name: &str, cron: &str, tz: Option<&str>) -> BucketScanSchedule {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScanSchedule",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"schedule": cron, "timeZone": tz,
                     "scanTemplate": {"source": {"bucket": "photos"}, "output": {"bucket": "out"}}}
        }))
        .unwrap()
    }

    #[test]
    fn each_refusal_has_its_reason_and_says_what_to_fix() {
        let reason = |s: &BucketScanSchedule| check(s).unwrap_err();
        let bad = reason(&schedule("n", "0 25 * * *", None));
        assert_eq!(bad.reason, "InvalidSchedule");
        assert!(
            bad.message.starts_with("spec.schedule: hour field"),
            "{}",
            bad.message
        );
        let tz = reason(&schedule("n", "0 2 * * *", Some("Europe/Atlantis")));
        assert_eq!(tz.reason, "InvalidTimeZone");
        assert!(tz.message.contains("\"Europe/Atlantis\""), "{}", tz.message);
        assert_eq!(
            reason(&schedule(&"x".repeat(53), "@daily", None)).reason,
            "NameTooLong"
        );
        assert!(check(&schedule("n", "@daily", Some("Asia/Tokyo"))).is_ok());
    }

    #[test]
    fn ready_and_stalled_follow_the_schedule() {
        let now = Time(jiff::Timestamp::from_second(0).unwrap());
        let mut st = BucketScanScheduleStatus::default();
        let refusal = Refusal {
            reason: "InvalidSchedule",
            message: "spec.schedule: bad".into(),
        };
        refused(&mut st, &refusal, Some(1), &now);
        assert!(crate::status::is_true(&st.conditions, STALLED));
        assert!(!crate::status::is_true(&st.conditions, READY));
        st.next_schedule_time = Some(Time(jiff::Timestamp::from_second(60).unwrap()));
        running(&mut st, false, Some(2), &now);
        assert!(crate::status::is_true(&st.conditions, READY));
        assert!(st.conditions.iter().all(|c| c.type_ != STALLED));
        running(&mut st, true, Some(3), &now);
        let ready = st.conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "Suspended")
        );
        assert_eq!(st.next_schedule_time, None);
    }
}
