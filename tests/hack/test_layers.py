"""The layer contracts in pyproject.toml are enforced: a forbidden import really fails the lint."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    shutil.copytree(
        PROJECT / "nodewright", tmp_path / "nodewright", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(PROJECT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_real_tree_keeps_every_contract(tree_copy: Path) -> None:
    """The unmodified package passes all layer contracts."""
    result = _lint(tree_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "forbidden_import", "contract"),
    [
        pytest.param(
            "runtime/kube/kinds.py",
            "import nodewright.cloud",
            "runtime knows Kubernetes",
            id="runtime-imports-cloud",
        ),
        pytest.param(
            "runtime/kube/kinds.py",
            "import azure.core",
            "runtime knows Kubernetes",
            id="runtime-imports-azure",
        ),
        pytest.param(
            "api/__init__.py", "import nodewright.runtime", "api and ipam", id="api-imports-runtime"
        ),
        pytest.param(
            "cloud/__init__.py", "import pykube", "cloud talks to Azure only", id="cloud-imports-pykube"
        ),
        pytest.param(
            "ipam/__init__.py", "import nodewright.controllers", "Layers", id="ipam-imports-controllers"
        ),
        pytest.param(
            "controllers/cloud_access.py",
            "import nodewright.cloud.emulator",
            "production never imports the ARM emulator",
            id="controllers-import-the-emulator",
        ),
        pytest.param(
            "cloud/factory.py",
            "import nodewright.cloud.emulator.server",
            "production never imports the ARM emulator",
            id="cloud-imports-the-emulator",
        ),
        pytest.param(
            "controllers/main.py",
            "import nodewright.runtime.kube.client",
            "controllers import the runtime only through nodewright.runtime",
            id="controllers-import-a-runtime-subpackage",
        ),
        pytest.param(
            "runtime/observe/logs.py",
            "import nodewright.runtime.kube.client",
            "runtime subpackages import only lower layers",
            id="runtime-observe-imports-kube",
        ),
        pytest.param(
            "runtime/kube/kinds.py",
            "import nodewright.runtime.control.reconcile",
            "runtime subpackages import only lower layers",
            id="runtime-kube-imports-control",
        ),
        pytest.param(
            "controllers/main.py",
            "import nodewright.devenv",
            "devenv sits on top",
            id="controllers-import-devenv",
        ),
    ],
)
def test_a_forbidden_import_breaks_the_lint(
    tree_copy: Path, module: str, forbidden_import: str, contract: str
) -> None:
    """Adding one forbidden import makes lint-imports fail and name the broken contract."""
    path = tree_copy / "nodewright" / module
    path.write_text(path.read_text() + f"\n{forbidden_import}  # deliberate violation\n")
    result = _lint(tree_copy)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if " BROKEN" in line]
    assert any(contract in line for line in broken), result.stdout
