"""`python -m dsv4_model` on bad input: one `dsv4_model: error: ...` line naming the culprit, exit 2, no traceback,
no input written over; Ctrl-C and a closed stdout handled like a Unix tool."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import dsv4_model
from conftest import ROOT
from dsv4_model.__main__ import main

GEN = ["generate", "--prompt", "hi", "--max-new-tokens", "2"]


def _snapshot(*dirs: Path) -> dict:
    return {p: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for d in dirs for p in sorted(d.rglob("*")) if p.is_file()}


def _fails(capsys, argv, *names) -> str:
    """main(argv) exits 2 with a single stderr line that names every one of `names`."""
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.startswith("dsv4_model: error: ") and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    for n in names:
        assert str(n) in err, (argv, n, err)
    return err


@pytest.fixture
def ck(tmp_path) -> Path:
    """A copy of the tiny checkpoint, with its tokenizer.json, to break."""
    src = dsv4_model.tiny()
    dst = tmp_path / "ck"
    dst.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copyfile(src / name, dst / name)
    return dst


def _run(argv, env_drop=(), **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "dsv4_model", *argv], env=env, timeout=300, **kw)


# 1. --out ---------------------------------------------------------------------------------------------------------
def test_score_out_refuses_non_pt_names(tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "file.py").write_text("print('hi')\n")
    before = _snapshot(tmp_path)
    for out in (other / "model.safetensors", tmp_path / "file.py", tmp_path / "logits"):
        _fails(capsys, ["score", "--tokens", "20,21", "--out", str(out)], "--out", out, ".pt")
    assert _snapshot(tmp_path) == before


def test_score_out_refuses_special_and_read_only_files(tmp_path, capsys):
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    ro = tmp_path / "ro.pt"
    ro.write_bytes(b"old logits")
    ro.chmod(0o444)
    before = _snapshot(tmp_path)
    _fails(capsys, ["score", "--tokens", "20", "--out", str(fifo)], "--out", fifo, "expected a regular file, found a FIFO")
    _fails(capsys, ["score", "--tokens", "20", "--out", str(ro)], "--out", ro, "expected a writable file")
    assert stat.S_ISFIFO(fifo.stat().st_mode) and _snapshot(tmp_path) == before


def test_score_out_write_error_names_out_not_the_temp_file(tmp_path, capsys, monkeypatch):
    out = tmp_path / "l.pt"

    def denied(*a, dir=None, prefix="", **kw):                # what a folder without write permission gives
        raise PermissionError(13, "Permission denied", os.path.join(dir, prefix + "abcd1234"))
    monkeypatch.setattr("dsv4_model.__main__.tempfile.mkstemp", denied)
    err = _fails(capsys, ["score", "--tokens", "20", "--out", str(out)], "--out", out, "Permission denied")
    assert ".l.pt." not in err and not out.exists()


# 2. output mode ---------------------------------------------------------------------------------------------------
def test_score_out_mode_follows_umask_or_the_replaced_file(tmp_path):
    new, old = tmp_path / "new.pt", tmp_path / "old.pt"
    old.write_bytes(b"x")
    old.chmod(0o640)
    mask = os.umask(0o027)
    try:
        assert main(["score", "--tokens", "20,21", "--out", str(new)]) == 0
        assert main(["score", "--tokens", "20,21", "--out", str(old)]) == 0
    finally:
        os.umask(mask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o640 & ~0o027 == 0o640
    assert stat.S_IMODE(old.stat().st_mode) == 0o640
    mask = os.umask(0o002)
    try:
        new.unlink()
        assert main(["score", "--tokens", "20", "--out", str(new)]) == 0
    finally:
        os.umask(mask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o664
    assert torch.load(old).shape == (2, dsv4_model.config.tiny().vocab_size)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# 3-7. flags -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["-1", "-5", "0", "10000000000"])
def test_max_seq_len_out_of_range(tmp_path, capsys, value):
    _fails(capsys, ["score", "--tokens", "20", "--out", str(tmp_path / "l.pt"), "--max-seq-len", value],
           "--max-seq-len", value, "expected an integer in [1, 1048576]")
    _fails(capsys, [*GEN, "--max-seq-len", value], "--max-seq-len", value)
    assert not (tmp_path / "l.pt").exists()


@pytest.mark.parametrize("flag,value,want", [
    ("--max-new-tokens", "0", ">= 1"), ("--max-new-tokens", "-1", ">= 1"),
    ("--temperature", "nan", "finite"), ("--temperature", "inf", "finite"), ("--temperature", "-1", ">= 0"),
    ("--repetition-penalty", "nan", "finite"), ("--repetition-penalty", "inf", "finite"),
    ("--top-p", "nan", "(0, 1]"), ("--top-p", "inf", "(0, 1]"), ("--top-k", "-1", ">= 0"),
    ("--seed", "99999999999999999999999", "[0, 2**32)"), ("--seed", "-1", "[0, 2**32)")])
def test_generate_sampling_flags_out_of_range(capsys, flag, value, want):
    _fails(capsys, [*GEN, flag, value], flag, value, want)


def test_generate_text_flags_not_utf8(capsys):
    _fails(capsys, ["generate", "--prompt", "caf\udce9"], "--prompt: not valid UTF-8", "byte 0xe9")
    _fails(capsys, ["generate", "--prompt", "hi", "--system", "\udcff"], "--system: not valid UTF-8", "byte 0xff")


def test_generate_prompt_not_utf8_from_the_shell():
    """What a shell hands over for $'caf\\xe9': argv bytes, decoded with surrogate escapes."""
    r = _run([b"generate", b"--prompt", b"caf\xe9"], capture_output=True)
    err = r.stderr.decode()
    assert r.returncode == 2 and err.startswith("dsv4_model: error: --prompt: not valid UTF-8") and err.count("\n") == 1, err


# 8. tokenizer.json and config.json --------------------------------------------------------------------------------
def _edit_tokenizer(ck: Path, fn) -> None:
    cfg = json.loads((ck / "tokenizer.json").read_text(encoding="utf-8"))
    (ck / "tokenizer.json").write_text(json.dumps(fn(cfg)), encoding="utf-8")


@pytest.mark.parametrize("edit,names", [
    (lambda c: [1, 2], ["expected a JSON object, found list"]),
    (lambda c: {k: v for k, v in c.items() if k != "specials"}, ["'specials'", "no such key"]),
    (lambda c: {**c, "specials": ["<think>"]}, ["'specials'", "found list"]),
    (lambda c: {**c, "byte_offset": "16"}, ["'byte_offset'", "found str '16'"]),
    (lambda c: {**c, "byte_offset": True}, ["'byte_offset'", "found bool"]),
    (lambda c: {**c, "specials": {**c["specials"], "<think>": "5"}}, ["'specials'", "'<think>'", "found str '5'"]),
    (lambda c: {**c, "specials": {k: v for k, v in c["specials"].items() if v != 1}}, ["'specials'", "end▁of▁sentence"]),
    (lambda c: {**c, "byte_offset": 1000}, ["'byte_offset'", "vocabulary [0, 320)", "found 1000"]),
    (lambda c: {**c, "specials": {**c["specials"], "<think>": 400}}, ["'<think>'", "vocabulary [0, 320)", "found 400"]),
    (lambda c: {**c, "byte_offset": 2}, ["collides with the byte range"]),
])
def test_generate_malformed_tokenizer_json(capsys, ck, edit, names):
    _edit_tokenizer(ck, edit)
    before = _snapshot(ck)
    _fails(capsys, [*GEN, "--checkpoint", str(ck)], ck / "tokenizer.json", *names)
    assert _snapshot(ck) == before


@pytest.mark.parametrize("name", ["tokenizer.json", "config.json"])
def test_binary_json_files_are_named(tmp_path, capsys, ck, name):
    (ck / name).write_bytes(b"\xff\xfe{}")
    before = _snapshot(ck)
    _fails(capsys, [*GEN, "--checkpoint", str(ck)], ck / name, "UTF-8", "0xff")
    if name == "config.json":
        _fails(capsys, ["score", "--checkpoint", str(ck), "--tokens", "20", "--out", str(tmp_path / "l.pt")], ck / name, "UTF-8")
    assert _snapshot(ck) == before and not (tmp_path / "l.pt").exists()


# 9. Ctrl-C --------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_generate_ctrl_c_is_one_line_and_130(tmp_path):
    """A real SIGINT while generating (generate_batch stands in for a long decode, so the timing is deterministic)."""
    code = ("import sys, time, dsv4_model.generate as g\n"
            "def slow(*a, **k):\n    print('decoding', flush=True); time.sleep(120)\n"
            "g.generate_batch = slow\n"
            "from dsv4_model.__main__ import main\nsys.exit(main(['generate', '--prompt', 'hi']))\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert p.stdout.readline() == "decoding\n"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130 and "Traceback" not in err and err.endswith("dsv4_model: interrupted\n"), err


def test_score_ctrl_c_mid_write_keeps_the_old_out(tmp_path, capsys, monkeypatch):
    out = tmp_path / "l.pt"
    out.write_bytes(b"good old logits")

    def interrupted(obj, fh):
        fh.write(b"half a zip")
        raise KeyboardInterrupt
    monkeypatch.setattr("dsv4_model.__main__.torch.save", interrupted)
    try:
        rc = main(["score", "--tokens", "20,21", "--out", str(out)])
    except KeyboardInterrupt:                                  # escaping, it would stop the whole pytest session
        pytest.fail("KeyboardInterrupt escaped main()")
    assert rc == 130
    assert capsys.readouterr().err == "dsv4_model: interrupted\n"
    assert out.read_bytes() == b"good old logits" and [p.name for p in tmp_path.iterdir()] == ["l.pt"]


# 10. closed stdout ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["generate", "--prompt", "hi", "--max-new-tokens", "3", "--temperature", "0"],
                                  ["score", "--tokens", "20", "--out", "l.pt"]])
@pytest.mark.slow
def test_closed_stdout_exits_quietly(tmp_path, argv):
    """`... | true`: the reader is gone before the first write. Buffered stdout (no PYTHONUNBUFFERED) too, where the
    last write would otherwise fail in the flush at exit."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = _run(argv, env_drop=("PYTHONUNBUFFERED",), stdout=w, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    finally:
        os.close(w)
    assert p.returncode == 141 and "Broken pipe" not in p.stderr and "Traceback" not in p.stderr, p.stderr


