"""How the local stack starts one component: a crash in kwok's known start-up race is retried,
any other exit fails at once with the component's own words.

The components are small Python programs standing in for a binary: one that crashes the way
kwok v0.8.0 does (a Go "concurrent map writes" in easycel) on its first start and is healthy on
the next, one that fails that way every time, and one that fails for another reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import pytest

from tokenfleet.devstack import controlplane, processes
from tokenfleet.devstack.stack import Options, Stack, StackError

KWOK_RACE = """fatal error: concurrent map writes

goroutine 30 [running]:
internal/runtime/maps.fatal({0x26ef50d?, 0x18079b49d350?})
github.com/wzshiming/easycel.getTrait({0x2896c98, 0x25ff300})
sigs.k8s.io/kwok/pkg/utils/cel.NewEnvironment(...)
"""

#: Crashes like kwok while the marker file has fewer than ``healthy_after`` lines, else serves
#: /healthz; each start appends a line to the marker, so the test counts starts.
PROGRAM = """
import http.server, pathlib, sys
marker, port, healthy_after, crash_text = sys.argv[1:5]
marker, port, healthy_after = pathlib.Path(marker), int(port), int(healthy_after)
with marker.open("a") as f:
    f.write("start\\n")
if len(marker.read_text().splitlines()) <= healthy_after:
    sys.stderr.write(crash_text)
    sys.exit(2)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


async def start(tmp_path: Path, *, name: str, crashes: int, crash_text: str) -> tuple[Stack, int]:
    """Start a stand-in component through the stack; return the stack and how often it ran."""
    program = tmp_path / "component.py"
    program.write_text(PROGRAM)
    marker = tmp_path / "starts"
    port = processes.free_port()
    stack = Stack(Options(state_dir=tmp_path / "state", bin_dir=tmp_path))
    stack.files.logs.mkdir(parents=True)
    component = controlplane.Component(
        name=name,
        argv=[sys.executable, str(program), str(marker), str(port), str(crashes), crash_text],
        health_url=f"http://127.0.0.1:{port}/healthz",
    )
    try:
        async with aiohttp.ClientSession() as session:
            await stack._start(component, "token", session)
    finally:
        starts = len(marker.read_text().splitlines()) if marker.exists() else 0
    return stack, starts


async def test_kwok_that_crashes_in_its_start_up_race_is_started_again(tmp_path: Path) -> None:
    stack, starts = await start(tmp_path, name="kwok", crashes=1, crash_text=KWOK_RACE)
    try:
        assert starts == 2
        assert [c.name for c in stack._children] == ["kwok"]  # the crashed one is not tracked
        assert stack._children[0].alive()
    finally:
        stack._stop_children()


async def test_kwok_that_keeps_crashing_fails_after_three_starts(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="kwok exited during start-up") as failure:
        await start(tmp_path, name="kwok", crashes=99, crash_text=KWOK_RACE)
    assert "concurrent map writes" in str(failure.value)
    assert len((tmp_path / "starts").read_text().splitlines()) == 3


@pytest.mark.parametrize(
    ("name", "crash_text"),
    [
        ("kwok", "error: unable to load kubeconfig\n"),  # kwok, but not the race
        ("kube-scheduler", KWOK_RACE),  # the race's words from another component
    ],
)
async def test_any_other_start_up_exit_fails_at_once(
    tmp_path: Path, name: str, crash_text: str
) -> None:
    with pytest.raises(StackError, match=f"{name} exited during start-up") as failure:
        await start(tmp_path, name=name, crashes=99, crash_text=crash_text)
    assert crash_text.splitlines()[0] in str(failure.value)
    assert len((tmp_path / "starts").read_text().splitlines()) == 1
