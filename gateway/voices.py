"""Registered voices: a VoicePrompt computed once by a talker, kept on disk, reused by id.

Each voice is two files in the voices directory: `<id>.pb` (the serialized VoicePrompt, the
talker's input as is) and `<id>.json` (the public RegisteredVoice). Files are written to a
temporary name and renamed, so a crash never leaves half a voice.

Several gateways may share the directory (a ReadWriteMany claim behind one Service): the files are
the truth, so a voice registered, replaced or deleted through one gateway is seen by the others at
their next lookup. A record read from disk is kept while its `.json` is the same file (inode and
mtime: every write renames a new file into place); the `.pb` is renamed in first, so a `.json`
never names a prompt older than itself.

Every method does disk I/O: callers on the event loop run them in a worker thread.
"""
from __future__ import annotations

import logging
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format

from protos.tts.internal.v1 import talker_pb2
from protos.tts.v1 import voices_pb2

logger = logging.getLogger(__name__)

VOICE_ID = re.compile(r"^[a-z0-9_-]{1,64}$")
DEFAULT_VOICES_DIR = Path("~/.cache/qwen3-tts-serve/voices")


@dataclass
class VoiceRecord:
    voice: voices_pb2.RegisteredVoice
    prompt: talker_pb2.VoicePrompt


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class VoiceRegistry:
    """Safe to call from several threads at once (lookups run in worker threads, off the event
    loop): each voice read is one entry (record, stamp) of one dict, replaced or dropped whole."""

    def __init__(self, directory: str | Path = "") -> None:
        self.directory = Path(directory or DEFAULT_VOICES_DIR).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)
        # voice id -> (its record, (inode, mtime_ns) of the .json it was read from)
        self._read: dict[str, tuple[VoiceRecord, tuple[int, int]]] = {}
        self.list()
        logger.info("%d registered voices in %s", len(self._read), self.directory)

    @property
    def records(self) -> dict[str, VoiceRecord]:
        """The voices read so far, by id (a copy)."""
        return {voice_id: record for voice_id, (record, _) in list(self._read.items())}

    def _forget(self, voice_id: str) -> None:
        self._read.pop(voice_id, None)

    def get(self, voice_id: str) -> VoiceRecord | None:
        """The voice as its files are now (another gateway may have changed them); None if absent or
        unreadable (logged)."""
        if not VOICE_ID.match(voice_id):   # also keeps a lookup inside the directory
            return None
        meta = self.directory / f"{voice_id}.json"
        try:
            info = meta.stat()
        except FileNotFoundError:
            self._forget(voice_id)
            return None
        stamp = (info.st_ino, info.st_mtime_ns)
        known = self._read.get(voice_id)
        if known is not None and known[1] == stamp:
            return known[0]
        try:
            voice = json_format.Parse(meta.read_text(encoding="utf-8"), voices_pb2.RegisteredVoice())
            prompt = talker_pb2.VoicePrompt.FromString((self.directory / f"{voice_id}.pb").read_bytes())
        except (OSError, ValueError, json_format.ParseError) as exc:
            logger.warning("skipping registered voice %s: %s", meta, exc)
            self._forget(voice_id)
            return None
        record = VoiceRecord(voice, prompt)
        self._read[voice_id] = (record, stamp)
        return record

    def new_id(self) -> str:
        return "voice-" + secrets.token_hex(6)

    def put(self, record: VoiceRecord) -> None:
        voice_id = record.voice.voice_id
        if not VOICE_ID.match(voice_id):
            raise ValueError(f"voice_id {voice_id!r} must be 1-64 chars of [a-z0-9_-]")
        _write_atomic(self.directory / f"{voice_id}.pb", record.prompt.SerializeToString())
        _write_atomic(self.directory / f"{voice_id}.json",
                      json_format.MessageToJson(record.voice, preserving_proto_field_name=True).encode())
        self._forget(voice_id)   # read back (and stamped) at the next lookup

    def delete(self, voice_id: str) -> VoiceRecord | None:
        record = self.get(voice_id)
        if record is not None:
            for suffix in (".json", ".pb"):
                (self.directory / f"{voice_id}{suffix}").unlink(missing_ok=True)
        self._forget(voice_id)
        return record

    def list(self, model: str = "") -> list[voices_pb2.RegisteredVoice]:
        """Every voice in the directory now (a scan: listing is rare, lookups go by id)."""
        on_disk = sorted(meta.stem for meta in self.directory.glob("*.json"))
        for voice_id in self._read.keys() - set(on_disk):   # a new set: other threads may change _read
            self._forget(voice_id)
        records = [record for record in map(self.get, on_disk) if record is not None]
        return [r.voice for r in records if not model or r.voice.model == model]
