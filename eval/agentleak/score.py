"""Score AgentLeak traces with the pip package `agentleak` (pinned in requirements.lock).

`secureclaw eval agentleak` writes one JSON object per line on stdin:

    {"id": "...", "trace": {agentleak Trace}, "canaries": {"obvious": [...],
     "realistic": [...], "semantic": [...]}, "vault": [{"level": 1..4}, ...]}

and reads one JSON object per line on stdout, in the same order:

    {"id": "...", "risk_index": float|null, "verdict": str|null, "vault_error": str|null,
     "findings": [{"channel", "data_type", "detector", "tier", "level", "canary"}]}

`canary` is the matched canary token for canary findings (the scenario's own synthetic or
vault values, which the caller already holds) and null for every other detector, whose matched
values are not written out. Scoring is `AgentLeakRunner().analyze(trace, canary_set=...,
vault=...)`: the explicit vault is always passed (without it the Risk Index denominator is the
set of secrets observed in the trace, research note benchmarks.md §2.3 pitfall 1). A vault the
package rejects as smaller than what leaked (`VaultScopeError`) is reported in `vault_error`,
and the trace is scored again without the Risk Index so its findings still count.
"""

import json
import sys

from agentleak import AgentLeakRunner, Trace
from agentleak.core.agentrisk import VaultScopeError
from agentleak.core.canary import CanarySet


def finding(f):
    return {
        "channel": f.channel,
        "data_type": f.data_type,
        "detector": f.detector,
        "tier": f.metadata.get("tier") if isinstance(f.metadata, dict) else None,
        "level": f.level,
        "canary": f.matched_value if f.detector == "canary" else None,
    }


def main():
    runner = AgentLeakRunner()
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        item = json.loads(line)
        trace = Trace.from_dict(item["trace"])
        canaries = CanarySet.from_dict(item["canaries"])
        vault = item["vault"]
        row = {"id": item["id"], "risk_index": None, "verdict": None, "vault_error": None}
        try:
            res = runner.analyze(trace, canary_set=canaries, vault=vault)
            row["risk_index"] = res.risk_index
            row["verdict"] = res.verdict
        except VaultScopeError as e:
            row["vault_error"] = str(e)
            # Scored again with a vault as large as any trace can leak, only to list the
            # findings; the Risk Index of this run is not reported.
            res = runner.analyze(trace, canary_set=canaries, vault={4: 1_000_000})
        row["findings"] = [finding(f) for f in res.findings]
        out.write(json.dumps(row, sort_keys=True) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
