//! Pure: why a scan's worker pods do not run, from what the API server shows
//! of them (container waiting reasons, scheduling) and of their Deployment (a
//! ReplicaSet that may not create pods, such as a quota refusal), why the pod
//! of a plan or merge Job does not run, and when a scan that makes no
//! progress counts as stalled. The operator turns these into the conditions
//! `WorkersReady`, `Complete` (while planning or merging) and `Progressing`.
//!
//! May import: nothing of the crate.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use std::time::Duration;

/// Container waiting reasons that keep a pod from ever running without a
/// change by someone (image, Secret, command, resources).
const STUCK: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// How the worker pods stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerHealth {
    pub ready: i32,
    pub desired: i32,
    /// Why not all are ready: (reason, message) of the first problem found.
    pub problem: Option<(String, String)>,
}

impl WorkerHealth {
    /// `2/3`, as the status and `kubectl get` show it.
    pub fn display(&self) -> String {
        format!("{}/{}", self.ready, self.desired)
    }

    /// The `WorkersReady` condition: (true?, reason, message).
    pub fn condition(&self) -> (bool, String, String) {
        let counted = format!("{} worker pods ready", self.display());
        match &self.problem {
            Some((reason, message)) => (false, reason.clone(), format!("{counted}; {message}")),
            None if self.ready >= self.desired => (true, "AllReady".into(), counted),
            None => (false, "Starting".into(), counted),
        }
    }
}

pub fn worker_health(pods: &[Pod], deployment: Option<&Deployment>, desired: i32) -> WorkerHealth {
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let ready = live.iter().filter(|p| is_ready(p)).count() as i32;
    let problem = live
        .iter()
        .find_map(|p| stuck_container(p))
        .or_else(|| live.iter().find_map(|p| unschedulable(p)))
        .or_else(|| deployment.and_then(replica_failure));
    WorkerHealth {
        ready,
        desired,
        problem: problem.filter(|_| ready < desired),
    }
}

/// Why the pod of a Job (plan, merge) does not run: a container stuck or a
/// pod that cannot be scheduled, or, once the Job is `age` old past
/// `patience`, no pod at all: the Job controller could not create it (a
/// quota, a missing ServiceAccount, an admission policy), which only the
/// Job's events tell.
pub fn job_problem(job: &Job, pods: &[Pod], age: Duration, patience: Duration) -> Option<(String, String)> {
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let name = job.metadata.name.as_deref().unwrap_or("?");
    if let Some(problem) = live
        .iter()
        .find_map(|p| stuck_container(p))
        .or_else(|| live.iter().find_map(|p| unschedulable(p)))
    {
        return Some(problem);
    }
    let ever_ran = job
        .status
        .as_ref()
        .is_some_and(|s| s.active.unwrap_or(0) + s.succeeded.unwrap_or(0) + s.failed.unwrap_or(0) > 0);
    (pods.is_empty() && !ever_ran && age >= patience).then(|| {
        (
            "NoJobPod".to_string(),
            format!(
                "Job {name} has created no pod in {} s; `kubectl describe job/{name}` shows why \
                 (a quota, a missing ServiceAccount, an admission policy)",
                age.as_secs()
            ),
        )
    })
}

/// The exit code and termination message of the container that ended
/// last among `pods` (a Job's pods: the latest try), if one ended.
pub fn last_exit(pods: &[Pod]) -> Option<(i32, String)> {
    pods.iter()
        .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref())
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
        .max_by_key(|t| t.finished_at.as_ref().map(|f| f.0))
        .map(|t| {
            (
                t.exit_code,
                t.message.clone().unwrap_or_default().trim().to_string(),
            )
        })
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("?")
}

/// A container of `pod` waiting for a reason it will not get over alone.
fn stuck_container(pod: &Pod) -> Option<(String, String)> {
    let status = pod.status.as_ref()?;
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    containers.into_iter().find_map(|c| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.clone()?;
        STUCK.contains(&reason.as_str()).then(|| {
            let detail = waiting.message.as_deref().unwrap_or("");
            (
                reason.clone(),
                clip(&format!("pod {}: {reason}: {detail}", name(pod))),
            )
        })
    })
}

/// `pod` cannot be placed on a node (resources, selectors, taints).
fn unschedulable(pod: &Pod) -> Option<(String, String)> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    let reason = c.reason.clone().unwrap_or_else(|| "Unschedulable".into());
    let detail = c.message.as_deref().unwrap_or("");
    Some((
        reason.clone(),
        clip(&format!("pod {}: {reason}: {detail}", name(pod))),
    ))
}

