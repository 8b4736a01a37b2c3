"""The project runs where learners are: Linux, macOS and Windows laptops, Python 3.9 to 3.13.

Read the README's "Set up" first, then .ci/run (which runs the suite on the oldest Python with the oldest
versions the requirements allow, and on the newest). What a test can check without those machines:

- no file imports a POSIX-only module, or calls a POSIX-only function, where Windows would run it (a test that
  needs one skips by pytest.importorskip, or by a check of the platform);
- every file parses as the oldest supported Python's grammar (no `match`, no parenthesised context managers);
- the oldest pins CI installs are requirements.txt's lower bounds, and the README states the oldest Python CI
  runs;
- every command the docs show runs in PowerShell as well as in bash: no `&&` chains (PowerShell 5 has none),
  no `VAR=value command` prefixes, no `python3`, no `export`, no `$VAR`.
"""

import ast
import re

import pytest

from conftest import REPO_ROOT
from test_learning_path import project_texts

POSIX_ONLY_MODULES = {"resource", "fcntl", "pty", "termios", "tty", "pwd", "grp", "crypt", "spwd", "posix"}
POSIX_ONLY_CALLS = {("os", name) for name in ("geteuid", "getuid", "getegid", "getgid", "fork", "setsid", "killpg",
                                              "getpgid", "setpgrp", "getloadavg")} | {
    ("signal", name) for name in ("SIGKILL", "SIGALRM", "alarm", "SIGHUP", "SIGQUIT", "SIGUSR1", "setitimer")}


def python_files():
    return {path: text for path, text in project_texts().items() if path.suffix == ".py"}


def posix_only_uses(source):
    """[(line, what)] of the POSIX-only imports and calls in source, except an import made through
    pytest.importorskip and a use after a platform check (`if sys.platform ...`, `if not hasattr(os, ...)`,
    `x if hasattr(...) else y`) in the same function, and an import tried with `except ImportError`."""
    tree = ast.parse(source)
    lines = source.splitlines()
    platform_test = r"sys\.platform|os\.name|hasattr\(|platform\.system"
    # A module-level name holding a platform test (ON_WINDOWS = os.name == "nt") guards like the test itself
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and re.search(platform_test, ast.unparse(node.value)):
            platform_test += rf"|\b{node.targets[0].id}\b"
    guarded = set()
    for node in ast.walk(tree):  # try: import resource / except ImportError: (Windows) guards the import
        if isinstance(node, ast.Try) and any("ImportError" in ast.unparse(handler.type)
                                             for handler in node.handlers if handler.type is not None):
            guarded.update(range(node.body[0].lineno, node.body[-1].end_lineno + 1))
    functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)) and re.search(platform_test, ast.unparse(node.test)):
            end = max([node.end_lineno] + [function.end_lineno for function in functions
                                           if function.lineno < node.lineno <= function.end_lineno])
            guarded.update(range(node.lineno, end + 1))  # the check, and the rest of the function it is in
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module.split(".")[0]]
        found += [(node.lineno, f"import {name}") for name in names if name in POSIX_ONLY_MODULES]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and (node.value.id, node.attr) in POSIX_ONLY_CALLS:
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return [(line, what) for line, what in found
            if line not in guarded and "importorskip" not in lines[line - 1]]


def test_no_file_uses_a_posix_only_module_where_windows_would_run_it():
    found = [f"{path}:{line}: {what}" for path, text in python_files().items()
             for line, what in posix_only_uses(text)]
    assert not found, "POSIX-only, unguarded:\n" + "\n".join(found)


