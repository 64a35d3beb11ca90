"""Error types of offline-iaas.

Every failure a user can cause or meet is one of these types; the CLI maps each type to one
exit code (its ``exit_code``) and prints its message on one line, never a traceback.
"""

from __future__ import annotations


class OfflineIaasError(Exception):
    """Base class: a failure with a message meant for the user."""

    exit_code = 1


class ConfigError(OfflineIaasError):
    """The campaign configuration (file, key, value or override) is invalid."""

    exit_code = 2


class DataError(OfflineIaasError):
    """Frames, caches or channels are missing, unreadable or inconsistent."""

    exit_code = 3


class ModelError(OfflineIaasError):
    """A model, weight file or model repository does not match the campaign."""

    exit_code = 4


class ServerError(OfflineIaasError):
    """The inference server could not be started, reached or kept alive."""

    exit_code = 5


class RunError(OfflineIaasError):
    """The run directory or a DAG node is in a state the command cannot continue from."""

    exit_code = 6


class MismatchError(OfflineIaasError):
    """The campaign output differs from the in-process reference."""

    exit_code = 7
