"""Fixtures for the browser tests: a JupyterLab server on 127.0.0.1 and headless Chromium driven
by Playwright. Every missing piece skips the tests with the reason."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from system_tools import require

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


def chromium_path() -> str | None:
    """``TERRA_CHROMIUM``, else Debian's ``/usr/bin/chromium``, else ``chromium`` on PATH."""
    for candidate in (os.environ.get("TERRA_CHROMIUM"), "/usr/bin/chromium"):
        if candidate and Path(candidate).exists():
            return candidate
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _missing() -> str | None:
    for module, install in (
        ("playwright", "pip install playwright"),
        ("jupyterlab", "pip install jupyterlab"),
        ("anywidget", "pip install anywidget"),
        ("tensorflow", "pip install tensorflow-cpu"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed ({install})"
    if chromium_path() is None:
        return "Chromium is not installed (apt-get install chromium, or set TERRA_CHROMIUM)"
    return None


def _require() -> None:
    """Skip when a piece is missing, except in CI (see ``system_tools``)."""
    require(_missing())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"JupyterLab did not answer at {url} within {timeout:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    """End the server we started and its kernels (its own process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory) -> Path:
    """The folder JupyterLab serves: copies of this folder's notebooks, the teaching notebook
    and the quickstart (the server writes to its copies only)."""
    _require()
    root = tmp_path_factory.mktemp("lab")
    for nb in [*Path(__file__).parent.glob("*.ipynb"), ROOT / "notebooks" / "live_views.ipynb",
               ROOT / "notebooks" / "quickstart.ipynb"]:
        shutil.copy(nb, root / nb.name)
    return root


@pytest.fixture(scope="session")
def lab(lab_root):
    """A JupyterLab server on 127.0.0.1 serving ``lab_root``; its URL."""
    root = lab_root
    settings = root / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    notebook = root / "settings" / "@jupyterlab" / "notebook-extension"
    notebook.mkdir(parents=True)  # every cell in the DOM: the tests look at all outputs
    (notebook / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port = _free_port()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    # the checkout's server configuration (what installing terra-nb puts next to the server):
    # the extension that saves notebooks with terra-nb's views as pictures
    config = os.pathsep.join(
        p for p in (str(ROOT / "jupyter-config"), os.environ.get("JUPYTER_CONFIG_PATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "3",
           "JUPYTER_CONFIG_PATH": config}
    args = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True", "--LabApp.extension_manager=readonly",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--LabApp.user_settings_dir={root / 'settings'}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")
    log = open(root / "jupyterlab.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        args, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/api/status", proc, timeout=60)
        yield url
    finally:
        _stop(proc)
        log.close()
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(root / "jupyterlab.log", ARTIFACTS / "jupyterlab.log")


@pytest.fixture(scope="session")
def browser():
    _require()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A page that records page errors (``page.terra_errors``)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.terra_errors = errors
    yield page
    context.close()
