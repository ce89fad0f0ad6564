"""Read a W&B offline run back from its `.wandb` file, as the dashboard would see it after
`wandb sync`: config, summary, history rows, files, artifacts, exit code.

The file is a log of protobuf `Record`s (wandb.proto.wandb_internal_pb2) in LevelDB's log format:
a 7-byte header (":W&B", magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each chunk a
7-byte header (crc32 of type + data, little-endian length, type: 1 full, 2 first, 3 middle,
4 last) and its data; a block's tail too short for a chunk header is zero padding. wandb 0.31
ships no reader for it, hence this one (the tests use it to check that W&B and results.json say
the same)."""
import json
import struct
import time
import zlib
from pathlib import Path

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class CorruptLog(ValueError):
    pass


def records(path) -> list:
    """Every Record in the file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise CorruptLog(f"{path}: not a W&B record log")
    out, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # padding at the end of a block
            pos += left
            continue
        crc, n, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        chunk = data[pos + HEADER:pos + HEADER + n]
        if kind == 0 and n == 0:  # zero padding after the last record
            break
        if zlib.crc32(bytes([kind]) + chunk) != crc:
            raise CorruptLog(f"{path}: bad checksum at byte {pos}")
        pos += HEADER + n
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            r = pb.Record()
            r.ParseFromString(pending)
            out.append(r)
            pending = b""
    return out


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


class OfflineRun:
    """What one offline run folder (offline-run-<stamp>-<id>) holds."""

    def __init__(self, folder):
        self.folder = Path(folder)
        files = sorted(self.folder.glob("*.wandb"))
        if not files:
            raise FileNotFoundError(f"{folder}: no .wandb file")
        self.records = records(files[0])
        self.run_id = self.name = self.group = self.job_type = None
        self.config, self.summary, self.history, self.files, self.artifacts = {}, {}, [], [], []
        self.tags, self.exit_code = [], None
        for r in self.records:
            kind = r.WhichOneof("record_type")
            if kind == "run":
                run = r.run
                self.run_id, self.name, self.group, self.job_type = run.run_id, run.display_name, run.run_group, \
                    run.job_type
                self.tags = list(run.tags)
                self._config(run.config.update)
            elif kind == "config":
                self._config(r.config.update)
            elif kind == "summary":
                for item in r.summary.update:
                    self.summary[_key(item)] = json.loads(item.value_json)
                for item in r.summary.remove:
                    self.summary.pop(_key(item), None)
            elif kind == "history":
                self.history.append({_key(i): json.loads(i.value_json) for i in r.history.item})
            elif kind == "files":
                self.files += [f.path for f in r.files.files]
            elif kind == "artifact":
                self.artifacts.append({"name": r.artifact.name, "type": r.artifact.type,
                                       "files": [m.path for m in r.artifact.manifest.contents]})
            elif kind == "exit":
                self.exit_code = r.exit.exit_code

    @classmethod
    def finished(cls, folder, timeout: float = 30.0) -> "OfflineRun":
        """The run once its file holds the exit record. `run.finish()` can return before W&B's
        service has flushed the file's last block, so a reader right after it may see a file cut
        short (seen as a history without its last rows); wait for the exit record instead."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                run = cls(folder)
            except (FileNotFoundError, CorruptLog):  # not written yet, or a block half flushed
                run = None
            if (run is not None and run.exit_code is not None) or time.monotonic() > deadline:
                return run if run is not None else cls(folder)
            time.sleep(0.1)

    def _config(self, updates) -> None:
        for item in updates:
            self.config[_key(item)] = json.loads(item.value_json)

    def user_summary(self) -> dict:
        """The summary without W&B's own keys (_step, _runtime, _timestamp, _wandb)."""
        return {k: v for k, v in self.summary.items() if not k.startswith("_")}

    def user_config(self) -> dict:
        return {k: v for k, v in self.config.items() if k != "_wandb"}

    def steps(self) -> list:
        return [h["_step"] for h in self.history if "_step" in h]


def run_folders(job_dir) -> list:
    """The offline run folders a job dir holds (a resumed job has one per attempt)."""
    return sorted((Path(job_dir) / "wandb").glob("offline-run-*"))
