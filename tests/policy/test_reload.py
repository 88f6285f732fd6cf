"""Hot reload on a directory laid out like a kubelet ConfigMap mount, with real symlink swaps."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path

import pytest

from webhook.policy.loader import PolicyError, load
from webhook.policy.reload import PolicyStore

BASE = (Path(__file__).parents[1] / "data" / "policies" / "base.yaml").read_text()
BROKEN = BASE.replace("maxPerPod: 8", "maxPerPod: eight")


class ConfigMapMount:
    """What the kubelet's atomic writer does: ``..<ts>/`` dirs, a ``..data`` symlink, visible file links."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0
        root.mkdir()

    def publish(self, files: dict[str, str]) -> None:
        self.version += 1
        old = os.readlink(self.root / "..data") if (self.root / "..data").is_symlink() else None
        new = self.root / f"..2026_12_03_10_00_00.{self.version:04d}"
        new.mkdir()
        for name, text in files.items():
            (new / name).write_text(text)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(new.name)
        os.replace(tmp, self.root / "..data")  # the atomic step
        for name in files:
            if not (self.root / name).is_symlink():
                (self.root / name).symlink_to(f"..data/{name}")
        if old is not None:
            shutil.rmtree(self.root / old)


@pytest.fixture()
def mount(tmp_path: Path) -> ConfigMapMount:
    m = ConfigMapMount(tmp_path / "policies")
    m.publish({"default.yaml": BASE})
    return m


@pytest.fixture()
def results() -> list[tuple[str, PolicyError | None]]:
    return []


def store_for(path: Path, results: list) -> PolicyStore:
    return PolicyStore(path, on_result=lambda result, err: results.append((result, err)))


def test_configmap_mount_loads_through_the_symlinks(mount: ConfigMapMount) -> None:
    policy = load(mount.root)
    assert policy.name == "gpu-fleet"
    assert policy.files == (str(mount.root / "default.yaml"),)


def test_atomic_swap_is_picked_up(mount: ConfigMapMount, results: list, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="webhook.policy")
    store = store_for(mount.root, results)
    first = store.current
    assert first is not None and store.error is None
    assert results == [("success", None)]
    assert store.check() is False  # nothing changed: no reload, no callback
    assert len(results) == 1

    mount.publish({"default.yaml": BASE.replace("maxPerPod: 8", "maxPerPod: 4")})
    assert store.check() is True
    second = store.current
    assert second is not None and second.identity != first.identity
    assert second.resources["example.com/gpu"].maxPerPod == 4
    assert results == [("success", None), ("success", None)]
    assert f"policy loaded: {second.identity} from {mount.root}/ (1 file)" in caplog.messages
    assert store.check() is False


def test_broken_swap_keeps_the_last_good_policy(
    mount: ConfigMapMount, results: list, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_for(mount.root, results)
    good = store.current
    assert good is not None

    mount.publish({"default.yaml": BROKEN})
    assert store.check() is False
    assert store.current is good
    line = BROKEN.count("\n", 0, BROKEN.index("maxPerPod")) + 1
    problem = f"{mount.root}/default.yaml:{line}: spec.resources[0].maxPerPod: expected an integer, got 'eight'"
    assert store.error == problem
    result, err = results[-1]
    assert result == "error" and isinstance(err, PolicyError) and str(err) == problem
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "webhook.policy"]
    assert [r.getMessage() for r in errors] == [f"policy reload failed, keeping {good.identity}: {problem}"]

    # The same broken files are not reloaded (or logged) again on every poll.
    assert store.check() is False
    assert len(results) == 2

    mount.publish({"default.yaml": BASE.replace("maxPerPod: 8", "maxPerPod: 2")})
    assert store.check() is True
    assert store.error is None
    assert store.current is not None and store.current.resources["example.com/gpu"].maxPerPod == 2


def test_initial_load_may_fail_and_recover(tmp_path: Path, results: list) -> None:
    mount = ConfigMapMount(tmp_path / "policies")
    mount.publish({"default.yaml": BROKEN})
    store = store_for(mount.root, results)
    assert store.current is None
    assert store.error is not None and "spec.resources[0].maxPerPod" in store.error
    assert [r for r, _ in results] == ["error"]

    mount.publish({"default.yaml": BASE})
    assert store.check() is True
    assert store.current is not None and store.error is None


def test_missing_directory_then_created(tmp_path: Path, results: list) -> None:
    store = store_for(tmp_path / "later", results)
    assert store.current is None and store.error == f"{tmp_path / 'later'}: no such file or directory"
    mount = ConfigMapMount(tmp_path / "later")
    mount.publish({"default.yaml": BASE})
    assert store.check() is True and store.current is not None


def test_swap_that_removes_a_key_leaves_a_dangling_link_that_is_skipped(tmp_path: Path, results: list) -> None:
    mount = ConfigMapMount(tmp_path / "policies")
    mount.publish({"default.yaml": BASE, "notes.yaml": "# team notes\n"})
    store = store_for(mount.root, results)
    assert store.current is not None and len(store.current.files) == 2
    mount.publish({"default.yaml": BASE.replace("maxPerPod: 8", "maxPerPod: 4")})
    assert (mount.root / "notes.yaml").is_symlink() and not (mount.root / "notes.yaml").exists()
    assert store.check() is True
    assert store.current.files == (str(mount.root / "default.yaml"),)


def test_swap_to_equal_size_content_is_seen(mount: ConfigMapMount, results: list) -> None:
    store = store_for(mount.root, results)
    before = store.current
    same_size = BASE.replace("maxPerPod: 8", "maxPerPod: 7")
    assert len(same_size) == len(BASE)
    mount.publish({"default.yaml": same_size})
    st = os.stat(mount.root / "default.yaml")
    os.utime(mount.root / "default.yaml", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.check() is True
    assert store.current.identity != before.identity


def test_single_file_edited_in_place(tmp_path: Path, results: list) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(BASE)
    store = store_for(path, results)
    first = store.current
    path.write_text(BASE + "# reviewed\n")
    assert store.check() is True
    assert store.current.identity != first.identity
    assert store.current.files == (str(path),)


def test_polling_thread_picks_up_a_swap(mount: ConfigMapMount) -> None:
    swapped = threading.Event()
    seen: list[str] = []

    def on_result(result: str, err: PolicyError | None) -> None:
        seen.append(result)
        if len(seen) > 1:
            swapped.set()

    store = PolicyStore(mount.root, on_result=on_result)
    first = store.current
    store.start(interval=0.01)
    store.start(interval=0.01)  # idempotent
    try:
        mount.publish({"default.yaml": BASE.replace("maxPerPod: 8", "maxPerPod: 3")})
        assert swapped.wait(timeout=30), "the polling thread never reloaded"
    finally:
        store.stop()
    assert seen == ["success", "success"]
    assert store.current.identity != first.identity


def test_readers_always_see_a_whole_good_policy_while_versions_swap(mount: ConfigMapMount) -> None:
    store = PolicyStore(mount.root)
    good = {store.current.identity}
    stop = threading.Event()
    observed: list[object] = []

    def read() -> None:
        while not stop.is_set():
            policy = store.current
            observed.append(policy.identity if policy is not None else None)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1, 21):
            if i % 3 == 0:
                mount.publish({"default.yaml": BROKEN})
                assert store.check() is False
            else:
                mount.publish({"default.yaml": BASE.replace("maxPerPod: 8", f"maxPerPod: {i}")})
                assert store.check() is True
                good.add(store.current.identity)
    finally:
        stop.set()
        reader.join()
    assert observed and set(observed) <= good
