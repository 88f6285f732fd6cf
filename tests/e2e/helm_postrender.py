"""Helm post-renderer for the e2e suite: what install.py does to the kustomize output, done to Helm's.

There is no kubelet, so the Deployment cannot run (the harness runs ``dra-webhook serve`` on the host) and
its Service has no endpoint: the post-renderer drops both and turns each webhook's ``clientConfig.service``
into ``url: https://127.0.0.1:PORT/<path>`` (install.to_url). Everything else Helm renders is installed,
upgraded and uninstalled as is. Helm 4 runs post-renderers as ``postrenderer/v1`` plugins
(https://helm.sh/docs/plugins/developer/tutorial-postrenderer-plugin): ``write_plugin`` writes one into a
temporary HELM_PLUGINS folder, calling ``python -m tests.e2e.helm_postrender PORT`` (helm runs from the
repository root; manifests on stdin and stdout).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from tests.e2e.install import NOT_APPLIED, WEBHOOK_KINDS, to_url

NAME = "dra-e2e-loopback"


def post_render(manifests: str, port: int) -> str:
    out = []
    for obj in yaml.safe_load_all(manifests):
        if not obj or obj["kind"] in NOT_APPLIED:
            continue
        out.append(to_url(obj, port) if obj["kind"] in WEBHOOK_KINDS else obj)
    return yaml.safe_dump_all(out, sort_keys=False)


def write_plugin(plugins: Path, port: int) -> str:
    """A postrenderer/v1 plugin under ``plugins`` (HELM_PLUGINS); returns its name for ``--post-renderer``."""
    folder = plugins / NAME
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "type": "postrenderer/v1", "name": NAME, "version": "0.1.0", "runtime": "subprocess",
        "runtimeConfig": {"platformCommand": [{"command": sys.executable,
                                               "args": ["-m", "tests.e2e.helm_postrender", str(port)]}]},
    }))
    return NAME


if __name__ == "__main__":
    sys.stdout.write(post_render(sys.stdin.read(), int(sys.argv[1])))
