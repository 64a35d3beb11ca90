"""Writing a file so that readers see either its old or its new contents, never a part."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from offline_iaas.errors import raise_if_no_space


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a unique temporary file beside ``path``, then rename it over ``path``.

    The temporary file is removed if anything fails; a full disk is a ``NoSpaceError`` naming
    ``path``, and any other failure of the temporary file (a read-only directory) an
    ``OSError`` naming ``path``. It is created with ``open(..., "x")``, so it gets the
    umask's mode (mkstemp would make it 0600).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):  # never created (read-only: unlink fails too)
            tmp.unlink(missing_ok=True)
        raise_if_no_space(err, path)
        if isinstance(err, OSError) and str(err.filename) == str(tmp):  # name the final file
            raise type(err)(err.errno, err.strerror, str(path)) from None
        raise
