"""tools/benchmark.py and the tools/ scripts check their flags before any work, as main.py does: one line, exit code 2.

Read command_line/scripts.py first (run_script: the flags' names; each script's main: their values). fire alone notices a
misspelt flag only after the whole measurement has run, and gave bad values a traceback or an empty table,
some of them after loading models. Each case here runs the script in a subprocess, as a user would, and must
end within SECONDS (the measurements themselves take minutes) with exactly one `error:` line naming the flag.
One representative bad value per kind of flag: a misspelt name, a word for a number, a negative seed, a list
with a non-number in it, an empty list or text, a zero count, numbers that do not fit the model's context
together, an output folder that cannot exist (under a file: even root cannot write there).
"""

import subprocess
import sys

import pytest

from conftest import REPO_ROOT

SECONDS = 60  # the checks take a second or two (importing NumPy); any measurement takes far longer


def a_file(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("not a folder")
    return path


CASES = [  # (script, flags, what the error line must say); "{file}" is a regular file the test makes
    ("tools/reading_path.py", ["--lst"], "unknown flag --lst (did you mean --list?)"),
    ("tools/reading_path.py", ["--budget", "0"], "--budget must be a whole number >= 1; got 0"),
    ("tools/benchmark.py", ["--random_weight"], "unknown flag --random_weight (did you mean --random_weights?)"),
    ("tools/benchmark.py", ["--random_weights", "--Ks", "four"], "--Ks takes whole numbers >= 1"),
    ("tools/benchmark.py", ["--random_weights", "--seed", "-5"], "--seed must be a whole number >= 0; got -5"),
    ("tools/benchmark.py", ["--random_weights", "--kv_cache", "maybe"], "--kv_cache must be true or false"),
    ("tools/benchmark.py", ["--random_weights", "--alphas", "2"], "--alphas takes numbers from 0 to 1"),
    ("tools/benchmark.py", ["--random_weights", "--img_dir", "{file}/img"], "is a file, so no folder can be made"),
    ("tools/benchmark.py", ["--prompts", ""], "--prompts: prompt 1 of 1 is empty"),
    ("tools/benchmark.py", ["--prompts", "[]"], "--prompts is empty"),
    ("tools/benchmark.py", ["--prompts", '["Hello", ""]'], "--prompts: prompt 2 of 2 is empty"),
    ("tools/benchmark.py", ["--drafters", "lookup", "--copy_prompts", "[]"], "--copy_prompts is empty"),
    ("tools/benchmark_forward.py", ["--context_length", "16"], "unknown flag --context_length"),
    ("tools/benchmark_forward.py", ["--sizes", "", "--context_size", "None"], "nothing to measure"),
    ("tools/benchmark_forward.py", ["--r_context", "x"], "--r_context must be a whole number >= 0; got 'x'"),
    ("tools/benchmark_forward.py", ["--sizes", "124M", "--n_prompt", "1000", "--n_new", "100"],
     "--n_prompt 1000 + --n_new 100 is more than 124M's context of 1024 tokens"),
    ("tools/benchmark_forward.py", ["--sizes", "124M", "--r_max", "2000"], "--r_max 2000 must be less than 124M's"),
    ("tools/benchmark_forward.py", ["--context_lengths", "16,x"], "--context_lengths takes whole numbers >= 1"),
    ("tools/benchmark_forward.py", ["--seed", "-5"], "--seed must be a whole number >= 0; got -5"),
    ("tools/benchmark_forward.py", ["--repeats", "0"], "--repeats must be a whole number >= 1; got 0"),
    ("tools/benchmark_forward.py", ["--r_table_dir", "{file}/costs"], "is a file, so no folder can be made"),
    ("tools/benchmark_forward.py", ["--json", "{file}/out.json"], "a-file is a file, so no file can be written under"),
    ("tools/benchmark_forward.py", ["--json", "{file}-not/out.json"], "does not exist; name a file in an existing"),
    ("tools/benchmark_text.py", ["--repeat", "2"], "unknown flag --repeat (did you mean --repeats?)"),
    ("tools/benchmark_text.py", ["--Ks", "four"], "--Ks takes whole numbers >= 1 or auto"),
    ("tools/benchmark_text.py", ["--texts", "prose,nosuch"], "no text called 'nosuch'"),
    ("tools/benchmark_text.py", ["--r_table", "{file}"], "cannot read the costs file"),
    ("tools/benchmark_text.py", ["--seed", "-5"], "--seed must be a whole number >= 0; got -5"),
    ("tools/make_readme_figures.py", ["--dryrun"], "unknown flag --dryrun (did you mean --dry_run?)"),
    ("tools/make_readme_figures.py", ["--Ks", "four"], "--Ks takes whole numbers >= 1"),
    ("tools/make_readme_figures.py", ["--forward_context_lengths", "16,x"], "--forward_context_lengths takes"),
    ("tools/make_readme_figures.py", ["--text_repeats", "-1"], "--text_repeats must be a whole number >= 0"),
    ("tools/make_readme_figures.py", ["--img_dir", "{file}/img"], "is a file, so no folder can be made"),
    ("tools/make_readme_figures.py", ["--only", ""], "--only is empty"),
    ("tools/make_readme_figures.py", ["--forward_n_new", "1020"],
     "--n_prompt 16 + --forward_n_new 1020 is more than 124M's context of 1024 tokens"),
    ("tools/make_readme_figures.py", ["--forward_context_lengths", "16,1023"],
     "--forward_context_lengths: 1023 + --context_steps 4 is more than 124M's context of 1024 tokens"),
    ("tools/make_readme_figures.py", ["--only", "llama-cpp", "--llama_repeats", "0"],
     "--only llama-cpp remakes that part, and --llama_repeats 0 would measure nothing"),
    ("tools/make_readme_figures.py", ["--pages", "[]"], "--pages is empty"),
    ("tools/make_readme_figures.py", ["--llama_repeats", "-1"], "--llama_repeats must be a whole number >= 0; got -1"),
    ("tools/make_readme_figures.py", ["--drafters", "nosuch"], "--drafters takes model, lookup and staged"),
    ("tools/make_readme_figures.py", ["--trees", "x"], "--trees takes shapes like 2,1,1;2,2,1"),
    ("tools/make_readme_figures.py", ["--forward_context_size", "125M"], "unknown size(s) ['125M']"),
    ("tools/make_readme_figures.py", ["--random_weights", "--sample_run_sizes", "124M"],
     "--sample_run_sizes takes two sizes"),
    ("tools/make_readme_figures.py", ["--random_weights", "--target_model_size", "125M"], "'125M' is neither one of"),
    ("tools/make_readme_figures.py", ["--only", "sample-run", "--sample_run_sizes", "124M"],
     "--sample_run_sizes takes two sizes"),
    ("tools/make_readme_figures.py", ["--only", "sample-run", "--sample_run_sizes", "124M,125M"],
     "'125M' is neither one of"),
    ("tools/random_models.py", ["--size", "124M"], "unknown flag --size (did you mean --sizes?)"),
    ("tools/random_models.py", ["--seed", "-5"], "--seed must be a whole number >= 0; got -5"),
    ("tools/random_models.py", ["--trace", "--seed", "7"], "--trace writes the trace run's two tiny models, always"),
    ("tools/random_models.py", ["--folder", "{file}/models"], "is a file, so no folder can be made"),
    ("tools/measure_loading.py", ["--repeat", "2"], "unknown flag --repeat (did you mean --repeats?)"),
    ("tools/measure_loading.py", ["--repeats", "0"], "--repeats must be a whole number >= 1; got 0"),
    ("tools/measure_loading.py", ["--folder", "{file}/load"], "is a file, so no folder can be made"),
    ("tools/measure_hf_speed.py", ["--n_new", "0"], "--n_new must be a whole number >= 1; got 0"),
    ("tools/measure_hf_speed.py", ["--sizes", "7B"], "unknown size(s) ['7B']"),
    ("tools/measure_hf_speed.py", ["--sizes", "124M", "--n_prompt", "2000", "--n_new", "1"],
     "--n_prompt 2000 + --n_new 1 is more than 124M's context of 1024 tokens"),
    ("tools/worked_round.py", ["--ou", "x"], "unknown flag --ou (did you mean --out?)"),
    ("tools/worked_round.py", ["--out", "{file}/img"], "is a file, so no folder can be made"),
    ("tools/worked_round.py", ["--out", ""], "--out is empty: name a folder"),
    ("tools/random_models.py", ["--folder", ""], "--folder is empty: name a folder"),
    ("tools/benchmark_forward.py", ["--r_table_dir", ""], "--r_table_dir is empty: name a folder"),
    ("tools/pass_parts.py", ["--size", "124M", "--round", "2"], "unknown flag --round (did you mean --rounds?)"),
    ("tools/pass_parts.py", ["--ms", ""], "--ms is empty"),
    ("tools/pass_parts.py", ["--ms", "1,x"], "--ms takes whole numbers >= 1"),
    ("tools/pass_parts.py", ["--ms", "2,4"], "--ms must hold 1"),
    ("tools/pass_parts.py", ["--ms", "1,2000"], "--ms: 2000 must be less than 124M's context of 1024 tokens"),
    ("tools/pass_parts.py", ["--rounds", "0"], "--rounds must be a whole number >= 1; got 0"),
    ("tools/pass_parts.py", ["--n_cached", "-1"], "--n_cached must be a whole number >= 1; got -1"),
    ("tools/pass_parts.py", ["--n_cached", "2000"], "--n_cached 2000 + the largest of --ms, 16, is more than 124M's "
     "context of 1024 tokens: give --n_cached 1008 or fewer"),
    ("tools/pass_parts.py", ["--seed", "x"], "--seed must be a whole number >= 0; got 'x'"),
    ("tools/pass_parts.py", ["--size", "125M"], "'125M' is neither one of"),
    ("tools/compare_llama_cpp.py", ["--ms", ""], "--ms needs at least one whole number"),
    ("tools/compare_llama_cpp.py", ["--repeats", "0"], "--repeats must be a whole number >= 1; got 0"),
    ("tools/compare_llama_cpp.py", ["--json", "{file}/out.json"], "cannot be written"),
    ("tools/compare_llama_cpp.py", ["--thread", "1"], "unknown flag --thread (did you mean --threads?)"),
    ("tools/time_grading.py", ["--submissions", "0"], "--submissions must be a whole number >= 1; got 0"),
    ("tools/time_grading.py", ["--jobs", "two"], "--jobs must be a whole number"),
]


@pytest.mark.parametrize("script, flags, expected", CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES])
def test_a_bad_flag_of_a_script_is_one_line_and_exit_code_2_before_any_work(tmp_path, script, flags, expected):
    file = a_file(tmp_path)
    flags = [flag.replace("{file}", str(file)) for flag in flags]
    try:
        run = subprocess.run([sys.executable, str(REPO_ROOT / script), *flags], cwd=tmp_path, capture_output=True,
                             text=True, timeout=SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{script} {' '.join(flags)} was still running after {SECONDS} s: it did not check its flags first")
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], run.stderr
    assert run.stdout == "", run.stdout
    assert sorted(tmp_path.iterdir()) == [file], "the script wrote files before it refused the flag"


