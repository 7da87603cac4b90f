//! A client and namespace the way kubectl picks them: the kubeconfig of
//! KUBECONFIG or ~/.kube/config (or, inside a pod, its service account),
//! its current context or `--context`, and that context's namespace unless
//! `--namespace` says otherwise.
//!
//! May import: error

use crate::error::Error;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// The client and the namespace to look in.
pub async fn connect(context: Option<&str>, namespace: Option<&str>) -> Result<(Client, String), Error> {
    let config = match context {
        // A named context only exists in a kubeconfig.
        Some(context) => {
            let options = KubeConfigOptions {
                context: Some(context.to_string()),
                ..KubeConfigOptions::default()
            };
            let kubeconfig = Kubeconfig::read().map_err(|e| Error::NoKubeconfig(e.to_string()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| Error::NoKubeconfig(e.to_string()))?
        }
        None => Config::infer()
            .await
            .map_err(|e| Error::NoKubeconfig(e.to_string()))?,
    };
    let namespace = namespace.map_or_else(|| config.default_namespace.clone(), str::to_string);
    let client = Client::try_from(config).map_err(|e| Error::Unreachable(e.to_string()))?;
    Ok((client, namespace))
}
