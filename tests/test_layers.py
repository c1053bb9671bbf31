"""The layering holds where it matters at run time: the gate and the dashboard import no torch.

(The import graph itself is checked by import-linter in ``make lint``: contracts in
pyproject.toml's ``[tool.importlinter]``.)
"""

import subprocess
import sys

PROBE = """
import importlib, pkgutil, sys
import contracts, dashboards
for pkg in (contracts, dashboards):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if ".pages" in m.name or m.name.endswith("Overview"):
            continue  # Streamlit scripts: they render when imported
        importlib.import_module(m.name)
heavy = sorted(k for k in sys.modules if k.split(".")[0] in ("torch", "megatron", "core"))
print(",".join(heavy))
"""


def test_importing_contracts_and_dashboards_loads_no_torch():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"loaded: {out.stdout.strip()[:500]}"


def test_import_linter_contracts_are_kept():
    code = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "0 broken" in out.stdout
