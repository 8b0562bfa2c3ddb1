#!/bin/sh
# Re-sign tiny-chat/ with a new key: writes tiny-chat/model.sig, public.pem and
# trust-secret.yaml, and prints the digest to pin in modeldeployment.yaml (it depends only on
# the files, so it stays the same unless they change). The private key is thrown away: nobody
# else can sign for the shipped public key, and re-running this makes a new one.
set -eu
cd "$(dirname "$0")"
PY=${PY:-../../.venv/bin/python}
keys=$(mktemp -d)
trap 'rm -rf "$keys"' EXIT
$PY -m tokenfleet.signing keygen "$keys" >/dev/null
digest=$($PY -m tokenfleet.signing sign tiny-chat --private-key "$keys/private.pem")
cp "$keys/public.pem" public.pem
{
  echo "# The key example 02's artifact is signed with (public half only; made by make-artifact.sh)."
  echo "apiVersion: v1"
  echo "kind: Secret"
  echo "metadata:"
  echo "  name: model-signing-key"
  echo "stringData:"
  echo "  public.pem: |"
  sed 's/^/    /' public.pem
} > trust-secret.yaml
echo "$digest"