# 11. DSV4_CACHE_DIR -----------------------------------------------------------------------------------------------
def test_cache_dir_that_is_a_file(tmp_path, capsys, monkeypatch):
    f = tmp_path / "cache"
    f.write_text("not a folder")
    for cache in (f, f / "sub"):
        monkeypatch.setenv("DSV4_CACHE_DIR", str(cache))
        _fails(capsys, GEN, "DSV4_CACHE_DIR", cache, "must be a directory")
        _fails(capsys, ["score", "--tokens", "20", "--out", str(tmp_path / "l.pt")], "DSV4_CACHE_DIR")
    assert f.read_text() == "not a folder" and not (tmp_path / "l.pt").exists()


# 12. --device -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["meta", "xpu", "mps", "hpu"])
def test_a_device_that_is_not_cpu_or_cuda(tmp_path, capsys, device):
    """meta blamed the checkpoint ('model tensors not covered'); the others were tracebacks from inside torch."""
    _fails(capsys, ["score", "--tokens", "20", "--out", str(tmp_path / "l.pt"), "--device", device],
           f"device '{device}'", "expected cpu or cuda[:N]", f"found a {device} device")
    assert not (tmp_path / "l.pt").exists()


def test_score_out_with_a_trailing_slash_or_empty(tmp_path, capsys):
    """Path('l.pt/') is Path('l.pt'): the old logits were replaced where a directory was named."""
    old = tmp_path / "l.pt"
    old.write_bytes(b"old logits")
    _fails(capsys, ["score", "--tokens", "20", "--out", f"{old}/"], f"--out '{old}/'", "found a directory name")
    _fails(capsys, ["score", "--tokens", "20", "--out", f"{old}/."], f"--out '{old}/.'", "found a directory name")
    _fails(capsys, ["score", "--tokens", "20", "--out", ""], "--out ''", "found an empty string")
    assert old.read_bytes() == b"old logits" and [p.name for p in tmp_path.iterdir()] == ["l.pt"]


@pytest.mark.slow
def test_generate_escapes_control_bytes_and_says_the_tiny_text_is_noise():
    """The tiny model's random weights emit any byte: an ESC sequence or a bell went to the terminal raw (issue 40)."""
    from dsv4_model.__main__ import printable
    assert printable("a\x1b[2Jb\x07c\rd\x7f\x9be\tf\ng") == "a\\x1b[2Jb\\x07c\\x0dd\\x7f\\x9be\tf\ng"
    r = _run([b"generate", b"--prompt", b"hi", b"--max-new-tokens", b"40", b"--seed", b"0"], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert not any(b < 0x20 and b not in (0x09, 0x0a) or b == 0x7f for b in r.stdout), r.stdout
    assert b"the tiny checkpoint has random weights: its text is noise" in r.stderr
