"""Numbers a test works out, read from a run of that test: how a figure quotes a test without importing it.

Some figures are the tests' own measurements: the exactness table's total variations against their bounds,
gpt2's largest difference from Hugging Face's logits. A tool may not import a test module (the tests import the
tools, never the other way), so the test records each number with pytest's `record_property`, and `recorded`
runs the test in a fresh pytest that writes a JUnit XML report, then reads the numbers back from it:

    recorded("tests/test_gpt2.py", "match_hugging_face")
    -> {"test_logits_match_hugging_face_gpt2lmheadmodel[tiny-0]": {"max_abs_diff": 2.4e-07, ...}, ...}

A figure therefore comes from a passing run only: a failing test is a RuntimeError, never a table.
"""

import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def recorded(test_file, selection):
    """{test id: {property: float}} of the tests in test_file (relative to the repository) that pytest's
    `-k selection` picks, in the order they ran; or a RuntimeError with the end of pytest's output."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.xml"
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
                                 "junit_family=xunit1", f"--junitxml={report}", "-k", selection, test_file],
                                cwd=REPO, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"`python -m pytest {test_file} -k {selection!r}` did not pass, so its numbers are "
                               f"not quoted:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
        cases = ElementTree.parse(report).getroot().iter("testcase")
        return {case.get("name"): {prop.get("name"): float(prop.get("value")) for prop in case.iter("property")}
                for case in cases}
