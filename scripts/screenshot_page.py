#!/usr/bin/env python3
"""Screenshot the service's dispatch-map page in headless Chromium (to look at it, or in a test).

    python scripts/screenshot_page.py --db sqlite:///path/tuning.sqlite --out page.png
    python scripts/screenshot_page.py --url http://127.0.0.1:8000/?gpu=h100 --out page.png

With ``--db`` the script serves that database itself on a free 127.0.0.1 port for the length of the
shot; with ``--url`` it shoots a server already running (loopback only). Chromium runs with no
network beyond the page, no GPU and a throw-away profile; the run is capped at ``--timeout`` seconds.
Needs a ``chromium`` binary (Debian: ``apt-get install chromium``).
"""
from __future__ import annotations

import argparse
import logging
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from urllib.parse import urlparse

log = logging.getLogger("screenshot_page")

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def find_browser() -> str | None:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def take_screenshot(url: str, out: Path, window: tuple[int, int] = (1400, 2000), timeout_s: float = 90.0) -> Path:
    """Load ``url`` in headless Chromium and write a PNG of the window to ``out``."""
    if urlparse(url).hostname not in LOOPBACK_HOSTS:
        raise ValueError(f"only pages on this machine are shot (127.0.0.1, localhost), not {url}")
    browser = find_browser()
    if browser is None:
        raise FileNotFoundError("no chromium binary on PATH (apt-get install chromium)")
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={out}",
            f"--window-size={window[0]},{window[1]}", url,
        ]
        completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if not out.exists() or out.stat().st_size == 0:
        raise RuntimeError(f"chromium wrote no screenshot (exit {completed.returncode}): {completed.stderr[-2000:]}")
    log.info("wrote %s (%d bytes)", out, out.stat().st_size)
    return out


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and the RGB bytes of each row of an 8-bit, non-interlaced RGB or RGBA PNG (what
    Chromium writes), with no imaging library: enough for a test to read the colours drawn."""
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    offset, idat, header = 8, b"", None
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        body = data[offset + 8:offset + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        offset += 12 + length
    if header is None:
        raise ValueError(f"{path} has no IHDR chunk")
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or colour_type not in (2, 6) or interlace:
        raise ValueError(f"{path}: only 8-bit non-interlaced RGB/RGBA PNGs are read (got depth {depth}, "
                         f"colour type {colour_type}, interlace {interlace})")
    channels = 3 if colour_type == 2 else 4
    stride = width * channels
    raw = zlib.decompress(idat)
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                estimate = left + up - corner
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        previous = line
        rows.append(bytes(line) if channels == 3 else bytes(b for j, b in enumerate(line) if j % 4 != 3))
    return width, height, rows


def _serve_and_shoot(database_url: str, path: str, out: Path, window: tuple[int, int], timeout_s: float) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import socket
    import threading
    import time

    import uvicorn

    from service.app import create_app
    from service.config import Settings

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(Settings(database_url=database_url)), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        return take_screenshot(f"http://127.0.0.1:{port}{path}", out, window, timeout_s)
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help="page of a running server on this machine")
    source.add_argument("--db", help="tuning database to serve for the shot (SQLAlchemy URL or path)")
    parser.add_argument("--path", default="/", help="with --db: the page path and query, e.g. '/?gpu=h100'")
    parser.add_argument("--out", type=Path, default=Path("page.png"))
    parser.add_argument("--window", default="1400,2000", help="width,height in pixels")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds before chromium is given up on")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    width, height = (int(part) for part in args.window.split(","))
    if args.url:
        take_screenshot(args.url, args.out, (width, height), args.timeout)
    else:
        _serve_and_shoot(args.db, args.path, args.out, (width, height), args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
