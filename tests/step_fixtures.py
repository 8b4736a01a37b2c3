"""The reference's saved calls for a learner's `grade N`, and the stand-ins made of them (course/replay.py).

Read EXERCISES.md, course/replay.py (why a step's checks replay the reference where its function calls another
step's) and tests/make_step_fixtures.py (which writes the saved calls) first.

These saved calls are shipped with a student copy, so a learner's checks run anywhere; the gradebook grades on
calls drawn fresh when it grades (course/hidden.py), which no copy holds.
"""

import json

from conftest import FIXTURES_DIR
from course.replay import (accept_stand_in, attention_stand_in, decode, encode, layer_norm_stand_in,  # noqa: F401
                           mask_stand_ins, mha_stand_in, residual_stand_in, same, saved_cache)

STEPS_FIXTURE = FIXTURES_DIR / "steps.json"


def load():
    """The saved calls: {part: ...}, as tests/make_step_fixtures.py wrote them."""
    if not STEPS_FIXTURE.is_file():
        raise FileNotFoundError(f"{STEPS_FIXTURE} is missing: run `python tests/make_step_fixtures.py` in the "
                                f"teacher's repository (it needs the reference solutions)")
    return decode(json.loads(STEPS_FIXTURE.read_text(encoding="utf-8")))
