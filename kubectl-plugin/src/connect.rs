//! A client and namespace the way kubectl picks them: the kubeconfig of
//! `--kubeconfig`, else KUBECONFIG or ~/.kube/config (or, inside a pod, its
//! service account), its current context or `--context`, and that
//! context's namespace unless `--namespace` says otherwise.
//!
//! May import: error

use crate::error::Error;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// The client and the namespace to look in.
pub async fn connect(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    namespace: Option<String>,
) -> Result<(Client, String), Error> {
    let config = match (kubeconfig, context) {
        // A named file or context: a kubeconfig, never the pod's identity.
        (Some(_), _) | (None, Some(_)) => {
            let options = KubeConfigOptions {
                context: context.map(str::to_string),
                ..KubeConfigOptions::default()
            };
            let kubeconfig = match kubeconfig {
                Some(path) => Kubeconfig::read_from(path),
                None => Kubeconfig::read(),
            }
            .map_err(|e| Error::NoKubeconfig(e.to_string()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| Error::NoKubeconfig(e.to_string()))?
        }
        (None, None) => Config::infer()
            .await
            .map_err(|e| Error::NoKubeconfig(e.to_string()))?,
    };
    let namespace = namespace.unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(|e| Error::Unreachable(e.to_string()))?;
    Ok((client, namespace))
}
