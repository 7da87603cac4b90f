//! What the kubelet would do for the pods the operator asks for, which the
//! test ground (an apiserver without nodes) does not run: start
//! `bucketscan-worker` with a container's exact arguments and environment,
//! Secrets resolved as the kubelet resolves them. Needs `common` (the worker
//! tests' helpers) declared by the test file.
#![allow(dead_code)]

use super::common::{temp_path, worker_bin};
use k8s_openapi::api::core::v1::{Container, Secret};
use kube::api::Api;
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
