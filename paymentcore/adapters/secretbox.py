"""FernetSecretBox: webhook signing secrets encrypted at rest with a server key (cryptography's Fernet)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from cryptography.fernet import Fernet

__all__ = [
    "FernetSecretBox",
]


class FernetSecretBox:
    def __init__(self, key: bytes | str) -> None:
        self._fernet = Fernet(key)

    @classmethod
    def generate(cls) -> FernetSecretBox:
        """A box with a fresh key that lives only in this process (memory stores, tests)."""
        return cls(Fernet.generate_key())

    @classmethod
    def from_key_file(cls, path: str | Path) -> FernetSecretBox:
        """Use the key in ``path``, generating it once (mode 0600) when the file does not exist."""
        path = Path(path)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            # written whole to a private temporary file, then linked into place: a process that
            # starts at the same moment sees either no key file or a complete one
            temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(Fernet.generate_key())
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(temp, path)
            except FileExistsError:
                pass  # another process made it first: use theirs
            finally:
                temp.unlink()
        return cls(path.read_bytes().strip())

    def encrypt(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode()

    def decrypt(self, token: str) -> str:
        return self._fernet.decrypt(token.encode()).decode()
