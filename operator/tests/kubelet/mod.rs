//! What the kubelet would do for the pods the operator asks for, which the
//! test ground (an apiserver without nodes) does not run: start
//! `bucketscan-worker` with a container's exact arguments and environment,
//! Secrets resolved as the kubelet resolves them. Needs `common` (the worker
//! tests' helpers) declared by the test file.
#![allow(dead_code)]

use super::common::{temp_path, worker_bin};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use std::process::{Child, Command, Stdio};

/// Start the command a pod `pod` of `container` in `ns` would run.
pub async fn run_like_pod(
    client: &Client,
    ns: &str,
    container: &Container,
    pod: &str,
    extra: &[&str],
) -> Child {
    run_like_pod_as(client, ns, container, pod, extra, &[]).await
}

/// `run_like_pod` with what the pod's identity adds to its environment
/// (IRSA or Workload Identity inject their credentials this way).
pub async fn run_like_pod_as(
    client: &Client,
    ns: &str,
    container: &Container,
    pod: &str,
    extra: &[&str],
    identity: &[(&str, &str)],
) -> Child {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut cmd = Command::new(worker_bin());
    cmd.args(container.args.clone().unwrap()).args(extra).env_clear();
    cmd.env("PATH", std::env::var("PATH").unwrap());
    for env in container.env.clone().unwrap_or_default() {
        let value = match (&env.value, env.value_from.as_ref()) {
            (Some(v), _) => Some(v.clone()),
            (None, Some(from)) if from.field_ref.is_some() => Some(pod.to_string()),
            (None, Some(from)) => {
                let r = from.secret_key_ref.as_ref().unwrap();
                let secret = secrets.get(&r.name).await.unwrap();
                let data = secret.data.unwrap_or_default();
                match data.get(&r.key) {
                    Some(v) => Some(String::from_utf8(v.0.clone()).unwrap()),
                    None => {
                        assert_eq!(r.optional, Some(true), "{} has no key {}", r.name, r.key);
                        None
                    }
                }
            }
            (None, None) => None,
        };
        if let Some(v) = value {
            cmd.env(&env.name, v);
        }
    }
    for (name, value) in identity {
        cmd.env(name, value);
    }
    let log = std::fs::File::create(temp_path(&format!("{pod}.log"))).unwrap();
    cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap()
}

/// SIGTERM, as the kubelet sends a pod that is going away: the worker
/// checkpoints and releases its shard.
pub fn terminate(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -TERM {}", child.id());
}

// What the job controller and the kubelet report of a Job and its pod.

/// What the job controller writes when the Job's pod succeeded.
pub async fn complete(jobs: &Api<Job>, name: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = serde_json::json!({"status": {
        "startTime": now, "completionTime": now, "succeeded": 1,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
            {"type": "Complete", "status": "True", "lastTransitionTime": now}
        ]
    }});
    jobs.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// What the job controller writes when the Job's pods failed past its
/// backoff limit.
pub async fn fail(jobs: &Api<Job>, name: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let failed = serde_json::json!({"status": {"startTime": now, "failed": 4, "conditions": [
        {"type": "FailureTarget", "status": "True", "lastTransitionTime": now},
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit", "lastTransitionTime": now}]}});
    jobs.patch_status(name, &PatchParams::default(), &Patch::Merge(&failed))
        .await
        .unwrap();
}

/// The pod of Job `job` as the kubelet reports it once its container exited
/// with `code`, its log's tail the termination message (the container's
/// `FallbackToLogsOnError`).
pub async fn ended_pod(client: &kube::Client, ns: &str, name: &str, job: &str, code: i32, log: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"job-name": job}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "worker", "image": "bucketscan"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let tail: String = log
        .lines()
        .rev()
        .take(5)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = serde_json::json!({"status": {"phase": "Failed", "containerStatuses": [{
        "name": "worker", "image": "bucketscan", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": code, "reason": "Error", "message": tail,
                                 "startedAt": now, "finishedAt": now}}}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}
