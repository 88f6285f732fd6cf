"""Hot reload of the policy directory: swap in a good policy atomically, keep the last good one otherwise.

The directory is usually a ConfigMap mount, which the kubelet updates by writing a new hidden
``..<timestamp>`` directory and renaming the ``..data`` symlink onto it; the visible files are
symlinks through ``..data``. So the fingerprint resolves symlinks and includes the ``..data`` target:
mtimes alone would miss a swap to files with equal mtimes and sizes.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from webhook.policy.compiled import CompiledPolicy
from webhook.policy.loader import PolicyError, Problem, load, policy_files

log = logging.getLogger("webhook.policy")

OnResult = Callable[[str, PolicyError | None], None]

# A load that raced with a ConfigMap swap (fingerprint changed while reading) is retried this often.
_ATTEMPTS = 3


#: What ``fingerprint`` returns: compared for equality only.
Fingerprint = tuple[object, ...]


def fingerprint(path: Path) -> Fingerprint:
    """What changes whenever the policy files' content can have changed; cheap (stat calls only)."""
    try:
        data_link = os.readlink(path / "..data") if path.is_dir() and (path / "..data").is_symlink() else None
        files = policy_files(path) if path.exists() else []
    except OSError as exc:
        return ("unreadable", str(exc))
    entries: list[Fingerprint] = []
    for file in files:
        try:
            st = file.stat()
            entries.append((file.name, os.path.realpath(file), st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            entries.append((file.name, None))
    return (data_link, tuple(entries))


def _where(path: Path) -> str:
    return f"{path}/" if path.is_dir() and not str(path).endswith("/") else str(path)


def _count(files: tuple[str, ...]) -> str:
    return f"{len(files)} file" if len(files) == 1 else f"{len(files)} files"


class PolicyStore:
    """The current policy, reloaded when its files change; readers never see a half-loaded one.

    ``on_result("success" | "error", error)`` is called after every load attempt (for the reload metric
    and readiness). A failed initial load leaves ``current`` as ``last_good`` (None: the server still
    starts, not ready); ``error`` says what is broken either way.
    """

    def __init__(self, path: str | Path, on_result: OnResult | None = None,
                 last_good: CompiledPolicy | None = None) -> None:
        self.path = Path(path)
        self._on_result = on_result
        self._lock = threading.Lock()  # guards _current/_error together
        self._reload_lock = threading.Lock()  # one load at a time
        self._current: CompiledPolicy | None = None
        self._error: str | None = None
        self._fingerprint: Fingerprint | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.check()
        if self._current is None and last_good is not None:
            # e.g. a gunicorn worker replaced while the files are broken: keep serving what the master had.
            with self._lock:
                self._current = last_good
            log.warning("policy files are broken; starting from the last good policy %s", last_good.identity)

    @property
    def current(self) -> CompiledPolicy | None:
        with self._lock:
            return self._current

    @property
    def error(self) -> str | None:
        """The last load's problems (one per line), None once a load succeeded."""
        with self._lock:
            return self._error

    def check(self) -> bool:
        """Reload if the files changed. True iff a new policy was installed."""
        if fingerprint(self.path) == self._fingerprint:
            return False
        with self._reload_lock:
            before = fingerprint(self.path)
            if before == self._fingerprint:
                return False  # another thread reloaded meanwhile
            for _ in range(_ATTEMPTS):
                policy, error = self._load()
                after = fingerprint(self.path)
                if after == before:
                    self._fingerprint = after
                    break
                before = after  # changed while we read: the files may be a mix of two versions
            else:
                # Still changing after every attempt: install nothing that may mix two versions, and
                # look again on the next check.
                self._fingerprint = None
                log.warning("policy files in %s kept changing while being read; will retry", _where(self.path))
                return False
            if policy is not None:
                self._install(policy)
                return True
            self._fail(error or PolicyError([Problem(str(self.path), 0, "", "no policy loaded")]))
            return False

    def _load(self) -> tuple[CompiledPolicy | None, PolicyError | None]:
        try:
            return load(self.path), None
        except PolicyError as err:
            return None, err
        except Exception as exc:  # a loader bug must not take the server down with it
            log.exception("policy load crashed")
            return None, PolicyError([Problem(str(self.path), 0, "", f"internal error: {exc!r}")])

    def _install(self, policy: CompiledPolicy) -> None:
        with self._lock:
            previous, self._current, self._error = self._current, policy, None
        what = "unchanged" if previous is not None and previous.identity == policy.identity else "loaded"
        log.info("policy %s: %s from %s (%s)", what, policy.identity, _where(self.path), _count(policy.files))
        self._notify("success", None)

    def _fail(self, error: PolicyError) -> None:
        with self._lock:
            self._error = str(error)
            current = self._current
        problems = "; ".join(str(p) for p in error.problems)
        if current is None:
            log.error("policy load failed, no policy loaded from %s: %s", _where(self.path), problems)
        else:
            log.error("policy reload failed, keeping %s: %s", current.identity, problems)
        self._notify("error", error)

    def _notify(self, result: str, error: PolicyError | None) -> None:
        if self._on_result is None:
            return
        try:
            self._on_result(result, error)
        except Exception:
            log.exception("policy on_result callback failed")

    def start(self, interval: float = 1.0) -> None:
        """Poll for changes every ``interval`` seconds in a daemon thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(interval,), name="policy-reload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.check()
            except Exception:
                log.exception("policy reload check failed")
