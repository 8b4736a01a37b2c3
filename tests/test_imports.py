"""The project's modules import each other without a circle, so the files can be read in order; and none imports a test.

A module may import another only if that one can be read first: drafters.py builds on sampling.py, so sampling.py
must never import drafters.py, not even inside a function body (a "lazy" import is still a circle for a reader,
who has to jump between the two files). The test reads every import statement with `ast`, wherever it stands, and
looks for a cycle in the graph of the project's own modules.

The tests import the code and the tools; nothing imports the tests back (a learner's run, such as the README's
`python tools/random_models.py`, must not need test code): what a tool and a test share lives in tools/.
"""

import ast
import re

import pytest
from conftest import REPO_ROOT

PACKAGES = ("speed", "loaders", "command_line", "course", "tools")  # the folders imported as packages, `speed.products`
FOLDERS = ("", *PACKAGES, "tests")  # the project's modules: the top level, the machinery's folders, the tests' helpers


def project_modules():
    """{module name: path} of every .py file in FOLDERS (a name imported from several folders resolves to the first)."""
    modules = {}
    for folder in FOLDERS:
        for path in sorted((REPO_ROOT / folder).glob("*.py")):
            modules.setdefault(path.stem, path)
    return modules


def module_name(dotted):
    """The project module a dotted import names: 'numpy.linalg' -> 'numpy', 'speed.products' -> 'products' (the
    machinery's folders are imported as packages, `speed.NAME`, and their files are modules of the project like
    the others)."""
    parts = dotted.split(".")
    return parts[1] if parts[0] in PACKAGES and len(parts) > 1 else parts[0]