def test_every_script_in_tools_has_its_bad_flags_here():
    """A new script cannot slip past this file: each tools/ script with a command line has cases above (main.py's
    are tests/test_main_failures.py's BAD_FLAGS, run in-process)."""
    scripts = {f"tools/{path.name}" for path in (REPO_ROOT / "tools").glob("*.py")
               if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")}
    assert scripts - {script for script, _, _ in CASES} == set()


def test_fires_help_still_lists_a_scripts_flags(tmp_path):
    run = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "random_models.py"), "--help"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=SECONDS)
    shown = run.stdout + run.stderr  # fire writes its help to a pager, or straight out without a terminal
    assert run.returncode == 0 and "--sizes" in shown and "--folder" in shown, shown


def test_every_flag_of_every_script_has_its_own_line_in_fires_help():
    """fire's help describes a flag from the `Args:` section of main's docstring, one `name: what` entry each: an
    entry naming several flags at once ("n_prompt, n_new, repeats: ...") or a docstring with no `Args:` left
    flags bare in --help and glued their text to the flag before. Read from the source: nothing is imported."""
    import ast

    from fire import docstrings

    scripts = ["main.py"] + sorted(f"tools/{path.name}" for path in (REPO_ROOT / "tools").glob("*.py")
                                   if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"))
    bare = {}
    for script in scripts:
        tree = ast.parse((REPO_ROOT / script).read_text(encoding="utf-8"))
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        main = functions["main"]
        if [arg.arg for arg in main.args.args] == ["argv"]:  # main(argv) hands the flags to the function it names
            main = functions[next(node.args[0].id for node in ast.walk(main) if isinstance(node, ast.Call)
                                  and getattr(node.func, "id", "") == "run_script")]
        described = {arg.name for arg in docstrings.parse(ast.get_docstring(main)).args or [] if arg.description}
        missing = [arg.arg for arg in main.args.args if arg.arg not in described]
        if missing:
            bare[script] = missing
    assert bare == {}, bare
