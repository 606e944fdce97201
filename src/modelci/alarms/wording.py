"""What a listed alarm or alarm event says, shared by the notifiers, `modelci alarms`, the Markdown summary and
the dashboard (docs/alarms.md: "Recovered", and "What they say" under notifiers).

An alarm's `message` is what it last fired with. A recovery says how the metric is now, from the observation
that recovered it, with the failure it recovered from as context: a failure printed under "recovered" reads as
a failure.
"""

from __future__ import annotations

from typing import Any


def event_parts(event: Any) -> tuple[str, str]:
    """(what the event says, the earlier state it replaces or ""): an opening says its failure; a recovery how
    the metric is now, and the failure as "was"; a bisect its culprit."""
    alarm = event.alarm
    if event.event == "bisected":
        return alarm.culprit, ""
    if event.event == "recovered":
        return event.detail or alarm.recovery or "back to normal", alarm.message
    return alarm.message, ""


def alarm_parts(alarm: Any) -> tuple[str, str]:
    """As event_parts, for a live alarm as listed: a recovered one says how it is now, and what it was."""
    if alarm.recovered and alarm.state != "resolved":
        return alarm.recovery or "back to normal", alarm.message
    return alarm.message, ""


def joined(now: str, was: str) -> str:
    """The two parts as one text: "status ok (was: status failed: RuntimeError: boom)"."""
    return f"{now} (was: {was})" if was else now
