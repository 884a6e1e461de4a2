"""AgentDojo v1.1.2 suites, loaded the way the benchmark meant them.

agentdojo 0.1.35 never imports ``agentdojo.default_suites.v1_1_2``, so ``get_suite("v1.1.2", …)``
silently serves the v1 versions of workspace injection tasks 0/3/4/5, workspace user tasks 13/33
and travel injection tasks 3/5 (research note ``benchmarks.md`` §1.5). We import the v1_1_2
module ourselves, then rebuild workspace and travel from the *original* suite objects so that the
(1, 1, 2) updates are registered; banking and slack have no v1_1_2 updates.
"""

from __future__ import annotations

import warnings

import yaml

warnings.filterwarnings("ignore")

# Speed only: AgentDojo parses the whole environment YAML for every run with the pure-Python
# SafeLoader (0.8 s per workspace run). libyaml's CSafeLoader builds the same objects (checked:
# identical environments for all four suites) ten times faster.
if hasattr(yaml, "CSafeLoader"):
    yaml.safe_load = lambda stream: yaml.load(stream, Loader=yaml.CSafeLoader)  # noqa: S506

# Order matters: load_suites first (circular import otherwise), then the v1_1_2 fixes.
from agentdojo.task_suite.load_suites import get_suite  # noqa: E402
import agentdojo.default_suites.v1_1_2  # noqa: E402,F401  (registers the (1,1,2) updates)
from agentdojo.default_suites.v1.travel.task_suite import task_suite as _travel  # noqa: E402
from agentdojo.default_suites.v1.workspace.task_suite import task_suite as _workspace  # noqa: E402

SUITE_NAMES = ("workspace", "travel", "banking", "slack")

#: (user tasks, injection tasks) per suite in v1.1.2; 97 user tasks, 629 attacked pairs.
EXPECTED = {"workspace": (40, 6), "travel": (20, 7), "banking": (16, 9), "slack": (21, 5)}

_cache: dict = {}


def load(name: str):
    """The v1.1.2 TaskSuite ``name`` with its task fixes, checked against EXPECTED."""
    if name in _cache:
        return _cache[name]
    if name == "workspace":
        suite = _workspace.get_new_version((1, 1, 2))
    elif name == "travel":
        suite = _travel.get_new_version((1, 1, 2))
    elif name in ("banking", "slack"):
        suite = get_suite("v1.1.2", name)
    else:
        raise SystemExit(f"unknown suite `{name}` (expected one of {', '.join(SUITE_NAMES)})")
    counts = (len(suite.user_tasks), len(suite.injection_tasks))
    if counts != EXPECTED[name]:
        raise SystemExit(f"suite `{name}`: {counts} user/injection tasks, expected {EXPECTED[name]}")
    if name == "workspace":
        mod = type(suite.injection_tasks["injection_task_0"]).__module__
        if "v1_1_2" not in mod:
            raise SystemExit(f"workspace injection_task_0 comes from `{mod}`: v1.1.2 fixes not loaded")
    _cache[name] = suite
    return suite


def check_totals() -> None:
    """Assert the published totals: 97 user tasks, 629 attacked pairs."""
    users = sum(EXPECTED[n][0] for n in SUITE_NAMES)
    pairs = sum(EXPECTED[n][0] * EXPECTED[n][1] for n in SUITE_NAMES)
    assert (users, pairs) == (97, 629), (users, pairs)
    for n in SUITE_NAMES:
        load(n)
