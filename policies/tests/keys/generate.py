"""TEST-ONLY key material for the policies crate's JWT tests. Never use these keys anywhere
else: the private halves are public in this repository.

Regenerate with `python3 generate.py` (needs the `cryptography` package). The tests read
the PEM files and the single-key JWK files; they build JWKS sets from the JWKs themselves.
"""
import base64
import json

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa


def b64u(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def int_bytes(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


def write_pair(name, key):
    open(f"{name}.key.pem", "wb").write(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    open(f"{name}.pub.pem", "wb").write(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def rsa_jwk(key, kid):
    n = key.public_key().public_numbers()
    return {"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": b64u(int_bytes(n.n)), "e": b64u(int_bytes(n.e))}


for name in ["rsa", "rsa2", "attacker"]:
    k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_pair(name, k)
    json.dump(rsa_jwk(k, f"{name}-kid"), open(f"{name}.jwk.json", "w"), indent=1)

k = ec.generate_private_key(ec.SECP256R1())
write_pair("ec", k)
n = k.public_key().public_numbers()
json.dump({"kty": "EC", "kid": "ec-kid", "use": "sig", "alg": "ES256", "crv": "P-256",
           "x": b64u(n.x.to_bytes(32, "big")), "y": b64u(n.y.to_bytes(32, "big"))},
          open("ec.jwk.json", "w"), indent=1)

k = ed25519.Ed25519PrivateKey.generate()
write_pair("ed", k)
raw = k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
json.dump({"kty": "OKP", "kid": "ed-kid", "use": "sig", "alg": "EdDSA", "crv": "Ed25519", "x": b64u(raw)},
          open("ed.jwk.json", "w"), indent=1)