def imported_names(path):
    """Every module name an import statement in the file names, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(module_name(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module in PACKAGES and node.level == 0:
            names.update(alias.name for alias in node.names)  # from tools import benchmark_forward
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(module_name(node.module))
    return names


def import_graph(modules):
    """{module: the project modules it imports}."""
    return {name: sorted(imported_names(path) & set(modules) - {name}) for name, path in modules.items()}


def find_cycle(graph):
    """One import circle as a list [a, b, ..., a], or None: a depth-first search that keeps the path it is on."""
    state = {}  # name -> "on the path" or "done"

    def visit(name, path):
        state[name] = "on the path"
        for other in graph.get(name, ()):
            if state.get(other) == "on the path":
                return path[path.index(other):] + [other]
            if other not in state:
                cycle = visit(other, path + [other])
                if cycle:
                    return cycle
        state[name] = "done"
        return None

    for name in sorted(graph):
        if name not in state:
            cycle = visit(name, [name])
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_a_circle_hidden_two_steps_away():
    """Its teeth: sampling -> lookahead -> drafters -> sampling is a circle; without the last edge there is none."""
    graph = {"sampling": ["lookahead"], "lookahead": ["drafters"], "drafters": ["sampling"], "main": ["drafters"]}
    assert find_cycle(graph) == ["drafters", "sampling", "lookahead", "drafters"]
    graph["drafters"] = []
    assert find_cycle(graph) is None


def test_an_import_inside_a_function_counts(tmp_path):
    """A circle hidden in a function body (`def f(): import drafters`) is still an import."""
    path = tmp_path / "lazy.py"
    path.write_text("import numpy\n\ndef f():\n    import drafters\n    from sampling import Round\n")
    assert imported_names(path) == {"numpy", "drafters", "sampling"}


def test_a_tool_imported_through_the_tools_package_counts_as_the_tool(tmp_path):
    """tools/benchmark.py imports `tools.compare_drafters`; that edge must be seen, or a circle through it would hide."""
    path = tmp_path / "uses_tools.py"
    path.write_text("import tools.plots\nfrom tools import worked_round\nfrom tools.compare_drafters import f\n")
    assert imported_names(path) == {"plots", "worked_round", "compare_drafters"}


def test_no_module_of_the_project_imports_itself_back_through_others():
    graph = import_graph(project_modules())
    cycle = find_cycle(graph)
    assert cycle is None, "an import circle: " + " -> ".join(cycle) + " (move what both need to the earlier file)"


def room_of(name, modules):
    """The room a module stands in: its folder (speed, loaders, ...) for the machinery, else the file itself."""
    folder = modules[name].parent.relative_to(REPO_ROOT).as_posix()
    return folder if folder in PACKAGES else name


def room_graph(graph, modules):
    """{room: the rooms its modules import}: the import graph with each machinery folder drawn as one room."""
    rooms = {}
    for name, imported in graph.items():
        room = room_of(name, modules)
        rooms.setdefault(room, set()).update(room_of(other, modules) for other in imported)
    return {room: sorted(others - {room}) for room, others in rooms.items()}


def test_the_folders_import_each_other_without_a_circle():
    """Drawn with each folder as one room, the imports still run one way: speed/ plugs into gpt2.py from outside
    (it imports gpt2, never gpt2 it), loaders/ sits below utils.py, and none reaches back up into a file that uses it."""
    modules = project_modules()
    rooms = room_graph(import_graph(modules), modules)
    cycle = find_cycle({room: others for room, others in rooms.items() if room != "tests"})
    assert cycle is None, "rooms in a circle: " + " -> ".join(cycle)
    assert "speed" not in rooms["gpt2"] and "utils" not in rooms["loaders"] and "main" not in rooms["command_line"]


def test_the_room_check_sees_a_folder_that_imports_back_the_file_that_uses_it(tmp_path):
    """Its teeth: gpt2 -> speed.products and speed.calibration -> gpt2 is no circle of files, but a circle of rooms."""
    modules = {"gpt2": REPO_ROOT / "gpt2.py", "products": REPO_ROOT / "speed" / "products.py",
               "calibration": REPO_ROOT / "speed" / "calibration.py"}
    graph = {"gpt2": ["products"], "products": [], "calibration": ["gpt2"]}
    assert find_cycle(graph) is None
    assert find_cycle(room_graph(graph, modules)) in (["gpt2", "speed", "gpt2"], ["speed", "gpt2", "speed"])


def modules_of_the_tests():
    """The names of the modules in tests/ (the test files, conftest and the tests' helpers), and `tests` itself."""
    return {path.stem for path in (REPO_ROOT / "tests").glob("*.py")} | {"tests"}


def reached_test_code(path, test_names):
    """The test modules a file imports (at the top or in a function), and "tests/ on sys.path" if one of its
    lines puts the tests' folder on the import path."""
    found = imported_names(path) & test_names
    lines = path.read_text(encoding="utf-8").splitlines()
    if any("sys.path" in line and re.search(r"""["']tests["']""", line) for line in lines):
        found.add("tests/ on sys.path")
    return found


def test_no_tool_nor_any_module_of_the_code_imports_a_test_module():
    """Every .py file at the top, in the machinery's folders and in tools/ is read; none may import from tests/
    (conftest included) or put tests/ on sys.path."""
    test_names = modules_of_the_tests()
    offenders = {str(path.relative_to(REPO_ROOT)): sorted(reached_test_code(path, test_names))
                 for folder in ("", *PACKAGES) for path in sorted((REPO_ROOT / folder).glob("*.py"))}
    offenders = {path: found for path, found in offenders.items() if found}
    assert offenders == {}, f"these import test code (move what they share with the tests into tools/): {offenders}"


@pytest.mark.parametrize("source, found", [
    ("from test_main import write_hf_folder\n", ["test_main"]),
    ("def f():\n    from conftest import models_dir\n", ["conftest"]),
    ("import tests.test_load\n", ["tests"]),
    ("import sys\nsys.path[:0] = [str(ROOT), str(ROOT / 'tests')]\n", ["tests/ on sys.path"]),
    ("import sys\nsys.path.insert(0, str(ROOT))\nfrom tools.markov import TARGET_TABLE\n", []),
])
def test_the_check_catches_a_test_import_wherever_it_stands_and_tests_on_the_path(tmp_path, source, found):
    """Its teeth: a file that imports a test module, in a function too, or puts tests/ on the path is caught;
    one that imports the tools is not."""
    path = tmp_path / "a_tool.py"
    path.write_text(source)
    assert sorted(reached_test_code(path, modules_of_the_tests())) == found


@pytest.mark.parametrize("module, later", [("second_core", "products"), ("products", "gpt2"), ("sampling", "drafters"), ("sampling", "main"),
                                           ("gpt2", "sampling"),
                                           ("model_fn", "sampling"), ("lookahead", "sampling"),
                                           ("exercises", "gradebook"), ("gradebook", "classroom"),
                                           ("main", "classroom"), ("classroom", "main")])
def test_a_file_read_earlier_never_imports_one_read_later(module, later):
    """The reading order of the README's file map: gpt2, model_fn, sampling (with lookahead), drafters, main;
    the teacher's kit last, beside main: exercises, gradebook, classroom. The machinery gpt2 multiplies through
    (speed/products.py, speed/second_core.py) sits below it and never reaches back up."""
    graph = import_graph(project_modules())
    reachable, todo = set(), [module]
    while todo:
        for other in graph[todo.pop()]:
            if other not in reachable:
                reachable.add(other)
                todo.append(other)
    assert later not in reachable, f"{module}.py reaches {later}.py through its imports: {sorted(reachable)}"


def test_the_model_imports_nothing_of_the_project_and_speed_plugs_into_it_from_outside():
    """gpt2.py, the first file of the model, imports NumPy and the standard library only: it can be copied out and
    played with alone. Speed depends on it, never the other way: speed/plug.py (the seam model_fn.py installs)
    imports gpt2 and speed/products.py; products.py imports NumPy, weakref, speed/second_core.py (the helper
    processes) and speed/shared_cache.py (the cache's shared memory: NumPy and the standard library); second_core
    imports NumPy, the standard library, shared_cache and speed/openblas_env.py (OpenBLAS's functions: the
    standard library only)."""
    graph = import_graph(project_modules())
    assert graph["gpt2"] == [] and imported_names(REPO_ROOT / "gpt2.py") == {"math", "numpy", "typing"}
    assert sorted(graph["plug"]) == ["gpt2", "products"] and "plug" in graph["model_fn"]
    assert sorted(graph["products"]) == ["second_core", "shared_cache"]
    assert sorted(graph["second_core"]) == ["openblas_env", "shared_cache"]
    assert graph["openblas_env"] == [] and graph["shared_cache"] == []
    assert imported_names(REPO_ROOT / "speed" / "products.py") == {"numpy", "second_core", "shared_cache", "weakref"}
    assert imported_names(REPO_ROOT / "speed" / "second_core.py") == {"numpy", "gc", "mmap", "os", "platform", "signal",
                                                               "sys", "threading", "time", "warnings", "weakref",
                                                               "shared_cache", "openblas_env"}
    assert imported_names(REPO_ROOT / "speed" / "shared_cache.py") == {"numpy", "ctypes", "itertools", "mmap", "os",
                                                                "sys", "typing", "weakref"}
    assert imported_names(REPO_ROOT / "speed" / "openblas_env.py") == {"ctypes", "functools", "os", "threading"}


POSIX_ONLY = {"resource", "fcntl", "termios", "pwd", "grp", "posix", "pty", "tty", "syslog", "crypt"}


def top_level_imports(path):
    """Module names imported at a file's top level (what importing it, or collecting it as a test, runs)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("name", ["exercises", "gradebook", "classroom", "test_classroom", "test_gradebook",
                                  "step_fixtures", "test_steps_forward", "test_steps_rounds"])
def test_the_kit_and_its_tests_import_no_posix_only_module_at_the_top(name):
    """On Windows `import resource` fails: the gradebook imports it in the child, on POSIX only."""
    assert top_level_imports(project_modules()[name]) & POSIX_ONLY == set()


def test_the_posix_only_check_sees_a_top_level_import_of_resource(tmp_path):
    path = tmp_path / "posix.py"
    path.write_text("import os\nimport resource\n\ndef f():\n    import fcntl\n")
    assert top_level_imports(path) & POSIX_ONLY == {"resource"}
