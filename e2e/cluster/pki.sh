#!/usr/bin/env bash
# Certificates and kubeconfigs of the e2e cluster: one CA signs everything.
# Creates only what is missing, so a second run changes nothing.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
mkdir -p "$PKI"
cd "$PKI"

if [ ! -f ca.crt ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=bucketscan-e2e-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
fi

# certificate NAME SUBJECT USAGE [SAN]: a key and a certificate signed by the CA.
certificate() {
  local name=$1 subject=$2 usage=$3 san=${4:-}
  [ -f "$name.crt" ] && return 0
  openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subject" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    if [ -n "$san" ]; then echo "subjectAltName=$san"; fi
  } >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

svc=kubernetes.default.svc
certificate apiserver "/CN=kube-apiserver" serverAuth \
  "DNS:kubernetes,DNS:kubernetes.default,DNS:$svc,DNS:$svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:10.96.0.1,IP:$NODE_IP"
certificate apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
certificate admin "/O=system:masters/CN=bucketscan-e2e-admin" clientAuth
certificate controller-manager "/CN=system:kube-controller-manager" clientAuth
certificate scheduler "/CN=system:kube-scheduler" clientAuth
certificate kube-proxy "/CN=system:kube-proxy" clientAuth
certificate kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
certificate kubelet-serving "/CN=$NODE_NAME" serverAuth "DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP"
if [ ! -f sa.key ]; then
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
fi

# kubeconfig NAME USER: certificates embedded, server on the node's loopback.
kubeconfig() {
  local name=$1 user=$2
  [ -f "$name.kubeconfig" ] && return 0
  cat >"$name.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: bucketscan-e2e
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: $(base64 -w0 ca.crt)
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$name.crt")
    client-key-data: $(base64 -w0 "$name.key")
contexts:
- name: bucketscan-e2e
  context: {cluster: bucketscan-e2e, user: $user}
current-context: bucketscan-e2e
KUBECONFIG
}
kubeconfig admin admin
kubeconfig controller-manager system:kube-controller-manager
kubeconfig scheduler system:kube-scheduler
kubeconfig kube-proxy system:kube-proxy
kubeconfig kubelet "system:node:$NODE_NAME"
chmod 600 ./*.key ./*.kubeconfig
