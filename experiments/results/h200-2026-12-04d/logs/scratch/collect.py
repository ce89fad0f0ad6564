"""One JSON of every results.json under a multirun dir (the device returns 8 files at most)."""
import json, sys, pathlib
root = pathlib.Path(sys.argv[1])
rows = []
for p in sorted(root.rglob("results.json")):
    r = json.loads(p.read_text())
    rows.append({"job": str(p.parent.relative_to(root)), **{k: v for k, v in r.items() if k not in ("env",)}})
json.dump(rows, open(sys.argv[2], "w"), indent=1, default=str)
print(len(rows), "jobs collected")
