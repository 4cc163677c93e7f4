"""Moving messages between the grader's processes: framing, checked untrusted JSON, values on the wire."""
