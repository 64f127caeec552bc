#!/usr/bin/env bash
# Writes a throw-away CA and a webhook serving certificate for 127.0.0.1/localhost into DIR (ca.crt, tls.crt, tls.key),
# for running the manager outside a cluster (make run, integration tests). Keeps existing files.
#   usage: dev-certs.sh DIR
set -euo pipefail
dir=${1:?usage: dev-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
[[ -f tls.crt && -f tls.key && -f ca.crt ]] && exit 0
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj "/CN=capi-ipam-webhook-ca" \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=capi-ipam-webhook" \
  -keyout tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile tls.ext -out tls.crt 2>/dev/null
rm -f tls.csr tls.ext ca.srl
chmod 600 ca.key tls.key
