"""Byte-level tokenizer with the DSV4 special tokens (the tiny checkpoint ships it as tokenizer.json).

Ids: the specials first (BOS 0, EOS 1 as in DSV4), then the 256 bytes from `byte_offset`. The real DSV4 ids
of the specials other than BOS/EOS are unknown, so a checkpoint's tokenizer.json says where they live.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .config import read_json

SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜latest_reminder｜>",
            "<think>", "</think>", "｜DSML｜", "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>", "<｜title｜>",
            "<｜read_url｜>", "<｜extracted_url｜>"]
BOS, EOS = SPECIALS[0], SPECIALS[1]


class ByteTokenizer:
    def __init__(self, specials: dict[str, int] | None = None, byte_offset: int = 16):
        self.specials = specials or {s: i for i, s in enumerate(SPECIALS)}
        self.byte_offset = byte_offset
        self.by_id = {i: s for s, i in self.specials.items()}
        clash = [s for s, i in self.specials.items() if byte_offset <= i < byte_offset + 256]
        if clash:
            raise ValueError(f"tokenizer: special token {clash[0]!r} collides with the byte range [{byte_offset}, {byte_offset + 256})")
        self._split = re.compile("(" + "|".join(re.escape(s) for s in sorted(self.specials, key=len, reverse=True)) + ")")
        self.bos_id, self.eos_id = self.specials[BOS], self.specials[EOS]

    @property
    def vocab_size(self) -> int:
        return max(self.byte_offset + 256, max(self.specials.values()) + 1)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self._split.split(text):
            if piece in self.specials:
                ids.append(self.specials[piece])
            elif piece:
                ids.extend(self.byte_offset + b for b in piece.encode("utf-8"))
        return ids

    def decode(self, ids) -> str:
        out, buf = [], bytearray()
        for i in ids:
            i = int(i)
            if self.byte_offset <= i < self.byte_offset + 256:
                buf.append(i - self.byte_offset)
                continue
            out.append(buf.decode("utf-8", errors="replace"))
            buf = bytearray()
            out.append(self.by_id.get(i, ""))
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def to_json(self) -> dict:
        return {"type": "byte-level", "byte_offset": self.byte_offset, "specials": self.specials}

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path, vocab_size: int | None = None) -> "ByteTokenizer":
        """Read and check a tokenizer.json; `vocab_size` (the model's, when given) must hold every id it can emit."""
        path = Path(path)
        cfg = read_json(path, "tokenizer.json")
        if not isinstance(cfg, dict):
            raise ValueError(f"{path}: expected a JSON object, found {type(cfg).__name__}")
        if cfg.get("type") != "byte-level":
            raise ValueError(f"{path}: expected a byte-level tokenizer (type='byte-level'), found type={cfg.get('type')!r}")

        def is_id(v) -> bool:
            return type(v) is int and v >= 0              # not bool, which JSON true/false would give

        def found(key: str) -> str:
            return f"{type(cfg[key]).__name__} {cfg[key]!r}"[:80] if key in cfg else "no such key"
        if not is_id(cfg.get("byte_offset")):
            raise ValueError(f"{path}: key 'byte_offset': expected an integer >= 0, found {found('byte_offset')}")
        specials, off = cfg.get("specials"), cfg["byte_offset"]
        if not isinstance(specials, dict):
            raise ValueError(f"{path}: key 'specials': expected an object of token -> id, found {found('specials')}")
        for s, i in specials.items():
            if not is_id(i):
                raise ValueError(f"{path}: key 'specials' entry {s!r}: expected an integer id >= 0, found {type(i).__name__} {i!r}")
        for s in (BOS, EOS):
            if s not in specials:
                raise ValueError(f"{path}: key 'specials': expected an entry for {s!r}, found none")
        if vocab_size is not None:                        # an id past the model's embedding fails deep in torch
            if off + 256 > vocab_size:
                raise ValueError(f"{path}: key 'byte_offset': expected at most {vocab_size - 256} (bytes at "
                                 f"[byte_offset, byte_offset+256) within the model's vocabulary [0, {vocab_size})), found {off}")
            for s, i in specials.items():
                if i >= vocab_size:
                    raise ValueError(f"{path}: key 'specials' entry {s!r}: expected an id in the model's vocabulary "
                                     f"[0, {vocab_size}), found {i}")
        try:
            return cls(specials, off)
        except ValueError as e:                           # the byte-range clash: name the file
            raise ValueError(f"{path}: {e}") from None
