"""``%stale``'s text: the same facts the status bar shows, for a terminal or a notebook."""

from __future__ import annotations

from typing import Any


def stale_report(status: dict[str, Any]) -> str:
    entries = status["entries"]
    if not entries:
        return "No derivatives cached yet."
    lines = []
    fresh = [e for e in entries if e["state"] == "fresh"]
    unbuilt = [e for e in entries if e["state"] == "unbuilt"]
    waiting = [e for e in entries if e["state"] not in ("fresh", "unbuilt")]
    total = len(entries)
    if not waiting and not unbuilt:
        which = "The only derivative is" if total == 1 else f"All {total} derivatives are"
        lines.append(f"{which} fresh: checked against the current code and data just now.")
    elif not waiting:
        lines.append(
            f"None of {total} derivatives is stale: {len(fresh)} fresh (checked just now), "
            f"{len(unbuilt)} not built yet:"
        )
    else:
        lines.append(
            f"{len(waiting)} of {total} derivatives will be rebuilt at their next call; "
            f"{len(fresh)} fresh (checked just now):"
        )
        width = max(len(e["name"]) for e in waiting)
        for e in waiting:
            if e["state"] == "failed":
                why = f"its last build failed: {e['error']}"
            else:
                why = "; ".join(r["text"] for r in e["reasons"]) or e["state"]
            lines.append(f"  {e['name']:<{width}}  {why}")
    for e in unbuilt:
        calls = e.get("calls_before_build", 0)
        ran = f"{calls} call{'s' * (calls != 1)} so far, by plain autograd" if calls else "no call"
        lines.append(f"  {e['name']}  not built yet ({ran}; built at a later call)")
    for e in entries:
        if e["fallback"]:
            lines.append(f"  note: {e['name']} runs its Python code on every call: {e['fallback']}")
    if status.get("internal_errors"):
        lines.append(
            f"  ({status['internal_errors']} internal errors counted; answers stay correct)"
        )
    return "\n".join(lines)
