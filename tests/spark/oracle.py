"""An independent reader of a Spark checkpoint, the oracle of weir's
`inspect --json` in tests/it/spark.rs. Standard library only; written from
Spark's file formats (docs/spark-attach.md), not from weir's code.

    python3 oracle.py CHECKPOINT   -> one JSON object on stdout
"""

import json
import os
import re
import sys


def ids(d, compact=False):
    out = []
    if not os.path.isdir(d):
        return out
    for n in os.listdir(d):
        if n.startswith("."):
            continue
        if n.isdigit():
            out.append((int(n), False))
        elif compact and n.endswith(".compact") and n[: -len(".compact")].isdigit():
            out.append((int(n[: -len(".compact")]), True))
    return sorted(out)


def lines(path):
    with open(path) as f:
        return f.read().split("\n")


def offsets(cp, n):
    ls = lines(os.path.join(cp, "offsets", str(n)))
    version = int(ls[0][1:])
    meta = json.loads(ls[1])
    srcs = []
    for l in ls[2:]:
        if not l.strip():
            continue
        name = None
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):(.*)$", l)
        if m and not l.startswith("{"):
            name, l = m.group(1), m.group(2)
        srcs.append((name, None if l.strip() == "-" else json.loads(l)))
    return version, meta, srcs


def kind(offset):
    if isinstance(offset, int):
        return "rate"
    if isinstance(offset, dict):
        if "logOffset" in offset:
            return "file"
        if "reservoirVersion" in offset:
            return "delta"
        return "kafka"
    return "unknown"


def file_count(log_dir):
    entries = ids(log_dir, compact=True)
    compacts = [i for i, c in entries if c]
    last = max(compacts) if compacts else None
    paths = set()
    for i, c in entries:
        if (c and i == last) or (not c and (last is None or i > last)):
            name = f"{i}.compact" if c else str(i)
            for l in lines(os.path.join(log_dir, name))[1:]:
                if l.strip():
                    paths.add(json.loads(l)["path"])
    return len(paths)


def state(cp):
    out = []
    sd = os.path.join(cp, "state")
    if not os.path.isdir(sd):
        return out
    for op in sorted(int(n) for n in os.listdir(sd) if n.isdigit()):
        od = os.path.join(sd, str(op))
        name = None
        meta = os.path.join(od, "_metadata", "metadata")
        v2 = os.path.join(od, "_metadata", "v2")
        if os.path.isdir(v2) and ids(v2):
            meta = os.path.join(v2, str(ids(v2)[-1][0]))
        if os.path.isfile(meta):
            name = json.loads(lines(meta)[1])["operatorInfo"]["operatorName"]
        versions, exts, unique = set(), set(), False
        parts = sorted(int(n) for n in os.listdir(od) if n.isdigit())
        for root, _dirs, files in os.walk(od):
            for f in files:
                m = re.match(r"^(\d+)(_[0-9a-f-]+)?\.(delta|snapshot|changelog|zip)$", f)
                if m:
                    versions.add(int(m.group(1)))
                    exts.add(m.group(3))
                    unique = unique or bool(m.group(2))
        fmt = "rocksdb" if exts & {"changelog", "zip"} else ("hdfs" if exts else "empty")
        out.append(
            {
                "operator_id": op,
                "operator_name": name,
                "store_format": fmt,
                "checkpoint_format_version": 2 if unique else 1,
                "min_version": min(versions) if versions else None,
                "max_version": max(versions) if versions else None,
                "partitions": len(parts),
            }
        )
    return out


def main(cp):
    with open(os.path.join(cp, "metadata")) as f:
        query_id = json.loads(f.read())["id"]
    offs = [i for i, _ in ids(os.path.join(cp, "offsets"))]
    coms = [i for i, _ in ids(os.path.join(cp, "commits"))]
    last = offs[-1] if offs else None
    last_c = coms[-1] if coms else None
    pending = last if last is not None and (last_c is None or last > last_c) else None
    version, meta, srcs = offsets(cp, last)
    committed = None
    if last_c is not None:
        committed = offsets(cp, last_c)[2]
    with open(os.path.join(cp, "commits", str(last_c))) as f:
        commit = json.loads(f.read().split("\n")[1])
    sources = []
    for i, (name, off) in enumerate(srcs):
        log = os.path.join(cp, "sources", name if name else str(i))
        k = kind(off)
        sources.append(
            {
                "index": i,
                "name": name,
                "kind": k,
                "latest_offset": off,
                "committed_offset": committed[i][1] if committed and i < len(committed) else None,
                "files": file_count(log) if k == "file" and os.path.isdir(log) else None,
            }
        )
    print(
        json.dumps(
            {
                "query_id": query_id,
                "last_batch_id": last,
                "last_committed_batch_id": last_c,
                "pending_batch_id": pending,
                "watermark_ms": meta.get("batchWatermarkMs"),
                "next_watermark_ms": commit.get("nextBatchWatermarkMs"),
                "offset_log_version": version,
                "batches": len(offs),
                "shuffle_partitions": int(meta["conf"]["spark.sql.shuffle.partitions"]),
                "sources": sources,
                "state_operators": state(cp),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
