"""``python -m tokenfleet.signing``: make a key, sign a model directory, verify an artifact.

    keygen DIR                                  write private.pem and public.pem
    sign MODEL_DIR --private-key K [--signature S]   prints the digest to pin in the spec
    verify URI --digest D (--public-key P | --identity I --issuer U) [--signature-uri S]

``verify`` prints the verdict as JSON and exits 0 only when the artifact verified.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tokenfleet.signing import fetch, keys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tokenfleet.signing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    keygen = commands.add_parser("keygen", help="write a new EC P-256 key pair")
    keygen.add_argument("directory", type=Path)
    sign = commands.add_parser("sign", help="sign a model directory")
    sign.add_argument("model_dir", type=Path)
    sign.add_argument("--private-key", type=Path, required=True)
    sign.add_argument("--signature", type=Path, help="default: MODEL_DIR/model.sig")
    verify = commands.add_parser("verify", help="fetch and verify an artifact")
    verify.add_argument("uri")
    verify.add_argument("--digest", default="", help="the sha256:<hex> the spec pins")
    verify.add_argument("--signature-uri", default="")
    verify.add_argument("--public-key", type=Path)
    verify.add_argument("--identity", default="")
    verify.add_argument("--issuer", default="")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "keygen":
        private, public = keys.generate(args.directory)
        print(f"private key: {private}\npublic key:  {public}")
        return 0
    # model_signing (and sigstore) load only for the commands that need them: seconds saved.
    from tokenfleet.signing import verify

    if args.command == "sign":
        signature = args.signature or args.model_dir / fetch.SIGNATURE_FILE
        print(verify.sign(args.model_dir, private_key=args.private_key, signature=signature))
        return 0
    trust = verify.Trust(public_key=args.public_key, identity=args.identity, issuer=args.issuer)
    verdict, _ = verify.verify_artifact(
        args.uri, trust=trust, expected_digest=args.digest, signature_uri=args.signature_uri
    )
    print(verdict.to_json())
    return 0 if verdict.verified else 1


if __name__ == "__main__":
    sys.exit(main())
