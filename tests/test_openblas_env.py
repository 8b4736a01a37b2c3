"""speed/openblas_env.py: the scripts that decode set OpenBLAS's thread timeout before NumPy loads OpenBLAS.

Read speed/openblas_env.py first. OpenBLAS reads OPENBLAS_THREAD_TIMEOUT once, when NumPy loads it, so the setting
counts only if it is made before the first `import numpy`; these tests import each script in a fresh
interpreter and watch the order of the imports. (That the setting makes the steps after a prompt faster is a
timing, measured in speed/openblas_env.py's docstring, not asserted here.)
"""

import importlib
import os
import subprocess
import sys

import pytest

from speed import openblas_env
from conftest import REPO_ROOT

SCRIPTS = ("main", "tools.benchmark", "tools.benchmark_forward", "tools.benchmark_text", "tools.pass_parts",
           "tools.compare_llama_cpp", "tools.make_readme_figures")  # every script that decodes after a prompt

# Imports `module` in this (fresh) interpreter, and prints the timeout it leaves in the environment and
# whether NumPy was imported before openblas_env (a finder first in sys.meta_path sees every import).
WATCH_IMPORTS = """
import os, sys
class Watch:
    early = False
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and "speed.openblas_env" not in sys.modules:
            Watch.early = True
        return None
sys.meta_path.insert(0, Watch())
sys.path[:0] = [{root!r}, {tests!r}]
import {module}
print(os.environ.get("OPENBLAS_THREAD_TIMEOUT"), "numpy first" if Watch.early else "openblas_env first")
"""


def import_in_a_fresh_interpreter(module, env_timeout=None):
    """(the timeout in the environment afterwards, 'numpy first' or 'openblas_env first') for `import module`."""
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_THREAD_TIMEOUT"}
    if env_timeout is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = env_timeout
    code = WATCH_IMPORTS.format(root=str(REPO_ROOT), tests=str(REPO_ROOT / "tests"), module=module)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    timeout, order = done.stdout.split(maxsplit=1)
    return timeout, order.strip()


@pytest.mark.parametrize("module", SCRIPTS)
def test_each_script_that_decodes_sets_the_timeout_before_numpy_loads_openblas(module):
    assert import_in_a_fresh_interpreter(module) == (openblas_env.OPENBLAS_THREAD_TIMEOUT, "openblas_env first")


def test_the_order_check_has_teeth():
    """gpt2 imports NumPy and never openblas_env: the watch sees NumPy first, and the timeout stays unset."""
    assert import_in_a_fresh_interpreter("gpt2") == ("None", "numpy first")


def test_a_timeout_already_in_the_environment_wins():
    assert import_in_a_fresh_interpreter("main", env_timeout="7") == ("7", "openblas_env first")


def test_the_timeout_is_2_to_the_20_cycles_when_none_is_set(monkeypatch):
    """20: OpenBLAS's idle threads spin 2^20 cycles (0.3-0.5 ms at 2-3 GHz), not its default 2^28 (about 0.1 s)."""
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "unset below")  # so that the end of the test restores it
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT")
    importlib.reload(openblas_env)
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "20"
