"""The errors of `airlane.artifacts`: each says what was wrong, never with a traceback.

Each is an `airlane.core.errors.AirlaneError` with its stable ``code``; a transport that
serves artifacts reports it through its own table (``docs/errors.md``).
"""

from __future__ import annotations

from airlane.core.errors import AirlaneError, ErrorCode

__all__ = [
    "ArtifactError",
    "ArtifactNotFound",
    "DeltaBaseMismatch",
    "MalformedArtifact",
    "SignatureError",
    "VerificationError",
]


class ArtifactError(AirlaneError):
    """Something about an artifact was refused."""

    code = ErrorCode.ARTIFACT_ERROR


class ArtifactNotFound(ArtifactError):
    """No such artifact, version or file."""

    code = ErrorCode.NOT_FOUND


class MalformedArtifact(ArtifactError):
    """A file or manifest does not follow its format (bad header, offsets, JSON...)."""

    code = ErrorCode.MALFORMED_ARTIFACT


class VerificationError(ArtifactError):
    """Bytes do not match the checksums the manifest promised."""

    code = ErrorCode.VERIFICATION_FAILED


class SignatureError(VerificationError):
    """A manifest's Ed25519 signature is missing, malformed or does not verify."""

    code = ErrorCode.BAD_SIGNATURE


class DeltaBaseMismatch(ArtifactError):
    """A delta was offered a base other than the one it was made against."""

    code = ErrorCode.DELTA_BASE_MISMATCH
