"""A polling reader process for the multi-process tests: prints JSON counts and errors."""

import argparse
import json
import os
import time
import warnings
from pathlib import Path

from observability import open_run, refresh


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("--expect", type=int, required=True, help="stop once tokens reach this count")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--progress", default=None, help="file to write the latest count to")
    a = p.parse_args()
    warnings.simplefilter("error")  # a corrupt-part warning counts as an error
    counts, errors, con = [], [], None
    deadline = time.monotonic() + a.timeout
    while time.monotonic() < deadline:
        try:
            if con is None or len(counts) % 10 == 0:  # mostly refresh, sometimes reopen
                if not (Path(a.run_dir) / "telemetry").is_dir():
                    continue
                con = open_run(a.run_dir)
            else:
                refresh(con)
            (n,) = con.execute("SELECT count(*) FROM tokens").fetchall()[0]
            con.execute("SELECT step, avg(rollout_logp) FROM tokens GROUP BY step").fetchall()
            counts.append(n)
            if a.progress:  # the writer waits for this before it writes more
                tmp = f"{a.progress}.tmp"
                Path(tmp).write_text(str(n))
                os.replace(tmp, a.progress)
            if n >= a.expect:
                break
        except Exception as e:  # recorded, never hidden
            errors.append(f"{type(e).__name__}: {e}")
    print(json.dumps({"counts": counts, "errors": errors}))


if __name__ == "__main__":
    main()
