"""Cost of ``redact`` on a realistic 2 KB text and a 64 KB one, against a one-regex pass.

The text mixes what checkpoints carry: code, a diff, log lines, a shell session, prose, and
a couple of secrets; the 64 KB text is that text repeated (a long assistant message or
transcript excerpt). For each, prints the median and p95 of ``redact`` over many runs, the
median of the baseline (a single precompiled ``re.sub`` for OpenAI-style keys, the least a
redactor could do, on the same text) and the ratio between the two. Goals: median under
5 ms on 2 KB; on 64 KB, a cost per KB at most 1.5x the 2 KB one (it grows linearly).

    .venv/bin/python bench/redaction.py [--runs 2000]   (the 64 KB text gets runs / 20)
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkpoints.services.redaction import REDACTED, find_secrets, redact

GOAL_MS = 5.0
GOAL_PER_KB_RATIO = 1.5
LARGE_CHARS = 64 * 1024

# Fabricated secrets, in their real formats.
TEXT = """\
## Current task
Wire the recovery builder to the checkpoint store; budget 2000 chars, newest first.

$ git log --oneline -3
3f78685 Recovery: trim decisions before open questions (HEAD -> main)
a1b2c3d Store: prune per session after 50 checkpoints
9e0d1f2 Hooks: replay the outbox with idempotency keys

```python
def recovery_build(*, session: Session, budget: int) -> str:
    checkpoint = checkpoint_latest(session=session)
    if checkpoint is None:
        return ""
    token = request.headers.get("Authorization")
    parts = [checkpoint.digest, *checkpoint.decisions[:5]]
    return "\\n".join(parts)[:budget]
```

diff --git a/signet_site/settings.py b/signet_site/settings.py
@@ -12,7 +12,7 @@ env = environ.Env()
-SECRET_KEY = env("DJANGO_SECRET_KEY")
+SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
 DATABASES = {"default": env.db("DATABASE_URL", default="sqlite:///var/db.sqlite3")}

2024-06-11T10:02:03Z INFO  checkpoint.create session=0b6f3f0e-8f5c-4d7e-9b61-1f2a3c4d5e6f
2024-06-11T10:02:03Z DEBUG upstream POST https://api.openai.com/v1/chat/completions 200 812ms
2024-06-11T10:02:04Z DEBUG env OPENAI_API_KEY=sk-M0XvqZjxTW3xvboSRt5Mh3dAwVtRMflhbmuaptt0Azn0DNRU
2024-06-11T10:02:04Z WARN  retrying with DATABASE_URL=postgres://app:Sup3rS3cret@db:5432/app
2024-06-11T10:02:05Z INFO  token count: 1834 (max_tokens: 4096), context tokens: 61234

$ git remote -v
origin  https://github.com/acme/signet.git (fetch)
$ export GITHUB_TOKEN=ghp_6LZQ9SMDcEVV8bOhUVXoqmaQzE4ftUvXQICh
$ curl -s -H "Authorization: Bearer $SIGNET_TOKEN" http://127.0.0.1:8000/api/sessions/
[{"session_key": "claude-7d1c", "project": "/srv/app", "prompt_count": 12}]

Decisions: keep SQLite by default; pin the image by digest
sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.
Open questions: should the password_reset_view be rate limited? Next: tests/test_recovery.py.
Blockers: none. Modified: checkpoints/services/recovery.py, checkpoints/selectors.py (+41 -7).
"""

BASELINE = re.compile(r"sk-[A-Za-z0-9_-]{20,}")


def timings(func: Callable[[str], object], text: str, runs: int) -> list[float]:
    """Milliseconds per call, after a short warm-up."""
    for _ in range(min(runs // 10, 100)):
        func(text)
    result = []
    for _ in range(runs):
        began = time.perf_counter()
        func(text)
        result.append((time.perf_counter() - began) * 1000)
    return result


def measure(name: str, text: str, runs: int) -> float:
    """Print the figures for ``text``; the median of ``redact`` in ms."""
    redacted = redact(text)
    kinds = sorted({finding.kind for finding in find_secrets(text)})
    print(
        f"{name}: {len(text):,} chars, {redacted.count(REDACTED)} redactions ({', '.join(kinds)})"
    )
    ours = timings(redact, text, runs)
    base = timings(lambda value: BASELINE.sub(REDACTED, value), text, runs)
    median, p95 = statistics.median(ours), statistics.quantiles(ours, n=20)[-1]
    base_median = statistics.median(base)
    print(f"  redact:   median {median:.3f} ms, p95 {p95:.3f} ms over {runs} runs")
    print(f"  baseline: median {base_median:.3f} ms (one precompiled re.sub, same text)")
    print(f"  ratio:    {median / base_median:.1f}x the baseline")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()

    large = (TEXT * (LARGE_CHARS // len(TEXT) + 1))[:LARGE_CHARS]
    small_ms = measure("2 KB text", TEXT, args.runs)
    large_ms = measure("64 KB text", large, max(20, args.runs // 20))
    per_kb_ratio = (large_ms / len(large)) / (small_ms / len(TEXT))

    def verdict(met: bool) -> str:
        return "met" if met else "NOT met"

    print(f"goal:     median under {GOAL_MS:.0f} ms on ~2 KB: {verdict(small_ms < GOAL_MS)}")
    print(
        f"goal:     cost per KB on 64 KB / on 2 KB: {per_kb_ratio:.2f} "
        f"(<= {GOAL_PER_KB_RATIO}: {verdict(per_kb_ratio <= GOAL_PER_KB_RATIO)})"
    )


if __name__ == "__main__":
    main()