def test_the_posix_check_has_teeth():
    assert posix_only_uses("import resource\n") == [(1, "import resource")]
    assert posix_only_uses("import os\ndef f():\n    return os.geteuid()\n") == [(3, "os.geteuid")]
    assert posix_only_uses("import os, sys\nif sys.platform != 'win32':\n    os.killpg(1, 9)\n") == []
    assert posix_only_uses("pty = pytest.importorskip('pty')\n") == []
    assert posix_only_uses("try:\n    import resource\nexcept ImportError:\n    resource = None\n") == []
    assert posix_only_uses("try:\n    import resource\nexcept OSError:\n    pass\n") == [(2, "import resource")]
    assert posix_only_uses("import os\nON_WINDOWS = os.name == 'nt'\ndef f():\n    if ON_WINDOWS:\n        return\n"
                           "    os.killpg(1, 9)\nWINDOWS = True\ndef g():\n    if WINDOWS:\n        return\n"
                           "    os.killpg(1, 9)\n") == [(11, "os.killpg")]
    assert posix_only_uses("import os\ndef f():\n    if not hasattr(os, 'geteuid'):\n        return\n"
                           "    return os.geteuid()\ndef g():\n    return os.geteuid()\n") == [(7, "os.geteuid")]


OLDEST_PYTHON = (3, 9)


def test_every_file_parses_as_the_oldest_supported_python():
    """ast's feature_version rejects the grammar newer than 3.9 (`match`, parenthesised context managers,
    `except*`); what is new in the library (zip(strict=...), `int | None` evaluated at run time) the CI run on
    3.9 finds."""
    for path, text in python_files().items():
        ast.parse(text, filename=str(path), feature_version=OLDEST_PYTHON)


def test_the_oldest_python_check_has_teeth():
    with pytest.raises(SyntaxError):
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=OLDEST_PYTHON)


def lower_bounds(path):
    """{name: version} of the `name>=version` lines of a requirements file."""
    text = path.read_text(encoding="utf-8")
    return dict(re.findall(r"^([\w-]+)>=([\w.]+)", text, re.M))


def test_ci_installs_the_lower_bounds_of_requirements_txt_on_the_oldest_python_the_readme_states():
    bounds = lower_bounds(REPO_ROOT / "requirements.txt")
    pins = dict(re.findall(r"^([\w-]+)==([\w.]+)", (REPO_ROOT / "requirements/oldest.txt").read_text("utf-8"), re.M))
    assert bounds and pins == bounds, "requirements/oldest.txt must pin exactly requirements.txt's lower bounds"
    run = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    oldest = re.search(r"^OLDEST=(3\.\d+)", run, re.M).group(1)
    assert f"{oldest}" == ".".join(map(str, OLDEST_PYTHON))
    assert f"Python {oldest} or newer" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert 'run_tests "$OLDEST" -c requirements/oldest.txt' in run


# ------------------------------------------------------------------------------------------------------------
# Commands in the docs: the same line works in bash, zsh and PowerShell 5
# ------------------------------------------------------------------------------------------------------------

DOCS = ("README.md", "EXERCISES.md", "docs/BENCHMARKS.md", "docs/GLOSSARY.md")
BASH_ONLY = {
    "&& or || (PowerShell 5 has neither: one command per line)": r"&&|\|\|",
    "a VAR=value prefix (PowerShell: $env:VAR = 'value' on a line of its own)": r"(?:^|\s)[A-Za-z_]\w*=\S*\s+\S",
    "python3 or pip3 (Windows has python and pip)": r"\b(?:python|pip)3\b",
    "export or source": r"(?:^|\s)(?:export|source)\s",
    "a $VAR or $(...) (PowerShell: $env:VAR)": r"\$(?!env:)[({A-Za-z_]",
    "/dev/null or ~/": r"/dev/null|(?:^|\s)~/",
    "a trailing backslash (PowerShell continues lines with a backtick)": r"\s\\$",
}
FOR_ONE_SHELL = re.compile(r"#.*\b(?:bash|zsh|Linux|macOS|PowerShell|Windows)\b")  # a line marked for its shell


def code_blocks(text):
    """[(label, body)] of a page's fenced code blocks, in order."""
    return re.findall(r"^\s*```(\w*)\n(.*?)^\s*```", text, re.S | re.M)


