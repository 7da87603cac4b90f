//! Who a test talks to the API server as: the ground's admin (`client`), a
//! user or ServiceAccount by impersonation (`client_as`, or a kubeconfig
//! for a process such as the operator: `impersonating_kubeconfig`), what
//! RBAC lets them do (`grant`, `can_i`), and what the API server refuses
//! them (`refusal`, `settled_refusal`).
//!
//! Imports the Kubernetes client and `cluster`'s kubeconfig and kubectl.

use super::{eventually, kubeconfig_path, run};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// The test ground's admin.
pub async fn client() -> Client {
    let kc = Kubeconfig::read_from(kubeconfig_path()).unwrap();
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// A client of the test ground that the API server authorizes as `user`
/// (impersonation: the `Impersonate-User` header), by RBAC and the
/// admission policies, instead of as the ground's admin.
pub async fn client_as(user: &str) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig_path()).unwrap();
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).unwrap()
}

/// A copy of the test ground's kubeconfig, written to `path`, whose user
/// impersonates `user` (`as:`, which kube-rs and kubectl send as the
/// `Impersonate-User` header): the API server authorizes every request made
/// with it as `user`, by RBAC, instead of as the ground's admin.
pub fn impersonating_kubeconfig(user: &str, path: &std::path::Path) {
    let mut kc = Kubeconfig::read_from(kubeconfig_path()).unwrap();
    for named in &mut kc.auth_infos {
        named.auth_info.get_or_insert_default().impersonate = Some(user.to_string());
    }
    std::fs::write(path, serde_saphyr::to_string(&kc).unwrap()).unwrap();
}

/// `kubectl auth can-i ARGS` as `user`, answered by the API server.
pub fn can_i(user: &str, args: &[&str]) -> bool {
    let out = std::process::Command::new("kubectl")
        .args(["auth", "can-i", &format!("--as={user}")])
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// A Role in `ns` granting `verbs` on `resources` (kubectl's lists) and
/// bound to `user`.
pub fn grant(ns: &str, user: &str, verbs: &str, resources: &str) {
    let role = format!(
        "{}-{}",
        user.replace(':', "-"),
        resources.replace(['.', ','], "-")
    );
    let verbs = format!("--verb={verbs}");
    let resources = format!("--resource={resources}");
    run(
        "kubectl",
        &["-n", ns, "create", "role", &role, &verbs, &resources],
    );
    let (role_ref, subject) = (format!("--role={role}"), format!("--user={user}"));
    run(
        "kubectl",
        &["-n", ns, "create", "rolebinding", &role, &role_ref, &subject],
    );
}

/// The API server's refusal of `result`: its HTTP code and message.
pub fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(e)) => (e.code, e.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The message of the 403 creating `body` through `api` gets once it says
/// `expected`. Policies and RBAC just applied are read from caches by the
/// API server: until they are in force, an object admitted is deleted
/// (through `admin`) and the create tried again, for at most 30 s.
pub async fn settled_refusal<K>(api: &Api<K>, admin: &Api<K>, body: &K, expected: &str) -> String
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = body.meta().name.clone().unwrap();
    eventually(
        &format!("{name} refused saying {expected:?}"),
        30,
        async || match api.create(&PostParams::default(), body).await {
            Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains(expected) => Some(e.message),
            Ok(_) => {
                admin.delete(&name, &Default::default()).await.unwrap();
                None
            }
            _ => None,
        },
    )
    .await
}
