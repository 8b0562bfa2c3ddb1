#!/bin/sh
# Re-make and re-sign the two adapters with a new key: writes acme-support/ and globex-legal/
# (files and model.sig), public.pem and trust-secret.yaml, and prints each digest to pin in
# adapters.yaml (a digest depends only on the files). The private key is thrown away: nobody
# else can sign for the shipped public key, and re-running this makes a new one.
set -eu
cd "$(dirname "$0")"
PY=${PY:-../../.venv/bin/python}
keys=$(mktemp -d)
trap 'rm -rf "$keys"' EXIT
$PY make-adapters.py .
$PY -m tokenfleet.signing keygen "$keys" >/dev/null
for adapter in acme-support globex-legal; do
  echo "$adapter $($PY -m tokenfleet.signing sign "$adapter" --private-key "$keys/private.pem")"
done
cp "$keys/public.pem" public.pem
{
  echo "# The key example 08's adapters are signed with (public half only; made by make-adapters.sh)."
  echo "apiVersion: v1"
  echo "kind: Secret"
  echo "metadata:"
  echo "  name: adapter-signing-key"
  echo "stringData:"
  echo "  public.pem: |"
  sed 's/^/    /' public.pem
} > trust-secret.yaml
