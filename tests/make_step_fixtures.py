"""Write tests/fixtures/steps.json: the reference's own calls, saved, so each exercise step is graded alone.

Read course/replay.py and course/scenarios.py first (what the saved calls are for, and how they are made).

The scenarios and what they record are course/scenarios.py's, run here with its fixed seeds (0 and 1).

Rerun from the repository root (the teacher's copy, never a student copy, which has no reference):
    python tests/make_step_fixtures.py
It is deterministic: a rerun writes the same file unless the reference changed.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # conftest, step_fixtures
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the project's modules

from course.replay import encode  # noqa: E402
from course.scenarios import forward_part, rounds_part  # noqa: E402
from step_fixtures import STEPS_FIXTURE  # noqa: E402


def main():
    fixture = {"forward": forward_part(), "rounds": rounds_part()}
    STEPS_FIXTURE.write_text(json.dumps(encode(fixture), separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {STEPS_FIXTURE} ({STEPS_FIXTURE.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
