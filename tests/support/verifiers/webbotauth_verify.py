"""Verifies Web Bot Auth signatures with Python's http-message-signatures
(an implementation independent of the proxy's), for the identity tests.

Reads one JSON object on stdin:
  {"directory": {"body": str, "headers": [[name, value], ...], "url": str},
   "requests": [{"method": str, "url": str, "headers": [[name, value], ...],
                "label": the signature to verify, when there are several}],
   "now_offset": seconds the verifier's clock is moved ahead (default 0)}
Writes one JSON object: {"directory": {"ok": bool, "error": str, "kids": [...]},
"requests": [{"ok": bool, "error": str, "keyid": str, "agent": str}]}.
Keys are taken from the directory, each `kid` checked against the RFC 7638
thumbprint computed here; a request must carry tag "web-bot-auth" and cover
@authority and its own Signature-Agent member.
"""
import base64
import datetime
import hashlib
import json
import sys

import http_message_signatures as hms
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def thumbprint(x):
    canonical = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": x}, separators=(",", ":"), sort_keys=True)
    return b64url(hashlib.sha256(canonical.encode()).digest())


class Message:
    def __init__(self, method, url, headers):
        self.method = method
        self.url = url
        self.headers = hms.structures.CaseInsensitiveDict()
        for name, value in headers:
            if name in self.headers:
                self.headers[name] = self.headers[name] + ", " + value
            else:
                self.headers[name] = value


class Response:
    def __init__(self, headers, request):
        self.status_code = 200
        self.headers = hms.structures.CaseInsensitiveDict()
        for name, value in headers:
            self.headers[name] = value
        self.request = request


class Keys(hms.HTTPSignatureKeyResolver):
    def __init__(self, keys):
        self.keys = keys

    def resolve_public_key(self, key_id):
        return self.keys.get(key_id)


def shifted(offset):
    class Verifier(hms.HTTPMessageVerifier):
        def validate_created_and_expires(self, sig_input, max_age=None):
            real = datetime.datetime
            moved = real.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset)

            class Clock(real):
                @classmethod
                def now(cls, tz=None):
                    return moved

            datetime.datetime = Clock
            try:
                return super().validate_created_and_expires(sig_input, max_age)
            finally:
                datetime.datetime = real

    return Verifier


def main():
    task = json.load(sys.stdin)
    offset = task.get("now_offset", 0)
    out = {"directory": None, "requests": []}
    directory = task["directory"]
    jwks = json.loads(directory["body"])
    keys, kids = {}, []
    for jwk in jwks["keys"]:
        if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
            continue
        kid = thumbprint(jwk["x"])
        if jwk.get("kid") != kid:
            out["directory"] = {"ok": False, "error": f"kid {jwk.get('kid')} is not the thumbprint {kid}"}
            print(json.dumps(out))
            return
        keys[kid] = Ed25519PublicKey.from_public_bytes(unb64url(jwk["x"]))
        kids.append(kid)
    Verifier = shifted(offset)
    # The directory's own signatures: one per key, over @authority (of the
    # request) and Content-Digest, whose digest is checked here.
    resp = Response(directory["headers"], Message("GET", directory["url"], []))
    try:
        digest = resp.headers["Content-Digest"]
        want = "sha-256=:" + base64.b64encode(hashlib.sha256(directory["body"].encode()).digest()).decode() + ":"
        if digest != want:
            raise ValueError(f"Content-Digest {digest} is not {want}")
        verifier = Verifier(signature_algorithm=hms.algorithms.ED25519, key_resolver=Keys(keys))
        results = verifier.verify(resp, expect_tag="http-message-signatures-directory",
                                  require_components=('"@authority";req', "content-digest"))
        signed_by = sorted(r.parameters["keyid"] for r in results)
        if signed_by != sorted(kids):
            raise ValueError(f"signed by {signed_by}, listed {kids}")
        out["directory"] = {"ok": True, "error": "", "kids": kids}
    except Exception as e:  # noqa: BLE001 - the test reads the reason
        out["directory"] = {"ok": False, "error": f"{type(e).__name__}: {e}", "kids": kids}
    for r in task.get("requests", []):
        msg = Message(r["method"], r["url"], r["headers"])
        try:
            verifier = Verifier(signature_algorithm=hms.algorithms.ED25519, key_resolver=Keys(keys))
            results = verifier.verify(msg, expect_tag="web-bot-auth", expect_label=r.get("label"),
                                      max_age=None, require_components=("@authority",))
            res = results[0]
            names = list(res.covered_components)
            label = res.label
            if not any("signature-agent" in n for n in names):
                raise ValueError(f"signature-agent not covered: {names}")
            out["requests"].append({"ok": True, "error": "", "keyid": res.parameters["keyid"], "label": label})
        except Exception as e:  # noqa: BLE001
            out["requests"].append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    print(json.dumps(out))


main()