/// The Deployment's ReplicaSet may not create pods (a quota, a policy).
fn replica_failure(d: &Deployment) -> Option<(String, String)> {
    let c = d
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")?;
    let reason = c.reason.clone().unwrap_or_else(|| "ReplicaFailure".into());
    let detail = c.message.as_deref().unwrap_or("");
    Some((
        reason,
        clip(&format!("the worker pods cannot be created: {detail}")),
    ))
}

/// Messages stay readable in `kubectl get -o wide` and within the
/// condition's limit.
fn clip(s: &str) -> String {
    const MAX: usize = 600;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// How long the scan has gone without progress, once that is at least
/// `threshold`: it counts as stalled.
pub fn stalled_for(since_progress: Duration, threshold: Duration) -> Option<Duration> {
    (since_progress >= threshold).then_some(since_progress)
}

/// When the Job's Failed condition came (Unix seconds), if it has one.
pub fn failed_at(job: &Job) -> Option<i64> {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Failed")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_second())
}

/// Seconds until a Job that failed for a cause that may pass is replaced:
/// `wait` after its Failed condition (0 or less: now; `now` in Unix seconds).
pub fn seconds_until_retry(job: &Job, wait: Duration, now: i64) -> i64 {
    failed_at(job).unwrap_or(0) + wait.as_secs() as i64 - now
}

/// A plan or merge Job's end: `Some(Ok)` once it succeeded, `Some(Err(why))`
/// (its Failed condition's reason and message) once it gave up.
pub fn job_outcome(job: &Job) -> Option<Result<(), String>> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let holds = |t: &str| conditions.iter().find(|c| c.type_ == t && c.status == "True");
    if holds("Complete").is_some() {
        return Some(Ok(()));
    }
    holds("Failed").map(|c| {
        Err(format!(
            "{}: {}",
            c.reason.as_deref().unwrap_or("Failed"),
            c.message.as_deref().unwrap_or_default()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_outcome_is_its_complete_or_failed_condition() {
        let job = |conditions: serde_json::Value| -> Job {
            serde_json::from_value(serde_json::json!({"status": {"conditions": conditions}})).unwrap()
        };
        assert_eq!(job_outcome(&Job::default()), None, "no status yet");
        assert_eq!(
            job_outcome(&job(serde_json::json!([{"type": "Complete", "status": "True"}]))),
            Some(Ok(()))
        );
        let failed = job(serde_json::json!([
            {"type": "Complete", "status": "False"},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
             "message": "Job has reached the specified backoff limit"},
        ]));
        assert_eq!(
            job_outcome(&failed),
            Some(Err(
                "BackoffLimitExceeded: Job has reached the specified backoff limit".into()
            ))
        );
        assert_eq!(
            job_outcome(&job(serde_json::json!([{"type": "Failed", "status": "False"}]))),
            None
        );
    }

    fn pod(name: &str, json: serde_json::Value) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({"status": json})).unwrap();
        p.metadata.name = Some(name.into());
        p
    }

    fn ready(name: &str) -> Pod {
        pod(
            name,
            serde_json::json!({"conditions": [{"type": "Ready", "status": "True"}]}),
        )
    }

    fn waiting(name: &str, reason: &str, message: &str) -> Pod {
        pod(
            name,
            serde_json::json!({"containerStatuses": [{
                "name": "worker", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}}}]}),
        )
    }

    fn job(name: &str, status: serde_json::Value) -> Job {
        let mut j: Job = serde_json::from_value(serde_json::json!({"status": status})).unwrap();
        j.metadata.name = Some(name.into());
        j
    }

    #[test]
    fn a_job_pod_that_cannot_run_or_a_job_without_pods_says_so() {
        let minute = Duration::from_secs(60);
        let plan = job("s-plan", serde_json::json!({"active": 1}));
        let pull = [waiting(
            "s-plan-x",
            "ImagePullBackOff",
            "Back-off pulling image \"nope:1\"",
        )];
        assert_eq!(
            job_problem(&plan, &pull, Duration::ZERO, minute),
            Some((
                "ImagePullBackOff".into(),
                "pod s-plan-x: ImagePullBackOff: Back-off pulling image \"nope:1\"".into()
            ))
        );
        let running = [ready("s-plan-x")];
        assert_eq!(job_problem(&plan, &running, 10 * minute, minute), None);
        let fresh = job("s-merge", serde_json::json!({}));
        assert_eq!(
            job_problem(&fresh, &[], Duration::from_secs(5), minute),
            None,
            "not yet"
        );
        let (reason, message) = job_problem(&fresh, &[], 2 * minute, minute).unwrap();
        assert_eq!(reason, "NoJobPod");
        assert!(
            message.starts_with("Job s-merge has created no pod in 120 s"),
            "{message}"
        );
        let done = job("s-merge", serde_json::json!({"succeeded": 1}));
        assert_eq!(
            job_problem(&done, &[], 10 * minute, minute),
            None,
            "its pod is gone, it ran"
        );
    }

    fn ended(name: &str, code: i32, at: &str, message: &str) -> Pod {
        pod(
            name,
            serde_json::json!({"containerStatuses": [{
                "name": "worker", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": code, "finishedAt": at, "message": message}}}]}),
        )
    }

    #[test]
    fn the_last_exit_is_the_latest_try_s() {
        assert_eq!(last_exit(&[ready("a")]), None);
        let pods = [
            ended("a", 1, "2026-01-01T00:00:10Z", "error: old\n"),
            ended("b", 75, "2026-01-01T00:00:30Z", "error: connection failed\n"),
            ended("c", 1, "2026-01-01T00:00:20Z", "error: older\n"),
        ];
        assert_eq!(last_exit(&pods), Some((75, "error: connection failed".into())));
    }

    #[test]
    fn a_pod_that_cannot_pull_its_image_says_so() {
        let pods = [
            ready("w-a"),
            waiting("w-b", "ImagePullBackOff", "Back-off pulling image \"nope:1\""),
        ];
        let h = worker_health(&pods, None, 2);
        assert_eq!(h.display(), "1/2");
        let (ok, reason, message) = h.condition();
        assert!(!ok);
        assert_eq!(reason, "ImagePullBackOff");
        assert_eq!(
            message,
            "1/2 worker pods ready; pod w-b: ImagePullBackOff: Back-off pulling image \"nope:1\""
        );
    }

    #[test]
    fn crash_loops_unschedulable_pods_and_quota_refusals_are_named() {
        let crash = waiting(
            "w-a",
            "CrashLoopBackOff",
            "back-off 40s restarting failed container",
        );
        assert_eq!(worker_health(&[crash], None, 1).condition().1, "CrashLoopBackOff");
        let pending = pod(
            "w-a",
            serde_json::json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]}),
        );
        let (_, reason, message) = worker_health(&[pending], None, 1).condition();
        assert_eq!(reason, "Unschedulable");
        assert!(message.ends_with("Insufficient cpu."), "{message}");
        let d: Deployment = serde_json::from_value(serde_json::json!({"status": {"conditions": [{
            "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
            "message": "pods \"w-1\" is forbidden: exceeded quota: compute, requested: cpu=250m"}]}}))
        .unwrap();
        let (_, reason, message) = worker_health(&[], Some(&d), 2).condition();
        assert_eq!(reason, "FailedCreate");
        assert!(message.starts_with("0/2 worker pods ready; the worker pods cannot be created: pods"));
        assert!(message.contains("exceeded quota"), "{message}");
    }

    #[test]
    fn ready_pods_and_pods_starting_normally_are_no_problem() {
        let h = worker_health(&[ready("a"), ready("b")], None, 2);
        assert_eq!(
            h.condition(),
            (true, "AllReady".into(), "2/2 worker pods ready".into())
        );
        let creating = waiting("b", "ContainerCreating", "");
        assert_eq!(
            worker_health(&[ready("a"), creating], None, 2).condition().1,
            "Starting"
        );
        // A stuck pod beside enough ready ones (a rollout) is not a problem.
        let stuck = waiting("c", "ErrImagePull", "x");
        assert!(
            worker_health(&[ready("a"), ready("b"), stuck], None, 2)
                .condition()
                .0
        );
    }

    #[test]
    fn long_messages_are_clipped_on_a_character_boundary() {
        let long = "é".repeat(1000);
        let h = worker_health(&[waiting("a", "CreateContainerConfigError", &long)], None, 1);
        let message = h.condition().2;
        assert!(message.len() < 700 && message.ends_with('…'), "{}", message.len());
    }

    #[test]
    fn a_scan_is_stalled_once_no_progress_lasted_the_threshold() {
        let t = Duration::from_secs(300);
        assert_eq!(stalled_for(Duration::from_secs(299), t), None);
        assert_eq!(
            stalled_for(Duration::from_secs(301), t),
            Some(Duration::from_secs(301))
        );
    }
}
