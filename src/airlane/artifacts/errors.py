"""The errors of `airlane.artifacts`: each says what was wrong, never with a traceback.

``status`` and ``code`` are what the HTTP gateway answers with when one reaches it.
"""

from __future__ import annotations

__all__ = [
    "ArtifactError",
    "ArtifactNotFound",
    "DeltaBaseMismatch",
    "MalformedArtifact",
    "SignatureError",
    "VerificationError",
]


class ArtifactError(Exception):
    """Something about an artifact was refused."""

    status = 400
    code = "artifact_error"


class ArtifactNotFound(ArtifactError):
    """No such artifact, version or file."""

    status = 404
    code = "not_found"


class MalformedArtifact(ArtifactError):
    """A file or manifest does not follow its format (bad header, offsets, JSON...)."""

    status = 422
    code = "malformed_artifact"


class VerificationError(ArtifactError):
    """Bytes do not match the checksums the manifest promised."""

    status = 422
    code = "verification_failed"


class SignatureError(VerificationError):
    """A manifest's Ed25519 signature is missing, malformed or does not verify."""

    code = "bad_signature"


class DeltaBaseMismatch(ArtifactError):
    """A delta was offered a base other than the one it was made against."""

    status = 409
    code = "delta_base_mismatch"