def doc_commands(text):
    """[command line] of a page: the lines of its ```bash, ```sh, ```shell, ```powershell and unlabelled code
    blocks, and its inline code spans that start with python, pip or git. A ```bash block followed at once by a
    ```powershell block is one block per shell: the bash one is bash's alone, and only its twin is scanned."""
    commands, blocks = [], code_blocks(text)
    for i, (label, body) in enumerate(blocks):
        paired = label == "bash" and i + 1 < len(blocks) and blocks[i + 1][0] == "powershell"
        if label in ("", "bash", "sh", "shell", "powershell", "console") and not paired:
            commands += [line.strip() for line in body.splitlines() if line.strip()]
    commands += re.findall(r"`((?:[A-Za-z_]\w*=\S+ )*(?:python3?|pip3?|git) [^`\n]+)`", text)
    return commands


def tool_commands(text):
    """The command lines of a tool's docstring: its lines that start with `python `, indented."""
    docstring = ast.get_docstring(ast.parse(text)) or ""
    return [line.strip() for line in docstring.splitlines() if re.match(r"\s+(?:[A-Z_]+=\S+ )*python3? ", line)]


def bash_only(command):
    """[why] of what makes a command line bash-only; a line marked for one shell (# Linux, macOS) is exempt."""
    code = command.split(" #", 1)[0]
    if FOR_ONE_SHELL.search(command) and not code.startswith(("python", "pip")):
        return []
    return [why for why, pattern in BASH_ONLY.items() if re.search(pattern, code)]


def test_a_bash_block_is_bash_only_when_a_powershell_twin_follows_it():
    lone = "```bash\nsource .venv/bin/activate\n```\n"
    twins = lone + "\n```powershell\n.venv\\Scripts\\Activate.ps1\n```\n"
    assert [why for command in doc_commands(lone) for why in bash_only(command)] == ["export or source"]
    assert doc_commands(twins) == [".venv\\Scripts\\Activate.ps1"]


def test_the_set_up_gives_one_block_per_shell_that_differ_only_in_activating_the_environment():
    """The README's "Set up": a ```bash block (bash, zsh) and a ```powershell block (Windows), never the two
    shells' activation lines in one block; the other commands are the same, in the same order."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    set_up = readme.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    blocks = code_blocks(set_up)
    assert [label for label, _ in blocks] == ["bash", "powershell"], blocks
    bash, powershell = ([line.strip() for line in body.splitlines() if line.strip()] for _, body in blocks)
    assert "source .venv/bin/activate" in bash and not any(".ps1" in line for line in bash)
    assert ".venv\\Scripts\\Activate.ps1" in powershell and not any("source" in line for line in powershell)
    assert [line for line in bash if "activate" not in line] == [line for line in powershell if "Activate" not in line]
    assert "python main.py" in bash and "pip install -r requirements.txt -r requirements/dev.txt" in bash


def test_every_command_in_the_docs_runs_in_powershell_too():
    texts = project_texts()
    commands = [(page, command) for page in DOCS if (REPO_ROOT / page).exists()
                for command in doc_commands((REPO_ROOT / page).read_text(encoding="utf-8"))]
    commands += [(str(path), command) for path, text in texts.items()
                 if path.parts[0] == "tools" and path.suffix == ".py" for command in tool_commands(text)]
    assert len(commands) > 20, "the docs show commands: the scan must find them"
    found = [f"{page}: {command!r}: {why}" for page, command in commands for why in bash_only(command)]
    assert not found, "bash-only commands:\n" + "\n".join(found)


@pytest.mark.parametrize("command", [
    "pip install -r requirements.txt && python main.py",
    "GPT2_MODELS_DIR=/path/to/models python -m pytest",
    "python3 main.py",
    "OPENBLAS_NUM_THREADS=1 python tools/benchmark_forward.py",
    "export CI=true",
    "python main.py --prompt \"$(cat prompt.txt)\"",
])
def test_the_command_check_catches_bash_only_syntax(command):
    assert bash_only(command)


@pytest.mark.parametrize("command", [
    "python -m pytest -m step7 --timeout=20",
    "python main.py --prompt \"Alan Turing theorized that computers\" --temperature 0",
    "$env:GPT2_MODELS_DIR = \"C:\\models\"",
    "source .venv/bin/activate        # Linux, macOS",
    ".venv\\Scripts\\Activate.ps1       # Windows PowerShell",
])
def test_the_command_check_passes_what_both_shells_run(command):
    assert bash_only(command) == []
